# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""The lease: one implementation of the protocol for threads and asyncio.

LeaseCore decides what to send and what an answer means: queueing and the
heartbeats of a wait, lockq_await slices, a dropped wait queued again, the
retries of a release or withdrawal, renewals, the local deadline, the
check of a "lost" notice, re-entrancy.  It does no I/O.  Each step that
needs the server or the clock is a generator that yields an effect:

* Run(name, params, bound): run statement name (_protocol.statements) and
  send its first column back; throw its error in instead.
* Sleep(until): wait until the monotonic time until, or a notice for the
  lease (its _wake event), or a cancel; send nothing back.
* Pause(until): wait until then, whatever comes (between retries).
* Shielded(gen): run the step gen to its end even if the caller is
  cancelled meanwhile (a withdrawal after a cancel); send its result back.

lockq._sync (lockq.Lease) and lockq.aio (lockq.aio.Lease) each drive these
generators with their own I/O (_drive: blocking calls, or awaits) and say
how a lease is kept while held (the hooks at the end of LeaseCore: a
process-wide keeper and watchdog thread, or a task and a loop timer).  So
a change of the protocol is made once, and both clients get it.
"""

from __future__ import annotations

import contextlib
from time import monotonic
from typing import Any, Generator, NamedTuple, Optional, Tuple

import psycopg
from psycopg import errors

from ._protocol import (AWAIT_SLICE, RETRY_DELAY, WITHDRAW_TIMEOUT, LockCancelled, LockLost,
                        LockTimeout, check_duration, check_name, log, new_owner, wait_bound)


class Run(NamedTuple):
    name: str
    params: Tuple[Any, ...]
    bound: float


class Sleep(NamedTuple):
    until: float


class Pause(NamedTuple):
    until: float


class Shielded(NamedTuple):
    gen: Generator


Step = Generator[Any, Any, Any]     # a generator of effects


def drive(gen: Step, perform) -> Any:
    """Runs gen to its end with perform(effect) -> result, synchronously:
    what lockq._sync does.  (lockq.aio has the same loop with awaits.)  An
    error of perform is thrown into gen, which may handle it."""
    result, error = None, None
    while True:
        try:
            effect = gen.send(result) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            result = perform(effect)
        except BaseException as e:  # noqa: B902 -- gen decides (a cancel withdraws)
            error = e


# _renewed's verdicts
_MOVED, _ENDED, _LATE = range(3)


class LeaseCore:
    """What a lease is and does, without I/O (see the module's docstring).

    Fields shared between a lease's threads (a worker, the watchdog, the
    caller) are read and written under self._locked(): _deadline, _done,
    _refs and lost's flag.  token, _ttl and _verify are set by one thread
    at a time (the caller while it waits or extends, the keeper's worker
    while it holds)."""

    token: Optional[int]
    owner: str
    lock_id: str

    def __init__(self, lock_id, *, ttl, timeout, heartbeat, owner, auto_renew, io_timeout,
                 cancel=None):
        check_name("lock id", lock_id)
        self.owner = new_owner() if owner is None else owner
        check_name("owner", self.owner)
        self.lock_id = lock_id
        self.token = None
        self._root = self               # the lease that holds the grant
        self._refs = 0                  # (root) leases in the grant's blocks
        self._exited = False            # this lease was released or forgotten
        self._forgotten = False         # forget() was called
        self._ttl = check_duration("ttl", ttl)
        self._heartbeat = check_duration("heartbeat", heartbeat, 0.1)
        self._timeout = None if timeout is None else check_duration("timeout", timeout, 0)
        self._auto_renew = auto_renew
        self._cancel = cancel           # an Event that ends the wait (threads)
        self._io_timeout = check_duration("io_timeout", io_timeout, 0.1)
        self._deadline = 0.0
        self._done = False
        self._verify = False            # a "lost" notice: ask the server
        self._verify_after = 0.0        # (not before then: a check failed)

    # --- state -----------------------------------------------------------

    def _locked(self):
        """The lock of the fields above (a no-op on one event loop)."""
        return contextlib.nullcontext()

    @property
    def held(self) -> bool:
        """The lease is valid: taken, not released, not lost, and its local
        deadline is ahead."""
        root = self._root
        with root._locked():
            return (self.token is not None and not self._exited and not root._done
                    and not root.lost.is_set())

    def _past_deadline(self):
        """The grant is taken and not released, and its local deadline has
        passed (lost.is_set() asks this, with or without the lock)."""
        return self.token is not None and not self._done and monotonic() >= self._deadline

    @property
    def remaining(self) -> float:
        """Seconds until the lease's local deadline; 0.0 once not held."""
        if not self.held:
            return 0.0
        return max(0.0, self._root._deadline - monotonic())

    def check(self) -> None:
        """Raises LockLost unless the lease is held."""
        if not self.held:
            raise LockLost("the lease on %r is not held" % self.lock_id)

    def _join(self):
        """(From the hub.)  Another lease of this owner joins this one's
        grant if it is held: True, and it counts.  False while waiting."""
        with self._locked():
            if self.token is None or self._done or self._refs == 0:
                return False
            self._refs += 1
            return True

    # --- the steps -------------------------------------------------------

    def _g_acquire(self):
        """Takes the lock: joins this owner's grant, tries once (timeout 0)
        or queues and waits.  Returns self."""
        if self.token is not None:
            raise RuntimeError("a Lease is acquired once")
        hub = self._src.hub
        root = hub.register(self)
        if root is not None:
            # re-entrant: the same owner's grant, which root renews
            self._root = root
            self.lost = root.lost
            self.token = root.token
            return self
        try:
            token, sent = yield from (self._g_try() if self._timeout == 0 else self._g_wait())
        except BaseException:
            hub.unregister(self)
            raise
        self.token = token
        with self._locked():
            self._refs = 1
            self._deadline = sent + self._ttl
        self._start_keeping(self._deadline - self._ttl * 2 / 3 if self._auto_renew
                            else float("inf"))
        return self

    def _g_release(self):
        """Releases the lock; True if the lease was still held until then.
        (A re-entrant lease only leaves: the last one releases.)"""
        if self.token is None or self._exited:
            return False
        held = self.held
        root = self._leave()
        if root is None:
            return held
        try:
            released = yield from root._g_run_retrying(
                "release", root.lock_id, root.owner, root.token,
                bound=root._io_timeout if held else WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("releasing %r (token %d) failed: %s; the lease ends by itself",
                        root.lock_id, root.token, e)
            raise
        return held and released

    def forget(self) -> None:
        """Stops renewing and watching the lease without releasing it: the
        grant stays on the server until its lease ends or its owner releases
        it (lockq_release with owner and token), say in another process that
        takes the work over.  Leaving the block afterwards releases nothing
        and raises nothing.  (A re-entrant lease only leaves.)"""
        if self.token is None or self._exited:
            return
        self._forgotten = True
        self._leave()

    def _leave(self):
        """This lease leaves the grant's blocks.  The last one to leave (the
        root) stops its renewals and deadline and is returned; None while
        other blocks still use the grant."""
        self._exited = True
        root = self._root
        with root._locked():
            root._refs -= 1
            if root._refs > 0:
                return None
            root._done = True
        root._stop_keeping()
        root._src.hub.unregister(root)
        return root

    def _g_extend(self, ttl):
        """Renews the lease now for ttl seconds (default: its ttl) from when
        the request is sent, and makes ttl its ttl for later renewals.
        LockLost if it is not held or the server refuses; the statement's
        error if the server did not answer (the lease may still be held)."""
        root = self._root
        ttl = root._ttl if ttl is None else check_duration("ttl", ttl)
        self.check()
        if not (yield from root._g_renew_for(ttl)):
            raise LockLost("the lease on %r was lost" % self.lock_id)
        root._ttl = ttl

    # --- waiting ---------------------------------------------------------

    def _g_run(self, name, *params, bound=None):
        return (yield Run(name, params, self._io_timeout if bound is None else bound))

    def _g_run_retrying(self, name, *params, bound):
        """_g_run for the statements that end something (release,
        withdrawal): through a pool, a connection that fails (stale after a
        switchover, broken) is followed by another, until bound; the
        statements are idempotent for their owner."""
        end = monotonic() + bound
        while True:
            try:
                return (yield from self._g_run(name, *params, bound=max(0.1, end - monotonic())))
            except psycopg.OperationalError:
                if not self._src.pooled or end - monotonic() <= RETRY_DELAY:
                    raise
            yield Pause(monotonic() + RETRY_DELAY)

    def _g_try(self):
        sent = monotonic()
        token = yield from self._g_run("try", self.lock_id, self.owner, self._ttl)
        if token is None:
            raise LockTimeout("lock %r is not available" % self.lock_id)
        return token, sent

    def _g_enqueue(self, bound):
        return (yield from self._g_run("enqueue", self.lock_id, self.owner, self._ttl,
                                       self._src.hub.channel, self._heartbeat, bound=bound))

    def _g_poll(self, bound):
        """One heartbeat: the token once granted, else None.  A wait the
        server dropped (55000: missed heartbeats, or a grant not picked up
        in time) queues again, at the back."""
        self._wake.clear()
        try:
            return (yield from self._g_run("heartbeat", self.lock_id, self.owner, bound=bound))
        except errors.ObjectNotInPrerequisiteState:
            return (yield from self._g_enqueue(bound))

    def _g_await(self, give_up, bound):
        """One lockq_await of at most AWAIT_SLICE (and the rest of the
        timeout): the backend wakes at the grant and answers with the token,
        with no NOTIFY, which a transaction pooler would not pass on; NULL
        when the slice ends (it counts as a heartbeat).  Used when the source
        says so (ConnAwaits, PoolAwaits)."""
        self._wake.clear()
        span = AWAIT_SLICE if give_up is None else max(0.001, min(AWAIT_SLICE, give_up - monotonic()))
        try:
            return (yield from self._g_run("await", self.lock_id, self.owner, span,
                                           bound=bound + span))
        except errors.ObjectNotInPrerequisiteState:
            return (yield from self._g_enqueue(bound))

    def _g_wait(self):
        """Queues and waits; returns (token, when the granting request was
        sent).  A statement that fails on the connection (it broke, or
        stalled and was broken) is tried again, on a new pooled connection
        if there is one, and the wait keeps its place; once the server has
        been unreachable for the heartbeat interval (it drops the wait
        then), the error is raised.  Any way out but the grant (timeout,
        cancel, an error, a cancelled task) withdraws the wait."""
        give_up = None if self._timeout is None else monotonic() + self._timeout
        queued = False
        sent = reached = monotonic()

        def pause_until(t):     # a sleep never outlasts the timeout
            return Sleep(t if give_up is None else min(t, give_up))

        try:
            while True:
                now = monotonic()
                if self._cancel is not None and self._cancel.is_set():
                    raise LockCancelled("the wait for lock %r was cancelled" % self.lock_id)
                if give_up is not None and now >= give_up:
                    raise LockTimeout("lock %r was not granted within %g s"
                                      % (self.lock_id, self._timeout))
                awaiting = queued and self._src.awaiting(self)
                if (not queued or awaiting or self._wake.is_set()
                        or now >= sent + self._heartbeat / 3):
                    sent = monotonic()
                    bound = wait_bound(self._io_timeout, self._heartbeat, give_up, sent)
                    try:
                        if awaiting:
                            token = yield from self._g_await(give_up, bound)
                        elif queued:
                            token = yield from self._g_poll(bound)
                        else:
                            token = yield from self._g_enqueue(bound)
                    except psycopg.OperationalError:
                        if monotonic() - reached > self._heartbeat:
                            raise
                        yield pause_until(monotonic() + RETRY_DELAY)
                        continue
                    queued = True
                    reached = sent
                    if token is not None:
                        return token, sent
                    continue
                yield pause_until(sent + self._heartbeat / 3)
        except BaseException:
            yield Shielded(self._g_withdraw())
            raise

    def _g_withdraw(self):
        """Leaves the queue, releasing a grant that raced with us.  If the
        server cannot be told, it drops us after the heartbeat interval."""
        try:
            yield from self._g_run_retrying("cancel", self.lock_id, self.owner,
                                            bound=WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("withdrawing the wait for %r failed: %s; the server drops it within "
                        "%g s", self.lock_id, e, self._heartbeat)

    # --- holding ---------------------------------------------------------

    def _notice(self, notice):
        """From the hub: a notice about this lease (any thread)."""
        if notice.event == "lost":
            self._verify = True
            self._nudge_keeper()
        self._wake.set()

    def _next_check(self, due):
        """When the keeper should next run _g_step: the renewal due then, or
        a lost notice to check."""
        return min(due, self._verify_after) if self._verify else due

    def _g_step(self, due):
        """What the keeper runs while the lease is held: checks a lost
        notice, or renews if due.  Returns when the next renewal is due."""
        if self._verify and monotonic() >= self._verify_after:
            self._verify = False
            yield from self._g_check_holds()
            return due
        if self._auto_renew and monotonic() >= due:
            return (yield from self._g_renew())
        return due

    def _g_check_holds(self):
        try:
            if not (yield from self._g_run("holds", self.lock_id, self.token)):
                self._lose("a lost notice, confirmed by lockq_holds")
        except (psycopg.Error, OSError):
            # ask again soon (the next renewal asks too)
            self._verify_after = monotonic() + min(self._ttl / 10, 1.0)
            self._verify = True

    def _g_renew(self):
        """Renews once; returns when to renew next.  A failed attempt is
        tried again soon: the local deadline decides when the lease is lost."""
        sent = monotonic()
        try:
            yield from self._g_renew_for(self._ttl)
        except (psycopg.Error, OSError) as e:
            log.warning("renewing the lease on %r (token %d) failed: %s; trying again",
                        self.lock_id, self.token, e)
            return monotonic() + min(self._ttl / 10, 1.0)
        return sent + self._ttl / 3

    def _g_renew_for(self, ttl):
        """One lockq_renew for ttl (for _g_renew and extend()): True if the
        local deadline moved to ttl from when it was sent, or the lease was
        released meanwhile; False if the server refused (the lease is lost)
        or it came after the lease was given up (then the grant is
        released).  Raises the statement's error."""
        sent = monotonic()
        renewed = yield from self._g_run(
            "renew", self.lock_id, self.owner, self.token, ttl,
            bound=max(0.1, min(self._io_timeout, self._deadline - sent)))
        if not renewed:
            self._lose("the server refused its renewal")
            return False
        verdict = self._renewed(sent + ttl)
        if verdict == _LATE:
            try:                        # renewed after we had given it up
                yield from self._g_run("release", self.lock_id, self.owner, self.token)
            except (psycopg.Error, OSError):
                pass
            return False
        return True

    def _renewed(self, deadline):
        """Moves the local deadline after a renewal: _MOVED.  _LATE when the
        lease was already counted lost, so that the renewal must be undone;
        _ENDED once release() has begun (its own lockq_release ends the
        grant, and a second release here would make it report the lease
        lost)."""
        with self._locked():
            if self._done:
                return _ENDED
            if self.lost.is_set():
                return _LATE
            self._deadline = deadline
        self._deadline_moved()
        return _MOVED

    def _lose(self, why):
        """The lease is lost (the server said so): lost is set, once."""
        with self._locked():
            first = not self._done and not self.lost.flagged()
            if not self._done:
                self.lost.set()
        self._stop_watching()
        if first:
            log.warning("the lease on %r (token %d) was lost: %s", self.lock_id, self.token, why)

    def _expire(self):
        """The local deadline passed (the watchdog's or the loop's timer)."""
        with self._locked():
            first = (not self._done and monotonic() >= self._deadline
                     and not self.lost.flagged())
            if first:
                self.lost.set()
        self._nudge_keeper()
        if first:
            log.warning("the lease on %r (token %d) was lost: no renewal confirmed before "
                        "its local deadline", self.lock_id, self.token)

    # --- how the client keeps a held lease (threads or a task) -----------

    def _start_keeping(self, due):
        """The lease is granted: renew it (first when due) and watch its
        deadline."""
        raise NotImplementedError

    def _stop_keeping(self):
        """The lease was released or forgotten: stop both."""
        raise NotImplementedError

    def _stop_watching(self):
        """The lease is lost: its deadline needs no watching."""
        raise NotImplementedError

    def _deadline_moved(self):
        """_deadline changed (maybe earlier: extend with a shorter ttl)."""
        raise NotImplementedError

    def _nudge_keeper(self):
        """Something for the keeper to look at now (a notice, an end)."""
        raise NotImplementedError


class LostFlag:
    """The methods of lease.lost (a threading or an asyncio Event) beyond
    the Event's: is_set() also consults the clock, so that a check never
    trusts a timer that has not had its turn yet: past the local deadline,
    the lease is lost.  flagged() is the Event's own flag."""

    def __init__(self, lease):
        super().__init__()
        self._lease = lease

    def is_set(self):
        return self.flagged() or self._lease._past_deadline()

    def flagged(self):
        return super().is_set()

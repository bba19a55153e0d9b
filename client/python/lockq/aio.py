# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""lockq from asyncio: ``async with lockq.aio.lock(conn_or_pool, "name") as lease``.

The same protocol as the threaded client (lockq._sync: client-side wait
over LISTEN/NOTIFY with heartbeats, renewals every ttl/3, a local deadline
on the monotonic clock), with tasks instead of threads:

* the lease's renewal task renews it and checks ``lost`` notices with
  lockq_holds;
* its local deadline is a loop timer (call_later), which no statement can
  hold up: ``lease.lost`` (an asyncio.Event) is set when it passes without
  a confirmed renewal;
* cancelling the task that waits (task.cancel(), asyncio.timeout) leaves
  the queue with lockq_cancel and raises CancelledError as usual.

Sources: an AsyncConnection in autocommit mode (every statement runs on
it; a lease reads its notifications while it is idle, every 50 ms while
waiting and every 0.5 s while holding, taking the connection's lock only
for that read, never for a wait), or an AsyncConnectionPool (each statement
borrows a connection; one listener connection per pool, outside its size,
reads the notices of all leases).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Literal, Optional, Type, Union
import weakref
from time import monotonic

import psycopg
from psycopg import errors, sql

from ._protocol import (AWAIT_SLICE, ConnAwaits, PoolAwaits, DEFAULT_HEARTBEAT, DEFAULT_IO_TIMEOUT, DEFAULT_TTL,
                        RETRY_DELAY, SCHEMA_QUERY, WITHDRAW_TIMEOUT, LeaseTable, after_release,
                        break_socket, LockLost, LockTimeout, check_duration, check_name,
                        log, new_owner, parse_notice, schema_of, stalled, statements,
                        wait_bound)

try:
    from psycopg_pool import AsyncConnectionPool
except ImportError:             # the pool package is optional
    AsyncConnectionPool = None

_RECONNECT_DELAY = 0.5
_PROBE_TIMEOUT = 5.0            # the longest a pool's probe may take
_LISTEN_POLL = 1.0              # how often the pool listener looks at pool.closed
_WAIT_POLL = 0.05               # how often a waiting lease reads its connection
_HOLD_POLL = 0.5                # and a held one, for "lost" notices

__all__ = ["lock", "Lease"]


async def _schema(conn):
    """The schema of lockq's functions, and whether lockq_await is there."""
    return schema_of(await (await conn.execute(SCHEMA_QUERY)).fetchone())


async def _listen(conn, channel):
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


async def _within(fut, timeout):
    """Waits up to timeout seconds for fut (a task or future) and says
    whether it is done; fut is left running.  asyncio.wait_for is not used
    anywhere here: before Python 3.12 it returns fut's result when a cancel
    comes just as fut finishes, and the cancel is lost (a cancelled wait
    then went on waiting for ever).  asyncio.wait always raises it."""
    done, _ = await asyncio.wait({fut}, timeout=timeout)
    return bool(done)


async def _readable(conn, timeout):
    """Waits up to timeout seconds for input on conn's socket."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    fd = conn.fileno()
    loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await _within(fut, timeout)
    finally:
        loop.remove_reader(fd)


async def _dispatch_notices(conn, hub):
    """Hands every notice that has come on conn to hub, without waiting.
    All of them: psycopg 3.1's notifies() generator reads them in batches,
    and one closed after its first (to wait with a timeout) dropped the rest
    of its batch: a "lost" notice that came with another was never seen."""
    async with conn.lock:
        pgconn = conn.pgconn
        pgconn.consume_input()
        while (n := pgconn.notifies()) is not None:
            hub.dispatch(n.relname.decode(), n.extra)


async def _bounded(conn, stmt, params, bound):
    """Runs stmt on conn and returns the first column of its row, in a task
    of its own that a cancel of the caller does not interrupt: psycopg
    cancelled in the middle of a statement leaves the connection unusable
    ("another command is already in progress"), and what the statement did
    must be known (a wait that was granted is then withdrawn).  So a cancel
    waits for the statement, then is raised.  If no answer comes within
    bound seconds, the connection is taken as stalled: its socket is shut
    down and the statement fails at once (OperationalError); a pool then
    discards it.  Never prepared (behind a transaction pooler a prepared
    statement lives on one server connection, and the next may lack it)."""
    async def go():
        cur = await conn.execute(stmt, params, prepare=False)
        return (await cur.fetchone())[0]

    loop = asyncio.get_running_loop()
    end = loop.time() + bound
    task = loop.create_task(go())
    cancelled = None
    while True:
        try:
            finished = await _within(task, max(0.0, end - loop.time()))
        except asyncio.CancelledError as e:
            if task.done():
                raise
            cancelled = e           # the statement finishes first
            continue
        if finished:
            break
        break_socket(conn)
        await asyncio.gather(task, return_exceptions=True)
        if cancelled is not None:
            raise cancelled
        raise stalled(bound) from (task.exception() if not task.cancelled() else None)
    if cancelled is not None:
        raise cancelled
    return task.result()        # or the statement's own error


class _Hub(LeaseTable):
    """The leases waiting or held through one source and their channel
    (LeaseTable)."""

    def dispatch(self, channel, payload):
        if channel == self.channel and self.saw_probe(payload):
            return
        notice = parse_notice(payload) if channel == self.channel else None
        lease = notice and self.lease_for(notice)
        if lease is not None:
            lease._notice(notice)

    def wake_all(self):
        for lease in self.leases():
            lease._wake.set()


class _ConnSource(ConnAwaits):
    """An AsyncConnection of the caller's, used for everything; its notices
    are read by the statements and by the leases' idle polls."""

    polled = True
    pooled = False

    @classmethod
    async def create(cls, conn):
        if not conn.autocommit:
            raise ValueError("lockq needs a connection in autocommit mode (its LISTEN "
                             "must commit), or an AsyncConnectionPool")
        self = cls()
        # weak: a connection the caller drops is closed as if lockq had
        # never seen it
        self._conn = weakref.ref(conn)
        self.hub = hub = _Hub()
        schema, self.awaits = await _schema(conn)
        self.stmts = statements(schema)
        conn.add_notify_handler(lambda n: hub.dispatch(n.channel, n.payload))
        await _listen(conn, self.hub.channel)
        return self

    def _get(self):
        conn = self._conn()
        if conn is None:
            raise psycopg.OperationalError("the connection lockq was used with is gone")
        return conn

    async def run(self, name, params, bound):
        return await _bounded(self._get(), self.stmts[name], params, bound)

    async def drain(self):
        """Hands the notices that have come to the hub, without waiting."""
        await _dispatch_notices(self._get(), self.hub)


class _PoolSource(PoolAwaits):
    """An AsyncConnectionPool: statements on borrowed connections, notices
    on a listener connection of our own (a task)."""

    polled = False
    pooled = True               # a failed statement may succeed on another connection

    @classmethod
    async def create(cls, pool):
        self = cls()
        self._pool = weakref.ref(pool)
        self.hub = _Hub()
        async with pool.connection() as conn:
            schema, self.awaits = await _schema(conn)
            self.stmts = statements(schema)
        self._conn = await self._connect(pool)
        self._task = asyncio.get_running_loop().create_task(self._listen_loop())
        return self

    async def _connect(self, pool):
        conn = await psycopg.AsyncConnection.connect(
            pool.conninfo, **{**pool.kwargs, "autocommit": True})
        await _listen(conn, self.hub.channel)
        return conn

    async def run(self, name, params, bound):
        pool = self._pool()
        if pool is None:
            raise psycopg.OperationalError("the pool lockq was used with is gone")
        async with pool.connection(timeout=bound) as conn:
            return await _bounded(conn, self.stmts[name], params, bound)

    async def drain(self):
        """Nothing to do: the listener hands notices over as they come."""

    async def _probe(self, pool):
        """Sends the hub's probe through the pool (its answer: notices
        reach the listener); a failure leaves the waits in lockq_await."""
        try:
            async with pool.connection(timeout=_PROBE_TIMEOUT) as conn:
                await _bounded(conn, self.stmts["probe"], (self.hub.channel, self.hub.new_probe()),
                               _PROBE_TIMEOUT)
        except (psycopg.Error, OSError):    # PoolTimeout is an OperationalError
            pass

    async def _listen_loop(self):
        """Hands notices to the hub until the pool closes; reconnects (and
        wakes every waiter, whose notices may have been lost), and probes
        after each LISTEN."""
        probe = True
        try:
            while True:
                pool = self._pool()
                if pool is None or pool.closed:
                    break
                try:
                    if self._conn is None:
                        self._conn = await self._connect(pool)
                        self.hub.wake_all()
                        probe = True
                    if probe:
                        probe = False
                        await self._probe(pool)
                    del pool
                    await _readable(self._conn, _LISTEN_POLL)
                    await _dispatch_notices(self._conn, self.hub)
                except (psycopg.Error, OSError) as e:
                    if self._conn is not None:
                        log.info("the pool's listener connection failed (%s): reconnecting", e)
                    await self._close()
                    await asyncio.sleep(_RECONNECT_DELAY)
        finally:
            await self._close()

    async def _close(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


_sources = weakref.WeakKeyDictionary()


async def _source(obj):
    """The (cached) source for a connection or pool.  The dictionary holds
    the future that makes it, so concurrent first uses share one."""
    fut = _sources.get(obj)
    if fut is None:
        if isinstance(obj, psycopg.AsyncConnection):
            make = _ConnSource.create(obj)
        elif AsyncConnectionPool is not None and isinstance(obj, AsyncConnectionPool):
            make = _PoolSource.create(obj)
        else:
            raise TypeError("lockq.aio.lock needs a psycopg.AsyncConnection or a "
                            "psycopg_pool.AsyncConnectionPool, not %r" % type(obj).__name__)
        fut = _sources[obj] = asyncio.ensure_future(make)
    try:
        return await asyncio.shield(fut)
    except Exception:
        if _sources.get(obj) is fut:
            del _sources[obj]
        raise


class _Lost(asyncio.Event):
    """lease.lost: set when the lease is lost.  is_set() also consults the
    clock: a loop that was blocked past the deadline has not run the timer
    that sets it, and the lease is lost all the same."""

    def __init__(self, lease):
        super().__init__()
        self._lease = lease

    def is_set(self):
        return super().is_set() or self._lease._past_deadline()


def lock(source: Union[psycopg.AsyncConnection[Any], "AsyncConnectionPool"], lock_id: str, *,
         ttl: float = DEFAULT_TTL, timeout: Optional[float] = None,
         heartbeat: float = DEFAULT_HEARTBEAT, owner: Optional[str] = None,
         auto_renew: bool = True, io_timeout: float = DEFAULT_IO_TIMEOUT) -> Lease:
    """A lease on lock_id, taken when the async with-block is entered.
    Arguments as lockq.lock (re-entrancy too); cancel the waiting task to
    cancel the wait."""
    return Lease(source, lock_id, ttl=ttl, timeout=timeout, heartbeat=heartbeat,
                 owner=owner, auto_renew=auto_renew, io_timeout=io_timeout)


class Lease:
    """A lease on one lock: an async context manager that acquires on entry
    and releases on exit (also when the block raises or is cancelled).
    Exiting normally after the lease was lost raises LockLost.

    token: the fencing token (an int).  lost: an asyncio.Event set when the
    lease is lost (is_set() is true once the local deadline has passed, even
    if the loop was too busy to run its timer).  held: the lease is valid."""

    token: Optional[int]
    owner: str
    lock_id: str
    lost: asyncio.Event

    def __init__(self, source: Any, lock_id: str, *, ttl: float, timeout: Optional[float],
                 heartbeat: float, owner: Optional[str], auto_renew: bool,
                 io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        check_name("lock id", lock_id)
        self.owner = new_owner() if owner is None else owner
        check_name("owner", self.owner)
        self.lock_id = lock_id
        self.token = None
        self.lost = _Lost(self)
        self._root = self               # the lease that holds the grant
        self._refs = 0                  # (root) leases in the grant's blocks
        self._exited = False            # this lease was released or forgotten
        self._forgotten = False         # forget() was called
        self._source_obj = source
        self._src = None
        self._ttl = check_duration("ttl", ttl)
        self._heartbeat = check_duration("heartbeat", heartbeat, 0.1)
        self._timeout = None if timeout is None else check_duration("timeout", timeout, 0)
        self._auto_renew = auto_renew
        self._io_timeout = check_duration("io_timeout", io_timeout, 0.1)
        self._deadline = 0.0
        self._done = False
        self._timer = None
        self._keeper = None
        self._wake = asyncio.Event()    # a notice came while waiting
        self._kick = asyncio.Event()    # wakes the renewal task
        self._verify = False            # a "lost" notice: ask the server

    async def __aenter__(self) -> Lease:
        return await self.acquire()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> Literal[False]:
        if self._forgotten:
            return False
        try:
            ok = await asyncio.shield(self.release())
        except Exception:
            if exc_type is None:
                raise
            return False        # the block's own error matters more
        return after_release(self, ok, exc_type)

    @property
    def held(self) -> bool:
        root = self._root
        return (self.token is not None and not self._exited and not root._done
                and not root.lost.is_set())

    def _past_deadline(self):
        return self.token is not None and not self._done and monotonic() >= self._deadline

    def _join(self):
        """Another lease of this owner joins this one's grant if it is held:
        True, and it counts.  False while it is waiting."""
        if self.token is None or self._done or self._refs == 0:
            return False
        self._refs += 1
        return True

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

    async def extend(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now for ttl seconds (default: its ttl), as
        lockq.Lease.extend does."""
        root = self._root
        ttl = root._ttl if ttl is None else check_duration("ttl", ttl)
        self.check()
        if not await root._renew_for(ttl):
            raise LockLost("the lease on %r was lost" % self.lock_id)
        root._ttl = ttl

    async def acquire(self) -> Lease:
        """Waits for the lock; returns self."""
        if self.token is not None:
            raise RuntimeError("a Lease is acquired once")
        self._src = await _source(self._source_obj)
        root = self._src.hub.register(self)
        if root is not None:
            # re-entrant: the same owner's grant, which root renews
            self._root = root
            self.lost = root.lost
            self.token = root.token
            return self
        try:
            token, sent = await (self._try() if self._timeout == 0 else self._wait())
        except BaseException:
            self._src.hub.unregister(self)
            raise
        self.token = token
        self._refs = 1
        self._set_deadline(sent + self._ttl)
        self._keeper = asyncio.get_running_loop().create_task(self._keep())
        return self

    async def release(self) -> bool:
        """Releases the lock; True if the lease was still held until then.
        (A re-entrant lease only leaves: the last one releases.)"""
        if self.token is None or self._exited:
            return False
        held = self.held
        self = self._leave()
        if self is None:
            return held
        try:
            released = await self._run_retrying("release", self.lock_id, self.owner, self.token,
                                                bound=self._io_timeout if held else WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("releasing %r (token %d) failed: %s; the lease ends by itself",
                        self.lock_id, self.token, e)
            raise
        return held and released

    def forget(self) -> None:
        """Stops renewing and watching the lease without releasing it, as
        lockq.Lease.forget does."""
        if self.token is None or self._exited:
            return
        self._forgotten = True
        self._leave()

    def _leave(self):
        """This lease leaves the grant's blocks; the last one (the root)
        stops its renewals and timer and is returned, else None."""
        self._exited = True
        root = self._root
        root._refs -= 1
        if root._refs > 0:
            return None
        root._done = True
        root._timer.cancel()
        root._kick.set()
        root._src.hub.unregister(root)
        return root

    # --- waiting ---------------------------------------------------------

    async def _run(self, name, *params, bound=None):
        return await self._src.run(name, params, self._io_timeout if bound is None else bound)

    async def _run_retrying(self, name, *params, bound):
        """_run for the statements that end something (release, withdrawal):
        through a pool, a connection that fails (stale after a switchover,
        broken) is followed by another, until bound; the statements are
        idempotent for their owner."""
        end = monotonic() + bound
        while True:
            try:
                return await self._run(name, *params, bound=max(0.1, end - monotonic()))
            except psycopg.OperationalError:
                if not self._src.pooled or end - monotonic() <= RETRY_DELAY:
                    raise
                await asyncio.sleep(RETRY_DELAY)

    async def _try(self):
        sent = monotonic()
        token = await self._run("try", self.lock_id, self.owner, self._ttl)
        if token is None:
            raise LockTimeout("lock %r is not available" % self.lock_id)
        return token, sent

    async def _enqueue(self, bound):
        return await self._run("enqueue", self.lock_id, self.owner, self._ttl,
                               self._src.hub.channel, self._heartbeat, bound=bound)

    async def _poll(self, bound):
        """One heartbeat: the token once granted, else None; a wait the
        server dropped (55000) queues again, at the back."""
        self._wake.clear()
        try:
            return await self._run("heartbeat", self.lock_id, self.owner, bound=bound)
        except errors.ObjectNotInPrerequisiteState:
            return await self._enqueue(bound)

    async def _await(self, give_up, bound):
        """One lockq_await of at most AWAIT_SLICE (and the rest of the
        timeout): the backend wakes at the grant and answers with the token,
        with no NOTIFY, which a transaction pooler would not pass on; NULL
        when the slice ends (it counts as a heartbeat).  Used when the source
        says so (ConnAwaits, PoolAwaits)."""
        self._wake.clear()
        span = AWAIT_SLICE if give_up is None else max(0.001, min(AWAIT_SLICE, give_up - monotonic()))
        try:
            return await self._run("await", self.lock_id, self.owner, span, bound=bound + span)
        except errors.ObjectNotInPrerequisiteState:
            return await self._enqueue(bound)

    async def _wait(self):
        """Queues and waits (see lockq._sync: a failed statement is tried
        again for up to the heartbeat interval).  A cancel, even one during
        the first enqueue, withdraws the wait."""
        give_up = None if self._timeout is None else monotonic() + self._timeout
        queued = False
        sent = reached = monotonic()
        try:
            while True:
                now = monotonic()
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
                            token = await self._await(give_up, bound)
                        else:
                            token = await (self._poll(bound) if queued else self._enqueue(bound))
                    except psycopg.OperationalError:
                        if monotonic() - reached > self._heartbeat:
                            raise
                        await self._pause(RETRY_DELAY, RETRY_DELAY)
                        continue
                    queued = True
                    reached = sent
                    if token is not None:
                        return token, sent
                    continue
                until = sent + self._heartbeat / 3
                if give_up is not None:
                    until = min(until, give_up)
                await self._pause(until - now, _WAIT_POLL)
        except BaseException:
            await asyncio.shield(self._withdraw())
            raise

    async def _pause(self, timeout, poll):
        """Waits up to timeout for a notice (self._kick or self._wake is set
        by the hub); a connection source is read every poll seconds."""
        if self._src.polled:
            try:
                await self._src.drain()
            except (psycopg.Error, OSError):
                pass            # broken: the next statement says so
            timeout = min(timeout, poll)
        event = self._kick if self.token is not None else self._wake
        waiter = asyncio.ensure_future(event.wait())
        try:
            await _within(waiter, max(0.0, timeout))
        finally:
            waiter.cancel()

    async def _withdraw(self):
        """Leaves the queue, releasing a grant that raced with us."""
        try:
            await self._run_retrying("cancel", self.lock_id, self.owner, bound=WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("withdrawing the wait for %r failed: %s; the server drops it within "
                        "%g s", self.lock_id, e, self._heartbeat)

    # --- holding ---------------------------------------------------------

    def _notice(self, notice):
        if notice.event == "lost":
            self._verify = True
            self._kick.set()
        self._wake.set()

    def _set_deadline(self, deadline):
        if self._timer is not None:
            self._timer.cancel()
        self._deadline = deadline
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, deadline - monotonic()), self._expire)

    def _expire(self):
        if not self._done and monotonic() >= self._deadline:
            self._lose("no renewal confirmed before its local deadline")
            self._kick.set()

    def _lose(self, why):
        if not self._done:
            if not asyncio.Event.is_set(self.lost):
                log.warning("the lease on %r (token %d) was lost: %s", self.lock_id, self.token, why)
            self.lost.set()
            self._timer.cancel()

    async def _keep(self):
        """Renews every ttl/3 and checks lost notices, until released or lost."""
        next_renew = self._deadline - self._ttl * 2 / 3 if self._auto_renew else float("inf")
        while not self._done and not self.lost.is_set():
            await self._pause(min(next_renew - monotonic(), 3600), _HOLD_POLL)
            self._kick.clear()
            if self._done or self.lost.is_set():
                return
            if self._verify:
                self._verify = False
                await self._check_holds()
            elif monotonic() >= next_renew:
                next_renew = await self._renew()

    async def _check_holds(self):
        try:
            if not await self._run("holds", self.lock_id, self.token):
                self._lose("a lost notice, confirmed by lockq_holds")
        except (psycopg.Error, OSError):
            self._verify = True

    async def _renew(self):
        """Renews once; returns when to renew next.  A failed attempt is
        tried again soon: the local deadline decides when the lease is lost."""
        sent = monotonic()
        try:
            await self._renew_for(self._ttl)
        except (psycopg.Error, OSError) as e:
            log.warning("renewing the lease on %r (token %d) failed: %s; trying again",
                        self.lock_id, self.token, e)
            return monotonic() + min(self._ttl / 10, 1.0)
        return sent + self._ttl / 3

    async def _renew_for(self, ttl):
        """One lockq_renew for ttl (for _renew and extend()): True if the
        local deadline moved to ttl from when it was sent; False if the
        server refused (the lease is lost), or it came after the lease was
        released or given up (then the grant is released).  Raises the
        statement's error."""
        sent = monotonic()
        renewed = await self._run("renew", self.lock_id, self.owner, self.token, ttl,
                                  bound=max(0.1, min(self._io_timeout, self._deadline - sent)))
        if not renewed:
            self._lose("the server refused its renewal")
            return False
        if self._done or self.lost.is_set() or monotonic() >= self._deadline:
            if not self._done:          # renewed after we had given it up
                await self._release_quietly()
            return False
        self._set_deadline(sent + ttl)
        return True

    async def _release_quietly(self):
        try:
            await self._run("release", self.lock_id, self.owner, self.token)
        except (psycopg.Error, OSError):
            pass

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""lockq from threads: ``with lockq.lock(conn_or_pool, "name") as lease``.

The same state machine as liblockq (client/lockq_client.c):

* A wait is queued with lockq_enqueue naming a NOTIFY channel, and kept
  alive with lockq_heartbeat every third of its heartbeat interval.  A
  notification is only a wake-up: the grant is what lockq_heartbeat returns.
  So no server backend is blocked while we wait, and a waiter that dies is
  dropped within its heartbeat interval.  On timeout or cancel,
  lockq_cancel leaves the queue (and releases a grant that raced with it).
* A held lease is renewed with lockq_renew every third of its ttl by the
  process's keeper (one scheduling thread and a few workers, not a thread
  per lease).  Its local deadline counts from the moment the request
  that set the lease was sent (time.monotonic), so it never ends after the
  server's; one watchdog thread per process sets ``lease.lost`` when it
  passes, without touching a connection (a stuck one cannot delay it).  A
  failed renewal or a ``lost`` notice (checked with lockq_holds) sets it
  at once.

Sources:

* a psycopg.Connection in autocommit mode: every statement runs on it, and
  it LISTENs on a channel of its own for as long as it lives; a thread of
  ours reads its notices whenever it is idle, until it is closed.
  Renewals share it with your code: while your statement runs they wait.
* a psycopg_pool.ConnectionPool: each statement borrows a connection for
  that statement only, and one listener connection per pool, opened with
  the pool's conninfo outside its size, LISTENs for all of the pool's
  leases.  No pooled connection is kept while holding.  Behind a
  transaction pooler no notice reaches that listener (it LISTENed on
  whichever server connection pgbouncer gave it): the listener sends a
  probe notice through the pool after each LISTEN, and until it has come
  back, a wait borrows a connection for one lockq_await slice (0.5 s) at
  a time, so that its backend answers the grant at once.  Such waits
  share the pool with the holders' renewals: size it for both.
"""

from __future__ import annotations

import select
import threading
import weakref
from time import monotonic
from types import TracebackType
from typing import Any, Literal, Optional, Type, Union

import psycopg
from psycopg import errors, sql

from ._protocol import (AWAIT_SLICE, ConnAwaits, PoolAwaits, DEFAULT_HEARTBEAT, DEFAULT_IO_TIMEOUT, DEFAULT_TTL,
                        RETRY_DELAY, SCHEMA_QUERY, WITHDRAW_TIMEOUT, LeaseTable, after_release,
                        break_socket, LockCancelled, LockLost, LockTimeout, check_duration,
                        check_name, log, new_owner, schema_of,
                        parse_notice, stalled, statements, wait_bound)

try:
    from psycopg_pool import ConnectionPool
except ImportError:             # the pool package is optional
    ConnectionPool = None

_CANCEL_POLL = 0.05             # how often a wait looks at its cancel Event
_RECONNECT_DELAY = 0.5          # the pool listener's pause between attempts
_PROBE_TIMEOUT = 5.0            # the longest a pool's probe may take


def _schema(conn):
    """The schema of lockq's functions, and whether lockq_await is there."""
    return schema_of(conn.execute(SCHEMA_QUERY).fetchone())


def _listen(conn, channel):
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


class _Hub(LeaseTable):
    """The leases waiting or held through one source and their channel
    (LeaseTable), under a lock: any thread."""

    def __init__(self):
        super().__init__()
        self._mu = threading.Lock()

    def register(self, lease):
        with self._mu:
            return super().register(lease)

    def unregister(self, lease):
        with self._mu:
            super().unregister(lease)

    def alone(self, lease):
        with self._mu:
            return super().alone(lease)

    def dispatch(self, payload):
        if self.saw_probe(payload):
            return
        notice = parse_notice(payload)
        if notice is None:
            return
        with self._mu:
            lease = self.lease_for(notice)
        if lease is not None:
            lease._notice(notice)

    def wake_all(self):
        with self._mu:
            leases = self.leases()
        for lease in leases:
            lease._wake.set()


def _read_notices(conn, hub, timeout):
    """Waits up to timeout for input on conn and hands the notices that came
    to hub.  It reads under the connection's lock, never in the middle of
    another thread's statement (psycopg hands the notices that come during
    a statement to the notify handlers)."""
    readable, _, _ = select.select([conn.fileno()], [], [], timeout)
    if readable:
        with conn.lock:
            conn.pgconn.consume_input()
            while (n := conn.pgconn.notifies()) is not None:
                if n.relname.decode() == hub.channel:
                    hub.dispatch(n.extra)


def _bounded(conn, stmt, params, bound):
    """Runs stmt on conn and returns the first column of its row.  If no
    answer comes within bound seconds, the connection is taken as stalled:
    a timer thread shuts its socket down, and the statement fails at once
    with OperationalError.  The connection is then broken for good; a pool
    discards it.  (Never prepared: behind a transaction pooler a prepared
    statement lives on one server connection, and the next may lack it.)"""
    mu = threading.Lock()
    state = ["running"]

    def stall():
        with mu:
            if state[0] != "running":
                return
            state[0] = "stalled"
        break_socket(conn)

    timer = threading.Timer(bound, stall)
    timer.daemon = True
    timer.start()
    try:
        return conn.execute(stmt, params, prepare=False).fetchone()[0]
    except psycopg.OperationalError as e:
        if state[0] == "stalled":
            raise stalled(bound) from e
        raise
    finally:
        with mu:
            if state[0] == "running":
                state[0] = "done"
        timer.cancel()


def _gone(what):
    return psycopg.OperationalError("the %s lockq was used with is gone" % what)


class _ConnSource(ConnAwaits):
    """A connection of the caller's, used for every statement, and read for
    notices while idle by a thread of ours until it is closed or dropped.
    It is held by a weak reference: a connection the caller drops is closed
    (and its backend ends) as if lockq had never seen it."""

    pooled = False

    def __init__(self, conn):
        if not conn.autocommit:
            raise ValueError("lockq needs a connection in autocommit mode (its LISTEN "
                             "must commit); use conn.transaction() blocks for your "
                             "writes, or pass a ConnectionPool")
        self._conn = weakref.ref(conn)
        self.hub = _Hub()
        schema, self.awaits = _schema(conn)
        self.stmts = statements(schema)
        hub = self.hub
        conn.add_notify_handler(lambda n: n.channel == hub.channel and hub.dispatch(n.payload))
        _listen(conn, self.hub.channel)
        threading.Thread(target=_conn_listen_loop, args=(self._conn, hub),
                         name="lockq-listener", daemon=True).start()

    def run(self, name, params, bound):
        conn = self._conn()
        if conn is None:
            raise _gone("connection")
        return _bounded(conn, self.stmts[name], params, bound)


def _conn_listen_loop(ref, hub):
    """Reads a connection's notices (ref: a weak reference to it) until it
    is closed or dropped; it holds the connection only while it reads."""
    try:
        while True:
            conn = ref()
            if conn is None or conn.closed:
                return
            _read_notices(conn, hub, 1.0)
            del conn
    except (psycopg.Error, OSError, ValueError):
        pass                    # closed or broken: the caller's statements say so


class _PoolSource(PoolAwaits):
    """A ConnectionPool: statements on borrowed connections, notices on a
    listener connection of our own (thread "lockq-listener")."""

    pooled = True               # a failed statement may succeed on another connection

    def __init__(self, pool):
        self._pool = weakref.ref(pool)
        self.hub = _Hub()
        with pool.connection() as conn:
            schema, self.awaits = _schema(conn)
            self.stmts = statements(schema)
        self._conn = self._connect(pool)
        threading.Thread(target=self._listen_loop, name="lockq-listener",
                         daemon=True).start()

    def _connect(self, pool):
        conn = psycopg.connect(pool.conninfo, **{**pool.kwargs, "autocommit": True})
        _listen(conn, self.hub.channel)
        return conn

    def run(self, name, params, bound):
        pool = self._pool()
        if pool is None:
            raise _gone("pool")
        with pool.connection(timeout=bound) as conn:
            return _bounded(conn, self.stmts[name], params, bound)

    def _probe(self, pool):
        """Sends the hub's probe through the pool (its answer: notices
        reach the listener); a failure leaves the waits in lockq_await."""
        try:
            with pool.connection(timeout=_PROBE_TIMEOUT) as conn:
                _bounded(conn, self.stmts["probe"], (self.hub.channel, self.hub.new_probe()),
                         _PROBE_TIMEOUT)
        except (psycopg.Error, OSError):    # PoolTimeout is an OperationalError
            pass

    def _listen_loop(self):
        """Hands notices to the hub until the pool is closed or dropped;
        reconnects (and wakes every waiter, whose notices may have been
        lost), and probes after each LISTEN."""
        probe = True
        while True:
            pool = self._pool()
            if pool is None or pool.closed:
                break
            try:
                if self._conn is None:
                    self._conn = self._connect(pool)
                    self.hub.wake_all()
                    probe = True
                if probe:
                    probe = False
                    self._probe(pool)
                del pool
                _read_notices(self._conn, self.hub, 1.0)
            except (psycopg.Error, OSError) as e:
                if self._conn is not None:
                    log.info("the pool's listener connection failed (%s): reconnecting", e)
                self._conn = self._close(self._conn)
                threading.Event().wait(_RECONNECT_DELAY)
        self._close(self._conn)

    @staticmethod
    def _close(conn):
        if conn is not None:
            conn.close()


_sources = weakref.WeakKeyDictionary()
_sources_mu = threading.Lock()


def _source(obj):
    """The (cached) source for a connection or pool."""
    with _sources_mu:
        src = _sources.get(obj)
        if src is None:
            if isinstance(obj, psycopg.Connection):
                src = _ConnSource(obj)
            elif ConnectionPool is not None and isinstance(obj, ConnectionPool):
                src = _PoolSource(obj)
            else:
                raise TypeError("lockq.lock needs a psycopg.Connection or a "
                                "psycopg_pool.ConnectionPool, not %r" % type(obj).__name__)
            _sources[obj] = src
        return src


class _Watchdog:
    """One thread for the process that sets lease.lost when a lease's local
    deadline passes.  It runs no statement."""

    def __init__(self):
        self._cv = threading.Condition()
        self._leases = set()
        self._thread = None

    def arm(self, lease):
        with self._cv:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lockq-watchdog",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def disarm(self, lease):
        with self._cv:
            self._leases.discard(lease)

    def _run(self):
        with self._cv:
            while True:
                now = monotonic()
                until = now + 3600
                for lease in list(self._leases):
                    if lease._deadline <= now:
                        self._leases.discard(lease)
                        lease._expire()
                    else:
                        until = min(until, lease._deadline)
                self._cv.wait(until - now)


_watchdog = _Watchdog()

_KEEPER_WORKERS = 4             # the most renewals and checks run at once


class _Keeper:
    """Renews the held leases of the process and checks their "lost"
    notices, without a thread per lease: one thread schedules, and up to
    _KEEPER_WORKERS daemon threads, made as they are needed, run the
    statements, so that a statement stalled on one connection (bounded by
    its deadline) holds up only its own lease.  A lease has at most one
    statement running."""

    def __init__(self):
        self._cv = threading.Condition()
        self._due = {}                  # lease -> when its renewal is due
        self._busy = set()              # leases with a statement running
        self._work = []                 # leases for the workers
        self._workers = 0
        self._idle = 0
        self._thread = None

    def add(self, lease, due):
        with self._cv:
            self._due[lease] = due
            if self._thread is None:
                self._thread = threading.Thread(target=self._schedule, name="lockq-keeper",
                                                daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def kick(self):
        """A lease ended or got a notice: look again now."""
        with self._cv:
            self._cv.notify_all()

    def _schedule(self):
        with self._cv:
            while True:
                now = monotonic()
                until = now + 3600
                for lease, due in list(self._due.items()):
                    if lease in self._busy:
                        continue
                    with lease._mu:
                        finished = lease._done or lease.lost.is_set()
                    if finished:
                        del self._due[lease]
                    elif (lease._verify and now >= lease._verify_after) or now >= due:
                        self._busy.add(lease)
                        self._work.append(lease)
                        if self._idle == 0 and self._workers < _KEEPER_WORKERS:
                            self._workers += 1
                            threading.Thread(target=self._serve, name="lockq-renew",
                                             daemon=True).start()
                        self._cv.notify_all()
                    else:
                        until = min(until, due, lease._verify_after if lease._verify else until)
                self._cv.wait(max(0.0, until - now))

    def _serve(self):
        while True:
            with self._cv:
                while not self._work:
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                lease = self._work.pop(0)
                due = self._due.get(lease, float("inf"))
            try:
                due = lease._step(due)
            finally:
                with self._cv:
                    self._busy.discard(lease)
                    if lease in self._due:
                        self._due[lease] = due
                    self._cv.notify_all()


_keeper = _Keeper()


class _Lost(threading.Event):
    """lease.lost: set when the lease is lost.  is_set() also consults the
    clock, so that a check never trusts a watchdog thread that has not had
    its turn yet: past the local deadline, the lease is lost."""

    def __init__(self, lease):
        super().__init__()
        self._lease = lease

    def is_set(self):
        return super().is_set() or self._lease._past_deadline()


def lock(source: Union[psycopg.Connection[Any], "ConnectionPool"], lock_id: str, *,
         ttl: float = DEFAULT_TTL, timeout: Optional[float] = None,
         heartbeat: float = DEFAULT_HEARTBEAT, owner: Optional[str] = None,
         auto_renew: bool = True, cancel: Optional[threading.Event] = None,
         io_timeout: float = DEFAULT_IO_TIMEOUT) -> Lease:
    """A lease on lock_id, taken when the with-block is entered.

    ttl: the lease in seconds (renewed every ttl/3 while auto_renew).
    timeout: None waits forever; 0 never waits (lockq_try: LockTimeout if
    the lock is held or anybody queues for it); otherwise LockTimeout after
    that many seconds.  heartbeat: the wait's liveness bound on the server
    (at least 0.1 s).  owner: default unique per lease.  cancel: a
    threading.Event that ends the wait with LockCancelled.  io_timeout: the
    longest one statement may go unanswered before its connection is taken
    as stalled and broken (a wait's statements: also at most its heartbeat
    interval, and the timeout plus 1 s).

    Re-entrancy: a lease taken while this process already holds lock_id
    under the same (explicit) owner through the same connection or pool
    joins that grant at once (same token, its ttl unused) and neither
    renews nor releases it: the grant is released when the last of them
    exits."""
    return Lease(_source(source), lock_id, ttl=ttl, timeout=timeout, heartbeat=heartbeat,
                 owner=owner, auto_renew=auto_renew, cancel=cancel, io_timeout=io_timeout)


class Lease:
    """A lease on one lock: a context manager that acquires on entry and
    releases on exit (also when the block raises).  Exiting normally after
    the lease was lost raises LockLost.

    token: the fencing token (an int), for lockq_holds in your writes.
    lost: a threading.Event set when the lease is lost (is_set() is true
    once the local deadline has passed, whether or not the watchdog thread
    has run).
    held: the lease is valid (not lost, local deadline ahead)."""

    token: Optional[int]
    owner: str
    lock_id: str
    lost: threading.Event

    def __init__(self, src: Any, lock_id: str, *, ttl: float, timeout: Optional[float],
                 heartbeat: float, owner: Optional[str], auto_renew: bool,
                 cancel: Optional[threading.Event], io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        check_name("lock id", lock_id)
        self.owner = new_owner() if owner is None else owner
        check_name("owner", self.owner)
        self.lock_id = lock_id
        self.token = None
        self.lost = _Lost(self)
        self._src = src
        self._root = self               # the lease that holds the grant
        self._refs = 0                  # (root) leases in the grant's blocks
        self._exited = False            # this lease was released or forgotten
        self._forgotten = False         # forget() was called
        self._ttl = check_duration("ttl", ttl)
        self._heartbeat = check_duration("heartbeat", heartbeat, 0.1)
        self._timeout = None if timeout is None else check_duration("timeout", timeout, 0)
        self._auto_renew = auto_renew
        self._cancel = cancel
        self._io_timeout = check_duration("io_timeout", io_timeout, 0.1)
        self._mu = threading.Lock()     # _deadline, lost, _done
        self._deadline = 0.0
        self._done = False
        self._wake = threading.Event()  # a notice came while waiting
        self._verify = False            # a "lost" notice: ask the server
        self._verify_after = 0.0        # (not before then: a check failed)

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        if self._forgotten:
            return False
        try:
            ok = self.release()
        except Exception:
            if exc_type is None:
                raise
            return False        # the block's own error matters more
        return after_release(self, ok, exc_type)

    @property
    def held(self) -> bool:
        root = self._root
        with root._mu:
            return (self.token is not None and not self._exited and not root._done
                    and not threading.Event.is_set(root.lost)
                    and monotonic() < root._deadline)

    def _past_deadline(self):
        """The grant is taken and not released, and its local deadline has
        passed (no lock: is_set() is called with self._mu held)."""
        return self.token is not None and not self._done and monotonic() >= self._deadline

    def _join(self):
        """(hub lock held) Another lease of this owner joins this one's grant
        if it is held: True, and it counts.  False while it is waiting."""
        with self._mu:
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

    def extend(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now for ttl seconds (default: its ttl) from when
        the request is sent, and makes ttl its ttl for later renewals.
        Raises LockLost if the lease is not held or the server refuses; a
        psycopg error if the server did not answer (within io_timeout and
        the lease's local deadline: the lease may still be held then)."""
        root = self._root
        ttl = root._ttl if ttl is None else check_duration("ttl", ttl)
        self.check()
        if not root._renew_for(ttl):
            raise LockLost("the lease on %r was lost" % self.lock_id)
        root._ttl = ttl

    def acquire(self) -> Lease:
        """Waits for the lock (see lock()); returns self."""
        if self.token is not None:
            raise RuntimeError("a Lease is acquired once")
        root = self._src.hub.register(self)
        if root is not None:
            # re-entrant: the same owner's grant, which root renews
            self._root = root
            self.lost = root.lost
            self.token = root.token
            return self
        try:
            token, sent = self._try() if self._timeout == 0 else self._wait()
        except BaseException:
            self._src.hub.unregister(self)
            raise
        self.token = token
        self._deadline = sent + self._ttl
        self._refs = 1
        _watchdog.arm(self)
        _keeper.add(self, self._deadline - self._ttl * 2 / 3 if self._auto_renew else float("inf"))
        return self

    def release(self) -> bool:
        """Releases the lock; True if the lease was still held until then.
        (A re-entrant lease only leaves: the last one releases.)"""
        if self.token is None or self._exited:
            return False
        held = self.held
        self = self._leave()
        if self is None:
            return held
        try:
            released = self._run_retrying("release", self.lock_id, self.owner, self.token,
                                          bound=self._io_timeout if held else WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("releasing %r (token %d) failed: %s; the lease ends by itself",
                        self.lock_id, self.token, e)
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
        root) stops its renewals and watchdog and is returned; None while
        other blocks still use the grant."""
        self._exited = True
        root = self._root
        with root._mu:
            root._refs -= 1
            if root._refs > 0:
                return None
            root._done = True
        _keeper.kick()
        _watchdog.disarm(root)
        root._src.hub.unregister(root)
        return root

    # --- waiting ---------------------------------------------------------

    def _run(self, name, *params, bound=None):
        return self._src.run(name, params, self._io_timeout if bound is None else bound)

    def _run_retrying(self, name, *params, bound):
        """_run for the statements that end something (release, withdrawal):
        through a pool, a connection that fails (stale after a switchover,
        broken) is followed by another, until bound; the statements are
        idempotent for their owner."""
        end = monotonic() + bound
        while True:
            try:
                return self._run(name, *params, bound=max(0.1, end - monotonic()))
            except psycopg.OperationalError:
                if not self._src.pooled or end - monotonic() <= RETRY_DELAY:
                    raise
                threading.Event().wait(RETRY_DELAY)

    def _try(self):
        sent = monotonic()
        token = self._run("try", self.lock_id, self.owner, self._ttl)
        if token is None:
            raise LockTimeout("lock %r is not available" % self.lock_id)
        return token, sent

    def _enqueue(self, bound):
        return self._run("enqueue", self.lock_id, self.owner, self._ttl,
                         self._src.hub.channel, self._heartbeat, bound=bound)

    def _poll(self, bound):
        """One heartbeat: the token once granted, else None.  A wait the
        server dropped (55000: missed heartbeats, or a grant not picked up
        in time) queues again, at the back."""
        self._wake.clear()
        try:
            return self._run("heartbeat", self.lock_id, self.owner, bound=bound)
        except errors.ObjectNotInPrerequisiteState:
            return self._enqueue(bound)

    def _await(self, give_up, bound):
        """One lockq_await of at most AWAIT_SLICE (and the rest of the
        timeout): the backend wakes at the grant and answers with the token,
        with no NOTIFY, which a transaction pooler would not pass on; NULL
        when the slice ends (it counts as a heartbeat).  Used when the source
        says so (ConnAwaits, PoolAwaits)."""
        self._wake.clear()
        span = AWAIT_SLICE if give_up is None else max(0.001, min(AWAIT_SLICE, give_up - monotonic()))
        try:
            return self._run("await", self.lock_id, self.owner, span, bound=bound + span)
        except errors.ObjectNotInPrerequisiteState:
            return self._enqueue(bound)

    def _wait(self):
        """Queues and waits.  A statement that fails on the connection (it
        broke, or stalled and was broken) is tried again, on a new pooled
        connection if there is one, and the wait keeps its place; once the
        server has been unreachable for the heartbeat interval (it drops
        the wait then), the error is raised."""
        give_up = None if self._timeout is None else monotonic() + self._timeout
        queued = False
        sent = reached = monotonic()
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
                            token = self._await(give_up, bound)
                        else:
                            token = self._poll(bound) if queued else self._enqueue(bound)
                    except psycopg.OperationalError:
                        if monotonic() - reached > self._heartbeat:
                            raise
                        self._sleep(monotonic() + RETRY_DELAY, give_up)
                        continue
                    queued = True
                    reached = sent
                    if token is not None:
                        return token, sent
                    continue
                self._sleep(sent + self._heartbeat / 3, give_up)
        except BaseException:
            self._withdraw()
            raise

    def _sleep(self, until, give_up):
        now = monotonic()
        if give_up is not None:
            until = min(until, give_up)
        if self._cancel is not None:
            until = min(until, now + _CANCEL_POLL)
        self._wake.wait(max(0.0, until - now))

    def _withdraw(self):
        """Leaves the queue, releasing a grant that raced with us.  If the
        server cannot be told, it drops us after the heartbeat interval."""
        try:
            self._run_retrying("cancel", self.lock_id, self.owner, bound=WITHDRAW_TIMEOUT)
        except (psycopg.Error, OSError) as e:
            log.warning("withdrawing the wait for %r failed: %s; the server drops it within "
                        "%g s", self.lock_id, e, self._heartbeat)

    # --- holding ---------------------------------------------------------

    def _notice(self, notice):
        """From the hub: a notice about this lease (any thread)."""
        if notice.event == "lost":
            self._verify = True
            _keeper.kick()
        self._wake.set()

    def _step(self, due):
        """From the keeper (a worker thread): checks a lost notice, or
        renews if due.  Returns when the next renewal is due."""
        if self._verify and monotonic() >= self._verify_after:
            self._verify = False
            self._check_holds()
            return due
        if self._auto_renew and monotonic() >= due:
            return self._renew()
        return due

    def _check_holds(self):
        try:
            if not self._run("holds", self.lock_id, self.token):
                self._lose("a lost notice, confirmed by lockq_holds")
        except (psycopg.Error, OSError):
            # ask again soon (the next renewal asks too)
            self._verify_after = monotonic() + min(self._ttl / 10, 1.0)
            self._verify = True

    def _renew(self):
        """Renews once; returns when to renew next.  A failed attempt is
        tried again soon: the local deadline decides when the lease is lost."""
        sent = monotonic()
        try:
            self._renew_for(self._ttl)
        except (psycopg.Error, OSError) as e:
            log.warning("renewing the lease on %r (token %d) failed: %s; trying again",
                        self.lock_id, self.token, e)
            return monotonic() + min(self._ttl / 10, 1.0)
        return sent + self._ttl / 3

    def _renew_for(self, ttl):
        """One lockq_renew for ttl (for _renew and extend()): True if the
        local deadline moved to ttl from when it was sent; False if the
        server refused (the lease is lost) or it came after the lease was
        given up (the grant is released).  Raises the statement's error."""
        sent = monotonic()
        renewed = self._run("renew", self.lock_id, self.owner, self.token, ttl,
                            bound=max(0.1, min(self._io_timeout, self._deadline - sent)))
        if not renewed:
            self._lose("the server refused its renewal")
            return False
        if self._renewal_too_late(sent + ttl):
            self._release_quietly()     # renewed after we had given it up
            return False
        return True

    def _renewal_too_late(self, deadline):
        """Moves the local deadline after a renewal.  True when the lease
        was already counted lost, so that the renewal must be undone; never
        once release() has begun (its own lockq_release ends the grant, and
        a second release here would make it report the lease lost)."""
        with self._mu:
            if self._done:
                return False
            if self.lost.is_set() or monotonic() >= self._deadline:
                return True
            self._deadline = deadline
            return False

    def _release_quietly(self):
        try:
            self._run("release", self.lock_id, self.owner, self.token)
        except (psycopg.Error, OSError):
            pass

    def _lose(self, why):
        with self._mu:
            first = not self._done and not threading.Event.is_set(self.lost)
            if not self._done:
                self.lost.set()
        _watchdog.disarm(self)
        if first:
            log.warning("the lease on %r (token %d) was lost: %s", self.lock_id, self.token, why)

    def _expire(self):
        """From the watchdog: the local deadline passed."""
        with self._mu:
            first = (not self._done and monotonic() >= self._deadline
                     and not threading.Event.is_set(self.lost))
            if first:
                self.lost.set()
        _keeper.kick()
        if first:
            log.warning("the lease on %r (token %d) was lost: no renewal confirmed before "
                        "its local deadline", self.lock_id, self.token)

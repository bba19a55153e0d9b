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
from time import monotonic, sleep
from types import TracebackType
from typing import Any, Literal, Optional, Type, Union

import psycopg
from psycopg import sql

from ._core import LeaseCore, LostFlag, Pause, Run, Sleep, drive
from ._protocol import (ConnAwaits, PoolAwaits, DEFAULT_HEARTBEAT, DEFAULT_IO_TIMEOUT,
                        DEFAULT_TTL, SCHEMA_QUERY, LeaseTable, after_release, break_socket,
                        log, parse_notice, schema_of, stalled, statements)

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
                    elif now >= lease._next_check(due):
                        self._busy.add(lease)
                        self._work.append(lease)
                        if self._idle == 0 and self._workers < _KEEPER_WORKERS:
                            self._workers += 1
                            threading.Thread(target=self._serve, name="lockq-renew",
                                             daemon=True).start()
                        self._cv.notify_all()
                    else:
                        until = min(until, lease._next_check(due))
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
                due = lease._drive(lease._g_step(due))
            finally:
                with self._cv:
                    self._busy.discard(lease)
                    if lease in self._due:
                        self._due[lease] = due
                    self._cv.notify_all()


_keeper = _Keeper()


class _Lost(LostFlag, threading.Event):
    """lease.lost: a threading.Event set when the lease is lost (LostFlag:
    is_set() is true once the local deadline has passed, whether or not the
    watchdog thread has run)."""


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


class Lease(LeaseCore):
    """A lease on one lock: a context manager that acquires on entry and
    releases on exit (also when the block raises).  Exiting normally after
    the lease was lost raises LockLost.

    token: the fencing token (an int), for lockq_holds in your writes.
    lost: a threading.Event set when the lease is lost (is_set() is true
    once the local deadline has passed, whether or not the watchdog thread
    has run).
    held: the lease is valid (not lost, local deadline ahead).

    What it sends and when is lockq._core's (LeaseCore), shared with
    lockq.aio; this class runs it with blocking calls and keeps the held
    lease with the process's keeper and watchdog threads."""

    lost: threading.Event

    def __init__(self, src: Any, lock_id: str, *, ttl: float, timeout: Optional[float],
                 heartbeat: float, owner: Optional[str], auto_renew: bool,
                 cancel: Optional[threading.Event], io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        super().__init__(lock_id, ttl=ttl, timeout=timeout, heartbeat=heartbeat, owner=owner,
                         auto_renew=auto_renew, io_timeout=io_timeout, cancel=cancel)
        self.lost = _Lost(self)
        self._src = src
        self._mu = threading.Lock()     # see LeaseCore
        self._wake = threading.Event()  # a notice came while waiting

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

    def acquire(self) -> Lease:
        """Waits for the lock (see lock()); returns self."""
        return self._drive(self._g_acquire())

    def release(self) -> bool:
        """Releases the lock; True if the lease was still held until then.
        (A re-entrant lease only leaves: the last one releases.)"""
        return self._drive(self._g_release())

    def extend(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now for ttl seconds (default: its ttl) from when
        the request is sent, and makes ttl its ttl for later renewals.
        Raises LockLost if the lease is not held or the server refuses; a
        psycopg error if the server did not answer (within io_timeout and
        the lease's local deadline: the lease may still be held then)."""
        self._drive(self._g_extend(ttl))

    # --- running LeaseCore's steps ---------------------------------------

    def _drive(self, gen):
        return drive(gen, self._perform)

    def _perform(self, effect):
        if isinstance(effect, Run):
            return self._src.run(effect.name, effect.params, effect.bound)
        if isinstance(effect, Sleep):
            return self._sleep(effect.until)
        if isinstance(effect, Pause):
            return sleep(max(0.0, effect.until - monotonic()))
        return self._drive(effect.gen)      # Shielded: nothing cancels a thread

    def _sleep(self, until):
        """Until then, or a notice, or the cancel Event (looked at every
        _CANCEL_POLL seconds)."""
        now = monotonic()
        if self._cancel is not None:
            until = min(until, now + _CANCEL_POLL)
        self._wake.wait(max(0.0, until - now))

    def _locked(self):
        return self._mu

    def _start_keeping(self, due):
        _watchdog.arm(self)
        _keeper.add(self, due)

    def _stop_keeping(self):
        _keeper.kick()
        _watchdog.disarm(self)

    def _stop_watching(self):
        _watchdog.disarm(self)

    def _deadline_moved(self):
        _watchdog.arm(self)     # wakes it: the deadline may be earlier

    def _nudge_keeper(self):
        _keeper.kick()

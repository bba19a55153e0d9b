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
from psycopg import sql

from ._core import LeaseCore, LostFlag, Pause, Run, Sleep
from ._protocol import (ConnAwaits, PoolAwaits, DEFAULT_HEARTBEAT, DEFAULT_IO_TIMEOUT,
                        DEFAULT_TTL, SCHEMA_QUERY, LeaseTable, after_release, break_socket,
                        log, parse_notice, schema_of, stalled, statements)

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


class _Lost(LostFlag, asyncio.Event):
    """lease.lost: an asyncio.Event set when the lease is lost (LostFlag:
    is_set() is true once the local deadline has passed, even if the loop
    was too busy to run its timer)."""


def lock(source: Union[psycopg.AsyncConnection[Any], "AsyncConnectionPool"], lock_id: str, *,
         ttl: float = DEFAULT_TTL, timeout: Optional[float] = None,
         heartbeat: float = DEFAULT_HEARTBEAT, owner: Optional[str] = None,
         auto_renew: bool = True, io_timeout: float = DEFAULT_IO_TIMEOUT) -> Lease:
    """A lease on lock_id, taken when the async with-block is entered.
    Arguments as lockq.lock (re-entrancy too); cancel the waiting task to
    cancel the wait."""
    return Lease(source, lock_id, ttl=ttl, timeout=timeout, heartbeat=heartbeat,
                 owner=owner, auto_renew=auto_renew, io_timeout=io_timeout)


class Lease(LeaseCore):
    """A lease on one lock: an async context manager that acquires on entry
    and releases on exit (also when the block raises or is cancelled).
    Exiting normally after the lease was lost raises LockLost.

    token: the fencing token (an int).  lost: an asyncio.Event set when the
    lease is lost (is_set() is true once the local deadline has passed, even
    if the loop was too busy to run its timer).  held: the lease is valid.

    What it sends and when is lockq._core's (LeaseCore), shared with
    lockq.Lease; this class runs it with awaits and keeps the held lease
    with a task and a loop timer."""

    lost: asyncio.Event

    def __init__(self, source: Any, lock_id: str, *, ttl: float, timeout: Optional[float],
                 heartbeat: float, owner: Optional[str], auto_renew: bool,
                 io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        super().__init__(lock_id, ttl=ttl, timeout=timeout, heartbeat=heartbeat, owner=owner,
                         auto_renew=auto_renew, io_timeout=io_timeout)
        self.lost = _Lost(self)
        self._source_obj = source
        self._src = None
        self._timer = None
        self._keeper = None
        self._wake = asyncio.Event()    # a notice came while waiting
        self._kick = asyncio.Event()    # wakes the renewal task

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

    async def acquire(self) -> Lease:
        """Waits for the lock; returns self."""
        if self._src is None:
            self._src = await _source(self._source_obj)
        return await self._drive(self._g_acquire())

    async def release(self) -> bool:
        """Releases the lock; True if the lease was still held until then.
        (A re-entrant lease only leaves: the last one releases.)"""
        return await self._drive(self._g_release())

    async def extend(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now for ttl seconds (default: its ttl), as
        lockq.Lease.extend does."""
        await self._drive(self._g_extend(ttl))

    # --- running LeaseCore's steps ---------------------------------------

    async def _drive(self, gen):
        """lockq._core.drive with awaits: runs gen's effects until it ends.
        A cancel of the task is thrown into gen (a wait withdraws); a
        Shielded step runs to its end in a task of its own whatever
        happens to ours."""
        result, error = None, None
        while True:
            try:
                effect = gen.send(result) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value
            result, error = None, None
            try:
                result = await self._perform(effect)
            except BaseException as e:  # noqa: B902 -- gen decides
                error = e

    async def _perform(self, effect):
        if isinstance(effect, Run):
            return await self._src.run(effect.name, effect.params, effect.bound)
        if isinstance(effect, Sleep):
            return await self._pause(effect.until - monotonic(), _WAIT_POLL)
        if isinstance(effect, Pause):
            return await asyncio.sleep(max(0.0, effect.until - monotonic()))
        return await asyncio.shield(asyncio.ensure_future(self._drive(effect.gen)))

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

    async def _keep(self, due):
        """Renews when due and checks lost notices, until released or lost."""
        while not self._done and not self.lost.is_set():
            await self._pause(min(self._next_check(due) - monotonic(), 3600), _HOLD_POLL)
            self._kick.clear()
            if self._done or self.lost.is_set():
                return
            due = await self._drive(self._g_step(due))

    def _start_keeping(self, due):
        self._deadline_moved()
        self._keeper = asyncio.get_running_loop().create_task(self._keep(due))

    def _stop_keeping(self):
        self._timer.cancel()
        self._kick.set()

    def _stop_watching(self):
        self._timer.cancel()

    def _deadline_moved(self):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, self._deadline - monotonic()), self._expire)

    def _nudge_keeper(self):
        self._kick.set()

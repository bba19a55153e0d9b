# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""A lock client driven line by line, for the fault matrix of
test/t/309_client_matrix.pl and 310_client_failover.pl.  argv: sync|asyncio
DSN [pool]; with "pool", the agent's locks go through a psycopg_pool
ConnectionPool (AsyncConnectionPool) of DSN, not one connection.  Commands
on stdin:

  acquire LOCK TTL_MS TIMEOUT_MS HEARTBEAT_MS   (TIMEOUT_MS -1: forever)
      "acquired TOKEN PID" (PID: the client process, ours) or "failed
      ERROR ELAPSED_MS"; once acquired, a
      worker does "protected work" as an application would: it reads the
      wall clock, then checks lease.held, and counts the time as work done
      under the lease only if held was true; when held turns false it
      prints "stopped LAST_WORK_NS" (the wall-clock ns of the last work)
  release      "released 0|1 ELAPSED_MS" or "failed ERROR ELAPSED_MS"
  cancel LOCK TTL_MS DELAY_MS HEARTBEAT_MS
      waits for LOCK and cancels the wait DELAY_MS later (sync: the cancel
      Event; asyncio: Task.cancel); "cancel_done cancelled|acquired|ERROR
      ELAPSED_MS", where a grant that came first is released at once
  block MS     blocks the process's Python for MS: sync holds the GIL (a
      long switch interval and a busy loop: every thread stops, the
      renewal thread too), asyncio blocks the event loop; then "blocked"
  ping         takes and releases a lock of its own: "pong ok" or "pong ERROR"
  quit
"""

import asyncio
import os
import sys
import threading
import time

import psycopg

import lockq


_say_lock = threading.Lock()


def say(*words):
    """One whole line per call: print() writes its words and the newline
    apart, and a thread that takes the GIL between them (the work thread
    after a block) would splice its line into ours."""
    line = " ".join(str(w) for w in words) + "\n"
    with _say_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def work(lease, poll):
    """The protected work loop (a thread, or a task with poll awaited)."""
    last = 0
    while True:
        t = time.time_ns()
        if not lease.held:
            say("stopped", last)
            return
        last = t
        yield poll


def busy(ms):
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        pass


def sync_main(dsn, pooled):
    if pooled:
        from psycopg_pool import ConnectionPool
        conn = ConnectionPool(dsn, min_size=1, max_size=4, open=True)
    else:
        conn = psycopg.connect(dsn, autocommit=True)
    lease = None
    for line in sys.stdin:
        cmd = line.split()
        t0 = time.monotonic()
        if cmd[0] == "acquire":
            timeout = None if int(cmd[3]) < 0 else int(cmd[3]) / 1000
            try:
                lease = lockq.lock(conn, cmd[1], ttl=int(cmd[2]) / 1000, timeout=timeout,
                                   heartbeat=int(cmd[4]) / 1000).acquire()
            except Exception as e:
                say("failed", type(e).__name__, int((time.monotonic() - t0) * 1000))
                continue
            say("acquired", lease.token, os.getpid())

            def run(lease=lease):
                for pause in work(lease, 0.001):
                    time.sleep(pause)
            threading.Thread(target=run, daemon=True).start()
        elif cmd[0] == "release":
            try:
                ok = lease.release()
                say("released", int(ok), int((time.monotonic() - t0) * 1000))
            except Exception as e:
                say("failed", type(e).__name__, int((time.monotonic() - t0) * 1000))
        elif cmd[0] == "cancel":
            ev = threading.Event()
            timer = threading.Timer(int(cmd[3]) / 1000, ev.set)
            timer.start()
            try:
                with lockq.lock(conn, cmd[1], ttl=int(cmd[2]) / 1000, heartbeat=int(cmd[4]) / 1000,
                                cancel=ev):
                    outcome = "acquired"
            except lockq.LockCancelled:
                outcome = "cancelled"
            except Exception as e:
                outcome = type(e).__name__
            timer.join()
            say("cancel_done", outcome, int((time.monotonic() - t0) * 1000))
        elif cmd[0] == "block":
            old = sys.getswitchinterval()
            sys.setswitchinterval(int(cmd[1]) / 1000 + 10)
            busy(int(cmd[1]))
            sys.setswitchinterval(old)
            say("blocked")
        elif cmd[0] == "ping":
            say("pong", ping(lambda: lockq.lock(conn, "agent-ping-%d" % os.getpid(), timeout=0)))
        elif cmd[0] == "quit":
            break


def ping(make):
    try:
        with make():
            return "ok"
    except Exception as e:
        return type(e).__name__


async def aping(make):
    try:
        async with make():
            return "ok"
    except Exception as e:
        return type(e).__name__


async def aio_main(dsn, pooled):
    if pooled:
        from psycopg_pool import AsyncConnectionPool
        conn = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)
        await conn.open()
    else:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    lease = None
    tasks = set()
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        cmd = line.split()
        t0 = time.monotonic()
        if cmd[0] == "acquire":
            timeout = None if int(cmd[3]) < 0 else int(cmd[3]) / 1000
            try:
                lease = await lockq.aio.lock(conn, cmd[1], ttl=int(cmd[2]) / 1000, timeout=timeout,
                                             heartbeat=int(cmd[4]) / 1000).acquire()
            except Exception as e:
                say("failed", type(e).__name__, int((time.monotonic() - t0) * 1000))
                continue
            say("acquired", lease.token, os.getpid())

            async def run(lease=lease):
                for pause in work(lease, 0.001):
                    await asyncio.sleep(pause)
            task = asyncio.ensure_future(run())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif cmd[0] == "release":
            try:
                ok = await lease.release()
                say("released", int(ok), int((time.monotonic() - t0) * 1000))
            except Exception as e:
                say("failed", type(e).__name__, int((time.monotonic() - t0) * 1000))
        elif cmd[0] == "cancel":
            async def hold(lock_id=cmd[1], ttl=int(cmd[2]) / 1000, heartbeat=int(cmd[4]) / 1000):
                async with lockq.aio.lock(conn, lock_id, ttl=ttl, heartbeat=heartbeat):
                    pass
            task = asyncio.ensure_future(hold())
            await asyncio.sleep(int(cmd[3]) / 1000)
            cancelled = task.cancel()
            try:
                await task
                outcome = "acquired"
            except asyncio.CancelledError:
                outcome = "cancelled" if cancelled else "CancelledError"
            except Exception as e:
                outcome = type(e).__name__
            say("cancel_done", outcome, int((time.monotonic() - t0) * 1000))
        elif cmd[0] == "block":
            time.sleep(int(cmd[1]) / 1000)
            say("blocked")
        elif cmd[0] == "ping":
            say("pong", await aping(lambda: lockq.aio.lock(conn, "agent-ping-%d" % os.getpid(), timeout=0)))
        elif cmd[0] == "quit":
            break


if __name__ == "__main__":
    pooled = sys.argv[3:] == ["pool"]
    if sys.argv[1] == "sync":
        sync_main(sys.argv[2], pooled)
    else:
        asyncio.run(aio_main(sys.argv[2], pooled))
    sys.stdout.flush()
    os._exit(0)                 # leave daemon threads and broken connections

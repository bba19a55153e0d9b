# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""A lock client driven line by line, for the fault matrix of
test/t/044_client_matrix.pl.  argv: sync|asyncio DSN.  Commands on stdin:

  acquire LOCK TTL_MS TIMEOUT_MS HEARTBEAT_MS   (TIMEOUT_MS -1: forever)
      "acquired TOKEN PID" (PID: the client process, ours) or "failed
      ERROR ELAPSED_MS"; once acquired, a
      worker does "protected work" as an application would: it reads the
      wall clock, then checks lease.held, and counts the time as work done
      under the lease only if held was true; when held turns false it
      prints "stopped LAST_WORK_NS" (the wall-clock ns of the last work)
  release      "released 0|1 ELAPSED_MS" or "failed ERROR ELAPSED_MS"
  quit
"""

import asyncio
import os
import sys
import threading
import time

import psycopg

import lockq


def say(*words):
    print(*words, flush=True)


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


def sync_main(dsn):
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
        elif cmd[0] == "quit":
            break


async def aio_main(dsn):
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
        elif cmd[0] == "quit":
            break


if __name__ == "__main__":
    if sys.argv[1] == "sync":
        sync_main(sys.argv[2])
    else:
        asyncio.run(aio_main(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)                 # leave daemon threads and broken connections

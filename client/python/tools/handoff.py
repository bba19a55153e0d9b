# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""Hand-off latency of lockq.lock (test/t/308_pgbouncer.pl): for each DSN
given, ROUNDS times, B waits for a lock A holds, each on a connection of its
own through that DSN (modes sync, asyncio), or both through one pool of
that DSN (modes sync-pool, asyncio-pool: psycopg_pool); the time from A's
call of release() to B's lock() returning is one sample.  ADMIN (a direct
DSN) sees B queued first.  Prints one line per DSN and mode:
"<label> <mode> p50_ms p99_ms max_ms"."""

import asyncio
import sys
import threading
import time

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import lockq

ROUNDS = 40


def wait_queued(admin, name):
    while not admin.execute("SELECT count(*) = 1 FROM lockq_waiters WHERE lock_id = %s",
                            (name,)).fetchone()[0]:
        time.sleep(0.002)
    time.sleep(0.02)                    # and waiting (in lockq_await, or on NOTIFY)


def sync_rounds(dsn, admin, name, pooled):
    if pooled:
        a = b = ConnectionPool(dsn, min_size=2, max_size=4, open=True)
    else:
        a = psycopg.connect(dsn, autocommit=True)
        b = psycopg.connect(dsn, autocommit=True)
    samples = []
    for _ in range(ROUNDS):
        held = lockq.lock(a, name).acquire()
        got = []
        t = threading.Thread(target=lambda: got.append((lockq.lock(b, name).acquire(),
                                                         time.monotonic())))
        t.start()
        wait_queued(admin, name)
        t0 = time.monotonic()
        held.release()
        t.join(30)
        lease, t1 = got[0]
        samples.append(t1 - t0)
        lease.release()
    for c in (a,) if a is b else (a, b):
        c.close()
    return samples


async def aio_rounds(dsn, admin, name, pooled):
    if pooled:
        a = b = AsyncConnectionPool(dsn, min_size=2, max_size=4, open=False)
        await a.open()
    else:
        a = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        b = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    samples = []
    for _ in range(ROUNDS):
        held = await lockq.aio.lock(a, name).acquire()
        task = asyncio.ensure_future(lockq.aio.lock(b, name).acquire())
        await asyncio.to_thread(wait_queued, admin, name)
        t0 = time.monotonic()
        await held.release()
        lease = await asyncio.wait_for(task, 30)
        samples.append(time.monotonic() - t0)
        await lease.release()
    for c in (a,) if a is b else (a, b):
        await c.close()
    return samples


def report(label, mode, samples):
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000
    print("%s %s %.2f %.2f %.2f" % (label, mode, pick(0.5), pick(0.99), s[-1] * 1000), flush=True)


def main():
    admin = psycopg.connect(sys.argv[1], autocommit=True)
    for arg in sys.argv[2:]:
        label, dsn = arg.split("=", 1)
        for pooled, suffix in ((False, ""), (True, "-pool")):
            report(label, "sync" + suffix,
                   sync_rounds(dsn, admin, "handoff-sync%s-%s" % (suffix, label), pooled))
            report(label, "asyncio" + suffix,
                   asyncio.run(aio_rounds(dsn, admin, "handoff-aio%s-%s" % (suffix, label), pooled)))


if __name__ == "__main__":
    main()

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""lockq.aio.lock against a real server: the asyncio variant's FIFO,
timeout, task cancellation, renewals, lost leases, fencing and release on
exceptions, with a connection and with a pool."""

import asyncio
import os
import signal
import time
import unittest

import psycopg
from psycopg_pool import AsyncConnectionPool

import lockq
from support import DSN, LockqTestCase


class AioTest(LockqTestCase):

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    async def pool(self, size=2):
        pool = AsyncConnectionPool(DSN, min_size=1, max_size=size)
        await pool.open()
        return pool

    async def wait_for_waiters_async(self, lock_id, n):
        await asyncio.to_thread(self.wait_for_waiters, lock_id, n)

    def take(self, lock_id):
        self.assertIsNotNone(self.value("SELECT lockq_try(%s, 'holder', '1 hour')", (lock_id,)))

    def give(self, lock_id):
        self.assertTrue(self.value("SELECT lockq_release(%s, 'holder')", (lock_id,)))

    def test_fifo_pool_and_connections(self):
        async def main():
            pool = await self.pool()
            conns = [await psycopg.AsyncConnection.connect(DSN, autocommit=True)
                     for _ in range(2)]
            self.take(self.name)
            order = []

            async def waiter(i, src):
                async with lockq.aio.lock(src, self.name, timeout=30) as lease:
                    order.append((i, lease.token))

            sources = [pool, conns[0], pool, conns[1], pool]
            tasks = []
            for i, src in enumerate(sources):
                tasks.append(asyncio.create_task(waiter(i, src)))
                await self.wait_for_waiters_async(self.name, i + 1)
            self.give(self.name)
            await asyncio.gather(*tasks)
            for c in conns:
                await c.close()
            await pool.close()
            return order

        order = self.run_async(main())
        self.assertEqual([i for i, _ in order], list(range(5)), "arrival order")
        self.assertEqual([t for _, t in order], sorted(t for _, t in order))

    def test_timeout_and_cancel(self):
        async def main():
            pool = await self.pool()
            self.take(self.name)
            with self.assertRaises(lockq.LockTimeout):
                async with lockq.aio.lock(pool, self.name, timeout=0.3):
                    self.fail("granted")
            task = asyncio.create_task(lockq.aio.lock(pool, self.name).acquire())
            await self.wait_for_waiters_async(self.name, 1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await self.wait_for_waiters_async(self.name, 0)
            self.give(self.name)
            await pool.close()

        self.run_async(main())

    def test_auto_renew_keeps_a_short_lease(self):
        async def main():
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            async with lockq.aio.lock(conn, self.name, ttl=1.5) as lease:
                await asyncio.sleep(4)
                self.assertTrue(lease.held)
                self.assertTrue(self.holds(self.name, lease.token))
            self.assertIsNone(self.holder(self.name))
            await conn.close()

        self.run_async(main())

    def test_extend_remaining_and_the_log(self):
        """extend() and remaining as in threads; a lease taken away cannot
        be extended, and the "lockq" logger says so."""
        async def main():
            pool = await self.pool()
            async with lockq.aio.lock(pool, self.name, ttl=2, auto_renew=False) as lease:
                self.assertGreater(lease.remaining, 1.0)
                await lease.extend(60)
                self.assertGreater(lease.remaining, 55)
                await asyncio.sleep(2.5)
                self.assertTrue(lease.held)
            self.assertEqual(lease.remaining, 0.0)
            lease = await lockq.aio.lock(pool, self.name, ttl=60).acquire()
            with self.assertLogs("lockq", "WARNING") as logs:
                self.value("SELECT lockq_force_release(%s)", (self.name,))
                with self.assertRaises(lockq.LockLost):
                    await lease.extend()
                self.assertFalse(await lease.release())
            self.assertEqual(len([m for m in logs.output if "was lost" in m]), 1, logs.output)
            await pool.close()

        self.run_async(main())

    def test_a_shorter_extend_announces_the_loss_earlier(self):
        async def main():
            pool = await self.pool()
            lease = await lockq.aio.lock(pool, self.name, ttl=60, auto_renew=False).acquire()
            await lease.extend(0.5)
            self.assertLessEqual(lease.remaining, 0.5)
            await asyncio.wait_for(asyncio.Event.wait(lease.lost), 5)   # the loop timer set it
            with self.assertRaises(lockq.LockLost):
                await lease.__aexit__(None, None, None)
            await pool.close()

        self.run_async(main())

    def test_forget_keeps_the_grant(self):
        async def main():
            pool = await self.pool()
            owner = self.name + "-owner"
            async with lockq.aio.lock(pool, self.name, ttl=1.5, owner=owner) as lease:
                lease.forget()
                self.assertFalse(lease.held)
            self.assertEqual(self.holder(self.name), owner, "still granted after the block")
            await asyncio.to_thread(
                self.wait_until, "SELECT NOT EXISTS (SELECT FROM lockq_locks WHERE lock_id = %s)",
                (self.name,))
            await pool.close()

        self.run_async(main())

    def test_lost_when_the_loop_is_blocked(self):
        """A loop blocked past the lease has not run the timer that sets
        lost: lost.is_set() and held consult the clock (issue 22, item 3)."""
        async def main():
            pool = await self.pool()
            with self.assertRaises(lockq.LockLost):
                async with lockq.aio.lock(pool, self.name, ttl=0.5) as lease:
                    time.sleep(1.0)             # blocks the loop: no renewal, no timer
                    self.assertTrue(lease.lost.is_set(), "lost, at once")
                    self.assertFalse(lease.held)
                    with self.assertRaises(lockq.LockLost):
                        lease.check()
            await pool.close()

        self.run_async(main())

    def test_reentrant_same_owner(self):
        """An inner block of the same explicit owner joins the grant
        (issue 22, item 2)."""
        async def main():
            pool = await self.pool()
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            for src in (pool, conn):
                async with lockq.aio.lock(src, self.name, owner="me", ttl=30) as outer:
                    async with lockq.aio.lock(src, self.name, owner="me", ttl=1) as inner:
                        self.assertEqual(inner.token, outer.token)
                        await asyncio.sleep(1.5)
                        self.assertTrue(inner.held)
                    self.assertFalse(inner.held)
                    self.assertTrue(outer.held)
                    self.assertEqual(self.holder(self.name), "me")
                self.assertIsNone(self.holder(self.name))
            await conn.close()
            await pool.close()

        self.run_async(main())

    def test_statements_are_not_prepared(self):
        """Never prepared, whatever psycopg's prepare_threshold (issue 22,
        item 4: behind a transaction pooler the next server connection
        lacks a prepared statement)."""
        async def main():
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            async with lockq.aio.lock(conn, self.name, ttl=0.3) as lease:
                await asyncio.sleep(1.5)        # about 15 renewals
                self.assertTrue(lease.held)
                cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
                self.assertEqual((await cur.fetchone())[0], 0, "nothing prepared")
            await conn.close()

        self.run_async(main())

    def test_cancel_during_the_first_enqueue(self):
        """A cancel that lands while the first lockq_enqueue is on the wire
        leaves no grant behind, and the connection works (issue 22,
        item 9)."""
        async def main():
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            async with lockq.aio.lock(conn, self.name + ":warm"):
                pass
            pid = conn.info.backend_pid
            os.kill(pid, signal.SIGSTOP)
            try:
                task = asyncio.ensure_future(lockq.aio.lock(conn, self.name).acquire())
                await asyncio.sleep(0.3)        # the enqueue is sent, unanswered
                task.cancel()
            finally:
                os.kill(pid, signal.SIGCONT)    # it is answered: granted
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertIsNone(self.holder(self.name), "the grant was handed back")
            await conn.execute("SELECT 1")      # and the connection works
            await conn.close()

        self.run_async(main())

    def test_a_cancel_is_never_lost(self):
        """A cancel that comes just as a statement of the wait finishes is
        raised, not swallowed: before, asyncio.wait_for (Python < 3.12)
        returned the statement's result instead, and the cancelled wait
        went on waiting for ever (1 cancel in about 60 at 0-3 ms into a
        wait; found by 309_client_matrix's cancel sweep).  300 cancels,
        each at 0-3 ms, must each end within 2 s and leave nothing
        queued."""
        async def main():
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            async with lockq.aio.lock(conn, self.name + ":warm"):
                pass
            self.take(self.name)
            lost = []
            # (another lease on the connection: the waits wait for notices,
            # not in lockq_await, whose slice a cancel would wait for)
            async with lockq.aio.lock(conn, self.name + ":other"):
                for i in range(300):
                    task = asyncio.ensure_future(
                        lockq.aio.lock(conn, self.name, ttl=3, heartbeat=0.3).acquire())
                    await asyncio.sleep((i % 4) / 1000)
                    task.cancel()
                    done, _ = await asyncio.wait({task}, timeout=2)
                    if not done:
                        lost.append(i)
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                    else:
                        self.assertTrue(task.cancelled(), "the busy lock is not granted")
            self.assertEqual(lost, [], "cancels that did not end their wait")
            self.give(self.name)
            self.wait_for_waiters(self.name, 0)
            await conn.close()

        self.run_async(main())

    def test_a_stalled_connection_bounds_every_call(self):
        """(issue 22, item 6): lock(timeout=2) within the timeout and 1 s."""
        async def main():
            self.take(self.name)
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            async with lockq.aio.lock(conn, self.name + ":warm"):
                pass
            pid = conn.info.backend_pid
            os.kill(pid, signal.SIGSTOP)
            lease = lockq.aio.lock(conn, self.name, timeout=2)
            t0 = time.monotonic()
            try:
                with self.assertRaises(lockq.LockTimeout):
                    await lease.acquire()
                self.assertLess(time.monotonic() - t0, 3.5, "timeout + 1 s")
            finally:
                os.kill(pid, signal.SIGCONT)
            await asyncio.to_thread(
                self.wait_until, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,))
            self.value("SELECT lockq_cancel(%s, %s)", (self.name, lease.owner))
            self.give(self.name)
            await conn.close()

        self.run_async(main())

    def test_release_after_the_pooled_connection_died(self):
        """(issue 22, item 13) as in test_sync."""
        async def main():
            pool = await self.pool(size=1)
            with self.assertRaises(ZeroDivisionError):
                async with lockq.aio.lock(pool, self.name, ttl=60):
                    async with pool.connection() as c:
                        pid = c.info.backend_pid
                    self.value("SELECT pg_terminate_backend(%s)", (pid,))
                    await asyncio.to_thread(
                        self.wait_until, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s",
                        (pid,))
                    1 / 0
            self.assertIsNone(self.holder(self.name), "released on another connection")
            await pool.close()

        self.run_async(main())

    def test_lost_when_an_administrator_takes_it(self):
        async def main():
            pool = await self.pool()
            conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
            for src in (pool, conn):
                with self.assertRaises(lockq.LockLost):
                    async with lockq.aio.lock(src, self.name, ttl=60) as lease:
                        self.value("SELECT lockq_force_release(%s)", (self.name,))
                        await asyncio.wait_for(lease.lost.wait(), 10)
                        self.assertFalse(lease.held)
            await conn.close()
            await pool.close()

        self.run_async(main())

    def test_notices_that_come_together_are_all_read(self):
        """A pool's listener hands on every notice of a read, not only the
        first: another notice on its channel and the "lost" notice of an
        administrator's release come in one read (the loop is busy meanwhile:
        the statements here are synchronous, and a pause follows), and the
        lease is still seen lost.  Before, the listener took one notice per
        psycopg notifies() generator and closed it, dropping the rest of the
        batch (CI met it once: the pool's probe came with a "lost")."""
        async def main():
            pool = await self.pool()
            with self.assertRaises(lockq.LockLost):
                async with lockq.aio.lock(pool, self.name, ttl=60) as lease:
                    channel = lease._src.hub.channel
                    self.value("SELECT pg_notify(%s, 'something else')", (channel,))
                    self.value("SELECT lockq_force_release(%s)", (self.name,))
                    time.sleep(0.3)         # both notices are on the socket
                    await asyncio.wait_for(lease.lost.wait(), 10)
            await pool.close()

        self.run_async(main())

    def test_lost_when_stolen_after_expiry(self):
        async def main():
            pool = await self.pool()
            lease = await lockq.aio.lock(pool, self.name, ttl=0.5, auto_renew=False).acquire()
            await asyncio.to_thread(self.value, "SELECT lockq_get(%s, 'holder', "
                                    "timeout => '10 s')", (self.name,))
            await asyncio.wait_for(lease.lost.wait(), 10)
            self.assertFalse(await lease.release())
            self.give(self.name)
            await pool.close()

        self.run_async(main())

    def test_release_on_exception(self):
        async def main():
            pool = await self.pool()
            with self.assertRaises(ZeroDivisionError):
                async with lockq.aio.lock(pool, self.name):
                    1 / 0
            self.assertIsNone(self.holder(self.name))
            await pool.close()

        self.run_async(main())

    def test_fenced_counter_exact(self):
        table = "counter_aio"
        self.admin.execute(f"CREATE TABLE {table} (n int)")
        self.addCleanup(self.admin.execute, f"DROP TABLE {table}")
        self.admin.execute(f"INSERT INTO {table} VALUES (0)")

        async def worker(pool, failures):
            for _ in range(25):
                async with lockq.aio.lock(pool, self.name, ttl=10, timeout=30) as lease:
                    async with pool.connection() as c, c.transaction():
                        n = (await (await c.execute(f"SELECT n FROM {table}")).fetchone())[0]
                        await asyncio.sleep(0)      # let the others run in between
                        cur = await c.execute(
                            f"UPDATE {table} SET n = %s WHERE lockq_holds(%s, %s)",
                            (n + 1, self.name, lease.token))
                        if cur.rowcount != 1:
                            failures.append(lease.token)

        async def main():
            pool = await self.pool(4)
            failures = []
            await asyncio.gather(*(worker(pool, failures) for _ in range(4)))
            await pool.close()
            return failures

        self.assertEqual(self.run_async(main()), [])
        self.assertEqual(self.value(f"SELECT n FROM {table}"), 100, "no lost update")


if __name__ == "__main__":
    unittest.main()

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""lockq.lock against a real server: FIFO, timeout, cancel, renewals, lost
leases, fencing, release on exceptions, with a connection and with a pool."""

import gc
import os
import signal
import threading
import time
import unittest

import psycopg
from psycopg_pool import ConnectionPool

import lockq
from support import DSN, LockqTestCase


def cont(pid):
    """SIGCONT, if it is still there."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class SyncTest(LockqTestCase):

    def setUp(self):
        super().setUp()
        # small on purpose: waiting must not keep a pooled connection
        self.pool = ConnectionPool(DSN, min_size=1, max_size=2, open=True)
        self.addCleanup(self.pool.close)

    def take(self, lock_id, owner="holder"):
        """The other side: owner takes lock_id from SQL for an hour."""
        self.assertIsNotNone(self.value("SELECT lockq_try(%s, %s, '1 hour')", (lock_id, owner)))

    def give(self, lock_id, owner="holder"):
        self.assertTrue(self.value("SELECT lockq_release(%s, %s)", (lock_id, owner)))

    def start(self, target):
        t = threading.Thread(target=target)
        t.start()
        self.addCleanup(t.join, 30)
        return t

    def test_fifo_with_a_pool_of_two(self):
        self.take(self.name)
        order = []

        def waiter(i):
            with lockq.lock(self.pool, self.name, timeout=30) as lease:
                with self.pool.connection() as c:      # the body needs one too
                    c.execute("SELECT 1")
                order.append((i, lease.token))

        threads = []
        for i in range(5):
            threads.append(self.start(lambda i=i: waiter(i)))
            self.wait_for_waiters(self.name, i + 1)
        self.give(self.name)
        for t in threads:
            t.join(30)
        self.assertEqual([i for i, _ in order], list(range(5)), "granted in arrival order")
        tokens = [tok for _, tok in order]
        self.assertEqual(tokens, sorted(tokens), "tokens increase")

    def test_fifo_with_connections_and_an_sql_waiter(self):
        self.take(self.name)
        order = []
        conns = [psycopg.connect(DSN, autocommit=True) for _ in range(2)]
        for c in conns:
            self.addCleanup(c.close)

        # (the grant order is the tokens' order: the order the threads get
        # to run after their grants is not, as the SQL waiter's statement
        # also releases, and the next waiter may be told first)
        def waiter(i, conn):
            with lockq.lock(conn, self.name, timeout=30) as lease:
                order.append((lease.token, i))

        t0 = self.start(lambda: waiter(0, conns[0]))
        self.wait_for_waiters(self.name, 1)
        sql = psycopg.connect(DSN, autocommit=True)     # a blocking lockq_get
        self.addCleanup(sql.close)
        t1 = self.start(lambda: order.append((sql.execute(
            "WITH g AS (SELECT lockq_get(%s, 'sqlw', timeout => '30 s') AS t)"
            " SELECT t FROM g WHERE lockq_release(%s, 'sqlw', t)",
            (self.name, self.name)).fetchone()[0], 1)))
        self.wait_for_waiters(self.name, 2)
        t2 = self.start(lambda: waiter(2, conns[1]))
        self.wait_for_waiters(self.name, 3)
        self.give(self.name)
        for t in (t0, t1, t2):
            t.join(30)
        self.assertEqual([i for _, i in sorted(order)], [0, 1, 2],
                         "one queue with lockq_get callers")

    def test_timeout(self):
        self.take(self.name)
        t0 = time.monotonic()
        with self.assertRaises(lockq.LockTimeout):
            with lockq.lock(self.pool, self.name, timeout=0.5):
                self.fail("granted")
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)
        self.give(self.name)

    def test_timeout_zero_never_queues(self):
        self.take(self.name)
        self.take(self.name + "q", "q")
        with self.assertRaises(lockq.LockTimeout):
            lockq.lock(self.pool, self.name, timeout=0).acquire()
        self.give(self.name)
        with lockq.lock(self.pool, self.name, timeout=0) as lease:
            self.assertTrue(self.holds(self.name, lease.token))
        self.give(self.name + "q", "q")

    def test_cancel(self):
        self.take(self.name)
        cancel = threading.Event()
        raised = []

        def waiter():
            try:
                lockq.lock(self.pool, self.name, cancel=cancel).acquire()
            except lockq.LockCancelled as e:
                raised.append(e)

        t = self.start(waiter)
        self.wait_for_waiters(self.name, 1)
        cancel.set()
        t.join(30)
        self.assertEqual(len(raised), 1, "LockCancelled")
        self.wait_for_waiters(self.name, 0)
        self.give(self.name)

    def test_heartbeats_keep_a_long_wait(self):
        self.take(self.name)
        dropped = self.value("SELECT dropped_waiters FROM lockq_stats")
        got = []
        t = self.start(lambda: got.append(
            lockq.lock(self.pool, self.name, heartbeat=0.6).acquire()))
        self.wait_for_waiters(self.name, 1)
        time.sleep(2.0)                 # over three heartbeat intervals
        self.wait_for_waiters(self.name, 1)
        self.give(self.name)
        t.join(30)
        self.assertTrue(got[0].held)
        self.assertTrue(got[0].release())
        self.assertEqual(self.value("SELECT dropped_waiters FROM lockq_stats"), dropped)

    def test_reentrant_same_owner(self):
        """An inner block of the same explicit owner joins the grant: its
        short ttl and its exit neither shorten nor end the outer lease
        (issue 22, item 2)."""
        for src in (self.pool, psycopg.connect(DSN, autocommit=True)):
            with lockq.lock(src, self.name, owner="me", ttl=30) as outer:
                with lockq.lock(src, self.name, owner="me", ttl=1) as inner:
                    self.assertEqual(inner.token, outer.token, "one grant, one token")
                    time.sleep(1.5)             # past the inner ttl
                    self.assertTrue(inner.held)
                self.assertFalse(inner.held, "the inner lease has left")
                self.assertTrue(outer.held, "the outer still holds")
                self.assertEqual(self.holder(self.name), "me", "and so says the server")
                self.assertTrue(self.holds(self.name, outer.token))
            self.assertIsNone(self.holder(self.name), "released when the outer exits")
            if src is not self.pool:
                src.close()

    def test_statements_are_not_prepared(self):
        """psycopg prepares a statement after 5 runs (prepare_threshold);
        behind a transaction pooler the next server connection lacks it.
        The client's statements are never prepared (issue 22, item 4)."""
        conn = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(conn.close)
        with lockq.lock(conn, self.name, ttl=0.3) as lease:
            time.sleep(1.5)                     # about 15 renewals
            self.assertTrue(lease.held)
            n = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
        self.assertEqual(n, 0, "nothing prepared on the connection")

    def test_dropped_connections_are_closed(self):
        """A connection the application drops after using it with lockq is
        closed, and its backend ends (issue 22, item 10)."""
        app = "lockq-drop-" + self.name[-20:]
        for _ in range(10):
            conn = psycopg.connect(DSN, autocommit=True, application_name=app)
            with lockq.lock(conn, self.name):
                pass
            del conn
        gc.collect()
        self.wait_until("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = %s",
                        (app,))

    def stop_backend(self, conn):
        """SIGSTOPs conn's backend (continued at cleanup): a stalled
        connection, as a host that vanished without a reset."""
        pid = conn.info.backend_pid
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(cont, pid)
        return pid

    def test_a_stalled_connection_bounds_every_call(self):
        """lock(timeout=2) returns within the timeout and 1 s, release()
        within io_timeout, however the connection stalls (issue 22,
        item 6)."""
        self.take(self.name)
        conn = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(conn.close)
        with lockq.lock(conn, self.name + ":warm"):
            pass                        # lockq knows the connection
        pid = self.stop_backend(conn)
        lease = lockq.lock(conn, self.name, timeout=2)
        t0 = time.monotonic()
        with self.assertRaises(lockq.LockTimeout):
            lease.acquire()
        self.assertLess(time.monotonic() - t0, 3.5, "timeout + 1 s")
        os.kill(pid, signal.SIGCONT)
        self.wait_until("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,))
        self.value("SELECT lockq_cancel(%s, %s)", (self.name, lease.owner))
        self.give(self.name)

        conn2 = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(conn2.close)
        lease = lockq.lock(conn2, self.name, io_timeout=2).acquire()
        self.stop_backend(conn2)
        t0 = time.monotonic()
        with self.assertRaises(psycopg.OperationalError):
            lease.release()
        self.assertLess(time.monotonic() - t0, 2.5, "io_timeout")
        self.value("SELECT lockq_force_release(%s)", (self.name,))

    def test_a_stalled_pooled_connection_is_replaced(self):
        """A pooled connection that stalls during a wait is broken (the pool
        discards it) and the wait goes on on a new one (issue 22, items 6
        and 13)."""
        pool = ConnectionPool(DSN, min_size=1, max_size=1, open=True)
        self.addCleanup(pool.close)
        with lockq.lock(pool, self.name + ":warm"):
            pass
        with pool.connection() as c:
            pid = self.stop_backend(c)
        t0 = time.monotonic()
        with lockq.lock(pool, self.name, timeout=10, owner="stalled") as lease:
            self.assertTrue(lease.held)
        self.assertLess(time.monotonic() - t0, 10 / 3 + 2, "a third of the heartbeat and a reconnect")
        # the stopped backend may still run the enqueue it had read: take it back
        cont(pid)
        self.wait_until("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,))
        self.value("SELECT lockq_cancel(%s, 'stalled')", (self.name,))

    def test_release_after_the_pooled_connection_died(self):
        """The release goes out on another pooled connection when the one it
        got is dead (a switchover, a terminated backend): the lock is free
        at once, not at the end of the lease (issue 22, item 13)."""
        pool = ConnectionPool(DSN, min_size=1, max_size=1, open=True)
        self.addCleanup(pool.close)
        with self.assertRaises(ZeroDivisionError):
            with lockq.lock(pool, self.name, ttl=60):
                with pool.connection() as c:
                    pid = c.info.backend_pid
                self.value("SELECT pg_terminate_backend(%s)", (pid,))
                self.wait_until("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,))
                1 / 0                   # the work failed too
        self.assertIsNone(self.holder(self.name), "released on another connection")

    def test_auto_renew_keeps_a_short_lease(self):
        with lockq.lock(self.pool, self.name, ttl=1.5) as lease:
            token = lease.token
            time.sleep(4)
            self.assertTrue(lease.held)
            self.assertFalse(lease.lost.is_set())
            self.assertTrue(self.holds(self.name, token), "the server agrees")
        self.assertEqual(lease.token, token)
        self.assertIsNone(self.holder(self.name), "released on exit")

    def test_release_during_a_renewal(self):
        """A renewal whose answer comes after release() has begun must not
        release the grant itself: release() would then find it gone and
        report the lease lost."""
        lease = lockq.lock(self.pool, self.name, ttl=1.5).acquire()
        real_perform, real_renew = lease._perform, lease._g_renew
        renewed, releasing, acted = threading.Event(), threading.Event(), threading.Event()

        def perform(effect):
            name = getattr(effect, "name", None)
            if name == "renew" and not releasing.is_set():
                out = real_perform(effect)
                renewed.set()
                releasing.wait(10)      # answer only once release() began
                return out
            if name == "release" and threading.current_thread() is threading.main_thread():
                releasing.set()
                # the renewal acts on its answer, seeing release() begun:
                # whatever it does goes before this release
                self.assertTrue(acted.wait(10), "the renewal acted on its answer")
            return real_perform(effect)

        def renew():
            try:
                return (yield from real_renew())
            finally:
                if releasing.is_set():
                    acted.set()

        lease._perform = perform
        lease._g_renew = renew
        self.assertTrue(renewed.wait(10), "a renewal ran")
        self.assertTrue(lease.release(), "released while held")
        self.assertFalse(lease.lost.is_set())
        self.assertIsNone(self.holder(self.name))

    def test_extend_and_remaining(self):
        """extend() renews now for a new ttl, which later renewals keep;
        remaining counts down to the local deadline and is 0 once released."""
        with lockq.lock(self.pool, self.name, ttl=2, auto_renew=False) as lease:
            self.assertGreater(lease.remaining, 1.0)
            self.assertLessEqual(lease.remaining, 2.0)
            lease.extend(60)
            self.assertGreater(lease.remaining, 55)
            self.assertTrue(self.value(
                "SELECT expires > now() + interval '50 s' FROM lockq_locks WHERE lock_id = %s",
                (self.name,)), "the server has the new lease")
            time.sleep(2.5)             # past the first ttl: still held
            self.assertTrue(lease.held)
        self.assertEqual(lease.remaining, 0.0)
        with self.assertRaises(lockq.LockLost):
            lease.extend()

    def test_a_shorter_extend_announces_the_loss_earlier(self):
        """extend() with a shorter ttl moves the local deadline earlier, and
        the watchdog sets lost at the new deadline, not the old one."""
        lease = lockq.lock(self.pool, self.name, ttl=60, auto_renew=False).acquire()
        lease.extend(0.5)
        self.assertLessEqual(lease.remaining, 0.5)
        start = time.monotonic()
        self.assertTrue(threading.Event.wait(lease.lost, 10), "the watchdog set lost")
        self.assertLess(time.monotonic() - start, 5)
        with self.assertRaises(lockq.LockLost):
            lease.__exit__(None, None, None)

    def test_no_thread_per_lease(self):
        """Thirty held leases, renewed every half second, add a handful of
        threads (the keeper, its workers, the watchdog, the pool's
        listener), not thirty."""
        before = threading.active_count()
        leases = [lockq.lock(self.pool, "%s-%d" % (self.name, i), ttl=1.5).acquire()
                  for i in range(30)]
        try:
            time.sleep(2.5)             # five renewals each
            self.assertTrue(all(lease.held for lease in leases), "renewals kept them all")
            self.assertTrue(all(self.holds(lease.lock_id, lease.token) for lease in leases))
            self.assertLessEqual(threading.active_count() - before, 8,
                                 [t.name for t in threading.enumerate()])
        finally:
            for lease in leases:
                lease.release()

    def test_forget_keeps_the_grant(self):
        """forget() stops renewing and watching without releasing: the block
        exits quietly, the grant stays with its owner, and, renewed by
        nobody, it ends at its ttl."""
        owner = self.name + "-owner"
        with lockq.lock(self.pool, self.name, ttl=1.5, owner=owner) as lease:
            lease.forget()
            self.assertFalse(lease.held)
            self.assertEqual(lease.remaining, 0.0)
        self.assertEqual(self.holder(self.name), owner, "still granted after the block")
        self.wait_until("SELECT NOT EXISTS (SELECT FROM lockq_locks WHERE lock_id = %s)",
                        (self.name,))

    def test_extend_refused_and_logged(self):
        """A lease taken away cannot be extended: LockLost, and the "lockq"
        logger says why, once."""
        lease = lockq.lock(self.pool, self.name, ttl=60).acquire()
        with self.assertLogs("lockq", "WARNING") as logs:
            self.assertTrue(self.value("SELECT lockq_force_release(%s)", (self.name,)))
            with self.assertRaises(lockq.LockLost):
                lease.extend(30)
            self.assertFalse(lease.held)
            self.assertFalse(lease.release())
        lost = [m for m in logs.output if "was lost" in m]
        self.assertEqual(len(lost), 1, logs.output)
        self.assertIn(repr(self.name), lost[0])

    def test_a_failed_renewal_is_logged(self):
        """A renewal that fails leaves a WARNING on the "lockq" logger (and
        the lease, whose deadline is still ahead, is kept)."""
        lease = lockq.lock(self.pool, self.name, ttl=1.5).acquire()
        real_perform = lease._perform
        failed = threading.Event()

        def perform(effect):
            if getattr(effect, "name", None) == "renew" and not failed.is_set():
                failed.set()
                raise psycopg.OperationalError("injected")
            return real_perform(effect)

        with self.assertLogs("lockq", "WARNING") as logs:
            lease._perform = perform
            self.assertTrue(failed.wait(10))
            time.sleep(1.0)             # the retry renews it
            self.assertTrue(lease.held)
            self.assertTrue(lease.release())
        self.assertTrue(any("renewing the lease on %r" % self.name in m and "injected" in m
                            for m in logs.output), logs.output)

    def assert_lost(self, lease):
        self.assertTrue(lease.lost.wait(10), "lease.lost is set")
        self.assertFalse(lease.held)
        with self.assertRaises(lockq.LockLost):
            lease.check()

    def test_lost_when_an_administrator_takes_it_pool(self):
        with self.assertRaises(lockq.LockLost):
            with lockq.lock(self.pool, self.name, ttl=60) as lease:
                self.assertTrue(self.value("SELECT lockq_force_release(%s)", (self.name,)))
                self.assert_lost(lease)

    def test_lost_when_an_administrator_takes_it_connection(self):
        conn = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(conn.close)
        with self.assertRaises(lockq.LockLost):
            with lockq.lock(conn, self.name, ttl=60) as lease:
                self.assertTrue(self.value("SELECT lockq_force_release(%s)", (self.name,)))
                self.assert_lost(lease)

    def test_lost_when_stolen_after_expiry(self):
        lease = lockq.lock(self.pool, self.name, ttl=0.5, auto_renew=False).acquire()
        self.assertIsNotNone(self.value("SELECT lockq_get(%s, 'thief', timeout => '10 s')",
                                        (self.name,)))
        self.assert_lost(lease)
        self.assertFalse(lease.release(), "release after loss says so")
        self.give(self.name, "thief")

    def test_release_on_exception(self):
        with self.assertRaises(ZeroDivisionError):
            with lockq.lock(self.pool, self.name) as lease:
                self.assertEqual(self.holder(self.name), lease.owner)
                1 / 0
        self.assertIsNone(self.holder(self.name))

    def test_fenced_counter_exact(self):
        table = "counter_sync"
        self.admin.execute(f"CREATE TABLE {table} (n int)")
        self.addCleanup(self.admin.execute, f"DROP TABLE {table}")
        self.admin.execute(f"INSERT INTO {table} VALUES (0)")
        pool = ConnectionPool(DSN, min_size=4, max_size=4, open=True)
        self.addCleanup(pool.close)
        failures = []

        def worker():
            for _ in range(25):
                with lockq.lock(pool, self.name, ttl=10, timeout=30) as lease:
                    with pool.connection() as c, c.transaction():
                        n = c.execute(f"SELECT n FROM {table}").fetchone()[0]
                        cur = c.execute(f"UPDATE {table} SET n = %s WHERE lockq_holds(%s, %s)",
                                        (n + 1, self.name, lease.token))
                        if cur.rowcount != 1:
                            failures.append(lease.token)

        threads = [self.start(worker) for _ in range(4)]
        for t in threads:
            t.join(60)
        self.assertEqual(failures, [])
        self.assertEqual(self.value(f"SELECT n FROM {table}"), 100, "no lost update")

    def test_no_search_path_needed(self):
        conn = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(conn.close)
        conn.execute("SET search_path = ''")
        with lockq.lock(conn, self.name) as lease:
            self.assertEqual(self.holder(self.name), lease.owner)

    def test_connection_must_autocommit(self):
        conn = psycopg.connect(DSN)
        self.addCleanup(conn.close)
        with self.assertRaises(ValueError):
            lockq.lock(conn, self.name)


if __name__ == "__main__":
    unittest.main()

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""What both test modules share: the server under test (LOCKQ_TEST_DSN, set
by test/t/401_python.pl) and an administrator's connection to look at the
lock views and play the other side."""

import os
import time
import unittest

import psycopg

DSN = os.environ.get("LOCKQ_TEST_DSN", "")
POLL = 0.01
PATIENCE = 30.0                 # seconds before a condition is given up on


class LockqTestCase(unittest.TestCase):
    """Each test gets an autocommit admin connection; names are per test."""

    def setUp(self):
        if not DSN:
            self.skipTest("LOCKQ_TEST_DSN is not set (run test/t/401_python.pl)")
        self.admin = psycopg.connect(DSN, autocommit=True)
        self.name = self.id().rsplit(".", 1)[-1]
        self.addCleanup(self._check_and_close)     # runs after the test's cleanups

    def _check_and_close(self):
        left = self.value("SELECT count(*) FROM lockq_waiters WHERE lock_id LIKE %s",
                          (self.name + "%",))
        self.admin.close()
        self.assertEqual(left, 0, "nothing left queued")

    def value(self, query, params=()):
        return self.admin.execute(query, params).fetchone()[0]

    def wait_until(self, query, params=()):
        """Polls query until it returns true."""
        give_up = time.monotonic() + PATIENCE
        while not self.value(query, params):
            if time.monotonic() > give_up:
                self.fail("condition never held: " + query)
            time.sleep(POLL)

    def wait_for_waiters(self, lock_id, n):
        self.wait_until("SELECT count(*) = %s FROM lockq_waiters WHERE lock_id = %s",
                        (n, lock_id))

    def holder(self, lock_id):
        return self.value("SELECT (SELECT owner FROM lockq_locks WHERE lock_id = %s)",
                          (lock_id,))

    def holds(self, lock_id, token):
        return self.value("SELECT lockq_holds(%s, %s)", (lock_id, token))

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""The NOTIFY payload parser, the names the client makes, and the lease's
protocol core fed its answers by hand (no server)."""

import threading
import time
import unittest

import psycopg
from psycopg import errors

from lockq import LockTimeout, Notice, parse_notice
from lockq._core import LeaseCore, LostFlag, Run, Shielded, Sleep
from lockq._protocol import new_channel, new_owner, statements


class ParseNotice(unittest.TestCase):

    def test_fields(self):
        self.assertEqual(parse_notice("grant 42 4 jobs host:1:2:ab"),
                         Notice("grant", 42, "jobs", "host:1:2:ab"))

    def test_lock_id_with_spaces(self):
        self.assertEqual(parse_notice("lost 7 5 a b c o w n"), Notice("lost", 7, "a b c", "o w n"))

    def test_length_counts_bytes(self):
        # "é" is 2 bytes in UTF-8: a length of 1 would cut it in half
        self.assertEqual(parse_notice("grant 1 4 réz o"), Notice("grant", 1, "réz", "o"))
        self.assertIsNone(parse_notice("grant 1 3 réz o"))
        self.assertEqual(parse_notice(b"dropped 0 2 \xc3\xa9 x"), Notice("dropped", 0, "é", "x"))

    def test_garbage(self):
        for bad in ["", "grant", "grant 1 1 a", "grant x 1 a o", "grant 1 0  o",
                    "grant 1 2 a o", "granted 1 1 a o", "grant 1 -1 a o",
                    "grant 1 256 " + "a" * 256 + " o", "grant 1 1 a " + "o" * 256]:
            self.assertIsNone(parse_notice(bad), bad)


class Names(unittest.TestCase):

    def test_owner_unique(self):
        self.assertNotEqual(new_owner(), new_owner())
        self.assertEqual(len(new_owner().split(":")), 4)

    def test_channel_survives_unquoted_listen(self):
        c = new_channel()
        self.assertEqual(c, c.lower())

    def test_statements_quote_the_schema(self):
        sql = statements('we"ird%')["renew"]
        self.assertIn('"we""ird%%".lockq_renew(', sql)
        self.assertIn("make_interval(secs => %s::pg_catalog.float8)", sql)
        self.assertNotIn("search_path", sql)


class _Lost(LostFlag, threading.Event):
    pass


class _Source:
    """What LeaseCore asks of a source: its hub's channel and registry,
    whether it pools connections, whether a wait waits in its backend."""
    pooled = False

    def __init__(self):
        self.hub = self
        self.channel = "lockq_core_test"
        self.registered = []

    def register(self, lease):
        self.registered.append(lease)

    def unregister(self, lease):
        self.registered.remove(lease)

    def awaiting(self, lease):
        return False


class _Lease(LeaseCore):
    def __init__(self, **kw):
        super().__init__("job", ttl=30, owner="me", auto_renew=False, io_timeout=1, **kw)
        self.lost = _Lost(self)
        self._src = _Source()
        self._wake = threading.Event()
        self.kept_from = None

    def _start_keeping(self, due):
        self.kept_from = due


class Core(unittest.TestCase):
    """The decisions both clients share (lockq._core), step by step: what
    the lease sends next given what the server answered."""

    def expect(self, effect, name):
        self.assertIsInstance(effect, Run)
        self.assertEqual(effect.name, name)
        return effect

    def test_a_dropped_wait_queues_again(self):
        lease = _Lease(timeout=None, heartbeat=10)
        gen = lease._g_acquire()
        run = self.expect(next(gen), "enqueue")
        self.assertEqual(run.params, ("job", "me", 30.0, "lockq_core_test", 10.0))
        self.assertIsInstance(gen.send(None), Sleep)        # queued, not granted
        lease._wake.set()                                   # a notice: ask now
        self.expect(gen.send(None), "heartbeat")
        # the server dropped the wait (55000): it queues again, at the back
        self.expect(gen.throw(errors.ObjectNotInPrerequisiteState("dropped")), "enqueue")
        with self.assertRaises(StopIteration) as done:
            gen.send(7)
        self.assertIs(done.exception.value, lease)
        self.assertEqual(lease.token, 7)
        self.assertEqual(lease._src.registered, [lease])
        self.assertEqual(lease.kept_from, float("inf"), "auto_renew=False: never due")
        self.assertTrue(lease.held)
        self.assertGreater(lease.remaining, 29)

    def test_a_timeout_withdraws(self):
        lease = _Lease(timeout=0.05, heartbeat=10)
        gen = lease._g_acquire()
        self.expect(next(gen), "enqueue")
        sleep = gen.send(None)
        self.assertIsInstance(sleep, Sleep)
        self.assertLessEqual(sleep.until, time.monotonic() + 0.05, "not past the timeout")
        time.sleep(max(0.0, sleep.until - time.monotonic()))
        shielded = gen.send(None)
        self.assertIsInstance(shielded, Shielded, "the wait is withdrawn, whatever cancels")
        self.expect(next(shielded.gen), "cancel")
        with self.assertRaises(StopIteration):
            shielded.gen.send(True)
        with self.assertRaises(LockTimeout):
            gen.send(None)
        self.assertEqual(lease._src.registered, [], "nothing left registered")
        self.assertIsNone(lease.token)

    def test_an_unreachable_server_is_retried_for_a_heartbeat_interval(self):
        lease = _Lease(timeout=None, heartbeat=0.6)
        gen = lease._g_acquire()
        effect = next(gen)
        start = time.monotonic()
        tries = 0
        while isinstance(effect, Run) and effect.name == "enqueue":
            tries += 1
            self.assertLessEqual(effect.bound, 0.6 / 3 + 1e-9, "a statement's bound")
            effect = gen.throw(psycopg.OperationalError("unreachable"))
            if isinstance(effect, Sleep):
                time.sleep(max(0.0, effect.until - time.monotonic()))
                effect = gen.send(None)
        self.assertGreater(time.monotonic() - start, 0.6, "retried for the heartbeat interval")
        self.assertGreaterEqual(tries, 2)
        self.assertIsInstance(effect, Shielded)
        self.expect(next(effect.gen), "cancel")
        with self.assertLogs("lockq", "WARNING") as logs, self.assertRaises(StopIteration):
            effect.gen.throw(psycopg.OperationalError("unreachable"))   # not pooled: no retry
        self.assertIn("withdrawing the wait for 'job' failed", logs.output[0])
        with self.assertRaises(psycopg.OperationalError):
            gen.send(None)


if __name__ == "__main__":
    unittest.main()

# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""The NOTIFY payload parser and the names the client makes (no server)."""

import unittest

from lockq import Notice, parse_notice
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


if __name__ == "__main__":
    unittest.main()

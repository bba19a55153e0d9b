-- test/soak/durable.sql -- make soak: contended locks with explicit owners.
--
-- A critical section on one of the hot locks soak/hot/1..H: take it with an
-- owner of our own (a row in lockq.owners), read the lock's counter, write
-- it back plus one in a transaction fenced with lockq_holds (and count the
-- write in soak_done in that same transaction), now and then renew the
-- lease, release.  The read and the write are separate statements, so two
-- holders that overlapped would lose an update.  Every grant inserts a row
-- into lockq.owners and every release deletes it: this is the workload that
-- bloats the table if autovacuum does not keep up.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
\set k random(1, :nhot)
SELECT lockq_get('soak/hot/' || :k, 'soak-d-' || :client_id, '10 seconds') AS tok \gset
BEGIN;
SELECT value AS v FROM soak_counter WHERE id = 'soak/hot/' || :k \gset
WITH w AS (UPDATE soak_counter SET value = :v + 1
            WHERE id = 'soak/hot/' || :k AND lockq_holds('soak/hot/' || :k, :tok)
        RETURNING 1)
UPDATE soak_done SET n = n + 1 FROM w
 WHERE kind = 'd' AND client = :client_id AND id = 'soak/hot/' || :k;
COMMIT;
\set r random(1, 10)
\if :r = 1
SELECT lockq_renew('soak/hot/' || :k, 'soak-d-' || :client_id, :tok);
\endif
SELECT lockq_release('soak/hot/' || :k, 'soak-d-' || :client_id, :tok);

-- test/soak/client.sql -- make soak: client-side waiters and lockq_try.
--
-- First a lockq_try (and release) on a random key among soak/key/1..1000
-- (rows come and go in lockq.owners for many different locks).  Then a
-- client-side wait on one of the hot locks of durable.sql, in the same FIFO
-- queue as its lockq_get callers: lockq_enqueue (a row in lockq.queue),
-- a short pause, lockq_heartbeat; if granted by then, the fenced critical
-- section of durable.sql (counted as kind 'w') and a release, otherwise
-- lockq_cancel (which also releases a grant that raced with it).
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
\set keyno random(1, 1000)
SELECT coalesce(lockq_try('soak/key/' || :keyno, 'soak-t-' || :client_id, '10 seconds'), 0) AS t \gset
\if :t > 0
SELECT lockq_release('soak/key/' || :keyno, 'soak-t-' || :client_id, :t);
\endif
\set k random(1, :nhot)
SELECT coalesce(lockq_enqueue('soak/hot/' || :k, 'soak-w-' || :client_id, '10 seconds',
                              NULL, '5 seconds'), 0) AS tok \gset
\if :tok = 0
\sleep 5 ms
SELECT coalesce(lockq_heartbeat('soak/hot/' || :k, 'soak-w-' || :client_id), 0) AS tok \gset
\endif
\if :tok = 0
SELECT lockq_cancel('soak/hot/' || :k, 'soak-w-' || :client_id);
\else
BEGIN;
SELECT value AS v FROM soak_counter WHERE id = 'soak/hot/' || :k \gset
WITH w AS (UPDATE soak_counter SET value = :v + 1
            WHERE id = 'soak/hot/' || :k AND lockq_holds('soak/hot/' || :k, :tok)
        RETURNING 1)
UPDATE soak_done SET n = n + 1 FROM w
 WHERE kind = 'w' AND client = :client_id AND id = 'soak/hot/' || :k;
COMMIT;
SELECT lockq_release('soak/hot/' || :k, 'soak-w-' || :client_id, :tok);
\endif

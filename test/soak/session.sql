-- test/soak/session.sql -- make soak: contended session-bound locks.
--
-- The same critical section as durable.sql on soak/sess/1..S, but with
-- owner NULL: the grant lives in shared memory (lockq_session_grants), its
-- fence is a count there, and the release is answered by the session.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
\set k random(1, :nsess)
SELECT lockq_get('soak/sess/' || :k) AS tok \gset
BEGIN;
SELECT value AS v FROM soak_counter WHERE id = 'soak/sess/' || :k \gset
WITH w AS (UPDATE soak_counter SET value = :v + 1
            WHERE id = 'soak/sess/' || :k AND lockq_holds('soak/sess/' || :k, :tok)
        RETURNING 1)
UPDATE soak_done SET n = n + 1 FROM w
 WHERE kind = 's' AND client = :client_id AND id = 'soak/sess/' || :k;
COMMIT;
SELECT lockq_release('soak/sess/' || :k, NULL, :tok);

--
-- lockq_session: locks bound to the session (owner NULL) are kept in
-- shared memory, not in lockq.owners; they show in lockq_locks, fence like
-- any grant, and their release is answered by the session itself.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
SELECT lockq_try('s1') AS t1 \gset
SELECT lock_id, owner = lockq_session_owner() AS mine,
	   session_pid = pg_backend_pid() AS my_pid, token = :t1 AS same_token
  FROM lockq_locks WHERE lock_id = 's1';
SELECT count(*) AS rows_in_table FROM lockq.owners WHERE lock_id = 's1';

-- fencing on a session-bound grant
BEGIN;
SELECT lockq_holds('s1', :t1) AS fenced;
SELECT lockq_holds('s1', :t1 + 1) AS other_token, lockq_holds('s2', :t1) AS other_lock;
COMMIT;

-- re-entrant: the same token, still one grant
SELECT lockq_get('s1') = :t1 AS reentrant_same_token;
SELECT count(*) FROM lockq_locks WHERE lock_id = 's1';

-- release: true once, then false; gone at once from the view and for fencing
SELECT lockq_release('s1') AS released;
SELECT count(*) AS left_in_view FROM lockq_locks WHERE lock_id = 's1';
SELECT lockq_holds('s1', :t1) AS holds_after_release;
SELECT lockq_release('s1') AS released_again;

-- a wrong token releases nothing
SELECT lockq_try('s2') AS t2 \gset
SELECT lockq_release('s2', NULL, :t2 + 1) AS wrong_token;
SELECT lockq_holds('s2', :t2) AS still_held;
SELECT lockq_release('s2', NULL, :t2) AS right_token;
SELECT lockq_holds('s2', :t2) AS held_after;

-- released and taken again at once, many times: each grant a new token
SELECT count(DISTINCT t) AS distinct_tokens, bool_and(r) AS all_released
  FROM (SELECT lockq_try('s3') AS t, lockq_release('s3') AS r
		  FROM generate_series(1, 200)) s;
SELECT count(*) AS nothing_left FROM lockq_locks WHERE lock_id LIKE 's%';

-- renew: a new lease end (the grant's own ttl stays), still in shared memory
SELECT lockq_try('s4', NULL, '10 s') AS t4 \gset
SELECT lockq_renew('s4', NULL, :t4, '1 hour') AS renewed;
SELECT ttl = '10 s' AS own_ttl_unchanged,
	   expires > now() + interval '50 minutes' AS lease_renewed
  FROM lockq_locks WHERE lock_id = 's4';
SELECT count(*) AS rows_in_table FROM lockq.owners;
SELECT lockq_release('s4');

-- DISCARD ALL ends the session's session-bound locks, as it does advisory
-- locks (a session pooler's reset), but not grants with an owner
SELECT lockq_try('s5') AS t5, lockq_try('s6') AS t6, lockq_try('s7', 'explicit-owner') AS t7 \gset
SELECT pg_advisory_lock(4242);
SELECT session_releases AS sr0 FROM lockq_stats \gset
DISCARD ALL;
SELECT lock_id, owner FROM lockq_locks WHERE lock_id IN ('s5', 's6', 's7') ORDER BY lock_id;
SELECT lockq_holds('s5', :t5) AS holds_s5, lockq_holds('s6', :t6) AS holds_s6,
	   lockq_holds('s7', :t7) AS holds_s7;
SELECT count(*) AS advisory_left FROM pg_locks WHERE locktype = 'advisory';
SELECT session_releases - :sr0 AS ended_by_discard FROM lockq_stats;
-- the released locks can be taken again, under new tokens; release works
SELECT lockq_try('s5') > :t6 AS new_token;
SELECT lockq_release('s5') AS released_after_discard;
SELECT lockq_release('s7', 'explicit-owner') AS explicit_still_held;
-- DISCARD ALL with nothing held
DISCARD ALL;
SELECT count(*) AS nothing_left FROM lockq_locks;
-- DISCARD ALL cannot run in a transaction block (nothing is released)
SELECT lockq_try('s8') IS NOT NULL AS taken;
BEGIN;
DISCARD ALL;
ROLLBACK;
SELECT count(*) AS still_held FROM lockq_locks WHERE lock_id = 's8';
SELECT lockq_release('s8');

-- a session-bound grant whose own statement fails is released (the caller
-- never saw its token; so is one a cancel hits just after lockq_get
-- returned); one taken by an earlier statement survives the ROLLBACK
SELECT grants AS g0 FROM lockq_stats \gset
SELECT lockq_try('s9'), 1 / (0 * random())::int;
SELECT grants - :g0 AS granted_then_failed FROM lockq_stats;
SELECT count(*) AS s9_released FROM lockq_locks WHERE lock_id = 's9';
BEGIN;
SELECT lockq_try('s10') IS NOT NULL AS taken;
SELECT 1/0;
ROLLBACK;
SELECT count(*) AS s10_survives FROM lockq_locks WHERE lock_id = 's10';
SELECT lockq_release('s10');
-- several statements in one query string (one implicit transaction): the
-- grant of a statement that completed survives a later statement's error;
-- the grant of the statement that fails is released
SELECT lockq_get('mq1') IS NOT NULL AS mq1_taken \; SELECT 1 / 0 AS fails;
SELECT count(*) AS mq1_survives FROM lockq_locks WHERE lock_id = 'mq1';
SELECT lockq_release('mq1') AS mq1_released;
SELECT 1 AS first \; SELECT lockq_get('mq2'), 1 / (0 * random())::int;
SELECT count(*) AS mq2_released FROM lockq_locks WHERE lock_id = 'mq2';
-- a grant made inside a procedure call survives a later statement's error
CREATE PROCEDURE lq_take(l text) LANGUAGE plpgsql AS $$
BEGIN PERFORM lockq_get(l); END $$;
CALL lq_take('mq3') \; SELECT 1 / 0 AS fails;
SELECT count(*) AS mq3_survives FROM lockq_locks WHERE lock_id = 'mq3';
SELECT lockq_release('mq3') AS mq3_released;
DROP PROCEDURE lq_take(text);

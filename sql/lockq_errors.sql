--
-- lockq_errors: bad input gets a clear error (or the documented false/NULL)
-- and changes nothing: not the tables, not the lock server's counters (the
-- request never reaches it).
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
-- A lock held and a waiter queued, so that there is state to disturb.
SELECT lockq_try('held', 'holder', '1 hour') IS NOT NULL AS held;
SELECT lockq_enqueue('held', 'client-1', '1 hour', NULL, '1 hour') IS NULL AS queued;
CREATE TEMP TABLE before AS
	SELECT (SELECT requests FROM lockq_stats) AS requests,
		   (SELECT string_agg(lock_id || '/' || owner || '/' || token, ',') FROM lockq_locks) AS locks,
		   (SELECT string_agg(lock_id || '/' || owner || '/' || position, ',') FROM lockq_waiters) AS waiters;

-- lock id
SELECT lq_err($$SELECT lockq_get(NULL)$$);
SELECT lq_err($$SELECT lockq_try('')$$);
SELECT lq_err($$SELECT lockq_try(repeat('x', 256))$$);
SELECT lq_err($$SELECT lockq_release(NULL)$$);
SELECT lq_err($$SELECT lockq_renew('')$$);
SELECT lq_err($$SELECT lockq_holds(NULL, 1)$$);
SELECT lq_err($$SELECT lockq_holds(repeat('x', 300), 1)$$);
SELECT lq_err($$SELECT lockq_enqueue(NULL, 'o')$$);
SELECT lq_err($$SELECT lockq_heartbeat('', 'o')$$);
SELECT lq_err($$SELECT lockq_cancel(repeat('é', 128), 'o')$$);
-- owner
SELECT lq_err($$SELECT lockq_try('x', '')$$);
SELECT lq_err($$SELECT lockq_try('x', repeat('o', 256))$$);
SELECT lq_err($$SELECT lockq_get('x', 'session:123:456')$$);
SELECT lq_err($$SELECT lockq_enqueue('x', NULL)$$);
SELECT lq_err($$SELECT lockq_heartbeat('x', NULL)$$);
SELECT lq_err($$SELECT lockq_cancel('x', NULL)$$);
-- ttl
SELECT lq_err($$SELECT lockq_get('x', 'o', NULL)$$);
SELECT lq_err($$SELECT lockq_get('x', 'o', '0')$$);
SELECT lq_err($$SELECT lockq_try('x', 'o', '-5 seconds')$$);
SELECT lq_err($$SELECT lockq_try('x', 'o', '1 day 1 second')$$);
SELECT lq_err($$SELECT lockq_try('x', 'o', '100000000 years')$$);
SELECT lq_err($$SELECT lockq_try('x', 'o', '1 day -25 hours')$$);
SELECT lq_err($$SELECT lockq_renew('held', 'holder', NULL, '0')$$);
SELECT lq_err($$SELECT lockq_enqueue('x', 'o', '2 days')$$);
-- timeout
SELECT lq_err($$SELECT lockq_get('x', 'o', '1 minute', '0')$$);
SELECT lq_err($$SELECT lockq_get('x', 'o', '1 minute', '-1 second')$$);
SELECT lq_err($$SELECT lockq_get('x', 'o', '1 minute', '367 days')$$);
-- heartbeat and channel
SELECT lq_err($$SELECT lockq_enqueue('x', 'o', '1 minute', 'chan', '1 ms')$$);
SELECT lq_err($$SELECT lockq_enqueue('x', 'o', '1 minute', 'chan', '2 days')$$);
SELECT lq_err($$SELECT lockq_enqueue('x', 'o', '1 minute', repeat('c', 64))$$);
SELECT lq_err($$SELECT lockq_enqueue('x', 'o', '1 minute', '')$$);

-- The full text of one error, with its hint.
SELECT lockq_try('x', 'o', '2 days');
SELECT lockq_try(repeat('x', 256));
SELECT lockq_get('x', 'o', '1 minute', '0');

-- Documented false / NULL answers (these do reach the server).
SELECT lockq_release('held', 'not-the-holder') AS release_by_non_owner;
SELECT lockq_release('held', 'holder', 999999) AS release_wrong_token;
SELECT lockq_renew('held', 'not-the-holder') AS renew_by_non_owner;
SELECT lockq_try('held', 'not-the-holder') IS NULL AS try_held;
SELECT lockq_holds('held', 999999) AS holds_wrong_token;
SELECT lockq_release('never-taken', 'holder') AS release_never_taken;
SELECT lockq_cancel('held', 'not-waiting') AS cancel_not_waiting;
SELECT lq_err($$SELECT lockq_heartbeat('held', 'not-waiting')$$);

-- Nothing changed (the last block made requests, which is the only change).
SELECT (SELECT string_agg(lock_id || '/' || owner || '/' || token, ',') FROM lockq_locks) = locks AS locks_unchanged,
	   (SELECT string_agg(lock_id || '/' || owner || '/' || position, ',') FROM lockq_waiters) = waiters AS waiters_unchanged,
	   (SELECT requests FROM lockq_stats) - requests AS requests_made
  FROM before;

-- Direct writes to the tables are not allowed for ordinary roles.
CREATE ROLE lockq_regress_user;
SET ROLE lockq_regress_user;
SELECT lq_err($$SELECT * FROM lockq.owners$$);
SELECT lq_err($$DELETE FROM lockq.queue$$);
SELECT lq_err($$SELECT nextval('lockq.token_seq')$$);
SELECT lq_err($$SELECT lockq_force_release('held')$$);
SELECT count(*) AS visible_locks FROM lockq_locks;
SELECT lockq_try('role-lock', 'r1') IS NOT NULL AS can_take_locks;
SELECT role FROM lockq_locks WHERE lock_id = 'role-lock';
SELECT lockq_release('role-lock', 'r1');
RESET ROLE;
DROP ROLE lockq_regress_user;

-- The administrator's force release hands the lock to the head of the queue.
SELECT lockq_force_release('held') AS forced;
SELECT owner FROM lockq_locks WHERE lock_id = 'held';
SELECT lockq_heartbeat('held', 'client-1') IS NOT NULL AS client_got_it;
SELECT lockq_release('held', 'client-1');
SELECT lockq_force_release('held') AS nothing_to_force;

-- Other databases are refused, with a hint.
CREATE DATABASE lockq_other;
\c lockq_other
CREATE EXTENSION lockq;
SELECT lockq_try('x');
SELECT lockq_now();
\c contrib_regression
DROP DATABASE lockq_other;

SELECT count(*) AS locks FROM lockq_locks;
SELECT count(*) AS waiters FROM lockq_waiters;

--
-- lockq_views: the shape of the views and functions.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
\d lockq_locks
\d lockq_waiters
\d lockq_stats
\d lockq_lock_servers
SELECT p.proname, pg_get_function_arguments(p.oid) AS args,
	   pg_get_function_result(p.oid) AS result, p.provolatile, p.proparallel,
	   p.proisstrict
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lockq')
 ORDER BY p.proname;
-- who may do what: everyone may use schema lockq (its functions and views),
-- but none of its tables and sequences are granted to PUBLIC
SELECT c.relname, c.relkind,
	   (SELECT count(*) FROM aclexplode(c.relacl) a WHERE a.grantee = 0) AS public_grants
  FROM pg_class c
 WHERE c.relnamespace = 'lockq'::regnamespace AND c.relkind IN ('r', 'S')
 ORDER BY c.relname;
SELECT has_schema_privilege('public', 'lockq', 'USAGE') AS public_schema_usage;
SELECT v, has_table_privilege('public', v, 'SELECT') AS public_can_read
  FROM unnest(ARRAY['lockq_locks', 'lockq_waiters', 'lockq_stats',
					 'lockq_role_usage', 'lockq_namespaces', 'lockq_lock_servers']) v;
SELECT proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call,
	   has_function_privilege('lockq_admin', p.oid, 'EXECUTE') AS admin_may_call
  FROM pg_proc p
 WHERE proname IN ('lockq_force_release', 'lockq_set_role_limits', 'lockq_grant',
				   'lockq_revoke', 'lockq_get', 'lockq_stats_reset')
 ORDER BY proname;
SELECT worker_pid IS NOT NULL AS worker_running, worker_starts FROM lockq_stats;
SELECT backend_type, application_name FROM pg_stat_activity WHERE backend_type = 'lockq lock server';
-- one row per lock server (one here), whose gauges are those of lockq_stats:
-- a grant with an owner is counted by its lock server
SELECT server, pid = (SELECT worker_pid FROM lockq_stats) AS is_stats_worker,
	   pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'lockq lock server') AS is_running,
	   holders, waiters, delayed_locks, queued_requests, batches > 0 AS batched,
	   flush_wait_since
  FROM lockq_lock_servers;
SELECT lockq_try('servers-view', 'o') > 0 AS granted;
SELECT holders, (SELECT holders FROM lockq_stats) AS stats_holders,
	   state_memory > 0 AS has_state
  FROM lockq_lock_servers;
SELECT lockq_release('servers-view', 'o');
SELECT holders FROM lockq_lock_servers;

-- Dropping and creating the extension again discards the lock state, but
-- tokens keep increasing: the new token sequence starts above the old one.
SELECT lockq_try('before-drop', 'o') AS tok_before \gset
DROP EXTENSION lockq;
CREATE EXTENSION lockq;
SELECT count(*) AS locks_after_recreate FROM lockq_locks;
SELECT lockq_try('after-drop', 'o') > :tok_before AS tokens_continue;
SELECT lockq_release('after-drop', 'o');
SELECT batch_errors FROM lockq_stats;

--
-- lockq_stats_reset and the counters of waits, holds and queue lengths.
-- Counts are exact from a reset: nothing else runs meanwhile.
--
CREATE FUNCTION lq_wait_stats(cond text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	ok boolean;
BEGIN
	FOR i IN 1..1000 LOOP
		EXECUTE 'SELECT ' || cond || ' FROM lockq_stats' INTO ok;
		IF ok THEN
			RETURN true;
		END IF;
		PERFORM pg_sleep(0.01);
	END LOOP;
	RETURN false;
END $$;
CREATE ROLE lq_stats_user;
CREATE ROLE lq_stats_admin IN ROLE lockq_admin;
SET ROLE lq_stats_user;
SELECT lq_err('SELECT lockq_stats_reset()');
SET ROLE lq_stats_admin;
SELECT clock_timestamp() AS before_reset \gset
SELECT lockq_stats_reset();
RESET ROLE;
SELECT grants, handoffs, releases, expiries, requests, wait_time, hold_time,
	   max_queue_length, longest_queue, stats_reset >= :'before_reset' AS reset_now,
	   stats_reset <= clock_timestamp() AS not_later
  FROM lockq_stats;

-- three client-side waiters queue behind a holder; one leaves
SELECT lockq_try('st', 'holder', '1 min') IS NOT NULL AS granted;
SELECT lockq_enqueue('st', o, '1 min', heartbeat => '1 min')
  FROM unnest(ARRAY['c1', 'c2', 'c3']) o;
SELECT lq_wait_stats('longest_queue = 3');
SELECT max_queue_length, longest_queue FROM lockq_stats;
SELECT lockq_cancel('st', 'c3');
SELECT lq_wait_stats('longest_queue = 2');
SELECT max_queue_length, longest_queue FROM lockq_stats;
-- c1 waits at least 100 ms for its grant, the holder holds as long
SELECT pg_sleep(0.1);
SELECT lockq_release('st', 'holder');
SELECT lq_wait_stats('longest_queue = 1');
SELECT grants, handoffs, releases, max_queue_length, longest_queue,
	   wait_time >= 100 AND wait_time < 10000 AS waited_100ms,
	   hold_time >= 100 AND hold_time < 10000 AS held_100ms
  FROM lockq_stats;
-- a reset with c2 still queued: the high-water mark starts from the
-- longest queue now, and rises with it
SELECT lockq_stats_reset();
SELECT grants, handoffs, wait_time, hold_time, max_queue_length, longest_queue
  FROM lockq_stats;
SELECT lockq_enqueue('st', o, '1 min', heartbeat => '1 min')
  FROM unnest(ARRAY['c4', 'c5']) o;
SELECT lq_wait_stats('longest_queue = 3');
SELECT max_queue_length, longest_queue FROM lockq_stats;
SELECT lockq_cancel('st', o) FROM unnest(ARRAY['c1', 'c2', 'c4', 'c5']) o;
SELECT lq_wait_stats('longest_queue = 0');
SELECT max_queue_length, longest_queue, holders, waiters FROM lockq_stats;
-- an expired grant held exactly its lease
SELECT lockq_stats_reset();
SELECT lockq_try('st-exp', 'o', '200 ms') IS NOT NULL AS granted;
SELECT lq_wait_stats('expiries = 1');
SELECT grants, expiries, hold_time, wait_time, handoffs FROM lockq_stats;
-- a try that finds the lock taken counts as failed (owner and session-bound,
-- the latter decided in the backend), one that gets it or holds it does not
SELECT lockq_stats_reset();
SELECT lockq_try('st-busy', 'a', '1 min') IS NOT NULL AS granted;
SELECT lockq_try('st-busy', 'a', '1 min') IS NOT NULL AS holds_it;
SELECT lockq_try('st-busy', 'b', '1 min') IS NULL AS refused;
SELECT lockq_try('st-busy') IS NULL AS refused_session;
SELECT failed_tries, grants FROM lockq_stats;
SELECT lockq_release('st-busy', 'a');
SELECT lockq_stats_reset();
SELECT failed_tries FROM lockq_stats;
DROP ROLE lq_stats_user;
DROP ROLE lq_stats_admin;

-- Version 1.0 declares fewer columns of lockq_stats: lockq_stats() leaves
-- out the ones it does not declare, before and after the update.
DROP EXTENSION lockq;
CREATE EXTENSION lockq VERSION '1.0';
SELECT count(*) AS columns_1_0 FROM pg_attribute
 WHERE attrelid = 'public.lockq_stats'::regclass AND attnum > 0;
SELECT worker_pid IS NOT NULL AS worker_running, grace_until FROM public.lockq_stats;
ALTER EXTENSION lockq UPDATE;
SELECT count(*) AS columns_1_1 FROM pg_attribute
 WHERE attrelid = 'lockq.lockq_stats'::regclass AND attnum > 0;
SELECT worker_pid IS NOT NULL AS worker_running, longest_queue,
	   stats_reset IS NOT NULL AS has_reset
  FROM lockq.lockq_stats;
SELECT has_function_privilege('public', 'lockq.lockq_stats_reset()', 'EXECUTE') AS public_may_reset,
	   has_function_privilege('lockq_admin', 'lockq.lockq_stats_reset()', 'EXECUTE') AS admin_may_reset;
-- Version 1.2 declares all but failed_tries; the update adds it.
DROP EXTENSION lockq;
CREATE EXTENSION lockq VERSION '1.2';
SELECT count(*) AS columns_1_2 FROM pg_attribute
 WHERE attrelid = 'lockq.lockq_stats'::regclass AND attnum > 0;
SELECT longest_queue, stats_reset IS NOT NULL AS has_reset FROM lockq.lockq_stats;
ALTER EXTENSION lockq UPDATE;
SELECT count(*) AS columns_1_3 FROM pg_attribute
 WHERE attrelid = 'lockq.lockq_stats'::regclass AND attnum > 0;
SELECT failed_tries >= 0 AS has_failed_tries FROM lockq.lockq_stats;
DROP EXTENSION lockq;
CREATE EXTENSION lockq;

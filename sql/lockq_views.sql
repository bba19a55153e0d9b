--
-- lockq_views: the shape of the views and functions.
--
\d lockq_locks
\d lockq_waiters
\d lockq_stats
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
					 'lockq_role_usage', 'lockq_namespaces']) v;
SELECT proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call,
	   has_function_privilege('lockq_admin', p.oid, 'EXECUTE') AS admin_may_call
  FROM pg_proc p
 WHERE proname IN ('lockq_force_release', 'lockq_set_role_limits', 'lockq_grant',
				   'lockq_revoke', 'lockq_get')
 ORDER BY proname;
SELECT worker_pid IS NOT NULL AS worker_running, worker_starts FROM lockq_stats;
SELECT backend_type, application_name FROM pg_stat_activity WHERE backend_type = 'lockq lock server';

-- Dropping and creating the extension again discards the lock state, but
-- tokens keep increasing: the new token sequence starts above the old one.
SELECT lockq_try('before-drop', 'o') AS tok_before \gset
DROP EXTENSION lockq;
CREATE EXTENSION lockq;
SELECT count(*) AS locks_after_recreate FROM lockq_locks;
SELECT lockq_try('after-drop', 'o') > :tok_before AS tokens_continue;
SELECT lockq_release('after-drop', 'o');
SELECT batch_errors FROM lockq_stats;

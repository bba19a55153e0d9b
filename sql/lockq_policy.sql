--
-- lockq_policy: per-role limits and namespace privileges.  A role at one of
-- its limits is refused with 53400 and a hint naming the setting, nothing
-- changed, and no other role notices.  With lockq.namespace_privileges on,
-- a role may take, queue for or fence only lock ids under prefixes granted
-- to it.  Only members of lockq_admin may set either.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
CREATE ROLE lq_p1;
CREATE ROLE lq_p2;
CREATE ROLE lq_pgroup;
CREATE ROLE lq_p3 IN ROLE lq_pgroup;
CREATE ROLE lq_padmin IN ROLE lockq_admin;

-- lq_err_hint(q): like lq_err, with the hint
CREATE FUNCTION lq_err_hint(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	h text;
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
	RETURN SQLSTATE || ': ' || SQLERRM || ' (hint: ' || h || ')';
END $$;

-- only administrators set limits, and bad limits change nothing
SET ROLE lq_p1;
SELECT lq_err($$SELECT lockq.lockq_set_role_limits('lq_p1', 1000000)$$) AS raise_own_limit;
SELECT lq_err($$INSERT INTO lockq.role_limits VALUES ('lq_p1'::regrole, 1000000)$$) AS write_table;
RESET ROLE;
SET ROLE lq_padmin;
SELECT lq_err($$SELECT lockq.lockq_set_role_limits('lq_p1', -1)$$) AS negative;
SELECT lq_err($$SELECT lockq.lockq_set_role_limits(NULL, 1)$$) AS null_role;
SELECT lq_err($$SELECT lockq.lockq_set_role_limits('lq_nobody', 1)$$) AS no_such_role;
SELECT count(*) AS no_rows_yet FROM lockq.role_limits;
SELECT lockq.lockq_set_role_limits('lq_p1', max_owner_locks => 2, max_waiters => 1,
								   max_session_locks => 1);
RESET ROLE;
SELECT role, owner_locks, max_owner_locks, waiters, max_waiters,
	   session_locks, max_session_locks
  FROM lockq.lockq_role_usage WHERE role LIKE 'lq_p%';
-- lq_p2 has the settings' limits
SELECT (lockq.lockq_role_limits('lq_p2'::regrole)).max_owner_locks
	   = current_setting('lockq.max_owner_locks_per_role')::int AS p2_has_setting;

-- owner locks: two, then 53400; a lock it holds already is not a new one
SET ROLE lq_p1;
SELECT lockq_try('pol-1', 'o1', '1 hour') AS t1 \gset
SELECT lockq_try('pol-2', 'o2', '1 hour') IS NOT NULL AS second;
SELECT lq_err_hint($$SELECT lockq_try('pol-3', 'o3', '1 hour')$$) AS third_try;
SELECT lq_err($$SELECT lockq_get('pol-3', 'o3', '1 hour', '1 hour')$$) AS third_get;
SELECT lq_err($$SELECT lockq_enqueue('pol-3', 'o3', '1 hour')$$) AS third_enqueue;
SELECT lockq_try('pol-1', 'o1', '1 hour') = :t1 AS same_owner_again;
RESET ROLE;
-- nothing changed: pol-3 is free, lq_p1 holds two
SELECT count(*) AS pol3_held FROM lockq_locks WHERE lock_id = 'pol-3';
SELECT count(*) AS pol3_waiting FROM lockq_waiters WHERE lock_id = 'pol-3';
SELECT owner_locks FROM lockq.lockq_role_usage WHERE role = 'lq_p1';
-- another role is not affected
SET ROLE lq_p2;
SELECT lockq_try('pol-3', 'q3', '1 hour') IS NOT NULL AS p2_takes_pol3;
RESET ROLE;
-- released, lq_p1 may take another
SET ROLE lq_p1;
SELECT lockq_release('pol-2', 'o2') AS released;
SELECT lockq_try('pol-4', 'o4', '1 hour') IS NOT NULL AS p1_takes_pol4;

-- session-bound locks: one
SELECT lockq_try('pol-s1') IS NOT NULL AS session_lock;
SELECT lq_err_hint($$SELECT lockq_try('pol-s2')$$) AS second_session_lock;
SELECT lockq_release('pol-s1') AS session_released;

-- waiters: one (pol-3 is held by lq_p2)
SELECT lockq_enqueue('pol-3', 'w1', '1 hour', NULL, '1 hour') IS NULL AS queued;
SELECT lq_err_hint($$SELECT lockq_enqueue('pol-3', 'w2', '1 hour', NULL, '1 hour')$$) AS second_waiter;
SELECT lq_err($$SELECT lockq_get('pol-3', timeout => '1 hour')$$) AS get_refused_at_once;
-- a free lock needs no wait, but lq_p1 holds its two locks with an owner
SELECT lq_err($$SELECT lockq_try('pol-5', 'o5', '1 hour')$$) AS free_lock;
RESET ROLE;
SELECT owner, position FROM lockq_waiters WHERE lock_id = 'pol-3';
-- lq_p2 still queues
SET ROLE lq_p2;
SELECT lockq_try('pol-6', 'q6', '1 hour') IS NOT NULL AS p2_holds_pol6;
SELECT lockq_enqueue('pol-1', 'q1', '1 hour', NULL, '1 hour') IS NULL AS p2_queues;
-- a waiter queued in time is granted when its turn comes, even though
-- lq_p1 is at its limit of locks with an owner by then
SELECT lockq_release('pol-3', 'q3') AS p2_releases_pol3;
RESET ROLE;
SELECT owner, role FROM lockq_locks WHERE lock_id = 'pol-3';
SELECT role, owner_locks, waiters FROM lockq.lockq_role_usage WHERE role LIKE 'lq_p%';

-- raised by an administrator, the new limit applies at once
SET ROLE lq_padmin;
SELECT lockq.lockq_set_role_limits('lq_p1', max_owner_locks => 10);
RESET ROLE;
SET ROLE lq_p1;
SELECT lockq_try('pol-5', 'o5', '1 hour') IS NOT NULL AS p1_takes_pol5;
RESET ROLE;
-- all NULL: the settings again
SET ROLE lq_padmin;
SELECT lockq.lockq_set_role_limits('lq_p1');
RESET ROLE;
SELECT count(*) AS no_rows_left FROM lockq.role_limits;

-- namespaces: off by default, and only a superuser can change that
SHOW lockq.namespace_privileges;
SET ROLE lq_p1;
SELECT lq_err($$SET lockq.namespace_privileges = off$$) AS p1_sets_it;
SELECT lockq_try('reports:nightly', 'n1', '1 hour') IS NOT NULL AS any_name_while_off;
SELECT lockq_release('reports:nightly', 'n1') AS released;
RESET ROLE;
SET lockq.namespace_privileges = on;
SET ROLE lq_p1;
SELECT lq_err_hint($$SELECT lockq_try('reports:nightly', 'n1', '1 hour')$$) AS try_outside;
SELECT lq_err($$SELECT lockq_get('reports:nightly', 'n1', '1 hour', '1 s')$$) AS get_outside;
SELECT lq_err($$SELECT lockq_enqueue('reports:nightly', 'n1')$$) AS enqueue_outside;
SELECT lq_err($$SELECT lockq_try('reports:nightly')$$) AS session_outside;
-- its grants made before stay its own: release and renew need no namespace
SELECT lockq_renew('pol-1', 'o1') AS renew_old;
SELECT lq_err($$SELECT lockq.lockq_grant('reports:', 'lq_p1')$$) AS grant_self;
RESET ROLE;
SET ROLE lq_padmin;
SELECT lockq.lockq_grant('reports:', 'lq_p1') AS granted;
SELECT lockq.lockq_grant('reports:', 'lq_p1') AS granted_again;
SELECT lockq.lockq_grant('batch:', 'lq_pgroup') AS granted_group;
SELECT lq_err($$SELECT lockq.lockq_grant(NULL, 'lq_p1')$$) AS null_prefix;
SELECT lq_err(format('SELECT lockq.lockq_grant(%L, %L)', repeat('x', 256), 'lq_p1')) AS long_prefix;
SELECT lq_err($$SELECT lockq.lockq_grant('x', 'lq_nobody')$$) AS no_such_role;
RESET ROLE;
SELECT * FROM lockq.lockq_namespaces;
SET ROLE lq_p1;
SELECT lockq_try('reports:nightly', 'n1', '1 hour') AS tn \gset
SELECT lq_err($$SELECT lockq_try('reportsX', 'n2', '1 hour')$$) AS not_the_prefix;
SELECT lq_err($$SELECT lockq_try('batch:1', 'n3', '1 hour')$$) AS not_in_group;
RESET ROLE;
-- a member of the group has the group's prefixes; lq_p2 has none
SET ROLE lq_p3;
SELECT lockq_try('batch:1', 'g1', '1 hour') IS NOT NULL AS group_member_takes;
SELECT lockq_release('batch:1', 'g1') AS released;
RESET ROLE;
SET ROLE lq_p2;
SELECT lq_err($$SELECT lockq_enqueue('reports:nightly', 'squat', '1 day', NULL, '1 day')$$) AS p2_squats;
-- lockq_holds still answers, without a fence (see 007_fences)
SELECT lockq_holds('reports:nightly', :tn) AS p2_sees_it_held;
RESET ROLE;
-- revoked: no new grants or waits; what it holds stays
SET ROLE lq_padmin;
SELECT lockq.lockq_revoke('reports:', 'lq_p1') AS revoked;
SELECT lockq.lockq_revoke('reports:', 'lq_p1') AS revoked_again;
RESET ROLE;
SET ROLE lq_p1;
SELECT lq_err($$SELECT lockq_try('reports:weekly', 'n4', '1 hour')$$) AS after_revoke;
SELECT lockq_release('reports:nightly', 'n1', :tn) AS releases_what_it_held;
RESET ROLE;
-- superusers and administrators use any lock id
SELECT lockq_try('anything', 'su', '1 hour') IS NOT NULL AS superuser_takes;
SELECT lockq_release('anything', 'su') AS released;
SET ROLE lq_padmin;
SELECT lockq_try('anything', 'ad', '1 hour') IS NOT NULL AS admin_takes;
SELECT lockq_release('anything', 'ad') AS released;
RESET ROLE;
RESET lockq.namespace_privileges;

-- clean up
SET ROLE lq_p2;
SELECT lockq_cancel('pol-1', 'q1') AS cancelled;
RESET ROLE;
SELECT lockq_force_release(lock_id) FROM lockq_locks WHERE lock_id LIKE 'pol-%' ORDER BY 1;
SELECT count(*) AS left_waiting FROM lockq_waiters WHERE lock_id LIKE 'pol-%';
SET ROLE lq_padmin;
SELECT lockq.lockq_revoke('batch:', 'lq_pgroup');
RESET ROLE;
DROP FUNCTION lq_err_hint(text);
DROP ROLE lq_p1, lq_p2, lq_p3, lq_pgroup, lq_padmin;

/* sql/lockq--1.0--1.1.sql */

-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lockq UPDATE TO '1.1'" to load this file. \quit

-- 1.0 kept one lease horizon for all locks: after a crash, nothing at all
-- was granted until every lease that might have been lost had ended.  1.1
-- keeps that per lock (lockq.unsettled).  A 1.0 horizon still ahead means
-- that the server crashed under 1.0 less than a minute ago (lockq.max_grace
-- bounds it): the leases it covers cannot be told apart, so wait for it.
DO $lockq$
DECLARE
	horizon bigint;
	wall bigint := (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint;
BEGIN
	SELECT last_value INTO horizon FROM lockq.horizon_seq;
	IF horizon OPERATOR(pg_catalog.>) wall THEN
		RAISE EXCEPTION 'lockq 1.0 left a grace period after a crash that ends in % s',
			pg_catalog.ceil((horizon OPERATOR(pg_catalog.-) wall) OPERATOR(pg_catalog./) 1000000.0)
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Run ALTER EXTENSION lockq UPDATE again after it has ended.';
	END IF;
END
$lockq$;
DROP SEQUENCE lockq.horizon_seq;

CREATE TABLE lockq.unsettled (
	lock_id			text COLLATE "C" PRIMARY KEY,
	until			bigint NOT NULL DEFAULT 0,
	fence_ttl		bigint NOT NULL DEFAULT 0,
	delay_until		bigint NOT NULL DEFAULT 0,
	hold_token		bigint NOT NULL DEFAULT 0,
	hold_until		bigint NOT NULL DEFAULT 0
);
REVOKE ALL ON lockq.unsettled FROM PUBLIC;

DROP VIEW @extschema@.lockq_stats;
DROP FUNCTION @extschema@.lockq_stats();
CREATE FUNCTION lockq.lockq_stats(
	OUT grants bigint, OUT handoffs bigint, OUT releases bigint,
	OUT expiries bigint, OUT timeouts bigint, OUT cancels bigint,
	OUT session_releases bigint, OUT dropped_waiters bigint,
	OUT renewals bigint, OUT enqueues bigint, OUT forced_releases bigint,
	OUT deferred_handoffs bigint, OUT requests bigint, OUT batches bigint,
	OUT sync_commits bigint, OUT worker_starts bigint,
	OUT batch_errors bigint, OUT holders bigint, OUT waiters bigint,
	OUT worker_pid integer, OUT grace_until timestamptz,
	OUT delayed_locks bigint, OUT state_memory bigint,
	OUT wait_time double precision, OUT hold_time double precision,
	OUT max_queue_length bigint, OUT longest_queue bigint,
	OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'lockq_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_stats() IS
'Counters of the lock server since stats_reset (the server''s start or lockq_stats_reset()), among them the total wait of granted waiters and the total life of ended grants (wait_time, hold_time, ms) and the longest queue (max_queue_length); gauges: the current number of holders and waiters, the longest queue now, the locks delayed after a crash (delayed_locks; grace_until is when the last such delay ends), and the memory the lock server''s state holds (state_memory, bytes; lockq.max_server_memory bounds it).';

CREATE FUNCTION lockq.lockq_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'lockq_stats_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_stats_reset() IS
'Sets the counters of lockq_stats to zero and its stats_reset to now (administrators only).';
REVOKE ALL ON FUNCTION lockq.lockq_stats_reset() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lockq.lockq_stats_reset() TO lockq_admin;
CREATE VIEW lockq.lockq_stats AS
	SELECT * FROM lockq.lockq_stats();
COMMENT ON VIEW lockq.lockq_stats IS
'Counters of the lock server since stats_reset, and gauges: the current holders, waiters, longest queue, delayed locks and state memory.';
GRANT SELECT ON lockq.lockq_stats TO PUBLIC;

-- 1.1 keeps every function and view in the schema lockq (see
-- lockq--1.1.sql): move them there from the schema 1.0 was created in.
GRANT USAGE ON SCHEMA lockq TO PUBLIC;
ALTER FUNCTION @extschema@.lockq_get(text, text, interval, interval) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_try(text, text, interval) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_release(text, text, bigint) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_renew(text, text, bigint, interval) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_holds(text, bigint) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_now() SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_enqueue(text, text, interval, text, interval) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_heartbeat(text, text) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_cancel(text, text) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_force_release(text) SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_session_owner() SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_session_grants() SET SCHEMA lockq;
ALTER FUNCTION @extschema@.lockq_waiting_backends() SET SCHEMA lockq;
ALTER VIEW @extschema@.lockq_locks SET SCHEMA lockq;
ALTER VIEW @extschema@.lockq_waiters SET SCHEMA lockq;

-- 1.0 made lockq_admin (or adopted one that existed): mark it as lockq's,
-- as 1.1 does when it makes it.  One that can log in is kept, with a
-- warning: 1.1 would refuse it.
DO $lockq$
DECLARE
	r record;
BEGIN
	SELECT rolcanlogin, rolsuper INTO r
	  FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'lockq_admin';
	IF r.rolcanlogin OR r.rolsuper THEN
		RAISE WARNING 'role "lockq_admin" can log in or is a superuser'
			USING HINT = 'lockq trusts its members to act for every owner of every lock; run ALTER ROLE lockq_admin NOLOGIN NOSUPERUSER.';
	END IF;
	COMMENT ON ROLE lockq_admin IS 'lockq administrators (made by the lockq extension)';
END
$lockq$;

-- Per-role limits and namespace privileges (see README.md, "Security").
-- Members of lockq_admin write these tables, directly or through the
-- functions below; each backend reads them directly (whatever the caller's
-- privileges) and again whenever they change (the statement triggers).
-- A NULL limit is the setting's (lockq.max_*_per_role).
CREATE TABLE lockq.role_limits (
	role				oid PRIMARY KEY,
	max_owner_locks		integer CHECK (max_owner_locks >= 0),
	max_waiters			integer CHECK (max_waiters >= 0),
	max_session_locks	integer CHECK (max_session_locks >= 0)
);

-- With lockq.namespace_privileges on, a role may take, queue for or fence
-- only lock ids that start with a prefix granted to it (or to a role whose
-- privileges it has).  The prefix '' grants every lock id.
CREATE TABLE lockq.namespaces (
	prefix			text COLLATE "C" NOT NULL
					CHECK (pg_catalog.octet_length(prefix) <= 255),
	role			oid NOT NULL,
	PRIMARY KEY (prefix, role)
);
REVOKE ALL ON lockq.role_limits, lockq.namespaces FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON lockq.role_limits, lockq.namespaces
	TO lockq_admin;

CREATE FUNCTION lockq.lockq_policy_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lockq_policy_changed'
LANGUAGE C;
CREATE TRIGGER policy_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON lockq.role_limits
	FOR EACH STATEMENT EXECUTE FUNCTION lockq.lockq_policy_changed();
CREATE TRIGGER policy_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON lockq.namespaces
	FOR EACH STATEMENT EXECUTE FUNCTION lockq.lockq_policy_changed();

CREATE FUNCTION lockq.lockq_set_role_limits(role regrole,
							  max_owner_locks integer DEFAULT NULL,
							  max_waiters integer DEFAULT NULL,
							  max_session_locks integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $lockq$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF max_owner_locks < 0 OR max_waiters < 0 OR max_session_locks < 0 THEN
		RAISE EXCEPTION 'a limit must be at least 0, or NULL for the setting''s'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF max_owner_locks IS NULL AND max_waiters IS NULL AND max_session_locks IS NULL THEN
		DELETE FROM lockq.role_limits l WHERE l.role = lockq_set_role_limits.role;
	ELSE
		INSERT INTO lockq.role_limits AS l
			VALUES (lockq_set_role_limits.role, max_owner_locks, max_waiters, max_session_locks)
			ON CONFLICT ON CONSTRAINT role_limits_pkey DO UPDATE
			SET max_owner_locks = excluded.max_owner_locks,
				max_waiters = excluded.max_waiters,
				max_session_locks = excluded.max_session_locks;
	END IF;
END
$lockq$;
COMMENT ON FUNCTION lockq.lockq_set_role_limits(regrole, integer, integer, integer) IS
'Sets the limits of one role (administrators only); NULL: the setting''s (lockq.max_*_per_role). All NULL removes the role''s own limits.';

CREATE FUNCTION lockq.lockq_grant(prefix text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $lockq$
BEGIN
	IF prefix IS NULL OR role IS NULL THEN
		RAISE EXCEPTION 'prefix and role must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF octet_length(prefix) > 255 THEN
		RAISE EXCEPTION 'prefix is too long' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = 'A lock id, and so a prefix, has at most 255 bytes.';
	END IF;
	INSERT INTO lockq.namespaces VALUES (prefix, role) ON CONFLICT DO NOTHING;
	RETURN FOUND;
END
$lockq$;
COMMENT ON FUNCTION lockq.lockq_grant(text, regrole) IS
'Lets role (and roles with its privileges) use the lock ids that start with prefix while lockq.namespace_privileges is on (administrators only); false if it could already.';

CREATE FUNCTION lockq.lockq_revoke(prefix text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $lockq$
BEGIN
	DELETE FROM lockq.namespaces n
	 WHERE n.prefix = lockq_revoke.prefix AND n.role = lockq_revoke.role;
	RETURN FOUND;
END
$lockq$;
COMMENT ON FUNCTION lockq.lockq_revoke(text, regrole) IS
'Takes back a prefix granted to role by lockq_grant (administrators only); false if it was not granted. Grants and waits already made stay.';

REVOKE ALL ON FUNCTION lockq.lockq_set_role_limits(regrole, integer, integer, integer),
	lockq.lockq_grant(text, regrole), lockq.lockq_revoke(text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lockq.lockq_set_role_limits(regrole, integer, integer, integer),
	lockq.lockq_grant(text, regrole), lockq.lockq_revoke(text, regrole) TO lockq_admin;

CREATE FUNCTION lockq.lockq_role_limits(role oid,
	OUT max_owner_locks integer, OUT max_waiters integer,
	OUT max_session_locks integer)
RETURNS record
AS 'MODULE_PATHNAME', 'lockq_role_limits'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_role_limits(oid) IS
'The limits that apply to a role now: its own (lockq_set_role_limits), else the settings.';

CREATE VIEW lockq.lockq_role_usage AS
	SELECT pg_catalog.pg_get_userbyid(u.role) AS role,
		   u.owner_locks, l.max_owner_locks,
		   u.waiters, l.max_waiters,
		   u.session_locks, l.max_session_locks
	  FROM (SELECT c.role,
				   pg_catalog.sum(c.owner_locks)::bigint AS owner_locks,
				   pg_catalog.sum(c.waiters)::bigint AS waiters,
				   pg_catalog.sum(c.session_locks)::bigint AS session_locks
			  FROM (SELECT o.role, 1 AS owner_locks, 0 AS waiters, 0 AS session_locks
					  FROM lockq.owners o
					UNION ALL
					SELECT q.role, 0, 1, 0 FROM lockq.queue q
					UNION ALL
					SELECT b.role, 0, 1, 0 FROM lockq.lockq_waiting_backends() b
					UNION ALL
					SELECT s.role, 0, 0, 1 FROM lockq.lockq_session_grants() s
					UNION ALL
					SELECT r.role, 0, 0, 0 FROM lockq.role_limits r) c
			 GROUP BY c.role) u,
		   LATERAL lockq.lockq_role_limits(u.role) l
	 ORDER BY 1;
COMMENT ON VIEW lockq.lockq_role_usage IS
'Per role: the locks it holds and the waiters it has queued, against the limits that apply to it.';

CREATE VIEW lockq.lockq_namespaces AS
	SELECT n.prefix, pg_catalog.pg_get_userbyid(n.role) AS role
	  FROM lockq.namespaces n
	 ORDER BY n.prefix, 2;
COMMENT ON VIEW lockq.lockq_namespaces IS
'The lock id prefixes granted to roles (lockq_grant), enforced while lockq.namespace_privileges is on.';

GRANT SELECT ON lockq.lockq_role_usage, lockq.lockq_namespaces TO PUBLIC;

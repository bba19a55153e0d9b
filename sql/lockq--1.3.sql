/* sql/lockq--1.3.sql */

-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION lockq" to load this file. \quit

-- Everything lockq makes lives in the schema lockq, whatever schema
-- CREATE EXTENSION names: calls qualified with lockq. reach lockq's own
-- functions whatever the caller's search_path holds (see doc/security.md).  Nobody but the extension's owner may create objects in it.
-- The tables are the durable mirror of the lock state: only the lock server
-- writes them, and ordinary roles cannot even read them (use the views).
CREATE SCHEMA lockq;
REVOKE ALL ON SCHEMA lockq FROM PUBLIC;
GRANT USAGE ON SCHEMA lockq TO PUBLIC;

-- One row per current grant that outlives its session (an explicit owner).
-- Locks bound to a session (owner NULL) are kept in shared memory only: a
-- crash ends their sessions anyway (see lockq_session_grants).  Times are
-- lockq_now() microseconds.  Keyed by token, which is new for every grant:
-- a unique index on lock_id would make every grant of a busy lock check all
-- the dead versions of its row (see DESIGN.md).  The lock server keeps one
-- row per lock.
CREATE TABLE lockq.owners (
	lock_id			text COLLATE "C" NOT NULL,
	owner			text COLLATE "C" NOT NULL,
	token			bigint PRIMARY KEY,
	ttl				bigint NOT NULL CHECK (ttl > 0),
	acquired		bigint NOT NULL,
	expires			bigint NOT NULL,
	role			oid NOT NULL,
	channel			text COLLATE "C"
);

-- One row per client-side waiter (lockq_enqueue), served in (ts, owner)
-- order within each lock, together with the sessions blocked in lockq_get,
-- which live only in shared memory (see lockq_waiters).  ttl is the lease
-- the waiter asked for, heartbeat the most it may stay silent (µs).
CREATE TABLE lockq.queue (
	lock_id			text COLLATE "C" NOT NULL,
	ts				bigint NOT NULL,
	owner			text COLLATE "C" NOT NULL,
	ttl				bigint NOT NULL CHECK (ttl > 0),
	heartbeat		bigint NOT NULL CHECK (heartbeat > 0),
	role			oid NOT NULL,
	channel			text COLLATE "C",
	PRIMARY KEY (lock_id, ts, owner)
);

-- Locks whose latest changes the lock server may have shown before they
-- were flushed (see doc/design/durability.md): leases shown unflushed end by
-- until; ends (releases) of grants with a ttl up to fence_ttl may have been
-- shown unflushed (µs; 0: none).  After a crash such a grant is ended, and
-- each lock here is delayed until delay_until, when every lease that may
-- have been lost has ended.  When the time the server was down is not
-- known (another machine), the holder of a grant that survived (hold_token)
-- may count on it until hold_until: its lock is delayed until then, unless
-- the holder releases or renews it first.  A lock settles (its row goes) a
-- few seconds after it was last changed.
CREATE TABLE lockq.unsettled (
	lock_id			text COLLATE "C" PRIMARY KEY,
	until			bigint NOT NULL DEFAULT 0,
	fence_ttl		bigint NOT NULL DEFAULT 0,
	delay_until		bigint NOT NULL DEFAULT 0,
	hold_token		bigint NOT NULL DEFAULT 0,
	hold_until		bigint NOT NULL DEFAULT 0
);

-- Fencing tokens: strictly increasing over all grants, forever.
CREATE SEQUENCE lockq.token_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;
-- The clock's durable ceiling (see lockq_now).
CREATE SEQUENCE lockq.clock_seq AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

REVOKE ALL ON ALL TABLES IN SCHEMA lockq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lockq FROM PUBLIC;

-- Tokens and the clock must keep increasing after a dump and restore.  (The
-- lock state itself, lockq.owners, lockq.queue and lockq.unsettled, is not
-- dumped: a restored database starts with every lock free.)
SELECT pg_catalog.pg_extension_config_dump('lockq.token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lockq.clock_seq', '');

CREATE FUNCTION lockq.lockq_get(lock_id text, owner text DEFAULT NULL,
						  ttl interval DEFAULT '30 seconds',
						  timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_get'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_get(text, text, interval, interval) IS
'Waits in first-come-first-served order for the lock and returns the fencing token of the grant; raises 55P03 on timeout. owner NULL binds the lock to this session.';

CREATE FUNCTION lockq.lockq_try(lock_id text, owner text DEFAULT NULL,
						  ttl interval DEFAULT '30 seconds')
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_try'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_try(text, text, interval) IS
'Takes the lock if it is free and nobody is queued (or the owner holds it already) and returns the fencing token; NULL otherwise. Never waits.';

CREATE FUNCTION lockq.lockq_release(lock_id text, owner text DEFAULT NULL,
							  token bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_release(text, text, bigint) IS
'Releases the owner''s grant (with that token, if given) and hands the lock to the next waiter; false when the owner does not hold it.';

CREATE FUNCTION lockq.lockq_renew(lock_id text, owner text DEFAULT NULL,
							token bigint DEFAULT NULL,
							ttl interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_renew(text, text, bigint, interval) IS
'Sets the lease of the owner''s grant to end ttl (default: the grant''s own ttl) from now; false when the grant is gone.';

CREATE FUNCTION lockq.lockq_holds(lock_id text, token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_holds'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_holds(text, bigint) IS
'True while the grant with this token is current. When true, the grant cannot pass to anyone else before the calling transaction ends, so a write fenced by it is safe.';

CREATE FUNCTION lockq.lockq_now()
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_now'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_now() IS
'The lockq clock: microseconds since the Unix epoch, strictly increasing across calls, restarts and crashes, and unaffected by the system clock being set back.';

CREATE FUNCTION lockq.lockq_enqueue(lock_id text, owner text,
							  ttl interval DEFAULT '30 seconds',
							  channel text DEFAULT NULL,
							  heartbeat interval DEFAULT NULL,
							  wait interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_enqueue(text, text, interval, text, interval, interval) IS
'Queues a client-side waiter: the token if granted at once, else NULL; the grant is announced by NOTIFY on channel. The waiter must call lockq_heartbeat at least every heartbeat interval (default lockq.waiter_timeout). With wait, a queued waiter is waited for as by lockq_await, that long at most.';

CREATE FUNCTION lockq.lockq_heartbeat(lock_id text, owner text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_heartbeat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_heartbeat(text, text) IS
'Keeps a client-side wait alive: NULL while queued, the token once granted (which confirms the grant and starts its full lease); raises 55000 if the owner neither waits nor holds.';

CREATE FUNCTION lockq.lockq_await(lock_id text, owner text,
							timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_await'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_await(text, text, interval) IS
'Waits in this backend for a client-side waiter (lockq_enqueue) to be granted: the token as soon as it is (full lease, no NOTIFY), NULL when timeout, at most the heartbeat interval, passes first. The waiter keeps its place either way; each call counts as a heartbeat. Raises 55000 if the owner neither waits nor holds, or stops waiting meanwhile.';

CREATE FUNCTION lockq.lockq_cancel(lock_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_cancel'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_cancel(text, text) IS
'Withdraws a client-side waiter; if the lock was granted to it meanwhile, releases the grant so that it passes on at once.';

CREATE FUNCTION lockq.lockq_force_release(lock_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_force_release(text) IS
'Ends whatever grant the lock has (administrators only) and hands it to the next waiter.';
REVOKE ALL ON FUNCTION lockq.lockq_force_release(text) FROM PUBLIC;

-- Administrators: members of lockq_admin (and superusers) may act for the
-- owners of any role (release, renew, cancel, take over a grant), may
-- force-release any lock and set limits and namespace privileges; everyone
-- else may act only for owners whose grant or wait their own role made.
-- Roles are cluster-wide: lockq_admin is created if it does not exist (and
-- marked as lockq's by its comment), and stays when the extension is
-- dropped.  A lockq_admin that lockq did not make is refused: whoever made
-- it may have given it LOGIN or members that lockq would then trust.
DO $lockq$
DECLARE
	r record;
BEGIN
	SELECT rolcanlogin, rolsuper,
		   pg_catalog.shobj_description(oid, 'pg_authid') AS note
	  INTO r
	  FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'lockq_admin';
	IF NOT FOUND THEN
		CREATE ROLE lockq_admin NOLOGIN;
		COMMENT ON ROLE lockq_admin IS 'lockq administrators (made by the lockq extension)';
	ELSIF r.note IS DISTINCT FROM 'lockq administrators (made by the lockq extension)' THEN
		RAISE EXCEPTION 'role "lockq_admin" already exists and was not made by lockq'
			USING ERRCODE = 'duplicate_object',
				  DETAIL = 'lockq trusts the members of lockq_admin to act for every owner of every lock.',
				  HINT = 'Drop or rename the role; or, if it is meant as lockq''s administrators, check its members and run COMMENT ON ROLE lockq_admin IS ''lockq administrators (made by the lockq extension)''.';
	ELSIF r.rolcanlogin OR r.rolsuper THEN
		RAISE EXCEPTION 'role "lockq_admin" must be NOLOGIN NOSUPERUSER'
			USING ERRCODE = 'invalid_role_specification',
				  HINT = 'Grant lockq_admin to the roles that administer lockq; run ALTER ROLE lockq_admin NOLOGIN NOSUPERUSER.';
	END IF;
END
$lockq$;
GRANT EXECUTE ON FUNCTION lockq.lockq_force_release(text) TO lockq_admin;

CREATE FUNCTION lockq.lockq_session_owner()
RETURNS text
AS 'MODULE_PATHNAME', 'lockq_session_owner'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_session_owner() IS
'The owner name under which this session''s locks taken with owner NULL appear.';

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
	OUT stats_reset timestamptz, OUT failed_tries bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lockq_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_stats() IS
'Counters of the lock server since stats_reset (the server''s start or lockq_stats_reset()), among them the total wait of granted waiters and the total life of ended grants (wait_time, hold_time, ms), the longest queue (max_queue_length) and the lockq_try calls that found the lock taken (failed_tries); gauges: the current number of holders and waiters, the longest queue now, the locks delayed after a crash (delayed_locks; grace_until is when the last such delay ends), and the memory the lock server''s state holds (state_memory, bytes; lockq.max_server_memory bounds it).';

CREATE FUNCTION lockq.lockq_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'lockq_stats_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_stats_reset() IS
'Sets the counters of lockq_stats to zero and its stats_reset to now (administrators only).';
REVOKE ALL ON FUNCTION lockq.lockq_stats_reset() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lockq.lockq_stats_reset() TO lockq_admin;

CREATE FUNCTION lockq.lockq_session_grants(
	OUT lock_id text, OUT owner text, OUT token bigint, OUT ttl bigint,
	OUT acquired bigint, OUT expires bigint, OUT session_pid integer,
	OUT role oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_session_grants'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_session_grants() IS
'The current locks bound to a session (owner NULL), from shared memory (they end with their session and are not stored in lockq.owners); empty where lockq does not run (not preloaded, another database, a standby).';

CREATE FUNCTION lockq.lockq_released_tokens()
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'lockq_released_tokens'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_released_tokens() IS
'Tokens of grants with an owner that a session released by itself, whose rows the lock server has yet to delete from lockq.owners (the views leave them out); empty where lockq does not run.';

CREATE FUNCTION lockq.lockq_rowless_grants(
	OUT lock_id text, OUT owner text, OUT token bigint, OUT ttl bigint,
	OUT acquired bigint, OUT expires bigint, OUT role oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_rowless_grants'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_rowless_grants() IS
'Grants with an owner kept without their row in lockq.owners while their lock is unsettled (the views add them); empty where lockq does not run.';

CREATE VIEW lockq.lockq_locks AS
	SELECT g.lock_id,
		   g.owner,
		   g.token,
		   pg_catalog.pg_get_userbyid(g.role) AS role,
		   TIMESTAMPTZ 'epoch' OPERATOR(pg_catalog.+) (g.acquired OPERATOR(pg_catalog.*) INTERVAL '1 microsecond') AS acquired,
		   TIMESTAMPTZ 'epoch' OPERATOR(pg_catalog.+) (g.expires OPERATOR(pg_catalog.*) INTERVAL '1 microsecond') AS expires,
		   g.ttl OPERATOR(pg_catalog.*) INTERVAL '1 microsecond' AS ttl,
		   g.session_pid
	  FROM (SELECT o.lock_id, o.owner, o.token, o.role, o.acquired, o.expires,
				   o.ttl, NULL::integer AS session_pid
			  FROM lockq.owners o
			 WHERE NOT EXISTS (SELECT FROM lockq.lockq_released_tokens() r
								WHERE r OPERATOR(pg_catalog.=) o.token)
			UNION ALL
			SELECT w.lock_id, w.owner, w.token, w.role, w.acquired, w.expires,
				   w.ttl, NULL::integer
			  FROM lockq.lockq_rowless_grants() w
			UNION ALL
			SELECT s.lock_id, s.owner, s.token, s.role, s.acquired, s.expires,
				   s.ttl, s.session_pid
			  FROM lockq.lockq_session_grants() s) g
	 ORDER BY g.lock_id;
COMMENT ON VIEW lockq.lockq_locks IS
'Current grants: one row per held lock. session_pid is set for locks that end with their session.';

CREATE FUNCTION lockq.lockq_waiting_backends(
	OUT lock_id text, OUT owner text, OUT ts bigint, OUT session_pid integer,
	OUT role oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_waiting_backends'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_waiting_backends() IS
'The lockq_get calls waiting in a queue, from shared memory (they end with their session and are not stored in lockq.queue); empty where lockq does not run.';

CREATE VIEW lockq.lockq_waiters AS
	SELECT w.lock_id,
		   w.owner,
		   pg_catalog.row_number() OVER (PARTITION BY w.lock_id ORDER BY w.ts, w.owner) AS position,
		   TIMESTAMPTZ 'epoch' OPERATOR(pg_catalog.+) (w.ts OPERATOR(pg_catalog.*) INTERVAL '1 microsecond') AS waiting_since,
		   w.kind,
		   pg_catalog.pg_get_userbyid(w.role) AS role,
		   w.session_pid,
		   w.ts
	  FROM (SELECT q.lock_id, q.owner, q.ts, 'client' AS kind, q.role,
				   NULL::integer AS session_pid
			  FROM lockq.queue q
			UNION ALL
			SELECT b.lock_id, b.owner, b.ts, 'backend', b.role, b.session_pid
			  FROM lockq.lockq_waiting_backends() b) w
	 ORDER BY w.lock_id, w.ts, w.owner;
COMMENT ON VIEW lockq.lockq_waiters IS
'Queued waiters in grant order: position 1 is granted next. kind is backend (blocked in lockq_get) or client (lockq_enqueue).';

CREATE VIEW lockq.lockq_stats AS
	SELECT * FROM lockq.lockq_stats();
COMMENT ON VIEW lockq.lockq_stats IS
'Counters of the lock server since stats_reset, and gauges: the current holders, waiters, longest queue, delayed locks and state memory.';

GRANT SELECT ON lockq.lockq_locks, lockq.lockq_waiters, lockq.lockq_stats TO PUBLIC;

-- lockq runs lockq.lock_servers lock servers, each serving its partition of
-- the locks: one row for each.
CREATE FUNCTION lockq.lockq_lock_servers(
	OUT server integer, OUT pid integer, OUT holders bigint,
	OUT waiters bigint, OUT longest_queue bigint, OUT delayed_locks bigint,
	OUT state_memory bigint, OUT queued_requests bigint,
	OUT batches bigint, OUT flush_wait_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_lock_server_rows'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq.lockq_lock_servers() IS
'One row per lock server (lockq.lock_servers), from shared memory; empty where lockq does not run.';

CREATE VIEW lockq.lockq_lock_servers AS
	SELECT * FROM lockq.lockq_lock_servers();
COMMENT ON VIEW lockq.lockq_lock_servers IS
'Each lock server: its pid (NULL while it does not run), the gauges of its partition of the locks, the requests waiting for it, the batches it began, and since when it waits for a flush.';
GRANT SELECT ON lockq.lockq_lock_servers TO PUBLIC;

-- Per-role limits and namespace privileges (see README.md, "Security").
-- Members of lockq_admin write these tables, directly or through the
-- functions below; each backend reads them directly (whatever the caller's
-- privileges) and again whenever they change (the statement triggers).
-- A NULL limit is the setting's (lockq.max_*_per_role).
CREATE TABLE lockq.role_limits (
	role				regrole PRIMARY KEY,
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
	role			regrole NOT NULL,
	PRIMARY KEY (prefix, role)
);
-- They are configuration, dumped by pg_dump (roles by name, as regrole is
-- written: a restore into another cluster finds the roles of that name).
-- (not the rows of a role dropped since: nothing removes them, and in
-- another cluster their OID could name another role)
SELECT pg_catalog.pg_extension_config_dump('lockq.role_limits',
	'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) role_limits.role)');
SELECT pg_catalog.pg_extension_config_dump('lockq.namespaces',
	'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) namespaces.role)');
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
					 WHERE NOT EXISTS (SELECT FROM lockq.lockq_released_tokens() r
										WHERE r OPERATOR(pg_catalog.=) o.token)
					UNION ALL
					SELECT w.role, 1, 0, 0 FROM lockq.lockq_rowless_grants() w
					UNION ALL
					SELECT q.role, 0, 1, 0 FROM lockq.queue q
					UNION ALL
					SELECT b.role, 0, 1, 0 FROM lockq.lockq_waiting_backends() b
					UNION ALL
					SELECT s.role, 0, 0, 1 FROM lockq.lockq_session_grants() s
					UNION ALL
					SELECT r.role::oid, 0, 0, 0 FROM lockq.role_limits r) c
			 GROUP BY c.role) u,
		   LATERAL lockq.lockq_role_limits(u.role) l
	 ORDER BY 1;
COMMENT ON VIEW lockq.lockq_role_usage IS
'Per role: the locks it holds and the waiters it has queued, against the limits that apply to it.';

CREATE VIEW lockq.lockq_namespaces AS
	SELECT n.prefix, pg_catalog.pg_get_userbyid(n.role::oid) AS role
	  FROM lockq.namespaces n
	 ORDER BY n.prefix, 2;
COMMENT ON VIEW lockq.lockq_namespaces IS
'The lock id prefixes granted to roles (lockq_grant), enforced while lockq.namespace_privileges is on.';

GRANT SELECT ON lockq.lockq_role_usage, lockq.lockq_namespaces TO PUBLIC;

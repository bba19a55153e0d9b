/* sql/lockq--1.0.sql */

-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION lockq" to load this file. \quit

-- The durable mirror of the lock state.  Only the lock server writes these;
-- ordinary roles cannot even read them (use the views).
CREATE SCHEMA lockq;
REVOKE ALL ON SCHEMA lockq FROM PUBLIC;

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

-- Fencing tokens: strictly increasing over all grants, forever.
CREATE SEQUENCE lockq.token_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;
-- The clock's durable ceiling (see lockq_now).
CREATE SEQUENCE lockq.clock_seq AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;
-- The lease horizon: no lease returned before its flush ends after this
-- (lockq time); 0 after a clean stop.  After a crash, nothing is granted
-- until the clock passes it.
CREATE SEQUENCE lockq.horizon_seq AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

REVOKE ALL ON ALL TABLES IN SCHEMA lockq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lockq FROM PUBLIC;

-- Tokens and the clock must keep increasing after a dump and restore.
SELECT pg_catalog.pg_extension_config_dump('lockq.token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lockq.clock_seq', '');

CREATE FUNCTION lockq_get(lock_id text, owner text DEFAULT NULL,
						  ttl interval DEFAULT '30 seconds',
						  timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_get'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_get(text, text, interval, interval) IS
'Waits in first-come-first-served order for the lock and returns the fencing token of the grant; raises 55P03 on timeout. owner NULL binds the lock to this session.';

CREATE FUNCTION lockq_try(lock_id text, owner text DEFAULT NULL,
						  ttl interval DEFAULT '30 seconds')
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_try'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_try(text, text, interval) IS
'Takes the lock if it is free and nobody is queued (or the owner holds it already) and returns the fencing token; NULL otherwise. Never waits.';

CREATE FUNCTION lockq_release(lock_id text, owner text DEFAULT NULL,
							  token bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_release(text, text, bigint) IS
'Releases the owner''s grant (with that token, if given) and hands the lock to the next waiter; false when the owner does not hold it.';

CREATE FUNCTION lockq_renew(lock_id text, owner text DEFAULT NULL,
							token bigint DEFAULT NULL,
							ttl interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_renew(text, text, bigint, interval) IS
'Sets the lease of the owner''s grant to end ttl (default: the grant''s own ttl) from now; false when the grant is gone.';

CREATE FUNCTION lockq_holds(lock_id text, token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_holds'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_holds(text, bigint) IS
'True while the grant with this token is current. When true, the grant cannot pass to anyone else before the calling transaction ends, so a write fenced by it is safe.';

CREATE FUNCTION lockq_now()
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_now'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_now() IS
'The lockq clock: microseconds since the Unix epoch, strictly increasing across calls, restarts and crashes, and unaffected by the system clock being set back.';

CREATE FUNCTION lockq_enqueue(lock_id text, owner text,
							  ttl interval DEFAULT '30 seconds',
							  channel text DEFAULT NULL,
							  heartbeat interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_enqueue(text, text, interval, text, interval) IS
'Queues a client-side waiter without blocking: the token if granted at once, else NULL; the grant is announced by NOTIFY on channel. The waiter must call lockq_heartbeat at least every heartbeat interval (default lockq.waiter_timeout).';

CREATE FUNCTION lockq_heartbeat(lock_id text, owner text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_heartbeat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_heartbeat(text, text) IS
'Keeps a client-side wait alive: NULL while queued, the token once granted (which confirms the grant and starts its full lease); raises 55000 if the owner neither waits nor holds.';

CREATE FUNCTION lockq_cancel(lock_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_cancel'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_cancel(text, text) IS
'Withdraws a client-side waiter; if the lock was granted to it meanwhile, releases the grant so that it passes on at once.';

CREATE FUNCTION lockq_force_release(lock_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lockq_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq_force_release(text) IS
'Ends whatever grant the lock has (administrators only) and hands it to the next waiter.';
REVOKE ALL ON FUNCTION lockq_force_release(text) FROM PUBLIC;

-- Administrators: members of lockq_admin (and superusers) may act for the
-- owners of any role (release, renew, cancel, take over a grant) and may
-- force-release any lock; everyone else may act only for owners whose grant
-- or wait their own role made.  Roles are cluster-wide: lockq_admin is
-- created if it does not exist, and stays when the extension is dropped.
DO $lockq$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'lockq_admin') THEN
		CREATE ROLE lockq_admin NOLOGIN;
	END IF;
END
$lockq$;
GRANT EXECUTE ON FUNCTION lockq_force_release(text) TO lockq_admin;

CREATE FUNCTION lockq_session_owner()
RETURNS text
AS 'MODULE_PATHNAME', 'lockq_session_owner'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq_session_owner() IS
'The owner name under which this session''s locks taken with owner NULL appear.';

CREATE FUNCTION lockq_stats(
	OUT grants bigint, OUT handoffs bigint, OUT releases bigint,
	OUT expiries bigint, OUT timeouts bigint, OUT cancels bigint,
	OUT session_releases bigint, OUT dropped_waiters bigint,
	OUT renewals bigint, OUT enqueues bigint, OUT forced_releases bigint,
	OUT deferred_handoffs bigint, OUT requests bigint, OUT batches bigint,
	OUT sync_commits bigint, OUT worker_starts bigint,
	OUT batch_errors bigint, OUT holders bigint, OUT waiters bigint,
	OUT worker_pid integer, OUT grace_until timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'lockq_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq_stats() IS
'Counters of the lock server since the server started, and the current number of holders and waiters.';

CREATE FUNCTION lockq_session_grants(
	OUT lock_id text, OUT owner text, OUT token bigint, OUT ttl bigint,
	OUT acquired bigint, OUT expires bigint, OUT session_pid integer,
	OUT role oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_session_grants'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq_session_grants() IS
'The current locks bound to a session (owner NULL), from shared memory (they end with their session and are not stored in lockq.owners); empty where lockq does not run (not preloaded, another database, a standby).';

CREATE VIEW lockq_locks AS
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
			UNION ALL
			SELECT s.lock_id, s.owner, s.token, s.role, s.acquired, s.expires,
				   s.ttl, s.session_pid
			  FROM lockq_session_grants() s) g
	 ORDER BY g.lock_id;
COMMENT ON VIEW lockq_locks IS
'Current grants: one row per held lock. session_pid is set for locks that end with their session.';

CREATE FUNCTION lockq_waiting_backends(
	OUT lock_id text, OUT owner text, OUT ts bigint, OUT session_pid integer,
	OUT role oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lockq_waiting_backends'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq_waiting_backends() IS
'The lockq_get calls waiting in a queue, from shared memory (they end with their session and are not stored in lockq.queue); empty where lockq does not run.';

CREATE VIEW lockq_waiters AS
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
			  FROM lockq_waiting_backends() b) w
	 ORDER BY w.lock_id, w.ts, w.owner;
COMMENT ON VIEW lockq_waiters IS
'Queued waiters in grant order: position 1 is granted next. kind is backend (blocked in lockq_get) or client (lockq_enqueue).';

CREATE VIEW lockq_stats AS
	SELECT * FROM lockq_stats();
COMMENT ON VIEW lockq_stats IS
'Counters of the lock server since the server started, and the current number of holders and waiters.';

GRANT SELECT ON lockq_locks, lockq_waiters, lockq_stats TO PUBLIC;

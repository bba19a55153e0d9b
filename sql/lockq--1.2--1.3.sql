/* sql/lockq--1.2--1.3.sql */

-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lockq UPDATE TO '1.3'" to load this file. \quit

-- 1.3 makes the policy tables configuration that pg_dump keeps: their
-- roles become regrole, which is written and read by name (an oid would
-- name another role, or none, in the cluster a dump is restored into),
-- and they are marked as the extension's configuration.  oid and regrole
-- are the same bits, so no row changes; the views over the tables are
-- made again around the change.  (The lock state, lockq.owners,
-- lockq.queue and lockq.unsettled, is not dumped: a restored database
-- starts with every lock free.)

DROP VIEW lockq.lockq_role_usage;
DROP VIEW lockq.lockq_namespaces;
DROP VIEW lockq.lockq_locks;

-- 1.3 lets a session release a grant with an owner by itself, before the
-- lock server deletes its row (lockq_leases.c); the views that read
-- lockq.owners leave such rows out.
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

ALTER TABLE lockq.role_limits ALTER COLUMN role TYPE regrole;
ALTER TABLE lockq.namespaces ALTER COLUMN role TYPE regrole;

-- (not the rows of a role dropped since: nothing removes them, and in
-- another cluster their OID could name another role)
SELECT pg_catalog.pg_extension_config_dump('lockq.role_limits',
	'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) role_limits.role)');
SELECT pg_catalog.pg_extension_config_dump('lockq.namespaces',
	'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) namespaces.role)');

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
GRANT SELECT ON lockq.lockq_locks TO PUBLIC;


-- 1.3 counts the lockq_try calls that found the lock taken: lockq_stats
-- gets a column, failed_tries, at its end.
DROP VIEW lockq.lockq_stats;
DROP FUNCTION lockq.lockq_stats();
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

CREATE VIEW lockq.lockq_stats AS
	SELECT * FROM lockq.lockq_stats();
COMMENT ON VIEW lockq.lockq_stats IS
'Counters of the lock server since stats_reset, and gauges: the current holders, waiters, longest queue, delayed locks and state memory.';
GRANT SELECT ON lockq.lockq_stats TO PUBLIC;

-- 1.3 runs lockq.lock_servers lock servers, each serving its partition of
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

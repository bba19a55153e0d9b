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

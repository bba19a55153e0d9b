/* sql/lockq--1.1--1.2.sql */

-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lockq UPDATE TO '1.2'" to load this file. \quit

-- 1.2 adds lockq_await, a client-side waiter's wait in a backend, woken by
-- its grant alone (liblockq uses it instead of LISTEN/NOTIFY where it can),
-- and lockq_enqueue's wait argument: queue, then wait the same way, in one
-- call.  A function's arguments cannot be changed in place: lockq_enqueue
-- is made again (EXECUTE stays with PUBLIC, as it was).

DROP FUNCTION lockq.lockq_enqueue(text, text, interval, text, interval);
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


CREATE FUNCTION lockq.lockq_await(lock_id text, owner text,
							timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lockq_await'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION lockq.lockq_await(text, text, interval) IS
'Waits in this backend for a client-side waiter (lockq_enqueue) to be granted: the token as soon as it is (full lease, no NOTIFY), NULL when timeout, at most the heartbeat interval, passes first. The waiter keeps its place either way; each call counts as a heartbeat. Raises 55000 if the owner neither waits nor holds, or stops waiting meanwhile.';

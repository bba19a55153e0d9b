/* sql/lockq--1.0--1.1.sql */

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

DROP VIEW lockq_stats;
DROP FUNCTION lockq_stats();
CREATE FUNCTION lockq_stats(
	OUT grants bigint, OUT handoffs bigint, OUT releases bigint,
	OUT expiries bigint, OUT timeouts bigint, OUT cancels bigint,
	OUT session_releases bigint, OUT dropped_waiters bigint,
	OUT renewals bigint, OUT enqueues bigint, OUT forced_releases bigint,
	OUT deferred_handoffs bigint, OUT requests bigint, OUT batches bigint,
	OUT sync_commits bigint, OUT worker_starts bigint,
	OUT batch_errors bigint, OUT holders bigint, OUT waiters bigint,
	OUT worker_pid integer, OUT grace_until timestamptz,
	OUT delayed_locks bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lockq_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION lockq_stats() IS
'Counters of the lock server since the server started, the current number of holders and waiters, and the locks delayed after a crash (delayed_locks; grace_until is when the last such delay ends).';
CREATE VIEW lockq_stats AS
	SELECT * FROM lockq_stats();
COMMENT ON VIEW lockq_stats IS
'Counters of the lock server since the server started, and the current number of holders and waiters.';
GRANT SELECT ON lockq_stats TO PUBLIC;

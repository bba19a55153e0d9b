/*-------------------------------------------------------------------------
 *
 * lockq_views.c
 *		lockq_stats(): the lock server's counters and gauges (and
 *		lockq_stats_reset()),
 *		lockq_lock_servers(): each lock server's pid and gauges,
 *		lockq_waiting_backends(): the blocked lockq_get calls, and
 *		lockq_session_grants(): the session-bound grants, all read from
 *		shared memory.  The views are SQL over these and the tables, see the
 *		install script.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "lockq_call.h"
#include "lockq_clock.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_leases.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

PG_FUNCTION_INFO_V1(lockq_stats);

/* Output columns, in the order of the SQL declaration. */
static const LqStat lq_stat_columns[] = {
	LQ_STAT_GRANTS,
	LQ_STAT_HANDOFFS,
	LQ_STAT_RELEASES,
	LQ_STAT_EXPIRIES,
	LQ_STAT_TIMEOUTS,
	LQ_STAT_CANCELS,
	LQ_STAT_SESSION_RELEASES,
	LQ_STAT_DROPPED_WAITERS,
	LQ_STAT_RENEWALS,
	LQ_STAT_ENQUEUES,
	LQ_STAT_FORCED_RELEASES,
	LQ_STAT_DEFERRED_HANDOFFS,
	LQ_STAT_REQUESTS,
	LQ_STAT_BATCHES,
	LQ_STAT_SYNC_COMMITS,
	LQ_STAT_WORKER_STARTS,
	LQ_STAT_BATCH_ERRORS
};

/*
 * The counters, holders, waiters, worker_pid, grace_until (version 1.0
 * declares these), delayed_locks, state_memory, wait_time, hold_time,
 * max_queue_length, longest_queue, stats_reset (1.1 and 1.2 add these),
 * failed_tries (1.3).  Each version's columns begin with the older ones',
 * so a tuple for an older declaration is a prefix of the full one.
 */
#define LQ_STATS_NCOLS_1_0 (lengthof(lq_stat_columns) + 4)
#define LQ_STATS_NCOLS_1_2 (LQ_STATS_NCOLS_1_0 + 7)
#define LQ_STATS_NCOLS (LQ_STATS_NCOLS_1_2 + 1)

/*
 * lockq_stats returns one row: the counters since stats_reset (the start of
 * the server, a crash restart included, or the last lockq_stats_reset), the
 * current number of holders and waiters, the worker's pid (NULL when it is
 * not running), the latest end of a lock's delay after a restart
 * (grace_until, NULL when no lock is delayed) and how many locks are
 * delayed, the memory the lock server's state holds (state_memory, bytes),
 * the waits of granted waiters and the lives of ended grants (wait_time,
 * hold_time, milliseconds), the longest queue since stats_reset and now.
 * Version 1.0 of the extension declares only the first columns: the
 * trailing columns a version does not declare are left out.
 */
Datum
lockq_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[LQ_STATS_NCOLS];
	bool		nulls[LQ_STATS_NCOLS];
	int			i;
	int			n = lengthof(lq_stat_columns);
	int			pid;
	LqGauges	g;

	lq_call_check_available();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != LQ_STATS_NCOLS && tupdesc->natts != LQ_STATS_NCOLS_1_2 &&
		tupdesc->natts != LQ_STATS_NCOLS_1_0)
		elog(ERROR, "lockq_stats: expected %d columns, got %d",
			 (int) LQ_STATS_NCOLS, tupdesc->natts);

	lq_shmem_settle_arrivals();		/* lazy arrivals are counted */
	lq_shmem_gauges(&g);
	memset(nulls, 0, sizeof(nulls));
	for (i = 0; i < n; i++)
		values[i] = Int64GetDatum((int64) pg_atomic_read_u64(&lq_shared->stats[lq_stat_columns[i]]));
	/* with the grants backends made by themselves (lockq_fastpath.c) */
	values[n] = Int64GetDatum((int64) (g.holders + lq_fastpath_count()));
	values[n + 1] = Int64GetDatum((int64) g.waiters);

	pid = lq_shmem_server_pid();
	if (pid == 0)
		nulls[n + 2] = true;
	else
		values[n + 2] = Int32GetDatum(pid);
	if (g.delay_max == 0)
		nulls[n + 3] = true;
	else
		values[n + 3] =
			TimestampTzGetDatum(lq_clock_us_to_timestamptz((int64) g.delay_max));
	values[n + 4] = Int64GetDatum((int64) g.delayed);
	values[n + 5] = Int64GetDatum((int64) g.state_bytes);
	values[n + 6] = Float8GetDatum((double) pg_atomic_read_u64(&lq_shared->stats[LQ_STAT_WAIT_US]) / 1000.0);
	values[n + 7] = Float8GetDatum((double) pg_atomic_read_u64(&lq_shared->stats[LQ_STAT_HOLD_US]) / 1000.0);
	values[n + 8] = Int64GetDatum((int64) pg_atomic_read_u64(&lq_shared->queue_max));
	values[n + 9] = Int64GetDatum((int64) g.longest_queue);
	values[n + 10] = TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&lq_shared->stats_reset));
	values[n + 11] = Int64GetDatum((int64) pg_atomic_read_u64(&lq_shared->stats[LQ_STAT_FAILED_TRIES]));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(lockq_stats_reset);

/*
 * lockq_stats_reset sets the counters of lockq_stats to zero, and
 * stats_reset to now.  Only superusers and lockq_admin may call it (the
 * install script grants EXECUTE).
 */
Datum
lockq_stats_reset(PG_FUNCTION_ARGS)
{
	lq_call_check_available();
	lq_shmem_stats_reset();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(lockq_lock_server_rows);

/*
 * lockq_lock_server_rows, SQL's lockq_lock_servers(), lists the lock
 * servers (lockq.lock_servers), one row each: its number, its pid (NULL
 * while it does not run), the gauges it published after its last batch
 * (those of its partition of the locks), the requests waiting in its
 * arrival ring, the batches it has begun since shared memory was created,
 * and since when it has waited for a batch's flush (NULL when it does not
 * wait).  lockq_stats adds the gauges up.  Nothing where lockq does not
 * run (a standby, another database).  Reads shared memory only: the ring
 * positions under the lock server's mutex, the rest without a lock.
 */
Datum
lockq_lock_server_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!lq_call_is_available())
		return (Datum) 0;		/* nothing of ours in shared memory here */

	for (i = 0; i < lq_shared->nservers; i++)
	{
		LqServer   *sv = lq_shmem_server(i);
		Datum		values[10];
		bool		nulls[10];
		LqGauges	g;
		uint64		queued;
		uint64		since;
		int			pid = lq_shmem_server_pid_of(i);

		memset(nulls, 0, sizeof(nulls));
		lq_shmem_server_gauges(i, &g, &queued);
		since = pg_atomic_read_u64(&sv->durable_wait_since);
		values[0] = Int32GetDatum(i);
		if (pid == 0)
			nulls[1] = true;
		else
			values[1] = Int32GetDatum(pid);
		values[2] = Int64GetDatum((int64) g.holders);
		values[3] = Int64GetDatum((int64) g.waiters);
		values[4] = Int64GetDatum((int64) g.longest_queue);
		values[5] = Int64GetDatum((int64) g.delayed);
		values[6] = Int64GetDatum((int64) g.state_bytes);
		values[7] = Int64GetDatum((int64) queued);
		values[8] = Int64GetDatum((int64) *(volatile uint64 *) &sv->batch_seq);
		if (since == 0 || pid == 0)
			nulls[9] = true;
		else
			values[9] = TimestampTzGetDatum(lq_clock_us_to_timestamptz((int64) since));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lockq_waiting_backends);

/*
 * lockq_waiting_backends lists the lockq_get calls waiting in a queue,
 * straight from the request slots (they are not written to lockq.queue:
 * they end with their session).  lockq_waiters merges them with the
 * client-side waiters of the table by their queue ts.
 */
Datum
lockq_waiting_backends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!lq_call_is_available())
		return (Datum) 0;		/* nothing of ours in shared memory here */

	lq_shmem_settle_arrivals();		/* lazy arrivals are shown queued */
	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		char		lock_id[LQ_MAX_ID_LEN + 1];
		char		owner[LQ_MAX_OWNER_LEN + 1];
		int64		ts;
		int			pid;
		Oid			role;

		SpinLockAcquire(&slot->mutex);
		ts = slot->queued_ts;
		if (ts > 0)
		{
			memcpy(lock_id, slot->req.lock_id, sizeof(lock_id));
			memcpy(owner, slot->req.owner, sizeof(owner));
			pid = slot->pid;
			role = slot->req.role;
		}
		SpinLockRelease(&slot->mutex);
		if (ts <= 0)
			continue;

		values[0] = CStringGetTextDatum(lock_id);
		values[1] = CStringGetTextDatum(owner);
		values[2] = Int64GetDatum(ts);
		values[3] = Int32GetDatum(pid);
		values[4] = ObjectIdGetDatum(role);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lockq_session_grants);

/*
 * lockq_session_grants lists the session-bound grants from shared memory
 * (lockq_session.c: they end with their session and are not written to
 * lockq.owners).  lockq_locks merges them with the table's grants.
 */
Datum
lockq_session_grants(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LqSessionGrant *grants;
	int			n;
	int			i;
	int64		now;

	InitMaterializedSRF(fcinfo, 0);
	if (!lq_call_is_available())
		return (Datum) 0;		/* nothing of ours in shared memory here */

	now = lq_clock_peek();
	grants = lq_session_copy(false, &n);
	for (i = 0; i < n; i++)
	{
		LqSessionGrant *g = &grants[i];
		Datum		values[8];
		bool		nulls[8] = {false, false, false, false, false, false,
		false, false};
		char		owner[LQ_MAX_OWNER_LEN + 1];

		if (g->released)
			continue;			/* released by its session already */
		if (g->expires <= now)
			continue;			/* run out (one made on the fast path stays
								 * until someone asks for its lock) */
		lq_session_format_owner(owner, sizeof(owner), g->pid,
								g->session_start);
		values[0] = CStringGetTextDatum(g->lock_id);
		values[1] = CStringGetTextDatum(owner);
		values[2] = Int64GetDatum(g->token);
		values[3] = Int64GetDatum(g->ttl);
		values[4] = Int64GetDatum(g->acquired);
		values[5] = Int64GetDatum(g->expires);
		values[6] = Int32GetDatum(g->pid);
		values[7] = ObjectIdGetDatum(g->role);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(grants);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lockq_rowless_grants);

/*
 * lockq_rowless_grants lists the grants with an owner kept without their
 * row in lockq.owners while a marker covers them (lockq_leases.c):
 * lockq_locks and lockq_role_usage add them to the table's grants.
 */
Datum
lockq_rowless_grants(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LqLeaseGrant *grants;
	int			n;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!lq_call_is_available())
		return (Datum) 0;

	grants = lq_leases_rowless(&n);
	for (i = 0; i < n; i++)
	{
		LqLeaseGrant *g = &grants[i];
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};

		values[0] = CStringGetTextDatum(g->lock_id);
		values[1] = CStringGetTextDatum(g->owner);
		values[2] = Int64GetDatum(g->token);
		values[3] = Int64GetDatum(g->ttl);
		values[4] = Int64GetDatum(g->acquired);
		values[5] = Int64GetDatum(g->expires);
		values[6] = ObjectIdGetDatum(g->role);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(grants);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lockq_released_tokens);

/*
 * lockq_released_tokens lists the tokens of grants with an owner that a
 * session released by itself (lockq_leases.c) and whose rows the lock
 * server may not yet have deleted from lockq.owners, as the caller's
 * snapshot sees it: the views leave those rows out, so that they agree
 * with the release the caller was told of.
 */
Datum
lockq_released_tokens(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64	   *released;
	int			n;
	int			i;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (!lq_call_is_available())
		return (Datum) 0;

	LQ_FAULT("released-tokens-read");
	released = lq_leases_released(&n);
	for (i = 0; i < n; i++)
	{
		Datum		value = Int64GetDatum(released[i]);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	pfree(released);
	return (Datum) 0;
}

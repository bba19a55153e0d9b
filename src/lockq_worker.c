/*-------------------------------------------------------------------------
 *
 * lockq_worker.c
 *		The lock server: a background worker that owns all lock state,
 *		applies requests in arrival order in batches, and commits each
 *		batch as one transaction before anyone learns its outcome.
 *
 * One cycle of the loop:
 *	1. drain the arrival ring (at most lockq.batch_size slots);
 *	2. in one transaction: apply the requests in order, fire due timers
 *	   (lease expiry, timeouts, dropped client-side waiters), retry
 *	   hand-offs deferred by fenced transactions, queue the NOTIFYs;
 *	3. commit, flushed first or not (below);
 *	4. only then publish the answers into the slots and set the latches.
 *
 * Nothing a batch decides is visible before its commit.  Whether the commit
 * is flushed before the answers go out depends on what the batch promised
 * (lockq_durability.c decides; the rules are in doc/design/durability.md, and
 * nowhere else).  Batches that only add or remove waiters never wait for a
 * flush.  If a batch fails, the transaction rolls back, the in-memory state
 * is rebuilt from the tables and the requests are applied again, one per
 * transaction, so that a request that keeps failing is answered with its
 * error instead of stalling the service.
 *
 * SIGTERM (pg_terminate_backend, shutdown) is handled between batches: the
 * worker closes the clock, stores its exact value and exits with code 1,
 * so that the postmaster restarts it after one second unless the server is
 * shutting down.  A restarted worker rebuilds its state from the tables and
 * takes over the requests that were in flight (see lq_recover).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "lockq_clock.h"
#include "lockq_durability.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_outbox.h"
#include "lockq_recovery.h"
#include "lockq_rules.h"
#include "lockq_session.h"
#include "lockq_shmem.h"
#include "lockq_tables.h"
#include "lockq_worker.h"

/* How long to wait between retries after a batch failed, at most. */
#define LQ_MAX_ERROR_BACKOFF_MS		5000
/* Longest sleep when nothing is due. */
#define LQ_IDLE_SLEEP_MS			10000
/* While lockq's relations are locked by others: retry and log periods. */
#define LQ_BLOCKED_RETRY_MS			20
#define LQ_BLOCKED_LOG_MS			30000

/* Per batch. */
static bool lq_spi_connected = false;

/* Across batches. */
static List *lq_recheck = NIL;	/* slots to look at again (TopMemoryContext) */
static LqEntry *lq_ring_buf = NULL;
static bool lq_ready = false;	/* extension present and state loaded */
static bool lq_need_recover = true;
static bool lq_careful = false; /* after an error: one slot per transaction */
static bool lq_fast_open = false;	/* backends may grant by themselves */
static void lq_fast_maybe_open(void);
static bool lq_timers_left = false; /* the last batch left timers due (a
									 * wave of them fires in slices) */
static int	lq_error_backoff_ms = 0;
static Oid	lq_ext_oid = InvalidOid;
static bool lq_ext_recheck = true;	/* see lq_relcache_callback */
static uint64 lq_fence_gen_seen = 0;	/* LqShared.fence_gen when the
										 * deferred hand-offs were last tried */

/*
 * Set while a conflicting lock keeps the lock server from locking lockq's
 * relations: what it could not lock (see lq_handle_slot); NULL otherwise.
 */
static LqLockFailure *lq_blocked = NULL;
static LqLockFailure lq_blocked_data;
static TimestampTz lq_blocked_logged = 0;

/*
 * What a backend that gave up left to do while lockq's tables were locked
 * (lq_postpone_gone): a grant its answer brought, which it never read, to
 * hand back (undo), and, when its session ended (ended), the session-bound
 * grants of that session (pid, start) to end.  Its slot is not kept for it:
 * the session's next call (or, once every spare slot is held too, a new
 * session with the same BackendId) would wait for the slot as long as the
 * table lock lasts, not
 * lockq.table_lock_timeout.  The first batch that can lock the tables
 * applies them, in order, before anything else (lq_apply_gone), and they
 * are forgotten when it is published; applied again after a failed batch
 * and the rebuild of the state, they find nothing left to do.  A lock
 * server that exits first loses them; the next one, loading its state,
 * ends the grants of sessions that are gone and those marked released (see
 * lq_postpone_gone), and leaves an unread grant with an owner to it.
 */
typedef struct LqGone
{
	int			slotno;
	bool		undo;
	bool		ended;
	int			pid;
	int64		start;
	LqRequest	req;
	LqResult	res;
} LqGone;

static List *lq_gone = NIL;		/* of LqGone (TopMemoryContext) */
static bool lq_gone_applied = false;	/* by the batch in progress */

static void lq_handle_entry(LqEntry entry, int64 now);
static void lq_handle_quick_all(int slotno, int64 now);
static void lq_set_blocked(bool blocked);
static void lq_report(BackendState state, const char *what);
static void lq_report_waiting(void);

/* What pg_stat_activity shows of the lock server (lq_report). */
static const char lq_doing_idle[] = "lockq: waiting for requests";
static const char lq_doing_blocked[] = "lockq: waiting for a lock on its tables (see the log)";
static const char lq_doing_batch[] = "lockq: applying requests and timers";
static const char lq_doing_flush[] = "lockq: waiting until the batch is flushed (WAL, synchronous standbys)";
static const char lq_doing_recover[] = "lockq: rebuilding the lock state";
static const char lq_doing_first[] = "lockq: waiting for lock server 0 to settle the state a stop or crash left";
static int64 lq_next_deadline(void);

/*
 * lq_worker_register registers the lock servers, lockq.lock_servers of
 * them, each told its number (LqServer).  Called from _PG_init while
 * preloading.
 */
void
lq_worker_register(void)
{
	BackgroundWorker worker;
	int			i;

	for (i = 0; i < lockq_lock_servers; i++)
	{
		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
			BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = 1;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "lockq");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "lockq_worker_main");
		if (i == 0)
			snprintf(worker.bgw_name, BGW_MAXLEN, "lockq lock server");
		else
			snprintf(worker.bgw_name, BGW_MAXLEN, "lockq lock server %d", i);
		snprintf(worker.bgw_type, BGW_MAXLEN, "lockq lock server");
		worker.bgw_main_arg = Int32GetDatum(i);
		worker.bgw_notify_pid = 0;
		RegisterBackgroundWorker(&worker);
	}
}

/*
 * lq_defer puts an entry on the list to look at again at the next batch.
 */
static void
lq_defer(LqEntry entry)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	lq_recheck = lappend_int(lq_recheck, entry);
	MemoryContextSwitchTo(old);
}

/*
 * lq_refuse_blocked answers a request that waited lockq.table_lock_timeout
 * for lockq's relations to be free (see lq_blocked) with
 * LQ_ERR_TABLES_LOCKED, naming the relation and whoever holds it.
 */
static void
lq_refuse_blocked(int slotno, uint64 reqid)
{
	LqResult	res;
	char	   *rel = get_rel_name(lq_blocked->relid);

	lq_shmem_result_error(&res, LQ_ERR_TABLES_LOCKED, lq_blocked->holder);
	strlcpy(res.message, rel ? rel : "?", sizeof(res.message));
	lq_outbox_reply(slotno, reqid, &res);
}

/* A slot as the lock server found it (read under the slot's mutex). */
typedef struct LqSlotView
{
	LqSlotState state;
	bool		cancel;			/* the backend gave up on its request */
	bool		ended;			/* the backend has exited, and this lock
								 * server has not applied that yet */
	bool		mine;			/* the request went to this lock server */
	uint64		reqid;
	int			pid;
	int64		start;
	LqRequest	req;
	LqResult	res;
} LqSlotView;

/*
 * lq_undo_unread hands back what an answer its backend never read brought:
 * a fresh grant is undone; a lockq_await's or an enqueue's grant, which
 * stays with its owner, gets a short lease (lq_rules_unpicked_grant).
 * Needs the tables; doing it again finds nothing.
 */
static void
lq_undo_unread(const LqRequest *req, const LqResult *res, int64 now)
{
	lq_rules_undo_grant(req, res, now);
	if (req->op == LQ_OP_AWAIT || req->op == LQ_OP_ENQUEUE)
		lq_rules_unpicked_grant(req, res, now);
}

/*
 * lq_postpone_gone handles, while lockq's tables are locked, a slot whose
 * backend gave up on an answer that brought a grant (undo), or whose
 * session ended holding session-bound grants: both need the tables, which
 * only a later batch can lock.  What needs only memory is done now (an
 * ended session's waits withdrawn, its own fast-path grants adopted), the
 * rest is noted in lq_gone, and the slot is acknowledged (IDLE) or freed at
 * once, as it would have been with the tables free.
 */
static void
lq_postpone_gone(int slotno, const LqSlotView *v, bool undo, int64 now)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	LqGone	   *g = palloc0(sizeof(LqGone));

	g->slotno = slotno;
	g->undo = undo;
	g->ended = v->ended;
	g->pid = v->pid;
	g->start = v->start;
	g->req = v->req;
	g->res = v->res;
	lq_gone = lappend(lq_gone, g);
	MemoryContextSwitchTo(old);

	if (v->ended)
	{
		lq_rules_session_end_waits(slotno, now);
		lq_outbox_free(slotno, v->reqid);
		return;
	}

	/*
	 * A session-bound grant its live session never read is marked released
	 * in shared memory as well, as a quick release is: lockq_holds answers
	 * false from now on, and should this lock server exit before it can
	 * apply the undo, the next one ends the grant when it loads its state,
	 * where otherwise it would keep it for a session that does not know it
	 * holds it.  (An unread grant with an owner stays with its owner, whose
	 * client finds it; it is only shortened, lq_rules_unpicked_grant.)
	 */
	if (undo && v->req.session_owner && v->res.status == LQ_ST_GRANTED &&
		v->res.fresh_grant)
		(void) lq_session_mark_released(v->req.lock_id, v->res.token, v->pid,
										v->start, now);
	lq_outbox_ack(slotno, v->reqid);
}

/*
 * lq_apply_gone does what lq_postpone_gone left for a batch that holds the
 * table locks, oldest first; lq_end_batch forgets it once published.
 */
static void
lq_apply_gone(int64 now)
{
	ListCell   *lc;

	foreach(lc, lq_gone)
	{
		LqGone	   *g = lfirst(lc);

		if (g->undo)
			lq_undo_unread(&g->req, &g->res, now);
		if (g->ended)
			lq_rules_session_end_grants(g->slotno, g->pid, g->start, now);
	}
	lq_gone_applied = lq_gone != NIL;
}

/*
 * lq_handle_gave_up handles a slot whose backend gave up on its request
 * (a cancel: a wait is withdrawn, a grant the answer brought is undone) or
 * has exited (its session's grants and wait end, and the slot is freed).
 * While lockq's tables are locked by another transaction, whatever would
 * write them waits in lq_gone (lq_postpone_gone), and the slot does not.
 */
static void
lq_handle_gave_up(int slotno, const LqSlotView *v, int64 now)
{
	bool		undo = v->mine && v->cancel && v->state == LQ_SLOT_DONE;

	if (lq_blocked != NULL &&
		(undo || (v->ended && lq_rules_session_holds(slotno))))
	{
		lq_postpone_gone(slotno, v, undo, now);
		return;
	}
	if (v->mine && v->cancel)
	{
		if (v->state == LQ_SLOT_ACTIVE)
			lq_rules_cancel_wait(slotno, v->reqid, now);
		else if (undo)
			lq_undo_unread(&v->req, &v->res, now);
	}
	if (v->ended)
	{
		lq_rules_session_end(slotno, v->pid, v->start, now);
		lq_outbox_free(slotno, v->reqid);
	}
	else
		lq_outbox_ack(slotno, v->reqid);
}

/*
 * lq_handle_slot looks at one slot: a new request is applied; a request
 * the backend gave up on is withdrawn (or its grant undone); a finished
 * session is cleaned up and its slot freed.  A request is this lock
 * server's only if it went to it (LqSlot.server); a session's end is every
 * lock server's, each for its own locks, and the last to apply it frees
 * the slot.  Idempotent, so stale ring entries are harmless.
 *
 * While lockq's relations cannot be locked (lq_blocked), only what touches
 * nothing but memory is done: a waiting lockq_get is withdrawn, a session
 * that ended is cleaned up and its slot freed (what it held ends later, see
 * lq_postpone_gone), and a new request that has waited
 * lockq.table_lock_timeout is refused.  Everything else is deferred to a
 * later batch.
 */
static void
lq_handle_slot(int slotno, int64 now)
{
	LqSlot	   *slot = &lq_slots[slotno];
	LqSlotView	v;
	bool		refuse = false;
	bool		skip;

	if (lq_outbox_answered(slotno))
		return;					/* answered in this batch; rechecked later */

	/*
	 * The slot's quick releases were made before its current request (a
	 * session releases quickly only while it has none in flight), so they
	 * go first.  Their own ring entries usually see to that, but not when
	 * this entry is stale: one whose request was answered from the slots in
	 * flight (lq_recover_state, lq_careful_step) while it stayed in the
	 * ring, and which now finds the session's next request.  Applied here
	 * out of turn, that request would find the released lock still held by
	 * its session and get the ended grant's token back.
	 */
	if (lq_blocked == NULL)
		lq_handle_quick_all(slotno, now);

	SpinLockAcquire(&slot->mutex);
	v.state = slot->state;
	v.cancel = slot->cancel_requested;
	v.mine = slot->server == lq_my_server_no;
	v.ended = lq_slot_ends_left(slot, lq_my_server_no);
	/* another lock server's request, or an end this one has applied */
	skip = slot->session_ended ? !v.ended : !v.mine;
	v.reqid = slot->reqid;
	v.pid = slot->pid;
	v.start = slot->session_start;

	/*
	 * Only the request's own lock server takes it.  A stale entry in another
	 * lock server's ring (a request of the slot's that went to it before,
	 * answered from the slots in flight) must not touch it: marked ACTIVE
	 * and then skipped, the request was lost, its lock server never applied
	 * it, and the backend waited for ever (seen in 106_scoped_delay with two
	 * lock servers, at their first start).
	 */
	if (v.mine && v.state == LQ_SLOT_PENDING && !v.cancel &&
		!slot->session_ended)
	{
		refuse = lq_blocked != NULL &&
			now - slot->submitted >= (int64) lockq_table_lock_timeout * 1000;
		if (lq_blocked == NULL || refuse)
			slot->state = LQ_SLOT_ACTIVE;
	}
	v.req = slot->req;
	v.res = slot->res;
	SpinLockRelease(&slot->mutex);

	if (v.state == LQ_SLOT_FREE || skip)
		return;
	if (v.cancel || v.ended)
	{
		lq_handle_gave_up(slotno, &v, now);
		return;
	}
	if (v.state != LQ_SLOT_PENDING)
		return;
	if (refuse)
		lq_refuse_blocked(slotno, v.reqid);
	else if (lq_blocked != NULL)
		lq_defer(lq_entry_request(slotno));
	else
		lq_rules_apply(slotno, v.reqid, &v.req, now);
}

/*
 * lq_handle_quick applies the oldest quick release of a slot that is this
 * lock server's and not applied in this batch yet (see lockq_release).  It
 * leaves the slot's queue only when the batch is published
 * (lq_outbox_quick_done), so that a failed batch applies it again.
 */
static void
lq_handle_quick(int slotno, int64 now)
{
	LqSlot	   *slot = &lq_slots[slotno];
	int			taken = lq_outbox_quick_taken(slotno);
	int64		token = 0;
	char		lock_id[LQ_MAX_ID_LEN + 1];
	bool		found;

	SpinLockAcquire(&slot->mutex);
	found = lq_shmem_slot_quick(slot, lq_my_server_no, taken, &token, lock_id);
	SpinLockRelease(&slot->mutex);
	if (!found)
		return;					/* a stale ring entry: already applied */

	lq_shmem_stat_add(LQ_STAT_REQUESTS, 1);
	lq_rules_quick_release(lock_id, token, now);
	lq_outbox_quick_done(slotno);
}

/*
 * lq_handle_quick_all applies every quick release of a slot that is this
 * lock server's and not applied in this batch yet, oldest first.
 */
static void
lq_handle_quick_all(int slotno, int64 now)
{
	LqSlot	   *slot = &lq_slots[slotno];

	for (;;)
	{
		int			nquick;

		SpinLockAcquire(&slot->mutex);
		nquick = lq_shmem_slot_nquick(slot, lq_my_server_no);
		SpinLockRelease(&slot->mutex);
		if (lq_outbox_quick_taken(slotno) >= nquick)
			break;
		lq_handle_quick(slotno, now);
	}
}

/*
 * lq_handle_entry handles one arrival-ring entry: a slot's request
 * (slotno), or one quick release of a slot (-(slotno + 1)).
 */
static void
lq_handle_entry(LqEntry entry, int64 now)
{
	if (lq_entry_is_quick(entry) && lq_blocked != NULL)
		lq_defer(entry);
	else if (lq_entry_is_quick(entry))
		lq_handle_quick(lq_entry_slot(entry), now);
	else
		lq_handle_slot(lq_entry_slot(entry), now);
}

/*
 * lq_drop_quick gives up on the oldest quick release of a slot, whose
 * application keeps failing.  The session was told the lock is released,
 * and it is marked so in shared memory: the state rebuilt next ends it
 * (lq_recovery_load ends released grants that no slot still has queued).
 */
static void
lq_drop_quick(int slotno, const char *message)
{
	LqSlot	   *slot = &lq_slots[slotno];

	SpinLockAcquire(&slot->mutex);
	lq_shmem_slot_drop_quick(slot, lq_my_server_no, 1);
	SpinLockRelease(&slot->mutex);
	if (message != NULL)
		ereport(LOG,
				(errmsg("lockq lock server could not apply a release at once: %s",
						message)));
}

/*
 * lq_fail_slot answers a slot whose processing keeps failing with the
 * error answer res, so that its backend does not wait forever: its
 * request, if it went to this lock server, or its session's end.  No
 * transaction needed.
 */
static void
lq_fail_slot(int slotno, const LqResult *res)
{
	LqSlot	   *slot;
	int			procno = -1;
	bool		freed = false;

	if (slotno < 0 || slotno >= lq_shared->nslots)
	{
		elog(WARNING, "lockq request slot %d out of range", slotno);
		return;
	}
	slot = &lq_slots[slotno];

	SpinLockAcquire(&slot->mutex);
	if (slot->session_ended)
		freed = lq_shmem_slot_end_done(slot, lq_my_server_no);
	else if (slot->server != lq_my_server_no)
	{
		/* another lock server's request (a stale entry): not ours to answer */
	}
	else if (slot->cancel_requested)
	{
		slot->state = LQ_SLOT_IDLE;
		slot->cancel_requested = false;
		procno = slot->pgprocno;
	}
	else if (slot->state == LQ_SLOT_PENDING || slot->state == LQ_SLOT_ACTIVE)
	{
		slot->res = *res;
		slot->state = LQ_SLOT_DONE;
		procno = slot->pgprocno;
	}
	SpinLockRelease(&slot->mutex);

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
	if (freed)
		ConditionVariableBroadcast(&slot->freed);
}

static int
lq_cmp_arrival(const ListCell *a, const ListCell *b)
{
	uint64		x = lq_slots[lfirst_int(a)].arrival;
	uint64		y = lq_slots[lfirst_int(b)].arrival;

	return (x < y) ? -1 : (x > y) ? 1 : 0;
}

/*
 * lq_slots_in_flight lists, as arrival-ring entries (see lq_handle_entry),
 * everything the slots hold for this lock server to do (their requests
 * that went to it, their quick releases of its locks, their sessions'
 * ends), slot by slot in arrival order: a slot's quick releases come
 * before its request, as they were made before it.  A request left ACTIVE
 * but not queued was taken by a
 * previous worker (or a failed batch) and never committed: it goes back to
 * PENDING to be applied again.  Not when the current batch has answered it
 * already: loading the state fires the timers that came due while no lock
 * server ran, and a lease's end hands the lock to a waiting backend, whose
 * answer is staged for its ACTIVE slot (TAP 108_rebuild_answers).
 */
static List *
lq_slots_in_flight(void)
{
	List	   *slots = NIL;
	List	   *entries = NIL;
	ListCell   *lc;
	int			i;

	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		bool		mine;
		bool		busy;

		SpinLockAcquire(&slot->mutex);
		mine = slot->server == lq_my_server_no;
		if (mine && slot->state == LQ_SLOT_ACTIVE &&
			!lq_rules_is_waiting(i, slot->reqid) && !lq_outbox_answered(i))
			slot->state = LQ_SLOT_PENDING;
		busy = slot->state != LQ_SLOT_FREE &&
			(lq_slot_ends_left(slot, lq_my_server_no) ||
			 (mine && (slot->state != LQ_SLOT_IDLE || slot->cancel_requested)) ||
			 lq_shmem_slot_nquick(slot, lq_my_server_no) > 0);
		SpinLockRelease(&slot->mutex);
		if (busy)
			slots = lappend_int(slots, i);
	}

	list_sort(slots, lq_cmp_arrival);
	foreach(lc, slots)
	{
		int			slotno = lfirst_int(lc);
		LqSlot	   *slot = &lq_slots[slotno];
		int			nquick;
		bool		request;
		int			k;

		SpinLockAcquire(&slot->mutex);
		nquick = lq_shmem_slot_nquick(slot, lq_my_server_no);
		request = slot->server == lq_my_server_no ||
			lq_slot_ends_left(slot, lq_my_server_no);
		SpinLockRelease(&slot->mutex);
		for (k = 0; k < nquick; k++)
			entries = lappend_int(entries, lq_entry_quick(slotno));
		if (request)
			entries = lappend_int(entries, lq_entry_request(slotno));
	}
	list_free(slots);
	return entries;
}

/*
 * lq_begin_batch starts a batch's transaction.  The hot path writes rows
 * with the heap routines and needs neither SPI nor a snapshot; loading the
 * state does (lq_spi_connect).
 */
static void
lq_begin_batch(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	lq_outbox_begin();
	lq_durability_begin();
}

static void
lq_spi_connect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	lq_spi_connected = true;
}

/*
 * While the lock server waits for its WAL to be flushed and replicated
 * (a commit, or lq_wait_replicated), a shutdown request must end that wait,
 * which watches only ProcDiePending; and what the wait was for must then
 * not be published.  lq_sigterm sets ProcDiePending only then, so that a
 * shutdown at any other moment stays the clean stop of the main loop.
 */
static volatile sig_atomic_t lq_in_durable_wait = false;

static void
lq_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	ShutdownRequestPending = true;
	if (lq_in_durable_wait)
	{
		ProcDiePending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * lq_sigint handles SIGINT, which PostgreSQL's own timeouts send to their
 * process (lock_timeout as a last resort: the lock server takes its table
 * locks without waiting, see lq_tables_try_lock).  A query cancel from
 * outside (pg_cancel_backend) is ignored: it would end a wait for
 * synchronous replication early, and the batch would be answered before
 * its grants were replicated.  So a cancel counts only when a timeout
 * caused it, and never during such a wait.
 */
static void
lq_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (!lq_in_durable_wait &&
		(get_timeout_indicator(LOCK_TIMEOUT, false) ||
		 get_timeout_indicator(STATEMENT_TIMEOUT, false)))
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * lq_after_durable_wait ends a wait begun with lq_in_durable_wait set.  If a
 * shutdown request cut it short, the WAL waited for may be on this server
 * only (SyncRepWaitForLSN gives up with a warning): the lock server exits
 * without publishing anything of the batch.  A restarted lock server waits
 * again (lq_wait_replicated) before it answers anyone.
 */
static void
lq_after_durable_wait(void)
{
	lq_in_durable_wait = false;
	if (ProcDiePending)
		ereport(FATAL,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("terminating the lockq lock server before its last batch was durable"),
				 errdetail("Nothing of that batch was made known.")));
}

/*
 * lq_wait_replicated waits until all WAL flushed so far is acknowledged by
 * the synchronous standbys, if synchronous replication is configured, as a
 * commit does.  The lock server calls it before it rebuilds its state: a
 * previous lock server may have committed a batch (flushed locally, as
 * every commit that waits for standbys is) and been stopped before the
 * standbys had it (see lq_after_durable_wait), and nothing loaded from
 * such a batch may be answered before it would have been.
 */
static void
lq_wait_replicated(void)
{
	/* nobody answered waits on the standbys */
	lq_shmem_wakes_hand_on(NULL, 0);
	lq_in_durable_wait = true;
	SyncRepWaitForLSN(GetFlushRecPtr(NULL), false);
	lq_after_durable_wait();
}

/*
 * lq_commit commits the batch's transaction.  A batch that must be flushed
 * before anyone sees it (see the top of this file) is committed never
 * weaker than with a local flush, and as strongly as the server is
 * configured (synchronous standbys) when that is more; any other batch
 * asynchronously.  The level is set for this one commit by assigning the
 * variable behind synchronous_commit and restoring it at once, not with
 * set_config_option: that would make every commit walk all settings
 * (AtEOXact_GUC, 7% of the worker's time under load).  Its assign hook
 * only matters for levels above a local flush, which are never assigned
 * here: a weaker configured level is raised with ForceSyncCommit.
 */
static void
lq_commit(bool sync)
{
	int			configured = synchronous_commit;

	if (!sync)
		synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
	else if (synchronous_commit < SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		ForceSyncCommit();
	lq_in_durable_wait = sync;
	if (sync)
	{
		/* a flush, or standbys, may take long: wake the answered first */
		lq_shmem_wakes_hand_on(NULL, 0);
		lq_report(STATE_RUNNING, lq_doing_flush);
		pg_atomic_write_u64(&lq_my_server->durable_wait_since,
							(uint64) lq_clock_peek());
	}
	PG_TRY();
	{
		if (sync)
			LQ_FAULT("commit-durable-wait");
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		synchronous_commit = configured;
		pg_atomic_write_u64(&lq_my_server->durable_wait_since, 0);
	}
	PG_END_TRY();
	if (sync)
		lq_after_durable_wait();
}

/*
 * lq_commit_batch commits and then makes the batch's outcome visible: the
 * new clock ceiling, the gauges, the answers.
 */
static void
lq_commit_batch(void)
{
	bool		sync = lq_durability_flush_needed();
	List	   *again;
	MemoryContext old;

	lq_outbox_emit_notices();
	lq_durability_prepare_commit();
	LQ_FAULT("batch-before-commit");
	lq_tables_end_batch(true);
	if (lq_spi_connected)
	{
		SPI_finish();
		PopActiveSnapshot();
		lq_spi_connected = false;
	}
	lq_outbox_seal();
	lq_commit(sync);
	LQ_FAULT("batch-after-commit");

	lq_durability_committed();
	/* gauges first: a caller that reads lockq_stats after its answer sees them */
	lq_rules_publish_gauges();
	again = lq_outbox_publish();
	lq_shmem_ring_settled();
	old = MemoryContextSwitchTo(TopMemoryContext);
	lq_recheck = list_concat(lq_recheck, again);
	MemoryContextSwitchTo(old);
	list_free(again);
	LQ_FAULT("batch-after-publish");
	if (!lq_fast_open)
		lq_fast_maybe_open();
	lq_shmem_stat_add(LQ_STAT_BATCHES, 1);
	if (sync)
		lq_shmem_stat_add(LQ_STAT_SYNC_COMMITS, 1);
}

/*
 * lq_discard_batch forgets everything a failed batch collected, unless
 * it failed after its commit: then it is published (lq_outbox_discard).
 */
static void
lq_discard_batch(void)
{
	List	   *again;
	MemoryContext old;

	lq_tables_end_batch(false);
	lq_spi_connected = false;
	lq_gone_applied = false;	/* applied again by the next batch */
	again = lq_outbox_discard();
	old = MemoryContextSwitchTo(TopMemoryContext);
	lq_recheck = list_concat(lq_recheck, again);
	MemoryContextSwitchTo(old);
	list_free(again);
	lq_durability_discard();
}

static void
lq_end_batch(void)
{
	if (lq_gone_applied)
	{
		list_free_deep(lq_gone);
		lq_gone = NIL;
		lq_gone_applied = false;
	}
	lq_report_waiting();
}

/*
 * lq_batch_failed cleans up after an error in a batch and returns a copy
 * of the error for the caller to report to a backend.
 */
static ErrorData *
lq_batch_failed(MemoryContext ccxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(ccxt);
	edata = CopyErrorData();
	EmitErrorReport();
	FlushErrorState();
	AbortCurrentTransaction();
	lq_discard_batch();
	lq_shmem_stat_add(LQ_STAT_BATCH_ERRORS, 1);
	lq_need_recover = true;
	lq_careful = true;
	lq_error_backoff_ms = Min(Max(lq_error_backoff_ms * 2, 100),
							  LQ_MAX_ERROR_BACKOFF_MS);
	lq_report_waiting();
	return edata;
}

/*
 * lq_relcache_callback notes that the extension may have changed: dropping
 * (or creating again) the extension invalidates lockq.owners, and a full
 * reset (relid InvalidOid) might hide that.  Cheaper than looking up the
 * extension in every batch.
 */
static void
lq_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == lq_tables_owners_relid())
		lq_ext_recheck = true;
}

/*
 * lq_extension_changed tells whether the extension was dropped or created
 * again since the state was loaded; then the state must be loaded anew.
 */
static bool
lq_extension_changed(void)
{
	Oid			extoid;

	if (!lq_ext_recheck)
		return false;
	lq_ext_recheck = false;
	return !lq_tables_installed(&extoid) || extoid != lq_ext_oid;
}

/*
 * lq_slot_is_queued: is the slot a lockq_get waiting in a queue, by what
 * the last published batch said (its queue position)?
 */
static bool
lq_slot_is_queued(int slotno)
{
	LqSlot	   *slot = &lq_slots[slotno];
	bool		queued;

	SpinLockAcquire(&slot->mutex);
	queued = slot->queued_ts > 0 && !slot->cancel_requested &&
		!slot->session_ended;
	SpinLockRelease(&slot->mutex);
	return queued;
}

/*
 * lq_fail_all answers requests in flight with an error, for when the lock
 * server cannot serve, so that no backend waits for it indefinitely.  With
 * all (the extension is not installed: there is no lock state at all) that
 * is every request, and quick releases are dropped: their session was told
 * the lock is released already.  Otherwise (the state cannot be loaded
 * just now) queued lockq_get calls keep their place, quick releases stay
 * queued, and requests submitted less than min_age microseconds ago wait
 * for the next attempt; everything else is answered with the error answer
 * res.
 */
static void
lq_fail_all(const LqResult *res, bool all, int64 min_age)
{
	List	   *entries = lq_slots_in_flight();
	ListCell   *lc;
	int64		now = lq_clock_peek();

	foreach(lc, entries)
	{
		LqEntry		entry = lfirst_int(lc);
		int			slotno = lq_entry_slot(entry);

		if (lq_entry_is_quick(entry))
		{
			if (all)
				lq_drop_quick(slotno, NULL);
		}
		else if (all || (!lq_slot_is_queued(slotno) &&
						 now - lq_slots[slotno].submitted >= min_age))
			lq_fail_slot(slotno, res);
	}
	list_free(entries);
}

/*
 * lq_lock_or_raise takes the locks on lockq's relations without waiting
 * (lq_tables_try_lock) or raises lock_not_available, naming them.
 */
static void
lq_lock_or_raise(void)
{
	LqLockFailure fail;

	if (!lq_tables_try_lock(&fail))
	{
		char	   *rel = get_rel_name(fail.relid);

		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not lock relation \"%s.%s\", locked by process %d",
						LQ_SCHEMA, rel ? rel : "?", fail.holder)));
	}
}

/*
 * lq_fast_maybe_open lets backends grant free session-bound locks by
 * themselves (lockq_fastpath.c) once the state is loaded, unless every
 * lock is delayed after a crash: a lock the rules do not know of yet must
 * wait too.  Then the first batch after the delay opens it.
 */
static void
lq_fast_maybe_open(void)
{
	if (!OidIsValid(lq_ext_oid) || lq_rules_every_lock_delayed(lq_clock_peek()))
		return;
	lq_fastpath_start();
	lq_fast_open = true;
}

/*
 * lq_recover_installation finds out whether the extension is installed,
 * and in which installation: session-bound grants belong to one, and
 * dropping it ends every lock, as it drops the tables.
 */
static bool
lq_recover_installation(void)
{
	Oid			extoid;
	bool		installed = lq_tables_installed(&extoid);

	if (!installed || extoid != lq_my_server->grants_extoid)
	{
		lq_session_clear();
		lq_leases_clear();
		lq_my_server->grants_extoid = installed ? extoid : InvalidOid;
	}
	lq_ext_oid = installed ? extoid : InvalidOid;
	return installed;
}

/*
 * lq_recover_state rebuilds the lock state: lockq_durability.c takes over
 * the clock and the ceilings (and, on the first start in a shared-memory
 * lifetime, settles what a stop or crash left, lq_durability_start), the
 * unsettled locks give the delays, the tables and shared memory give the
 * rest.  Leases that ended while no lock server ran end before any request
 * in flight is applied: a renewal sent before the end but applied after it
 * must fail, not revive the lease.  Then, unless careful, the requests in
 * flight are applied in arrival order.
 */
static void
lq_recover_state(void)
{
	int64		now;
	List	   *delays;
	int64		all_until;

	lq_spi_connect();
	lq_tables_prepare();
	lq_lock_or_raise();
	lq_tables_note_files();
	now = lq_durability_start(!lq_shared->started);
	delays = lq_durability_load(now, &all_until);
	lq_recovery_load(now, delays, all_until);
	(void) lq_rules_run_timers(now);
	if (!lq_careful)
	{
		List	   *slots = lq_slots_in_flight();
		ListCell   *lc;

		lq_durability_extend_clock(now);
		foreach(lc, slots)
			lq_handle_entry(lfirst_int(lc), now);
		list_free(slots);
	}
}

/*
 * lq_recover (re)builds the state, after the batch its predecessor left
 * behind, if any, is settled (lq_outbox_resolve).  Returns false when the
 * extension is not installed (there is nothing to serve) or the state
 * cannot be loaded; requests in flight are then answered with the error.
 */
static bool
lq_recover(void)
{
	MemoryContext ccxt = CurrentMemoryContext;
	volatile bool installed = false;
	volatile bool failed = false;
	ErrorData  *edata = NULL;

	lq_report(STATE_RUNNING, lq_doing_recover);
	lq_shmem_ring_adopt();
	lq_wait_replicated();
	lq_begin_batch();
	PG_TRY();
	{
		LQ_FAULT("recover-start");
		lq_outbox_resolve();
		/* no backend grants by itself until the state is loaded anew */
		lq_fastpath_stop();
		lq_fast_open = false;
		installed = lq_recover_installation();
		if (installed)
			lq_recover_state();
		lq_commit_batch();
	}
	PG_CATCH();
	{
		edata = lq_batch_failed(ccxt);
		failed = true;
	}
	PG_END_TRY();

	if (failed)
	{
		LqResult	res;

		/*
		 * Nobody may wait for a state that cannot be loaded: everything in
		 * flight is answered with the error, and retried requests are
		 * answered again until loading succeeds.
		 */
		ereport(LOG,
				(errmsg("lockq lock server could not load its state: %s",
						edata->message),
				 edata->hint ? errhint("%s", edata->hint) : 0));
		lq_shmem_result_failed(&res, LQ_ERR_LOAD_FAILED, edata->sqlerrcode,
							   edata->message, edata->hint);
		lq_fail_all(&res, false,
					edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ?
					(int64) lockq_table_lock_timeout * 1000 : 0);
		/* a table lock: the first batch after it says it is over */
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE &&
			lq_blocked_logged == 0)
			lq_blocked_logged = GetCurrentTimestamp();
		FreeErrorData(edata);
		return false;
	}

	lq_end_batch();
	if (installed)
	{
		/* after the commit: backends may read the tables from now on */
		pg_write_barrier();
		if (!lq_shared->started)
		{
			lq_shared->started = true;
			lq_shmem_wake_servers();	/* the others may load theirs now */
		}
		lq_fast_maybe_open();
	}
	lq_need_recover = false;
	if (!installed)
	{
		LqResult	res;

		lq_shmem_result_error(&res, LQ_ERR_NOT_INSTALLED, 0);
		lq_fail_all(&res, true, 0);
	}
	return installed;
}

/*
 * lq_abandon_batch gives up the batch in progress, before it changed
 * anything, because the state must be loaded anew: the extension was
 * dropped or created again, or (rewritten) a table was rewritten and the
 * rows' addresses are stale (lq_tables_rewritten).  The requests it drained
 * are still PENDING in their slots, and the recovery scan finds them.
 */
static void
lq_abandon_batch(bool rewritten)
{
	AbortCurrentTransaction();
	lq_discard_batch();
	lq_report_waiting();
	if (rewritten)
		ereport(LOG,
				(errmsg("lockq's tables were rewritten, reloading the lock state"),
				 errdetail("VACUUM FULL, CLUSTER or another command gave a table of lockq a new file.")));
	else
		ereport(LOG, (errmsg("lockq extension changed, reloading the lock state")));
	lq_need_recover = true;
}

/*
 * lq_careful_step handles the slots in flight one transaction each, after
 * an error.  A slot whose transaction fails again gets the error as its
 * answer, and the state is rebuilt before going on.
 */
static void
lq_careful_step(void)
{
	List	   *slots = lq_slots_in_flight();
	ListCell   *lc;
	MemoryContext ccxt = CurrentMemoryContext;

	foreach(lc, slots)
	{
		LqEntry		entry = lfirst_int(lc);
		int			slotno = lq_entry_slot(entry);
		volatile bool failed = false;
		volatile bool rewritten = false;
		ErrorData  *edata = NULL;

		lq_begin_batch();
		PG_TRY();
		{
			if (lq_extension_changed())
				elog(ERROR, "lockq extension changed during recovery");
			rewritten = lq_tables_rewritten();
			if (!rewritten)
			{
				lq_handle_entry(entry, lq_clock_peek());
				lq_commit_batch();
			}
		}
		PG_CATCH();
		{
			edata = lq_batch_failed(ccxt);
			failed = true;
		}
		PG_END_TRY();

		if (rewritten)
		{
			lq_abandon_batch(true);
			break;
		}
		if (failed)
		{
			if (lq_entry_is_quick(entry))
				lq_drop_quick(slotno, edata->message);
			else
			{
				LqResult	res;

				lq_shmem_result_failed(&res, LQ_ERR_FAILED, edata->sqlerrcode,
									   edata->message, edata->hint);
				lq_fail_slot(slotno, &res);
			}
			FreeErrorData(edata);
			break;				/* rebuild the state, then go on */
		}
		lq_end_batch();
	}
	list_free(slots);
	if (!lq_need_recover)
		lq_careful = false;
}

/* What one batch will do, decided before its transaction starts. */
typedef struct LqBatchPlan
{
	List	   *entries;		/* arrival-ring entries to handle, in order */
	bool		full;			/* the ring had a whole batch: more may wait */
	int64		now;
	bool		retry_deferred; /* a fenced transaction ended since the
								 * last try of the deferred hand-offs */
	uint64		fence_gen;
} LqBatchPlan;

/*
 * lq_plan_batch drains the arrival ring (the slots in flight, after an
 * overflow) and adds the slots to look at again; false when there is
 * nothing to do: no entry, nothing due, no deferred hand-off to retry, and
 * no table lock to try again.
 */
static bool
lq_plan_batch(LqBatchPlan *plan)
{
	bool		overflow = false;
	int			n;
	int64		due;

	n = lq_shmem_ring_drain(lq_ring_buf, lockq_batch_size, &overflow);
	plan->full = n == lockq_batch_size;
	plan->now = lq_clock_peek();
	due = lq_next_deadline();

	/*
	 * Hand-offs held back by fenced transactions are tried again only when
	 * such a transaction has ended since the last try (lq_fences_end in
	 * lockq_fences.c): while nothing changes they cost nothing.
	 */
	plan->fence_gen = pg_atomic_read_u64(&lq_shared->fence_gen);
	plan->retry_deferred = lq_rules_has_deferred() &&
		plan->fence_gen != lq_fence_gen_seen;

	if (n == 0 && !overflow && lq_recheck == NIL && lq_gone == NIL &&
		!(due > 0 && due <= plan->now) && !plan->retry_deferred &&
		lq_blocked == NULL)
		return false;

	plan->entries = NIL;
	if (overflow)
		plan->entries = lq_slots_in_flight();
	else
	{
		int			i;

		for (i = 0; i < n; i++)
			plan->entries = lappend_int(plan->entries, lq_ring_buf[i]);
	}
	plan->entries = list_concat(plan->entries, lq_recheck);
	list_free(lq_recheck);
	lq_recheck = NIL;
	return true;
}

/*
 * lq_apply_batch does a batch's work in its transaction.  While another
 * transaction locks lockq's tables, only what needs no table is done (see
 * lq_handle_slot); otherwise timers that came due before the requests go
 * first, then the requests in arrival order, the timers again, deferred
 * hand-offs, and the settling of unsettled locks.  Returns false, having
 * done nothing, when a table was rewritten since the state was loaded.
 */
static bool
lq_apply_batch(const LqBatchPlan *plan)
{
	ListCell   *lc;

	LQ_FAULT("batch-start");
	lq_timers_left = false;
	lq_set_blocked(!lq_tables_try_lock(&lq_blocked_data));
	if (lq_blocked != NULL)
	{
		lq_rules_run_wait_timeouts(plan->now);
		foreach(lc, plan->entries)
			lq_handle_entry(lfirst_int(lc), plan->now);
		return true;
	}
	if (lq_tables_rewritten())
		return false;
	if (plan->now + LQ_CLOCK_MARGIN_US > lq_clock_ceiling())
		lq_durability_extend_clock(plan->now);
	lq_apply_gone(plan->now);
	(void) lq_rules_run_timers(plan->now);
	foreach(lc, plan->entries)
	{
		lq_handle_entry(lfirst_int(lc), plan->now);
		LQ_FAULT("batch-apply");
	}
	lq_timers_left = lq_rules_run_timers(plan->now);
	if (plan->retry_deferred)
	{
		lq_rules_retry_deferred(plan->now);
		lq_fence_gen_seen = plan->fence_gen;
	}
	lq_durability_settle_markers(plan->now);
	{
		bool		all;
		List	   *rows = lq_durability_take_needs_rows(&all);

		lq_rules_give_rows(rows, all);
		list_free_deep(rows);
	}
	return true;
}

/*
 * lq_batch runs one batch: one transaction, committed (see lq_commit_batch)
 * and published, or failed and discarded.  Returns true when there is
 * probably more to do at once (the ring had more than a batch).
 */
static bool
lq_batch(void)
{
	MemoryContext ccxt = CurrentMemoryContext;
	LqBatchPlan plan;
	volatile bool failed = false;
	volatile int reload = 0;	/* 1: extension changed, 2: rewritten */
	ErrorData  *edata = NULL;

	if (!lq_plan_batch(&plan))
		return false;

	lq_report(STATE_RUNNING, lq_doing_batch);
	lq_begin_batch();
	PG_TRY();
	{
		if (lq_extension_changed())
			reload = 1;
		else if (!lq_apply_batch(&plan))
			reload = 2;
		else
			lq_commit_batch();
	}
	PG_CATCH();
	{
		edata = lq_batch_failed(ccxt);
		failed = true;
	}
	PG_END_TRY();

	list_free(plan.entries);
	if (reload != 0)
	{
		lq_abandon_batch(reload == 2);
		return false;
	}
	if (failed)
	{
		FreeErrorData(edata);
		return false;
	}
	lq_end_batch();
	lq_error_backoff_ms = 0;
	return plan.full || lq_timers_left;
}

/*
 * lq_next_deadline: the earliest time something is due, in the rules (a
 * lease, a timeout, a delay) or in lockq_durability.c (settling unsettled
 * locks); 0 if nothing is.
 */
static int64
lq_next_deadline(void)
{
	int64		a = lq_rules_next_deadline();
	int64		b = lq_durability_next_deadline();

	if (a == 0 || (b != 0 && b < a))
		return b;
	return a;
}

/*
 * lq_set_blocked notes whether this batch could lock lockq's relations
 * (see lq_tables_try_lock), and logs when that changes, and every
 * LQ_BLOCKED_LOG_MS while it lasts: an administrator must learn that a
 * lock of theirs stalls lockq.
 */
static void
lq_set_blocked(bool blocked)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!blocked)
	{
		if (lq_blocked_logged != 0)
			ereport(LOG,
					(errmsg("lockq lock server can lock its tables again")));
		lq_blocked_logged = 0;
		lq_blocked = NULL;
		return;
	}
	lq_blocked = &lq_blocked_data;
	lq_report(STATE_RUNNING, lq_doing_blocked);
	if (lq_blocked_logged == 0 ||
		TimestampDifferenceExceeds(lq_blocked_logged, now, LQ_BLOCKED_LOG_MS))
	{
		char	   *rel = get_rel_name(lq_blocked->relid);

		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lockq lock server cannot lock relation \"%s.%s\", locked by process %d",
						LQ_SCHEMA, rel ? rel : "?", lq_blocked->holder),
				 errdetail("Requests that could write lockq's tables wait at most lockq.table_lock_timeout, then fail; expiries and hand-offs wait until the lock is released.")));
		lq_blocked_logged = now;
	}
}

/*
 * lq_report shows what the lock server is doing in pg_stat_activity (state
 * and query), so that an administrator can see it applying requests,
 * waiting for a flush or a standby, rebuilding its state or waiting for a
 * table lock.  what must be a constant string: an unchanged report costs
 * nothing.
 */
static void
lq_report(BackendState state, const char *what)
{
	static const char *last = NULL;
	static BackendState last_state = STATE_UNDEFINED;

	if (what == last && state == last_state)
		return;
	pgstat_report_activity(state, what);
	last = what;
	last_state = state;
}

/*
 * lq_report_waiting: between batches the lock server waits for requests,
 * or, while another transaction locks its tables, for that lock.
 */
static void
lq_report_waiting(void)
{
	if (lq_blocked != NULL)
		lq_report(STATE_RUNNING, lq_doing_blocked);
	else
		lq_report(STATE_IDLE, lq_doing_idle);
}

/*
 * lq_compact_if_oversized rebuilds the state when it holds far more memory
 * than it needs (lq_rules_oversized), at most once a minute.
 */
static void
lq_compact_if_oversized(void)
{
	static TimestampTz last = 0;
	TimestampTz now = GetCurrentTimestamp();
	Size		before;
	Size		after;

	if (!TimestampDifferenceExceeds(last, now, 60 * 1000) ||
		!lq_rules_oversized(&before))
		return;
	last = now;
	if (!lq_recover())
		return;
#ifdef __GLIBC__
	/* freed blocks below the top of the heap go back to the system too */
	(void) malloc_trim(0);
#endif
	(void) lq_rules_oversized(&after);
	ereport(LOG,
			(errmsg("lockq lock server rebuilt its state to return memory: %zu MB before, %zu MB after",
					before / (1024 * 1024), after / (1024 * 1024))));
}

/*
 * lq_cycle does all work that is due and returns how long the worker may
 * sleep, in milliseconds.
 */
static long
lq_cycle(void)
{
	int64		due;
	int64		now;
	long		sleep_ms = LQ_IDLE_SLEEP_MS;
	long		stats_ms;
	int			rounds;

	if (lq_need_recover || !lq_ready)
	{
		/*
		 * The first start in a shared-memory lifetime (the clock's plan, the
		 * settling of what a stop or crash left, the token floor) is lock
		 * server 0's, for all of them: the others load their state after it
		 * (lockq_worker_main's wake-up), which their requests wait for.
		 */
		if (lq_my_server_no > 0 && !lq_shmem_server_started())
		{
			lq_report(STATE_IDLE, lq_doing_first);
			return LQ_IDLE_SLEEP_MS;
		}
		lq_ready = lq_recover();
		if (!lq_ready)
			return lq_error_backoff_ms > 0 ? lq_error_backoff_ms : LQ_IDLE_SLEEP_MS;
	}
	if (lq_careful)
	{
		lq_careful_step();
		if (lq_need_recover)
			return lq_error_backoff_ms;
	}

	for (rounds = 0; rounds < 100; rounds++)
	{
		bool		more = lq_batch();

		if (lq_need_recover)
			return lq_error_backoff_ms;
		if (!more || ShutdownRequestPending)
			break;
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * After a flood of locks or waiters, the memory they took stays with the
	 * state's hash tables: rebuild the state from the tables, which returns
	 * it (at most once a minute).
	 */
	lq_compact_if_oversized();

	/*
	 * Report the table statistics (rate-limited by pgstat itself): without
	 * them autovacuum never learns of the dead rows every grant leaves in
	 * lockq.owners.  A report that had to wait says when to try again.
	 */
	stats_ms = pgstat_report_stat(false);
	if (stats_ms > 0)
		sleep_ms = Min(sleep_ms, stats_ms);

	now = lq_clock_peek();
	due = lq_next_deadline();
	if (due > 0)
		sleep_ms = Min(sleep_ms, Max(0, (due - now + 999) / 1000));
	if (lq_recheck != NIL || lq_shmem_hint_lazy_stranded())
		sleep_ms = 0;
	/* blocked: what is due must wait; try again soon, not at once */
	if (lq_blocked != NULL)
		sleep_ms = Max(Min(sleep_ms, LQ_BLOCKED_RETRY_MS), LQ_BLOCKED_RETRY_MS);
	return sleep_ms;
}

static void
lq_worker_detach(int code, Datum arg)
{
	lq_shmem_server_detach();
}

/*
 * lq_stop_is_last tells lock server 0, as it stops, whether every other
 * lock server has stopped (waiting up to LQ_STOP_WAIT_MS for them: a
 * server shutdown stops them all at once).  Only then may it close the
 * clock and bring the ceilings down to what was shown.  The others never
 * do: lock server 0 may still serve.
 */
#define LQ_STOP_WAIT_MS		2000

static bool
lq_stop_is_last(void)
{
	int			waited = 0;
	int			i;

	if (lq_my_server_no != 0)
		return false;
	for (i = 1; i < lq_shared->nservers; i++)
	{
		while (lq_shmem_server_pid_of(i) != 0)
		{
			if (waited >= LQ_STOP_WAIT_MS)
			{
				ereport(LOG,
						(errmsg("lockq lock server %d still runs: the ceilings of the clock and the tokens stay above what was shown", i)));
				return false;
			}
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
							 PG_WAIT_EXTENSION);
			waited += 10;
		}
	}
	return true;
}

/*
 * lq_worker_stop runs on SIGTERM: the lock server's unsettled locks settle,
 * and grants kept without a row get theirs (lq_durability_stop).  The last
 * lock server to stop (lq_stop_is_last) also closes the clock, so no
 * backend hands out another value, and stores the last value as the
 * durable ceiling, so that a quick restart does not push the clock ahead.
 * Best effort: if it fails, the old, higher ceiling stays, which is safe.
 */
static void
lq_worker_stop(void)
{
	MemoryContext ccxt = CurrentMemoryContext;
	bool		last;
	int64		last_clock;

	if (!lq_ready || pg_atomic_read_u32(&lq_shared->clock_ready) == 0)
		return;

	last = lq_stop_is_last();
	last_clock = last ? lq_clock_close() : lq_clock_peek();
	lq_begin_batch();
	PG_TRY();
	{
		Oid			extoid;

		/*
		 * The installation the state was loaded from may be gone (dropped,
		 * perhaps created again): then there is nothing of it to store.
		 */
		if (!lq_tables_installed(&extoid) || extoid != lq_ext_oid)
			elog(ERROR, "lockq extension changed: its state is not stored");
		lq_lock_or_raise();

		/* grants kept without a row get theirs before every marker goes */
		lq_rules_give_rows(NIL, true);
		lq_durability_stop(last_clock, last);
		LQ_FAULT("worker-stop");
		lq_commit_batch();
	}
	PG_CATCH();
	{
		ErrorData  *edata = lq_batch_failed(ccxt);

		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * The lock server's own settings.  Connecting applied the settings of its
 * database (ALTER DATABASE ... SET), which the database's owner controls: a
 * role to switch to, read-only or serializable transactions, timeouts, a
 * search_path.  None of them may reach the lock server, whatever they are:
 * it runs as the bootstrap superuser, read-write, at read committed, with
 * our own timeouts, and its SQL cannot be redirected.
 */
static const struct
{
	const char *name;
	const char *value;
}			lq_settings[] = {
	{"role", "none"},
	{"search_path", "pg_catalog"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_isolation", "read committed"},
	{"default_transaction_deferrable", "off"},
	{"session_replication_role", "origin"},
	{"statement_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
	{"idle_session_timeout", "0"},
	{"lock_timeout", "10s"},
	{"row_security", "on"},
};

static void
lq_override_settings(void)
{
	int			i;

	for (i = 0; i < lengthof(lq_settings); i++)
		SetConfigOption(lq_settings[i].name, lq_settings[i].value, PGC_SUSET,
						PGC_S_OVERRIDE);
}

/*
 * lq_worker_wait_for_drop keeps a starting lock server out of lockq.database
 * while a backend drops it (lq_let_database_go in lockq_hooks.c): connected,
 * it would make DROP DATABASE fail.  Ends when that backend's statement
 * ends or the backend is gone.
 */
static void
lq_worker_wait_for_drop(void)
{
	int			pid;

	while ((pid = (int) pg_atomic_read_u32(&lq_shared->dropping_pid)) != 0 &&
		   kill(pid, 0) == 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * lq_spin keeps the lock server awake for up to lockq.spin_time
 * microseconds from start, watching its latch, and says whether the latch
 * was set meanwhile (then there is work to do).  Every sixteenth poll it
 * yields the CPU (sched_yield): where the backends have cores to spare
 * that returns at once, and where they queue for the CPU (more clients
 * than cores) the spin would otherwise take the time from the very
 * backends whose requests it waits for.  Checks no interrupts:
 * every signal the lock server handles sets its latch.  A lock server
 * that spins does not reach WaitLatch, so it checks for the postmaster's
 * death itself (cheap: a flag the kernel's signal sets), and exits as
 * WL_EXIT_ON_PM_DEATH would.  Never inlined, so that a profile tells the
 * spin from the lock server's work (BENCHMARKS.md, "Targets (issue 23)").
 */
static pg_noinline bool
lq_spin(instr_time start)
{
	int			polls = 0;

	for (;;)
	{
		/* volatile: SetLatch in another process sets it */
		if (((volatile Latch *) MyLatch)->is_set)
		{
			if (!PostmasterIsAlive())
				proc_exit(1);
			return true;
		}
		/* yields to a process that waits for this CPU: a backend, mostly */
		if (!lq_shmem_spin_pause(start, &polls))
			return false;
	}
}

/*
 * lq_wait_for_work waits until the latch is set or sleep_ms have passed.
 * While the lock server's recent waits were short (their moving average
 * at most lockq.spin_time) it first spins (lq_spin): a request that finds
 * it awake costs no signal to wake it, and the lock server no sleep and
 * no switch back in, which on a busy lock is one process switch per
 * hand-off.  It counts as a spinner (lq_shmem_spin_enter), so that the
 * backends' spins for their answers (lq_await_spin) take only the other
 * cores.  A lock server whose requests come further apart sleeps at once
 * and burns no CPU: one short wait in a row of long ones (a release right
 * after its grant) does not start a spin.  Before it sleeps it wakes the
 * backends answered that nobody has woken yet.  Never raises (interrupts
 * are the caller's).
 */
static void
lq_wait_for_work(long sleep_ms)
{
	static int64 avg_wait_us = INT64CONST(1000000);
	instr_time	start;
	instr_time	now;
	int64		waited;
	bool		woken = false;

	INSTR_TIME_SET_CURRENT(start);
	if (lockq_spin_time > 0 && sleep_ms != 0 && avg_wait_us <= lockq_spin_time)
	{
		(void) lq_shmem_spin_enter(true);
		woken = lq_spin(start);
		lq_shmem_spin_exit();
	}
	if (!woken)
	{
		lq_report_waiting();
		lq_shmem_wakes_hand_on(NULL, 0);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
	}
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	/* a long sleep counts as a few spin times: spinning resumes soon */
	waited = Min(INSTR_TIME_GET_MICROSEC(now), 4 * (int64) Max(lockq_spin_time, 1));
	avg_wait_us += (waited - avg_wait_us) / 4;
}

/*
 * lockq_worker_main is the entry point of the lock server.
 */
void
lockq_worker_main(Datum main_arg)
{
	lq_shmem_server_attach(DatumGetInt32(main_arg));
	lq_fault_set_server(DatumGetInt32(main_arg));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, lq_sigterm);

	pqsignal(SIGINT, lq_sigint);
	BackgroundWorkerUnblockSignals();

	lq_worker_wait_for_drop();
	BackgroundWorkerInitializeConnection(lockq_database, NULL, 0);
	/* pg_stat_activity tells the lock servers apart by their names */
	if (lq_my_server_no == 0)
		pgstat_report_appname("lockq lock server");
	else
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "lockq lock server %d", lq_my_server_no);
		pgstat_report_appname(name);
	}

	lq_override_settings();

	lq_outbox_init();
	lq_durability_init();
	lq_ring_buf = MemoryContextAlloc(TopMemoryContext,
									 sizeof(LqEntry) * LQ_MAX_BATCH_SIZE);
	lq_rules_init();
	CacheRegisterRelcacheCallback(lq_relcache_callback, (Datum) 0);

	lq_shmem_server_announce();
	before_shmem_exit(lq_worker_detach, (Datum) 0);
	lq_shmem_stat_add(LQ_STAT_WORKER_STARTS, 1);

	ereport(LOG,
			(errmsg("lockq lock server started in database \"%s\"",
					lockq_database)));
	lq_fault_arm_from_guc();

	while (!ShutdownRequestPending)
	{
		lq_wait_for_work(lq_cycle());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			lq_fault_arm_from_guc();
		}
	}

	lq_worker_stop();
	proc_exit(1);
}

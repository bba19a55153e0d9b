/*-------------------------------------------------------------------------
 *
 * lockq_api.c
 *		The SQL-callable functions: argument checks, the round trip to the
 *		lock server, and turning its answer into a result or an error.
 *
 * A backend never changes lock state itself.  It checks the arguments (bad
 * input is rejected here, before anything is shared), puts the request into
 * its slot, wakes the worker and sleeps on its latch until the worker has
 * committed the outcome.  If the wait is interrupted (cancel, timeout,
 * termination) a cleanup callback marks the request cancelled, and the worker
 * removes the queue entry or, if the grant raced with the cancel, hands the
 * lock on to the next waiter.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/int.h"
#include "commands/dbcommands.h"
#include "executor/executor.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "lockq.h"
#include "lockq_api.h"
#include "lockq_clock.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_grants.h"
#include "lockq_leases.h"
#include "lockq_maint.h"
#include "lockq_guc.h"
#include "lockq_policy.h"
#include "lockq_shmem.h"
#include "lockq_statefile.h"
#include "lockq_store.h"
#include "executor/spi.h"
#include "catalog/pg_type.h"

PG_FUNCTION_INFO_V1(lockq_get);
PG_FUNCTION_INFO_V1(lockq_try);
PG_FUNCTION_INFO_V1(lockq_release);
PG_FUNCTION_INFO_V1(lockq_renew);
PG_FUNCTION_INFO_V1(lockq_holds);
PG_FUNCTION_INFO_V1(lockq_enqueue);
PG_FUNCTION_INFO_V1(lockq_heartbeat);
PG_FUNCTION_INFO_V1(lockq_await);
PG_FUNCTION_INFO_V1(lockq_cancel);
PG_FUNCTION_INFO_V1(lockq_force_release);
PG_FUNCTION_INFO_V1(lockq_session_owner);

/* How long an interrupted call waits for the worker to confirm the cancel. */
#define LQ_CANCEL_WAIT_MS	10000

/*
 * A wait with a limit (lockq_get's timeout, lockq_await's) that the lock
 * server has not answered LQ_SELF_TIMEOUT_GRACE_US after the limit gives up
 * by itself (lq_await), and then waits at most LQ_SELF_TIMEOUT_ACK_MS for
 * the lock server to confirm the withdrawal.
 */
#define LQ_SELF_TIMEOUT_GRACE_US	(100 * 1000)
#define LQ_SELF_TIMEOUT_ACK_MS		250

/* Per-backend state. */
static int	lq_db_checked = 0;	/* 0 unknown, 1 right database, -1 wrong */
static bool lq_attached = false;
static int	lq_my_claim = -1;	/* see lq_call (lockq_fastpath.c) */
static bool lq_fenced = false;	/* this transaction holds a fencing lock */

/* This session's session-bound grants as it was told them: lock -> token. */
typedef struct LqMyGrant
{
	char		lock_id[LQ_MAX_ID_LEN + 1];	/* hash key, must be first */
	int64		token;
} LqMyGrant;

static HTAB *lq_my_grants = NULL;
static bool lq_xact_cb_registered = false;

static int64 lq_now_bounded(void);

static int
lq_my_slotno(void)
{
	return MyBackendId - 1;
}


/*
 * lq_is_admin: may role act for owners of other roles (release, renew or
 * take over their grants, cancel their waits)?  Superusers and members of
 * lockq_admin may.  Looked up for each request: the role can be created,
 * dropped or granted at any time, and both lookups are cached.
 */
static bool
lq_is_admin(Oid role)
{
	Oid			admin;

	if (superuser_arg(role))
		return true;
	admin = get_role_oid(LQ_ADMIN_ROLE, true);
	return OidIsValid(admin) && has_privs_of_role(role, admin);
}

/*
 * lq_in_lockq_database: is this backend connected to lockq.database?
 * Looked up once per session.
 */
static bool
lq_in_lockq_database(void)
{
	if (lq_db_checked == 0)
	{
		char	   *dbname = get_database_name(MyDatabaseId);

		lq_db_checked = (dbname != NULL && strcmp(dbname, lockq_database) == 0) ? 1 : -1;
	}
	return lq_db_checked > 0;
}

/*
 * lq_is_available: can lockq serve this backend (the library was
 * preloaded, this is the lockq database, the server is not in recovery)?
 * The views' functions show nothing from shared memory otherwise.
 */
bool
lq_is_available(void)
{
	if (lq_shared == NULL || lockq_database == NULL)
		return false;
	return lq_in_lockq_database() && !RecoveryInProgress();
}

/*
 * lq_check_available raises an error, with a hint, unless lockq can serve
 * this backend: the library was preloaded, this is the lockq database and
 * the server is not in recovery.
 */
void
lq_check_available(void)
{
	if (lq_shared == NULL || lockq_database == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lockq must be loaded via \"shared_preload_libraries\""),
				 errhint("Add lockq to \"shared_preload_libraries\" in postgresql.conf and restart the server.")));

	if (!lq_in_lockq_database())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lockq is not enabled in database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errhint("The lock service runs in the database named by \"lockq.database\", currently \"%s\".",
						 lockq_database)));

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("lockq is not available during recovery"),
				 errhint("Connect to the primary server.")));

	if (MyBackendId < 1 || MyBackendId > lq_shared->nslots)
		elog(ERROR, "backend id %d out of range for lockq", MyBackendId);

	/*
	 * Read what other sessions changed in the catalogs and in lockq's
	 * policy tables since: a REVOKE of lockq_admin or lockq_revoke committed
	 * meanwhile must count from the next call, even in a transaction that
	 * stays open (PostgreSQL reads them when a statement locks a relation,
	 * which a lockq call need not do).  Cheap when nothing changed.
	 */
	AcceptInvalidationMessages();
}

/*
 * lq_session_exit runs when a backend that has used lockq exits, however it
 * exits (disconnect, FATAL, pg_terminate_backend).  It tells the worker the
 * session is gone so that its session-bound grants and its queue entry go
 * at once; the worker frees the slot afterwards.
 */
static void
lq_session_exit(int code, Datum arg)
{
	int			slotno = lq_my_slotno();
	LqSlot	   *slot = &lq_slots[slotno];

	/* a call left by exit: the lock server adopts what it meets (its end) */
	lq_fast_unclaim(lq_my_claim);
	lq_my_claim = -1;
	SpinLockAcquire(&slot->mutex);
	slot->session_ended = true;
	if (slot->state != LQ_SLOT_IDLE)
		slot->cancel_requested = true;
	SpinLockRelease(&slot->mutex);

	lq_ring_push(lq_entry_request(slotno));
	lq_wake_worker();
}

/*
 * lq_attach claims this backend's slot on its first lockq call.  A slot may
 * still be held by an earlier session with the same BackendId whose exit
 * the worker has not processed yet; then we wait (interruptibly) for the
 * worker to free it.
 */
static void
lq_attach(void)
{
	int			slotno = lq_my_slotno();
	LqSlot	   *slot = &lq_slots[slotno];

	if (lq_attached)
		return;

	ConditionVariablePrepareToSleep(&slot->freed);
	for (;;)
	{
		bool		claimed = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == LQ_SLOT_FREE)
		{
			slot->state = LQ_SLOT_IDLE;
			slot->cancel_requested = false;
			slot->session_ended = false;
			slot->pgprocno = MyProc->pgprocno;
			slot->pid = MyProcPid;
			slot->session_start = MyStartTimestamp;
			claimed = true;
		}
		SpinLockRelease(&slot->mutex);
		if (claimed)
			break;

		/* The previous session's exit is not processed yet: nudge. */
		lq_wake_worker();
		(void) ConditionVariableTimedSleep(&slot->freed, 1000,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();

	before_shmem_exit(lq_session_exit, (Datum) 0);
	lq_attached = true;
}

/*
 * lq_call_cleanup runs when a wait in lq_call is left by an error or by
 * process exit.  It marks the request cancelled; the worker then removes
 * the queue entry, or releases a grant the backend will never see.  On an
 * ERROR we wait (bounded, without servicing interrupts) for the worker to
 * confirm, so that the entry is gone by the time the error reaches the
 * client.  On exit lq_session_exit does the rest and nobody waits.
 */
static void lq_withdraw(int slotno, int wait_ms);

static void
lq_call_cleanup(int code, Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	LqSlot	   *slot = &lq_slots[slotno];
	bool		pending = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->state == LQ_SLOT_PENDING || slot->state == LQ_SLOT_ACTIVE ||
		slot->state == LQ_SLOT_DONE)
	{
		slot->cancel_requested = true;
		pending = true;
	}
	SpinLockRelease(&slot->mutex);

	if (pending)
		lq_withdraw(slotno, proc_exit_inprogress ? 0 : LQ_CANCEL_WAIT_MS);
}

/*
 * lq_server_stuck says why the lock server cannot confirm anything soon,
 * into why (of size len), or returns false: it is not running, or it has
 * waited more than LQ_STUCK_FLUSH_US for a batch to be flushed (a
 * synchronous standby that is gone: it waits until the standby is back or
 * synchronous_standby_names changes).
 */
#define LQ_STUCK_FLUSH_US	(1000 * 1000)

static bool
lq_server_stuck(char *why, size_t len)
{
	uint64		since = pg_atomic_read_u64(&lq_shared->durable_wait_since);
	int64		waited;

	if (lq_shared->worker_pid == 0)
	{
		snprintf(why, len, "The lock server is not running.");
		return true;
	}
	waited = since == 0 ? 0 : lq_clock_peek() - (int64) since;
	if (waited <= LQ_STUCK_FLUSH_US)
		return false;
	snprintf(why, len,
			 "The lock server has waited %.1f s for its last batch to be flushed to WAL and to the synchronous standbys (synchronous_standby_names: \"%s\").",
			 waited / 1e6, SyncRepStandbyNames ? SyncRepStandbyNames : "");
	return true;
}

/*
 * lq_withdraw hands a request that its backend gave up on (cancel_requested
 * is set) to the lock server, which withdraws the wait or undoes a grant
 * that came with it, and waits up to wait_ms, without servicing
 * interrupts, for the slot to be IDLE again; not once the lock server
 * cannot confirm soon (lq_server_stuck: the server log says why).  A lock
 * server that does not confirm in time confirms later: the session's next
 * call waits for that (lq_wait_idle).
 */
static void
lq_withdraw(int slotno, int wait_ms)
{
	LqSlot	   *slot = &lq_slots[slotno];
	int			waited = 0;

	lq_ring_push(lq_entry_request(slotno));
	lq_wake_worker();

	while (waited < wait_ms)
	{
		bool		acked;
		int			step = Min(wait_ms - waited, 50);
		char		why[256];

		SpinLockAcquire(&slot->mutex);
		acked = (slot->state == LQ_SLOT_IDLE);
		SpinLockRelease(&slot->mutex);
		if (acked)
			break;
		if (lq_server_stuck(why, sizeof(why)))
		{
			ereport(LOG,
					(errmsg("lockq call gave up without the lock server's confirmation of its cancel"),
					 errdetail_internal("%s", why)));
			break;
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 step, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		waited += step;
	}
}

/*
 * lq_wait_idle waits until the slot is IDLE, that is until the worker has
 * confirmed an earlier cancellation.  Normally it is IDLE already.
 */
static void
lq_wait_idle(LqSlot *slot)
{
	for (;;)
	{
		bool		idle;

		SpinLockAcquire(&slot->mutex);
		idle = (slot->state == LQ_SLOT_IDLE);
		SpinLockRelease(&slot->mutex);
		if (idle)
			return;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		lq_wake_worker();
	}
}

/*
 * lq_wait_set returns this backend's wait set for lq_call, made on first
 * use and kept: our latch, postmaster death, and the client's socket
 * closing (where the platform can report that).  Building a set for every
 * wait would cost an epoll instance and four system calls per call.
 */
static WaitEventSet *
lq_wait_set(void)
{
	static WaitEventSet *set = NULL;

	if (set == NULL)
	{
		bool		watch_socket = MyProcPort != NULL &&
			whereToSendOutput == DestRemote && WaitEventSetCanReportClosed();

		set = CreateWaitEventSet(TopMemoryContext, watch_socket ? 3 : 2);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL,
						  NULL);
		if (watch_socket)
			AddWaitEventToSet(set, WL_SOCKET_CLOSED, MyProcPort->sock, NULL,
							  NULL);
	}
	return set;
}

/*
 * lq_submit puts a request into this backend's slot (which it waited to be
 * idle) and into the arrival ring, and wakes the lock server.  The request
 * carries the caller's role, whether it is an administrator and, for an
 * acquisition, the limits that apply to it; an acquisition of a lock id
 * outside the role's namespaces is refused here (42501), before anything
 * is shared.
 *
 * A lockq_get for a lock that another owner seems to hold (the held
 * hints, lq_hint_held_by_other) arrives lazily: it cannot be granted
 * before that grant ends, and the lock server drains the ring in order
 * before it decides any end, so it is left in the ring without waking the
 * lock server, which takes it with its next wake-up (usually the holder's
 * release).  Returns true then.  A hint read before a grant ended but
 * acted on after the lock server last looked at the ring is caught by
 * reading it again after the push (below), and by the lock server, which
 * looks at the ring once more before it sleeps after dropping a hint
 * (lq_hint_lazy_stranded).  Views wake the lock server for lazy arrivals
 * (lq_settle_arrivals), and lq_await wakes it itself when half of the
 * wait limit is left, and after LQ_LAZY_ARRIVAL_MS as a safety net.  A
 * lockq_get whose wait ends within LQ_LAZY_MIN_WAIT_US is never lazy.
 */
static bool
lq_submit(LqSlot *slot, int slotno, LqRequest *req)
{
	bool		lazy;

	req->role = GetUserId();
	req->admin = !req->session_owner && lq_is_admin(req->role);
	if (req->op == LQ_OP_GET || req->op == LQ_OP_TRY || req->op == LQ_OP_ENQUEUE)
	{
		lq_policy_check_use(req->lock_id, req->role,
							req->admin || lq_is_admin(req->role));
		lq_policy_limits(req->role, req);
	}
	lq_wait_idle(slot);

	SpinLockAcquire(&slot->mutex);
	slot->req = *req;
	slot->reqid++;
	slot->submitted = lq_clock_peek();
	memset(&slot->res, 0, sizeof(LqResult));
	slot->cancel_requested = false;
	slot->state = LQ_SLOT_PENDING;
	SpinLockRelease(&slot->mutex);

	lazy = req->op == LQ_OP_GET &&
		(req->deadline == 0 ||
		 req->deadline > lq_clock_peek() + LQ_LAZY_MIN_WAIT_US) &&
		lq_hint_held_by_other(req->lock_id, req->owner);
	if (lazy)
		LQ_FAULT("submit-lazy-before-push");
	lq_ring_push(lq_entry_request(slotno));
	if (lazy)
	{
		/*
		 * Read the hint again after the push: if the grant ended since
		 * (or the entry went to another lock id), the lock server may have
		 * looked at the ring for the last time before our entry was in it.
		 * If the hint still says held, the end comes later, and the lock
		 * server drains the ring before it decides it.  The barrier keeps
		 * the push (a store) ahead of the hint's reads; it pairs with the
		 * one in lq_hint_lazy_stranded, between the lock server's change
		 * of a hint and its look at the ring: one of the two sees the
		 * other's store, and a read that sees a change in progress counts
		 * as "not held" (lq_hint_held_by_other).
		 */
		pg_memory_barrier();
		lazy = lq_hint_held_by_other(req->lock_id, req->owner);
	}
	if (!lazy)
		lq_wake_worker();
	return lazy;
}

/*
 * lq_give_up ends a wait that its limit has passed while the lock server
 * did not answer (it normally answers at the limit itself, in the same
 * decision as any grant): a lock server that is restarting, cannot load
 * its state, or waits for a synchronous standby that is gone must not keep
 * the caller past the limit it asked for.  Unless the answer has just
 * arrived (false: the caller reads it), the request is withdrawn as a
 * cancel is (lq_withdraw; a grant that comes with it is handed back), the
 * server log says why, and *res becomes a timeout whose message says what
 * the lock server was doing.
 */
static bool
lq_give_up(LqSlot *slot, const LqRequest *req, LqResult *res)
{
	const char *doing = NULL;
	char		why[256];
	int			pid;

	SpinLockAcquire(&slot->mutex);
	if (slot->state == LQ_SLOT_DONE)
	{
		SpinLockRelease(&slot->mutex);
		return false;
	}
	slot->cancel_requested = true;
	SpinLockRelease(&slot->mutex);
	lq_withdraw(lq_my_slotno(), LQ_SELF_TIMEOUT_ACK_MS);

	memset(res, 0, sizeof(LqResult));
	res->status = LQ_ST_TIMEOUT;
	pid = lq_shared->worker_pid;
	if (lq_server_stuck(why, sizeof(why)))
		snprintf(res->message, sizeof(res->message),
				 "The lock server did not answer by the end of the wait. %s", why);
	else
	{
		if (pid != 0)
			doing = pgstat_get_backend_current_activity(pid, false);
		snprintf(res->message, sizeof(res->message),
				 "The lock server did not answer by the end of the wait (it is: %s).",
				 doing ? doing : "?");
	}
	ereport(LOG,
			(errmsg("lockq wait for lock \"%s\" ended at its limit without an answer from the lock server", req->lock_id),
			 errdetail_internal("%s", res->message)));
	return true;
}

/*
 * lq_await sleeps until the lock server has answered the request in slot
 * and returns the answer.  Interruptible (the caller sets up the cleanup);
 * a client that disconnects ends the session at once (FATAL), so that it
 * keeps no place in a queue.  For a lazy arrival (lq_submit) it wakes the
 * lock server if the request is still unread when half of its wait limit
 * is left, or after LQ_LAZY_ARRIVAL_MS.
 */
static LqResult
lq_await(LqSlot *slot, const LqRequest *req, bool lazy)
{
	WaitEventSet *set = lq_wait_set();
	LqResult	res;
	TimestampTz kick_at = 0;
	int64		give_up_at = 0;

	/* a wait with a limit ends by it, whatever the lock server does */
	if (req->deadline != 0 && (req->op == LQ_OP_GET || req->op == LQ_OP_AWAIT))
		give_up_at = req->deadline + LQ_SELF_TIMEOUT_GRACE_US;

	if (lazy)
	{
		/* the lock server must see a wait limit in time to keep it */
		int64		kick_us = LQ_LAZY_ARRIVAL_MS * 1000;

		if (req->deadline != 0)
			kick_us = Min(kick_us, (req->deadline - lq_clock_peek()) / 2);
		kick_at = GetCurrentTimestamp() + Max(kick_us, 0);
	}
	for (;;)
	{
		bool		done = false;
		bool		pending = false;
		long		timeout = -1L;
		WaitEvent	ev;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == LQ_SLOT_DONE)
		{
			res = slot->res;
			done = true;
		}
		else
			pending = slot->state == LQ_SLOT_PENDING;
		SpinLockRelease(&slot->mutex);
		if (kick_at != 0)
		{
			/* a lazy arrival: wake the lock server if it is still unread */
			long		left = 0;

			if (pending)
				left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													   kick_at);
			if (!pending || left <= 0)
			{
				if (pending)
					lq_wake_worker();
				kick_at = 0;
			}
			else
				timeout = left;
		}
		if (!done && give_up_at != 0)
		{
			int64		left_us = give_up_at - lq_clock_peek();

			if (left_us <= 0 && lq_give_up(slot, req, &res))
				break;
			if (left_us > 0)
			{
				long		left_ms = (long) Min((left_us + 999) / 1000, LONG_MAX);

				timeout = timeout < 0 ? left_ms : Min(timeout, left_ms);
			}
			else
				continue;		/* answered meanwhile: read it */
		}
		if (done)
		{
			/* wake two of the backends answered in the same batch */
			lq_wakes_pass(2);

			/*
			 * A cancel or terminate that came with the answer is
			 * handled while the answer is still in the slot, so that
			 * lq_call_cleanup hands it back (a grant is undone and
			 * passes on) instead of the error coming at the executor's
			 * next check, after the grant was taken.
			 */
			CHECK_FOR_INTERRUPTS();
			SpinLockAcquire(&slot->mutex);
			slot->state = LQ_SLOT_IDLE;
			SpinLockRelease(&slot->mutex);
			break;
		}

		/*
		 * While we sleep we also watch the client's socket: a client
		 * that went away must not keep its place in the queue until it
		 * would be granted.
		 */
		if (WaitEventSetWait(set, timeout, &ev, 1, PG_WAIT_EXTENSION) != 1)
			ev.events = 0;
		ResetLatch(MyLatch);
		if (ev.events & WL_SOCKET_CLOSED)
		{
			/* as ProcessInterrupts does for ClientConnectionLost */
			whereToSendOutput = DestNone;
			ereport(FATAL,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("connection to client lost while waiting for lock \"%s\"",
							req->lock_id)));
		}
		CHECK_FOR_INTERRUPTS();
	}
	return res;
}

/*
 * lq_call sends one request to the worker and sleeps until it answers.
 * The sleep is interruptible; see lq_call_cleanup for what an interrupt
 * leaves behind (nothing).  The caller checks the result's status.
 */
static LqResult
lq_call(LqRequest *req)
{
	int			slotno;
	LqSlot	   *slot;
	LqResult	res;
	bool		lazy;

	lq_attach();
	slotno = lq_my_slotno();
	slot = &lq_slots[slotno];

	/* no backend grants this lock by itself while we wait for the answer */
	lq_fast_unclaim(lq_my_claim);
	lq_my_claim = lq_fast_claim(req->lock_id);
	PG_TRY();
	{
		lazy = lq_submit(slot, slotno, req);
		PG_ENSURE_ERROR_CLEANUP(lq_call_cleanup, Int32GetDatum(slotno));
		{
			LQ_FAULT("call-after-submit");
			res = lq_await(slot, req, lazy);
		}
		PG_END_ENSURE_ERROR_CLEANUP(lq_call_cleanup, Int32GetDatum(slotno));
	}
	PG_FINALLY();
	{
		lq_fast_unclaim(lq_my_claim);
		lq_my_claim = -1;
	}
	PG_END_TRY();

	return res;
}

/*
 * lq_raise_if_error turns an error answer from the worker into an ERROR.
 */
static void
lq_raise_if_error(const LqResult *res)
{
	if (res->status == LQ_ST_ERROR)
		ereport(ERROR,
				(errcode(res->sqlerrcode),
				 errmsg("%s", res->message),
				 res->hint[0] != '\0' ? errhint("%s", res->hint) : 0));
}

/*
 * Argument helpers.  Each raises a clear error for bad input; nothing has
 * been shared with the worker at that point.
 */
static void
lq_arg_string(FunctionCallInfo fcinfo, int argno, const char *what,
			  int maxlen, char *out)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));

	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The %s is %d bytes long; the limit is %d bytes.",
						   what, len, maxlen)));
	memcpy(out, VARDATA_ANY(t), len);
	out[len] = '\0';
}

static void
lq_arg_lock_id(FunctionCallInfo fcinfo, int argno, LqRequest *req)
{
	lq_arg_string(fcinfo, argno, "lock id", LQ_MAX_ID_LEN, req->lock_id);
}

/*
 * lq_arg_owner reads the owner argument.  NULL means the calling session
 * (unless required is set); a name in the session namespace is refused so
 * that nobody can act as another session.
 */
static void
lq_arg_owner(FunctionCallInfo fcinfo, int argno, LqRequest *req, bool required)
{
	if (PG_ARGISNULL(argno) && !required)
	{
		lq_format_session_owner(req->owner, sizeof(req->owner), MyProcPid,
								MyStartTimestamp);
		req->session_owner = true;
		return;
	}
	lq_arg_string(fcinfo, argno, "owner", LQ_MAX_OWNER_LEN, req->owner);
	if (strncmp(req->owner, LQ_SESSION_PREFIX, strlen(LQ_SESSION_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("owner names starting with \"%s\" are reserved",
						LQ_SESSION_PREFIX),
				 errhint("Pass NULL as the owner to take a lock bound to this session.")));
	req->session_owner = false;
}

/*
 * lq_interval_us converts an interval to microseconds, counting a day as 24
 * hours and a month as 30 days, and raises on overflow.
 */
static int64
lq_interval_us(const Interval *iv, const char *what)
{
	int64		us;
	int64		part;

	if (pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH * USECS_PER_DAY, &us) ||
		pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &part) ||
		pg_add_s64_overflow(us, part, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", what)));
	return us;
}

static int64
lq_arg_ttl(FunctionCallInfo fcinfo, int argno)
{
	int64		us;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ttl must not be null")));
	us = lq_interval_us(PG_GETARG_INTERVAL_P(argno), "ttl");
	if (us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive")));
	if (us > (int64) lockq_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must not exceed %d seconds", lockq_max_ttl),
				 errhint("The limit is set by \"lockq.max_ttl\".")));
	return us;
}

/*
 * lq_arg_deadline reads a limit on a wait, an interval named what (positive,
 * at most 366 days), and returns the lockq time it ends at; NULL, or an
 * argument the function's SQL definition lacks (an older version's), gives
 * 0: no limit of its own.  hint, with the errors, says what NULL does.
 */
static int64
lq_arg_deadline(FunctionCallInfo fcinfo, int argno, const char *what,
				const char *hint)
{
	int64		us;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	us = lq_interval_us(PG_GETARG_INTERVAL_P(argno), what);
	if (us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errhint("%s", hint)));
	if (us > LQ_MAX_TIMEOUT_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not exceed 366 days", what),
				 errhint("%s", hint)));
	return lq_clock_peek() + us;
}

static void
lq_arg_token(FunctionCallInfo fcinfo, int argno, LqRequest *req)
{
	req->has_token = !PG_ARGISNULL(argno);
	req->token = req->has_token ? PG_GETARG_INT64(argno) : 0;
}

/*
 * lq_begin_request zeroes a request and fills in the operation and lock id.
 */
static void
lq_begin_request(LqRequest *req, LqOp op, FunctionCallInfo fcinfo)
{
	lq_check_available();
	memset(req, 0, sizeof(LqRequest));
	req->op = op;
	lq_arg_lock_id(fcinfo, 0, req);
}

static Datum
lq_bool_result(const LqResult *res)
{
	lq_raise_if_error(res);
	PG_RETURN_BOOL(res->status == LQ_ST_TRUE);
}

/*
 * lq_my_grant remembers (token > 0) or forgets (0) the token under which
 * this session holds a session-bound lock, for quick releases.
 */
static void
lq_my_grant(const char *lock_id, int64 token)
{
	LqMyGrant  *g;

	if (lq_my_grants == NULL)
	{
		HASHCTL		ctl;

		if (token == 0)
			return;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = LQ_MAX_ID_LEN + 1;
		ctl.entrysize = sizeof(LqMyGrant);
		lq_my_grants = hash_create("lockq session grants of this session", 16,
								   &ctl, HASH_ELEM | HASH_STRINGS);
	}
	if (token == 0)
	{
		(void) hash_search(lq_my_grants, lock_id, HASH_REMOVE, NULL);
		return;
	}
	g = hash_search(lq_my_grants, lock_id, HASH_ENTER, NULL);
	g->token = token;
}

/*
 * Top-level statements of this session, counted by the executor and
 * utility hooks below: lq_stmt_seq is the number of the one running (or
 * last started), lq_stmt_done that of the last one that completed without
 * an error.  lq_nesting is the depth of nested statements (functions,
 * procedures) inside the top-level one.
 */
static uint64 lq_stmt_seq = 0;
static uint64 lq_stmt_done = 0;
static int	lq_nesting = 0;

/*
 * The session-bound grant that a top-level statement of this session
 * created, while that statement runs (lq_note_session_grant).  Should that
 * statement fail, its caller never saw the token: lq_xact_callback releases
 * the grant.  This covers a cancel or terminate that arrives just after
 * lockq_get has returned (the executor raises it at its next check), the
 * one case lq_call cannot hand back itself.  Once the statement has
 * completed, the grant is the caller's, whatever fails later in the
 * transaction (a later statement of the same query string, say).
 */
static struct
{
	bool		valid;
	uint64		stmt;			/* the top-level statement that made it */
	int64		token;
	char		lock_id[LQ_MAX_ID_LEN + 1];
}			lq_fresh;

static void lq_xact_callback(XactEvent event, void *arg);
static void lq_end_fences(void);

/*
 * lq_watch_xact registers lq_xact_callback, once per session: from the
 * first fence or fresh session-bound grant on, the end of every
 * transaction is watched.
 */
static void
lq_watch_xact(void)
{
	if (!lq_xact_cb_registered)
	{
		RegisterXactCallback(lq_xact_callback, NULL);
		lq_xact_cb_registered = true;
	}
}

/*
 * lq_note_session_grant records a session-bound grant this session holds
 * (for quick releases) and, if this call created it, that it belongs to
 * the current statement until the statement ends.
 */
static void
lq_note_session_grant(const LqRequest *req, const LqResult *res)
{
	lq_my_grant(req->lock_id, res->token);
	if (!res->fresh_grant)
		return;
	lq_watch_xact();
	lq_fresh.valid = true;
	lq_fresh.stmt = lq_stmt_seq;
	lq_fresh.token = res->token;
	strlcpy(lq_fresh.lock_id, req->lock_id, sizeof(lq_fresh.lock_id));
}

/*
 * lq_quick_room: may this session queue a quick release now?  It has no
 * request in flight (its releases come before its next request) and room
 * in its slot's small queue.
 */
static bool
lq_quick_room(LqSlot *slot)
{
	bool		room;

	SpinLockAcquire(&slot->mutex);
	room = slot->nquick < LQ_MAX_QUICK_RELEASES && slot->state == LQ_SLOT_IDLE;
	SpinLockRelease(&slot->mutex);
	return room;
}

/*
 * lq_queue_quick hands a release that this session has made (and told its
 * caller of) to the lock server: in its slot's queue of quick releases and
 * the arrival ring, so that it is applied in its turn.  Nothing here may
 * fail: the lock server must learn of the release.
 */
static void
lq_queue_quick(int slotno, const char *lock_id, int64 token)
{
	LqSlot	   *slot = &lq_slots[slotno];

	SpinLockAcquire(&slot->mutex);
	slot->quick_tokens[slot->nquick] = token;
	strlcpy(slot->quick_ids[slot->nquick], lock_id, LQ_MAX_ID_LEN + 1);
	slot->nquick++;
	SpinLockRelease(&slot->mutex);
	lq_ring_push(lq_entry_quick(slotno));
	lq_wake_worker();
}

/*
 * lq_quick_release releases a session-bound lock without waiting for the
 * worker, when this session can tell by itself that the release succeeds:
 * it knows the grant's token, and marking the grant released in shared
 * memory (lq_grants_mark_released) finds it current, unexpired and its
 * own.  That mark is the release: from then on lockq_holds answers false,
 * and the grant neither expires nor can be force-released.  The release
 * then joins the arrival ring like any request, ahead of this session's
 * next one, and the worker hands the lock on as for a normal release.  So
 * a session-bound lock is released as pg_advisory_unlock releases one:
 * without the releasing session sleeping.  Returns false (nothing done)
 * when the normal path must decide.
 */
static bool
lq_quick_release(const LqRequest *req)
{
	LqMyGrant  *g;
	int64		token;
	int			slotno = lq_my_slotno();

	if (lq_my_grants == NULL || !lq_attached)
		return false;
	g = hash_search(lq_my_grants, req->lock_id, HASH_FIND, NULL);
	if (g == NULL || (req->has_token && req->token != g->token))
		return false;
	token = g->token;

	/* a grant this session made by itself: gone at once, if nobody fences it */
	switch (lq_fast_release(req->lock_id, token, lq_clock_peek()))
	{
		case LQ_FAST_RELEASED:
			lq_stat_add(LQ_STAT_RELEASES, 1);
			lq_my_grant(req->lock_id, 0);
			return true;
		case LQ_FAST_EXPIRED:
			/* over already: the normal path answers false */
			lq_stat_add(LQ_STAT_EXPIRIES, 1);
			lq_my_grant(req->lock_id, 0);
			return false;
		case LQ_FAST_NOT_MINE:
			break;
	}

	if (!lq_quick_room(&lq_slots[slotno]))
		return false;

	if (!lq_grants_mark_released(req->lock_id, token, MyProcPid,
								 MyStartTimestamp, lq_clock_peek()))
		return false;

	lq_queue_quick(slotno, req->lock_id, token);
	lq_my_grant(req->lock_id, 0);
	return true;
}

/*
 * lq_quick_release_leased releases a grant with an owner without waiting
 * for the lock server, when the table of lockq_leases.c allows it: the
 * grant's release may be shown before its flush (its lock is unsettled
 * with a fence_ttl that covers it), and marking it released there finds it
 * current, unexpired, the owner's, under the token given, and of the
 * caller's role.  That mark is the release: lockq_holds answers false from
 * then on.  Returns false (nothing done) when the normal path must decide.
 */
static bool
lq_quick_release_leased(const LqRequest *req)
{
	int			slotno;
	int64		token;

	lq_attach();
	slotno = lq_my_slotno();
	if (!lq_quick_room(&lq_slots[slotno]))
		return false;
	/* another role's release (an administrator's) takes the normal path */
	if (!lq_leases_mark_released(req->lock_id, req->owner, req->has_token,
								 req->token, GetUserId(), lq_clock_peek(),
								 &token))
		return false;
	LQ_FAULT("quick-release-before-queue");
	lq_queue_quick(slotno, req->lock_id, token);
	return true;
}

/*
 * lq_take_fast grants a session-bound lock on the fast path
 * (lockq_fastpath.c) when nobody else holds it, waits for it or asks for
 * it: no round trip to the lock server.  The checks of the normal path come
 * first (the role may use the lock id); a role with a limit of its own on
 * session-bound locks takes the normal path, which counts them.  Returns
 * false when the normal path must decide, also for a lock this session
 * holds already (the lock server answers with its token).
 */
static bool
lq_take_fast(LqRequest *req, LqResult *res)
{
	Oid			role = GetUserId();
	int64		token;

	lq_attach();
	if (lq_my_grants != NULL &&
		hash_search(lq_my_grants, req->lock_id, HASH_FIND, NULL) != NULL)
		return false;
	lq_policy_check_use(req->lock_id, role, lq_is_admin(role));
	if (!lq_policy_default_session_limit(role))
		return false;
	token = lq_fast_grant(req->lock_id, lq_my_slotno(), MyProcPid,
						  MyStartTimestamp, role, req->ttl_us, lq_clock_peek());
	if (token == 0)
		return false;
	lq_stat_add(LQ_STAT_GRANTS, 1);
	memset(res, 0, sizeof(LqResult));
	res->status = LQ_ST_GRANTED;
	res->token = token;
	res->fresh_grant = true;
	return true;
}

/*
 * lockq_get(lock_id, owner, ttl, timeout) waits in FIFO order for the lock
 * and returns the grant's fencing token.  Raises 55P03 on timeout.
 */
Datum
lockq_get(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_GET, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;
	req.deadline = lq_arg_deadline(fcinfo, 3, "timeout",
								   "Pass NULL to wait without a timeout, or use lockq_try not to wait.");

	if (!(req.session_owner && lq_take_fast(&req, &res)))
		res = lq_call(&req);
	if (res.status == LQ_ST_TIMEOUT)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not obtain lock \"%s\" within the timeout",
						req.lock_id),
				 res.message[0] != '\0' ? errdetail_internal("%s", res.message) : 0));
	lq_raise_if_error(&res);
	Assert(res.status == LQ_ST_GRANTED);
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_try(lock_id, owner, ttl) takes the lock only if it is free and
 * nobody is queued (or the owner holds it already); NULL otherwise.
 */
Datum
lockq_try(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_TRY, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;

	if (!(req.session_owner && lq_take_fast(&req, &res)))
		res = lq_call(&req);
	lq_raise_if_error(&res);
	if (res.status != LQ_ST_GRANTED)
	{
		lq_stat_add(LQ_STAT_FAILED_TRIES, 1);
		PG_RETURN_NULL();
	}
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_release(lock_id, owner, token) ends this owner's grant; false when
 * the owner does not hold it (or holds it under another token).
 */
Datum
lockq_release(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_RELEASE, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	lq_arg_token(fcinfo, 2, &req);

	if (req.session_owner ? lq_quick_release(&req) :
		lq_quick_release_leased(&req))
		PG_RETURN_BOOL(true);
	res = lq_call(&req);
	if (req.session_owner)
		lq_my_grant(req.lock_id, 0);
	return lq_bool_result(&res);
}

/*
 * lockq_renew(lock_id, owner, token, ttl) extends the lease to now + ttl
 * (the grant's own ttl when NULL); false when the grant is gone.
 */
Datum
lockq_renew(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_RENEW, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	lq_arg_token(fcinfo, 2, &req);
	if (!PG_ARGISNULL(3))
	{
		req.ttl_us = lq_arg_ttl(fcinfo, 3);
		req.has_ttl = true;
	}

	res = lq_call(&req);
	return lq_bool_result(&res);
}

/*
 * lq_xact_callback ends the fences a transaction took (lockq_holds) and
 * wakes the worker: a hand-off it held up can now proceed.  At
 * XACT_EVENT_COMMIT/ABORT the transaction is no longer in progress (its
 * writes are visible), so the worker's delete sees its row lock as gone,
 * and its fences on session-bound grants are taken off here.  A fence on a
 * session-bound grant lives in this backend, so it cannot be handed to a
 * prepared transaction: PREPARE TRANSACTION is refused then, as for
 * session-level advisory locks mixed with transaction-level ones.
 */
static void
lq_xact_callback(XactEvent event, void *arg)
{
	if (lq_fresh.valid && event == XACT_EVENT_ABORT &&
		lq_fresh.stmt > lq_stmt_done)
	{
		LqRequest	req;

		/* the statement that took it failed: nobody saw the token */
		memset(&req, 0, sizeof(req));
		strlcpy(req.lock_id, lq_fresh.lock_id, sizeof(req.lock_id));
		req.has_token = true;
		req.token = lq_fresh.token;
		(void) lq_quick_release(&req);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		lq_fresh.valid = false;
	if (!lq_fenced)
		return;

	/*
	 * A fence must end with its session at the latest, so that the lock
	 * server can end it (lockq.fence_timeout): a prepared transaction would
	 * keep a row lock, or a count in shared memory, without anyone to end.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that is fenced by lockq_holds"),
				 errhint("Call lockq_holds in the transaction that commits the fenced write, not in a prepared one.")));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		lq_end_fences();
}

/*
 * lq_end_fences ends this transaction's fences: the counts on session-bound
 * grants and their list in our slot (row locks on lockq.owners end with
 * the transaction by themselves), and tells the lock server, which may
 * have hand-offs waiting for them.
 */
static void
lq_end_fences(void)
{
	LqSlot	   *slot = &lq_slots[lq_my_slotno()];

	lq_fenced = false;
	(void) lq_grants_release_fences();
	(void) lq_leases_release_fences();
	SpinLockAcquire(&slot->mutex);
	slot->nfences = 0;
	slot->fences_overflow = false;
	SpinLockRelease(&slot->mutex);
	pg_atomic_fetch_add_u64(&lq_shared->fence_gen, 1);
	lq_wake_worker();
}

/*
 * lq_note_fence lists a session-bound grant this transaction is now fenced
 * on in our slot, for the lock server (lq_slot_fencers).
 */
static void
lq_note_fence(int64 token)
{
	LqSlot	   *slot = &lq_slots[lq_my_slotno()];

	SpinLockAcquire(&slot->mutex);
	if (slot->nfences < LQ_MAX_SLOT_FENCES)
		slot->fence_tokens[slot->nfences++] = token;
	else
		slot->fences_overflow = true;
	SpinLockRelease(&slot->mutex);
}

/*
 * lockq_holds(lock_id, token) is true while that grant is current.  When
 * true, and called by the grant's own role (or an administrator), it also
 * fences the grant until the transaction ends, so the grant cannot pass to
 * anyone else before then: a write fenced by lockq_holds commits before
 * the next holder is granted.  The fence is a KEY SHARE lock on the grant's
 * row in lockq.owners, or for a session-bound grant a count in shared
 * memory (lockq_grants.c).  Any other role learns true or false, without a
 * fence: it cannot hold another role's hand-off back.  A fence lasts at
 * most lockq.fence_timeout past the end of the grant's lease: then the
 * lock server ends the fencing transaction's session.  NULL or
 * non-positive tokens are simply not held.
 */
Datum
lockq_holds(PG_FUNCTION_ARGS)
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int64		token;
	int64		now;
	LqHeld		held;
	Oid			role;
	bool		admin;

	lq_check_available();
	lq_arg_string(fcinfo, 0, "lock id", LQ_MAX_ID_LEN, lock_id);
	if (PG_ARGISNULL(1))
		PG_RETURN_BOOL(false);
	token = PG_GETARG_INT64(1);
	if (token <= 0)
		PG_RETURN_BOOL(false);

	lq_watch_xact();
	/* an answer false by time must hold after a crash: see the function */
	now = lq_now_bounded();
	role = GetUserId();
	admin = lq_is_admin(role);
	if (!lq_policy_may_use(lock_id, role, admin))
	{
		/* the answer, without a fence: see lq_grants_holds */
		role = InvalidOid;
		admin = false;
	}
	lq_attach();
	held = lq_grants_holds(lock_id, token, now, role, admin);
	/* a leased grant without a row is fenced in the table of quick releases */
	if (held == LQ_HELD_UNKNOWN)
		held = lq_leases_fence(lock_id, token, now, role, admin);
	if (held == LQ_HELD_FENCED)
		lq_note_fence(token);
	else if (held == LQ_HELD_UNKNOWN)
	{
		/* released by a session: the lock server has yet to delete the row */
		held = lq_leases_is_released(lock_id, token) ? LQ_HELD_NO :
			lq_store_holds(lock_id, token, now, role, admin);
		if (held == LQ_HELD_FENCED)
			lq_fenced = true;
		/* released while the row lock was taken: false (the hand-off waits) */
		if (held != LQ_HELD_NO && lq_leases_is_released(lock_id, token))
			held = LQ_HELD_NO;
	}
	if (held == LQ_HELD_FENCED)
		lq_fenced = true;
	PG_RETURN_BOOL(held != LQ_HELD_NO);
}

/*
 * lockq_enqueue(lock_id, owner, ttl, channel, heartbeat, wait) queues a
 * client-side waiter without blocking: the token when the lock is granted
 * at once (or already held by this owner), NULL once queued.  The grant is
 * later announced by NOTIFY on channel; the waiter must call lockq_heartbeat
 * (or lockq_enqueue again) at least every heartbeat interval or it is
 * dropped.  With a wait (1.2), a queued waiter is then waited for here as
 * lockq_await does, for at most that long: the token if granted meanwhile.
 */
Datum
lockq_enqueue(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_ENQUEUE, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;
	if (!PG_ARGISNULL(3))
		lq_arg_string(fcinfo, 3, "channel", LQ_MAX_CHANNEL_LEN, req.channel);
	if (PG_ARGISNULL(4))
		req.wait_ttl_us = (int64) lockq_waiter_timeout * 1000;
	else
	{
		req.wait_ttl_us = lq_interval_us(PG_GETARG_INTERVAL_P(4), "heartbeat");
		if (req.wait_ttl_us < 100 * 1000 ||
			req.wait_ttl_us > (int64) lockq_max_ttl * USECS_PER_SEC)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("heartbeat must be between 100 milliseconds and %d seconds",
							lockq_max_ttl),
					 errhint("The upper limit is set by \"lockq.max_ttl\".")));
	}
	/* 1.2: wait (the SQL definition of 1.1 has no such argument) */
	req.deadline = lq_arg_deadline(fcinfo, 5, "wait",
								   "Pass NULL not to wait; a wait ends at the heartbeat interval at the latest.");

	res = lq_call(&req);
	lq_raise_if_error(&res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_heartbeat(lock_id, owner) keeps a client-side wait alive: NULL while
 * queued, the token once granted (which also confirms the grant and starts
 * its full lease).  Raises 55000 when the owner neither waits nor holds.
 */
Datum
lockq_heartbeat(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_HEARTBEAT, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);

	res = lq_call(&req);
	lq_raise_if_error(&res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_await(lock_id, owner, timeout) waits in this backend for a
 * client-side waiter (lockq_enqueue) to be granted: the token as soon as
 * it is (with its full lease, no NOTIFY sent), NULL when timeout (at most
 * the waiter's heartbeat interval) passes first; the waiter keeps its
 * place either way, and each call counts as a heartbeat.  A cancel or a
 * lost connection leaves the waiter queued.  Raises 55000 when the owner
 * neither waits nor holds, or stops waiting meanwhile (lockq_cancel).
 */
Datum
lockq_await(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_AWAIT, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);
	req.deadline = lq_arg_deadline(fcinfo, 2, "timeout",
								   "Pass NULL to wait up to the heartbeat interval.");

	res = lq_call(&req);
	lq_raise_if_error(&res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_cancel(lock_id, owner) withdraws a client-side waiter: it leaves the
 * queue, or, if the lock was granted to it meanwhile, the grant is released
 * and passes on.  True when there was something to withdraw.
 */
Datum
lockq_cancel(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_CANCEL, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);

	res = lq_call(&req);
	return lq_bool_result(&res);
}

/*
 * lockq_force_release(lock_id) ends whatever grant the lock has, as an
 * administrator's last resort.  EXECUTE is revoked from PUBLIC.
 */
Datum
lockq_force_release(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_FORCE_RELEASE, fcinfo);

	res = lq_call(&req);
	return lq_bool_result(&res);
}

/*
 * lockq_session_owner() returns the owner name this session's locks taken
 * with owner NULL appear under.
 */
Datum
lockq_session_owner(PG_FUNCTION_ARGS)
{
	char		buf[LQ_MAX_OWNER_LEN + 1];

	lq_format_session_owner(buf, sizeof(buf), MyProcPid, MyStartTimestamp);
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}

/*
 * DISCARD ALL ends the session's session-bound locks, as it releases its
 * advisory locks: a session pooler (pgbouncer's server_reset_query) runs it
 * to hand a server connection to the next client, which must not inherit
 * the last one's locks.  It runs outside a transaction block, so no
 * transaction of this session is fenced on them.  A session that never
 * called lockq has none, and is not held up.
 */
static ProcessUtility_hook_type lq_prev_process_utility = NULL;

/* How long DROP DATABASE of lockq.database waits for the lock server to go. */
#define LQ_DROPDB_WAIT_MS	10000

/*
 * lq_let_database_go: DROP DATABASE of lockq.database, by a role that may
 * drop it, must not fail because the lock server is connected to it (as
 * pg_restore --clean --create does).  The lock server is asked to stop
 * cleanly, and its successor waits before it connects while this backend
 * is dropping the database (dropping_pid, cleared when the statement
 * ends; lq_worker_wait_for_drop).  Waits up to LQ_DROPDB_WAIT_MS for it to
 * exit.  Returns whether it did all that (then the caller clears
 * dropping_pid).  Other databases, and roles that may not drop this one,
 * change nothing: DROP DATABASE reports their case itself.
 */
static bool
lq_let_database_go(const char *dbname)
{
	Oid			dboid;
	int			waited = 0;
	int			pid;

	if (lockq_database == NULL || dbname == NULL ||
		strcmp(dbname, lockq_database) != 0 || !process_shared_preload_libraries_done)
		return false;
	dboid = get_database_oid(dbname, true);
	if (!OidIsValid(dboid) || !pg_database_ownercheck(dboid, GetUserId()))
		return false;
	pg_atomic_write_u32(&lq_shared->dropping_pid, (uint32) MyProcPid);
	while ((pid = lq_shared->worker_pid) != 0 && waited < LQ_DROPDB_WAIT_MS)
	{
		if (waited == 0)
		{
			ereport(LOG,
					(errmsg("lockq lock server leaves database \"%s\", which is being dropped", dbname)));
			(void) kill(pid, SIGTERM);
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited += 50;
	}
	return true;
}
static ExecutorStart_hook_type lq_prev_executor_start = NULL;
static ExecutorRun_hook_type lq_prev_executor_run = NULL;
static ExecutorFinish_hook_type lq_prev_executor_finish = NULL;
static ExecutorEnd_hook_type lq_prev_executor_end = NULL;

/*
 * The executor hooks count top-level statements (see lq_stmt_seq): a
 * statement starts at nesting level 0 and has completed when its
 * ExecutorEnd runs there (never after an error).  Nested statements run
 * inside ExecutorRun, ExecutorFinish or ProcessUtility of their caller,
 * which raise the nesting level, as pg_stat_statements does.
 */
static void
lq_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (lq_nesting == 0)
		lq_stmt_seq++;
	if (lq_prev_executor_start)
		lq_prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

static void
lq_executor_run(QueryDesc *queryDesc, ScanDirection direction, uint64 count,
				bool execute_once)
{
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_executor_run)
			lq_prev_executor_run(queryDesc, direction, count, execute_once);
		else
			standard_ExecutorRun(queryDesc, direction, count, execute_once);
	}
	PG_FINALLY();
	{
		lq_nesting--;
	}
	PG_END_TRY();
}

static void
lq_executor_finish(QueryDesc *queryDesc)
{
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_executor_finish)
			lq_prev_executor_finish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_FINALLY();
	{
		lq_nesting--;
	}
	PG_END_TRY();
}

static void
lq_executor_end(QueryDesc *queryDesc)
{
	if (lq_prev_executor_end)
		lq_prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	if (lq_nesting == 0)
		lq_stmt_done = lq_stmt_seq;
}

/*
 * lq_carry_floors raises the new installation's token and clock sequences
 * to the floors that survive the extension (the lock server's state file,
 * and shared memory), in the transaction of CREATE EXTENSION lockq (or of
 * ALTER EXTENSION lockq UPDATE).  The lock server continues above them
 * anyway; doing it here makes the floors part of what replicates with the
 * new installation, so that a standby promoted later never issues a token
 * again either.
 */
static void
lq_carry_floors(void)
{
	LqStateFile sf;
	int64		token_floor = 0;
	int64		clock_floor = 0;
	Datum		values[2];
	Oid			types[2] = {INT8OID, INT8OID};

	if (lq_statefile_read(&sf))
	{
		token_floor = sf.token_ceiling;
		clock_floor = sf.clock_ceiling;
	}
	if (lq_shared != NULL)
	{
		token_floor = Max(token_floor, (int64) pg_atomic_read_u64(&lq_shared->token_high));
		clock_floor = Max(clock_floor, lq_clock_ceiling());
	}
	if (token_floor <= 0 && clock_floor <= 0)
		return;
	values[0] = Int64GetDatum(Max(token_floor, 1));
	values[1] = Int64GetDatum(Max(clock_floor, 0));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(
							  "SELECT pg_catalog.setval('lockq.token_seq', $1)"
							  "  FROM lockq.token_seq"
							  " WHERE last_value OPERATOR(pg_catalog.<) $1;"
							  "SELECT pg_catalog.setval('lockq.clock_seq', $2)"
							  "  FROM lockq.clock_seq"
							  " WHERE last_value OPERATOR(pg_catalog.<) $2",
							  2, types, values, NULL, false, 0) < 0)
		elog(ERROR, "could not carry lockq's floors into the new installation");
	SPI_finish();
}

/*
 * lq_is_lockq_extension_stmt: is this CREATE EXTENSION lockq or ALTER
 * EXTENSION lockq UPDATE?
 */
static bool
lq_is_lockq_extension_stmt(Node *parsetree)
{
	if (IsA(parsetree, CreateExtensionStmt))
		return strcmp(((CreateExtensionStmt *) parsetree)->extname, "lockq") == 0;
	if (IsA(parsetree, AlterExtensionStmt))
		return strcmp(((AlterExtensionStmt *) parsetree)->extname, "lockq") == 0;
	return false;
}

/*
 * lq_process_utility counts top-level utility statements (CALL, DO, ...)
 * like the executor hooks, acts on DISCARD ALL (above), and carries the
 * floors into a new installation of the extension (lq_carry_floors).
 */
static void
lq_process_utility(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		top = (lq_nesting == 0);

	bool		dropping;

	lq_maint_check_utility(parsetree);
	dropping = IsA(parsetree, DropdbStmt) &&
		lq_let_database_go(((DropdbStmt *) parsetree)->dbname);
	if (top)
		lq_stmt_seq++;
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_process_utility)
			lq_prev_process_utility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		lq_nesting--;
		if (dropping)
			pg_atomic_write_u32(&lq_shared->dropping_pid, 0);
	}
	PG_END_TRY();
	if (top)
		lq_stmt_done = lq_stmt_seq;

	if (lq_is_lockq_extension_stmt(parsetree))
		lq_carry_floors();

	if (IsA(parsetree, DiscardStmt) &&
		((DiscardStmt *) parsetree)->target == DISCARD_ALL &&
		lq_attached && lq_is_available())
	{
		LqRequest	req;
		LqResult	res;

		memset(&req, 0, sizeof(req));
		req.op = LQ_OP_RELEASE_SESSION;
		req.session_owner = true;
		lq_format_session_owner(req.owner, sizeof(req.owner), MyProcPid,
								MyStartTimestamp);
		res = lq_call(&req);
		lq_raise_if_error(&res);
		if (lq_my_grants != NULL)
		{
			hash_destroy(lq_my_grants);
			lq_my_grants = NULL;
		}
	}
}

/*
 * lq_install_backend_hooks chains lockq's utility and executor hooks (from
 * _PG_init, when preloaded).
 */
void
lq_install_backend_hooks(void)
{
	lq_prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = lq_process_utility;
	lq_prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = lq_executor_start;
	lq_prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = lq_executor_run;
	lq_prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = lq_executor_finish;
	lq_prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = lq_executor_end;
}

/*
 * The clock as backends read it: values handed out (lockq_now) and readings
 * for decisions (lockq_holds), never above the durable ceiling that the
 * lock server keeps ahead of them (lockq_clock.c).
 */

PG_FUNCTION_INFO_V1(lockq_now);

/*
 * lq_request_clock_extension asks the lock server to extend the clock's
 * durable ceiling, and waits for it.
 */
static void
lq_request_clock_extension(void)
{
	LqRequest	req;
	LqResult	res;

	memset(&req, 0, sizeof(req));
	req.op = LQ_OP_CLOCK;
	res = lq_call(&req);
	if (res.status == LQ_ST_ERROR)
		ereport(ERROR,
				(errcode(res.sqlerrcode),
				 errmsg("%s", res.message)));
}

/*
 * lq_now_bounded returns the lockq time without handing it out, but
 * never above the durable ceiling: a decision taken at that time (a lease
 * has ended, so lockq_holds is false) must still hold after a crash, when
 * the clock resumes above the ceiling.  Asks the lock server to extend the
 * ceiling when the clock has passed it (an idle lock server lets it lag).
 * It also waits, the same way, for the lock server's first start in this
 * shared-memory lifetime to commit: lockq_holds reads lockq.owners, and
 * until then a grant whose release was shown before a crash and lost in it
 * is still there (the clock is ready before that, in the same transaction).
 */
static int64
lq_now_bounded(void)
{
	int			tries;

	for (tries = 0;; tries++)
	{
		int64		v = lq_clock_peek();

		if (v <= lq_clock_ceiling() && lq_clock_is_ready() &&
			lq_server_started())
			return v;
		if (tries > 100)
			elog(ERROR, "lockq clock ceiling is not advancing");
		lq_request_clock_extension();
	}
}

/*
 * lq_now_handout hands out a clock value in a backend.  When the
 * published ceiling is too close (or the clock is not set up yet) it asks the
 * worker to extend it and tries again; that round trip is the rare path.
 */
static int64
lq_now_handout(void)
{
	int64		v;
	int			tries;

	for (tries = 0;; tries++)
	{
		if (lq_clock_next(lq_clock_ceiling(), &v))
			return v;
		if (tries > 100)
			elog(ERROR, "lockq clock ceiling is not advancing");
		lq_request_clock_extension();
	}
}

/*
 * lockq_now() returns the lockq clock in microseconds since the Unix epoch.
 */
Datum
lockq_now(PG_FUNCTION_ARGS)
{
	lq_check_available();
	PG_RETURN_INT64(lq_now_handout());
}

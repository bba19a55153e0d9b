/*-------------------------------------------------------------------------
 *
 * lockq_call.c
 *		A backend's call to the lock server: availability checks, the
 *		round trip through the request slot, and the answers a backend may
 *		give itself (fast-path grants, quick releases).
 *
 * A backend never changes lock state itself.  It checks the arguments (bad
 * input is rejected in lockq_sql.c, before anything is shared), puts the
 * request into its slot, wakes the worker and sleeps on its latch until the
 * worker has committed the outcome (lq_call).  If the wait is interrupted
 * (cancel, timeout, termination) a cleanup callback marks the request
 * cancelled, and the worker removes the queue entry or, if the grant raced
 * with the cancel, hands the lock on to the next waiter.
 *
 * Two shortcuts avoid the round trip where the backend can tell the answer
 * by itself: a session-bound lock nobody else wants is granted on the fast
 * path (lockq_fastpath.c, lq_call_take_fast), and a release this session
 * can prove is answered at once and queued for the lock server
 * (lq_call_quick_release, lq_call_quick_release_leased).  For these the
 * backend remembers the tokens of its session-bound grants
 * (lq_call_remember_grant).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_call.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "libpq/libpq-be.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "lockq.h"
#include "lockq_call.h"
#include "lockq_clock.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_policy.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

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

/*
 * lq_self_limit: when a backend ends req's wait by itself, whatever the lock
 * server does (lockq time); 0 for a request without such a limit.
 */
static inline int64
lq_self_limit(const LqRequest *req)
{
	if (req->deadline != 0 && (req->op == LQ_OP_GET || req->op == LQ_OP_AWAIT))
		return req->deadline + LQ_SELF_TIMEOUT_GRACE_US;
	return 0;
}

/*
 * lq_before_limit: is give_up_at (lockq time; 0: no limit) still ahead?  If
 * so, *timeout_ms (-1: none) is cut to what is left of it, for a sleep.
 */
static bool
lq_before_limit(int64 give_up_at, long *timeout_ms)
{
	int64		left_us;
	long		left_ms;

	if (give_up_at == 0)
		return true;
	left_us = give_up_at - lq_clock_peek();
	if (left_us <= 0)
		return false;
	left_ms = (long) Min((left_us + 999) / 1000, LONG_MAX);
	*timeout_ms = *timeout_ms < 0 ? left_ms : Min(*timeout_ms, left_ms);
	return true;
}

/* Per-backend state. */
static int	lq_db_checked = 0;	/* 0 unknown, 1 right database, -1 wrong */
static bool lq_attached = false;
static int	lq_my_claim = -1;	/* see lq_call (lockq_fastpath.c) */

/* This session's session-bound grants as it was told them: lock -> token. */
typedef struct LqMyGrant
{
	char		lock_id[LQ_MAX_ID_LEN + 1];	/* hash key, must be first */
	int64		token;
} LqMyGrant;

static HTAB *lq_my_grants = NULL;

/* This session's request slot (lq_attach); -1 until its first lockq call. */
static int	lq_my_slotno = -1;

/*
 * The lock servers that may hold a session-bound grant of this session: a
 * bit for each that it sent a request of the session's own (owner NULL) to,
 * or whose lock it took on the fast path, since its last DISCARD ALL.  Only
 * such a request or the fast path makes a session-bound grant, so DISCARD
 * ALL (lq_call_release_session) asks only these: a session pooler's reset
 * waits for no other lock server, and costs nothing after leased locks.
 */
static uint32 lq_session_servers = 0;

/*
 * The lock servers that may hold anything of this session: a bit for each
 * that it sent a request to, queued a quick release for, or whose lock it
 * took on the fast path.  Only these have its end to apply (its grants,
 * its waits, the outcomes staged for its slot): lq_at_session_exit tells
 * only them, so a session's end wakes no other lock server, and its slot
 * is free again without waiting for one that is stalled.
 */
static uint32 lq_servers_used = 0;

StaticAssertDecl(LQ_MAX_SERVERS <= 32,
				 "lq_session_servers and lq_servers_used need a bit for each lock server");

/*
 * lq_note_server notes, before it happens, that this session gives lock
 * server server something of its own (session_bound: something that may
 * make a session-bound grant).
 */
static inline void
lq_note_server(int server, bool session_bound)
{
	uint32		bit = UINT32_C(1) << server;

	lq_servers_used |= bit;
	if (session_bound)
		lq_session_servers |= bit;
}

/*
 * lq_call_slotno returns the number of this session's request slot: the one
 * lq_attach claimed, else the slot of its BackendId, which it will try
 * first.
 */
int
lq_call_slotno(void)
{
	return lq_my_slotno >= 0 ? lq_my_slotno : MyBackendId - 1;
}

/*
 * lq_call_server returns the lock server that this backend's requests go to
 * (lq_shmem_server_of).
 */
static inline LqServer *
lq_call_server(void)
{
	return lq_shmem_server_of(lq_call_slotno());
}

/* lq_wake_server wakes that lock server. */
static void
lq_wake_server(void)
{
	lq_shmem_wake_server(lq_call_server());
}

/*
 * lq_push_request puts slot slotno's request, cancel or session end into
 * the arrival ring of the lock server its request went to.
 */
static void
lq_push_request(int slotno)
{
	lq_shmem_ring_push(lq_slots[slotno].server, lq_entry_request(slotno));
}


/*
 * lq_call_is_admin: may role act for owners of other roles (release, renew or
 * take over their grants, cancel their waits)?  Superusers and members of
 * lockq_admin may.  Looked up for each request: the role can be created,
 * dropped or granted at any time, and both lookups are cached.
 */
bool
lq_call_is_admin(Oid role)
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
 * lq_call_is_available: can lockq serve this backend (the library was
 * preloaded, this is the lockq database, the server is not in recovery)?
 * The views' functions show nothing from shared memory otherwise.
 */
bool
lq_call_is_available(void)
{
	if (lq_shared == NULL || lockq_database == NULL)
		return false;
	return lq_in_lockq_database() && !RecoveryInProgress();
}

/*
 * lq_call_check_available raises an error, with a hint, unless lockq can serve
 * this backend: the library was preloaded, this is the lockq database and
 * the server is not in recovery.
 */
void
lq_call_check_available(void)
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

	if (MyBackendId < 1 || MyBackendId > MaxBackends)
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
 * lq_at_session_exit runs when a backend that has used lockq exits, however it
 * exits (disconnect, FATAL, pg_terminate_backend).  It tells each lock
 * server that may hold anything of the session (lq_servers_used) that the
 * session is gone, so that its session-bound grants and its queue entry go
 * at once, each lock server's for its locks; the last of them to apply it
 * frees the slot.  A session that none of them knows (it only read the
 * clock or checked fences) frees its slot itself.
 */
static void
lq_at_session_exit(int code, Datum arg)
{
	int			slotno = lq_call_slotno();
	LqSlot	   *slot = &lq_slots[slotno];
	uint32		mask = lq_servers_used & lq_shmem_servers_mask();
	bool		freed = false;
	int			i;

	/* a call left by exit: the lock server adopts what it meets (its end) */
	lq_fastpath_unclaim(lq_my_claim);
	lq_my_claim = -1;

	SpinLockAcquire(&slot->mutex);
	slot->session_ended = true;
	slot->ends_left = mask;
	if (slot->state != LQ_SLOT_IDLE)
		slot->cancel_requested = true;

	/*
	 * The transaction, if one is open, is aborted after this (its fences'
	 * counts go then, lq_fences_end); its write never commits, so nobody
	 * needs to find this backend among the fencers any more, and the slot
	 * is not left listing them once it is free.
	 */
	slot->nfences = 0;
	slot->fences_overflow = false;
	if (mask == 0)
		freed = lq_shmem_slot_end_done(slot, 0);	/* nothing left: free */
	SpinLockRelease(&slot->mutex);
	if (freed)
		ConditionVariableBroadcast(&slot->freed);

	/* they end the session's grants and waits of their locks */
	for (i = 0; i < lq_shared->nservers; i++)
	{
		if ((mask & (UINT32_C(1) << i)) == 0)
			continue;
		lq_shmem_ring_push(i, lq_entry_request(slotno));
		lq_shmem_wake_server(lq_shmem_server(i));
	}
}

/*
 * lq_claim_slot makes slot slotno this session's if it is FREE, and says
 * whether it did.  Takes the slot's mutex.
 */
static bool
lq_claim_slot(int slotno)
{
	LqSlot	   *slot = &lq_slots[slotno];
	bool		claimed = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->state == LQ_SLOT_FREE)
	{
		slot->state = LQ_SLOT_IDLE;
		slot->cancel_requested = false;
		slot->session_ended = false;
		slot->ends_left = 0;
		slot->pgprocno = MyProc->pgprocno;
		slot->pid = MyProcPid;
		slot->session_start = MyStartTimestamp;
		claimed = true;
	}
	SpinLockRelease(&slot->mutex);
	return claimed;
}

/*
 * lq_claim_any claims this session's slot, on its first lockq call: the
 * slot of its BackendId, or, while an earlier session with that BackendId
 * (PostgreSQL hands out the lowest free one) still holds it because a lock
 * server has not applied that session's end yet, a free spare (the slots
 * past MaxBackends), looked for from a place of its own so that sessions
 * that look at once do not all try the same spares first.  Returns the
 * slot, or -1 when none is free.
 */
static int
lq_claim_any(void)
{
	int			own = MyBackendId - 1;
	int			nspare = lq_shared->nslots - MaxBackends;
	int			i;

	if (lq_claim_slot(own))
		return own;
	for (i = 0; i < nspare; i++)
	{
		int			slotno = MaxBackends + (own + i) % nspare;

		if (lq_claim_slot(slotno))
			return slotno;
	}
	return -1;
}

/*
 * lq_attach claims this session's slot, on its first lockq call
 * (lq_claim_any).  While none is free (as many sessions as can run ended
 * while a lock server was stalled), we wait (interruptibly) for the slot of
 * our BackendId to be freed, looking at the spares again at least every
 * second: not at all unless wait, and only until give_up_at (lockq time; 0:
 * no limit).  Returns whether we have a slot.
 */
static bool
lq_attach(bool wait, int64 give_up_at)
{
	LqSlot	   *own = &lq_slots[MyBackendId - 1];

	if (lq_attached)
		return true;

	ConditionVariablePrepareToSleep(&own->freed);
	for (;;)
	{
		long		timeout = 1000;

		lq_my_slotno = lq_claim_any();
		if (lq_my_slotno >= 0)
			break;
		if (!wait || !lq_before_limit(give_up_at, &timeout))
		{
			ConditionVariableCancelSleep();
			return false;
		}

		/* The ended sessions' exits are not processed yet: nudge. */
		lq_shmem_wake_servers();
		(void) ConditionVariableTimedSleep(&own->freed, timeout,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();

	before_shmem_exit(lq_at_session_exit, (Datum) 0);
	lq_attached = true;
	return true;
}

/*
 * lq_call_attach claims this backend's slot, waiting as long as it takes
 * (see lq_attach).
 */
void
lq_call_attach(void)
{
	(void) lq_attach(true, 0);
}

/*
 * lq_call_cleanup runs when a wait in lq_call is left by an error or by
 * process exit.  It marks the request cancelled; the worker then removes
 * the queue entry, or releases a grant the backend will never see.  On an
 * ERROR we wait (bounded, without servicing interrupts) for the worker to
 * confirm, so that the entry is gone by the time the error reaches the
 * client.  On exit lq_at_session_exit does the rest and nobody waits.
 */
static void lq_withdraw(int slotno, int wait_ms);
static void lq_self_timeout(const LqRequest *req, LqResult *res,
							const char *why);

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
 * lq_server_stuck says why the lock server cannot confirm anything soon:
 * LQ_ERR_SERVER_NOT_RUNNING, or LQ_ERR_SERVER_FLUSHING when it has waited
 * more than LQ_STUCK_FLUSH_US (*waited_us) for a batch to be flushed (a
 * synchronous standby that is gone: it waits until the standby is back or
 * synchronous_standby_names changes); LQ_ERR_NONE if neither.
 */
#define LQ_STUCK_FLUSH_US	(1000 * 1000)

static LqError
lq_server_stuck(int64 *waited_us)
{
	LqServer   *sv = lq_call_server();
	uint64		since = pg_atomic_read_u64(&sv->durable_wait_since);

	if (sv->worker_pid == 0)
		return LQ_ERR_SERVER_NOT_RUNNING;
	*waited_us = since == 0 ? 0 : lq_clock_peek() - (int64) since;
	if (*waited_us <= LQ_STUCK_FLUSH_US)
		return LQ_ERR_NONE;
	return LQ_ERR_SERVER_FLUSHING;
}

/*
 * lq_stuck_detail adds to the report being made the detail of why the lock
 * server cannot confirm anything soon (see lq_server_stuck).  For use in
 * ereport().
 */
static int
lq_stuck_detail(LqError stuck, int64 waited_us)
{
	if (stuck == LQ_ERR_SERVER_NOT_RUNNING)
		return errdetail("The lock server is not running.");
	return errdetail("The lock server has waited %.1f s for its last batch to be flushed to WAL and to the synchronous standbys (synchronous_standby_names: \"%s\").",
					 waited_us / 1e6,
					 SyncRepStandbyNames ? SyncRepStandbyNames : "");
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

	lq_push_request(slotno);
	lq_wake_server();

	while (waited < wait_ms)
	{
		bool		acked;
		int			step = Min(wait_ms - waited, 50);
		LqError		stuck;
		int64		waited_us = 0;

		SpinLockAcquire(&slot->mutex);
		acked = (slot->state == LQ_SLOT_IDLE);
		SpinLockRelease(&slot->mutex);
		if (acked)
			break;
		stuck = lq_server_stuck(&waited_us);
		if (stuck != LQ_ERR_NONE)
		{
			ereport(LOG,
					(errmsg("lockq call gave up without the lock server's confirmation of its cancel"),
					 lq_stuck_detail(stuck, waited_us)));
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
 * confirmed an earlier cancellation.  Normally it is IDLE already.  A wait
 * with a limit (lq_self_limit) ends by it here too, as it would once
 * submitted: a lock server that cannot confirm (it waits for a synchronous
 * standby that is gone, or for its tables) must not keep the caller past
 * the limit it asked for.  Returns false then, with the timeout in *res
 * (lq_self_timeout); nothing was submitted.
 */
static bool
lq_wait_idle(LqSlot *slot, const LqRequest *req, LqResult *res)
{
	int64		give_up_at = lq_self_limit(req);

	for (;;)
	{
		bool		idle;
		long		timeout = 1000;

		SpinLockAcquire(&slot->mutex);
		idle = (slot->state == LQ_SLOT_IDLE);
		SpinLockRelease(&slot->mutex);
		if (idle)
			return true;
		if (!lq_before_limit(give_up_at, &timeout))
		{
			lq_self_timeout(req, res,
							"before the lock server confirmed the end of this session's previous call");
			return false;
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		lq_wake_server();
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
 * hints, lq_shmem_hint_held_by_other) arrives lazily: it cannot be granted
 * before that grant ends, and the lock server drains the ring in order
 * before it decides any end, so it is left in the ring without waking the
 * lock server, which takes it with its next wake-up (usually the holder's
 * release).  *lazy_out says so.  A hint read before a grant ended but
 * acted on after the lock server last looked at the ring is caught by
 * reading it again after the push (below), and by the lock server, which
 * looks at the ring once more before it sleeps after dropping a hint
 * (lq_shmem_hint_lazy_stranded).  Views wake the lock server for lazy arrivals
 * (lq_shmem_settle_arrivals), and lq_await wakes it itself when half of the
 * wait limit is left, and after LQ_LAZY_ARRIVAL_MS as a safety net.  A
 * lockq_get whose wait ends within LQ_LAZY_MIN_WAIT_US is never lazy.
 * Returns false, having submitted nothing, when the wait's limit passed
 * while the slot was still busy (lq_wait_idle; *res is the timeout).
 */
static bool
lq_submit(LqSlot *slot, int slotno, LqRequest *req, LqResult *res,
		  bool *lazy_out)
{
	bool		lazy;
	int			server;

	req->role = GetUserId();
	req->admin = !req->session_owner && lq_call_is_admin(req->role);
	if (req->op == LQ_OP_GET || req->op == LQ_OP_TRY || req->op == LQ_OP_ENQUEUE)
	{
		lq_policy_check_use(req->lock_id, req->role,
							req->admin || lq_call_is_admin(req->role));
		lq_policy_limits(req->role, req);
	}
	if (!lq_wait_idle(slot, req, res))
		return false;

	server = (req->op == LQ_OP_RELEASE_SESSION || req->op == LQ_OP_CLOCK) ?
		req->server : lq_shmem_server_for(req->lock_id);
	lq_note_server(server,
				   req->session_owner && req->op != LQ_OP_RELEASE_SESSION);
	SpinLockAcquire(&slot->mutex);
	slot->req = *req;
	slot->server = server;
	slot->reqid++;
	slot->submitted = lq_clock_peek();
	memset(&slot->res, 0, sizeof(LqResult));
	slot->cancel_requested = false;
	slot->state = LQ_SLOT_PENDING;
	SpinLockRelease(&slot->mutex);

	lazy = req->op == LQ_OP_GET &&
		(req->deadline == 0 ||
		 req->deadline > lq_clock_peek() + LQ_LAZY_MIN_WAIT_US) &&
		lq_shmem_hint_held_by_other(req->lock_id, req->owner);
	if (lazy)
		LQ_FAULT("submit-lazy-before-push");
	lq_push_request(slotno);
	if (lazy)
	{
		/*
		 * Read the hint again after the push: if the grant ended since
		 * (or the entry went to another lock id), the lock server may have
		 * looked at the ring for the last time before our entry was in it.
		 * If the hint still says held, the end comes later, and the lock
		 * server drains the ring before it decides it.  The barrier keeps
		 * the push (a store) ahead of the hint's reads; it pairs with the
		 * one in lq_shmem_hint_lazy_stranded, between the lock server's change
		 * of a hint and its look at the ring: one of the two sees the
		 * other's store, and a read that sees a change in progress counts
		 * as "not held" (lq_shmem_hint_held_by_other).
		 */
		pg_memory_barrier();
		lazy = lq_shmem_hint_held_by_other(req->lock_id, req->owner);
	}
	if (!lazy)
		lq_wake_server();
	*lazy_out = lazy;
	return true;
}

/*
 * lq_give_up ends a wait that its limit has passed while the lock server
 * did not answer (it normally answers at the limit itself, in the same
 * decision as any grant): a lock server that is restarting, cannot load
 * its state, or waits for a synchronous standby that is gone must not keep
 * the caller past the limit it asked for.  Unless the answer has just
 * arrived (false: the caller reads it), the request is withdrawn as a
 * cancel is (lq_withdraw; a grant that comes with it is handed back), the
 * server log says why, and *res becomes a timeout that says what the lock
 * server was doing (LQ_ERR_SERVER_*, lq_call_timeout_detail).
 */
static bool
lq_give_up(LqSlot *slot, const LqRequest *req, LqResult *res)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->state == LQ_SLOT_DONE)
	{
		SpinLockRelease(&slot->mutex);
		return false;
	}
	slot->cancel_requested = true;
	SpinLockRelease(&slot->mutex);
	lq_withdraw(lq_call_slotno(), LQ_SELF_TIMEOUT_ACK_MS);
	lq_self_timeout(req, res, "without an answer from the lock server");
	return true;
}

/*
 * lq_self_timeout makes *res the timeout of req's wait that this backend
 * decided itself: why the lock server could not answer (LQ_ERR_SERVER_*,
 * lq_server_stuck), or what it was doing; and the server log says so, with
 * how the wait ended (why).
 */
static void
lq_self_timeout(const LqRequest *req, LqResult *res, const char *why)
{
	int64		waited_us = 0;
	int			pid;

	memset(res, 0, sizeof(LqResult));
	res->status = LQ_ST_TIMEOUT;
	pid = lq_call_server()->worker_pid;
	res->error = lq_server_stuck(&waited_us);
	res->arg = waited_us;
	if (res->error == LQ_ERR_NONE)
	{
		const char *doing = NULL;
		int			len;

		if (pid != 0)
			doing = pgstat_get_backend_current_activity(pid, false);
		if (doing == NULL)
			doing = "?";
		/* cut on a character boundary, as the lock server cuts its texts */
		len = pg_mbcliplen(doing, strlen(doing), sizeof(res->message) - 1);
		memcpy(res->message, doing, len);
		res->error = LQ_ERR_SERVER_BUSY;
	}
	ereport(LOG,
			(errmsg("lockq wait for lock \"%s\" ended at its limit %s", req->lock_id, why),
			 lq_call_timeout_detail(res)));
}

/*
 * lq_call_timeout_detail adds to the report being made the detail of a
 * timeout that this backend decided itself, because the lock server did
 * not answer by the end of the wait (lq_give_up): why, or what it was
 * doing.  Nothing for a timeout the lock server answered.  For use in
 * ereport().
 */
int
lq_call_timeout_detail(const LqResult *res)
{
	switch (res->error)
	{
		case LQ_ERR_SERVER_NOT_RUNNING:
			return errdetail("The lock server did not answer by the end of the wait. The lock server is not running.");
		case LQ_ERR_SERVER_FLUSHING:
			return errdetail("The lock server did not answer by the end of the wait. The lock server has waited %.1f s for its last batch to be flushed to WAL and to the synchronous standbys (synchronous_standby_names: \"%s\").",
							 res->arg / 1e6,
							 SyncRepStandbyNames ? SyncRepStandbyNames : "");
		case LQ_ERR_SERVER_BUSY:
			return errdetail("The lock server did not answer by the end of the wait (it is: %s).",
							 res->message);
		default:
			return 0;
	}
}

/*
 * lq_await_spin waits for the lock server's answer to a request just
 * submitted by watching the slot, for up to lockq.spin_time microseconds,
 * while a core is free to do so (lq_shmem_spin_enter).  The lock server
 * answers most requests within a batch, tens of microseconds; a backend
 * that is still awake then is not signalled (SetLatch sends no kill() to
 * a backend that is not sleeping) and not switched out and back in: the
 * kill() was the largest part of the lock server's work per leased pair
 * besides its batches, and the sleep and wake-up most of an answer's
 * latency on an idle machine.  The spin ends as soon as the answer is
 * there, when the request waits in a lock's queue (queued_ts: only a
 * release ends that), or when an interrupt is pending; the caller reads
 * the slot under its mutex.  Reads the slot without the mutex (a stale
 * value only prolongs the spin), checks no interrupts itself, and never
 * raises.  Never inlined, so that a profile shows the spin apart.
 */
static pg_noinline void
lq_await_spin(LqSlot *slot)
{
	volatile LqSlot *vs = slot;
	instr_time	start;
	int			polls = 0;

	if (lockq_spin_time <= 0 || !lq_shmem_spin_enter(false))
		return;
	INSTR_TIME_SET_CURRENT(start);
	while (vs->state != LQ_SLOT_DONE && vs->queued_ts == 0 &&
		   !InterruptPending && lq_shmem_spin_pause(start, &polls))
		;
	lq_shmem_spin_exit();
}

/*
 * lq_waits_for_release: is req answered only once another owner's grant
 * ends?  A lockq_await always is, and so is a lockq_enqueue with a wait
 * (liblockq's wait in the backend) for a lock that another owner seems to
 * hold (its hint, as a lazy lockq_get reads it).  Spinning for such an
 * answer only takes a core from the processes that make the release (on 2
 * cores liblockq's contended hand-offs fell by a third when its enqueues
 * spun: CHANGELOG 1.3).
 */
static bool
lq_waits_for_release(const LqRequest *req)
{
	if (req->op == LQ_OP_AWAIT)
		return true;
	return req->op == LQ_OP_ENQUEUE && req->deadline > 0 &&
		lq_shmem_hint_held_by_other(req->lock_id, req->owner);
}

/*
 * lq_await sleeps until the lock server has answered the request in slot
 * and returns the answer.  Interruptible (the caller sets up the cleanup);
 * a client that disconnects ends the session at once (FATAL), so that it
 * keeps no place in a queue.  For a lazy arrival (lq_submit) it wakes the
 * lock server if the request is still unread when half of its wait limit
 * is left, or after LQ_LAZY_ARRIVAL_MS.  Any other request but one that
 * waits for a release (lq_waits_for_release) is first waited for awake
 * (lq_await_spin).
 */
static LqResult
lq_await(LqSlot *slot, const LqRequest *req, bool lazy)
{
	WaitEventSet *set = lq_wait_set();
	LqResult	res;
	TimestampTz kick_at = 0;
	int64		give_up_at = 0;

	/* a wait with a limit ends by it, whatever the lock server does */
	give_up_at = lq_self_limit(req);

	if (lazy)
	{
		/* the lock server must see a wait limit in time to keep it */
		int64		kick_us = LQ_LAZY_ARRIVAL_MS * 1000;

		if (req->deadline != 0)
			kick_us = Min(kick_us, (req->deadline - lq_clock_peek()) / 2);
		kick_at = GetCurrentTimestamp() + Max(kick_us, 0);
	}
	else if (!lq_waits_for_release(req))
		lq_await_spin(slot);
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
					lq_wake_server();
				kick_at = 0;
			}
			else
				timeout = left;
		}
		if (!done && !lq_before_limit(give_up_at, &timeout))
		{
			if (lq_give_up(slot, req, &res))
				break;
			continue;			/* answered meanwhile: read it */
		}
		if (done)
		{
			/* wake two of the backends answered in the same batch */
			lq_shmem_wakes_pass(lq_call_slotno(), 2);

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
LqResult
lq_call(LqRequest *req)
{
	int			slotno;
	LqSlot	   *slot;
	LqResult	res;
	bool		lazy;

	/* a wait with a limit ends by it, also while the slot is not ours yet */
	if (!lq_attach(true, lq_self_limit(req)))
	{
		lq_self_timeout(req, &res,
						"while every request slot it could take was held by an ended session that a lock server has not cleaned up after yet");
		return res;
	}
	slotno = lq_call_slotno();
	slot = &lq_slots[slotno];

	/* no backend grants this lock by itself while we wait for the answer */
	lq_fastpath_unclaim(lq_my_claim);
	lq_my_claim = lq_fastpath_claim(req->lock_id);
	PG_TRY();
	{
		if (lq_submit(slot, slotno, req, &res, &lazy))
		{
			PG_ENSURE_ERROR_CLEANUP(lq_call_cleanup, Int32GetDatum(slotno));
			{
				LQ_FAULT("call-after-submit");
				res = lq_await(slot, req, lazy);
			}
			PG_END_ENSURE_ERROR_CLEANUP(lq_call_cleanup, Int32GetDatum(slotno));
		}
	}
	PG_FINALLY();
	{
		lq_fastpath_unclaim(lq_my_claim);
		lq_my_claim = -1;
	}
	PG_END_TRY();

	return res;
}

/*
 * lq_role_limit_hint adds the hint for a role at one of its limits, which
 * setting sets.  For use in ereport().
 */
static int
lq_role_limit_hint(const char *setting)
{
	return errhint("%s sets the limit, unless a member of %s set the role's own with lockq.lockq_set_role_limits().",
				   setting, LQ_ADMIN_ROLE);
}

/*
 * lq_failure_hint adds the hint of an error the lock server got itself
 * (LQ_ERR_LOAD_FAILED, LQ_ERR_FAILED), if it had one.  For use in
 * ereport().
 */
static int
lq_failure_hint(const LqResult *res)
{
	return res->hint[0] != '\0' ? errhint("%s", res->hint) : 0;
}

/*
 * lq_call_raise_if_error raises the error the lock server answered req
 * with, if it did (status LQ_ST_ERROR): the lock server sends what went
 * wrong (LqError) and the values the message needs, and the message is
 * made here.  The lock id and owner it names are req's.  Errors the lock
 * server got itself (LQ_ERR_LOAD_FAILED, LQ_ERR_FAILED) keep their
 * SQLSTATE, message and hint.
 */
void
lq_call_raise_if_error(const LqRequest *req, const LqResult *res)
{
	if (res->status != LQ_ST_ERROR)
		return;
	switch (res->error)
	{
		case LQ_ERR_OTHER_ROLE:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("owner \"%s\" of lock \"%s\" belongs to another role",
							req->owner, req->lock_id),
					 errhint("Only the role that took the lock or queued the wait, or a member of %s, can act for its owner.",
							 LQ_ADMIN_ROLE)));
			break;
		case LQ_ERR_NO_SESSION_ROOM:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of shared memory for session-bound locks"),
					 errhint("Increase \"lockq.session_locks_per_backend\" (%d), or take the lock with an owner.",
							 (int) res->arg)));
			break;
		case LQ_ERR_SERVER_MEMORY:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("lockq lock server is at its memory limit"),
					 errhint("lockq.max_server_memory limits the memory its locks and waiters may use; wait for some to end, or raise it.")));
			break;
		case LQ_ERR_TOO_MANY_WAITERS:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("too many lockq waiters"),
					 errhint("lockq.max_waiters limits the waiters queued at once, over all locks and roles.")));
			break;
		case LQ_ERR_ROLE_OWNER_LOCKS:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("this role already holds as many locks with an owner as its limit allows (%d)",
							(int) res->arg),
					 lq_role_limit_hint("lockq.max_owner_locks_per_role")));
			break;
		case LQ_ERR_ROLE_SESSION_LOCKS:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("this role already holds as many session-bound locks as its limit allows (%d)",
							(int) res->arg),
					 lq_role_limit_hint("lockq.max_session_locks_per_role")));
			break;
		case LQ_ERR_ROLE_WAITERS:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("this role already has as many waiters queued as its limit allows (%d)",
							(int) res->arg),
					 lq_role_limit_hint("lockq.max_waiters_per_role")));
			break;
		case LQ_ERR_ALREADY_WAITING:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("owner \"%s\" is already waiting for lock \"%s\"",
							req->owner, req->lock_id)));
			break;
		case LQ_ERR_ALREADY_WAITING_IN_BACKEND:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("owner \"%s\" is already waiting for lock \"%s\" in a backend",
							req->owner, req->lock_id)));
			break;
		case LQ_ERR_WAITING_IN_BACKEND:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("owner \"%s\" is waiting for lock \"%s\" in a backend",
							req->owner, req->lock_id)));
			break;
		case LQ_ERR_NOT_WAITING:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("owner \"%s\" is not waiting for lock \"%s\"",
							req->owner, req->lock_id)));
			break;
		case LQ_ERR_NO_LONGER_WAITING:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("owner \"%s\" is no longer waiting for lock \"%s\"",
							req->owner, req->lock_id)));
			break;
		case LQ_ERR_INVALID_REQUEST:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("invalid lockq request")));
			break;
		case LQ_ERR_TABLES_LOCKED:
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("lockq lock server could not lock its tables within lockq.table_lock_timeout"),
					 res->arg != 0 ?
					 errhint("Relation \"%s.%s\" is locked by process %d; lockq serves no request that could write its tables until that lock is released.",
							 LQ_SCHEMA, res->message, (int) res->arg) :
					 errhint("Relation \"%s.%s\" is locked by another transaction; lockq serves no request that could write its tables until that lock is released.",
							 LQ_SCHEMA, res->message)));
			break;
		case LQ_ERR_NOT_INSTALLED:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("lockq is not installed in the lock server's database")));
			break;
		case LQ_ERR_LOAD_FAILED:
			ereport(ERROR,
					(errcode(res->sqlerrcode),
					 errmsg("lockq lock server could not load its state: %s",
							res->message),
					 lq_failure_hint(res)));
			break;
		case LQ_ERR_FAILED:
			/* the lock server's own error, as it raised it */
			ereport(ERROR,
					(errcode(res->sqlerrcode),
					 errmsg_internal("%s", res->message),
					 lq_failure_hint(res)));
			break;
		case LQ_ERR_NONE:
		case LQ_ERR_SERVER_NOT_RUNNING:
		case LQ_ERR_SERVER_FLUSHING:
		case LQ_ERR_SERVER_BUSY:
			break;
	}
	elog(ERROR, "lockq lock server answered with an unknown error (%d)",
		 (int) res->error);
}

/*
 * lq_call_remember_grant remembers (token > 0) or forgets (0) the token
 * under which this session holds a session-bound lock, for quick releases.
 */
void
lq_call_remember_grant(const char *lock_id, int64 token)
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
	int			server = lq_shmem_server_for(lock_id);

	lq_note_server(server, false);
	SpinLockAcquire(&slot->mutex);
	lq_shmem_slot_queue_quick(slot, lock_id, token);
	SpinLockRelease(&slot->mutex);
	lq_shmem_ring_push(server, lq_entry_quick(slotno));
	lq_shmem_wake_server(lq_shmem_server(server));
}

/*
 * lq_call_quick_release releases a session-bound lock without waiting for the
 * worker, when this session can tell by itself that the release succeeds:
 * it knows the grant's token, and marking the grant released in shared
 * memory (lq_session_mark_released) finds it current, unexpired and its
 * own.  That mark is the release: from then on lockq_holds answers false,
 * and the grant neither expires nor can be force-released.  The release
 * then joins the arrival ring like any request, ahead of this session's
 * next one, and the worker hands the lock on as for a normal release.  So
 * a session-bound lock is released as pg_advisory_unlock releases one:
 * without the releasing session sleeping.  Returns false (nothing done)
 * when the normal path must decide.
 */
bool
lq_call_quick_release(const LqRequest *req)
{
	LqMyGrant  *g;
	int64		token;
	int			slotno = lq_call_slotno();

	if (lq_my_grants == NULL || !lq_attached)
		return false;
	g = hash_search(lq_my_grants, req->lock_id, HASH_FIND, NULL);
	if (g == NULL || (req->has_token && req->token != g->token))
		return false;
	token = g->token;

	/* a grant this session made by itself: gone at once, if nobody fences it */
	switch (lq_fastpath_release(req->lock_id, token, lq_clock_peek()))
	{
		case LQ_FAST_RELEASED:
			lq_shmem_stat_add(LQ_STAT_RELEASES, 1);
			lq_call_remember_grant(req->lock_id, 0);
			return true;
		case LQ_FAST_EXPIRED:
			/* over already: the normal path answers false */
			lq_shmem_stat_add(LQ_STAT_EXPIRIES, 1);
			lq_call_remember_grant(req->lock_id, 0);
			return false;
		case LQ_FAST_NOT_MINE:
			break;
	}

	if (!lq_quick_room(&lq_slots[slotno]))
		return false;

	if (!lq_session_mark_released(req->lock_id, token, MyProcPid,
								  MyStartTimestamp, lq_clock_peek()))
		return false;

	lq_queue_quick(slotno, req->lock_id, token);
	lq_call_remember_grant(req->lock_id, 0);
	return true;
}

/*
 * lq_call_quick_release_leased releases a grant with an owner without waiting
 * for the lock server, when the table of lockq_leases.c allows it: the
 * grant's release may be shown before its flush (its lock is unsettled
 * with a fence_ttl that covers it), and marking it released there finds it
 * current, unexpired, the owner's, under the token given, and of the
 * caller's role.  That mark is the release: lockq_holds answers false from
 * then on.  Returns false (nothing done) when the normal path must decide.
 */
bool
lq_call_quick_release_leased(const LqRequest *req)
{
	int			slotno;
	int64		token;

	/* a slot not ours yet: the normal path waits for it */
	if (!lq_attach(false, 0))
		return false;
	slotno = lq_call_slotno();
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
 * lq_call_take_fast grants a session-bound lock on the fast path
 * (lockq_fastpath.c) when nobody else holds it, waits for it or asks for
 * it: no round trip to the lock server.  The checks of the normal path come
 * first (the role may use the lock id); a role with a limit of its own on
 * session-bound locks takes the normal path, which counts them.  Returns
 * false when the normal path must decide, also for a lock this session
 * holds already (the lock server answers with its token).
 */
bool
lq_call_take_fast(LqRequest *req, LqResult *res)
{
	Oid			role = GetUserId();
	int64		token;

	/* a slot not ours yet: the normal path waits for it, within its limit */
	if (!lq_attach(false, 0))
		return false;
	if (lq_my_grants != NULL &&
		hash_search(lq_my_grants, req->lock_id, HASH_FIND, NULL) != NULL)
		return false;
	lq_policy_check_use(req->lock_id, role, lq_call_is_admin(role));
	if (!lq_policy_default_session_limit(role))
		return false;
	lq_note_server(lq_shmem_server_for(req->lock_id), true);
	token = lq_fastpath_grant(req->lock_id, lq_call_slotno(), MyProcPid,
							  MyStartTimestamp, role, req->ttl_us,
							  lq_clock_peek());
	if (token == 0)
		return false;
	lq_shmem_stat_add(LQ_STAT_GRANTS, 1);
	memset(res, 0, sizeof(LqResult));
	res->status = LQ_ST_GRANTED;
	res->token = token;
	res->fresh_grant = true;
	return true;
}

/*
 * lq_call_release_session ends this session's session-bound locks (DISCARD
 * ALL, see lockq_hooks.c) with a round trip to each lock server that may
 * hold one (lq_session_servers), which ends those of its locks, and forgets
 * their tokens.  A session that never took a session-bound lock has none,
 * and is not held up.  Raises what a lock server answers; the lock servers
 * not asked yet are asked by the next DISCARD ALL.
 */
void
lq_call_release_session(void)
{
	LqRequest	req;
	LqResult	res;
	int			i;

	if (!lq_attached || !lq_call_is_available())
		return;
	memset(&req, 0, sizeof(req));
	req.op = LQ_OP_RELEASE_SESSION;
	req.session_owner = true;
	lq_session_format_owner(req.owner, sizeof(req.owner), MyProcPid,
							MyStartTimestamp);
	for (i = 0; i < lq_shared->nservers; i++)
	{
		if ((lq_session_servers & (UINT32_C(1) << i)) == 0)
			continue;
		req.server = i;
		res = lq_call(&req);
		lq_call_raise_if_error(&req, &res);
		lq_session_servers &= ~(UINT32_C(1) << i);
	}
	if (lq_my_grants != NULL)
	{
		hash_destroy(lq_my_grants);
		lq_my_grants = NULL;
	}
}

/*
 * The clock as backends read it: values handed out (lockq_now) and readings
 * for decisions (lockq_holds), never above the durable ceiling that the
 * lock server keeps ahead of them (lockq_clock.c).
 */

/*
 * lq_request_clock_extension asks the lock server to extend the clock's
 * durable ceiling, and waits for it.  Raises the lock server's error.
 */
static void
lq_request_clock_extension(void)
{
	LqRequest	req;
	LqResult	res;

	memset(&req, 0, sizeof(req));
	req.op = LQ_OP_CLOCK;
	res = lq_call(&req);
	lq_call_raise_if_error(&req, &res);
}

/*
 * lq_call_now_bounded returns the lockq time without handing it out, but
 * never above the durable ceiling: a decision taken at that time (a lease
 * has ended, so lockq_holds is false) must still hold after a crash, when
 * the clock resumes above the ceiling.  Asks the lock server to extend the
 * ceiling when the clock has passed it (an idle lock server lets it lag).
 * It also waits, the same way, for the lock server's first start in this
 * shared-memory lifetime to commit: lockq_holds reads lockq.owners, and
 * until then a grant whose release was shown before a crash and lost in it
 * is still there (the clock is ready before that, in the same transaction).
 */
int64
lq_call_now_bounded(void)
{
	int			tries;

	for (tries = 0;; tries++)
	{
		int64		v = lq_clock_peek();

		if (v <= lq_clock_ceiling() && lq_clock_is_ready() &&
			lq_shmem_server_started())
			return v;
		if (tries > 100)
			elog(ERROR, "lockq clock ceiling is not advancing");
		lq_request_clock_extension();
	}
}

/*
 * lq_call_now_handout hands out a clock value in a backend.  When the
 * published ceiling is too close (or the clock is not set up yet) it asks the
 * worker to extend it and tries again; that round trip is the rare path.
 */
int64
lq_call_now_handout(void)
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


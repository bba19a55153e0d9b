/*-------------------------------------------------------------------------
 *
 * lockq_outbox.c
 *		What a batch of the lock server makes known: answers to backends,
 *		queue positions of waiting backends, applied quick releases,
 *		changes to session-bound grants and NOTIFYs.  All of it is staged in
 *		shared memory while the batch runs and made visible only after the
 *		batch's transaction has committed.
 *
 * A batch's outcome lives in two places: its transaction (rows of
 * lockq.owners and lockq.queue, sequences, NOTIFYs) and shared memory (the
 * slots and the session-bound grants).  They must agree, or a restarted
 * lock server rebuilds a state that never existed: a grant ended in the
 * table but still current in shared memory, a waiter that lost its place.
 * So the shared-memory part is staged, per slot (lq_shmem_staged) and the
 * grant entries (lockq_session.c), as the rules decide it; right before the
 * commit the batch is sealed (its number and transaction id in LqShared);
 * after the commit it is published.  A batch that fails is discarded.  A
 * lock server that starts where its predecessor left a sealed batch (it was
 * terminated while waiting for synchronous standbys, say) publishes it if
 * its transaction committed and discards it otherwise (lq_outbox_resolve),
 * before it loads anything: requests in flight are then exactly those
 * whose batch did not commit, and applying them again is exact.
 *
 * Only the lock server uses this module.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_outbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "commands/async.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"

#include "lockq_fastpath.h"
#include "lockq_leases.h"
#include "lockq_outbox.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

/* Above this NOTIFY queue usage the lock server sends no NOTIFYs. */
#define LQ_NOTIFY_QUEUE_LIMIT		0.5

/* A change to the table of quickly releasable leased grants. */
typedef struct LqLeaseOp
{
	bool		put;			/* else drop */
	char	   *lock_id;
	int64		token;
	char	   *owner;
	Oid			role;
	int64		acquired;
	int64		ttl;
	int64		expires;
	bool		rowless;
} LqLeaseOp;

typedef struct LqNotice
{
	char	   *channel;
	char	   *payload;
} LqNotice;

/* The batch being run, and what it touched, in lq_outbox_cxt. */
static MemoryContext lq_outbox_cxt = NULL;
static uint64 lq_batch = 0;
static List *lq_slots_touched = NIL;	/* slot numbers, once each */
static List *lq_tokens_touched = NIL;	/* int64 tokens, boxed */
static List *lq_notices = NIL;
static List *lq_lease_ops = NIL;	/* of LqLeaseOp, in order */
static List *lq_locks_dropped = NIL;	/* lock ids the rules let go of */

/*
 * lq_outbox_init sets up the module's memory.  Lock server start only.
 */
void
lq_outbox_init(void)
{
	lq_outbox_cxt = AllocSetContextCreate(TopMemoryContext, "lockq outbox",
										  ALLOCSET_DEFAULT_SIZES);
}

/*
 * lq_outbox_forget empties the batch's bookkeeping.
 */
static void
lq_outbox_forget(void)
{
	lq_slots_touched = NIL;
	lq_tokens_touched = NIL;
	lq_notices = NIL;
	lq_lease_ops = NIL;
	lq_locks_dropped = NIL;
	MemoryContextReset(lq_outbox_cxt);
}

/*
 * lq_outbox_begin starts a batch, with a new number.
 */
void
lq_outbox_begin(void)
{
	lq_outbox_forget();
	lq_batch = ++lq_my_server->batch_seq;
}

/*
 * lq_staged returns the slot's staged record for this batch, claiming it
 * (and noting the slot as touched) if the batch has not written it yet.
 */
static LqSlotStaged *
lq_staged(int slotno)
{
	LqSlotStaged *st = lq_shmem_staged(slotno);

	if (st->batch != lq_batch)
	{
		MemoryContext old = MemoryContextSwitchTo(lq_outbox_cxt);

		memset(st, 0, sizeof(LqSlotStaged));
		st->batch = lq_batch;
		lq_slots_touched = lappend_int(lq_slots_touched, slotno);
		MemoryContextSwitchTo(old);
	}
	return st;
}

/*
 * lq_outbox_answered: does the batch answer (or acknowledge, or free) the
 * slot already?  Then the slot is not handled again in this batch.
 */
bool
lq_outbox_answered(int slotno)
{
	LqSlotStaged *st = lq_shmem_staged(slotno);

	return st->batch == lq_batch && st->kind != LQ_STAGED_NONE;
}

static void
lq_stage_kind(int slotno, uint64 reqid, LqStagedKind kind,
			  const LqResult *res)
{
	LqSlotStaged *st = lq_staged(slotno);

	st->kind = kind;
	st->reqid = reqid;
	if (res != NULL)
		st->res = *res;
}

void
lq_outbox_reply(int slotno, uint64 reqid, const LqResult *res)
{
	lq_stage_kind(slotno, reqid, LQ_STAGED_RESULT, res);
}

void
lq_outbox_ack(int slotno, uint64 reqid)
{
	lq_stage_kind(slotno, reqid, LQ_STAGED_ACK, NULL);
}

void
lq_outbox_free(int slotno, uint64 reqid)
{
	lq_stage_kind(slotno, reqid, LQ_STAGED_FREE, NULL);
}

/*
 * lq_outbox_queued shows (ts) or hides (0) a waiting lockq_get's queue
 * position in its slot, from publication: lockq_waiters reads backend
 * waiters from there, and a restarted lock server rebuilds them from there.
 */
void
lq_outbox_queued(int slotno, int64 ts)
{
	LqSlotStaged *st = lq_staged(slotno);

	st->queued_set = true;
	st->queued_ts = ts;
}

/*
 * lq_outbox_quick_taken: how many of the slot's quick releases this batch
 * has applied so far (they leave the slot's queue when it is published).
 */
int
lq_outbox_quick_taken(int slotno)
{
	LqSlotStaged *st = lq_shmem_staged(slotno);

	return st->batch == lq_batch ? st->quick_done : 0;
}

void
lq_outbox_quick_done(int slotno)
{
	lq_staged(slotno)->quick_done++;
}

static void
lq_stage_grant(LqGrantOp op, const LqSessionGrant *g)
{
	MemoryContext old = MemoryContextSwitchTo(lq_outbox_cxt);
	int64	   *token = palloc(sizeof(int64));

	lq_session_stage(op, g, lq_batch);
	*token = g->token;
	lq_tokens_touched = lappend(lq_tokens_touched, token);
	MemoryContextSwitchTo(old);
}

/*
 * Changes to the session-bound grants go out with the answers: a grant is
 * seen before its holder is told its token.
 */
void
lq_outbox_grant_put(const LqSessionGrant *g)
{
	lq_stage_grant(LQ_GRANT_OP_PUT, g);
}

void
lq_outbox_grant_ended(int64 token, int64 expires)
{
	LqSessionGrant g;

	memset(&g, 0, sizeof(g));
	g.token = token;
	g.expires = expires;
	lq_stage_grant(LQ_GRANT_OP_ENDED, &g);
}

void
lq_outbox_grant_delete(int64 token)
{
	LqSessionGrant g;

	memset(&g, 0, sizeof(g));
	g.token = token;
	lq_stage_grant(LQ_GRANT_OP_DELETE, &g);
}

/*
 * Changes to the table of leased grants that sessions may release by
 * themselves (lockq_leases.c) go out with the answers too: a grant is in
 * it before its holder learns its token, and leaves it only once its end
 * is committed.
 */
static LqLeaseOp *
lq_stage_lease(bool put, const char *lock_id, int64 token)
{
	MemoryContext old = MemoryContextSwitchTo(lq_outbox_cxt);
	LqLeaseOp  *op = palloc0(sizeof(LqLeaseOp));

	op->put = put;
	op->lock_id = pstrdup(lock_id);
	op->token = token;
	lq_lease_ops = lappend(lq_lease_ops, op);
	MemoryContextSwitchTo(old);
	return op;
}

void
lq_outbox_lease_put(const char *lock_id, int64 token, const char *owner,
					Oid role, int64 acquired, int64 ttl, int64 expires,
					bool rowless)
{
	LqLeaseOp  *op = lq_stage_lease(true, lock_id, token);

	op->owner = MemoryContextStrdup(lq_outbox_cxt, owner);
	op->role = role;
	op->acquired = acquired;
	op->ttl = ttl;
	op->expires = expires;
	op->rowless = rowless;
}

void
lq_outbox_lease_drop(const char *lock_id, int64 token)
{
	(void) lq_stage_lease(false, lock_id, token);
}

/*
 * lq_outbox_lock_dropped: the rules let go of this lock (nothing held,
 * queued or delayed).  Backends may grant it by themselves again once the
 * batch is published (lq_fastpath_forget); a batch that fails is undone by
 * the rebuild of the state, which counts the locks anew.
 */
void
lq_outbox_lock_dropped(const char *lock_id)
{
	lq_locks_dropped = lappend(lq_locks_dropped,
							   MemoryContextStrdup(lq_outbox_cxt, lock_id));
}

/*
 * lq_outbox_notify queues a NOTIFY for the commit.  The payload is
 * "<event> <token> <length of lock id> <lock id> <owner>", so that a client
 * can split it even when the lock id contains spaces.
 */
void
lq_outbox_notify(const char *channel, const char *event, int64 token,
				 const char *lock_id, const char *owner)
{
	MemoryContext old = MemoryContextSwitchTo(lq_outbox_cxt);
	LqNotice   *n = palloc(sizeof(LqNotice));

	n->channel = pstrdup(channel);
	n->payload = psprintf("%s " INT64_FORMAT " %d %s %s", event, token,
						  (int) strlen(lock_id), lock_id, owner);
	lq_notices = lappend(lq_notices, n);
	MemoryContextSwitchTo(old);
}

/*
 * lq_outbox_emit_notices hands the batch's NOTIFYs to async.c, before the
 * commit.  A client that never reads its notifications can fill the
 * cluster's NOTIFY queue, and a full queue would fail our commit and stop
 * all grants; so above a limit we send none (client-side waiters still
 * learn of grants from their heartbeats).
 */
void
lq_outbox_emit_notices(void)
{
	ListCell   *lc;
	double		usage;

	if (lq_notices == NIL)
		return;
	usage = DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
											   (Datum) 0));
	if (usage > LQ_NOTIFY_QUEUE_LIMIT)
	{
		ereport(WARNING,
				(errmsg("lockq is not sending notifications: the NOTIFY queue is %.0f%% full",
						usage * 100),
				 errhint("A session that listens but does not read notifications holds the queue back.")));
		return;
	}
	foreach(lc, lq_notices)
	{
		LqNotice   *n = lfirst(lc);

		Async_Notify(n->channel, n->payload);
	}
}

/*
 * lq_outbox_seal marks the batch complete, right before its commit: from
 * here, whether it is published depends only on whether its transaction
 * commits.  A batch without a transaction id wrote nothing durable; if its
 * lock server dies before publishing it, applying its requests again is
 * exact.
 */
void
lq_outbox_seal(void)
{
	lq_my_server->sealed_xid = GetTopTransactionIdIfAny();
	pg_write_barrier();
	lq_my_server->sealed_batch = lq_batch;
}

/*
 * lq_publish_slot makes a slot's staged outcome visible and returns the
 * latch to set (-1: none) and, in *recheck, whether the slot must be
 * looked at again (an answer to a backend that gave up meanwhile, so that
 * a grant it will never use is released).  Must not fail.
 */
static int
lq_publish_slot(int slotno, LqSlotStaged *st, bool *recheck, bool *freed)
{
	LqSlot	   *slot = &lq_slots[slotno];
	int			procno = -1;

	SpinLockAcquire(&slot->mutex);
	if (st->queued_set)
		slot->queued_ts = st->queued_ts;
	lq_shmem_slot_drop_quick(slot, lq_my_server_no, st->quick_done);
	switch (st->kind)
	{
		case LQ_STAGED_NONE:
			break;
		case LQ_STAGED_RESULT:
			if (slot->reqid == st->reqid && slot->state == LQ_SLOT_ACTIVE)
			{
				slot->res = st->res;
				slot->state = LQ_SLOT_DONE;
				*recheck = slot->cancel_requested || slot->session_ended;
				procno = slot->pgprocno;
			}
			break;
		case LQ_STAGED_ACK:
			if (slot->reqid == st->reqid && slot->state != LQ_SLOT_FREE)
			{
				slot->state = LQ_SLOT_IDLE;
				slot->cancel_requested = false;
				procno = slot->pgprocno;
			}
			break;
		case LQ_STAGED_FREE:
			*freed = lq_shmem_slot_end_done(slot, lq_my_server_no);
			break;
	}
	SpinLockRelease(&slot->mutex);
	memset(st, 0, sizeof(LqSlotStaged));
	return procno;
}

/*
 * lq_publish_slots publishes the staged outcome of every slot that has one
 * of batch (all: whatever batch), waking the backends (through
 * lq_shmem_wakes_hand_on); returns the slots to look at again.
 */
static List *
lq_publish_slots(List *slots, uint64 batch)
{
	List	   *recheck = NIL;
	ListCell   *lc;
	int			wake[LQ_WAKE_MAX + 1];
	int			nwake = 0;

	foreach(lc, slots)
	{
		int			slotno = lfirst_int(lc);
		LqSlotStaged *st = lq_shmem_staged(slotno);
		bool		again = false;
		bool		freed = false;
		int			procno;

		if (st->batch != batch)
			continue;
		procno = lq_publish_slot(slotno, st, &again, &freed);
		if (procno >= 0)
		{
			if (nwake == lengthof(wake))
			{
				lq_shmem_wakes_hand_on(wake, nwake);
				nwake = 0;
			}
			wake[nwake++] = procno;
		}
		if (freed)
			ConditionVariableBroadcast(&lq_slots[slotno].freed);
		if (again)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			recheck = lappend_int(recheck, slotno);
			MemoryContextSwitchTo(old);
		}
	}
	lq_shmem_wakes_hand_on(wake, nwake);
	return recheck;
}

/*
 * lq_outbox_publish makes the batch's outcome visible after its commit:
 * grants first, then the answers, so that a grant is there before its
 * holder learns its token.  Returns the slots to look at again (in
 * TopMemoryContext).  Must not fail.
 */
List *
lq_outbox_publish(void)
{
	ListCell   *lc;
	List	   *recheck;

	foreach(lc, lq_tokens_touched)
		lq_session_publish(*(int64 *) lfirst(lc));
	foreach(lc, lq_lease_ops)
	{
		LqLeaseOp  *op = lfirst(lc);

		if (op->put)
			lq_leases_put(op->lock_id, op->token, op->owner, op->role,
						  op->acquired, op->ttl, op->expires, op->rowless);
		else
			lq_leases_drop(op->lock_id, op->token);
	}
	foreach(lc, lq_locks_dropped)
		lq_fastpath_forget(lfirst(lc));
	recheck = lq_publish_slots(lq_slots_touched, lq_batch);
	lq_my_server->sealed_batch = 0;
	lq_outbox_forget();
	return recheck;
}

/*
 * lq_outbox_discard settles a batch that failed: one whose transaction
 * committed (it failed after its commit) is published, since its rows are
 * there; otherwise everything it staged is forgotten.  Returns the slots to
 * look at again (in TopMemoryContext).
 */
List *
lq_outbox_discard(void)
{
	ListCell   *lc;

	if (lq_my_server->sealed_batch == lq_batch &&
		TransactionIdIsValid(lq_my_server->sealed_xid) &&
		TransactionIdDidCommit(lq_my_server->sealed_xid))
		return lq_outbox_publish();

	foreach(lc, lq_slots_touched)
		memset(lq_shmem_staged(lfirst_int(lc)), 0, sizeof(LqSlotStaged));
	lq_session_resolve(0);
	lq_my_server->sealed_batch = 0;
	lq_outbox_forget();
	return NIL;
}

/*
 * lq_outbox_resolve settles what a previous lock server left staged when
 * it exited: the sealed batch is published if its transaction committed,
 * and everything else is discarded.  Runs in a transaction (to read the
 * commit status), before the state is loaded; the caller has waited for
 * synchronous standbys, so publishing it answers nothing that is not as
 * durable as configured.
 */
void
lq_outbox_resolve(void)
{
	uint64		sealed = lq_my_server->sealed_batch;
	TransactionId xid = lq_my_server->sealed_xid;
	bool		committed;
	List	   *all = NIL;
	List	   *recheck;
	int			i;

	committed = sealed != 0 && TransactionIdIsValid(xid) &&
		TransactionIdDidCommit(xid);
	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlotStaged *st = lq_shmem_staged(i);

		if (st->batch == 0)
			continue;
		if (committed && st->batch == sealed)
			all = lappend_int(all, i);
		else
			memset(st, 0, sizeof(LqSlotStaged));
	}
	lq_session_resolve(committed ? sealed : 0);
	recheck = lq_publish_slots(all, sealed);
	list_free(all);
	list_free(recheck);			/* the load looks at every slot anyway */
	if (committed)
		ereport(LOG,
				(errmsg("lockq lock server published the last batch of its predecessor, which had committed")));
	lq_my_server->sealed_batch = 0;
}

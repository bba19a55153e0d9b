/*-------------------------------------------------------------------------
 *
 * lockq_recovery.c
 *		Rebuilding the lock server's lock table when it starts, and after a
 *		batch that failed: from the tables, shared memory and the request
 *		slots, in an order that makes every source agree.
 *
 * The lock table (lockq_rules_int.h) is the truth while a lock server
 * runs, but it lives in that process's memory.  Everything it holds is
 * also recorded somewhere that outlives the process, and lq_recovery_load
 * puts it back together from there:
 *	- the delays after a crash (lockq.unsettled, read by lockq_durability.c):
 *	  first, so that no lock met later is granted before its delay ends;
 *	- grants that outlive their session (lockq.owners);
 *	- the table of quick releases (lockq_leases.c): grants kept without a
 *	  row, and grants their holders released by themselves;
 *	- session-bound grants (lockq_session.c): filed under their session if
 *	  it still runs, else ended;
 *	- client-side waiters (lockq.queue), with a fresh heartbeat window;
 *	- backends waiting in lockq_get (their request slots), at their place.
 * Then the grants of sessions that are gone and the releases already
 * acknowledged are ended, and a free lock that has waiters is handed on.
 * The caller (lockq_worker.c) runs this in a transaction, with the fast
 * path closed, and applies the requests in flight afterwards.
 *
 * The tables have no unique keys on what the rules keep unique (one grant
 * per lock, one waiter per lock and owner): loading checks that
 * (lq_rules_hold, lq_load_waiter), and raises ERRCODE_DATA_CORRUPTED when
 * they do not hold.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_recovery.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "utils/errcodes.h"

#include "lockq_durability.h"
#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_recovery.h"
#include "lockq_rules_int.h"
#include "lockq_session.h"
#include "lockq_shmem.h"
#include "lockq_tables.h"

/*
 * lq_find_live_slot finds the slot of a session that is still running,
 * by pid and start time; -1 if that session is gone.
 */
static int
lq_find_live_slot(int pid, int64 session_start)
{
	int			i;

	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		bool		match;

		SpinLockAcquire(&slot->mutex);
		match = slot->state != LQ_SLOT_FREE && !slot->session_ended &&
			slot->pid == pid && slot->session_start == session_start;
		SpinLockRelease(&slot->mutex);
		if (match)
			return i;
	}
	return -1;
}

typedef struct LqLoad
{
	int64		now;
	List	   *stale;			/* grants of sessions that are gone */
	List	   *released;		/* grants released by their session, with
								 * no quick release left to apply */
} LqLoad;

/*
 * lq_quick_queued: does some slot still have a quick release of this token
 * queued for the worker?
 */
static bool
lq_quick_queued(int64 token)
{
	int			i;
	bool		queued = false;

	for (i = 0; i < lq_shared->nslots && !queued; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		int			k;

		SpinLockAcquire(&slot->mutex);
		for (k = 0; k < slot->nquick; k++)
		{
			if (slot->quick_tokens[k] == token)
				queued = true;
		}
		SpinLockRelease(&slot->mutex);
	}
	return queued;
}

/*
 * lq_load_token_seen raises the token counter to a token a grant that
 * outlives its session holds, so that no later grant gets it again.
 */
static void
lq_load_token_seen(int64 token)
{
	if ((uint64) token > pg_atomic_read_u64(&lq_shared->token_high))
		pg_atomic_write_u64(&lq_shared->token_high, (uint64) token);
}

/*
 * lq_load_quick_leases takes back from the table of quick releases what
 * only it records (lq_leases_reload): the grants kept without a row, and
 * the entries with fences, which stay while their grant is held.  It
 * empties the rest (batches put them back as they renew grants or make
 * new ones), and ends the grants sessions released already: their
 * releases were acknowledged (load->released).  A released grant that had
 * no row and has no fence is not taken back at all: its lock may already
 * be held by the grant that the batch which ended it made, a session-bound
 * grant loaded next (lq_load_session_grants); a free lock's waiters get it
 * from lq_rules_hand_on_orphans.
 */
static void
lq_load_quick_leases(LqLoad *load)
{
	int			n;
	int			i;
	LqLeaseGrant *g = lq_leases_reload(&n);

	for (i = 0; i < n; i++)
	{
		LqLock	   *lock;

		if (g[i].rowless && !g[i].kept)
			lq_load_token_seen(g[i].token);
		lock = lq_rules_lock_lookup(g[i].lock_id, g[i].rowless && g[i].kept);
		if (lock == NULL)
			continue;
		if (g[i].rowless && g[i].kept && !lock->held)
		{
			/* its entry is its only record: the grant comes from there */
			LqHolder	h = {.owner = g[i].owner, .channel = NULL,
				.token = g[i].token, .ttl = g[i].ttl, .acquired = g[i].acquired,
			.expires = g[i].expires, .role = g[i].role, .session_slot = -1};

			lq_rules_hold(lock, &h);
			lock->rowless = true;
			lock->was_rowless = true;
			ItemPointerSetInvalid(&lock->row_tid);
			lq_load_token_seen(g[i].token);
			lq_rules_timer_arm(&lock->lease, lock->expires);
			lq_rules_timer_arm(&lock->row, lock->acquired +
						 (int64) lockq_grant_row_delay * 1000);
		}
		if (!lock->held || lock->ending || lock->in_shmem ||
			lock->token != g[i].token)
			continue;
		if (g[i].rowless && !lock->rowless)
		{
			/* its row was committed, the batch not published */
			lq_rules_put_lease_entry(lock, lock->expires, false);
		}
		if (g[i].kept)
			lq_rules_mark_quick(lock);
		/* fences may be counted there: the entry stays while it is held */
		lock->was_rowless |= g[i].kept;
		if (g[i].released)
			load->released = lappend(load->released, lock);
	}
	pfree(g);
}

/*
 * lq_load_owner puts back the grant of one lockq.owners row (called by
 * lq_tables_load_owners for each), with its lease timer, and raises the
 * highest token shown to it.  A second row of one lock raises
 * ERRCODE_DATA_CORRUPTED (lq_rules_hold).
 */
static void
lq_load_owner(const LqOwnerRow *row, void *arg)
{
	LqLock	   *lock;

	if (!lq_shmem_mine(row->lock_id))
		return;					/* another lock server's */
	lock = lq_rules_lock_lookup(row->lock_id, true);
	{
		LqHolder	h = {.owner = row->owner, .channel = row->channel,
		.token = row->token, .ttl = row->ttl, .acquired = row->acquired,
		.expires = row->expires, .role = row->role, .session_slot = -1};

		lq_rules_hold(lock, &h);
	}
	lock->row_tid = row->tid;
	lq_load_token_seen(row->token);
	lq_rules_timer_arm(&lock->lease, lock->expires);
}

/*
 * lq_load_session_grants puts back the session-bound grants from shared
 * memory: those of live sessions under their session, those of sessions
 * that are gone to be ended (load->stale), those whose end was published
 * but held up by fenced transactions on the deferred list, and those their
 * session released itself, whose quick release is no longer queued, to be
 * ended (load->released).
 */
static void
lq_load_session_grants(LqLoad *load)
{
	LqSessionGrant *grants;
	int			n;
	int			i;

	lq_session_undo_ending();
	grants = lq_session_copy(true, &n);
	for (i = 0; i < n; i++)
	{
		LqSessionGrant *g = &grants[i];
		LqLock	   *lock = lq_rules_lock_lookup(g->lock_id, true);
		char		owner[LQ_MAX_OWNER_LEN + 1];
		int			slotno;

		lq_session_format_owner(owner, sizeof(owner), g->pid,
								g->session_start);
		{
			LqHolder	h = {.owner = owner, .token = g->token, .ttl = g->ttl,
			.acquired = g->acquired, .expires = g->expires, .role = g->role,
			.in_shmem = true, .session_slot = -1, .session_pid = g->pid,
			.session_start = g->session_start};

			lq_rules_hold(lock, &h);
		}

		if (g->end == LQ_GRANT_ENDED)
		{
			lock->ending = true;
			lq_rules_defer_handoff(lock, false);
			continue;
		}
		lq_rules_timer_arm(&lock->lease, lock->expires);
		slotno = lq_find_live_slot(g->pid, g->session_start);
		if (slotno >= 0)
			lq_rules_file_under_session(lock, slotno);
		if (g->released && !lq_quick_queued(g->token))
			load->released = lappend(load->released, lock);
		else if (slotno < 0)
			load->stale = lappend(load->stale, lock);
	}
	pfree(grants);
}

/*
 * lq_load_waiter puts back the client-side waiter of one lockq.queue row
 * (called by lq_tables_load_queue in queue order) at its place, with a
 * fresh heartbeat window.  Raises ERRCODE_DATA_CORRUPTED for a second row
 * of one lock and owner.
 */
static void
lq_load_waiter(const LqQueueRow *row, void *arg)
{
	LqLoad	   *load = arg;
	LqLock	   *lock;
	LqWaiter   *w;

	if (!lq_shmem_mine(row->lock_id))
		return;					/* another lock server's */
	/* the tables have no unique key on (lock_id, owner): check it here */
	if (lq_rules_waiter_lookup(row->lock_id, row->owner) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("lockq.queue holds owner \"%s\" twice for lock \"%s\"",
						row->owner, row->lock_id)));
	lock = lq_rules_lock_lookup(row->lock_id, true);
	{
		LqWaiterSpec spec = {.owner = row->owner, .client = true,
		.ts = row->ts, .ttl = row->ttl, .heartbeat = row->heartbeat,
		.role = row->role, .channel = row->channel, .slotno = -1};

		w = lq_rules_waiter_create(lock, &spec);
	}
	w->row_tid = row->tid;
	/* a fresh heartbeat window: the client could not reach us */
	lq_rules_timer_arm(&w->timer, load->now + w->heartbeat);
}

/*
 * lq_load_backend_waiters puts back the lockq_get calls that were queued
 * when the worker restarted: slots still waiting, with their queue ts,
 * whose requests went to this lock server.
 */
static void
lq_load_backend_waiters(void)
{
	int			i;

	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		LqRequest	req;
		bool		waiting;
		uint64		reqid;
		int			pid;
		int64		start;
		int64		ts;

		SpinLockAcquire(&slot->mutex);
		if (slot->server != lq_my_server_no)
		{
			/* another lock server's request */
			SpinLockRelease(&slot->mutex);
			continue;
		}
		waiting = slot->queued_ts > 0 && slot->req.op == LQ_OP_GET &&
			(slot->state == LQ_SLOT_ACTIVE || slot->state == LQ_SLOT_PENDING) &&
			!slot->cancel_requested && !slot->session_ended;
		if (waiting)
		{
			slot->state = LQ_SLOT_ACTIVE;
			req = slot->req;
			reqid = slot->reqid;
			pid = slot->pid;
			start = slot->session_start;
			ts = slot->queued_ts;
		}
		else
			slot->queued_ts = 0;
		SpinLockRelease(&slot->mutex);

		if (waiting)
		{
			LqLock	   *lock = lq_rules_lock_lookup(req.lock_id, true);
			LqWaiter   *w;

			LqWaiterSpec spec = {.owner = req.owner, .ts = ts,
			.ttl = req.ttl_us, .role = req.role, .slotno = i, .reqid = reqid,
			.session_pid = pid, .session_start = start};

			w = lq_rules_waiter_create(lock, &spec);
			if (req.deadline > 0)
				lq_rules_timer_arm(&w->timer, req.deadline);
		}
	}
}

/*
 * lq_recovery_load rebuilds the lock table from the tables (after worker start
 * or an error).  Grants and waiters of sessions that are gone are dropped,
 * and a free lock with waiters (possible only if rows were lost) is handed
 * on.  Until all_until (the wide marker's delay) no lock is granted, named
 * in delays or not.  Requests that were in flight are re-applied by the
 * caller.
 */
void
lq_recovery_load(int64 now, List *delays, int64 all_until)
{
	LqLoad		load;
	ListCell   *lc;

	lq_rules_reset();
	if (all_until <= now)
		all_until = 0;
	foreach(lc, delays)
	{
		LqDelay    *d = lfirst(lc);
		int64		until = Max(Max(d->until, d->hold_until), all_until);

		if (until <= now)
			continue;
		lq_rules_delay(lq_rules_lock_lookup(d->lock_id, true),
					   Max(d->until, all_until), d->hold_token, d->hold_until,
					   until);
	}
	lq_rules_delay_all(all_until);
	load.now = now;
	load.stale = NIL;
	load.released = NIL;
	lq_tables_load_owners(lq_load_owner, &load);
	LQ_FAULT("recover-after-owners");
	lq_load_quick_leases(&load);
	lq_load_session_grants(&load);
	lq_tables_load_queue(lq_load_waiter, &load);
	LQ_FAULT("recover-after-queue");
	lq_load_backend_waiters();

	foreach(lc, load.stale)
		lq_rules_end_grant((LqLock *) lfirst(lc), LQ_END_SESSION, now);
	foreach(lc, load.released)
		lq_rules_end_grant((LqLock *) lfirst(lc), LQ_END_RELEASE, now);

	lq_rules_hand_on_orphans(now);

	list_free(load.stale);
	list_free(load.released);
}

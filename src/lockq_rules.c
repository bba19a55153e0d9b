/*-------------------------------------------------------------------------
 *
 * lockq_rules.c
 *		The lock server's in-memory lock table and the rules of lockq: FIFO
 *		queues, hand-off to the head, leases, re-entrancy, and what cancels
 *		and session ends leave behind (nothing).
 *
 * Everything here runs in the worker, inside its batch transaction, one
 * request at a time in arrival order.  The in-memory state (its structs
 * are in lockq_rules_int.h) is the truth while the worker runs; every
 * change is also recorded where lockq_recovery.c can rebuild this state
 * from after a restart or an error: grants that outlive their session and
 * client-side waiters in the tables, in the same transaction
 * (lockq_tables.c); session-bound grants in shared memory (lockq_session.c)
 * and waiting backends in their request slots, both when the batch is
 * published.  Answers to backends and NOTIFYs are collected
 * by the worker and only released after the commit.
 *
 * Invariants:
 *	- A lock that is not held has an empty queue (grants hand off at once),
 *	  except while its grant is "ending": released or expired, but its row
 *	  still locked by a fenced transaction (see lq_finish_end).
 *	- A lock with no holder and no waiters is not in the table.
 *	- Queue order is arrival order; ts comes from the clock, which is
 *	  strictly increasing, so (ts, owner) order equals arrival order.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_rules.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "nodes/pg_list.h"
#include "utils/errcodes.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lockq_clock.h"
#include "lockq_durability.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_outbox.h"
#include "lockq_roles.h"
#include "lockq_rules.h"
#include "lockq_rules_int.h"
#include "lockq_session.h"
#include "lockq_shmem.h"
#include "lockq_tables.h"

/*
 * A deadline in a timer heap: a lease end, or a waiter's deadline.  There
 * are two kinds of heap: lq_wait_timers holds the timeouts of waiting
 * lockq_get calls, whose firing touches nothing but memory, so that they
 * fire even while lockq's tables cannot be written (see lockq_worker.c);
 * the rest are in one heap per role (LqTimerGroup: the grant's or the
 * waiter's role; delays after a restart in a group of their own), and
 * lq_timers orders the groups by their earliest deadline.  A batch fires
 * the due timers of the groups in turns, a slice each, and at most
 * LQ_TIMERS_PER_BATCH (lq_rules_run_timers), so that one role's wave of
 * expiries delays another role's hand-offs by a slice, not by the wave.
 */
#define LQ_TIMER_SLICE			32
#define LQ_TIMERS_PER_BATCH		256

/* The armed timers of one role (see above). */
struct LqTimerGroup
{
	Oid			role;			/* hash key, must be first */
	pairingheap *heap;
	pairingheap_node ph;		/* in lq_timers, while queued */
	int64		first_at;		/* its earliest deadline, while queued */
	bool		queued;			/* in lq_timers (not while it has no timer,
								 * nor during its turn in
								 * lq_rules_run_timers) */
	bool		in_turn;
};

/* Per request slot: what a session has in the lock table. */
typedef struct LqSession
{
	dlist_head	held;			/* its session-bound grants */
	LqWaiter   *waiter;			/* its lockq_get in progress, if queued */
	LqWaiter   *awaiting;		/* the client waiter its lockq_await in
								 * progress is for */
} LqSession;


static MemoryContext lq_rules_cxt = NULL;
static HTAB *lq_locks = NULL;
static HTAB *lq_waiters = NULL;
static pairingheap *lq_timers = NULL;	/* of LqTimerGroup */
static HTAB *lq_timer_groups = NULL;	/* LqTimerGroup by role */
static pairingheap *lq_wait_timers = NULL;
static bool lq_memory_only = false;		/* lq_rules_run_wait_timeouts:
										 * only memory may be touched */
static dlist_head lq_deferred;
static LqSession *lq_sessions = NULL;
static int64 lq_nwaiters = 0;
static int64 lq_nholders = 0;
static int	lq_nquick = 0;		/* grants in lockq_leases.c, or about to be */
static int	lq_ndelayed = 0;	/* locks delayed after a restart */
static int64 lq_delay_max = 0;	/* the latest of their ends */
static int64 lq_all_until = 0;	/* after a crash with every lock unsettled
								 * (the wide marker): no lock is granted
								 * before */

static void lq_delay_new_lock(LqLock *lock);

/*
 * Queue lengths, for the longest queue (lockq_stats.longest_queue) in
 * constant time: lq_qlen_locks[n] is how many locks have n waiters (n >= 1),
 * and lq_longest the largest n any lock has.  A queue grows or shrinks one
 * waiter at a time, so when the only longest queue shrinks, the longest is
 * one shorter.
 */
static int *lq_qlen_locks = NULL;
static int	lq_qlen_size = 0;	/* entries allocated */
static int	lq_longest = 0;

static void lq_slot_set_queued(int slotno, int64 ts);
static void lq_finish_end(LqLock *lock, int64 now);
static void lq_grant_next(LqLock *lock, int64 now);
static void lq_await_attach(LqWaiter *w, int slotno, uint64 reqid,
							const LqRequest *req, int64 now);

/*
 * Timers.  pairingheap is a max-heap, so the comparator is reversed to put
 * the earliest deadline first.
 */
static int
lq_timer_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const LqTimer *ta = pairingheap_const_container(LqTimer, ph, a);
	const LqTimer *tb = pairingheap_const_container(LqTimer, ph, b);

	if (ta->at < tb->at)
		return 1;
	if (ta->at > tb->at)
		return -1;
	return 0;
}

/* lq_timers orders the groups by their earliest deadline, reversed too. */
static int
lq_group_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const LqTimerGroup *ga = pairingheap_const_container(LqTimerGroup, ph, a);
	const LqTimerGroup *gb = pairingheap_const_container(LqTimerGroup, ph, b);

	if (ga->first_at < gb->first_at)
		return 1;
	if (ga->first_at > gb->first_at)
		return -1;
	return 0;
}

/* The earliest armed timer of a heap, or NULL. */
static LqTimer *
lq_timer_first(pairingheap *heap)
{
	if (pairingheap_is_empty(heap))
		return NULL;
	return pairingheap_container(LqTimer, ph, pairingheap_first(heap));
}

/*
 * lq_group_requeue puts a group back in lq_timers at its earliest deadline
 * (out of it while it has no timer, or while it has its turn).
 */
static void
lq_group_requeue(LqTimerGroup *g)
{
	LqTimer    *first;

	if (g->queued)
	{
		pairingheap_remove(lq_timers, &g->ph);
		g->queued = false;
	}
	first = lq_timer_first(g->heap);
	if (first == NULL || g->in_turn)
		return;
	g->first_at = first->at;
	pairingheap_add(lq_timers, &g->ph);
	g->queued = true;
}

/* lq_timer_group returns the group of role, made on first use. */
static LqTimerGroup *
lq_timer_group(Oid role)
{
	bool		found;
	LqTimerGroup *g = hash_search(lq_timer_groups, &role, HASH_ENTER, &found);

	if (!found)
	{
		MemoryContext old = MemoryContextSwitchTo(lq_rules_cxt);

		g->heap = pairingheap_allocate(lq_timer_cmp, NULL);
		g->queued = false;
		g->in_turn = false;
		MemoryContextSwitchTo(old);
	}
	return g;
}

static void lq_timer_role_of(const LqTimer *t, Oid *role);

static void
lq_timer_disarm(LqTimer *t)
{
	if (!t->armed)
		return;
	t->armed = false;
	if (t->memory_only)
	{
		pairingheap_remove(lq_wait_timers, &t->ph);
		return;
	}
	pairingheap_remove(t->group->heap, &t->ph);
	/* the group's earliest deadline may have been this one */
	if (t->group->queued && t->at <= t->group->first_at)
		lq_group_requeue(t->group);
}

void
lq_rules_timer_arm(LqTimer *t, int64 at)
{
	Oid			role;
	LqTimerGroup *g;

	lq_timer_disarm(t);
	t->at = at;
	t->armed = true;
	if (t->memory_only)
	{
		pairingheap_add(lq_wait_timers, &t->ph);
		return;
	}
	lq_timer_role_of(t, &role);
	g = lq_timer_group(role);
	t->group = g;
	pairingheap_add(g->heap, &t->ph);
	if (!g->queued || at < g->first_at)
		lq_group_requeue(g);
}

/* The earliest armed timer of the per-role groups, or NULL. */
static LqTimer *
lq_timer_first_of_groups(void)
{
	LqTimerGroup *g;

	if (pairingheap_is_empty(lq_timers))
		return NULL;
	g = pairingheap_container(LqTimerGroup, ph, pairingheap_first(lq_timers));
	return lq_timer_first(g->heap);
}

/*
 * lq_rules_reset forgets everything (the tables stay as they are).
 */
void
lq_rules_reset(void)
{
	HASHCTL		ctl;
	int			i;
	MemoryContext old;

	MemoryContextReset(lq_rules_cxt);
	lq_shmem_hint_reset();
	lq_roles_attach();
	lq_roles_forget_mine();
	old = MemoryContextSwitchTo(lq_rules_cxt);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = LQ_MAX_ID_LEN + 1;
	ctl.entrysize = sizeof(LqLock);
	ctl.hcxt = lq_rules_cxt;
	lq_locks = hash_create("lockq locks", 1024, &ctl,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(LqWaiterKey);
	ctl.entrysize = sizeof(LqWaiter);
	ctl.hcxt = lq_rules_cxt;
	lq_waiters = hash_create("lockq waiters", 1024, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	lq_timers = pairingheap_allocate(lq_group_cmp, NULL);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LqTimerGroup);
	ctl.hcxt = lq_rules_cxt;
	lq_timer_groups = hash_create("lockq timer groups", 64, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	lq_wait_timers = pairingheap_allocate(lq_timer_cmp, NULL);
	dlist_init(&lq_deferred);
	lq_sessions = palloc(sizeof(LqSession) * lq_shared->nslots);
	for (i = 0; i < lq_shared->nslots; i++)
	{
		dlist_init(&lq_sessions[i].held);
		lq_sessions[i].waiter = NULL;
		lq_sessions[i].awaiting = NULL;
	}
	lq_nwaiters = 0;
	lq_nholders = 0;
	lq_nquick = 0;
	lq_ndelayed = 0;
	lq_delay_max = 0;
	lq_all_until = 0;
	lq_qlen_locks = NULL;		/* went with the context */
	lq_qlen_size = 0;
	lq_longest = 0;
	MemoryContextSwitchTo(old);
}

/*
 * lq_rules_init creates the state's memory context.  Worker start only.
 */
void
lq_rules_init(void)
{
	lq_rules_cxt = AllocSetContextCreate(TopMemoryContext, "lockq state",
										 ALLOCSET_DEFAULT_SIZES);
	lq_rules_reset();
}

/*
 * lq_queue_length_changed records that a lock's queue went from from to to
 * waiters (one more or one fewer), for the longest queue and its high-water
 * mark.
 */
static void
lq_queue_length_changed(int from, int to)
{
	if (to >= lq_qlen_size)
	{
		int			size = Max(64, lq_qlen_size * 2);

		while (size <= to)
			size *= 2;
		if (lq_qlen_locks == NULL)
			lq_qlen_locks = MemoryContextAllocZero(lq_rules_cxt,
												   size * sizeof(int));
		else
		{
			lq_qlen_locks = repalloc(lq_qlen_locks, size * sizeof(int));
			memset(lq_qlen_locks + lq_qlen_size, 0,
				   (size - lq_qlen_size) * sizeof(int));
		}
		lq_qlen_size = size;
	}
	if (from > 0)
		lq_qlen_locks[from]--;
	if (to > 0)
		lq_qlen_locks[to]++;
	if (to > lq_longest)
	{
		lq_longest = to;
		lq_shmem_stat_queue_length((uint64) to);
	}
	else if (from == lq_longest && lq_qlen_locks[from] == 0)
		lq_longest = to;
}

static char *
lq_strdup(const char *s)
{
	return (s == NULL || s[0] == '\0') ? NULL : MemoryContextStrdup(lq_rules_cxt, s);
}

static void
lq_strfree(char **s)
{
	if (*s != NULL)
		pfree(*s);
	*s = NULL;
}

/*
 * lq_lock_new enters a lock the rules have nothing of: free, nobody
 * queued (lq_rules_lock_lookup).
 */
static LqLock *
lq_lock_new(const char *lock_id)
{
	bool		found;
	LqLock	   *lock;

	lock = hash_search(lq_locks, lock_id, HASH_ENTER, &found);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("lock \"%s\" was granted by a backend while the lock server had it",
						lock_id)));
	{
		lock->held = false;
		lock->ending = false;
		lock->in_deferred = false;
		lock->in_shmem = false;
		lock->owner = NULL;
		lock->channel = NULL;
		lock->token = 0;
		lock->session_slot = -1;
		lock->pickup_heartbeat = 0;
		lock->lease.armed = false;
		lock->lease.kind = LQ_TIMER_LEASE;
		lock->lease.memory_only = false;
		lock->row.armed = false;
		lock->row.kind = LQ_TIMER_ROW;
		lock->row.memory_only = false;
		lock->delay_until = 0;
		lock->lost_until = 0;
		lock->hold_token = 0;
		lock->hold_until = 0;
		lock->delay.armed = false;
		lock->delay.kind = LQ_TIMER_DELAY;
		lock->delay.memory_only = false;
		dlist_init(&lock->queue);
		lock->nwaiters = 0;
		lock->durable_changes = 0;
		if (lq_all_until > 0)
			lq_delay_new_lock(lock);
	}
	return lock;
}

/*
 * lq_rules_file_under_session files the session-bound grant of lock under
 * the live session in slot slotno, so that it ends with that session.
 */
void
lq_rules_file_under_session(LqLock *lock, int slotno)
{
	lock->session_slot = slotno;
	dlist_push_tail(&lq_sessions[slotno].held, &lock->session_node);
}

/*
 * lq_adopt_fast_grant makes the grant that a backend made by itself
 * (lockq_fastpath.c, taken out of its table by the caller) the holder of
 * lock, as if the rules had made it: in its session's list, with its lease
 * timer (which fires at once if the lease ran out meanwhile).  Its entry in
 * lockq_session.c is already published.
 */
static void
lq_adopt_fast_grant(LqLock *lock, const LqFastGrant *fast)
{
	LqSessionGrant g;
	char		owner[LQ_MAX_OWNER_LEN + 1];

	if (!lq_session_get(fast->token, &g))
		elog(ERROR, "lockq: the grant of lock \"%s\" with token " INT64_FORMAT " made by a backend is gone",
			 fast->lock_id, fast->token);
	lq_session_format_owner(owner, sizeof(owner), g.pid, g.session_start);
	{
		LqHolder	h = {.owner = owner, .token = g.token, .ttl = g.ttl,
			.acquired = g.acquired, .expires = g.expires, .role = g.role,
			.in_shmem = true, .session_slot = fast->slotno,
		.session_pid = g.pid, .session_start = g.session_start};

		lq_rules_hold(lock, &h);
	}
	lq_rules_timer_arm(&lock->lease, lock->expires);
	lq_rules_file_under_session(lock, fast->slotno);
}

/*
 * lq_adopt_fast_of_slot adopts every grant the session in slot slotno made
 * by itself, so that the caller can end all of its grants (its session
 * ended, or released them all).
 */
static void
lq_adopt_fast_of_slot(int slotno)
{
	List	   *fast = lq_fastpath_adopt_slot(slotno);
	ListCell   *lc;

	foreach(lc, fast)
	{
		LqFastGrant *f = lfirst(lc);

		lq_adopt_fast_grant(lq_lock_new(f->lock_id), f);
	}
	list_free_deep(fast);
}

/*
 * lq_rules_lock_lookup finds lock_id in the rules' state.  A lock they have
 * nothing of may have been granted by a backend by itself: that grant is
 * adopted first (lq_fastpath_adopt), so that whatever the caller does next
 * meets it.  With create, a lock not found is entered (free).
 */
LqLock *
lq_rules_lock_lookup(const char *lock_id, bool create)
{
	LqLock	   *lock = hash_search(lq_locks, lock_id, HASH_FIND, NULL);
	LqFastGrant fast;

	if (lock != NULL)
		return lock;
	if (lq_fastpath_adopt(lock_id, create, &fast))
	{
		lock = lq_lock_new(lock_id);
		lq_adopt_fast_grant(lock, &fast);
		return lock;
	}
	return create ? lq_lock_new(lock_id) : NULL;
}

/*
 * lq_delay_new_lock delays a lock the rules meet for the first time while
 * every lock is delayed after a crash (lq_all_until), as the locks named
 * in lockq.unsettled are delayed when they are loaded.
 */
static void
lq_delay_new_lock(LqLock *lock)
{
	if (lq_all_until <= lq_clock_peek())
	{
		lq_all_until = 0;
		return;
	}
	lq_rules_delay(lock, lq_all_until, 0, 0, lq_all_until);
}

/*
 * lq_rules_delay delays lock after a restart: nothing is granted before
 * until; leases that may have been lost end at lost_until; the grant with
 * hold_token, which survived, may be counted on until hold_until.
 */
void
lq_rules_delay(LqLock *lock, int64 lost_until, int64 hold_token,
			   int64 hold_until, int64 until)
{
	lock->lost_until = lost_until;
	lock->hold_token = hold_token;
	lock->hold_until = hold_until;
	lock->delay_until = until;
	lq_rules_timer_arm(&lock->delay, until);
	lq_ndelayed++;
	lq_delay_max = Max(lq_delay_max, until);
}

/*
 * lq_rules_delay_all: until all_until (the wide marker's delay after a
 * crash) no lock is granted, also one the rules meet for the first time.
 */
void
lq_rules_delay_all(int64 all_until)
{
	lq_all_until = all_until;
}

/*
 * lq_lock_is_new: is this change (a lease or an early end shown) one of the
 * first two of the lock since the rules met it, its first grant and the
 * end of that?  Only such changes may rely on the wide marker (see
 * lockq_durability.c) and count towards lockq.max_unsettled_rate: a lock that
 * keeps changing hands gets a marker of its own, which one flush every
 * 2 s keeps covering it.
 */
static bool
lq_lock_is_new(LqLock *lock)
{
	return lock->durable_changes++ < 2;
}

/*
 * lq_lock_maybe_drop removes a lock that has neither holder nor waiters.
 * The pointer is invalid afterwards.
 */
static void
lq_lock_maybe_drop(LqLock *lock)
{
	if (lock != NULL && !lock->held && lock->nwaiters == 0 &&
		!lock->delay.armed)
	{
		Assert(!lock->lease.armed && !lock->row.armed && !lock->in_deferred);
		lq_outbox_lock_dropped(lock->lock_id);
		hash_search(lq_locks, lock->lock_id, HASH_REMOVE, NULL);
	}
}

static void
lq_waiter_key(LqWaiterKey *key, const char *lock_id, const char *owner)
{
	memset(key, 0, sizeof(LqWaiterKey));
	strlcpy(key->lock_id, lock_id, sizeof(key->lock_id));
	strlcpy(key->owner, owner, sizeof(key->owner));
}

LqWaiter *
lq_rules_waiter_lookup(const char *lock_id, const char *owner)
{
	LqWaiterKey key;

	lq_waiter_key(&key, lock_id, owner);
	return hash_search(lq_waiters, &key, HASH_FIND, NULL);
}

/*
 * lq_released_by_holder: has the session released this session-bound grant
 * itself, ahead of the worker (a quick release in the arrival ring)?  Then
 * it neither expires nor can be force-released: it is no longer held.
 */
static bool
lq_released_by_holder(LqLock *lock)
{
	return lock->in_shmem && lq_session_is_released(lock->token);
}

static bool
lq_holder_is(LqLock *lock, const char *owner)
{
	return lock != NULL && lock->held && !lock->ending &&
		strcmp(lock->owner, owner) == 0;
}

static void
lq_slot_identity(int slotno, int *pid, int64 *start)
{
	LqSlot	   *slot = &lq_slots[slotno];

	SpinLockAcquire(&slot->mutex);
	*pid = slot->pid;
	*start = slot->session_start;
	SpinLockRelease(&slot->mutex);
}

static void
lq_reply(int slotno, uint64 reqid, LqStatus status, int64 token, bool fresh)
{
	LqResult	res;

	memset(&res, 0, sizeof(res));
	res.status = status;
	res.token = token;
	res.fresh_grant = fresh;
	lq_outbox_reply(slotno, reqid, &res);
}

/*
 * lq_reply_fail answers a request with an error (see LqError) and the
 * number its message names (arg, 0 if none); the backend raises it.
 * Nothing is changed.
 */
static void
lq_reply_fail(int slotno, uint64 reqid, LqError error, int64 arg)
{
	LqResult	res;

	lq_shmem_result_error(&res, error, arg);
	lq_outbox_reply(slotno, reqid, &res);
}

/*
 * lq_may_act: may this request act for an owner whose grant or wait role
 * made?  The same role may, and so may an administrator (lq_call_is_admin) and
 * a session for its own session-bound owner, whatever role it has switched
 * to since: that owner name cannot be given by anyone else.
 */
static bool
lq_may_act(const LqRequest *req, Oid role)
{
	return req->session_owner || req->admin || req->role == role;
}

/*
 * lq_reply_forbidden answers a request that named an owner of another role
 * (LQ_ERR_OTHER_ROLE); nothing is changed.
 */
static void
lq_reply_forbidden(int slotno, uint64 reqid)
{
	lq_reply_fail(slotno, reqid, LQ_ERR_OTHER_ROLE, 0);
}

/*
 * lq_room_for_session_grant: is there room in shared memory for one more
 * session-bound grant?  If not, the request is answered with an error.
 */
static bool
lq_room_for_session_grant(int slotno, uint64 reqid)
{
	/* the room is shared by every lock server: one count (lockq_roles.c) */
	if (lq_roles_reserve(LQ_ROLES_ALL, LQ_ROLE_SESSION_LOCKS, lq_session_max()))
		return true;
	lq_reply_fail(slotno, reqid, LQ_ERR_NO_SESSION_ROOM,
				  lockq_session_locks_per_backend);
	return false;
}

/*
 * lq_owner_row describes the current grant of lock as a lockq.owners row.
 */
static void
lq_owner_row(const LqLock *lock, LqOwnerRow *row)
{
	row->lock_id = lock->lock_id;
	row->owner = lock->owner;
	row->token = lock->token;
	row->ttl = lock->ttl;
	row->acquired = lock->acquired;
	row->expires = lock->expires;
	row->role = lock->role;
	row->channel = lock->channel;
}

/*
 * lq_publish_session_grant records a session-bound grant (or its new lease)
 * in shared memory when the batch is published.
 */
static void
lq_publish_session_grant(const LqLock *lock)
{
	LqSessionGrant g;

	memset(&g, 0, sizeof(g));
	g.token = lock->token;
	strlcpy(g.lock_id, lock->lock_id, sizeof(g.lock_id));
	g.pid = lock->session_pid;
	g.session_start = lock->session_start;
	g.role = lock->role;
	g.ttl = lock->ttl;
	g.acquired = lock->acquired;
	g.expires = lock->expires;
	g.end = LQ_GRANT_CURRENT;
	lq_outbox_grant_put(&g);
}

/*
 * lq_rules_hold makes h the holder of lock (which nobody holds) and counts
 * it: for a new grant and for one loaded after a restart.  The caller arms
 * the lease timer (or defers the hand-off) and files a session-bound grant
 * under its session.  A lock that is held raises ERRCODE_DATA_CORRUPTED: a
 * second holder is never right (the tables have no unique key on lock_id,
 * and a grant a backend made by itself may meet one), so the batch fails
 * and the state is rebuilt instead.
 */
void
lq_rules_hold(LqLock *lock, const LqHolder *h)
{
	if (lock->held)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("lock \"%s\" has two grants (tokens %lld and %lld)",
						lock->lock_id, (long long) lock->token,
						(long long) h->token)));
	lock->held = true;
	lock->ending = false;
	lock->in_shmem = h->in_shmem;
	lock->quick = false;
	lock->rowless = false;
	lock->was_rowless = false;
	lock->owner = lq_strdup(h->owner);
	lock->channel = lq_strdup(h->channel);
	lock->token = h->token;
	lock->ttl = h->ttl;
	lock->acquired = h->acquired;
	lock->expires = h->expires;
	lock->role = h->role;
	lock->pickup_heartbeat = 0;
	lock->session_slot = h->in_shmem ? h->session_slot : -1;
	lock->session_pid = h->in_shmem ? h->session_pid : 0;
	lock->session_start = h->in_shmem ? h->session_start : 0;
	lq_nholders++;
	lq_shmem_hint_held(lock->lock_id, lock->owner);
	if (h->in_shmem)
	{
		lq_roles_count(LQ_ROLES_ALL, LQ_ROLE_SESSION_LOCKS, 1);
		lq_roles_count(h->role, LQ_ROLE_SESSION_LOCKS, 1);
	}
	else
		lq_roles_count(h->role, LQ_ROLE_OWNER_LOCKS, 1);
}

/*
 * lq_rules_put_lease_entry stages lock's grant in the table of quick releases
 * (lockq_leases.c), seen when the batch is published: with a lease end of
 * expires (0: closed to releases) and marked rowless or not.
 */
void
lq_rules_put_lease_entry(const LqLock *lock, int64 expires, bool rowless)
{
	lq_outbox_lease_put(lock->lock_id, lock->token, lock->owner, lock->role,
						lock->acquired, lock->ttl, expires, rowless);
}

/*
 * lq_rules_mark_quick counts the grant of lock as offered to lockq_leases.c
 * (lq_nquick), once.
 */
void
lq_rules_mark_quick(LqLock *lock)
{
	if (!lock->quick)
		lq_nquick++;
	lock->quick = true;
}

/*
 * lq_offer_quick_release lets the holder of a leased grant that this batch
 * made or renewed release it without waiting for the lock server, when
 * lockq_durability.c says its end may be shown before its flush
 * (lq_durability_end_covered); otherwise it takes that away.  Seen when the
 * batch is published (lockq_leases.c).  The entry of a grant that had no
 * row stays all the same, closed to releases (a lease end of 0 there):
 * transactions fenced on it then are counted there, and its end waits for
 * them (lq_finish_end).
 */
static void
lq_offer_quick_release(LqLock *lock, int64 now)
{
	if ((lock->quick || lq_nquick < lq_leases_capacity()) &&
		lq_durability_end_covered(lock->lock_id, lock->ttl, now))
	{
		lq_rules_mark_quick(lock);
		lq_rules_put_lease_entry(lock, lock->expires, lock->rowless);
	}
	else if (lock->quick && lock->was_rowless)
	{
		Assert(!lock->rowless);
		lq_rules_put_lease_entry(lock, 0, false);
	}
	else if (lock->quick)
	{
		Assert(!lock->rowless);
		lq_outbox_lease_drop(lock->lock_id, lock->token);
		lock->quick = false;
		lq_nquick--;
	}
}

/*
 * lq_give_row writes the lockq.owners row of a grant kept without one: it
 * has been held for lockq.grant_row_delay, the marker that made that safe is
 * about to settle, a renewal went beyond what it covers, or the lock
 * server stops cleanly.  Its entry in
 * lockq_leases.c says so when the batch is published (before that,
 * lockq_holds still fences it there, and the lock server's end still reads
 * those fences).
 */
static void
lq_give_row(LqLock *lock)
{
	LqOwnerRow	row;

	if (!lock->held || !lock->rowless || lock->ending)
		return;
	lq_timer_disarm(&lock->row);
	lq_owner_row(lock, &row);
	lq_tables_owner_insert(&row, &lock->row_tid);
	lock->rowless = false;
	lq_rules_put_lease_entry(lock, lock->expires, false);
}

/*
 * lq_rules_give_rows gives the grants of these locks (lock ids), or of every
 * lock without a row when all, their rows: see lq_give_row.  Lock server,
 * inside a batch.
 */
void
lq_rules_give_rows(List *lock_ids, bool all)
{
	ListCell   *lc;

	if (all)
	{
		HASH_SEQ_STATUS seq;
		LqLock	   *lock;

		hash_seq_init(&seq, lq_locks);
		while ((lock = hash_seq_search(&seq)) != NULL)
			lq_give_row(lock);
		return;
	}
	foreach(lc, lock_ids)
	{
		LqLock	   *lock = lq_rules_lock_lookup(lfirst(lc), false);

		if (lock != NULL)
			lq_give_row(lock);
	}
}

/*
 * lq_grant makes h's owner the holder of a free lock: a new token and a
 * lease of lease microseconds from now (h's token and times are set
 * here).  A grant that outlives its session gets a row in lockq.owners, and
 * lq_durability_lease_shown decides whether the batch must be flushed first.
 * A session-bound grant (h->in_shmem; the caller made sure there is room,
 * lq_room_for_session_grant) is filed under its session, to end with it, and
 * kept in shared memory only: it needs no row, no flush and no unsettled lock,
 * since a crash ends every session and its holder learns of that from its
 * broken connection, as with pg_advisory_lock.
 */
static int64
lq_grant(LqLock *lock, LqHolder *h, int64 lease)
{
	LqOwnerRow	row;

	h->acquired = lq_durability_tick();
	h->expires = h->acquired + lease;
	h->token = lq_durability_next_token();
	lq_rules_hold(lock, h);
	if (lock->in_shmem)
	{
		lq_publish_session_grant(lock);
		lq_rules_file_under_session(lock, lock->session_slot);
	}
	else
	{
		lq_durability_lease_shown(lock->lock_id, lock->expires, lease,
								  lock->acquired, lq_lock_is_new(lock));
		/* covered by a marker for its lease and its end: no row needed */
		lock->rowless = lockq_grant_row_delay > 0 &&
			lq_nquick < lq_leases_capacity() &&
			lq_durability_covers(lock->lock_id, lock->expires, lock->ttl,
								 lock->acquired);
		if (lock->rowless)
		{
			lock->was_rowless = true;
			ItemPointerSetInvalid(&lock->row_tid);
			lq_rules_timer_arm(&lock->row, lock->acquired +
						 (int64) lockq_grant_row_delay * 1000);
		}
		else
		{
			lq_owner_row(lock, &row);
			lq_tables_owner_insert(&row, &lock->row_tid);
		}
		lq_offer_quick_release(lock, lock->acquired);
	}
	lq_rules_timer_arm(&lock->lease, lock->expires);
	lq_shmem_stat_add(LQ_STAT_GRANTS, 1);
	return lock->token;
}

/*
 * lq_lift_hold: the holder of a grant that survived a restart with an
 * unknown downtime released or renewed it; its lock no longer waits for
 * what that holder may have counted on (see lockq_durability.c), only for
 * leases that may have been lost.  The delay timer is moved or disarmed;
 * the caller hands the lock on.
 */
static void
lq_lift_hold(LqLock *lock, int64 now)
{
	if (lock->hold_until == 0 || lock->hold_token != lock->token)
		return;
	lock->hold_until = 0;
	lock->hold_token = 0;
	lq_durability_hold_lifted(lock->lock_id);
	if (!lock->delay.armed)
		return;
	if (lock->lost_until > now)
	{
		lock->delay_until = lock->lost_until;
		lq_rules_timer_arm(&lock->delay, lock->lost_until);
		return;
	}
	lq_timer_disarm(&lock->delay);
	lock->delay_until = 0;
	lock->lost_until = 0;
	if (--lq_ndelayed == 0)
		lq_delay_max = 0;
}

/*
 * lq_own_ttl is the lease a renewal without a ttl of its own gives: the
 * grant's ttl, but never more than lockq.max_ttl as it is now (it may have
 * been lowered since the grant was made).
 */
static int64
lq_own_ttl(const LqLock *lock)
{
	return Min(lock->ttl, (int64) lockq_max_ttl * USECS_PER_SEC);
}

/*
 * lq_set_lease moves the current grant's lease end, and confirms a client
 * grant.  The holder of a grant outliving its session relies on the new
 * end: see lq_durability_lease_shown.
 */
static void
lq_set_lease(LqLock *lock, int64 expires)
{
	LqOwnerRow	row;

	Assert(lock->held && !lock->ending);
	lock->expires = expires;
	if (lock->in_shmem)
		lq_publish_session_grant(lock);
	else
	{
		int64		now = lq_clock_peek();

		if (!lock->rowless)
		{
			lq_owner_row(lock, &row);
			lq_tables_owner_update(&lock->row_tid, &row);
		}
		lq_durability_lease_shown(lock->lock_id, expires, expires - now, now,
								  lq_lock_is_new(lock));
		if (lock->rowless &&
			!lq_durability_covers(lock->lock_id, expires, lock->ttl, now))
			lq_give_row(lock);
		lq_offer_quick_release(lock, now);
		lq_lift_hold(lock, now);
	}
	lq_rules_timer_arm(&lock->lease, expires);
	lq_shmem_stat_add(LQ_STAT_RENEWALS, 1);
}

/*
 * lq_queue_insert_sorted puts a waiter at its place in (ts, owner) order:
 * the tail for a new waiter, an earlier place when the queue is rebuilt
 * from the table and the slots after a restart.
 */
static void
lq_queue_insert_sorted(LqLock *lock, LqWaiter *w)
{
	dlist_iter	iter;

	dlist_reverse_foreach(iter, &lock->queue)
	{
		LqWaiter   *o = dlist_container(LqWaiter, node, iter.cur);

		if (o->ts < w->ts ||
			(o->ts == w->ts && strcmp(o->key.owner, w->key.owner) < 0))
		{
			dlist_insert_after(&o->node, &w->node);
			return;
		}
	}
	dlist_push_head(&lock->queue, &w->node);
}

/*
 * lq_slot_set_queued shows (ts) or hides (0) a waiting lockq_get in its
 * slot: lockq_waiters reads backend waiters from there, and a restarted
 * worker rebuilds them from there.  They are not written to the table: they
 * end with their session, so a crash takes them anyway.
 */
static void
lq_slot_set_queued(int slotno, int64 ts)
{
	lq_outbox_queued(slotno, ts);
}

/*
 * lq_waiter_insert_row writes a client waiter's row in lockq.queue (and
 * notes where it is).
 */
static void
lq_waiter_insert_row(LqWaiter *w)
{
	LqQueueRow	row;

	row.lock_id = w->lock->lock_id;
	row.ts = w->ts;
	row.owner = w->key.owner;
	row.ttl = w->ttl;
	row.heartbeat = w->heartbeat;
	row.role = w->role;
	row.channel = w->channel;
	lq_tables_queue_insert(&row, &w->row_tid);
}

/*
 * lq_fresh_ts gives a new waiter its ts, at the tail of lock's queue: the
 * time its call was made (since, for a lockq_get: a lazy arrival, see
 * lq_submit, is read when the lock server next wakes, and its wait began
 * before), or else a fresh clock tick.  Never more than a tick of this
 * batch (so it is covered by the clock's durable ceiling), always after
 * the ts of the waiter at the tail (the queue stays in ts order).
 */
static int64
lq_fresh_ts(LqLock *lock, int64 since)
{
	int64		tick = lq_durability_tick();
	int64		tail = 0;
	int64		ts;

	if (!dlist_is_empty(&lock->queue))
		tail = dlist_tail_element(LqWaiter, node, &lock->queue)->ts;
	ts = (since > tail && since <= tick) ? since : tick;
	return Max(ts, tail + 1);
}

/*
 * lq_rules_waiter_create puts a waiter into a lock's queue, in ts order.  A new
 * one (spec->ts 0) gets a fresh ts, at the tail, and a client waiter a row
 * in lockq.queue; a loaded one keeps its ts (and row).  A backend waiter
 * is recorded in its slot and its session.
 */
LqWaiter *
lq_rules_waiter_create(LqLock *lock, const LqWaiterSpec *spec)
{
	LqWaiterKey key;
	LqWaiter   *w;
	bool		found;
	bool		fresh = spec->ts == 0;

	lq_waiter_key(&key, lock->lock_id, spec->owner);
	w = hash_search(lq_waiters, &key, HASH_ENTER, &found);
	Assert(!found);
	w->lock = lock;
	w->ts = fresh ? lq_fresh_ts(lock, spec->since) : spec->ts;
	w->client = spec->client;
	w->slot = spec->client ? -1 : spec->slotno;
	w->reqid = spec->reqid;
	w->session_pid = spec->client ? 0 : spec->session_pid;
	w->session_start = spec->client ? 0 : spec->session_start;
	w->session_owner = strncmp(spec->owner, LQ_SESSION_PREFIX,
							   strlen(LQ_SESSION_PREFIX)) == 0;
	w->ttl = spec->ttl;
	w->heartbeat = spec->heartbeat;
	w->role = spec->role;
	w->channel = lq_strdup(spec->channel);
	w->await_slot = -1;
	w->await_reqid = 0;
	w->timer.armed = false;
	w->timer.kind = LQ_TIMER_WAITER;
	w->timer.memory_only = !spec->client;
	lq_queue_insert_sorted(lock, w);
	lock->nwaiters++;
	lq_queue_length_changed(lock->nwaiters - 1, lock->nwaiters);
	lq_nwaiters++;
	lq_roles_count(LQ_ROLES_ALL, LQ_ROLE_WAITERS, 1);
	lq_roles_count(spec->role, LQ_ROLE_WAITERS, 1);

	if (fresh)
		lq_shmem_stat_add(LQ_STAT_ENQUEUES, 1);
	if (!spec->client)
	{
		lq_slot_set_queued(spec->slotno, w->ts);
		lq_sessions[spec->slotno].waiter = w;
	}
	else if (fresh)
		lq_waiter_insert_row(w);
	return w;
}

/*
 * lq_await_detach ends the link between client waiter w and the session
 * blocked in lockq_await for it, without answering that session (the
 * caller does, or the session gave up).  It does not touch the waiter's
 * timer: see lq_await_end.
 */
static void
lq_await_detach(LqWaiter *w)
{
	if (w->await_slot < 0)
		return;
	if (lq_sessions[w->await_slot].awaiting == w)
		lq_sessions[w->await_slot].awaiting = NULL;
	w->await_slot = -1;
	w->await_reqid = 0;
}

/*
 * lq_await_end ends a lockq_await on a waiter that stays queued: the
 * session is answered "still queued" (unless it gave up: answer false) and
 * the waiter's heartbeat window starts again, since the wait was a call
 * from its client.
 */
static void
lq_await_end(LqWaiter *w, bool answer, int64 now)
{
	int			slotno = w->await_slot;
	uint64		reqid = w->await_reqid;

	if (slotno < 0)
		return;
	lq_await_detach(w);
	lq_rules_timer_arm(&w->timer, now + w->heartbeat);
	if (answer)
		lq_reply(slotno, reqid, LQ_ST_QUEUED, 0, false);
}

/*
 * lq_waiter_remove takes a waiter out of its queue (and, with delete_row,
 * out of lockq.queue).  It does not hand the lock on: a lock with waiters is
 * held, so removing one never makes the lock grantable.
 */
static void
lq_waiter_remove(LqWaiter *w, bool delete_row)
{
	LqLock	   *lock = w->lock;

	dlist_delete(&w->node);
	lock->nwaiters--;
	lq_queue_length_changed(lock->nwaiters + 1, lock->nwaiters);
	lq_nwaiters--;
	lq_roles_count(LQ_ROLES_ALL, LQ_ROLE_WAITERS, -1);
	lq_roles_count(w->role, LQ_ROLE_WAITERS, -1);
	lq_timer_disarm(&w->timer);
	if (w->await_slot >= 0)
	{
		/* a grant detaches its lockq_await first: this is another end */
		lq_reply_fail(w->await_slot, w->await_reqid,
					  LQ_ERR_NO_LONGER_WAITING, 0);
		lq_await_detach(w);
	}
	if (!w->client && w->slot >= 0)
	{
		if (lq_sessions[w->slot].waiter == w)
			lq_sessions[w->slot].waiter = NULL;
		lq_slot_set_queued(w->slot, 0);
	}
	else if (delete_row)
		lq_tables_queue_delete(&w->row_tid);
	lq_strfree(&w->channel);
	hash_search(lq_waiters, &w->key, HASH_REMOVE, NULL);
}

/*
 * lq_log_lease_end logs, at lockq.log_lease_ends, a grant that ends
 * without its holder (how: "expired", "was released by force"), for
 * whoever is on call: its holder may still be working under a lock it no
 * longer has.  Never raises at the levels it takes.
 */
static void
lq_log_lease_end(const LqLock *lock, const char *how, int64 now)
{
	if (lockq_log_lease_ends == 0)
		return;
	if (lock->owner != NULL)
		ereport(lockq_log_lease_ends,
				(errmsg("lockq: the grant of lock \"%s\" to owner \"%s\" %s",
						lock->lock_id, lock->owner, how),
				 errdetail("Token %lld, held for %lld ms, lease of %lld ms.",
						   (long long) lock->token,
						   (long long) (Max(now - lock->acquired, 0) / 1000),
						   (long long) (lock->ttl / 1000))));
	else
		ereport(lockq_log_lease_ends,
				(errmsg("lockq: the grant of lock \"%s\" to a session %s",
						lock->lock_id, how),
				 errdetail("Token %lld, held for %lld ms.",
						   (long long) lock->token,
						   (long long) (Max(now - lock->acquired, 0) / 1000))));
}

/*
 * lq_rules_end_grant ends the current grant, for the given reason.  A holder that
 * can be told (a client-side waiter's channel) hears that it lost the lock
 * unless it gave it up itself.  Then the row is deleted and the lock handed
 * on, or, if a fenced transaction holds the row, both are deferred.  The
 * lock pointer may be invalid afterwards.
 */
void
lq_rules_end_grant(LqLock *lock, LqEndReason why, int64 now)
{
	Assert(lock->held && !lock->ending);

	/* no session may release it quickly from here on (lockq_leases.c) */
	/* its entry stays until lq_finish_end: its fences live there */
	lock->end_fences = 0;
	if (lock->quick &&
		lq_leases_begin_end(lock->lock_id, lock->token, &lock->end_fences) &&
		why == LQ_END_EXPIRE)
		why = LQ_END_RELEASE;	/* its session released it first */

	lq_timer_disarm(&lock->lease);
	lq_timer_disarm(&lock->row);
	if (lock->session_slot >= 0)
	{
		dlist_delete(&lock->session_node);
		lock->session_slot = -1;
	}
	if (lock->channel != NULL && (why == LQ_END_EXPIRE || why == LQ_END_FORCE))
		lq_outbox_notify(lock->channel, "lost", lock->token, lock->lock_id,
						 lock->owner);

	switch (why)
	{
		case LQ_END_RELEASE:
			lq_shmem_stat_add(LQ_STAT_RELEASES, 1);
			break;
		case LQ_END_EXPIRE:
			lq_shmem_stat_add(LQ_STAT_EXPIRIES, 1);
			lq_log_lease_end(lock, "expired", now);
			break;
		case LQ_END_SESSION:
			lq_shmem_stat_add(LQ_STAT_SESSION_RELEASES, 1);
			break;
		case LQ_END_FORCE:
			lq_shmem_stat_add(LQ_STAT_FORCED_RELEASES, 1);
			lq_log_lease_end(lock, "was released by force", now);
			break;
		case LQ_END_CANCEL:
			lq_shmem_stat_add(LQ_STAT_CANCELS, 1);
			break;
	}

	/* its life: to its lease end if that came first (an expiry), else now */
	lq_shmem_stat_add(LQ_STAT_HOLD_US,
					  (uint64) Max(Min(now, lock->expires) - lock->acquired,
								   0));

	lock->ending = true;
	if (why == LQ_END_RELEASE || why == LQ_END_CANCEL)
		lq_lift_hold(lock, now);
	if (lock->expires > now)
	{
		/*
		 * Cut the lease short in memory; the row is only rewritten if it
		 * has to stay (below), so that lockq_holds sees the end.  An end
		 * before the lease's is one a crash must not undo (see
		 * lockq_durability.c); an end by time needs nothing.
		 */
		lock->expires = now;
		if (!lock->in_shmem)
			lq_durability_end_shown(lock->lock_id, lock->ttl, now,
									lq_lock_is_new(lock));
	}
	lq_finish_end(lock, now);
}

/*
 * lq_rules_defer_handoff puts an ending grant whose hand-off a fenced transaction
 * holds back on the deferred list.  Its lease timer now counts
 * lockq.fence_timeout from the grant's end: when that runs out, the
 * fencing transactions are ended (lq_terminate_fencers).
 */
void
lq_rules_defer_handoff(LqLock *lock, bool count)
{
	dlist_push_tail(&lq_deferred, &lock->deferred_node);
	lock->in_deferred = true;
	lq_rules_timer_arm(&lock->lease,
					   lock->expires + (int64) lockq_fence_timeout * 1000);
	if (count)
		lq_shmem_stat_add(LQ_STAT_DEFERRED_HANDOFFS, 1);
}

/*
 * lq_terminate_fencers ends the transactions that still hold the hand-off of
 * an ended grant back, lockq.fence_timeout after the grant's end, by
 * terminating their sessions (as idle_in_transaction_session_timeout
 * would): a write fenced by them then never commits, and the lock passes
 * on when they are gone.  Checked again every second while any is left.
 */
static void
lq_terminate_fencers(LqLock *lock, int64 now)
{
	List	   *pids;
	ListCell   *lc;

	pids = lock->in_shmem || lock->rowless ?
		lq_shmem_slot_fencers(lock->token) :
		lq_tables_fencer_pids(&lock->row_tid);
	/* fenced in its entry before it had its row */
	if (lock->was_rowless && !lock->rowless)
		pids = list_concat_unique_int(pids, lq_shmem_slot_fencers(lock->token));
	foreach(lc, pids)
	{
		int			pid = lfirst_int(lc);

		ereport(LOG,
				(errmsg("lockq is terminating process %d: its transaction has held back the hand-off of lock \"%s\" for longer than lockq.fence_timeout",
						pid, lock->lock_id)));
		(void) kill(pid, SIGTERM);
	}
	list_free(pids);
	lq_rules_timer_arm(&lock->lease, now + USECS_PER_SEC);
}

/*
 * lq_finish_end completes an ending grant: deletes its row and hands the
 * lock to the head of the queue.  If a fenced transaction holds the row
 * (lockq_holds took KEY SHARE), the row stays, with its lease cut to the end
 * time so that lockq_holds answers false from now on, and the lock waits on
 * the deferred list; the worker retries when such a transaction ends.  A
 * session-bound grant is marked ended in shared memory instead, and waits
 * the same way while transactions are fenced on it (lockq_session.c).
 */
static void
lq_finish_end(LqLock *lock, int64 now)
{
	bool		session_bound = lock->in_shmem;

	if (lock->in_shmem)
	{
		uint32		fences;

		fences = lock->in_deferred ? lq_session_fences(lock->token) :
			lq_session_begin_end(lock->token);
		if (fences > 0)
		{
			if (!lock->in_deferred)
			{
				lq_outbox_grant_ended(lock->token, lock->expires);
				lq_rules_defer_handoff(lock, true);
			}
			return;
		}
		lq_outbox_grant_delete(lock->token);
		lq_roles_count(LQ_ROLES_ALL, LQ_ROLE_SESSION_LOCKS, -1);
		lock->in_shmem = false;
	}
	else
	{
		/*
		 * Fences in lockq_leases.c: taken while the grant had no row (it may
		 * have one by now), counted in its entry, read with the ending mark
		 * (lq_rules_end_grant) and again on each retry.  The entry stays until
		 * the grant is done with.
		 */
		uint32		fences = !lock->quick ? 0 : lock->in_deferred ?
			lq_leases_fences(lock->lock_id, lock->token) : lock->end_fences;
		bool		locked = fences > 0;

		if (!locked && !lock->rowless)
			locked = lq_tables_owner_end(&lock->row_tid) == LQ_END_LOCKED;
		if (locked)
		{
			if (!lock->in_deferred)
			{
				if (!lock->rowless)
				{
					LqOwnerRow	row;

					lq_owner_row(lock, &row);
					lq_tables_owner_update(&lock->row_tid, &row);
				}
				lq_rules_defer_handoff(lock, true);
			}
			return;
		}
		if (lock->quick)
		{
			lq_outbox_lease_drop(lock->lock_id, lock->token);
			lock->quick = false;
			lq_nquick--;
		}
		lock->rowless = false;
	}

	if (lock->in_deferred)
	{
		dlist_delete(&lock->deferred_node);
		lock->in_deferred = false;
		lq_timer_disarm(&lock->lease);
	}
	lock->held = false;
	lock->ending = false;
	lq_shmem_hint_free(lock->lock_id);
	lq_strfree(&lock->owner);
	lq_strfree(&lock->channel);
	lq_nholders--;
	lq_roles_count(lock->role, session_bound ? LQ_ROLE_SESSION_LOCKS :
				   LQ_ROLE_OWNER_LOCKS, -1);
	lq_grant_next(lock, now);
}

/*
 * lq_grant_next hands a free lock to the head of its queue: a waiting
 * backend gets its answer after the commit; a client-side waiter gets a
 * NOTIFY and a first lease no longer than its heartbeat interval, which
 * becomes the full ttl when it picks the grant up (a dead client-side waiter
 * at the head thus blocks the queue for one heartbeat interval at most).
 * A lock left with nobody is dropped; the pointer may be invalid afterwards.
 */
static void
lq_grant_next(LqLock *lock, int64 now)
{
	LqWaiter   *w;
	char		owner[LQ_MAX_OWNER_LEN + 1];
	int64		token;
	int64		queued;

	Assert(!lock->held);
	if (now < lock->delay_until && lock->nwaiters > 0)
		return;					/* the delay's timer hands it on later */

	/* a session-bound waiter for whom there is no room gets the error */
	for (;;)
	{
		if (lock->nwaiters == 0)
		{
			lq_lock_maybe_drop(lock);
			return;
		}
		w = dlist_head_element(LqWaiter, node, &lock->queue);
		if (w->client || !w->session_owner ||
			lq_room_for_session_grant(w->slot, w->reqid))
			break;
		lq_waiter_remove(w, true);
	}
	strlcpy(owner, w->key.owner, sizeof(owner));
	queued = w->ts;

	if (w->client)
	{
		char	   *channel = w->channel ? pstrdup(w->channel) : NULL;
		int64		ttl = w->ttl;
		int			await_slot = w->await_slot;
		uint64		await_reqid = w->await_reqid;
		Oid			role = w->role;

		/*
		 * A session blocked in lockq_await for the waiter takes the grant
		 * up at once, so it gets the full lease, as lockq_get does, and
		 * its answer instead of a NOTIFY; else the lease is the heartbeat
		 * interval until the client picks the grant up.
		 */
		int64		lease = await_slot >= 0 ? ttl : Min(ttl, w->heartbeat);

		LqHolder	h = {.owner = owner, .channel = channel, .ttl = ttl,
		.role = role, .session_slot = -1};

		int64		heartbeat = w->heartbeat;

		lq_await_detach(w);
		lq_waiter_remove(w, true);
		token = lq_grant(lock, &h, lease);
		lock->pickup_heartbeat = await_slot >= 0 ? heartbeat : 0;
		if (await_slot >= 0)
			lq_reply(await_slot, await_reqid, LQ_ST_GRANTED, token, false);
		else if (channel != NULL)
			lq_outbox_notify(channel, "grant", token, lock->lock_id, owner);
	}
	else
	{
		int			slotno = w->slot;
		uint64		reqid = w->reqid;
		bool		bound = w->session_owner;
		int			pid = w->session_pid;
		int64		start = w->session_start;
		int64		ttl = w->ttl;
		Oid			role = w->role;

		LqHolder	h = {.owner = owner, .ttl = ttl, .role = role,
		.in_shmem = bound, .session_slot = slotno, .session_pid = pid,
		.session_start = start};

		lq_waiter_remove(w, true);
		token = lq_grant(lock, &h, ttl);
		lq_reply(slotno, reqid, LQ_ST_GRANTED, token, true);
	}
	lq_shmem_stat_add(LQ_STAT_HANDOFFS, 1);
	lq_shmem_stat_add(LQ_STAT_WAIT_US,
					  (uint64) Max(lock->acquired - queued, 0));
}

/*
 * lq_lock_is_free: can lock be granted at once?  Not while anyone holds or
 * waits for it, nor while it is delayed after a restart.
 */
static bool
lq_lock_is_free(LqLock *lock, int64 now)
{
	if (lock == NULL)
		return now >= lq_all_until;
	return !lock->held && lock->nwaiters == 0 && now >= lock->delay_until;
}

/*
 * lq_grant_now grants a free lock to the requester of slotno, bound to its
 * session when the owner is the session.
 */
static int64
lq_grant_now(LqLock *lock, int slotno, const LqRequest *req, int64 lease)
{
	LqHolder	h = {.owner = req->owner, .channel = req->channel,
	.ttl = req->ttl_us, .role = req->role, .in_shmem = req->session_owner,
	.session_slot = slotno};

	if (req->session_owner)
		lq_slot_identity(slotno, &h.session_pid, &h.session_start);
	return lq_grant(lock, &h, lease);
}

/*
 * lq_answer_holder answers a request by the lock's current holder (true),
 * or returns false if the requesting owner does not hold it.  The holder
 * gets its token back with the lease extended to at least now + ttl (0:
 * the grant's own ttl), if the request comes from the holder's role
 * (lq_may_act; owner names are not secrets), else insufficient_privilege.
 */
static bool
lq_answer_holder(int slotno, uint64 reqid, const LqRequest *req,
				 LqLock *lock, int64 now, int64 ttl)
{
	if (!lq_holder_is(lock, req->owner))
		return false;
	if (!lq_may_act(req, lock->role))
		lq_reply_forbidden(slotno, reqid);
	else
	{
		lq_set_lease(lock, Max(lock->expires, now + (ttl > 0 ? ttl : lq_own_ttl(lock))));
		lq_reply(slotno, reqid, LQ_ST_GRANTED, lock->token, false);
	}
	return true;
}

typedef enum LqLimitKind
{
	LQ_LIMIT_GRANT,				/* a new grant, now */
	LQ_LIMIT_WAIT				/* a new waiter */
} LqLimitKind;

/*
 * lq_refuse_over_limit answers a request that would add a grant or a waiter
 * beyond a limit with an error (true), nothing changed: the memory the lock
 * server's state may use (lockq.max_server_memory), all waiters
 * (lockq.max_waiters), or the role's own limit (lockq.max_*_per_role, as
 * the requesting session sees it).  A role at its limit affects no other
 * role.  False: the request may add it, and holds what it will count
 * (lq_roles_reserve) until it does, or until the request ends.  A refusal
 * by the role's limit leaves all waiters' reservation held: the request's
 * end gives it back (lq_rules_apply, lq_roles_end_request).
 */
static bool
lq_refuse_over_limit(int slotno, uint64 reqid, const LqRequest *req,
					 LqLimitKind kind)
{
	LqRoleCount what;
	int			limit;
	LqError		error;

	if (MemoryContextMemAllocated(lq_rules_cxt, true) >
		(Size) lockq_max_server_memory * 1024 * 1024)
	{
		lq_reply_fail(slotno, reqid, LQ_ERR_SERVER_MEMORY, 0);
		return true;
	}
	if (kind == LQ_LIMIT_WAIT)
	{
		if (!lq_roles_reserve(LQ_ROLES_ALL, LQ_ROLE_WAITERS, lockq_max_waiters))
		{
			lq_reply_fail(slotno, reqid, LQ_ERR_TOO_MANY_WAITERS, 0);
			return true;
		}
		what = LQ_ROLE_WAITERS;
		limit = req->max_waiters;
		error = LQ_ERR_ROLE_WAITERS;
	}
	else if (req->session_owner)
	{
		what = LQ_ROLE_SESSION_LOCKS;
		limit = req->max_session_locks;
		error = LQ_ERR_ROLE_SESSION_LOCKS;
	}
	else
	{
		what = LQ_ROLE_OWNER_LOCKS;
		limit = req->max_owner_locks;
		error = LQ_ERR_ROLE_OWNER_LOCKS;
	}
	if (lq_roles_reserve(req->role, what, limit))
		return false;
	lq_reply_fail(slotno, reqid, error, limit);
	return true;
}

/*
 * lq_grant_or_refuse answers an acquisition that would otherwise queue
 * (lockq_get, lockq_enqueue): with a grant if the lock is free and nobody
 * waits, or with an error if there is no room (for a session-bound grant,
 * or for one more waiter).  False: the caller queues the request.
 */
static bool
lq_grant_or_refuse(int slotno, uint64 reqid, const LqRequest *req,
				   LqLock *lock, int64 now)
{
	if (lq_lock_is_free(lock, now))
	{
		int64		token;

		if ((req->session_owner && !lq_room_for_session_grant(slotno, reqid)) ||
			lq_refuse_over_limit(slotno, reqid, req, LQ_LIMIT_GRANT))
		{
			lq_lock_maybe_drop(lock);
			return true;
		}
		token = lq_grant_now(lock, slotno, req, req->ttl_us);
		lq_reply(slotno, reqid, LQ_ST_GRANTED, token, true);
		return true;
	}
	return lq_refuse_over_limit(slotno, reqid, req, LQ_LIMIT_WAIT);
}

/*
 * lq_apply_get: lockq_get.  The holder gets its token back with the lease
 * extended (if the request comes from the holder's role: owner names are
 * not secrets); anyone else gets the lock if it is free and nobody waits,
 * or joins the tail of the queue and is answered when granted or timed out.
 */
static void
lq_apply_get(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, true);
	LqWaiter   *w;
	int			pid;
	int64		start;

	if (lq_answer_holder(slotno, reqid, req, lock, now, req->ttl_us))
		return;
	w = lq_rules_waiter_lookup(req->lock_id, req->owner);
	if (w != NULL && !lq_may_act(req, w->role))
	{
		lq_reply_forbidden(slotno, reqid);
		lq_lock_maybe_drop(lock);
		return;
	}
	if (w != NULL)
	{
		lq_reply_fail(slotno, reqid, LQ_ERR_ALREADY_WAITING, 0);
		lq_lock_maybe_drop(lock);
		return;
	}
	if (lq_grant_or_refuse(slotno, reqid, req, lock, now))
		return;

	lq_slot_identity(slotno, &pid, &start);
	{
		LqWaiterSpec spec = {.owner = req->owner, .ttl = req->ttl_us,
		.role = req->role, .slotno = slotno, .reqid = reqid,
		.session_pid = pid, .session_start = start,
		.since = lq_slots[slotno].submitted};

		w = lq_rules_waiter_create(lock, &spec);
	}
	if (req->deadline > 0)
		lq_rules_timer_arm(&w->timer, req->deadline);
}

/*
 * lq_apply_try: lockq_try.  Never queues: token, or NOT_AVAILABLE when the
 * lock is held by another owner or anyone is queued (no barging).
 *
 * A lock the rules have nothing of is entered before it is granted, and
 * entering it adopts a grant a backend made by itself meanwhile (the first
 * lookup may miss one half made: lq_fastpath_adopt reads the table's count
 * without its lock).  Such a grant came first: the lock is not free then.
 */
static void
lq_apply_try(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);

	if (lq_answer_holder(slotno, reqid, req, lock, now, req->ttl_us))
		return;
	if (lq_lock_is_free(lock, now))
	{
		int64		token;

		if ((req->session_owner && !lq_room_for_session_grant(slotno, reqid)) ||
			lq_refuse_over_limit(slotno, reqid, req, LQ_LIMIT_GRANT))
			return;
		lock = lq_rules_lock_lookup(req->lock_id, true);
		if (lq_lock_is_free(lock, now))
		{
			token = lq_grant_now(lock, slotno, req, req->ttl_us);
			lq_reply(slotno, reqid, LQ_ST_GRANTED, token, true);
			return;
		}
	}
	lq_reply(slotno, reqid, LQ_ST_NOT_AVAILABLE, 0, false);
}

static bool
lq_token_matches(const LqRequest *req, const LqLock *lock)
{
	return !req->has_token || req->token == lock->token;
}

/*
 * lq_holder_request: is req the holder's own (its owner, with the right
 * token if one is given, from the holder's role or an administrator's)?
 * If not, the request is answered: insufficient_privilege when the holder
 * was named by another role, else false.  Nothing changes either way.
 */
static bool
lq_holder_request(int slotno, uint64 reqid, const LqRequest *req, LqLock *lock)
{
	if (!lq_holder_is(lock, req->owner) || !lq_token_matches(req, lock))
		lq_reply(slotno, reqid, LQ_ST_FALSE, 0, false);
	else if (!lq_may_act(req, lock->role))
		lq_reply_forbidden(slotno, reqid);
	else
		return true;
	return false;
}

/*
 * lq_apply_release: lockq_release ends the holder's grant (see
 * lq_holder_request) and hands the lock on.
 */
static void
lq_apply_release(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);

	if (!lq_holder_request(slotno, reqid, req, lock))
		return;
	lq_rules_end_grant(lock, LQ_END_RELEASE, now);
	lq_reply(slotno, reqid, LQ_ST_TRUE, 0, false);
}

/*
 * lq_apply_renew: lockq_renew sets the lease end of the holder's grant (see
 * lq_holder_request) to now + ttl (the grant's own ttl when none is given).
 */
static void
lq_apply_renew(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);

	if (!lq_holder_request(slotno, reqid, req, lock))
		return;
	lq_set_lease(lock, now + (req->has_ttl ? req->ttl_us : lq_own_ttl(lock)));
	lq_reply(slotno, reqid, LQ_ST_TRUE, 0, false);
}

/*
 * lq_refresh_waiter restarts a client-side waiter's heartbeat window (while
 * a lockq_await waits for it, that ends it: lq_await_end).  A new channel
 * is recorded (the client may have reconnected).
 */
static void
lq_refresh_waiter(LqWaiter *w, const LqRequest *req, int64 now)
{
	if (req->op == LQ_OP_ENQUEUE)
	{
		w->heartbeat = req->wait_ttl_us;
		if (strcmp(w->channel ? w->channel : "", req->channel) != 0)
		{
			lq_strfree(&w->channel);
			w->channel = lq_strdup(req->channel);
			/* rewrite the row: the channel must survive a restart */
			lq_tables_queue_delete(&w->row_tid);
			lq_waiter_insert_row(w);
		}
	}
	if (w->await_slot < 0)
		lq_rules_timer_arm(&w->timer, now + w->heartbeat);
}

/*
 * lq_apply_enqueue: lockq_enqueue queues a client-side waiter without
 * blocking anyone; calling it again while queued is a heartbeat.  With a
 * wait (req->deadline), the session then waits for the grant as
 * lockq_await does: one request where a client would make two.
 */
static void
lq_apply_enqueue(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, true);
	LqWaiter   *w;

	if (lq_answer_holder(slotno, reqid, req, lock, now, req->ttl_us))
		return;
	w = lq_rules_waiter_lookup(req->lock_id, req->owner);
	if (w != NULL && !lq_may_act(req, w->role))
	{
		lq_reply_forbidden(slotno, reqid);
		return;
	}
	if (w != NULL && !w->client)
	{
		lq_reply_fail(slotno, reqid, LQ_ERR_ALREADY_WAITING_IN_BACKEND, 0);
		return;
	}
	if (w != NULL)
		lq_refresh_waiter(w, req, now);
	else
	{
		LqWaiterSpec spec = {.owner = req->owner, .client = true,
		.ttl = req->ttl_us, .heartbeat = req->wait_ttl_us, .role = req->role,
		.channel = req->channel, .slotno = -1};

		if (lq_grant_or_refuse(slotno, reqid, req, lock, now))
			return;
		w = lq_rules_waiter_create(lock, &spec);
		lq_rules_timer_arm(&w->timer, now + w->heartbeat);
	}
	if (req->deadline > 0)
		lq_await_attach(w, slotno, reqid, req, now);	/* with a wait */
	else
		lq_reply(slotno, reqid, LQ_ST_QUEUED, 0, false);
}

/*
 * lq_client_waiter answers a call made for a client-side waiter
 * (lockq_heartbeat, lockq_await) by the lock's holder, or by anyone when
 * there is no such waiter or the role may not act for it, and returns
 * NULL; else it returns the waiter, for the caller to answer.
 */
static LqWaiter *
lq_client_waiter(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);
	LqWaiter   *w;

	if (lq_answer_holder(slotno, reqid, req, lock, now, 0))
		return NULL;
	w = lq_rules_waiter_lookup(req->lock_id, req->owner);
	if (w != NULL && !lq_may_act(req, w->role))
		lq_reply_forbidden(slotno, reqid);
	else if (w != NULL && w->client)
		return w;
	else if (w != NULL)
		lq_reply_fail(slotno, reqid, LQ_ERR_WAITING_IN_BACKEND, 0);
	else
		lq_reply_fail(slotno, reqid, LQ_ERR_NOT_WAITING, 0);
	return NULL;
}

/*
 * lq_apply_heartbeat: lockq_heartbeat.  For a holder it also confirms the
 * grant and restarts the full lease.  A lockq_await in progress for the
 * waiter goes on.
 */
static void
lq_apply_heartbeat(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqWaiter   *w = lq_client_waiter(slotno, reqid, req, now);

	if (w == NULL)
		return;
	lq_refresh_waiter(w, req, now);
	lq_reply(slotno, reqid, LQ_ST_QUEUED, 0, false);
}

/*
 * lq_apply_await: lockq_await, a client-side waiter's wait in a backend.
 * The holder gets its token (and its full lease, as from lockq_heartbeat).
 * A queued waiter keeps its place and this session waits for it: the grant
 * answers the session directly (no NOTIFY), with the full lease.  At the
 * await's deadline, at most one heartbeat interval away (a session may hang
 * with its client gone silent), the session is answered "still queued"
 * and the heartbeat window starts again.  A second lockq_await for the
 * same waiter takes over; the first is answered "still queued".
 */
static void
lq_apply_await(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqWaiter   *w = lq_client_waiter(slotno, reqid, req, now);

	if (w != NULL)
		lq_await_attach(w, slotno, reqid, req, now);
}

/*
 * lq_await_attach makes the session of slotno wait for client waiter w
 * until req->deadline, at most one heartbeat interval (lockq_await, or
 * lockq_enqueue with a wait), or answers "still queued" at once when that
 * is past.  A session already waiting for w is answered "still queued".
 */
static void
lq_await_attach(LqWaiter *w, int slotno, uint64 reqid, const LqRequest *req,
				int64 now)
{
	int64		until;

	lq_await_end(w, true, now);
	until = now + w->heartbeat;
	if (req->deadline > 0 && req->deadline < until)
		until = req->deadline;
	if (until <= now)
	{
		lq_rules_timer_arm(&w->timer, now + w->heartbeat);
		lq_reply(slotno, reqid, LQ_ST_QUEUED, 0, false);
		return;
	}
	w->await_slot = slotno;
	w->await_reqid = reqid;
	lq_sessions[slotno].awaiting = w;
	lq_rules_timer_arm(&w->timer, until);
}

/*
 * lq_apply_cancel: lockq_cancel withdraws a client-side waiter, and if the
 * grant won the race, releases it so that it passes on at once.
 */
static void
lq_apply_cancel(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);
	LqWaiter   *w = lq_rules_waiter_lookup(req->lock_id, req->owner);

	if ((w != NULL && !lq_may_act(req, w->role)) ||
		(w == NULL && lq_holder_is(lock, req->owner) &&
		 !lq_may_act(req, lock->role)))
		lq_reply_forbidden(slotno, reqid);
	else if (w != NULL && w->client)
	{
		LqLock	   *wl = w->lock;

		lq_waiter_remove(w, true);
		lq_shmem_stat_add(LQ_STAT_CANCELS, 1);
		lq_lock_maybe_drop(wl);
		lq_reply(slotno, reqid, LQ_ST_TRUE, 0, false);
	}
	else if (w == NULL && lq_holder_is(lock, req->owner))
	{
		lq_rules_end_grant(lock, LQ_END_CANCEL, now);
		lq_reply(slotno, reqid, LQ_ST_TRUE, 0, false);
	}
	else
		lq_reply(slotno, reqid, LQ_ST_FALSE, 0, false);
}

static void
lq_apply_force_release(int slotno, uint64 reqid, const LqRequest *req,
					   int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(req->lock_id, false);

	if (lock != NULL && lock->held && !lock->ending &&
		!lq_released_by_holder(lock))
	{
		lq_rules_end_grant(lock, LQ_END_FORCE, now);
		lq_reply(slotno, reqid, LQ_ST_TRUE, 0, false);
	}
	else
		lq_reply(slotno, reqid, LQ_ST_FALSE, 0, false);
}

/*
 * lq_apply_release_session: DISCARD ALL in a session that used lockq ends
 * all its session-bound grants, as it releases its advisory locks; the
 * answer's token is how many.  (The session cannot be waiting: it is
 * running DISCARD ALL.)
 */
static void
lq_apply_release_session(int slotno, uint64 reqid, int64 now)
{
	LqSession  *s = &lq_sessions[slotno];
	dlist_mutable_iter iter;
	int			pid;
	int64		start;
	int64		n = 0;

	lq_slot_identity(slotno, &pid, &start);
	lq_adopt_fast_of_slot(slotno);
	dlist_foreach_modify(iter, &s->held)
	{
		LqLock	   *lock = dlist_container(LqLock, session_node, iter.cur);

		if (lock->session_pid == pid && lock->session_start == start &&
			lock->held && !lock->ending)
		{
			lq_rules_end_grant(lock, LQ_END_SESSION, now);
			n++;
		}
	}
	lq_reply(slotno, reqid, LQ_ST_OK, n, false);
}

/*
 * lq_rules_quick_release applies a quick release (see lockq_release): the
 * session released its grant with this token already, and was told so.
 */
void
lq_rules_quick_release(const char *lock_id, int64 token, int64 now)
{
	LqLock	   *lock = lq_rules_lock_lookup(lock_id, false);

	if (lock != NULL && lock->held && !lock->ending && lock->token == token)
		lq_rules_end_grant(lock, LQ_END_RELEASE, now);
}

/*
 * lq_rules_apply applies one request.  now is the batch's clock reading;
 * values that others see (queue ts, acquisition time) are fresh ticks.
 */
void
lq_rules_apply(int slotno, uint64 reqid, const LqRequest *req, int64 now)
{
	lq_shmem_stat_add(LQ_STAT_REQUESTS, 1);
	if (req->op != LQ_OP_RELEASE_SESSION && req->op != LQ_OP_CLOCK &&
		req->op != LQ_OP_NONE)
		lq_rules_fire_due_for(req->lock_id, req->owner, now);

	switch (req->op)
	{
		case LQ_OP_GET:
			lq_apply_get(slotno, reqid, req, now);
			break;
		case LQ_OP_TRY:
			lq_apply_try(slotno, reqid, req, now);
			break;
		case LQ_OP_RELEASE:
			lq_apply_release(slotno, reqid, req, now);
			break;
		case LQ_OP_RENEW:
			lq_apply_renew(slotno, reqid, req, now);
			break;
		case LQ_OP_ENQUEUE:
			lq_apply_enqueue(slotno, reqid, req, now);
			break;
		case LQ_OP_HEARTBEAT:
			lq_apply_heartbeat(slotno, reqid, req, now);
			break;
		case LQ_OP_AWAIT:
			lq_apply_await(slotno, reqid, req, now);
			break;
		case LQ_OP_CANCEL:
			lq_apply_cancel(slotno, reqid, req, now);
			break;
		case LQ_OP_RELEASE_SESSION:
			lq_apply_release_session(slotno, reqid, now);
			break;
		case LQ_OP_FORCE_RELEASE:
			lq_apply_force_release(slotno, reqid, req, now);
			break;
		case LQ_OP_CLOCK:
			/* the worker extended the clock at the start of the batch */
			lq_reply(slotno, reqid, LQ_ST_OK, 0, false);
			break;
		case LQ_OP_NONE:
			lq_reply_fail(slotno, reqid, LQ_ERR_INVALID_REQUEST, 0);
			break;
	}
	lq_roles_end_request();
}

/*
 * lq_rules_is_waiting: is the slot's request reqid queued in a lock, or a
 * lockq_await waiting for a client-side waiter?
 */
bool
lq_rules_is_waiting(int slotno, uint64 reqid)
{
	LqWaiter   *w = lq_sessions[slotno].waiter;
	LqWaiter   *a = lq_sessions[slotno].awaiting;

	return (w != NULL && w->reqid == reqid) ||
		(a != NULL && a->await_reqid == reqid);
}

/*
 * lq_rules_cancel_wait removes the queued lockq_get of a slot whose backend
 * gave up (cancel, statement_timeout, exit).  A lockq_await given up
 * leaves its client-side waiter queued, with a new heartbeat window.
 */
void
lq_rules_cancel_wait(int slotno, uint64 reqid, int64 now)
{
	LqWaiter   *w = lq_sessions[slotno].waiter;
	LqWaiter   *a = lq_sessions[slotno].awaiting;
	LqLock	   *lock;

	if (a != NULL && a->await_reqid == reqid)
		lq_await_end(a, false, now);
	if (w == NULL || w->reqid != reqid)
		return;
	lock = w->lock;
	lq_waiter_remove(w, true);
	lq_shmem_stat_add(LQ_STAT_CANCELS, 1);
	lq_lock_maybe_drop(lock);
}

/*
 * lq_rules_unpicked_grant: a lockq_await (or an enqueue's wait) was answered
 * with a grant and its full lease, and its session gave up before it read
 * the answer (a cancel, or the session ended).  The grant stays with the
 * waiter's owner, whose client finds it with its next call, but nobody has
 * picked it up: its lease is cut to one heartbeat interval from now, as for
 * any client-side grant not picked up yet, so that the lock passes on
 * promptly if the client is gone as well.  A heartbeat or renewal of the
 * owner lengthens it again.
 */
void
lq_rules_unpicked_grant(const LqRequest *req, const LqResult *res, int64 now)
{
	LqLock	   *lock;
	int64		until;

	if (res->status != LQ_ST_GRANTED)
		return;
	lock = lq_rules_lock_lookup(req->lock_id, false);
	if (!lq_holder_is(lock, req->owner) || lock->token != res->token ||
		lock->ending || lock->pickup_heartbeat <= 0)
		return;
	until = now + lock->pickup_heartbeat;
	lock->pickup_heartbeat = 0;
	if (until < lock->expires)
		lq_set_lease(lock, until);
}

/*
 * lq_rules_undo_grant hands back a grant that the request's answer
 * brought, when its session gave up on the answer (a cancel): the lock
 * passes on.  Only a grant the request created (fresh_grant).
 */
void
lq_rules_undo_grant(const LqRequest *req, const LqResult *res, int64 now)
{
	LqLock	   *lock;

	if (res->status != LQ_ST_GRANTED || !res->fresh_grant)
		return;
	lock = lq_rules_lock_lookup(req->lock_id, false);
	if (lq_holder_is(lock, req->owner) && lock->token == res->token)
		lq_rules_end_grant(lock, LQ_END_CANCEL, now);
}

/*
 * lq_rules_session_end drops what a finished session had: its queued
 * lockq_get and every grant taken with owner NULL.
 */
void
lq_rules_session_end(int slotno, int pid, int64 session_start, int64 now)
{
	lq_rules_session_end_waits(slotno, now);
	lq_rules_session_end_grants(slotno, pid, session_start, now);
}

/*
 * lq_rules_session_end_waits does the part of a session's end that touches
 * nothing but memory, so that its slot can be freed while lockq's tables
 * are locked (lq_postpone_gone in lockq_worker.c): the grants it made by
 * itself are adopted, and its queued lockq_get or lockq_await withdrawn.
 */
void
lq_rules_session_end_waits(int slotno, int64 now)
{
	LqSession  *s = &lq_sessions[slotno];

	lq_adopt_fast_of_slot(slotno);
	if (s->waiter != NULL)
		lq_rules_cancel_wait(slotno, s->waiter->reqid, now);
	if (s->awaiting != NULL)
		lq_await_end(s->awaiting, false, now);
}

/*
 * lq_rules_session_end_grants ends the session-bound grants of the session
 * pid started at session_start, which had slot slotno; a later session in
 * that slot keeps its own.  Ending one may hand its lock on, which needs the
 * tables.  Doing it again finds nothing.
 */
void
lq_rules_session_end_grants(int slotno, int pid, int64 session_start,
							int64 now)
{
	LqSession  *s = &lq_sessions[slotno];
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &s->held)
	{
		LqLock	   *lock = dlist_container(LqLock, session_node, iter.cur);

		if (lock->session_pid == pid && lock->session_start == session_start)
			lq_rules_end_grant(lock, LQ_END_SESSION, now);
	}
}

/*
 * lq_timer_role_of: the role whose group a timer belongs in: a lease's
 * holder, a client-side waiter's role; delays after a restart are nobody's
 * (InvalidOid).
 */
static void
lq_timer_role_of(const LqTimer *t, Oid *role)
{
	if (t->kind == LQ_TIMER_LEASE)
		*role = ((const LqLock *) ((const char *) t - offsetof(LqLock, lease)))->role;
	else if (t->kind == LQ_TIMER_ROW)
		*role = ((const LqLock *) ((const char *) t - offsetof(LqLock, row)))->role;
	else if (t->kind == LQ_TIMER_WAITER)
		*role = ((const LqWaiter *) ((const char *) t - offsetof(LqWaiter, timer)))->role;
	else
		*role = InvalidOid;
}

/*
 * lq_fire_lock_first: before a waiter's deadline at fires, whatever of its
 * lock came due no later (its holder's lease end, its delay) fires first, as
 * it would have in one heap: a waiter whose lock passed to it before its
 * deadline is granted, not timed out or dropped.  Groups take turns
 * (lq_rules_run_timers), so the lock's timer may still be armed.  Returns
 * the waiter's timer if it is still due, or NULL (granted, or gone).
 */
static LqTimer *lq_fire_due_of(const char *lock_id, const char *owner,
							   int64 at, int64 now);

/*
 * lq_fire_timer does what a timer that came due means.
 */
static void
lq_fire_timer(LqTimer *t, int64 now)
{
	if (t->kind == LQ_TIMER_WAITER)
	{
		LqWaiter   *w = (LqWaiter *) ((char *) t - offsetof(LqWaiter, timer));
		LqLock	   *lock = w->lock;

		if (!lq_memory_only &&
			((lock->lease.armed && lock->lease.at <= t->at) ||
			 (lock->delay.armed && lock->delay.at <= t->at)))
		{
			t = lq_fire_due_of(lock->lock_id, w->key.owner, t->at, now);
			if (t == NULL)
				return;
		}
	}
	lq_timer_disarm(t);

	if (t->kind == LQ_TIMER_LEASE)
	{
		LqLock	   *lock = (LqLock *) ((char *) t - offsetof(LqLock, lease));

		/* a grant its holder released already ends with that */
		if (lock->in_deferred)
			lq_terminate_fencers(lock, now);
		else if (lock->held && !lock->ending && !lq_released_by_holder(lock))
			lq_rules_end_grant(lock, LQ_END_EXPIRE, now);
	}
	else if (t->kind == LQ_TIMER_ROW)
		lq_give_row((LqLock *) ((char *) t - offsetof(LqLock, row)));
	else if (t->kind == LQ_TIMER_DELAY)
	{
		LqLock	   *lock = (LqLock *) ((char *) t - offsetof(LqLock, delay));

		lock->delay_until = 0;
		lock->lost_until = 0;
		lock->hold_until = 0;
		if (--lq_ndelayed == 0)
			lq_delay_max = 0;
		if (!lock->held && lock->nwaiters > 0)
			lq_grant_next(lock, now);
		else
			lq_lock_maybe_drop(lock);
	}
	else
	{
		LqWaiter   *w = (LqWaiter *) ((char *) t - offsetof(LqWaiter, timer));
		LqLock	   *lock = w->lock;

		if (w->await_slot >= 0)
		{
			/* a lockq_await's deadline: the waiter stays */
			lq_await_end(w, true, now);
			return;
		}
		if (w->client)
		{
			if (w->channel != NULL)
				lq_outbox_notify(w->channel, "dropped", 0, lock->lock_id,
								 w->key.owner);
			lq_shmem_stat_add(LQ_STAT_DROPPED_WAITERS, 1);
		}
		else
		{
			lq_reply(w->slot, w->reqid, LQ_ST_TIMEOUT, 0, false);
			lq_shmem_stat_add(LQ_STAT_TIMEOUTS, 1);
		}
		lq_waiter_remove(w, true);
		lq_lock_maybe_drop(lock);
	}
}

/*
 * lq_fire_due_of fires the timers of lock_id that came due by at (its
 * lease's end, its delay's), and returns owner's waiter timer on it if that
 * is still armed and due by now, else NULL.  The lock and the waiter are
 * looked up by name, as firing may free either.
 */
static LqTimer *
lq_fire_due_of(const char *lock_id, const char *owner, int64 at, int64 now)
{
	char		id[LQ_MAX_ID_LEN + 1];
	char		own[LQ_MAX_OWNER_LEN + 1];
	LqLock	   *lock;
	LqWaiter   *w;

	strlcpy(id, lock_id, sizeof(id));
	strlcpy(own, owner != NULL ? owner : "", sizeof(own));
	lock = lq_rules_lock_lookup(id, false);
	if (lock != NULL && lock->lease.armed && lock->lease.at <= at)
		lq_fire_timer(&lock->lease, now);
	lock = lq_rules_lock_lookup(id, false);
	if (lock != NULL && lock->delay.armed && lock->delay.at <= at)
		lq_fire_timer(&lock->delay, now);
	if (own[0] == '\0')
		return NULL;
	w = lq_rules_waiter_lookup(id, own);
	if (w == NULL || !w->timer.armed || w->timer.at > now)
		return NULL;
	return &w->timer;
}

/*
 * lq_rules_fire_due_for fires what came due of one lock and of owner's wait
 * for it, before a request about them is applied: the per-role turns of
 * lq_rules_run_timers may have left such timers armed, and a request must
 * find the state as if every deadline before it had passed (a renewal of a
 * lease that has ended fails; a heartbeat after the waiter's deadline finds
 * it dropped).
 */
void
lq_rules_fire_due_for(const char *lock_id, const char *owner, int64 now)
{
	LqTimer    *t;

	/* a grant a backend made by itself is adopted first, with its timer */
	if (lq_fastpath_count() > 0)
		(void) lq_rules_lock_lookup(lock_id, false);
	t = lq_timer_first_of_groups();
	/* usually nothing at all is left due: then there is nothing to look up */
	if (t == NULL || t->at > now)
		return;
	t = lq_fire_due_of(lock_id, owner, now, now);

	if (t != NULL)
		lq_fire_timer(t, now);
}

/*
 * lq_rules_run_timers fires the deadlines up to now: leases expire and pass
 * on; client-side waiters that missed their heartbeat are dropped;
 * lockq_get calls that reached their timeout are answered with TIMEOUT.
 * The timeouts of lockq_get calls all fire.  The other timers are in one
 * group per role, and the groups with timers due take turns, earliest
 * first, firing up to LQ_TIMER_SLICE each per turn, LQ_TIMERS_PER_BATCH in
 * all: a role's thousands of leases ending at once then delay another
 * role's hand-off by one slice, and the batch by a few milliseconds, and
 * the rest fire in the next batches.  Returns true when timers are left due
 * (the lock server runs the next batch at once).  Requests about a lock
 * fire its due timers first (lq_rules_fire_due_for).
 */
bool
lq_rules_run_timers(int64 now)
{
	int			budget = LQ_TIMERS_PER_BATCH;
	LqTimer    *t;

	while ((t = lq_timer_first(lq_wait_timers)) != NULL && t->at <= now)
		lq_fire_timer(t, now);
	while (budget > 0)
	{
		List	   *turn = NIL;
		ListCell   *lc;

		/* every group with a timer due has a turn, earliest first */
		while (budget > 0 && !pairingheap_is_empty(lq_timers))
		{
			LqTimerGroup *g = pairingheap_container(LqTimerGroup, ph,
													pairingheap_first(lq_timers));
			int			n = 0;

			if (g->first_at > now)
				break;
			pairingheap_remove_first(lq_timers);
			g->queued = false;
			g->in_turn = true;
			turn = lappend(turn, g);
			while (n < LQ_TIMER_SLICE && budget > 0 &&
				   (t = lq_timer_first(g->heap)) != NULL && t->at <= now)
			{
				lq_fire_timer(t, now);
				n++;
				budget--;
			}
		}
		foreach(lc, turn)
		{
			LqTimerGroup *g = lfirst(lc);

			g->in_turn = false;
			lq_group_requeue(g);
		}
		if (turn == NIL)
			break;
		list_free(turn);
	}
	t = lq_timer_first_of_groups();
	return t != NULL && t->at <= now;
}

/*
 * lq_rules_run_wait_timeouts fires only the timeouts of waiting lockq_get
 * calls that are due: removing a waiter touches nothing but memory (a lock
 * with waiters is held, so nobody is granted).  Used while lockq's tables
 * cannot be written.
 */
void
lq_rules_run_wait_timeouts(int64 now)
{
	LqTimer    *t;

	lq_memory_only = true;
	PG_TRY();
	{
		while ((t = lq_timer_first(lq_wait_timers)) != NULL && t->at <= now)
			lq_fire_timer(t, now);
	}
	PG_FINALLY();
	{
		lq_memory_only = false;
	}
	PG_END_TRY();
}

/*
 * lq_rules_every_lock_delayed: is every lock still delayed after a crash
 * (the wide marker), locks the rules have not met yet included?
 */
bool
lq_rules_every_lock_delayed(int64 now)
{
	return lq_all_until > now;
}

/*
 * lq_rules_session_holds: does the session of slotno hold session-bound
 * grants?  Ending those may hand locks on to waiters that need the tables.
 */
bool
lq_rules_session_holds(int slotno)
{
	return !dlist_is_empty(&lq_sessions[slotno].held);
}

/*
 * lq_rules_retry_deferred tries again to finish every ending grant whose
 * row a fenced transaction held.
 */
void
lq_rules_retry_deferred(int64 now)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &lq_deferred)
	{
		LqLock	   *lock = dlist_container(LqLock, deferred_node, iter.cur);

		lq_finish_end(lock, now);
	}
}

bool
lq_rules_has_deferred(void)
{
	return !dlist_is_empty(&lq_deferred);
}

/*
 * lq_rules_next_deadline returns the earliest armed deadline (or the end of
 * the grace period), 0 if none.
 */
int64
lq_rules_next_deadline(void)
{
	int64		next = 0;
	LqTimer    *a = lq_timer_first_of_groups();
	LqTimer    *b = lq_timer_first(lq_wait_timers);

	if (a != NULL)
		next = a->at;
	if (b != NULL && (next == 0 || b->at < next))
		next = b->at;
	return next;
}

/*
 * lq_rules_oversized: does the state hold far more memory than what is in
 * it needs (after a flood of locks or waiters has ended: dynahash never
 * shrinks, and freed entries stay on its free lists)?  Then rebuilding it
 * from the tables returns the memory.  Returns the memory it holds, in
 * *held.
 */
bool
lq_rules_oversized(Size *held)
{
	Size		live = (Size) (hash_get_num_entries(lq_locks) +
							   hash_get_num_entries(lq_waiters)) * 2048;

	*held = MemoryContextMemAllocated(lq_rules_cxt, true);
	return *held > (Size) 32 * 1024 * 1024 && live < *held / 4;
}

void
lq_rules_publish_gauges(void)
{
	/* a delay of every lock counts once, for alerts on delayed_locks > 0 */
	bool		all = lq_all_until > 0 && lq_all_until > lq_clock_peek();

	pg_atomic_write_u64(&lq_my_server->holders, (uint64) lq_nholders);
	pg_atomic_write_u64(&lq_my_server->waiters, (uint64) lq_nwaiters);
	pg_atomic_write_u64(&lq_my_server->delayed, (uint64) lq_ndelayed + (all ? 1 : 0));
	pg_atomic_write_u64(&lq_my_server->delay_max,
						(uint64) (all ? Max(lq_delay_max, lq_all_until) : lq_delay_max));
	pg_atomic_write_u64(&lq_my_server->state_bytes,
						(uint64) MemoryContextMemAllocated(lq_rules_cxt, true));
	pg_atomic_write_u64(&lq_my_server->longest_queue, (uint64) lq_longest);
	/* after a lockq_stats_reset that read a longest queue older than this */
	lq_shmem_stat_queue_length((uint64) lq_longest);
}

/*
 * lq_rules_hand_on_orphans grants every free lock that has waiters to the
 * head of its queue: after a restart that lost its holder's row, the
 * waiters would wait for nobody.
 */
void
lq_rules_hand_on_orphans(int64 now)
{
	HASH_SEQ_STATUS seq;
	LqLock	   *lock;
	List	   *orphans = NIL;
	ListCell   *lc;

	hash_seq_init(&seq, lq_locks);
	while ((lock = hash_seq_search(&seq)) != NULL)
	{
		if (!lock->held && lock->nwaiters > 0)
			orphans = lappend(orphans, lock);
	}
	foreach(lc, orphans)
		lq_grant_next((LqLock *) lfirst(lc), now);
	list_free(orphans);
}

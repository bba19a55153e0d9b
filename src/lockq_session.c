/*-------------------------------------------------------------------------
 *
 * lockq_session.c
 *		Session-bound grants (owner NULL) in shared memory.
 *
 * A lock taken without an owner ends with its session, and a crash ends
 * every session, so such a grant has nothing to keep durable: the lock
 * server records it here instead of in lockq.owners, and a session-bound
 * lock costs no table write and no WAL, like pg_advisory_lock.  The table
 * is a shared hash keyed by token, with room for
 * lockq.session_locks_per_backend entries per backend (shared, like the
 * lock manager's max_locks_per_transaction), under one LWLock.
 *
 * The lock server makes and ends the grants (backends write only the
 * grants they make on the fast path, lockq_fastpath.c, their quick
 * releases and their fences; LqSessionGrant has the locking rules).
 * What a batch does to a grant is staged in its entry (lq_session_stage;
 * a new grant is entered invisible) and seen only when the batch is
 * published after its commit (lq_session_publish), so that a batch that
 * fails leaves the table as it was; a lock server that finds a batch of
 * its predecessor staged publishes it if that batch's transaction
 * committed, and forgets it otherwise (lq_session_resolve).  The one
 * exception is the end of a grant, which must be decided together with
 * the fencing check:
 *
 * Fencing.  lockq_holds(lock, token) on a session-bound grant takes the
 * LWLock shared, checks that the grant is current, and adds one to its
 * fences; the transaction's end takes it off again
 * (lq_session_release_fences, from lockq_hooks.c's transaction callback).
 * The worker, ending a grant, takes the LWLock exclusively, marks the
 * grant ENDING and reads its fences (lq_session_begin_end).  So either
 * the fence was taken first, and the worker sees it and defers the
 * hand-off until the fenced transaction has ended, or the end was marked
 * first, and lockq_holds answers false.  A batch that fails turns ENDING
 * back into CURRENT (lq_session_resolve); a published one turns it into
 * ENDED or removes the grant.
 *
 * Readers: lockq_holds, the view lockq_locks (lockq_session_grants), and
 * the worker when it rebuilds its state (lq_session_copy).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lockq_guc.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

#define LQ_LWLOCK_TRANCHE	"lockq"

static HTAB *lq_session_grants = NULL;
static LWLock *lq_session_lock = NULL;

/* This backend's fences in the current transaction: tokens, with repeats. */
static int64 *lq_fences = NULL;
static int	lq_nfences = 0;
static int	lq_maxfences = 0;

/*
 * lq_session_max is the capacity of the table.  MaxBackends is set before
 * the shared-memory request hook runs.
 */
int
lq_session_max(void)
{
	return lockq_session_locks_per_backend * MaxBackends;
}

/*
 * The table's room: lockq.session_locks_per_backend per backend for the
 * lock server's grants, and LQ_FAST_PER_BACKEND more for the fast path's.
 */
static long
lq_session_room(void)
{
	return (long) lq_session_max() + (long) LQ_FAST_PER_BACKEND * MaxBackends;
}

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * lq_session_shmem_request asks for the table's shared memory and its
 * LWLock.
 */
static void
lq_session_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(hash_estimate_size(lq_session_room(),
											  sizeof(LqSessionGrant)));
	RequestNamedLWLockTranche(LQ_LWLOCK_TRANCHE, 1);
}

/*
 * lq_session_shmem_startup creates or attaches to the table.  All entries
 * are allocated up front, so the table never competes with anything else
 * for shared memory.
 */
static void
lq_session_shmem_startup(void)
{
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	lq_session_lock = &(GetNamedLWLockTranche(LQ_LWLOCK_TRANCHE))->lock;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(int64);
	info.entrysize = sizeof(LqSessionGrant);
	lq_session_grants = ShmemInitHash("lockq session grants",
									  lq_session_room(), lq_session_room(),
									  &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * lq_session_init_hooks installs the shared-memory hooks, chaining whatever
 * was there.
 */
void
lq_session_init_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lq_session_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lq_session_shmem_startup;
}

/*
 * lq_session_stage records what a batch does to a grant; nothing of it is
 * seen until lq_session_publish, after the batch's commit.  A new grant is
 * entered invisible (readers skip it: nobody knows its token yet).  Worker
 * only, inside a batch.  The worker never lets the table overflow (it
 * counts the grants it has decided); should it happen anyway, the batch
 * fails before its commit.
 */
void
lq_session_stage(LqGrantOp op, const LqSessionGrant *g, uint64 batch)
{
	LqSessionGrant *e;
	bool		found;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	e = hash_search(lq_session_grants, &g->token,
					op == LQ_GRANT_OP_PUT ? HASH_ENTER_NULL : HASH_FIND, &found);
	if (e == NULL && op == LQ_GRANT_OP_PUT)
	{
		LWLockRelease(lq_session_lock);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("lockq session grant table is full")));
	}
	if (e == NULL)
	{
		LWLockRelease(lq_session_lock);
		return;
	}
	if (!found)
	{
		/* a new grant, invisible until published */
		pg_atomic_init_u32(&e->fences, 0);
		e->end = LQ_GRANT_CURRENT;
		e->released = false;
		e->visible = false;
		memcpy(e->lock_id, g->lock_id, sizeof(e->lock_id));
		e->pid = g->pid;
		e->session_start = g->session_start;
		e->role = g->role;
		e->ttl = g->ttl;
		e->acquired = g->acquired;
		e->expires = g->expires;
	}
	e->staged_op = op;
	e->staged_batch = batch;
	e->staged_expires = g->expires;
	LWLockRelease(lq_session_lock);
}

/*
 * lq_grant_apply_staged makes an entry's staged change seen, or forgets it
 * (apply false).  Returns false when the entry is to be removed.  Called
 * with the LWLock held exclusively.
 */
static bool
lq_grant_apply_staged(LqSessionGrant *e, bool apply)
{
	LqGrantOp	op = e->staged_op;

	e->staged_op = LQ_GRANT_OP_NONE;
	e->staged_batch = 0;
	if (!apply)
		return e->visible;		/* a grant never published goes */
	switch (op)
	{
		case LQ_GRANT_OP_NONE:
			break;
		case LQ_GRANT_OP_PUT:
			/* a renewal never undoes an end or a release marked meanwhile */
			e->expires = e->staged_expires;
			e->visible = true;
			break;
		case LQ_GRANT_OP_ENDED:
			if (e->end == LQ_GRANT_ENDING)
				e->end = LQ_GRANT_ENDED;
			e->expires = Min(e->expires, e->staged_expires);
			e->visible = true;
			break;
		case LQ_GRANT_OP_DELETE:
			return false;
	}
	return true;
}

/*
 * lq_session_publish makes what the batch staged for a grant seen, after
 * the batch's commit.  Worker only; must not fail.
 */
void
lq_session_publish(int64 token)
{
	LqSessionGrant *e;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL && e->staged_op != LQ_GRANT_OP_NONE &&
		!lq_grant_apply_staged(e, true))
		(void) hash_search(lq_session_grants, &token, HASH_REMOVE, NULL);
	LWLockRelease(lq_session_lock);
}

/*
 * lq_session_resolve settles every staged change of the calling lock
 * server's locks (lq_shmem_mine): those of committed_batch (its batch whose
 * transaction committed; 0 for none) are published, all others forgotten,
 * and grants marked ENDING by a batch that did not commit are current
 * again.  Worker only: after a failed batch, and when a lock server starts
 * where its predecessor left a batch behind.
 */
void
lq_session_resolve(uint64 committed_batch)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_session_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		bool		apply = committed_batch != 0 &&
			e->staged_batch == committed_batch;

		if (!lq_shmem_mine(e->lock_id))
			continue;
		if (e->staged_op != LQ_GRANT_OP_NONE &&
			!lq_grant_apply_staged(e, apply))
			(void) hash_search(lq_session_grants, &e->token, HASH_REMOVE, NULL);
		else if (e->end == LQ_GRANT_ENDING)
			e->end = LQ_GRANT_CURRENT;
	}
	LWLockRelease(lq_session_lock);
}

/*
 * lq_session_begin_end marks a grant ENDING, so that lockq_holds answers
 * false from now on, and returns how many transactions are fenced on it
 * (0 for a grant not published yet: nobody can know its token).  Worker
 * only, inside a batch; see the top of the file.
 */
uint32
lq_session_begin_end(int64 token)
{
	LqSessionGrant *e;
	uint32		fences = 0;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
	{
		if (e->end == LQ_GRANT_CURRENT)
			e->end = LQ_GRANT_ENDING;
		fences = pg_atomic_read_u32(&e->fences);
	}
	LWLockRelease(lq_session_lock);
	return fences;
}

/*
 * lq_session_fences returns how many transactions are fenced on a grant.
 */
uint32
lq_session_fences(int64 token)
{
	LqSessionGrant *e;
	uint32		fences = 0;

	LWLockAcquire(lq_session_lock, LW_SHARED);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
		fences = pg_atomic_read_u32(&e->fences);
	LWLockRelease(lq_session_lock);
	return fences;
}

/*
 * lq_session_undo_ending turns every ENDING grant of the calling lock
 * server's locks back into a current one: the batch that ended them
 * failed, or the worker that ran it is gone.  Their requests are applied
 * again.  Worker only.
 */
void
lq_session_undo_ending(void)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_session_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->end == LQ_GRANT_ENDING && lq_shmem_mine(e->lock_id))
			e->end = LQ_GRANT_CURRENT;
	}
	LWLockRelease(lq_session_lock);
}

/*
 * lq_session_clear removes every grant of the calling lock server's locks:
 * the extension was dropped (and perhaps created again), which ends all
 * locks.  Worker only.
 */
void
lq_session_clear(void)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_session_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (lq_shmem_mine(e->lock_id))
			(void) hash_search(lq_session_grants, &e->token, HASH_REMOVE, NULL);
	LWLockRelease(lq_session_lock);
}

/*
 * lq_session_copy returns a palloc'd copy of every visible grant (mine: of
 * the calling lock server's locks only) and their number, taken under the
 * LWLock.
 */
LqSessionGrant *
lq_session_copy(bool mine, int *n)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;
	LqSessionGrant *out;
	long		cap;
	int			i = 0;

	LWLockAcquire(lq_session_lock, LW_SHARED);
	cap = hash_get_num_entries(lq_session_grants);
	out = palloc(sizeof(LqSessionGrant) * Max(cap, 1));
	hash_seq_init(&seq, lq_session_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		LqSessionGrant *c;

		if (!e->visible || (mine && !lq_shmem_mine(e->lock_id)))
			continue;
		c = &out[i++];

		c->token = e->token;
		memcpy(c->lock_id, e->lock_id, sizeof(c->lock_id));
		c->pid = e->pid;
		c->session_start = e->session_start;
		c->role = e->role;
		c->ttl = e->ttl;
		c->acquired = e->acquired;
		c->expires = e->expires;
		c->end = e->end;
		c->released = e->released;
		c->visible = e->visible;
		pg_atomic_init_u32(&c->fences, pg_atomic_read_u32(&e->fences));
	}
	LWLockRelease(lq_session_lock);
	*n = i;
	return out;
}

/*
 * lq_session_holds is lockq_holds for session-bound grants: LQ_HELD_UNKNOWN
 * if token is not one (the caller then looks in lockq.owners), LQ_HELD_NO
 * if the grant of lock_id with that token is not current at now,
 * LQ_HELD_FENCED if it is and this transaction is now fenced on it until
 * it ends (see the top of the file), LQ_HELD_UNFENCED if it is but role may
 * not fence it: only the grant's own role may hold its hand-off back, or
 * an administrator.
 */
LqHeld
lq_session_holds(const char *lock_id, int64 token, int64 now, Oid role,
				 bool admin)
{
	LqSessionGrant *e;
	LqHeld		result;

	/* room for the fence first: nothing may fail once it is taken */
	if (lq_nfences >= lq_maxfences)
	{
		int			newmax = Max(8, lq_maxfences * 2);

		if (lq_fences == NULL)
			lq_fences = MemoryContextAlloc(TopMemoryContext,
										   sizeof(int64) * newmax);
		else
			lq_fences = repalloc(lq_fences, sizeof(int64) * newmax);
		lq_maxfences = newmax;
	}

	LWLockAcquire(lq_session_lock, LW_SHARED);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e == NULL || !e->visible)
		result = LQ_HELD_UNKNOWN;
	else if (e->end != LQ_GRANT_CURRENT || e->released ||
			 e->expires <= now || strcmp(e->lock_id, lock_id) != 0)
		result = LQ_HELD_NO;
	else if (e->role != role && !admin)
		result = LQ_HELD_UNFENCED;
	else
	{
		pg_atomic_fetch_add_u32(&e->fences, 1);
		lq_fences[lq_nfences++] = token;
		result = LQ_HELD_FENCED;
	}
	LWLockRelease(lq_session_lock);
	return result;
}

/*
 * lq_session_enter_fast enters a grant made on the fast path
 * (lockq_fastpath.c), visible at once; false if the table is full.  The
 * fast path takes room only while the table holds fewer than
 * lq_session_max() grants, so the lock server, which makes no more than
 * that many itself, always finds room for its own: the table's room is
 * lq_session_max() plus the fast path's share.  Called under the lock's
 * partition lock of the fast path.
 */
bool
lq_session_enter_fast(const LqSessionGrant *g)
{
	LqSessionGrant *e = NULL;
	bool		found;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	if (hash_get_num_entries(lq_session_grants) < lq_session_max())
		e = hash_search(lq_session_grants, &g->token, HASH_ENTER_NULL, &found);
	if (e != NULL)
	{
		Assert(!found);
		memcpy(e, g, sizeof(LqSessionGrant));
		e->end = LQ_GRANT_CURRENT;
		e->released = false;
		pg_atomic_init_u32(&e->fences, 0);
		e->visible = true;
		e->staged_op = LQ_GRANT_OP_NONE;
		e->staged_batch = 0;
	}
	LWLockRelease(lq_session_lock);
	return e != NULL;
}

/* lq_session_forget_fast removes a grant lq_session_enter_fast just made. */
void
lq_session_forget_fast(int64 token)
{
	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	hash_search(lq_session_grants, &token, HASH_REMOVE, NULL);
	LWLockRelease(lq_session_lock);
}

/*
 * lq_session_remove_fast is the release of a grant made on the fast path by
 * its holder: it removes the grant if it is current, not released, and
 * nobody is fenced on it (*expired: its lease had run out at now), and
 * returns true.  Else false, and nothing changes: the lock server must end
 * it.  The fences are read under the LWLock held exclusively, so a
 * lockq_holds either fenced it first or finds it gone.
 */
bool
lq_session_remove_fast(int64 token, int64 now, bool *expired)
{
	LqSessionGrant *e;
	bool		removed = false;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL && e->visible && e->end == LQ_GRANT_CURRENT &&
		!e->released && e->staged_op == LQ_GRANT_OP_NONE &&
		pg_atomic_read_u32(&e->fences) == 0)
	{
		*expired = e->expires <= now;
		hash_search(lq_session_grants, &token, HASH_REMOVE, NULL);
		removed = true;
	}
	LWLockRelease(lq_session_lock);
	return removed;
}

/*
 * lq_session_get copies the grant with this token into *out, if there is
 * one.
 */
bool
lq_session_get(int64 token, LqSessionGrant *out)
{
	LqSessionGrant *e;

	LWLockAcquire(lq_session_lock, LW_SHARED);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
	{
		memcpy(out, e, offsetof(LqSessionGrant, fences));
		pg_atomic_init_u32(&out->fences, pg_atomic_read_u32(&e->fences));
		out->visible = e->visible;
	}
	LWLockRelease(lq_session_lock);
	return e != NULL;
}

/*
 * lq_session_mark_released is the holder's side of a quick release (see
 * lockq_release): if the session (pid, session_start) holds lock_id under
 * token and its lease has not run out at now, the grant is marked released
 * and true returned; the worker ends it when it gets to the release, and
 * meanwhile neither lets it expire nor force-releases it, and lockq_holds
 * answers false.  The release takes effect here, under the LWLock.
 */
bool
lq_session_mark_released(const char *lock_id, int64 token, int pid,
						 int64 session_start, int64 now)
{
	LqSessionGrant *e;
	bool		marked = false;

	LWLockAcquire(lq_session_lock, LW_EXCLUSIVE);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL && e->visible && e->end == LQ_GRANT_CURRENT && !e->released &&
		e->pid == pid && e->session_start == session_start &&
		e->expires > now && strcmp(e->lock_id, lock_id) == 0)
	{
		e->released = true;
		marked = true;
	}
	LWLockRelease(lq_session_lock);
	return marked;
}

/*
 * lq_session_is_released: did the holder release this grant already (a
 * quick release the worker has not acted on)?
 */
bool
lq_session_is_released(int64 token)
{
	LqSessionGrant *e;
	bool		released = false;

	LWLockAcquire(lq_session_lock, LW_SHARED);
	e = hash_search(lq_session_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
		released = e->released;
	LWLockRelease(lq_session_lock);
	return released;
}

/*
 * lq_session_release_fences takes this backend's fences off again at the
 * end of its transaction; true if there were any (the worker may be
 * waiting for them).
 */
bool
lq_session_release_fences(void)
{
	int			i;

	if (lq_nfences == 0)
		return false;
	LWLockAcquire(lq_session_lock, LW_SHARED);
	for (i = 0; i < lq_nfences; i++)
	{
		LqSessionGrant *e = hash_search(lq_session_grants, &lq_fences[i],
										HASH_FIND, NULL);
		uint32		old;

		if (e == NULL)
			continue;			/* removed by lq_session_clear */
		old = pg_atomic_read_u32(&e->fences);
		while (old > 0 &&
			   !pg_atomic_compare_exchange_u32(&e->fences, &old, old - 1))
			;
	}
	LWLockRelease(lq_session_lock);
	lq_nfences = 0;
	return true;
}

/*
 * lq_session_format_owner names the owner of a session's session-bound
 * locks: the reserved prefix, its pid and start time.
 */
void
lq_session_format_owner(char *buf, size_t len, int pid, int64 session_start)
{
	snprintf(buf, len, LQ_SESSION_PREFIX "%d:" INT64_FORMAT, pid,
			 session_start);
}

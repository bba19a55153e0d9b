/*-------------------------------------------------------------------------
 *
 * lockq_grants.c
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
 * Only the worker writes it, and only what a published batch decided
 * (lq_grants_put and lq_grants_delete are called from lq_publish, after the
 * commit), so that a batch that fails leaves it as it was.  The one
 * exception is the end of a grant, which must be decided together with the
 * fencing check:
 *
 * Fencing.  lockq_holds(lock, token) on a session-bound grant takes the
 * LWLock shared, checks that the grant is current, and adds one to its
 * fences; the transaction's end takes it off again (lq_grants_release_fences,
 * from lockq_api.c's transaction callback).  The worker, ending a grant,
 * takes the LWLock exclusively, marks the grant ENDING and reads its fences
 * (lq_grants_begin_end).  So either the fence was taken first, and the
 * worker sees it and defers the hand-off until the fenced transaction has
 * ended, or the end was marked first, and lockq_holds answers false.  A
 * batch that fails turns ENDING back into CURRENT (lq_grants_undo_ending);
 * a published one turns it into ENDED or removes the grant.
 *
 * Readers: lockq_holds, the view lockq_locks (lockq_session_grants), and
 * the worker when it rebuilds its state (lq_grants_copy).
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		src/lockq_grants.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lockq.h"

#define LQ_LWLOCK_TRANCHE	"lockq"

static HTAB *lq_grants = NULL;
static LWLock *lq_grants_lock = NULL;

/* This backend's fences in the current transaction: tokens, with repeats. */
static int64 *lq_fences = NULL;
static int	lq_nfences = 0;
static int	lq_maxfences = 0;

/*
 * lq_grants_max is the capacity of the table.  MaxBackends is set before
 * the shared-memory request hook runs.
 */
int
lq_grants_max(void)
{
	return lockq_session_locks_per_backend * MaxBackends;
}

Size
lq_grants_shmem_size(void)
{
	return hash_estimate_size(lq_grants_max(), sizeof(LqSessionGrant));
}

/*
 * lq_grants_shmem_request asks for the LWLock; lockq_shmem.c adds the
 * table's size to its request.
 */
void
lq_grants_shmem_request(void)
{
	RequestNamedLWLockTranche(LQ_LWLOCK_TRANCHE, 1);
}

/*
 * lq_grants_shmem_startup creates or attaches to the table.  Called with
 * AddinShmemInitLock held.  All entries are allocated up front, so the
 * table never competes with anything else for shared memory.
 */
void
lq_grants_shmem_startup(void)
{
	HASHCTL		info;

	lq_grants_lock = &(GetNamedLWLockTranche(LQ_LWLOCK_TRANCHE))->lock;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(int64);
	info.entrysize = sizeof(LqSessionGrant);
	lq_grants = ShmemInitHash("lockq session grants",
							  lq_grants_max(), lq_grants_max(),
							  &info, HASH_ELEM | HASH_BLOBS);
}

/*
 * lq_grants_put adds a grant, or updates one (a renewal).  Worker only,
 * when publishing a batch, after its commit, so it must not fail.  The
 * worker never lets the table overflow (it counts the grants it has
 * decided); should it happen anyway, the grant is only missing from the
 * view, and lockq_holds answers false for it, which is safe.
 */
void
lq_grants_put(const LqSessionGrant *g)
{
	LqSessionGrant *e;
	bool		found;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	e = hash_search(lq_grants, &g->token, HASH_ENTER_NULL, &found);
	if (e == NULL)
	{
		LWLockRelease(lq_grants_lock);
		elog(WARNING, "lockq session grant table is full");
		return;
	}
	if (!found)
	{
		pg_atomic_init_u32(&e->fences, 0);
		e->end = LQ_GRANT_CURRENT;
		e->released = false;
	}
	/* an update never undoes an end or a release marked meanwhile */
	memcpy(e->lock_id, g->lock_id, sizeof(e->lock_id));
	e->pid = g->pid;
	e->session_start = g->session_start;
	e->role = g->role;
	e->ttl = g->ttl;
	e->acquired = g->acquired;
	e->expires = g->expires;
	LWLockRelease(lq_grants_lock);
}

/*
 * lq_grants_delete removes a grant whose end is published and no longer
 * fenced.  Worker only.
 */
void
lq_grants_delete(int64 token)
{
	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	(void) hash_search(lq_grants, &token, HASH_REMOVE, NULL);
	LWLockRelease(lq_grants_lock);
}

/*
 * lq_grants_begin_end marks a grant ENDING, so that lockq_holds answers
 * false from now on, and returns how many transactions are fenced on it
 * (0 for a grant not published yet: nobody can know its token).  Worker
 * only, inside a batch; see the top of the file.
 */
uint32
lq_grants_begin_end(int64 token)
{
	LqSessionGrant *e;
	uint32		fences = 0;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
	{
		if (e->end == LQ_GRANT_CURRENT)
			e->end = LQ_GRANT_ENDING;
		fences = pg_atomic_read_u32(&e->fences);
	}
	LWLockRelease(lq_grants_lock);
	return fences;
}

/*
 * lq_grants_set_ended makes an ENDING grant ENDED, with its lease cut to
 * the end time: its end is published but fenced transactions hold up the
 * hand-off.  Worker only.
 */
void
lq_grants_set_ended(int64 token, int64 expires)
{
	LqSessionGrant *e;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL && e->end == LQ_GRANT_ENDING)
	{
		e->end = LQ_GRANT_ENDED;
		e->expires = Min(e->expires, expires);
	}
	LWLockRelease(lq_grants_lock);
}

/*
 * lq_grants_fences returns how many transactions are fenced on a grant.
 */
uint32
lq_grants_fences(int64 token)
{
	LqSessionGrant *e;
	uint32		fences = 0;

	LWLockAcquire(lq_grants_lock, LW_SHARED);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
		fences = pg_atomic_read_u32(&e->fences);
	LWLockRelease(lq_grants_lock);
	return fences;
}

/*
 * lq_grants_undo_ending turns every ENDING grant back into a current one:
 * the batch that ended them failed, or the worker that ran it is gone.
 * Their requests are applied again.  Worker only.
 */
void
lq_grants_undo_ending(void)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->end == LQ_GRANT_ENDING)
			e->end = LQ_GRANT_CURRENT;
	}
	LWLockRelease(lq_grants_lock);
}

/*
 * lq_grants_clear removes every grant: the extension was dropped (and
 * perhaps created again), which ends all locks.  Worker only.
 */
void
lq_grants_clear(void)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
		(void) hash_search(lq_grants, &e->token, HASH_REMOVE, NULL);
	LWLockRelease(lq_grants_lock);
}

/*
 * lq_grants_copy returns a palloc'd copy of every grant and their number,
 * taken under the LWLock.
 */
LqSessionGrant *
lq_grants_copy(int *n)
{
	HASH_SEQ_STATUS seq;
	LqSessionGrant *e;
	LqSessionGrant *out;
	long		cap;
	int			i = 0;

	LWLockAcquire(lq_grants_lock, LW_SHARED);
	cap = hash_get_num_entries(lq_grants);
	out = palloc(sizeof(LqSessionGrant) * Max(cap, 1));
	hash_seq_init(&seq, lq_grants);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		LqSessionGrant *c = &out[i++];

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
		pg_atomic_init_u32(&c->fences, pg_atomic_read_u32(&e->fences));
	}
	LWLockRelease(lq_grants_lock);
	*n = i;
	return out;
}

/*
 * lq_grants_holds is lockq_holds for session-bound grants: -1 if token is
 * not one (the caller then looks in lockq.owners), else whether the grant
 * of lock_id with that token is current at now.  When it is, this
 * transaction is fenced on it until it ends (see the top of the file).
 */
int
lq_grants_holds(const char *lock_id, int64 token, int64 now)
{
	LqSessionGrant *e;
	int			result;

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

	LWLockAcquire(lq_grants_lock, LW_SHARED);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e == NULL)
		result = -1;
	else if (e->end != LQ_GRANT_CURRENT || e->released ||
			 e->expires <= now || strcmp(e->lock_id, lock_id) != 0)
		result = 0;
	else
	{
		pg_atomic_fetch_add_u32(&e->fences, 1);
		lq_fences[lq_nfences++] = token;
		result = 1;
	}
	LWLockRelease(lq_grants_lock);
	return result;
}

/*
 * lq_grants_mark_released is the holder's side of a quick release (see
 * lockq_release): if the session (pid, session_start) holds lock_id under
 * token and its lease has not run out at now, the grant is marked released
 * and true returned; the worker ends it when it gets to the release, and
 * meanwhile neither lets it expire nor force-releases it, and lockq_holds
 * answers false.  The release takes effect here, under the LWLock.
 */
bool
lq_grants_mark_released(const char *lock_id, int64 token, int pid,
						int64 session_start, int64 now)
{
	LqSessionGrant *e;
	bool		marked = false;

	LWLockAcquire(lq_grants_lock, LW_EXCLUSIVE);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL && e->end == LQ_GRANT_CURRENT && !e->released &&
		e->pid == pid && e->session_start == session_start &&
		e->expires > now && strcmp(e->lock_id, lock_id) == 0)
	{
		e->released = true;
		marked = true;
	}
	LWLockRelease(lq_grants_lock);
	return marked;
}

/*
 * lq_grants_is_released: did the holder release this grant already (a
 * quick release the worker has not acted on)?
 */
bool
lq_grants_is_released(int64 token)
{
	LqSessionGrant *e;
	bool		released = false;

	LWLockAcquire(lq_grants_lock, LW_SHARED);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
		released = e->released;
	LWLockRelease(lq_grants_lock);
	return released;
}

/*
 * lq_grants_lock_id copies the lock id of a grant into lock_id (of
 * LQ_MAX_ID_LEN + 1 bytes); false if there is no such grant.
 */
bool
lq_grants_lock_id(int64 token, char *lock_id)
{
	LqSessionGrant *e;
	bool		found = false;

	LWLockAcquire(lq_grants_lock, LW_SHARED);
	e = hash_search(lq_grants, &token, HASH_FIND, NULL);
	if (e != NULL)
	{
		memcpy(lock_id, e->lock_id, LQ_MAX_ID_LEN + 1);
		found = true;
	}
	LWLockRelease(lq_grants_lock);
	return found;
}

/*
 * lq_grants_nfences: how many fences this backend's transaction holds.
 */
int
lq_grants_nfences(void)
{
	return lq_nfences;
}

/*
 * lq_grants_release_fences takes this backend's fences off again at the
 * end of its transaction; true if there were any (the worker may be
 * waiting for them).
 */
bool
lq_grants_release_fences(void)
{
	int			i;

	if (lq_nfences == 0)
		return false;
	LWLockAcquire(lq_grants_lock, LW_SHARED);
	for (i = 0; i < lq_nfences; i++)
	{
		LqSessionGrant *e = hash_search(lq_grants, &lq_fences[i], HASH_FIND,
										NULL);
		uint32		old;

		if (e == NULL)
			continue;			/* removed by lq_grants_clear */
		old = pg_atomic_read_u32(&e->fences);
		while (old > 0 &&
			   !pg_atomic_compare_exchange_u32(&e->fences, &old, old - 1))
			;
	}
	LWLockRelease(lq_grants_lock);
	lq_nfences = 0;
	return true;
}

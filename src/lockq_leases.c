/*-------------------------------------------------------------------------
 *
 * lockq_leases.c
 *		Leased grants a session may release by itself: the quick release
 *		of a grant with an owner.
 *
 * A release by token is a request to the lock server like any other, and
 * the releasing session used to sleep until the lock server's batch was
 * published: one process switch there and one back, per release.  A
 * session-bound lock avoids that (lockq_grants.c, quick release).  This
 * table does the same for a leased grant whose release may be shown
 * before the lock server has written it: one whose lock is unsettled with
 * a fence_ttl that covers the grant's ttl, that unsettled row flushed (see
 * lockq_ledger.c).  After a crash such a grant is ended whether or not its
 * release survived, so acknowledging the release first breaks no promise.
 *
 * The table is a shared hash keyed by lock id (a lock has at most one
 * current grant), with room for LQ_LEASES_PER_BACKEND entries per backend,
 * under one LWLock.  It is only a cache: a grant that is not in it is
 * released the normal way.
 *
 * Writers.  The lock server puts a grant in when a batch that made or
 * renewed it is published (lq_leases_put) and takes it out when a batch
 * that ended it is published (lq_leases_drop).  While a batch ends a grant,
 * for whatever reason, the entry is marked ending first, under the LWLock
 * (lq_leases_begin_end), so that no session can release it in the
 * meantime; and before an unsettled lock settles, its entry goes
 * (lq_leases_revoke).  A backend marks an entry released
 * (lq_leases_mark_released): that mark is the release.  From then on
 * lockq_holds answers false for the token (lq_leases_is_released) and the
 * lock server treats the grant as released; the backend then puts the
 * release in the arrival ring, where the lock server applies it in its
 * turn.  A lock server that starts (or rebuilds its state after a failed
 * batch) empties the table and ends the grants marked released
 * (lq_leases_reset): their releases were acknowledged.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_leases.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"

#include "lockq_leases.h"

#define LQ_LEASES_TRANCHE		"lockq leases"
#define LQ_LEASES_PER_BACKEND	4

typedef struct LqLeaseEntry
{
	char		lock_id[LQ_MAX_ID_LEN + 1]; /* hash key, must be first */
	int64		token;
	char		owner[LQ_MAX_OWNER_LEN + 1];
	Oid			role;
	int64		expires;
	bool		ending;			/* a batch not yet published ends it */
	bool		released;		/* released by a session; the lock server
								 * has yet to end it */
} LqLeaseEntry;

static HTAB *lq_leases = NULL;
static LWLock *lq_leases_lock = NULL;

static int
lq_leases_max(void)
{
	return LQ_LEASES_PER_BACKEND * MaxBackends;
}

Size
lq_leases_shmem_size(void)
{
	return hash_estimate_size(lq_leases_max(), sizeof(LqLeaseEntry));
}

void
lq_leases_shmem_request(void)
{
	RequestNamedLWLockTranche(LQ_LEASES_TRANCHE, 1);
}

/*
 * lq_leases_shmem_startup creates or attaches to the table.  Called with
 * AddinShmemInitLock held; every entry is allocated up front.
 */
void
lq_leases_shmem_startup(void)
{
	HASHCTL		info;

	lq_leases_lock = &(GetNamedLWLockTranche(LQ_LEASES_TRANCHE))->lock;
	memset(&info, 0, sizeof(info));
	info.keysize = LQ_MAX_ID_LEN + 1;
	info.entrysize = sizeof(LqLeaseEntry);
	lq_leases = ShmemInitHash("lockq quick leases",
							  lq_leases_max(), lq_leases_max(),
							  &info, HASH_ELEM | HASH_STRINGS);
}

/*
 * lq_leases_mark_released releases the grant of lock_id held by owner
 * (under token, if has_token) when this table allows it: the grant is in
 * it, not ending, not released yet, unexpired at now, and of the caller's
 * role.  Returns true with *released set to the grant's token when the
 * mark is made: that is the release, which the caller must then queue for
 * the lock server.  False changes nothing: the normal path decides (an
 * administrator's release of another role's grant among others).
 */
bool
lq_leases_mark_released(const char *lock_id, const char *owner,
						bool has_token, int64 token, Oid role, int64 now,
						int64 *released)
{
	LqLeaseEntry *e;
	bool		done = false;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && !e->ending && !e->released && e->expires > now &&
		(!has_token || e->token == token) &&
		e->role == role && strcmp(e->owner, owner) == 0)
	{
		e->released = true;
		*released = e->token;
		done = true;
	}
	LWLockRelease(lq_leases_lock);
	return done;
}

/*
 * lq_leases_is_released: was this grant released by a session, and has the
 * lock server not yet ended it?  lockq_holds answers false for it.
 */
bool
lq_leases_is_released(const char *lock_id, int64 token)
{
	LqLeaseEntry *e;
	bool		released = false;

	LWLockAcquire(lq_leases_lock, LW_SHARED);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token)
		released = e->released;
	LWLockRelease(lq_leases_lock);
	return released;
}

/*
 * lq_leases_collect returns (palloc'd, *n of them) the grants that
 * sessions released and the lock server has not yet ended, and with empty
 * removes every entry.
 */
static LqLeaseRef *
lq_leases_collect(int *n, bool empty)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	LqLeaseRef *refs;

	*n = 0;
	LWLockAcquire(lq_leases_lock, empty ? LW_EXCLUSIVE : LW_SHARED);
	refs = palloc(sizeof(LqLeaseRef) * Max(hash_get_num_entries(lq_leases), 1));
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->released)
		{
			strlcpy(refs[*n].lock_id, e->lock_id, sizeof(refs[*n].lock_id));
			refs[*n].token = e->token;
			(*n)++;
		}
		if (empty)
			hash_search(lq_leases, e->lock_id, HASH_REMOVE, NULL);
	}
	LWLockRelease(lq_leases_lock);
	return refs;
}

/*
 * lq_leases_released returns the grants that sessions released and the
 * lock server has not yet ended: their rows are still in lockq.owners, and
 * the views leave them out.
 */
LqLeaseRef *
lq_leases_released(int *n)
{
	return lq_leases_collect(n, false);
}

/*
 * lq_leases_put enters a grant that may be released quickly, or moves its
 * lease end (a renewal).  Lock server only, when the batch that made or
 * renewed the grant is published.  When the table is full the grant is
 * left out: its release takes the normal path.
 */
void
lq_leases_put(const char *lock_id, int64 token, const char *owner, Oid role,
			  int64 expires)
{
	LqLeaseEntry *e;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	/* never past the entries allocated for it (a shared hash would grow) */
	if (e == NULL && hash_get_num_entries(lq_leases) < lq_leases_max())
	{
		/* publishing must not fail: no error even if that were wrong */
		e = hash_search(lq_leases, lock_id, HASH_ENTER_NULL, NULL);
		if (e != NULL)
			e->token = 0;
	}
	if (e != NULL && e->token != token)
	{
		e->token = token;
		strlcpy(e->owner, owner, sizeof(e->owner));
		e->role = role;
		e->ending = false;
		e->released = false;
	}
	if (e != NULL)
		e->expires = expires;
	LWLockRelease(lq_leases_lock);
}

/*
 * lq_leases_drop takes a grant out: the batch that ended it, or that made
 * it ineligible, is published.  Lock server only.
 */
void
lq_leases_drop(const char *lock_id, int64 token)
{
	LqLeaseEntry *e;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token)
		hash_search(lq_leases, lock_id, HASH_REMOVE, NULL);
	LWLockRelease(lq_leases_lock);
}

/*
 * lq_leases_begin_end marks the grant ending, so that no session releases
 * it while the batch that ends it runs, and says whether a session had
 * released it already.  Lock server only, inside a batch; the entry goes
 * when the batch is published, or with lq_leases_reset if it fails.
 */
bool
lq_leases_begin_end(const char *lock_id, int64 token)
{
	LqLeaseEntry *e;
	bool		released = false;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token)
	{
		e->ending = true;
		released = e->released;
	}
	LWLockRelease(lq_leases_lock);
	return released;
}

/*
 * lq_leases_revoke takes a lock's grant out of the table before the lock
 * settles (its unsettled row is deleted), since a release acknowledged
 * after that could be lost in a crash.  Returns false, and changes
 * nothing, if a session has released the grant already: the lock must not
 * settle before the lock server has applied that release.  Lock server
 * only.
 */
bool
lq_leases_revoke(const char *lock_id)
{
	LqLeaseEntry *e;
	bool		revoked = true;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->released)
		revoked = false;
	else if (e != NULL)
		hash_search(lq_leases, lock_id, HASH_REMOVE, NULL);
	LWLockRelease(lq_leases_lock);
	return revoked;
}

/*
 * lq_leases_revoke_all takes every grant out of the table before the wide
 * marker settles (any of them may rely on it), unless a session has
 * released one that the lock server has not yet ended: then it returns
 * false and changes nothing.  Lock server only.
 */
bool
lq_leases_revoke_all(void)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	bool		released = false;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
		released |= e->released;
	if (!released)
	{
		hash_seq_init(&seq, lq_leases);
		while ((e = hash_seq_search(&seq)) != NULL)
			hash_search(lq_leases, e->lock_id, HASH_REMOVE, NULL);
	}
	LWLockRelease(lq_leases_lock);
	return !released;
}

/*
 * lq_leases_reset empties the table and returns (palloc'd, *n of them) the
 * grants that sessions released and the lock server had not yet ended: the
 * caller, a lock server loading its state, ends them.  Everything else is
 * put back by the batches that renew grants or make new ones.
 */
LqLeaseRef *
lq_leases_reset(int *n)
{
	return lq_leases_collect(n, true);
}

/*
 * lq_leases_clear empties the table: the extension was dropped, and its
 * grants with it.  Lock server only.
 */
void
lq_leases_clear(void)
{
	int			n;

	pfree(lq_leases_reset(&n));
}

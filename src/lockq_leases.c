/*-------------------------------------------------------------------------
 *
 * lockq_leases.c
 *		Leased grants a session may release by itself: the quick release
 *		of a grant with an owner.
 *
 * A release by token is a request to the lock server like any other, and
 * the releasing session used to sleep until the lock server's batch was
 * published: one process switch there and one back, per release.  A
 * session-bound lock avoids that (lockq_session.c, quick release).  This
 * table does the same for a leased grant whose release may be shown
 * before the lock server has written it: one whose lock is unsettled with
 * a fence_ttl that covers the grant's ttl, that unsettled row flushed (see
 * lockq_durability.c).  After a crash such a grant is ended whether or not its
 * release survived, so acknowledging the release first breaks no promise.
 *
 * The table is a shared hash keyed by lock id (a lock has at most one
 * current grant), with room for LQ_LEASES_PER_BACKEND entries per backend,
 * under one LWLock.  For most grants it is only a cache: a grant that is
 * not in it is released the normal way.
 *
 * Grants without a row.  A grant that such a marker covers for its lease
 * as well as its end needs no lockq.owners row either (a crash ends it
 * whether or not the row survives), and the lock server keeps it without
 * one for its first lockq.grant_row_delay (lockq_rules.c, lq_grant): then
 * its entry, marked rowless, is its only record outside the lock server.
 * Such an entry is not revoked; the views list it (lq_leases_rowless); and
 * lockq_holds fences the grant here, counting the fence in the entry
 * (lq_leases_fence) until the transaction ends.  The lock server reads
 * that count in the same critical section that marks the entry ending
 * (lq_leases_begin_end) and holds the hand-off back while it is not zero,
 * as it does for a row that a fenced transaction has locked.  So the entry
 * of a grant that had no row stays while the grant is held, even after it
 * got its row: closed to releases if the grant is no longer covered.
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
 * turn.  A lock server that rebuilds its state with shared memory intact
 * (after a failed batch, or a restart of its own) takes back the grants
 * without a row and the entries with fences from the table, ends the
 * grants marked released (their releases were acknowledged), and empties
 * the rest (lq_leases_reload).
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
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lockq_leases.h"
#include "lockq_shmem.h"

#define LQ_LEASES_TRANCHE		"lockq leases"
#define LQ_LEASES_PER_BACKEND	4

/*
 * An entry of the table.
 *
 * Locking: the table, every field of its entries and LqLeasesEnded are
 * under lq_leases_lock: taken exclusively to enter, remove or change an
 * entry, shared to read one.  The exception is fences, an atomic counter
 * that backends change while they hold the LWLock shared (lq_leases_fence
 * adds a fence, lq_leases_release_fences takes it off); the lock server
 * reads it holding the LWLock exclusively (lq_leases_begin_end,
 * lq_leases_revoke, lq_leases_reload), so that no fence is taken while it
 * marks the entry ending or takes it out.
 *
 * Writers: the lock server (everything, see "Writers" above); a backend
 * sets released on an entry it may release (lq_leases_mark_released).
 */
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
	bool		rowless;		/* no row in lockq.owners: this entry is the
								 * grant's only record outside the lock
								 * server */
	int64		acquired;
	int64		ttl;
	pg_atomic_uint32 fences;	/* transactions fenced on a rowless grant
								 * (lockq_holds) */
} LqLeaseEntry;

/* This backend's fences on rowless grants, until its transaction ends. */
typedef struct LqLeaseFence
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int64		token;
} LqLeaseFence;

static LqLeaseFence *lq_my_fences = NULL;
static int	lq_my_nfences = 0;
static int	lq_my_maxfences = 0;

/*
 * The tokens of the last LQ_ENDED_MAX grants sessions released that the
 * lock server has taken out of the table, under lq_leases_lock.  A view
 * whose snapshot was taken before the batch that deleted such a grant's
 * row committed still sees the row, but may read the table after the entry
 * is gone: it leaves these tokens out too (tokens are never reused, so a
 * token whose row is gone filters nothing).
 */
#define LQ_ENDED_MAX			1024
typedef struct LqLeasesEnded
{
	int			next;			/* where the next token goes */
	int			n;				/* how many are filled */
	int64		token[LQ_ENDED_MAX];
} LqLeasesEnded;

static HTAB *lq_leases = NULL;
static LWLock *lq_leases_lock = NULL;
static LqLeasesEnded *lq_leases_ended = NULL;

static int
lq_leases_max(void)
{
	return LQ_LEASES_PER_BACKEND * MaxBackends;
}

/*
 * lq_leases_capacity: how many grants of its locks a lock server may offer
 * to the table; it offers no more, so that a grant kept without its row
 * always has room.  The table is shared, so each of the lock servers has an
 * equal share of it: together they never offer more than it holds (with a
 * share each of the whole, two lock servers filled it, and a grant then
 * kept without a row had no entry, its only record: lockq_holds said false
 * to its holder, and a restarted lock server would not know of it).
 */
int
lq_leases_capacity(void)
{
	return lq_leases_max() / lq_shared->nservers;
}

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * lq_leases_shmem_request asks for the table's shared memory and its
 * LWLock.
 */
static void
lq_leases_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(hash_estimate_size(lq_leases_max(),
													   sizeof(LqLeaseEntry)),
									sizeof(LqLeasesEnded)));
	RequestNamedLWLockTranche(LQ_LEASES_TRANCHE, 1);
}

/*
 * lq_leases_shmem_startup creates or attaches to the table; every entry is
 * allocated up front.
 */
static void
lq_leases_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	lq_leases_lock = &(GetNamedLWLockTranche(LQ_LEASES_TRANCHE))->lock;
	lq_leases_ended = ShmemInitStruct("lockq ended quick leases",
									  sizeof(LqLeasesEnded), &found);
	if (!found)
		memset(lq_leases_ended, 0, sizeof(LqLeasesEnded));
	memset(&info, 0, sizeof(info));
	info.keysize = LQ_MAX_ID_LEN + 1;
	info.entrysize = sizeof(LqLeaseEntry);
	lq_leases = ShmemInitHash("lockq quick leases",
							  lq_leases_max(), lq_leases_max(),
							  &info, HASH_ELEM | HASH_STRINGS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * lq_leases_init_hooks installs the shared-memory hooks, chaining whatever
 * was there.
 */
void
lq_leases_init_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lq_leases_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lq_leases_shmem_startup;
}

/*
 * lq_leases_mark_released releases the grant of lock_id held by owner
 * (under token, if has_token) when this table allows it: the grant is in
 * it, not ending, not released yet, unexpired at now (an entry closed to
 * releases has a lease end of 0), and of the caller's role.  Returns true with *released set to the grant's token when the
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
 * lq_leases_released returns (palloc'd, *n of them) the tokens of the
 * grants that sessions released and the lock server has not yet ended,
 * whose rows may still be in lockq.owners, and of the last ones it ended
 * (LqLeasesEnded): the views leave them out.
 */
int64 *
lq_leases_released(int *n)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	int64	   *tokens;

	*n = 0;
	LWLockAcquire(lq_leases_lock, LW_SHARED);
	tokens = palloc(sizeof(int64) * (hash_get_num_entries(lq_leases) +
									 lq_leases_ended->n + 1));
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->released)
			tokens[(*n)++] = e->token;
	memcpy(tokens + *n, lq_leases_ended->token,
		   sizeof(int64) * lq_leases_ended->n);
	*n += lq_leases_ended->n;
	LWLockRelease(lq_leases_lock);
	return tokens;
}

/*
 * lq_leases_remove takes entry e out of the table, remembering its token
 * if a session released it (LqLeasesEnded).  Expects lq_leases_lock held
 * exclusively.
 */
static void
lq_leases_remove(LqLeaseEntry *e)
{
	if (e->released)
	{
		lq_leases_ended->token[lq_leases_ended->next] = e->token;
		lq_leases_ended->next = (lq_leases_ended->next + 1) % LQ_ENDED_MAX;
		lq_leases_ended->n = Min(lq_leases_ended->n + 1, LQ_ENDED_MAX);
	}
	hash_search(lq_leases, e->lock_id, HASH_REMOVE, NULL);
}

/*
 * lq_leases_put enters a grant that may be released quickly, or moves its
 * lease end (a renewal).  Lock server only, when the batch that made or
 * renewed the grant is published.  When the table is full the grant is
 * left out: its release takes the normal path.
 */
void
lq_leases_put(const char *lock_id, int64 token, const char *owner, Oid role,
			  int64 acquired, int64 ttl, int64 expires, bool rowless)
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
		e->acquired = acquired;
		e->ttl = ttl;
		pg_atomic_init_u32(&e->fences, 0);
	}
	if (e != NULL)
	{
		e->expires = expires;
		e->rowless = rowless;
	}
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
		lq_leases_remove(e);
	LWLockRelease(lq_leases_lock);
}

/*
 * lq_leases_begin_end marks the grant ending, so that no session releases
 * it while the batch that ends it runs, and says whether a session had
 * released it already.  Lock server only, inside a batch; the entry goes
 * when the batch is published, or with lq_leases_reload if it fails.
 */
bool
lq_leases_begin_end(const char *lock_id, int64 token, uint32 *fences)
{
	LqLeaseEntry *e;
	bool		released = false;

	*fences = 0;
	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token)
	{
		e->ending = true;
		released = e->released;
		/* in the same critical section as the mark: see lq_leases_fence */
		*fences = pg_atomic_read_u32(&e->fences);
	}
	LWLockRelease(lq_leases_lock);
	return released;
}

/*
 * lq_leases_fences: how many transactions are still fenced on this rowless
 * grant (its hand-off waits for none to be left).  Lock server only.
 */
uint32
lq_leases_fences(const char *lock_id, int64 token)
{
	LqLeaseEntry *e;
	uint32		n = 0;

	LWLockAcquire(lq_leases_lock, LW_SHARED);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token)
		n = pg_atomic_read_u32(&e->fences);
	LWLockRelease(lq_leases_lock);
	return n;
}

/*
 * lq_leases_fence is lockq_holds for a grant without a row: LQ_HELD_UNKNOWN
 * if the table has no rowless grant of lock_id under token (the caller asks
 * lockq.owners), LQ_HELD_NO if it has one that is not held at now (ending,
 * released or run out), LQ_HELD_FENCED if it is held and the caller's
 * transaction is now fenced on it until it ends (lq_leases_release_fences),
 * LQ_HELD_UNFENCED if it is held but role may not fence it (only the
 * grant's own role, or an administrator, may: as lq_session_holds).  Room
 * for the fence is made first: nothing may fail once it is counted.  The LWLock, shared here and
 * exclusive where the lock server marks the grant ending, orders the two:
 * either the fence is counted before the mark, and the lock server sees it
 * and holds the hand-off back, or the mark comes first and the answer is
 * false.
 */
int
lq_leases_fence(const char *lock_id, int64 token, int64 now, Oid role,
				bool admin)
{
	LqLeaseEntry *e;
	LqHeld		held = LQ_HELD_UNKNOWN;

	if (lq_my_nfences == lq_my_maxfences)
	{
		int			n = Max(8, lq_my_maxfences * 2);

		lq_my_fences = lq_my_fences == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(LqLeaseFence)) :
			repalloc(lq_my_fences, n * sizeof(LqLeaseFence));
		lq_my_maxfences = n;
	}

	LWLockAcquire(lq_leases_lock, LW_SHARED);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	if (e != NULL && e->token == token && e->rowless)
	{
		if (e->ending || e->released || e->expires <= now)
			held = LQ_HELD_NO;
		else if (e->role != role && !admin)
			held = LQ_HELD_UNFENCED;
		else
		{
			held = LQ_HELD_FENCED;
			pg_atomic_fetch_add_u32(&e->fences, 1);
		}
	}
	LWLockRelease(lq_leases_lock);
	if (held == LQ_HELD_FENCED)
	{
		strlcpy(lq_my_fences[lq_my_nfences].lock_id, lock_id, LQ_MAX_ID_LEN + 1);
		lq_my_fences[lq_my_nfences++].token = token;
	}
	return held;
}

/*
 * lq_leases_release_fences takes this backend's fences on rowless grants
 * off (its transaction ended).  Returns whether there were any.
 */
bool
lq_leases_release_fences(void)
{
	int			i;

	if (lq_my_nfences == 0)
		return false;
	LWLockAcquire(lq_leases_lock, LW_SHARED);
	for (i = 0; i < lq_my_nfences; i++)
	{
		LqLeaseEntry *e = hash_search(lq_leases, lq_my_fences[i].lock_id,
									  HASH_FIND, NULL);

		if (e != NULL && e->token == lq_my_fences[i].token &&
			pg_atomic_read_u32(&e->fences) > 0)
			pg_atomic_fetch_sub_u32(&e->fences, 1);
	}
	LWLockRelease(lq_leases_lock);
	lq_my_nfences = 0;
	return true;
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
	/* not while the entry is a grant's only record, or fenced */
	if (e != NULL && (e->released || e->rowless ||
					  pg_atomic_read_u32(&e->fences) > 0))
		revoked = false;
	else if (e != NULL)
		lq_leases_remove(e);
	LWLockRelease(lq_leases_lock);
	return revoked;
}

/*
 * lq_leases_revoke_all takes out of the table, before the wide marker
 * settles, every grant of the calling lock server's locks (lq_shmem_mine)
 * that may rely on it: those that own_covers
 * (lockq_durability.c: its lock's own marker covers its lease and its
 * end) says are not covered otherwise.  Returns false if any of those cannot
 * go yet (a session released it and the lock server has not yet ended it, a
 * transaction is fenced on it, or it has no row: *rowless is then set),
 * and then takes nothing out.  Lock server only.
 */
bool
lq_leases_revoke_all(bool (*own_covers) (const char *lock_id, int64 expires,
										 int64 ttl),
					 bool *rowless)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	bool		blocked = false;

	*rowless = false;
	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (!lq_shmem_mine(e->lock_id) ||
			own_covers(e->lock_id, e->expires, e->ttl))
			continue;
		*rowless |= e->rowless;
		blocked |= e->released || e->rowless ||
			pg_atomic_read_u32(&e->fences) > 0;
	}
	if (!blocked)
	{
		hash_seq_init(&seq, lq_leases);
		while ((e = hash_seq_search(&seq)) != NULL)
			if (lq_shmem_mine(e->lock_id) &&
				!own_covers(e->lock_id, e->expires, e->ttl))
				lq_leases_remove(e);
	}
	LWLockRelease(lq_leases_lock);
	return !blocked;
}

/*
 * lq_leases_entry_covered: is lock_id's entry (if any) covered by the
 * callback (lockq_durability.c: the wide marker covers its lease and its
 * end), so that its lock's own marker may settle without taking it out?
 */
bool
lq_leases_entry_covered(const char *lock_id,
						bool (*covers) (const char *lock_id, int64 expires,
										int64 ttl))
{
	LqLeaseEntry *e;
	bool		covered;

	LWLockAcquire(lq_leases_lock, LW_SHARED);
	e = hash_search(lq_leases, lock_id, HASH_FIND, NULL);
	covered = e != NULL && covers(lock_id, e->expires, e->ttl);
	LWLockRelease(lq_leases_lock);
	return covered;
}

/* lq_lease_grant_copy copies what a reader needs of entry e into *x. */
static void
lq_lease_grant_copy(LqLeaseGrant *x, const LqLeaseEntry *e)
{
	strlcpy(x->lock_id, e->lock_id, sizeof(x->lock_id));
	x->token = e->token;
	strlcpy(x->owner, e->owner, sizeof(x->owner));
	x->role = e->role;
	x->acquired = e->acquired;
	x->ttl = e->ttl;
	x->expires = e->expires;
	x->released = e->released;
	x->rowless = e->rowless;
}

/*
 * lq_leases_rowless returns (palloc'd, *n of them) the current grants kept
 * without a row in lockq.owners, for the views.
 */
LqLeaseGrant *
lq_leases_rowless(int *n)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	LqLeaseGrant *g;

	*n = 0;
	LWLockAcquire(lq_leases_lock, LW_SHARED);
	g = palloc0(sizeof(LqLeaseGrant) * Max(hash_get_num_entries(lq_leases), 1));
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (!e->rowless || e->ending || e->released)
			continue;
		lq_lease_grant_copy(&g[(*n)++], e);
	}
	LWLockRelease(lq_leases_lock);
	return g;
}

/*
 * lq_leases_reload is for a lock server that rebuilds its state while
 * shared memory stayed (a restart of the lock server, a failed batch).  It
 * returns (palloc'd, *n of them) the grants of its locks (lq_shmem_mine)
 * that the rebuilt state must know of from here: those kept without a row
 * (the entry is their only record), those with fences left (taken while
 * they had no row), and those sessions released; it keeps the entries of
 * the first two and removes every other of its locks.
 * An entry marked ending comes back released: whether or not that end was
 * published, ending it (again) keeps every promise.  A released grant
 * without a row and without fences is not kept: nothing holds it any more,
 * and the batch that ended it may have committed a grant of its lock to
 * somebody else (its successor publishes that batch, lq_outbox_resolve,
 * but only the lock server that ran it could drop the entry).
 */
LqLeaseGrant *
lq_leases_reload(int *n)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;
	LqLeaseGrant *g;

	*n = 0;
	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	g = palloc0(sizeof(LqLeaseGrant) * Max(hash_get_num_entries(lq_leases), 1));
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		bool		keep;

		if (!lq_shmem_mine(e->lock_id))
			continue;
		if (e->ending)
			e->released = true;
		e->ending = false;
		keep = (e->rowless && !e->released) ||
			pg_atomic_read_u32(&e->fences) > 0;
		if (keep || e->released)
		{
			lq_lease_grant_copy(&g[*n], e);
			g[(*n)++].kept = keep;
		}
		if (!keep)
			lq_leases_remove(e);
	}
	LWLockRelease(lq_leases_lock);
	return g;
}

/*
 * lq_leases_clear empties the table of the calling lock server's locks: the
 * extension was dropped, and its grants with it.  Lock server only.
 */
void
lq_leases_clear(void)
{
	HASH_SEQ_STATUS seq;
	LqLeaseEntry *e;

	LWLockAcquire(lq_leases_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, lq_leases);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (lq_shmem_mine(e->lock_id))
			hash_search(lq_leases, e->lock_id, HASH_REMOVE, NULL);
	LWLockRelease(lq_leases_lock);
}

/*-------------------------------------------------------------------------
 *
 * lockq_fastpath.c
 *		Session-bound grants a backend makes by itself: the fast path.
 *
 * A session-bound lockq_get or lockq_try of a lock nobody holds, waits for
 * or asks for needs no decision of the lock server: the backend can grant
 * it in shared memory, as PostgreSQL's lock manager grants a weak lock on
 * its fast path, and release it again the same way.  Then a session-bound
 * lock that nobody else wants costs no process switch at all, as
 * pg_advisory_lock does.  The lock server learns of such a grant only when
 * someone else asks for its lock: it then adopts the grant (takes it out of
 * this table into its own state) before it applies the request, so the
 * holder keeps it and the request queues behind it, as it would have had
 * the lock server made the grant.
 *
 * What a backend must know to grant by itself: that the lock server has
 * nothing of the lock (no holder, no queue, no delay), that no request for
 * it is on its way to the lock server, and that no other backend granted
 * it this way.  Lock ids hash to LQ_FAST_BUCKETS buckets; per bucket,
 *	- known counts the locks of the bucket that the lock server has in its
 *	  state (lq_fastpath_adopt, when it makes one; lq_fastpath_forget, when a
 *	  batch that dropped one is published: a batch that fails is undone by the
 *	  rebuild of the state, which counts again from zero);
 *	- inflight counts the calls of backends that sent a request about a lock
 *	  of the bucket and have not had their answer (lq_fastpath_claim before the
 *	  push, lq_fastpath_unclaim when the call is over, however it ends).
 * A backend grants only while both are zero for its lock's bucket and the
 * table has no grant of the lock; so a grant of this table never overtakes
 * a waiter, and never meets a grant the lock server made.  A request that
 * outlives its call (the call gave up) finds the grant adopted, which is
 * the order its caller saw.
 *
 * Locking: the table and known are under the bucket's partition LWLock
 * (LQ_FAST_PARTITIONS of them; bucket b is under lock b % partitions);
 * LqFastShared has the rules for each field.  The grant itself lives in
 * lockq_session.c's table too, entered visible, so that lockq_holds, the
 * views and a rebuilding lock server see it as any session-bound grant;
 * lock order: partition, then lockq_session.c's LWLock.  A release by its
 * holder removes both under the partition lock, unless a transaction is
 * fenced on it: then the normal quick release applies, and the lock server
 * adopts the grant to end it and hold the hand-off back.
 *
 * Tokens come from the shared counter below the durable ceiling
 * (lq_shmem_token_take); when the reserve is used up the backend falls back to
 * the lock server, which raises the ceiling.  While the lock server
 * rebuilds its state, and after a crash until every lock's delay is over,
 * the fast path is closed for its locks (ok[], one per lock server); the
 * lock server closes it under every partition lock, so that no grant is
 * half made, takes its locks' grants out of the table (they are in
 * lockq_session.c's and are loaded from there) and opens it again when its
 * state is loaded.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fastpath.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"

#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

#define LQ_FAST_TRANCHE		"lockq fast path"
#define LQ_FAST_PARTITIONS	64	/* LWLocks; a power of 2 */
#define LQ_FAST_BUCKETS		LQ_LOCK_BUCKETS /* a multiple of LQ_FAST_PARTITIONS */

StaticAssertDecl(LQ_FAST_BUCKETS % LQ_FAST_PARTITIONS == 0,
				 "a bucket's partition must be its hash's");

/*
 * The fast path's shared state, next to its table (lq_fast_table).
 *
 * Locking:
 *	- The table's entries and known[b] are under the partition LWLock of
 *	  their bucket (lq_fast_lock), taken exclusively by whoever reads or
 *	  changes them; the lock server takes every partition (lq_fast_lock_all)
 *	  to scan or empty the table.
 *	- inflight[], count and ok are atomic.  inflight[b] is changed by
 *	  backends without a lock and read under the bucket's partition lock by
 *	  a backend about to grant (a claim made after that read comes after
 *	  the grant).  count is changed with the table, under the partition
 *	  lock, and read without one (zero: nothing to look for).  A grant
 *	  being made is counted only when it is whole, so a zero read may miss
 *	  it: the lock server decides on such a read only what may come before
 *	  that grant (an answer that the lock is not held), and grants only a
 *	  lock it has entered (lq_fastpath_adopt with create, under the lock).
 *	  ok[i] is written by lock server i (closed under every partition
 *	  lock, lq_fastpath_stop) and read by backends (again) under the
 *	  partition lock before they grant or release a lock of its.
 *	- per_slot[s] is atomic: it is changed with the table, under the
 *	  partition lock of the grant concerned, and two partitions' locks do
 *	  not exclude each other (the session grants one lock while the lock
 *	  server adopts another of its grants); it is read without a lock (a
 *	  slot at its share, LQ_FAST_PER_BACKEND, takes the normal path; one
 *	  with none has nothing to adopt when its session ends).
 */
typedef struct LqFastShared
{
	pg_atomic_uint32 ok[LQ_MAX_SERVERS];	/* backends may grant and release
											 * the locks of lock server i
											 * here */
	pg_atomic_uint64 count;		/* grants in the table */
	pg_atomic_uint32 inflight[LQ_FAST_BUCKETS];
	int32		known[LQ_FAST_BUCKETS];
	pg_atomic_uint32 per_slot[FLEXIBLE_ARRAY_MEMBER];	/* grants of each slot */
} LqFastShared;

static LqFastShared *lq_fast = NULL;
static HTAB *lq_fast_table = NULL;
static LWLockPadded *lq_fast_locks = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static int
lq_fast_capacity(void)
{
	return LQ_FAST_PER_BACKEND * MaxBackends;
}

static Size
lq_fast_shared_size(void)
{
	return add_size(offsetof(LqFastShared, per_slot),
					mul_size(sizeof(pg_atomic_uint32), lq_shmem_nslots()));
}

static void
lq_fast_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(lq_fast_shared_size(),
									hash_estimate_size(lq_fast_capacity(),
													   sizeof(LqFastGrant))));
	RequestNamedLWLockTranche(LQ_FAST_TRANCHE, LQ_FAST_PARTITIONS);
}

/*
 * lq_fast_shmem_startup creates or attaches to the table and the counters.
 * A crash restart makes them anew: empty, and closed until the lock server
 * has loaded its state.
 */
static void
lq_fast_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	lq_fast = ShmemInitStruct("lockq fast path", lq_fast_shared_size(), &found);
	if (!found)
	{
		int			i;

		memset(lq_fast, 0, lq_fast_shared_size());
		for (i = 0; i < LQ_MAX_SERVERS; i++)
			pg_atomic_init_u32(&lq_fast->ok[i], 0);
		pg_atomic_init_u64(&lq_fast->count, 0);
		for (i = 0; i < LQ_FAST_BUCKETS; i++)
			pg_atomic_init_u32(&lq_fast->inflight[i], 0);
		for (i = 0; i < lq_shmem_nslots(); i++)
			pg_atomic_init_u32(&lq_fast->per_slot[i], 0);
	}
	lq_fast_locks = GetNamedLWLockTranche(LQ_FAST_TRANCHE);
	memset(&info, 0, sizeof(info));
	info.keysize = LQ_MAX_ID_LEN + 1;
	info.entrysize = sizeof(LqFastGrant);
	info.num_partitions = LQ_FAST_PARTITIONS;
	lq_fast_table = ShmemInitHash("lockq fast path grants",
								  lq_fast_capacity(), lq_fast_capacity(),
								  &info,
								  HASH_ELEM | HASH_STRINGS | HASH_PARTITION);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * lq_fastpath_init_hooks installs the shared-memory hooks, chaining whatever
 * was there.
 */
void
lq_fastpath_init_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lq_fast_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lq_fast_shmem_startup;
}

static inline uint32
lq_fast_hash(const char *lock_id)
{
	return get_hash_value(lq_fast_table, lock_id);
}

/*
 * lq_fast_ok: may backends grant and release locks of bucket here?  The
 * lock server of the bucket's locks (bucket modulo the lock servers, as in
 * lq_shmem_server_for) has opened the fast path for them.
 */
static inline bool
lq_fast_ok(uint32 bucket)
{
	return pg_atomic_read_u32(&lq_fast->ok[bucket % (uint32) lq_shared->nservers]) != 0;
}

static inline LWLock *
lq_fast_lock(uint32 hash)
{
	return &lq_fast_locks[hash % LQ_FAST_PARTITIONS].lock;
}

/*
 * lq_fastpath_claim is called before a request about lock_id goes to the lock
 * server: until lq_fastpath_unclaim, no backend grants a lock of its bucket by
 * itself.  Returns the claim (-1: none, for a request without a lock id).
 */
int
lq_fastpath_claim(const char *lock_id)
{
	uint32		bucket;

	if (lq_fast == NULL || lock_id == NULL || lock_id[0] == '\0')
		return -1;
	bucket = lq_fast_hash(lock_id) % LQ_FAST_BUCKETS;
	pg_atomic_fetch_add_u32(&lq_fast->inflight[bucket], 1);
	return (int) bucket;
}

/* lq_fastpath_unclaim takes a claim back: the call is over. */
void
lq_fastpath_unclaim(int claim)
{
	if (claim >= 0)
		pg_atomic_fetch_sub_u32(&lq_fast->inflight[claim], 1);
}

/*
 * lq_fastpath_grant grants lock_id to the session in slot slotno (pid,
 * session_start, role) with a lease of ttl_us from now, if the lock is free
 * and nobody is after it (see the top of the file), and returns its token;
 * 0 when the lock server must decide (also when the table, the session's
 * share of it or the token reserve is full).  Never raises.
 */
int64
lq_fastpath_grant(const char *lock_id, int slotno, int pid, int64 session_start,
				  Oid role, int64 ttl_us, int64 now)
{
	uint32		hash;
	uint32		bucket;
	LWLock	   *lock;
	LqFastGrant *e;
	int64		token = 0;

	if (lq_fast == NULL ||
		pg_atomic_read_u32(&lq_fast->per_slot[slotno]) >= LQ_FAST_PER_BACKEND)
		return 0;
	hash = lq_fast_hash(lock_id);
	bucket = hash % LQ_FAST_BUCKETS;
	if (!lq_fast_ok(bucket))
		return 0;
	lock = lq_fast_lock(hash);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (lq_fast_ok(bucket) && lq_fast->known[bucket] == 0 &&
		pg_atomic_read_u32(&lq_fast->inflight[bucket]) == 0 &&
		hash_search_with_hash_value(lq_fast_table, lock_id, hash, HASH_FIND,
									NULL) == NULL &&
		(token = lq_shmem_token_take()) > 0)
	{
		LqSessionGrant g;

		/* the grant is not counted yet: the lock server must not miss it */
		LQ_FAULT("fast-grant-checked");
		memset(&g, 0, sizeof(g));
		g.token = token;
		strlcpy(g.lock_id, lock_id, sizeof(g.lock_id));
		g.pid = pid;
		g.session_start = session_start;
		g.role = role;
		g.ttl = ttl_us;
		g.acquired = now;
		g.expires = now + ttl_us;
		e = NULL;
		if (lq_session_enter_fast(&g))
		{
			e = hash_search_with_hash_value(lq_fast_table, lock_id, hash,
											HASH_ENTER_NULL, NULL);
			if (e == NULL)
				lq_session_forget_fast(token);
		}
		if (e != NULL)
		{
			e->token = token;
			e->slotno = slotno;
			pg_atomic_fetch_add_u32(&lq_fast->per_slot[slotno], 1);
			pg_atomic_fetch_add_u64(&lq_fast->count, 1);
		}
		else
			token = 0;			/* a token unused: tokens may have gaps */
	}
	LWLockRelease(lock);
	return token;
}

/*
 * lq_fast_drop takes grant e (its lock id hashing to hash) out of the
 * table.  Expects e's partition lock held exclusively (or all of them).
 */
static void
lq_fast_drop(LqFastGrant *e, uint32 hash)
{
	pg_atomic_fetch_sub_u32(&lq_fast->per_slot[e->slotno], 1);
	hash_search_with_hash_value(lq_fast_table, e->lock_id, hash,
								HASH_REMOVE, NULL);
	pg_atomic_fetch_sub_u64(&lq_fast->count, 1);
}

/*
 * lq_fastpath_release releases the grant of lock_id under token if it is one
 * of this table's and nobody is fenced on it: it is gone from both tables
 * when this returns (LQ_FAST_RELEASED, or LQ_FAST_EXPIRED if its lease had
 * run out at now).  LQ_FAST_NOT_MINE: the normal path decides (the lock
 * server adopted the grant, or a transaction is fenced on it, or the fast
 * path is closed).
 */
LqFastRelease
lq_fastpath_release(const char *lock_id, int64 token, int64 now)
{
	uint32		hash;
	LWLock	   *lock;
	LqFastGrant *e;
	LqFastRelease r = LQ_FAST_NOT_MINE;

	if (lq_fast == NULL || pg_atomic_read_u64(&lq_fast->count) == 0)
		return LQ_FAST_NOT_MINE;
	hash = lq_fast_hash(lock_id);
	lock = lq_fast_lock(hash);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	e = hash_search_with_hash_value(lq_fast_table, lock_id, hash, HASH_FIND,
									NULL);
	if (e != NULL && e->token == token && lq_fast_ok(hash % LQ_FAST_BUCKETS))
	{
		bool		expired;

		if (lq_session_remove_fast(token, now, &expired))
		{
			r = expired ? LQ_FAST_EXPIRED : LQ_FAST_RELEASED;
			lq_fast_drop(e, hash);
		}
	}
	LWLockRelease(lock);
	return r;
}

/* lq_fastpath_count: how many grants the table holds (for lockq_stats). */
uint64
lq_fastpath_count(void)
{
	return lq_fast == NULL ? 0 : pg_atomic_read_u64(&lq_fast->count);
}

/*
 * lq_fastpath_adopt is the lock server's, when its state has nothing of
 * lock_id: it takes the grant of lock_id out of the table if there is one
 * (*adopted says which; true), and counts the lock as known when it is
 * about to make it (create, or a grant was adopted).  From then on no
 * backend grants the lock by itself until lq_fastpath_forget.
 */
bool
lq_fastpath_adopt(const char *lock_id, bool create, LqFastGrant *adopted)
{
	uint32		hash;
	LWLock	   *lock;
	LqFastGrant *e;

	if (!create && pg_atomic_read_u64(&lq_fast->count) == 0)
		return false;
	hash = lq_fast_hash(lock_id);
	lock = lq_fast_lock(hash);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	e = hash_search_with_hash_value(lq_fast_table, lock_id, hash, HASH_FIND,
									NULL);
	if (e != NULL)
	{
		memcpy(adopted, e, sizeof(LqFastGrant));
		lq_fast_drop(e, hash);
	}
	if (e != NULL || create)
		lq_fast->known[hash % LQ_FAST_BUCKETS]++;
	LWLockRelease(lock);
	return e != NULL;
}

/*
 * lq_fastpath_forget: the lock server no longer has lock_id in its state, and
 * the batch that dropped it is published.  Lock server only.
 */
void
lq_fastpath_forget(const char *lock_id)
{
	uint32		hash = lq_fast_hash(lock_id);
	LWLock	   *lock = lq_fast_lock(hash);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	Assert(lq_fast->known[hash % LQ_FAST_BUCKETS] > 0);
	lq_fast->known[hash % LQ_FAST_BUCKETS]--;
	LWLockRelease(lock);
}

static void
lq_fast_lock_all(void)
{
	int			i;

	for (i = 0; i < LQ_FAST_PARTITIONS; i++)
		LWLockAcquire(&lq_fast_locks[i].lock, LW_EXCLUSIVE);
}

static void
lq_fast_unlock_all(void)
{
	int			i;

	for (i = LQ_FAST_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(&lq_fast_locks[i].lock);
}

/*
 * lq_fastpath_adopt_slot takes every grant of the session in slot slotno of
 * the calling lock server's locks out of the table (its session ended) and
 * returns them (palloc'd LqFastGrant), counting their locks as known, as
 * lq_fastpath_adopt does: the caller makes them.  Lock server only.
 */
List *
lq_fastpath_adopt_slot(int slotno)
{
	HASH_SEQ_STATUS seq;
	LqFastGrant *e;
	List	   *out = NIL;

	if (pg_atomic_read_u32(&lq_fast->per_slot[slotno]) == 0)
		return NIL;
	lq_fast_lock_all();
	hash_seq_init(&seq, lq_fast_table);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		LqFastGrant *copy;

		if (e->slotno != slotno || !lq_shmem_mine(e->lock_id))
			continue;
		copy = palloc(sizeof(LqFastGrant));
		memcpy(copy, e, sizeof(LqFastGrant));
		out = lappend(out, copy);
		lq_fast->known[lq_fast_hash(e->lock_id) % LQ_FAST_BUCKETS]++;
		lq_fast_drop(e, lq_fast_hash(e->lock_id));
	}
	lq_fast_unlock_all();
	return out;
}

/*
 * lq_fastpath_stop closes the fast path for the calling lock server's locks
 * and takes their grants out of the table, for a lock server about to
 * (re)build its state: every grant of the table is in lockq_session.c's,
 * and is loaded from there.  None of its locks counts as known any more
 * (its buckets are those whose number modulo the lock servers' is its
 * own, lq_shmem_server_for); it counts again as it makes its locks.
 * Claims stay: they are the backends'.  Lock server only.
 */
void
lq_fastpath_stop(void)
{
	HASH_SEQ_STATUS seq;
	LqFastGrant *e;
	int			b;

	lq_fast_lock_all();
	pg_atomic_write_u32(&lq_fast->ok[lq_my_server_no], 0);
	hash_seq_init(&seq, lq_fast_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (lq_shmem_mine(e->lock_id))
			lq_fast_drop(e, lq_fast_hash(e->lock_id));
	for (b = lq_my_server_no; b < LQ_FAST_BUCKETS; b += lq_shared->nservers)
		lq_fast->known[b] = 0;
	lq_fast_unlock_all();
}

/*
 * lq_fastpath_start opens the fast path for the calling lock server's
 * locks: its state is loaded and counted, and no lock is delayed as a
 * whole.  Lock server only.
 */
void
lq_fastpath_start(void)
{
	pg_atomic_write_u32(&lq_fast->ok[lq_my_server_no], 1);
}

/*-------------------------------------------------------------------------
 *
 * lockq_shmem.c
 *		Shared memory: the sessions' request slots, the arrival ring that
 *		fixes the order in which the worker sees requests, and counters.
 *		(The session-bound grants have their own table: lockq_session.c.)
 *
 * Every session that uses lockq has exactly one slot (that of its
 * BackendId, index BackendId - 1, or a spare: lq_attach), so at most one
 * request per session is ever in flight.  A backend fills its slot, then
 * appends the slot number to its lock server's ring under that server's
 * mutex (LqServer); the order of the ring is the arrival order the lock
 * server serves, and so the FIFO order of the lock queues.  Ring entries
 * are only hints ("look at slot n", or for a quick release "look at the
 * oldest release of slot n"); the slot says what to do.  If the ring is ever full the backend sets
 * ring_overflow instead, and the worker scans all slots in arrival order.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sched.h>
#include <unistd.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_shmem.h"

LqShared   *lq_shared = NULL;
LqSlot	   *lq_slots = NULL;

/*
 * The lock server's own part of shared memory and its number; NULL and -1
 * in backends.
 */
LqServer   *lq_my_server = NULL;
int			lq_my_server_no = -1;

/*
 * What the lock servers stage for the slots (LqSlotStaged): one per slot and
 * lock server, slot by slot (lq_shmem_staged).
 */
static LqSlotStaged *lq_staged = NULL;

/*
 * The lock servers' parts (LqServer, each with its ring), one after another,
 * lq_server_stride bytes apart; both set with shared memory.
 */
static char *lq_servers = NULL;
static Size lq_server_stride = 0;

/* The lock raising the durable ceilings takes (lq_shmem_ceiling_lock). */
#define LQ_CEILING_TRANCHE	"lockq ceilings"
static LWLock *lq_ceiling_lock = NULL;

/* The held hints (lq_hint_*), LQ_HELD_HINTS of them. */
static LqHeldHint *lq_hints = NULL;

StaticAssertDecl(sizeof(LqHeldHint) == 128,
				 "a held hint is 128 bytes, its head in the first 64");
StaticAssertDecl(LQ_HINT_ID_LEN <= PG_UINT8_MAX,
				 "a held hint's id length fits its uint8");
StaticAssertDecl(LQ_HELD_HINTS == LQ_LOCK_BUCKETS,
				 "a held hint's lock ids are one lock server's, its only writer");

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static int	lq_spin_cpus(void);

/*
 * lq_shmem_nslots is the number of request slots: one per BackendId, and as
 * many spares (LQ_SLOTS_PER_BACKEND), for new sessions whose BackendId's
 * slot an ended session still holds (lockq_call.c, lq_attach).  MaxBackends
 * must be known: in a shmem request or startup hook, or later.
 */
int
lq_shmem_nslots(void)
{
	return LQ_SLOTS_PER_BACKEND * MaxBackends;
}

/*
 * Number of ring entries: a slot can have a request, its cancellation,
 * its session end and its quick releases outstanding at once, and a new
 * session in it may follow before the lock server has caught up.
 */
static int
lq_ring_size(void)
{
	return (4 + LQ_MAX_QUICK_RELEASES) * lq_shmem_nslots() + 64;
}

/* The number of lock servers (doc/design/scaling.md), fixed at server start. */
#define LQ_NSERVERS		lockq_lock_servers

StaticAssertDecl(LQ_GUC_MAX_SERVERS == LQ_MAX_SERVERS,
				 "lockq.lock_servers fits LqSlot.ends_left");

/* One lock server's part, its ring included, cache-line aligned. */
static Size
lq_server_size(void)
{
	return CACHELINEALIGN(add_size(offsetof(LqServer, ring),
								   mul_size(lq_ring_size(), sizeof(LqEntry))));
}

static Size
lq_shared_size(void)
{
	return add_size(CACHELINEALIGN(sizeof(LqShared)),
					mul_size(LQ_NSERVERS, lq_server_size()));
}

static Size
lq_slots_size(void)
{
	return mul_size(lq_shmem_nslots(), sizeof(LqSlot));
}

static Size
lq_staged_size(void)
{
	return mul_size(mul_size(lq_shmem_nslots(), LQ_NSERVERS),
					sizeof(LqSlotStaged));
}

static Size
lq_hints_size(void)
{
	return mul_size(LQ_HELD_HINTS, sizeof(LqHeldHint));
}

/*
 * lq_shmem_request asks for our shared memory.  MaxBackends is valid here
 * (the postmaster computes it before running the request hooks).
 */
static void
lq_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(add_size(add_size(add_size(lq_shared_size(),
													  lq_slots_size()),
											 add_size(lq_hints_size(),
													  lq_staged_size())),
									lq_fault_shmem_size()));
	RequestNamedLWLockTranche(LQ_CEILING_TRANCHE, 1);
}

/*
 * lq_shmem_startup creates or attaches to the shared state.  It runs in the
 * postmaster at start and after every crash restart, so a crash always
 * leaves a fresh, empty set of slots and a clock that must be set up again.
 */
static void
lq_shmem_startup(void)
{
	bool		found_shared;
	bool		found_slots;
	bool		found_hints;
	bool		found_staged;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);

	lq_shared = ShmemInitStruct("lockq shared state", lq_shared_size(),
								&found_shared);
	lq_servers = (char *) lq_shared + CACHELINEALIGN(sizeof(LqShared));
	lq_server_stride = lq_server_size();
	lq_slots = ShmemInitStruct("lockq request slots", lq_slots_size(),
							   &found_slots);
	lq_hints = ShmemInitStruct("lockq held hints", lq_hints_size(),
							   &found_hints);
	lq_staged = ShmemInitStruct("lockq staged outcomes", lq_staged_size(),
								&found_staged);
	lq_ceiling_lock = &(GetNamedLWLockTranche(LQ_CEILING_TRANCHE))->lock;
	lq_fault_shmem_startup();

	if (!found_shared)
	{
		int			i;

		memset(lq_shared, 0, lq_shared_size());
		lq_shared->ring_size = lq_ring_size();
		lq_shared->nslots = lq_shmem_nslots();
		lq_shared->nservers = LQ_NSERVERS;
		pg_atomic_init_u64(&lq_shared->next_arrival, 1);
		pg_atomic_init_u64(&lq_shared->token_high, 0);
		lq_shared->token_ceiling = 0;
		pg_atomic_init_u64(&lq_shared->fence_gen, 0);
		pg_atomic_init_u32(&lq_shared->spinners, 0);
		lq_shared->spin_cpus = lq_spin_cpus();
		pg_atomic_init_u64(&lq_shared->clock_last, 0);
		pg_atomic_init_u64(&lq_shared->clock_ceiling, 0);
		pg_atomic_init_u32(&lq_shared->clock_ready, 0);
		for (i = 0; i < LQ_STAT_COUNT; i++)
			pg_atomic_init_u64(&lq_shared->stats[i], 0);
		pg_atomic_init_u64(&lq_shared->queue_max, 0);
		pg_atomic_init_u32(&lq_shared->dropping_pid, 0);
		pg_atomic_init_u64(&lq_shared->stats_reset,
						   (uint64) GetCurrentTimestamp());
		for (i = 0; i < LQ_NSERVERS; i++)
		{
			LqServer   *sv = lq_shmem_server(i);

			SpinLockInit(&sv->mutex);
			SpinLockInit(&sv->wake_mutex);
			sv->worker_pid = 0;
			sv->worker_procno = -1;
			pg_atomic_init_u64(&sv->holders, 0);
			pg_atomic_init_u64(&sv->waiters, 0);
			pg_atomic_init_u64(&sv->delayed, 0);
			pg_atomic_init_u64(&sv->delay_max, 0);
			pg_atomic_init_u64(&sv->state_bytes, 0);
			pg_atomic_init_u64(&sv->longest_queue, 0);
			pg_atomic_init_u64(&sv->durable_wait_since, 0);
			pg_atomic_init_u64(&sv->ring_settled, 0);
			ConditionVariableInit(&sv->settled_cv);
		}
	}

	if (!found_slots)
	{
		int			i;

		memset(lq_slots, 0, lq_slots_size());
		for (i = 0; i < lq_shmem_nslots(); i++)
		{
			SpinLockInit(&lq_slots[i].mutex);
			lq_slots[i].state = LQ_SLOT_FREE;
			lq_slots[i].pgprocno = -1;
			ConditionVariableInit(&lq_slots[i].freed);
		}
	}

	if (!found_staged)
		memset(lq_staged, 0, lq_staged_size());

	if (!found_hints)
	{
		int			i;

		memset(lq_hints, 0, lq_hints_size());
		for (i = 0; i < LQ_HELD_HINTS; i++)
			pg_atomic_init_u32(&lq_hints[i].seq, 0);
	}

	LWLockRelease(AddinShmemInitLock);
}

/*
 * lq_shmem_init_hooks installs the hooks, chaining whatever was there.
 */
void
lq_shmem_init_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lq_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lq_shmem_startup;
}

/*
 * lq_shmem_ceiling_lock returns the LWLock under which the durable ceilings
 * are raised (lockq_durability.c).
 */
LWLock *
lq_shmem_ceiling_lock(void)
{
	return lq_ceiling_lock;
}

/*
 * lq_shmem_server returns lock server i's part of shared memory, 0 <= i <
 * lq_shared->nservers.
 */
LqServer *
lq_shmem_server(int i)
{
	Assert(i >= 0 && i < lq_shared->nservers);
	return (LqServer *) (lq_servers + (Size) i * lq_server_stride);
}

/*
 * lq_shmem_server_for returns the number of the lock server that serves
 * lock_id (NULL or empty: a request without a lock id, which lock server 0
 * serves): its bucket (LQ_LOCK_BUCKETS) modulo the number of lock servers.
 * The bucket is the fast path's (a string_hash of the id, which is its
 * hash_bytes), and SQL computes the same with hashtext(lock_id).
 */
int
lq_shmem_server_for(const char *lock_id)
{
	uint32		hash;

	if (lq_shared->nservers == 1 || lock_id == NULL || lock_id[0] == '\0')
		return 0;
	hash = hash_bytes((const unsigned char *) lock_id, strlen(lock_id));
	return (int) ((hash % LQ_LOCK_BUCKETS) % (uint32) lq_shared->nservers);
}

/*
 * lq_shmem_mine: does the calling lock server serve lock_id?  What a lock
 * server rebuilds, settles or clears of the shared tables of grants
 * (lockq_session.c, lockq_leases.c) is only its own locks'.  Lock server
 * only.
 */
bool
lq_shmem_mine(const char *lock_id)
{
	Assert(lq_my_server_no >= 0);
	return lq_shmem_server_for(lock_id) == lq_my_server_no;
}

/*
 * lq_shmem_server_of returns the lock server that slot slotno's current (or
 * last) request went to; the first before the slot's first request.  Read
 * without the slot's mutex: for the slot's own backend, which alone writes
 * it.
 */
LqServer *
lq_shmem_server_of(int slotno)
{
	Assert(slotno >= 0 && slotno < lq_shared->nslots);
	return lq_shmem_server(lq_slots[slotno].server);
}

/*
 * lq_shmem_staged returns what the calling lock server stages for slot
 * slotno (lockq_outbox.c).  Lock server only.
 */
LqSlotStaged *
lq_shmem_staged(int slotno)
{
	Assert(lq_my_server_no >= 0);
	Assert(slotno >= 0 && slotno < lq_shared->nslots);
	return &lq_staged[(Size) slotno * lq_shared->nservers + lq_my_server_no];
}

/*
 * lq_shmem_server_attach makes the calling lock server lock server i
 * (lq_my_server, lq_my_server_no), so far only for itself.  Lock server
 * only, once, first.
 */
void
lq_shmem_server_attach(int i)
{
	lq_my_server = lq_shmem_server(i);
	lq_my_server_no = i;
}

/*
 * lq_shmem_server_announce records the calling lock server's identity, so
 * that backends can wake and name it: once it is ready to serve.
 */
void
lq_shmem_server_announce(void)
{
	LqServer   *sv = lq_my_server;

	SpinLockAcquire(&sv->mutex);
	sv->worker_pid = MyProcPid;
	sv->worker_procno = MyProc->pgprocno;
	SpinLockRelease(&sv->mutex);
}

/*
 * lq_shmem_server_detach forgets the calling lock server's identity, if it
 * is still its own, as it exits; backends answered whom nobody has woken
 * yet are woken, and the lock server no longer counts as waiting for a
 * flush (an exit from that wait does not come back to lq_commit).
 */
void
lq_shmem_server_detach(void)
{
	LqServer   *sv = lq_my_server;

	if (sv == NULL)
		return;
	SpinLockAcquire(&sv->mutex);
	if (sv->worker_pid == MyProcPid)
	{
		sv->worker_pid = 0;
		sv->worker_procno = -1;
	}
	SpinLockRelease(&sv->mutex);
	lq_shmem_wakes_hand_on(NULL, 0);
	pg_atomic_write_u64(&sv->durable_wait_since, 0);
}

/*
 * lq_shmem_server_pid_of returns the process id of lock server i, 0 if it
 * does not run; lq_shmem_server_pid that of any running lock server.  Read
 * without a lock: a stale value is harmless where it is used (to tell
 * whether one runs, to name or signal it).
 */
int
lq_shmem_server_pid_of(int i)
{
	return *(volatile int *) &lq_shmem_server(i)->worker_pid;
}

int
lq_shmem_server_pid(void)
{
	int			i;

	for (i = 0; i < lq_shared->nservers; i++)
	{
		int			pid = lq_shmem_server_pid_of(i);

		if (pid != 0)
			return pid;
	}
	return 0;
}

/*
 * lq_shmem_server_gauges reads the gauges lock server i published after its
 * last batch, and what waits in its arrival ring (*queued: entries pushed
 * and not yet read; under its mutex, which orders the two positions).
 */
void
lq_shmem_server_gauges(int i, LqGauges *out, uint64 *queued)
{
	LqServer   *sv = lq_shmem_server(i);

	out->holders = pg_atomic_read_u64(&sv->holders);
	out->waiters = pg_atomic_read_u64(&sv->waiters);
	out->delayed = pg_atomic_read_u64(&sv->delayed);
	out->delay_max = pg_atomic_read_u64(&sv->delay_max);
	out->state_bytes = pg_atomic_read_u64(&sv->state_bytes);
	out->longest_queue = pg_atomic_read_u64(&sv->longest_queue);
	if (queued != NULL)
	{
		SpinLockAcquire(&sv->mutex);
		*queued = sv->ring_tail - sv->ring_head;
		SpinLockRelease(&sv->mutex);
	}
}

/*
 * lq_shmem_gauges adds up the gauges the lock servers published after
 * their last batches; the longest queue and the latest delay are those of
 * any.
 */
void
lq_shmem_gauges(LqGauges *out)
{
	int			i;

	memset(out, 0, sizeof(LqGauges));
	for (i = 0; i < lq_shared->nservers; i++)
	{
		LqGauges	g;

		lq_shmem_server_gauges(i, &g, NULL);
		out->holders += g.holders;
		out->waiters += g.waiters;
		out->delayed += g.delayed;
		out->delay_max = Max(out->delay_max, g.delay_max);
		out->state_bytes += g.state_bytes;
		out->longest_queue = Max(out->longest_queue, g.longest_queue);
	}
}

/* Lock server only: the ring position its last drain reached. */
static uint64 lq_ring_drained = 0;

/*
 * lq_shmem_ring_push appends an entry to the arrival ring of lock server
 * server (that of the slot's request or of the quick release's lock) and
 * stamps the slot with an arrival number, both under that lock server's
 * mutex so that the ring's order and the arrival numbers agree (the
 * numbers order the slots when the lock server has to scan them all).  The
 * caller must already have made the slot say what the lock server is to
 * do, and wakes it afterwards.
 */
void
lq_shmem_ring_push(int server, LqEntry entry)
{
	LqServer   *sv = lq_shmem_server(server);
	int			size = lq_shared->ring_size;

	SpinLockAcquire(&sv->mutex);
	lq_slots[lq_entry_slot(entry)].arrival =
		pg_atomic_fetch_add_u64(&lq_shared->next_arrival, 1);
	if (sv->ring_tail - sv->ring_head < (uint64) size)
	{
		sv->ring[sv->ring_tail % size] = entry;
		sv->ring_tail++;
	}
	else
		sv->ring_overflow = true;
	SpinLockRelease(&sv->mutex);
}

/*
 * lq_shmem_ring_drain moves up to max entries out of the lock server's own
 * ring into out[], oldest first, and reports (and clears) an overflow.
 * Lock server only.
 */
int
lq_shmem_ring_drain(LqEntry *out, int max, bool *overflow)
{
	LqServer   *sv = lq_my_server;
	int			size = lq_shared->ring_size;
	int			n = 0;

	SpinLockAcquire(&sv->mutex);
	while (n < max && sv->ring_head < sv->ring_tail)
	{
		out[n++] = sv->ring[sv->ring_head % size];
		sv->ring_head++;
	}
	*overflow = sv->ring_overflow;
	sv->ring_overflow = false;
	lq_ring_drained = sv->ring_head;
	SpinLockRelease(&sv->mutex);

	return n;
}

/*
 * lq_shmem_ring_adopt takes over the ring's drained position when a lock
 * server starts: what its predecessor drained but did not publish is still in
 * the slots, and the state's rebuild applies it before its first publish,
 * which then settles everything up to here (lq_shmem_ring_settled).  Starting
 * from 0 instead, the views waited for the ring to move (a second) until the
 * next request came.  Lock server only.
 */
void
lq_shmem_ring_adopt(void)
{
	SpinLockAcquire(&lq_my_server->mutex);
	lq_ring_drained = lq_my_server->ring_head;
	SpinLockRelease(&lq_my_server->mutex);
}

/*
 * lq_shmem_ring_settled says that every arrival drained so far has been
 * handled and its batch published (the lock server calls it after each
 * publish), and wakes the views waiting for that (lq_shmem_settle_arrivals).
 * Lock server only.
 */
void
lq_shmem_ring_settled(void)
{
	LqServer   *sv = lq_my_server;

	/* (it never goes back: a new lock server starts where its predecessor
	 * drained to, lq_shmem_ring_adopt) */
	if (pg_atomic_read_u64(&sv->ring_settled) >= lq_ring_drained)
		return;
	pg_atomic_write_u64(&sv->ring_settled, lq_ring_drained);
	ConditionVariableBroadcast(&sv->settled_cv);
}

/*
 * lq_shmem_settle_arrivals waits until every arrival in the rings when it
 * was called has been read and published by its lock server, waking each
 * first: a lazy arrival (lq_submit) may otherwise wait unread until the
 * grant it waits for ends, and a view must show it queued at once.
 * Bounded by LQ_SETTLE_WAIT_MS in all (a lock server that is down, blocked
 * or failing); then the view shows what is published.  Interruptible.
 */
void
lq_shmem_settle_arrivals(void)
{
	uint64		target[LQ_MAX_SERVERS] = {0};
	bool		running[LQ_MAX_SERVERS] = {0};
	TimestampTz end;
	int			i;

	for (i = 0; i < lq_shared->nservers; i++)
	{
		LqServer   *sv = lq_shmem_server(i);

		SpinLockAcquire(&sv->mutex);
		target[i] = sv->ring_tail;
		running[i] = sv->worker_procno >= 0;
		SpinLockRelease(&sv->mutex);
		if (running[i] && pg_atomic_read_u64(&sv->ring_settled) < target[i])
			lq_shmem_wake_server(sv);
	}

	end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LQ_SETTLE_WAIT_MS);
	for (i = 0; i < lq_shared->nservers; i++)
	{
		LqServer   *sv = lq_shmem_server(i);

		if (!running[i] || pg_atomic_read_u64(&sv->ring_settled) >= target[i])
			continue;
		ConditionVariablePrepareToSleep(&sv->settled_cv);
		while (pg_atomic_read_u64(&sv->ring_settled) < target[i])
		{
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
															   end);

			if (left <= 0)
				break;
			(void) ConditionVariableTimedSleep(&sv->settled_cv, left,
											   PG_WAIT_EXTENSION);
		}
		ConditionVariableCancelSleep();
	}
}

/*
 * lq_ring_pending: is anything waiting in the lock server's own ring (or
 * lost to an overflow)?  Taking the mutex is also the memory barrier that
 * pairs with lq_submit's: a hint changed before it is seen by an arrival
 * that pushed after it.  Lock server only.
 */
static bool
lq_ring_pending(void)
{
	LqServer   *sv = lq_my_server;
	bool		pending;

	SpinLockAcquire(&sv->mutex);
	pending = sv->ring_head < sv->ring_tail || sv->ring_overflow;
	SpinLockRelease(&sv->mutex);
	return pending;
}

/*
 * lq_shmem_wake_server sets lock server sv's latch, if it is running.  A
 * stale procno only causes a spurious wake-up of whoever has that PGPROC
 * now.
 */
void
lq_shmem_wake_server(LqServer *sv)
{
	int			procno;

	SpinLockAcquire(&sv->mutex);
	procno = sv->worker_procno;
	SpinLockRelease(&sv->mutex);

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * lq_shmem_wake_servers wakes every lock server that is running: for what
 * concerns them all (a fenced transaction's end, lockq_fences.c).
 */
void
lq_shmem_wake_servers(void)
{
	int			i;

	for (i = 0; i < lq_shared->nservers; i++)
		lq_shmem_wake_server(lq_shmem_server(i));
}

/*
 * lq_cgroup_quota reads a CFS bandwidth limit as whole CPUs: quota
 * and period from one file ("max 100000" or "200000 100000", cgroup v2's
 * cpu.max) or from two (cgroup v1's cpu.cfs_quota_us and
 * cpu.cfs_period_us, quota -1 for none).  INT_MAX where there is no limit
 * or the files cannot be read.
 */
static int
lq_cgroup_quota(const char *quota_path, const char *period_path)
{
	FILE	   *f;
	char		quota[32] = "";
	long		period = 0;
	long		q;
	int			n;

	f = fopen(quota_path, "r");
	if (f == NULL)
		return INT_MAX;
	n = fscanf(f, "%31s %ld", quota, &period);
	fclose(f);
	if (n < 1 || strcmp(quota, "max") == 0 || (q = atol(quota)) <= 0)
		return INT_MAX;
	if (period_path != NULL)
	{
		f = fopen(period_path, "r");
		if (f == NULL)
			return INT_MAX;
		n = fscanf(f, "%ld", &period);
		fclose(f);
		if (n != 1)
			return INT_MAX;
	}
	if (period <= 0)
		return INT_MAX;
	return (int) Min(q / period, (long) INT_MAX);
}

/*
 * lq_cgroup_cpus is the least CPU limit of this process's cgroup and of
 * every cgroup above it (a container's CPU limit, a systemd unit's
 * CPUQuota), cgroup v2 or v1's cpu controller; INT_MAX if none.
 */
static int
lq_cgroup_cpus(void)
{
	FILE	   *f = fopen("/proc/self/cgroup", "r");
	char		line[MAXPGPATH];
	int			limit = INT_MAX;

	if (f == NULL)
		return INT_MAX;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		char	   *controllers = strchr(line, ':');
		char	   *rel = controllers ? strchr(controllers + 1, ':') : NULL;
		char		list[MAXPGPATH + 2];
		bool		v2;

		if (rel == NULL)
			continue;
		*rel++ = '\0';
		controllers++;
		rel[strcspn(rel, "\n")] = '\0';
		v2 = controllers[0] == '\0';
		/* v1: the hierarchy whose controllers ("cpu,cpuacct") include cpu */
		snprintf(list, sizeof(list), ",%s,", controllers);
		if (!v2 && strstr(list, ",cpu,") == NULL)
			continue;
		/* from the process's own cgroup up to the root */
		for (;;)
		{
			char		qpath[MAXPGPATH * 2];
			char		ppath[MAXPGPATH * 2];
			char	   *slash;

			if (v2)
			{
				snprintf(qpath, sizeof(qpath), "/sys/fs/cgroup%s/cpu.max", rel);
				limit = Min(limit, lq_cgroup_quota(qpath, NULL));
			}
			else
			{
				const char *const dirs[] = {"cpu", "cpu,cpuacct"};

				for (int i = 0; i < lengthof(dirs); i++)
				{
					snprintf(qpath, sizeof(qpath), "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us",
							 dirs[i], rel);
					snprintf(ppath, sizeof(ppath), "/sys/fs/cgroup/%s%s/cpu.cfs_period_us",
							 dirs[i], rel);
					limit = Min(limit, lq_cgroup_quota(qpath, ppath));
				}
			}
			slash = strrchr(rel, '/');
			if (slash == NULL || rel[0] == '\0')
				break;
			*slash = '\0';		/* "/a/b" -> "/a" -> "" (the root) */
		}
	}
	fclose(f);
	return limit;
}

/*
 * lq_spin_cpus is how many processes may spin for lockq at once
 * (lq_shmem_spin_enter): the CPUs the server may run on, from the
 * postmaster's affinity (taskset, a cpuset), which every process of the
 * server inherits, and no more than the whole CPUs of its cgroup's CPU
 * limit, where spinning would spend the quota the server is throttled by.
 * At least 1: the lock server's own spin.  Computed once, when the shared
 * memory is made (again after a crash).
 */
static int
lq_spin_cpus(void)
{
	cpu_set_t	cpus;
	int			n;
	int			limit = lq_cgroup_cpus();

	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		n = CPU_COUNT(&cpus);
	else
		n = (int) sysconf(_SC_NPROCESSORS_ONLN);
	n = Max(n, 1);
	/* a cap the CPUs one sees do not show: the log says so */
	if (limit < n)
	{
		n = Max(limit, 1);
		ereport(LOG,
				(errmsg_plural("lockq: at most %d process spins for lockq at once, the whole CPUs of the server's cgroup CPU limit",
							   "lockq: at most %d processes spin for lockq at once, the whole CPUs of the server's cgroup CPU limit",
							   n, n)));
	}
	return n;
}

/*
 * lq_shmem_spin_enter says whether this process may spin now, waiting for
 * the lock server or for work from the backends, and if so counts it as
 * spinning until lq_shmem_spin_exit.  Spinning pays only on a core that
 * would otherwise be idle: a process that waits for an answer on its core
 * saves its sleep and its wake-up, and its waker the kill() of SetLatch,
 * whereas one that spins on a core another process queues for delays the
 * very work it waits for.  So a process may spin while fewer processes spin
 * for lockq than the server has CPUs to run on (lq_spin_cpus).  The lock
 * server (always) spins whenever its own rule says so (lq_wait_for_work),
 * but counts, so that on two cores one backend at a time spins beside it
 * and on one core none does.  Spinners yield their CPU often
 * (sched_yield), which bounds what a spin costs a process queued on its
 * core.  Never raises.
 */
bool
lq_shmem_spin_enter(bool always)
{
	/* a plain read first: a backend that may not spin writes nothing */
	if (!always &&
		(int) pg_atomic_read_u32(&lq_shared->spinners) >= lq_shared->spin_cpus)
		return false;
	if ((int) pg_atomic_fetch_add_u32(&lq_shared->spinners, 1) <
		lq_shared->spin_cpus || always)
		return true;
	pg_atomic_fetch_sub_u32(&lq_shared->spinners, 1);
	return false;
}

/*
 * lq_shmem_spin_pause is one poll's pause in a spin that began at start:
 * a CPU pause and, every sixteenth poll (a few microseconds apart), a
 * sched_yield(), which lets a process queued for this CPU run and returns
 * at once where none is.  Returns false once lockq.spin_time has passed
 * since start.
 */
bool
lq_shmem_spin_pause(instr_time start, int *polls)
{
	instr_time	now;

	pg_spin_delay();
	if (++*polls % 16 != 0)
		return true;
	sched_yield();
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_MICROSEC(now) < lockq_spin_time;
}

/* lq_shmem_spin_exit ends a spin that lq_shmem_spin_enter allowed. */
void
lq_shmem_spin_exit(void)
{
	pg_atomic_fetch_sub_u32(&lq_shared->spinners, 1);
}

/*
 * lq_shmem_wakes_hand_on wakes the backends a batch answered (procnos, n of
 * them) with one signal of the lock server's own: the first is woken here,
 * the others are left in its wake list (LqServer) for the backends woken to
 * pass on
 * (lq_shmem_wakes_pass, two each), so that waking n backends costs the lock
 * server, whose time bounds every grant, one kill() instead of n (a third
 * of its time went there).  What the backends have not taken by the next
 * batch the lock server wakes itself then, and before it sleeps or waits
 * for a flush or for standbys (lq_shmem_wakes_hand_on(NULL, 0)): no wake-up
 * waits longer than a batch's work.  Lock server only.
 */
void
lq_shmem_wakes_hand_on(const int *procnos, int n)
{
	int			left[LQ_WAKE_MAX];
	int			nleft;
	int			keep = 0;
	int			i;
	LqServer   *sv = lq_my_server;

	/* only the lock server adds: an empty array it reads stays empty */
	if (n == 0 && sv->wake_n == 0)
		return;
	SpinLockAcquire(&sv->wake_mutex);
	nleft = sv->wake_n;
	memcpy(left, sv->wake, sizeof(int) * nleft);
	if (n > 1)
	{
		keep = Min(n - 1, LQ_WAKE_MAX);
		memcpy(sv->wake, procnos + 1, sizeof(int) * keep);
	}
	sv->wake_n = keep;
	SpinLockRelease(&sv->wake_mutex);

	for (i = 0; i < nleft; i++)
		SetLatch(&ProcGlobal->allProcs[left[i]].procLatch);
	if (n > 0)
		SetLatch(&ProcGlobal->allProcs[procnos[0]].procLatch);
	for (i = 1 + keep; i < n; i++)
		SetLatch(&ProcGlobal->allProcs[procnos[i]].procLatch);
}

/*
 * lq_shmem_wakes_pass wakes up to n of the backends lq_shmem_wakes_hand_on
 * left to be woken by the lock server that answered slot slotno.  Nothing between taking them and setting their latches can
 * fail or be interrupted, so none is lost.  A stale procno only causes a
 * spurious wake-up.
 */
void
lq_shmem_wakes_pass(int slotno, int n)
{
	LqServer   *sv = lq_shmem_server_of(slotno);
	int			take[LQ_WAKE_MAX];
	int			k;
	int			i;

	if (sv->wake_n == 0)	/* unlocked peek: a miss is harmless */
		return;
	LQ_FAULT("wakes-pass");
	SpinLockAcquire(&sv->wake_mutex);
	k = Min(n, sv->wake_n);
	sv->wake_n -= k;
	memcpy(take, sv->wake + sv->wake_n, sizeof(int) * k);
	SpinLockRelease(&sv->wake_mutex);
	for (i = 0; i < k; i++)
		SetLatch(&ProcGlobal->allProcs[take[i]].procLatch);
}

/*
 * Lock server only: a held hint was dropped since
 * lq_shmem_hint_lazy_stranded.
 */
static bool lq_hints_dropped = false;

/*
 * Held-lock hints.  A lockq_get for a lock that somebody else holds cannot
 * be granted before that grant ends, and every end of a grant is decided
 * by the lock server, which applies the arrival ring in order first: such
 * an arrival need not wake the lock server (lockq_call.c, lq_submit), which
 * then takes it with the next release, usually in the same wake-up.  The
 * hints say which locks are held, by whom.
 *
 * An entry is shared by every lock id whose hash falls on it, but it names
 * the one it is about in full, so an arrival is lazy only for the very
 * lock id that is held: a free lock id whose hash equals that of a held
 * one (such pairs are easy to find) is never delayed by it.  Ids longer
 * than LQ_HINT_ID_LEN have no hint, and their arrivals are never lazy.
 * The owner is compared by its hash: two owners with one hash only make
 * an arrival not lazy, which costs a wake-up.
 *
 * The lock server is an entry's only writer, so a sequence count is all
 * the synchronisation it needs (lq_hint_write), and backends read without
 * a lock or a store of their own (lq_shmem_hint_held_by_other); a read that
 * overlaps a write is not believed and means "not held".  Hints remain
 * hints: a wrong "not held" costs a wake-up; a wrong "held" (the grant
 * ended after the read) is caught by the arrival reading its hint again
 * after its push (lq_submit) and by the lock server looking at the ring
 * again after it dropped a hint (lq_shmem_hint_lazy_stranded).
 */

/*
 * lq_hint_entry returns the entry for lock_id and sets *len to the id's
 * length; NULL when the id is too long to have a hint.
 */
static LqHeldHint *
lq_hint_entry(const char *lock_id, size_t *len)
{
	*len = strlen(lock_id);
	if (*len == 0 || *len > LQ_HINT_ID_LEN)
		return NULL;
	return &lq_hints[hash_bytes((const unsigned char *) lock_id, *len) %
					 LQ_HELD_HINTS];
}

/*
 * lq_hint_owner_hash is how an entry names its holder's owner: a hash is
 * enough, as two owners taken for one only make an arrival not lazy.
 */
static uint32
lq_hint_owner_hash(const char *owner)
{
	return hash_bytes((const unsigned char *) owner, strlen(owner));
}

/*
 * lq_hint_is: is the entry about lock_id (len bytes)?  Exact.  Reliable in
 * the lock server, the entry's writer; a backend must read the entry's
 * count around it (lq_shmem_hint_held_by_other).
 */
static inline bool
lq_hint_is(const LqHeldHint *h, const char *lock_id, size_t len)
{
	return h->id_len == len && memcmp(h->id, lock_id, len) == 0;
}

/*
 * lq_hint_write makes an entry say that the owner whose hash is owner_hash
 * holds lock_id (len bytes), or with len 0 that nobody holds anything on
 * it.  Lock server only: as the only writer it needs no lock.  The count
 * is odd on entry only if an earlier write was cut short by an error (a
 * fault point in the test build); the entry then stays "not held" for
 * readers until this write ends.
 *
 * The count is made odd before anything else changes and even again after
 * everything has: the first write barrier keeps the odd count ahead of the
 * entry's new contents, the second keeps the contents ahead of the even
 * count.  A reader (lq_shmem_hint_held_by_other) reads the count, then the
 * contents, then the count again, with read barriers in between; if it saw
 * any of this write's contents, it sees the count changed.  The odd count
 * is also this write's first store, which is what
 * lq_shmem_hint_lazy_stranded's barrier orders before the lock server's look
 * at the ring.
 */
static void
lq_hint_write(LqHeldHint *h, const char *lock_id, size_t len,
			  uint32 owner_hash)
{
	uint32		odd = pg_atomic_read_u32(&h->seq) | 1;

	Assert(len <= LQ_HINT_ID_LEN);
	pg_atomic_write_u32(&h->seq, odd);
	pg_write_barrier();
	LQ_FAULT("hint-write");
	h->owner_hash = owner_hash;
	h->id_len = (uint8) len;
	memcpy(h->id, lock_id, len);
	pg_write_barrier();
	pg_atomic_write_u32(&h->seq, odd + 1);
}

/*
 * lq_shmem_hint_held records that owner now holds lock_id.  An entry about
 * another lock id is taken over (that id's arrivals are no longer lazy,
 * and one that read its old hint must not be stranded: see
 * lq_shmem_hint_lazy_stranded).  Nothing is recorded for an id too long for a
 * hint.  Lock server only.
 */
void
lq_shmem_hint_held(const char *lock_id, const char *owner)
{
	size_t		len;
	LqHeldHint *h = lq_hint_entry(lock_id, &len);
	uint32		oh;

	if (h == NULL)
		return;
	oh = lq_hint_owner_hash(owner);
	if (lq_hint_is(h, lock_id, len))
	{
		if (h->owner_hash == oh)
			return;				/* says so already */
	}
	else if (h->id_len != 0)
		lq_hints_dropped = true;	/* another lock id's hint is gone */
	lq_hint_write(h, lock_id, len, oh);
}

/*
 * lq_shmem_hint_free records that nobody holds lock_id any more, unless the
 * entry was taken over by another lock id since.  Lock server only.
 */
void
lq_shmem_hint_free(const char *lock_id)
{
	size_t		len;
	LqHeldHint *h = lq_hint_entry(lock_id, &len);

	if (h == NULL || !lq_hint_is(h, lock_id, len))
		return;
	lq_hint_write(h, lock_id, 0, 0);
	lq_hints_dropped = true;
}

/*
 * lq_shmem_hint_reset forgets every hint: when the lock server (re)builds its
 * state.  Lock server only.
 */
void
lq_shmem_hint_reset(void)
{
	int			i;

	for (i = 0; i < LQ_HELD_HINTS; i++)
	{
		if (lq_hints[i].id_len != 0 ||
			pg_atomic_read_u32(&lq_hints[i].seq) % 2 != 0)
			lq_hint_write(&lq_hints[i], "", 0, 0);
	}
	lq_hints_dropped = true;
}

/*
 * lq_shmem_hint_lazy_stranded: may a lazy arrival sit in the ring unseen, with
 * nothing to wake the lock server for it?  That is so only if a hint that
 * said "held" was dropped since the last call (a grant ended with nobody to
 * take it, or another lock id took the entry) and the ring is not empty: an
 * arrival that read the old hint may have been pushed after the last drain
 * and read it again before it changed (lq_submit).  A hint that still says
 * "held" is safe: its grant's end wakes the lock server, which drains the
 * ring before it decides anything.  Lock server only, before it sleeps.
 */
bool
lq_shmem_hint_lazy_stranded(void)
{
	if (!lq_hints_dropped)
		return false;
	lq_hints_dropped = false;

	/*
	 * The hint writes (each begins with its odd count) before the ring's
	 * read.  This pairs with lq_submit's barrier between its push and its
	 * second read of the hint: either we see its entry in the ring, or it
	 * sees the count changed and wakes us itself.
	 */
	pg_memory_barrier();
	return lq_ring_pending();
}

/*
 * How often a backend reads an entry that the lock server is writing
 * before it gives up and calls it "not held".
 */
#define LQ_HINT_READ_TRIES	3

/*
 * lq_shmem_hint_held_by_other: does lock_id seem to be held by an owner other
 * than owner?  False when unsure (no entry for this lock id, an id too
 * long for a hint, or an entry the lock server kept changing while we
 * read it), and when owner seems to hold it (a re-entrant lockq_get is
 * answered at once).  Takes no lock and writes nothing shared: the
 * sequence count tells a consistent read from one that overlapped a write
 * (see lq_hint_write for the ordering).
 */
bool
lq_shmem_hint_held_by_other(const char *lock_id, const char *owner)
{
	size_t		len;
	LqHeldHint *h = lq_hint_entry(lock_id, &len);
	uint32		oh;
	int			tries;

	if (h == NULL)
		return false;
	oh = lq_hint_owner_hash(owner);
	for (tries = 0; tries < LQ_HINT_READ_TRIES; tries++)
	{
		uint32		before;
		uint32		after;
		bool		held;

		before = pg_atomic_read_u32(&h->seq);
		pg_read_barrier();		/* the count before the contents */
		held = lq_hint_is(h, lock_id, len) && h->owner_hash != oh;
		pg_read_barrier();		/* the contents before the count */
		after = pg_atomic_read_u32(&h->seq);
		if (before == after && before % 2 == 0)
			return held;
	}
	return false;
}

void
lq_shmem_stat_add(LqStat stat, uint64 n)
{
	if (lq_shared != NULL && n > 0)
		pg_atomic_fetch_add_u64(&lq_shared->stats[stat], n);
}

/*
 * lq_shmem_server_started tells a backend whether the lock server's first
 * start in this shared-memory lifetime has committed.  Before that, after a
 * crash, lockq's tables still hold what the crash left: grants whose end
 * was shown before it but lost in it, which lq_tables_settle ends in that
 * same transaction.  The lock server sets the flag after its commit, so a
 * snapshot taken after reading true sees the settled tables.
 */
bool
lq_shmem_server_started(void)
{
	bool		started = lq_shared->started;

	pg_read_barrier();
	return started;
}

/*
 * lq_shmem_token_take issues a fencing token for a grant that a backend makes
 * by itself (lockq_fastpath.c): one above the last, if that is within the
 * durable ceiling, else 0 (the lock server raises the ceiling when it
 * issues its next token).  The lock server takes its tokens from the same
 * counter (lq_durability_next_token), so they stay strictly increasing over
 * all grants.  The ceiling is published only once durable; a stale read
 * of it only makes this give up sooner.
 */
int64
lq_shmem_token_take(void)
{
	uint64		old = pg_atomic_read_u64(&lq_shared->token_high);

	for (;;)
	{
		int64		ceiling = *(volatile int64 *) &lq_shared->token_ceiling;

		if ((int64) old + 1 > ceiling)
			return 0;
		if (pg_atomic_compare_exchange_u64(&lq_shared->token_high, &old,
										   old + 1))
			return (int64) old + 1;
	}
}

/*
 * lq_shmem_stat_queue_length raises the high-water mark of queue lengths
 * (lockq_stats.max_queue_length) to n if it is below.  A compare-and-swap,
 * so that a concurrent lockq_stats_reset is never undone by a stale value
 * from before it, nor a higher mark by a lower one.
 */
void
lq_shmem_stat_queue_length(uint64 n)
{
	uint64		cur = pg_atomic_read_u64(&lq_shared->queue_max);

	while (cur < n &&
		   !pg_atomic_compare_exchange_u64(&lq_shared->queue_max, &cur, n))
		;
}

/*
 * lq_shmem_stats_reset sets the counters of lockq_stats to zero and
 * stats_reset to now (lockq_stats_reset).  The high-water mark of queue
 * lengths starts again from the longest queue as last published; the lock
 * server raises it again after its next batch should a queue have grown
 * meanwhile.  The gauges are not touched.
 */
void
lq_shmem_stats_reset(void)
{
	LqGauges	g;
	int			i;

	for (i = 0; i < LQ_STAT_COUNT; i++)
		pg_atomic_write_u64(&lq_shared->stats[i], 0);
	lq_shmem_gauges(&g);
	pg_atomic_write_u64(&lq_shared->queue_max, g.longest_queue);
	pg_atomic_write_u64(&lq_shared->stats_reset, (uint64) GetCurrentTimestamp());
}

/*
 * The quick releases a slot has queued (lockq_call.c) are applied by the
 * lock servers of their locks, each its own in the slot's order; the
 * functions below see one lock server's share of them.  The caller holds
 * the slot's mutex.
 */

/* lq_shmem_slot_nquick: how many of the slot's quick releases are server's. */
int
lq_shmem_slot_nquick(const LqSlot *slot, int server)
{
	int			n = 0;
	int			i;

	for (i = 0; i < slot->nquick; i++)
		if (slot->quick_servers[i] == server)
			n++;
	return n;
}

/*
 * lq_shmem_slot_quick finds the k-th oldest (from 0) of server's quick
 * releases in the slot: its token and lock id (LQ_MAX_ID_LEN + 1 bytes).
 * Returns false when server has no more than k.
 */
bool
lq_shmem_slot_quick(const LqSlot *slot, int server, int k, int64 *token,
					char *lock_id)
{
	int			i;

	for (i = 0; i < slot->nquick; i++)
	{
		if (slot->quick_servers[i] != server)
			continue;
		if (k-- > 0)
			continue;
		*token = slot->quick_tokens[i];
		strlcpy(lock_id, slot->quick_ids[i], LQ_MAX_ID_LEN + 1);
		return true;
	}
	return false;
}

/*
 * lq_shmem_slot_queue_quick queues a quick release of lock_id's grant token
 * in the slot, for lock_id's lock server; the caller has checked that
 * there is room (LQ_MAX_QUICK_RELEASES).
 */
void
lq_shmem_slot_queue_quick(LqSlot *slot, const char *lock_id, int64 token)
{
	int			i = slot->nquick;

	Assert(i < LQ_MAX_QUICK_RELEASES);
	slot->quick_tokens[i] = token;
	strlcpy(slot->quick_ids[i], lock_id, LQ_MAX_ID_LEN + 1);
	slot->quick_servers[i] = (uint8) lq_shmem_server_for(lock_id);
	slot->nquick = i + 1;
}

/*
 * lq_shmem_slot_drop_quick removes the n oldest of server's quick releases
 * from the slot (fewer if it has fewer); the others keep their order.
 */
void
lq_shmem_slot_drop_quick(LqSlot *slot, int server, int n)
{
	int			keep = 0;
	int			i;

	for (i = 0; i < slot->nquick; i++)
	{
		if (slot->quick_servers[i] == server && n > 0)
		{
			n--;
			continue;
		}
		if (keep != i)
		{
			slot->quick_tokens[keep] = slot->quick_tokens[i];
			memcpy(slot->quick_ids[keep], slot->quick_ids[i],
				   sizeof(slot->quick_ids[0]));
			slot->quick_servers[keep] = slot->quick_servers[i];
		}
		keep++;
	}
	slot->nquick = keep;
}

/*
 * lq_shmem_slot_free makes a slot whose session has ended FREE for the next
 * session that takes it: nothing of the old session stays in it.  The
 * caller holds the slot's mutex and wakes whoever waits on slot->freed.
 */
static void
lq_shmem_slot_free(LqSlot *slot)
{
	slot->state = LQ_SLOT_FREE;
	slot->cancel_requested = false;
	slot->session_ended = false;
	slot->pid = 0;
	slot->session_start = 0;
	slot->pgprocno = -1;
	slot->queued_ts = 0;
	slot->server = 0;
	slot->ends_left = 0;
	slot->nfences = 0;
	slot->fences_overflow = false;
}

/* lq_shmem_servers_mask returns a mask with a bit for every lock server. */
uint32
lq_shmem_servers_mask(void)
{
	return lq_shared->nservers == 32 ? PG_UINT32_MAX :
		((uint32) 1 << lq_shared->nservers) - 1;
}

/*
 * lq_shmem_slot_end_done records that lock server server has applied the
 * end of the slot's session (its locks' grants and waits are gone), and
 * frees the slot when it was the last to (lq_shmem_slot_free); returns
 * whether it did, and then the caller wakes whoever waits on slot->freed.
 * The caller holds the slot's mutex.
 */
bool
lq_shmem_slot_end_done(LqSlot *slot, int server)
{
	slot->ends_left &= ~((uint32) 1 << server);
	if (slot->ends_left != 0)
		return false;
	lq_shmem_slot_free(slot);
	return true;
}

/*
 * lq_shmem_result_error fills res with an error answer: error (see
 * LqError), and the number its message names (arg, 0 if none).  The
 * backend makes the message (lq_call_raise_if_error).
 */
void
lq_shmem_result_error(LqResult *res, LqError error, int64 arg)
{
	memset(res, 0, sizeof(LqResult));
	res->status = LQ_ST_ERROR;
	res->error = error;
	res->arg = arg;
}

/*
 * lq_shmem_result_failed fills res with an error answer that passes on an
 * error the lock server got itself (LQ_ERR_LOAD_FAILED, LQ_ERR_FAILED):
 * its sqlerrcode, message and hint (NULL: none), each cut to fit on a
 * character boundary, so that a long message with multibyte characters (an
 * owner name, a lock id) stays valid in the database encoding and converts
 * to the client's.
 */
void
lq_shmem_result_failed(LqResult *res, LqError error, int sqlerrcode,
					   const char *message, const char *hint)
{
	int			len;

	lq_shmem_result_error(res, error, 0);
	res->sqlerrcode = sqlerrcode;
	len = pg_mbcliplen(message, strlen(message), sizeof(res->message) - 1);
	memcpy(res->message, message, len);
	res->message[len] = '\0';
	if (hint != NULL)
	{
		len = pg_mbcliplen(hint, strlen(hint), sizeof(res->hint) - 1);
		memcpy(res->hint, hint, len);
		res->hint[len] = '\0';
	}
}

/*
 * lq_shmem_slot_fencers lists the pids of the backends whose transaction may
 * be fenced on the session-bound grant token (lockq_holds): those that list it
 * in their slot, and those with more fences than a slot lists.
 */
List *
lq_shmem_slot_fencers(int64 token)
{
	List	   *pids = NIL;
	int			i;

	for (i = 0; i < lq_shared->nslots; i++)
	{
		LqSlot	   *slot = &lq_slots[i];
		bool		fenced = false;
		int			pid;
		int			k;

		SpinLockAcquire(&slot->mutex);
		pid = slot->pid;
		fenced = slot->fences_overflow;
		for (k = 0; k < slot->nfences && !fenced; k++)
			fenced = (slot->fence_tokens[k] == token);
		SpinLockRelease(&slot->mutex);
		if (fenced && pid != 0)
			pids = lappend_int(pids, pid);
	}
	return pids;
}

/*-------------------------------------------------------------------------
 *
 * lockq_shmem.h
 *		What backends and the lock server share (lockq_shmem.c): request
 *		slots, the arrival ring, counters, and the shared fields of the
 *		clock (lockq_clock.c) and of lockq_durability.c.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_SHMEM_H
#define LOCKQ_SHMEM_H

#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "portability/instr_time.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "lib/dshash.h"
#include "utils/dsa.h"

#include "lockq.h"

/*
 * Life cycle of a request slot.  A slot belongs to one session from its
 * first lockq call until every lock server has cleaned up after the session
 * ended; only then is it FREE for the next session.  A session takes the
 * slot of its BackendId (BackendId - 1), or, while an ended session still
 * holds that one, a spare (LQ_SLOTS_PER_BACKEND; lq_attach).
 */
typedef enum LqSlotState
{
	LQ_SLOT_FREE = 0,			/* no session */
	LQ_SLOT_IDLE,				/* session attached, nothing in flight */
	LQ_SLOT_PENDING,			/* request submitted, not yet seen */
	LQ_SLOT_ACTIVE,				/* worker owns the request */
	LQ_SLOT_DONE				/* result is ready for the backend */
} LqSlotState;

/*
 * An arrival-ring entry tells the lock server where to look: at a slot's
 * request, or at the oldest quick release (see lockq_release) a slot has
 * queued.  It is an int so that it fits the shared ring and a List; build
 * and read it only with these functions.
 */
typedef int32 LqEntry;

static inline LqEntry
lq_entry_request(int slotno)
{
	return (LqEntry) slotno;
}

static inline LqEntry
lq_entry_quick(int slotno)
{
	return (LqEntry) -(slotno + 1);
}

static inline bool
lq_entry_is_quick(LqEntry e)
{
	return e < 0;
}

static inline int
lq_entry_slot(LqEntry e)
{
	return e < 0 ? -e - 1 : e;
}

/*
 * Releases of session-bound locks that the backend answered itself (see
 * lockq_release); at most this many wait per slot for the worker.
 */
#define LQ_MAX_QUICK_RELEASES	4

/*
 * Request slots per possible backend (lq_shmem_nslots): its BackendId's, and
 * a spare, so that a lock server slow to apply sessions' ends (stalled in a
 * commit that waits for a synchronous standby) keeps no new session waiting
 * for a slot until as many sessions as can run have ended meanwhile.
 */
#define LQ_SLOTS_PER_BACKEND	2

/*
 * The most lock servers there can be: a session's end is a bit per lock
 * server (LqSlot.ends_left), and a quick release's lock server a uint8.
 */
#define LQ_MAX_SERVERS			32

/*
 * lq_slot_ends_left: has slot's session ended, with lock server server yet
 * to apply that end?  The caller holds the slot's mutex (LqSlot).
 */
#define lq_slot_ends_left(slot, server) \
	((slot)->session_ended && ((slot)->ends_left & ((uint32) 1 << (server))) != 0)

/*
 * Lock ids hash (hash_bytes of the id) to LQ_LOCK_BUCKETS buckets: the fast
 * path's (lockq_fastpath.c) and, bucket modulo the number of lock servers,
 * a lock's lock server (lq_shmem_server_for), so that all locks of a bucket
 * belong to one lock server whatever their number.
 */
#define LQ_LOCK_BUCKETS			4096

/*
 * Session-bound grants a backend's transaction is fenced on (lockq_holds),
 * listed in its slot so that the lock server can tell whose transaction
 * holds a hand-off back; beyond this many, fences_overflow says "maybe any".
 */
#define LQ_MAX_SLOT_FENCES		16

/*
 * What the batch being committed will make known about a slot, written by
 * the lock server before its commit and applied after it (lockq_outbox.c).
 * Only the lock server reads or writes it; a lock server that finds one
 * left by its predecessor applies it if that batch committed.
 */
typedef enum LqStagedKind
{
	LQ_STAGED_NONE = 0,
	LQ_STAGED_RESULT,			/* answer: slot becomes DONE */
	LQ_STAGED_ACK,				/* cancellation done: slot becomes IDLE */
	LQ_STAGED_FREE				/* session cleaned up: slot becomes FREE */
} LqStagedKind;

/*
 * One per slot and lock server (lq_shmem_staged): a lock server stages,
 * publishes and, after a crash of its predecessor, settles only its own.
 */
typedef struct LqSlotStaged
{
	uint64		batch;			/* the batch; 0: nothing staged */
	LqStagedKind kind;
	uint64		reqid;
	LqResult	res;			/* LQ_STAGED_RESULT */
	bool		queued_set;		/* queued_ts changes to queued_ts */
	int64		queued_ts;
	int			quick_done;		/* quick releases of this lock server
								 * applied */
} LqSlotStaged;

/*
 * A backend's request slot (one per BackendId; see LqSlotState).
 *
 * Locking:
 *	- mutex protects the fields from state to fence_tokens: the backend and
 *	  the lock server read and write them only while holding it, except
 *	  - arrival, which the backend writes under its lock server's mutex
 *		(LqServer) instead, in the critical section that puts the slot's
 *		entry into that lock server's arrival ring (lq_shmem_ring_push), so
 *		that arrival numbers and the ring's order agree; the lock server
 *		reads it without a lock, only to sort the slots it scans
 *		(lq_slots_in_flight);
 *	  - submitted, which only the backend writes, when it submits a request
 *		(lq_submit), and then leaves alone until the slot is IDLE again:
 *		the lock server reads it without a lock while it works on that
 *		request.
 *	- freed is a condition variable, with its own locking.
 *	- What a lock server stages for the slot is not here but in
 *	  lq_shmem_staged, its alone.
 *
 * Who writes what, under mutex: the backend claims a FREE slot (state,
 * pgprocno, pid, session_start), submits a request (req, reqid, submitted,
 * server, state PENDING), gives up on it (cancel_requested), ends its
 * session (session_ended, ends_left), takes an answer (state IDLE), queues quick
 * releases (nquick, quick_tokens, quick_ids, quick_servers; each for the
 * lock server of its lock) and lists the session-bound grants its
 * transaction is fenced on (nfences, fences_overflow, fence_tokens; it
 * empties the list when the transaction ends).  The lock server takes a
 * request (state ACTIVE), and when a batch is published records a waiter's
 * place (queued_ts), answers (res, state DONE), confirms a cancel (state
 * IDLE), drops the quick releases it applied (lq_shmem_slot_drop_quick:
 * its own, oldest first) and, once it has ended a session that ended,
 * clears its bit in ends_left, the last one freeing the slot
 * (lq_shmem_slot_end_done).
 */
typedef struct LqSlot
{
	slock_t		mutex;
	LqSlotState state;
	bool		cancel_requested;	/* backend gave up on the request */
	bool		session_ended;	/* backend has exited */
	uint32		ends_left;		/* its end: the lock servers that have not
								 * applied it yet, a bit each */
	int			pgprocno;		/* whose latch to set */
	int			pid;
	int64		session_start;	/* MyStartTimestamp of the session */
	uint64		reqid;			/* per-slot request counter */
	uint64		arrival;		/* global submission order */
	int64		submitted;		/* lockq time the request was submitted */
	int64		queued_ts;		/* lockq_get waiting: its queue position
								 * (lockq time), else 0 */
	LqRequest	req;
	int			server;			/* the lock server req went to
								 * (lq_shmem_server_for) */
	LqResult	res;
	int			nquick;			/* quick releases not done yet */
	int64		quick_tokens[LQ_MAX_QUICK_RELEASES];	/* oldest first */
	char		quick_ids[LQ_MAX_QUICK_RELEASES][LQ_MAX_ID_LEN + 1];	/* their locks */
	uint8		quick_servers[LQ_MAX_QUICK_RELEASES];	/* their lock servers */
	int			nfences;		/* session-bound grants fenced by the
								 * backend's transaction */
	bool		fences_overflow;
	int64		fence_tokens[LQ_MAX_SLOT_FENCES];
	ConditionVariable freed;	/* broadcast when the slot becomes FREE */
} LqSlot;

/* Counters shown by lockq_stats. */
typedef enum LqStat
{
	LQ_STAT_GRANTS = 0,			/* new grants (tokens issued) */
	LQ_STAT_HANDOFFS,			/* grants to a queued waiter */
	LQ_STAT_RELEASES,
	LQ_STAT_EXPIRIES,
	LQ_STAT_TIMEOUTS,
	LQ_STAT_CANCELS,
	LQ_STAT_SESSION_RELEASES,	/* grants ended by the end of the session */
	LQ_STAT_DROPPED_WAITERS,	/* client waiters that stopped heartbeating */
	LQ_STAT_RENEWALS,
	LQ_STAT_ENQUEUES,
	LQ_STAT_FORCED_RELEASES,
	LQ_STAT_DEFERRED_HANDOFFS,	/* hand-offs delayed by a fenced transaction */
	LQ_STAT_REQUESTS,
	LQ_STAT_BATCHES,
	LQ_STAT_SYNC_COMMITS,
	LQ_STAT_WORKER_STARTS,
	LQ_STAT_BATCH_ERRORS,
	LQ_STAT_FAILED_TRIES,		/* lockq_try calls that found the lock taken */
	LQ_STAT_WAIT_US,			/* sum of the waits of granted waiters (µs) */
	LQ_STAT_HOLD_US,			/* sum of the lives of ended grants (µs) */
	LQ_STAT_COUNT
} LqStat;

/*
 * The held hints (lq_shmem_hint_*): LQ_HELD_HINTS entries in
 * shared memory of their own, each for the lock ids whose hash falls on
 * it.  An entry names the one lock id it is about exactly, up to
 * LQ_HINT_ID_LEN bytes (a longer id never has a hint, so its lockq_get is
 * never lazy), and its holder's owner by a hash.  The lock server is its
 * only writer and changes it under a sequence count (odd while it writes);
 * backends read it without a lock and believe what they read only if the
 * count was even and unchanged around it.  128 bytes an entry: the count,
 * the owner's hash, the length and the first 55 bytes of the id share the
 * first 64 bytes, so a short id's lookup touches one cache line; 512 kB in
 * all.
 */
#define LQ_HELD_HINTS	4096
#define LQ_HINT_ID_LEN	119

typedef struct LqHeldHint
{
	pg_atomic_uint32 seq;		/* even: stable; odd: being written */
	uint32		owner_hash;		/* the holder's owner's hash_bytes */
	uint8		id_len;			/* length of id; 0: nobody holds it */
	char		id[LQ_HINT_ID_LEN]; /* the lock id, not terminated */
} LqHeldHint;

/* The most wake-ups the lock server leaves for backends to pass on. */
#define LQ_WAKE_MAX		64

/*
 * What belongs to one lock server: its arrival ring, its identity, the
 * wake-ups it left for backends to pass on, its batches and its gauges.
 * There are lockq.lock_servers of them, lq_shmem_server(0) to (nservers - 1),
 * each serving its partition of the locks (doc/design/scaling.md, "More
 * than one lock server").
 *
 * Locking:
 *	- mutex protects the arrival ring (ring_overflow, ring_head, ring_tail,
 *	  ring[]) and the lock server's identity (worker_pid, worker_procno),
 *	  read and written.  Backends may also read worker_pid without it, to
 *	  tell whether the lock server runs and to name or signal it: a stale
 *	  value is harmless there.
 *	- wake_mutex protects wake_n and wake[]; wake_n may be peeked at
 *	  without it (lq_shmem_wakes_pass, lq_shmem_wakes_hand_on), where a
 *	  stale value only delays or repeats a wake-up.
 *	- The pg_atomic_* fields need no lock: the lock server writes them, and
 *	  backends only read them.
 *	- batch_seq, sealed_batch, sealed_xid and grants_extoid are the lock
 *	  server's: it reads and writes them without a lock, and so does its
 *	  successor.  lockq_lock_servers() reads batch_seq without a lock too, to
 *	  show it (a stale value is harmless there).
 *	- settled_cv is a condition variable, with its own locking.
 */
typedef struct LqServer
{
	slock_t		mutex;
	int			worker_pid;
	int			worker_procno;
	bool		ring_overflow;	/* ring was full: worker must scan slots */
	uint64		ring_head;		/* next entry the worker reads */
	uint64		ring_tail;		/* next entry a backend writes */

	/* Gauges the lock server publishes after every batch. */
	pg_atomic_uint64 holders;
	pg_atomic_uint64 waiters;
	pg_atomic_uint64 delayed;	/* locks delayed after a restart */
	pg_atomic_uint64 delay_max; /* the latest end of such a delay (0: none) */
	pg_atomic_uint64 state_bytes;	/* memory the lock server's state holds */
	pg_atomic_uint64 longest_queue; /* the longest queue now */
	pg_atomic_uint64 durable_wait_since;	/* lockq time the lock server
											 * began to wait for a flush
											 * (WAL, synchronous standbys);
											 * 0: not waiting */

	/*
	 * Backends the lock server answered and left for the backends it woke
	 * to wake (lq_shmem_wakes_hand_on): procnos.
	 */
	slock_t		wake_mutex;
	int			wake_n;
	int			wake[LQ_WAKE_MAX];

	/*
	 * The lock server's batches (lockq_outbox.c): the number of the last
	 * one begun, and the one whose staged outcome is complete and whose
	 * transaction is committing or committed but not yet published (0:
	 * none), with its transaction id.
	 */
	uint64		batch_seq;
	uint64		sealed_batch;
	TransactionId sealed_xid;

	/*
	 * The installation the session-bound grants of its locks
	 * (lockq_session.c) and its quickly releasable leases (lockq_leases.c)
	 * belong to.
	 */
	Oid			grants_extoid;

	/*
	 * The ring position up to which every arrival has been read and the
	 * batch that read it published (lq_shmem_ring_settled), and the condition
	 * variable broadcast when it moves: views wait on it for lazy arrivals
	 * (lq_shmem_settle_arrivals).
	 */
	pg_atomic_uint64 ring_settled;
	ConditionVariable settled_cv;

	LqEntry		ring[FLEXIBLE_ARRAY_MEMBER];
} LqServer;

/* The lock servers' gauges, added up (lq_shmem_gauges). */
typedef struct LqGauges
{
	uint64		holders;
	uint64		waiters;
	uint64		delayed;
	uint64		delay_max;		/* the latest of any lock server */
	uint64		state_bytes;
	uint64		longest_queue;	/* the longest of any lock server */
} LqGauges;

/*
 * What the backends and the lock servers share besides the slots and each
 * lock server's own part (LqServer).
 *
 * Locking:
 *	- ring_size, nslots and nservers are set when shared memory is created
 *	  and never change: read them without a lock.
 *	- The pg_atomic_* fields need no lock.  The lock server writes them,
 *	  and backends only read them, except: token_high, which backends'
 *	  fast-path grants advance too (lq_shmem_token_take, a compare-and-swap);
 *	  clock_last, which every process that hands out a clock value moves;
 *	  fence_gen and dropping_pid, which backends write; and stats[],
 *	  queue_max and stats_reset, which backends change too
 *	  (lq_shmem_stat_add, lockq_stats_reset).
 *	- token_logged and clock_logged are under lq_shmem_ceiling_lock, which
 *	  a lock server also holds to raise token_ceiling.
 *	- The other plain fields (token_ceiling, clock_offset,
 *	  started, start_*) are the lock server's: it reads and writes them
 *	  without a lock.  Backends read three of them, without a lock:
 *	  token_ceiling in lq_shmem_token_take (a stale value only makes it
 *	  give up sooner); clock_offset in lq_clock_peek and lq_clock_next, only
 *	  after they saw clock_ready set, which the lock server sets after the
 *	  offset, with barriers between; and started, which the lock server sets
 *	  after its first commit, in lq_shmem_server_started, with barriers
 *	  likewise.
 */
typedef struct LqShared
{
	pg_atomic_uint64 next_arrival;	/* taken under a lock server's mutex
									 * (lq_shmem_ring_push) */
	int			ring_size;		/* entries in each lock server's ring */
	int			nslots;
	int			nservers;		/* lock servers (LqServer) */

	/*
	 * Durable promises, kept by the lock server (see lockq_durability.c): the
	 * last token issued, and the durable ceiling below which tokens may be
	 * issued without a flush.
	 */
	pg_atomic_uint64 token_high;
	int64		token_ceiling;

	/*
	 * The last ceilings written to the token and clock sequences (WAL-logged,
	 * perhaps not flushed yet) in this shared-memory lifetime, 0 before the
	 * lock server's start; under lq_shmem_ceiling_lock, as are the writes
	 * themselves and, with several lock servers, token_ceiling's
	 * (lockq_durability.c, lq_ceiling_raise).
	 */
	int64		token_logged;
	int64		clock_logged;

	/*
	 * What each role has in the lock servers' state (lockq_roles.c): a
	 * dshash table in a DSA area, made by the first lock server in this
	 * shared-memory lifetime; set under AddinShmemInitLock.
	 */
	dsa_handle	roles_area;		/* DSM_HANDLE_INVALID: not made yet */
	dshash_table_handle roles_table;
	int			roles_tranche;

	pg_atomic_uint64 fence_gen; /* bumped when a fenced transaction ends */
	pg_atomic_uint32 spinners;	/* processes spinning for lockq now: the
								 * lock server between requests, backends
								 * for their answers (lq_shmem_spin_enter) */
	int			spin_cpus;		/* at most this many spin (lq_spin_cpus) */
	pg_atomic_uint32 dropping_pid;	/* a backend dropping lockq.database:
									 * the lock server stays out of it
									 * (lq_let_database_go); 0: none */

	/* The clock, see lockq_clock.c. */
	pg_atomic_uint64 clock_last;	/* last value handed out */
	pg_atomic_uint64 clock_ceiling; /* durable upper bound for handed out
									 * values */
	int64		clock_offset;	/* lockq time = CLOCK_BOOTTIME + offset */
	pg_atomic_uint32 clock_ready;	/* offset is valid */

	/*
	 * The lock server's start in this shared-memory lifetime (see
	 * lq_durability_start): whether the first one has committed (backends read
	 * it with lq_shmem_server_started: until then the tables may still hold
	 * what a crash left unsettled), and what the first attempt decided about
	 * the clock, kept for a retry.
	 */
	bool		started;
	bool		start_planned;
	bool		start_continuous;
	int64		start_low;

	/*
	 * Counters (lockq_stats), reset by lockq_stats_reset, which sets
	 * stats_reset (a TimestampTz); queue_max is the longest queue since
	 * then.
	 */
	pg_atomic_uint64 stats[LQ_STAT_COUNT];
	pg_atomic_uint64 queue_max;
	pg_atomic_uint64 stats_reset;
} LqShared;

/*
 * The longest a lockq_get that arrived lazily (lq_shmem_hint_held_by_other)
 * leaves its request unread before it wakes the lock server itself, in
 * milliseconds: a safety net only, the end of the grant it waits for wakes
 * the lock server first (lq_submit).  One with a wait limit wakes it when
 * half of the limit is left, sooner than this.
 */
#define LQ_LAZY_ARRIVAL_MS	5000

/* A lockq_get whose wait limit ends sooner than this (µs) is never lazy. */
#define LQ_LAZY_MIN_WAIT_US	2000

/* The longest a view waits for lazy arrivals to be read, in milliseconds. */
#define LQ_SETTLE_WAIT_MS	1000

/* Tokens reserved per flush of the token ceiling. */
#define LQ_TOKEN_RESERVE	4096

extern LqShared *lq_shared;
extern LqSlot *lq_slots;
extern LqServer *lq_my_server;
extern int	lq_my_server_no;
extern void lq_shmem_init_hooks(void);
extern LWLock *lq_shmem_ceiling_lock(void);
extern int	lq_shmem_nslots(void);
extern LqServer *lq_shmem_server(int i);
extern int	lq_shmem_server_for(const char *lock_id);
extern bool lq_shmem_mine(const char *lock_id);
extern LqServer *lq_shmem_server_of(int slotno);
extern LqSlotStaged *lq_shmem_staged(int slotno);
extern void lq_shmem_server_attach(int i);
extern void lq_shmem_server_announce(void);
extern void lq_shmem_server_detach(void);
extern int	lq_shmem_server_pid(void);
extern int	lq_shmem_server_pid_of(int i);
extern void lq_shmem_gauges(LqGauges *out);
extern void lq_shmem_server_gauges(int i, LqGauges *out, uint64 *queued);
extern void lq_shmem_ring_push(int server, LqEntry entry);
extern int	lq_shmem_ring_drain(LqEntry *out, int max, bool *overflow);
extern void lq_shmem_wake_servers(void);
extern void lq_shmem_wake_server(LqServer *sv);
extern bool lq_shmem_spin_enter(bool always);
extern bool lq_shmem_spin_pause(instr_time start, int *polls);
extern void lq_shmem_spin_exit(void);
extern void lq_shmem_wakes_hand_on(const int *procnos, int n);
extern void lq_shmem_wakes_pass(int slotno, int n);
extern void lq_shmem_hint_held(const char *lock_id, const char *owner);
extern void lq_shmem_hint_free(const char *lock_id);
extern void lq_shmem_hint_reset(void);
extern bool lq_shmem_hint_lazy_stranded(void);
extern void lq_shmem_ring_settled(void);
extern void lq_shmem_ring_adopt(void);
extern void lq_shmem_settle_arrivals(void);
extern bool lq_shmem_hint_held_by_other(const char *lock_id, const char *owner);
extern void lq_shmem_stat_add(LqStat stat, uint64 n);
extern bool lq_shmem_server_started(void);
extern int64 lq_shmem_token_take(void);
extern void lq_shmem_stat_queue_length(uint64 n);
extern void lq_shmem_stats_reset(void);
extern void lq_shmem_result_error(LqResult *res, LqError error, int64 arg);
extern void lq_shmem_result_failed(LqResult *res, LqError error,
								   int sqlerrcode, const char *message,
								   const char *hint);
extern List *lq_shmem_slot_fencers(int64 token);
extern int	lq_shmem_slot_nquick(const LqSlot *slot, int server);
extern bool lq_shmem_slot_quick(const LqSlot *slot, int server, int k,
								int64 *token, char *lock_id);
extern void lq_shmem_slot_queue_quick(LqSlot *slot, const char *lock_id,
									  int64 token);
extern void lq_shmem_slot_drop_quick(LqSlot *slot, int server, int n);
extern uint32 lq_shmem_servers_mask(void);
extern bool lq_shmem_slot_end_done(LqSlot *slot, int server);


#endif							/* LOCKQ_SHMEM_H */

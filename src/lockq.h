/*-------------------------------------------------------------------------
 *
 * lockq.h
 *		Shared declarations for lockq, a fair, durable, lease-based lock
 *		service that lives inside PostgreSQL.
 *
 * The pieces:
 *	- lockq.c         module init, GUCs, hook installation
 *	- lockq_shmem.c   shared memory: request slots, the arrival ring, stats
 *	- lockq_clock.c   the monotonic, sequence-backed clock (lockq_now)
 *	- lockq_api.c     SQL-callable functions; argument checks; waiting
 *	- lockq_worker.c  the lock-server background worker: batches, commits
 *	- lockq_state.c   the worker's in-memory lock table and its rules
 *	- lockq_store.c   the durable mirror: the lockq.owners/queue tables
 *	- lockq_views.c   lockq_stats() and other read-only helpers
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		src/lockq.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_H
#define LOCKQ_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "nodes/pg_list.h"
#include "storage/spin.h"

/* Documented input limits (bytes, not counting the terminating NUL). */
#define LQ_MAX_ID_LEN		255
#define LQ_MAX_OWNER_LEN	255
#define LQ_MAX_CHANNEL_LEN	63		/* NAMEDATALEN - 1: a NOTIFY channel */
#define LQ_ERRMSG_LEN		256

/* Owners of session-bound locks (owner NULL) are named with this prefix. */
#define LQ_SESSION_PREFIX	"session:"
/* Members of this role may act for any owner (see lockq--1.0.sql). */
#define LQ_ADMIN_ROLE		"lockq_admin"

/* The longest wait a lockq_get timeout may ask for: one year. */
#define LQ_MAX_TIMEOUT_US	(INT64CONST(366) * 24 * 3600 * 1000000)

/*
 * How far ahead of the clock the durable ceiling is kept, and the margin at
 * which the worker extends it.  Every value lockq_now() hands out is at most
 * the durable ceiling, so after a crash the clock resumes above it.
 */
#define LQ_CLOCK_RESERVE_US	(INT64CONST(5) * 1000000)
#define LQ_CLOCK_MARGIN_US	(INT64CONST(2500) * 1000)

/* Schema and relation names of the durable mirror. */
#define LQ_SCHEMA			"lockq"
#define LQ_OWNERS_TABLE		"owners"
#define LQ_OWNERS_PKEY		"owners_pkey"
#define LQ_TOKEN_SEQ		"token_seq"
#define LQ_CLOCK_SEQ		"clock_seq"
#define LQ_UNSETTLED_TABLE	"unsettled"

/* Operations a backend can ask of the worker. */
typedef enum LqOp
{
	LQ_OP_NONE = 0,
	LQ_OP_GET,					/* blocking acquire */
	LQ_OP_TRY,					/* non-blocking acquire */
	LQ_OP_RELEASE,
	LQ_OP_RENEW,
	LQ_OP_ENQUEUE,				/* client waiter: queue, do not block */
	LQ_OP_HEARTBEAT,			/* client waiter: keep the wait alive */
	LQ_OP_CANCEL,				/* client waiter: withdraw */
	LQ_OP_FORCE_RELEASE,		/* administrator: end any grant */
	LQ_OP_RELEASE_SESSION,		/* DISCARD ALL: end the session's
								 * session-bound grants */
	LQ_OP_CLOCK					/* extend the clock's durable ceiling */
} LqOp;

/* Outcome of a request, filled in by the worker. */
typedef enum LqStatus
{
	LQ_ST_NONE = 0,
	LQ_ST_GRANTED,				/* token is valid */
	LQ_ST_QUEUED,				/* client waiter is queued */
	LQ_ST_NOT_AVAILABLE,		/* lockq_try: someone else has it */
	LQ_ST_TIMEOUT,				/* lockq_get: timeout expired */
	LQ_ST_TRUE,
	LQ_ST_FALSE,
	LQ_ST_OK,
	LQ_ST_ERROR					/* sqlerrcode and message are set */
} LqStatus;

/*
 * Life cycle of a request slot.  A slot belongs to one backend (indexed by
 * BackendId - 1) from its first lockq call until the worker has cleaned up
 * after the session ended; only then is it FREE for the next backend that
 * gets the same BackendId.
 */
typedef enum LqSlotState
{
	LQ_SLOT_FREE = 0,			/* no session */
	LQ_SLOT_IDLE,				/* session attached, nothing in flight */
	LQ_SLOT_PENDING,			/* request submitted, not yet seen */
	LQ_SLOT_ACTIVE,				/* worker owns the request */
	LQ_SLOT_DONE				/* result is ready for the backend */
} LqSlotState;

typedef struct LqRequest
{
	LqOp		op;
	bool		session_owner;	/* owner was NULL: bound to the session */
	bool		has_token;
	bool		has_ttl;
	int64		token;
	int64		ttl_us;			/* lease length */
	int64		deadline;		/* lockq_get: absolute lockq time, 0 = never */
	int64		wait_ttl_us;	/* client waiter: heartbeat interval bound */
	Oid			role;			/* role that made the request */
	bool		admin;			/* role is a member of lockq_admin (or a
								 * superuser): may act for any owner */
	int32		max_owner_locks;	/* the limits that apply to role, as */
	int32		max_waiters;	/* the requesting session sees them */
	int32		max_session_locks;	/* (lockq.max_*_per_role) */
	char		lock_id[LQ_MAX_ID_LEN + 1];
	char		owner[LQ_MAX_OWNER_LEN + 1];
	char		channel[LQ_MAX_CHANNEL_LEN + 1];
} LqRequest;

typedef struct LqResult
{
	LqStatus	status;
	bool		fresh_grant;	/* this request created the grant */
	int64		token;
	int			sqlerrcode;
	char		message[LQ_ERRMSG_LEN];
	char		hint[LQ_ERRMSG_LEN];	/* empty: none */
} LqResult;

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

typedef struct LqSlotStaged
{
	uint64		batch;			/* the batch; 0: nothing staged */
	LqStagedKind kind;
	uint64		reqid;
	LqResult	res;			/* LQ_STAGED_RESULT */
	bool		queued_set;		/* queued_ts changes to queued_ts */
	int64		queued_ts;
	int			quick_done;		/* quick releases applied */
} LqSlotStaged;

typedef struct LqSlot
{
	slock_t		mutex;			/* protects every field below */
	LqSlotState state;
	bool		cancel_requested;	/* backend gave up on the request */
	bool		session_ended;	/* backend has exited */
	int			pgprocno;		/* whose latch to set */
	int			pid;
	int64		session_start;	/* MyStartTimestamp of the session */
	uint64		reqid;			/* per-slot request counter */
	uint64		arrival;		/* global submission order */
	int64		submitted;		/* lockq time the request was submitted */
	int64		queued_ts;		/* lockq_get waiting: its queue position
								 * (lockq time), else 0; set by the worker */
	LqRequest	req;
	LqResult	res;
	int			nquick;			/* quick releases the worker has not done */
	int64		quick_tokens[LQ_MAX_QUICK_RELEASES];	/* oldest first */
	int			nfences;		/* session-bound grants fenced by the
								 * backend's transaction (written by it) */
	bool		fences_overflow;
	int64		fence_tokens[LQ_MAX_SLOT_FENCES];
	ConditionVariable freed;	/* broadcast when the slot becomes FREE */
	LqSlotStaged staged;		/* lock server only, no lock needed */
} LqSlot;

/*
 * A session-bound grant (owner NULL), kept in shared memory instead of
 * lockq.owners: see lockq_grants.c.  Written by the worker only; end and
 * fences are what lockq_holds and the worker coordinate on.
 */
typedef enum LqGrantEnd
{
	LQ_GRANT_CURRENT = 0,
	LQ_GRANT_ENDING,			/* ended by a batch not yet published */
	LQ_GRANT_ENDED				/* over; waits for fenced transactions */
} LqGrantEnd;

/* A change to a session-bound grant staged by a batch (lockq_outbox.c). */
typedef enum LqGrantOp
{
	LQ_GRANT_OP_NONE = 0,
	LQ_GRANT_OP_PUT,			/* made (visible from publication) or renewed */
	LQ_GRANT_OP_ENDED,			/* its end published, hand-off deferred */
	LQ_GRANT_OP_DELETE			/* it is over */
} LqGrantOp;

typedef struct LqSessionGrant
{
	int64		token;			/* hash key, must be first */
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int			pid;			/* the session */
	int64		session_start;
	Oid			role;
	int64		ttl;
	int64		acquired;
	int64		expires;
	LqGrantEnd	end;
	bool		released;		/* its session released it; the worker has
								 * yet to act on that (quick release) */
	pg_atomic_uint32 fences;	/* transactions fenced on it (lockq_holds) */
	bool		visible;		/* published: readers see it */
	LqGrantOp	staged_op;		/* what the batch being committed does */
	uint64		staged_batch;
	int64		staged_expires; /* LQ_GRANT_OP_PUT, _ENDED: the new lease end */
} LqSessionGrant;

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
	LQ_STAT_COUNT
} LqStat;

typedef struct LqShared
{
	slock_t		mutex;			/* protects worker fields and the ring */
	int			worker_pid;
	int			worker_procno;
	bool		ring_overflow;	/* ring was full: worker must scan slots */
	uint64		next_arrival;
	uint64		ring_head;		/* next entry the worker reads */
	uint64		ring_tail;		/* next entry a backend writes */
	int			ring_size;
	int			nslots;

	/*
	 * Durable promises, kept by the lock server (see lockq_ledger.c): the
	 * last token issued, and the durable ceiling below which tokens may be
	 * issued without a flush.
	 */
	pg_atomic_uint64 token_high;
	int64		token_ceiling;
	Oid			grants_extoid;	/* the installation the session-bound
								 * grants (lockq_grants.c) belong to */

	/* Gauges the worker publishes after every batch. */
	pg_atomic_uint64 holders;
	pg_atomic_uint64 waiters;
	pg_atomic_uint64 delayed;	/* locks delayed after a restart */
	pg_atomic_uint64 state_bytes;	/* memory the lock server's state holds */
	pg_atomic_uint64 fence_gen; /* bumped when a fenced transaction ends */
	pg_atomic_uint64 delay_max; /* the latest end of such a delay (0: none) */

	/* The clock, see lockq_clock.c. */
	pg_atomic_uint64 clock_last;	/* last value handed out */
	pg_atomic_uint64 clock_ceiling; /* durable upper bound for handed out
									 * values */
	int64		clock_offset;	/* lockq time = CLOCK_MONOTONIC + offset */
	pg_atomic_uint32 clock_ready;	/* offset is valid */

	/*
	 * The lock server's start in this shared-memory lifetime (see
	 * lq_ledger_start): whether the first one has committed, and what the
	 * first attempt decided about the clock, kept for a retry.
	 */
	bool		started;
	bool		start_planned;
	bool		start_continuous;
	int64		start_low;

	pg_atomic_uint64 stats[LQ_STAT_COUNT];

	/*
	 * The lock server's batches (lockq_outbox.c): the number of the last
	 * one begun, and the one whose staged outcome is complete and whose
	 * transaction is committing or committed but not yet published (0:
	 * none), with its transaction id.  Lock server only.
	 */
	uint64		batch_seq;
	uint64		sealed_batch;
	TransactionId sealed_xid;

	LqEntry		ring[FLEXIBLE_ARRAY_MEMBER];
} LqShared;

/* Tokens reserved per flush of the token ceiling. */
#define LQ_TOKEN_RESERVE	4096

/* lockq.c: GUC variables */
extern char *lockq_database;
extern bool lockq_synchronous_grants;
extern int	lockq_max_grace;		/* seconds */
extern int	lockq_max_ttl;		/* seconds */
extern int	lockq_waiter_timeout;	/* milliseconds */
extern int	lockq_max_waiters;
extern int	lockq_batch_size;
extern int	lockq_session_locks_per_backend;
extern int	lockq_table_lock_timeout;	/* milliseconds */
extern int	lockq_fence_timeout;	/* milliseconds */
extern int	lockq_max_owner_locks_per_role;
extern int	lockq_max_waiters_per_role;
extern int	lockq_max_session_locks_per_role;
extern int	lockq_max_server_memory;	/* megabytes */
extern bool lockq_namespace_privileges;

/* lockq_shmem.c */
extern LqShared *lq_shared;
extern LqSlot *lq_slots;
extern void lq_shmem_request(void);
extern void lq_shmem_startup(void);
extern void lq_shmem_init_hooks(void);
extern void lq_ring_push(LqEntry entry);
extern int	lq_ring_drain(LqEntry *out, int max, bool *overflow);
extern void lq_wake_worker(void);
extern void lq_stat_add(LqStat stat, uint64 n);
extern void lq_result_error(LqResult *res, int sqlerrcode, const char *message,
							const char *hint);
extern List *lq_slot_fencers(int64 token);

/* lockq_grants.c */
extern Size lq_grants_shmem_size(void);
extern void lq_grants_shmem_request(void);
extern void lq_grants_shmem_startup(void);
extern int	lq_grants_max(void);
extern void lq_grants_stage(LqGrantOp op, const LqSessionGrant *g,
							uint64 batch);
extern void lq_grants_publish(int64 token);
extern void lq_grants_resolve(uint64 committed_batch);
extern uint32 lq_grants_begin_end(int64 token);
extern uint32 lq_grants_fences(int64 token);
extern void lq_grants_undo_ending(void);
extern void lq_grants_clear(void);
extern LqSessionGrant *lq_grants_copy(int *n);
extern int	lq_grants_holds(const char *lock_id, int64 token, int64 now,
							Oid role, bool admin);
extern bool lq_grants_mark_released(const char *lock_id, int64 token,
									int pid, int64 session_start, int64 now);
extern bool lq_grants_is_released(int64 token);
extern bool lq_grants_lock_id(int64 token, char *lock_id);
extern int	lq_grants_nfences(void);
extern bool lq_grants_release_fences(void);


/* lockq_api.c */
extern bool lq_is_available(void);
extern void lq_check_available(void);
extern LqResult lq_call(LqRequest *req);
extern void lq_format_session_owner(char *buf, size_t len, int pid,
									int64 session_start);
extern void lq_install_backend_hooks(void);

/* lockq_worker.c */
extern PGDLLEXPORT void lockq_worker_main(Datum main_arg);
extern void lq_register_worker(void);

#include "lockq_clock.h"

#endif							/* LOCKQ_H */

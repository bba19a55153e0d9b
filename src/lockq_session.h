/*-------------------------------------------------------------------------
 *
 * lockq_session.h
 *		Session-bound grants in shared memory (lockq_session.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_session.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_SESSION_H
#define LOCKQ_SESSION_H

#include "port/atomics.h"

#include "lockq.h"

/*
 * A session-bound grant (owner NULL), kept in shared memory instead of
 * lockq.owners: see lockq_session.c.
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

/*
 * Each backend may hold this many grants made on the fast path
 * (lockq_fastpath.c); the table has room for them on top of
 * lockq.session_locks_per_backend.
 */
#define LQ_FAST_PER_BACKEND		16

/*
 * An entry of the table of session-bound grants.
 *
 * Locking: the table and every field of its entries are under the
 * module's one LWLock (lq_session_lock): taken exclusively to enter,
 * remove or change an entry, shared to read one.  The exception is fences,
 * an atomic counter that backends change while they hold the LWLock
 * shared (lq_session_holds adds a fence, lq_session_release_fences takes
 * it off); the lock server reads it holding the LWLock exclusively
 * (lq_session_begin_end), so that no fence is taken while it marks the
 * grant ENDING.
 *
 * Writers: the lock server enters, stages, publishes and removes its
 * grants (end, visible, expires, staged_*); a backend enters and removes
 * the grants it makes on the fast path (lq_session_enter_fast,
 * lq_session_remove_fast) and sets released on its own grant
 * (lq_session_mark_released).
 */
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

extern void lq_session_init_hooks(void);
extern int	lq_session_max(void);
extern void lq_session_stage(LqGrantOp op, const LqSessionGrant *g,
							 uint64 batch);
extern void lq_session_publish(int64 token);
extern void lq_session_resolve(uint64 committed_batch);
extern uint32 lq_session_begin_end(int64 token);
extern uint32 lq_session_fences(int64 token);
extern void lq_session_undo_ending(void);
extern void lq_session_clear(void);
extern LqSessionGrant *lq_session_copy(bool mine, int *n);
extern LqHeld lq_session_holds(const char *lock_id, int64 token, int64 now,
							   Oid role, bool admin);
extern bool lq_session_enter_fast(const LqSessionGrant *g);
extern void lq_session_forget_fast(int64 token);
extern bool lq_session_remove_fast(int64 token, int64 now, bool *expired);
extern bool lq_session_get(int64 token, LqSessionGrant *out);
extern bool lq_session_mark_released(const char *lock_id, int64 token,
									 int pid, int64 session_start, int64 now);
extern bool lq_session_is_released(int64 token);
extern bool lq_session_release_fences(void);


extern void lq_session_format_owner(char *buf, size_t len, int pid,
									int64 session_start);

#endif							/* LOCKQ_SESSION_H */

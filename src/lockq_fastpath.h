/*-------------------------------------------------------------------------
 *
 * lockq_fastpath.h
 *		Session-bound grants a backend makes by itself (lockq_fastpath.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fastpath.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_FASTPATH_H
#define LOCKQ_FASTPATH_H

#include "nodes/pg_list.h"

#include "lockq.h"

/* What lq_fastpath_release did. */
typedef enum LqFastRelease
{
	LQ_FAST_NOT_MINE = 0,		/* not a grant of this table: the normal path */
	LQ_FAST_RELEASED,			/* released, the lock is free */
	LQ_FAST_EXPIRED				/* its lease had run out: it is gone */
} LqFastRelease;

/* A grant of the table; what the lock server takes out (lq_fastpath_adopt). */
typedef struct LqFastGrant
{
	char		lock_id[LQ_MAX_ID_LEN + 1]; /* hash key, must be first */
	int64		token;
	int			slotno;			/* its session's slot */
} LqFastGrant;

/* Shared memory: lockq.c installs the hooks. */
extern void lq_fastpath_init_hooks(void);

/* Backends. */
extern int	lq_fastpath_claim(const char *lock_id);
extern void lq_fastpath_unclaim(int claim);
extern int64 lq_fastpath_grant(const char *lock_id, int slotno, int pid,
							   int64 session_start, Oid role, int64 ttl_us,
							   int64 now);
extern LqFastRelease lq_fastpath_release(const char *lock_id, int64 token,
										 int64 now);
extern uint64 lq_fastpath_count(void);

/* The lock server. */
extern bool lq_fastpath_adopt(const char *lock_id, bool create,
							  LqFastGrant *adopted);
extern void lq_fastpath_forget(const char *lock_id);
extern List *lq_fastpath_adopt_slot(int slotno);
extern void lq_fastpath_stop(void);
extern void lq_fastpath_start(void);

#endif							/* LOCKQ_FASTPATH_H */

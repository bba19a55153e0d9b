/*-------------------------------------------------------------------------
 *
 * lockq_leases.h
 *		Leased grants a session may release by itself (lockq_leases.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_leases.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_LEASES_H
#define LOCKQ_LEASES_H

#include "lockq.h"

/* A grant in the table, for a lock server that rebuilds its state. */
typedef struct LqLeaseGrant
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int64		token;
	char		owner[LQ_MAX_OWNER_LEN + 1];
	Oid			role;
	int64		acquired;
	int64		ttl;
	int64		expires;
	bool		released;		/* by a session, or its end was under way */
	bool		rowless;		/* no row in lockq.owners */
	bool		kept;			/* its entry stays */
} LqLeaseGrant;

/* Shared memory: lockq.c installs the hooks. */
extern void lq_leases_init_hooks(void);

/* Backends. */
extern bool lq_leases_mark_released(const char *lock_id, const char *owner,
									bool has_token, int64 token, Oid role,
									int64 now, int64 *released);
extern bool lq_leases_is_released(const char *lock_id, int64 token);
extern int64 *lq_leases_released(int *n);
extern LqLeaseGrant *lq_leases_rowless(int *n);
extern LqHeld lq_leases_fence(const char *lock_id, int64 token, int64 now,
							Oid role, bool admin);
extern bool lq_leases_release_fences(void);

/* The lock server. */
extern int	lq_leases_capacity(void);
extern void lq_leases_put(const char *lock_id, int64 token, const char *owner,
						  Oid role, int64 acquired, int64 ttl, int64 expires,
						  bool rowless);
extern void lq_leases_drop(const char *lock_id, int64 token);
extern bool lq_leases_begin_end(const char *lock_id, int64 token,
								uint32 *fences);
extern uint32 lq_leases_fences(const char *lock_id, int64 token);
extern bool lq_leases_revoke(const char *lock_id);
extern bool lq_leases_revoke_all(bool (*own_covers) (const char *lock_id,
													 int64 expires, int64 ttl),
								 bool *rowless);
extern bool lq_leases_entry_covered(const char *lock_id,
									bool (*covers) (const char *lock_id,
													int64 expires, int64 ttl));
extern LqLeaseGrant *lq_leases_reload(int *n);
extern void lq_leases_clear(void);

#endif							/* LOCKQ_LEASES_H */

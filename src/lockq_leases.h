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

/* A grant a session released that the lock server has yet to end. */
typedef struct LqLeaseRef
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int64		token;
} LqLeaseRef;

/* Shared memory (lockq_shmem.c calls these from its hooks). */
extern Size lq_leases_shmem_size(void);
extern void lq_leases_shmem_request(void);
extern void lq_leases_shmem_startup(void);

/* Backends. */
extern bool lq_leases_mark_released(const char *lock_id, const char *owner,
									bool has_token, int64 token, Oid role,
									int64 now, int64 *released);
extern bool lq_leases_is_released(const char *lock_id, int64 token);
extern LqLeaseRef *lq_leases_released(int *n);

/* The lock server. */
extern void lq_leases_put(const char *lock_id, int64 token, const char *owner,
						  Oid role, int64 expires);
extern void lq_leases_drop(const char *lock_id, int64 token);
extern bool lq_leases_begin_end(const char *lock_id, int64 token);
extern bool lq_leases_revoke(const char *lock_id);
extern bool lq_leases_revoke_all(void);
extern LqLeaseRef *lq_leases_reset(int *n);
extern void lq_leases_clear(void);

#endif							/* LOCKQ_LEASES_H */

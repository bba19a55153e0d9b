/*-------------------------------------------------------------------------
 *
 * lockq_guc.h
 *		lockq's settings (lockq_guc.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_guc.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_GUC_H
#define LOCKQ_GUC_H

/* The settings, lockq.* (README, "Configuration"). */
extern char *lockq_database;
extern bool lockq_synchronous_grants;
extern int	lockq_max_grace;		/* seconds */
extern int	lockq_max_unsettled_rate;	/* per second; -1: always one at a time */
extern int	lockq_grant_row_delay;	/* ms; 0: a row at once */
extern int	lockq_spin_time;		/* microseconds; 0: no spinning */
extern int	lockq_log_lease_ends;	/* elevel; 0: off */
extern int	lockq_max_ttl;		/* seconds */
extern int	lockq_waiter_timeout;	/* milliseconds */
extern int	lockq_max_waiters;
/* the most requests one batch may take: lockq.batch_size's bound, and the
 * size of the lock server's buffer of ring entries */
#define LQ_MAX_BATCH_SIZE	65536
extern int	lockq_batch_size;
extern int	lockq_session_locks_per_backend;
extern int	lockq_table_lock_timeout;	/* milliseconds */
extern int	lockq_fence_timeout;	/* milliseconds */
extern int	lockq_max_owner_locks_per_role;
extern int	lockq_max_waiters_per_role;
extern int	lockq_max_session_locks_per_role;
extern int	lockq_max_server_memory;	/* megabytes */
extern int	lockq_lock_servers;

/* lockq.lock_servers' largest value: LQ_MAX_SERVERS (lockq_shmem.h). */
#define LQ_GUC_MAX_SERVERS	32
extern bool lockq_namespace_privileges;

extern void lq_guc_define(void);

#endif							/* LOCKQ_GUC_H */

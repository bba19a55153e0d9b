/*-------------------------------------------------------------------------
 *
 * lockq_durability.h
 *		The lock server's durability: which promises a batch makes
 *		must be flushed before anyone learns of them.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_durability.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_DURABILITY_H
#define LOCKQ_DURABILITY_H

#include "lockq.h"
#include "nodes/pg_list.h"

/*
 * A lock delayed after a restart: nothing is granted before until (leases
 * that may have been lost), nor before hold_until while hold_token, a grant
 * that survived, is held (its holder may count on it that long).
 */
typedef struct LqDelay
{
	char	   *lock_id;
	int64		until;
	int64		hold_token;
	int64		hold_until;
} LqDelay;

/* Lock server start and stop. */
extern void lq_durability_init(void);
extern int64 lq_durability_start(bool first_start);
extern List *lq_durability_load(int64 now, int64 *all_until);
extern void lq_durability_stop(int64 last_clock, bool all);

/* The batch. */
extern void lq_durability_begin(void);
extern bool lq_durability_flush_needed(void);
extern void lq_durability_prepare_commit(void);
extern void lq_durability_committed(void);
extern void lq_durability_discard(void);
extern void lq_durability_settle_markers(int64 now);
extern int64 lq_durability_next_deadline(void);
extern List *lq_durability_take_needs_rows(bool *all);

/* Values and promises the rules hand out (lockq_rules.c). */
extern int64 lq_durability_tick(void);
extern void lq_durability_extend_clock(int64 now);
extern int64 lq_durability_next_token(void);
extern void lq_durability_lease_shown(const char *lock_id, int64 expires,
									  int64 lease_us, int64 now, bool new_lock);
extern void lq_durability_end_shown(const char *lock_id, int64 ttl, int64 now,
									bool new_lock);
extern bool lq_durability_covers(const char *lock_id, int64 expires, int64 ttl,
								 int64 now);
extern bool lq_durability_end_covered(const char *lock_id, int64 ttl,
									  int64 now);
extern void lq_durability_hold_lifted(const char *lock_id);

#endif							/* LOCKQ_DURABILITY_H */

/*-------------------------------------------------------------------------
 *
 * lockq_ledger.h
 *		The lock server's durability ledger: which promises a batch makes
 *		must be flushed before anyone learns of them.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_ledger.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_LEDGER_H
#define LOCKQ_LEDGER_H

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
extern void lq_ledger_init(void);
extern int64 lq_ledger_start(bool first_start);
extern List *lq_ledger_load(int64 now, int64 *all_until);
extern void lq_ledger_stop(int64 last_clock);

/* The batch. */
extern void lq_ledger_begin(void);
extern bool lq_ledger_flush_needed(void);
extern void lq_ledger_prepare_commit(void);
extern void lq_ledger_committed(void);
extern void lq_ledger_discard(void);
extern void lq_ledger_settle_markers(int64 now);
extern int64 lq_ledger_next_deadline(void);
extern List *lq_ledger_take_needs_rows(bool *all);

/* Values and promises the rules hand out (lockq_rules.c). */
extern int64 lq_ledger_tick(void);
extern void lq_ledger_extend_clock(int64 now);
extern int64 lq_ledger_next_token(void);
extern void lq_ledger_lease_shown(const char *lock_id, int64 expires,
								  int64 lease_us, int64 now, bool new_lock);
extern void lq_ledger_end_shown(const char *lock_id, int64 ttl, int64 now,
								bool new_lock);
extern bool lq_ledger_covers(const char *lock_id, int64 expires, int64 ttl,
							 int64 now);
extern bool lq_ledger_end_covered(const char *lock_id, int64 ttl, int64 now);
extern void lq_ledger_hold_lifted(const char *lock_id);

#endif							/* LOCKQ_LEDGER_H */

/*-------------------------------------------------------------------------
 *
 * lockq_rules.h
 *		The lock server's in-memory lock table and its rules.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_rules.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_RULES_H
#define LOCKQ_RULES_H

#include "lockq.h"
#include "nodes/pg_list.h"

/* lockq_rules.c: the rules, applied inside the worker's batch transaction */
extern void lq_rules_init(void);
extern void lq_rules_apply(int slotno, uint64 reqid, const LqRequest *req,
						   int64 now);
extern bool lq_rules_is_waiting(int slotno, uint64 reqid);
extern void lq_rules_cancel_wait(int slotno, uint64 reqid, int64 now);
extern void lq_rules_unpicked_grant(const LqRequest *req, const LqResult *res,
									int64 now);
extern void lq_rules_undo_grant(const LqRequest *req, const LqResult *res,
								int64 now);
extern void lq_rules_session_end(int slotno, int pid, int64 session_start,
								 int64 now);
extern void lq_rules_session_end_waits(int slotno, int64 now);
extern void lq_rules_session_end_grants(int slotno, int pid,
										int64 session_start, int64 now);
extern void lq_rules_quick_release(const char *lock_id, int64 token,
								   int64 now);
extern bool lq_rules_run_timers(int64 now);
extern void lq_rules_fire_due_for(const char *lock_id, const char *owner,
								  int64 now);
extern void lq_rules_run_wait_timeouts(int64 now);
extern bool lq_rules_session_holds(int slotno);
extern void lq_rules_retry_deferred(int64 now);
extern int64 lq_rules_next_deadline(void);
extern bool lq_rules_has_deferred(void);
extern void lq_rules_publish_gauges(void);
extern bool lq_rules_oversized(Size *held);
extern bool lq_rules_every_lock_delayed(int64 now);

extern void lq_rules_give_rows(List *lock_ids, bool all);

#endif							/* LOCKQ_RULES_H */

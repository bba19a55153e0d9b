/*-------------------------------------------------------------------------
 *
 * lockq_state.h
 *		The lock server's in-memory lock table, and the services the worker
 *		loop provides to it.
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		src/lockq_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_STATE_H
#define LOCKQ_STATE_H

#include "lockq.h"

/* lockq_state.c: the rules, applied inside the worker's batch transaction */
extern void lq_state_init(void);
extern void lq_state_reset(void);
extern void lq_state_load(int64 now);
extern void lq_state_apply(int slotno, uint64 reqid, const LqRequest *req,
						   int64 now);
extern bool lq_state_is_waiting(int slotno, uint64 reqid);
extern void lq_state_cancel_wait(int slotno, uint64 reqid);
extern void lq_state_undo_grant(const LqRequest *req, const LqResult *res,
								int64 now);
extern void lq_state_session_end(int slotno, int pid, int64 session_start,
								 int64 now);
extern void lq_state_quick_release(int64 token, int64 now);
extern void lq_state_run_timers(int64 now);
extern void lq_state_run_wait_timeouts(int64 now);
extern bool lq_state_session_holds(int slotno);
extern void lq_state_retry_deferred(int64 now);
extern int64 lq_state_next_deadline(void);
extern bool lq_state_has_deferred(void);
extern void lq_state_publish_gauges(void);
extern void lq_state_set_grace(int64 until);

/* lockq_worker.c: services for the rules */
extern int64 lq_worker_tick(void);
extern int64 lq_worker_next_token(void);
extern void lq_worker_lease_shown(int64 expires, int64 lease_us);

/* lockq_clock.c: worker-only parts of the clock */
extern void lq_clock_setup(int64 durable_ceiling);
extern void lq_clock_reopen(int64 durable_ceiling);
extern int64 lq_clock_close(void);
extern int64 lq_clock_ceiling(void);
extern void lq_clock_publish_ceiling(int64 ceiling);

#endif							/* LOCKQ_STATE_H */

/*-------------------------------------------------------------------------
 *
 * lockq_call.h
 *		A backend's call to the lock server (lockq_call.c): availability
 *		checks, the round trip, fast-path grants and quick releases.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_call.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_CALL_H
#define LOCKQ_CALL_H

#include "lockq.h"

extern bool lq_call_is_available(void);
extern void lq_call_check_available(void);
extern bool lq_call_is_admin(Oid role);
extern int	lq_call_slotno(void);
extern void lq_call_attach(void);
extern LqResult lq_call(LqRequest *req);
extern void lq_call_raise_if_error(const LqRequest *req, const LqResult *res);
extern int	lq_call_timeout_detail(const LqResult *res);
extern void lq_call_remember_grant(const char *lock_id, int64 token);
extern bool lq_call_quick_release(const LqRequest *req);
extern bool lq_call_quick_release_leased(const LqRequest *req);
extern bool lq_call_take_fast(LqRequest *req, LqResult *res);
extern void lq_call_release_session(void);
extern int64 lq_call_now_bounded(void);
extern int64 lq_call_now_handout(void);

#endif							/* LOCKQ_CALL_H */

/*-------------------------------------------------------------------------
 *
 * lockq_policy.h
 *		Per-role limits and namespace privileges (lockq_policy.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_policy.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_POLICY_H
#define LOCKQ_POLICY_H

#include "lockq.h"

extern void lq_policy_limits(Oid role, LqRequest *req);
extern bool lq_policy_default_session_limit(Oid role);
extern bool lq_policy_may_use(const char *lock_id, Oid role, bool admin);
extern void lq_policy_check_use(const char *lock_id, Oid role, bool admin);

#endif							/* LOCKQ_POLICY_H */

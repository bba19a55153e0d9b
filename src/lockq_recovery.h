/*-------------------------------------------------------------------------
 *
 * lockq_recovery.h
 *		Rebuilding the lock server's lock table from what outlives it.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_recovery.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_RECOVERY_H
#define LOCKQ_RECOVERY_H

#include "nodes/pg_list.h"

extern void lq_recovery_load(int64 now, List *delays, int64 all_until);

#endif							/* LOCKQ_RECOVERY_H */

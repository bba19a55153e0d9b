/*-------------------------------------------------------------------------
 *
 * lockq_fences.h
 *		The fences a backend's transaction takes with lockq_holds
 *		(lockq_fences.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fences.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_FENCES_H
#define LOCKQ_FENCES_H

extern bool lq_fences_hold(const char *lock_id, int64 token);
extern bool lq_fences_active(void);
extern void lq_fences_end(void);

#endif							/* LOCKQ_FENCES_H */

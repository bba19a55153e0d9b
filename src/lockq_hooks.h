/*-------------------------------------------------------------------------
 *
 * lockq_hooks.h
 *		The backend hooks (lockq_hooks.c): executor, utility and
 *		transaction callbacks.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_hooks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_HOOKS_H
#define LOCKQ_HOOKS_H

extern void lq_hooks_install(void);
extern void lq_hooks_watch_xact(void);
extern void lq_hooks_note_fresh_grant(const char *lock_id, int64 token);

#endif							/* LOCKQ_HOOKS_H */

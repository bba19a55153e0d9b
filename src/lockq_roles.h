/*-------------------------------------------------------------------------
 *
 * lockq_roles.h
 *		What each role has in the lock servers' state, for its limits
 *		(lockq_roles.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_roles.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_ROLES_H
#define LOCKQ_ROLES_H

/* What is counted per role. */
typedef enum LqRoleCount
{
	LQ_ROLE_OWNER_LOCKS = 0,	/* grants with an explicit owner */
	LQ_ROLE_WAITERS,
	LQ_ROLE_SESSION_LOCKS,		/* session-bound grants */
	LQ_ROLE_NCOUNTS
} LqRoleCount;

/*
 * The entry that counts what every role has: waiters (lockq.max_waiters) and
 * session-bound grants (the room of lockq.session_locks_per_backend).
 */
#define LQ_ROLES_ALL	InvalidOid

/* The lock server only. */
extern void lq_roles_attach(void);
extern void lq_roles_count(Oid role, LqRoleCount what, int delta);
extern bool lq_roles_reserve(Oid role, LqRoleCount what, int limit);
extern void lq_roles_end_request(void);
extern void lq_roles_forget_mine(void);

#endif							/* LOCKQ_ROLES_H */

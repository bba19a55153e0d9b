/*-------------------------------------------------------------------------
 *
 * lockq_outbox.h
 *		What a batch of the lock server makes known, staged in shared memory
 *		until the batch's transaction has committed.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_outbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_OUTBOX_H
#define LOCKQ_OUTBOX_H

#include "lockq.h"
#include "lockq_session.h"
#include "nodes/pg_list.h"

/* The batch: begin, then seal right before its commit, then publish. */
extern void lq_outbox_init(void);
extern void lq_outbox_begin(void);
extern void lq_outbox_emit_notices(void);
extern void lq_outbox_seal(void);
extern List *lq_outbox_publish(void);
extern List *lq_outbox_discard(void);
extern void lq_outbox_resolve(void);

/* What the rules decided, for the backends. */
extern bool lq_outbox_answered(int slotno);
extern void lq_outbox_reply(int slotno, uint64 reqid, const LqResult *res);
extern void lq_outbox_ack(int slotno, uint64 reqid);
extern void lq_outbox_free(int slotno, uint64 reqid);
extern void lq_outbox_queued(int slotno, int64 ts);
extern int	lq_outbox_quick_taken(int slotno);
extern void lq_outbox_quick_done(int slotno);

/* Session-bound grants (lockq_session.c). */
extern void lq_outbox_grant_put(const LqSessionGrant *g);
extern void lq_outbox_grant_ended(int64 token, int64 expires);
extern void lq_outbox_grant_delete(int64 token);

/* Leased grants sessions may release by themselves (lockq_leases.c). */
extern void lq_outbox_lease_put(const char *lock_id, int64 token,
								const char *owner, Oid role, int64 acquired,
								int64 ttl, int64 expires, bool rowless);
extern void lq_outbox_lease_drop(const char *lock_id, int64 token);
extern void lq_outbox_lock_dropped(const char *lock_id);

/* NOTIFYs for client-side waiters, sent with the commit. */
extern void lq_outbox_notify(const char *channel, const char *event,
							 int64 token, const char *lock_id,
							 const char *owner);

#endif							/* LOCKQ_OUTBOX_H */

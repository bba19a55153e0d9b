/*-------------------------------------------------------------------------
 *
 * lockq_store.h
 *		The durable mirror of the lock state: lockq.owners and lockq.queue.
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		src/lockq_store.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_STORE_H
#define LOCKQ_STORE_H

#include "lockq.h"
#include "storage/itemptr.h"

/* One row of lockq.owners. */
typedef struct LqOwnerRow
{
	ItemPointerData tid;		/* where the row is (loads) */
	const char *lock_id;
	const char *owner;
	int64		token;
	int64		ttl;
	int64		acquired;
	int64		expires;
	Oid			role;
	const char *channel;		/* NULL: none */
} LqOwnerRow;

/* One row of lockq.queue. */
typedef struct LqQueueRow
{
	ItemPointerData tid;		/* where the row is (loads) */
	const char *lock_id;
	int64		ts;
	const char *owner;
	int64		ttl;
	int64		heartbeat;		/* µs allowed between heartbeats */
	Oid			role;
	const char *channel;
} LqQueueRow;

typedef enum LqEndResult
{
	LQ_END_DELETED,				/* the row is gone: the lock is free */
	LQ_END_LOCKED,				/* a fenced transaction holds the row */
	LQ_END_MISSING				/* there was no such row */
} LqEndResult;

/* What lq_store_try_lock could not lock, and who holds it (0: unknown). */
typedef struct LqLockFailure
{
	Oid			relid;
	int			holder;
} LqLockFailure;

typedef void (*lq_owner_cb) (const LqOwnerRow *row, void *arg);
typedef void (*lq_queue_cb) (const LqQueueRow *row, void *arg);

/* Worker side; all need an open transaction (loads: an SPI connection). */
extern bool lq_store_installed(Oid *extoid);
extern void lq_store_prepare(void);
extern Oid	lq_store_owners_relid(void);
extern bool lq_store_try_lock(LqLockFailure *fail);
extern void lq_store_end_batch(bool commit);
extern void lq_store_owner_insert(const LqOwnerRow *row, ItemPointer tid);
extern LqEndResult lq_store_owner_end(ItemPointer tid);
extern void lq_store_owner_update(ItemPointer tid, const LqOwnerRow *row);
extern void lq_store_queue_insert(const LqQueueRow *row, ItemPointer tid);
extern void lq_store_queue_delete(ItemPointer tid);
extern int64 lq_store_clock_read(void);
extern void lq_store_clock_write(int64 ceiling);
extern int64 lq_store_token_read(void);
extern void lq_store_token_write(int64 ceiling);
extern int64 lq_store_horizon_read(void);
extern void lq_store_horizon_write(int64 horizon);
extern void lq_store_after_restart(int64 start, int64 low, int64 floor);
extern void lq_store_load_owners(lq_owner_cb cb, void *arg);
extern void lq_store_load_queue(lq_queue_cb cb, void *arg);

/* Backend side. */
extern bool lq_store_holds(const char *lock_id, int64 token, int64 now);

#endif							/* LOCKQ_STORE_H */

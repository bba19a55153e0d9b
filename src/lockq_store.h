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

/* One row of lockq.owners. */
typedef struct LqOwnerRow
{
	const char *lock_id;
	const char *owner;
	int64		token;
	int64		ttl;
	int64		acquired;
	int64		expires;
	int			session_pid;	/* 0: not bound to a session */
	int64		session_start;
	Oid			role;
	const char *channel;		/* NULL: none */
} LqOwnerRow;

/* One row of lockq.queue. */
typedef struct LqQueueRow
{
	const char *lock_id;
	int64		ts;
	const char *owner;
	bool		client;			/* kind 'client', else 'backend' */
	int64		ttl;
	int64		heartbeat;		/* client waiters: µs between heartbeats */
	int			session_pid;	/* backend waiters: the waiting backend */
	int64		session_start;
	Oid			role;
	const char *channel;
} LqQueueRow;

typedef enum LqEndResult
{
	LQ_END_DELETED,				/* the row is gone: the lock is free */
	LQ_END_LOCKED,				/* a fenced transaction holds the row */
	LQ_END_MISSING				/* there was no such row */
} LqEndResult;

typedef void (*lq_owner_cb) (const LqOwnerRow *row, void *arg);
typedef void (*lq_queue_cb) (const LqQueueRow *row, void *arg);

/* Worker side; all need an open transaction and SPI connection. */
extern bool lq_store_installed(Oid *extoid);
extern void lq_store_prepare(void);
extern int64 lq_store_next_token(void);
extern void lq_store_token_floor(void);
extern void lq_store_owner_insert(const LqOwnerRow *row);
extern LqEndResult lq_store_owner_end(const char *lock_id, int64 token);
extern void lq_store_owner_set_expires(const char *lock_id, int64 token,
									   int64 expires);
extern void lq_store_owner_delete_session(const char *lock_id, int64 token);
extern void lq_store_queue_insert(const LqQueueRow *row);
extern void lq_store_queue_delete(const char *lock_id, const char *owner);
extern int64 lq_store_clock_read(void);
extern void lq_store_clock_write(int64 ceiling);
extern void lq_store_after_restart(int64 start, int64 low);
extern void lq_store_load_owners(lq_owner_cb cb, void *arg);
extern void lq_store_load_queue(lq_queue_cb cb, void *arg);

/* Backend side. */
extern bool lq_store_holds(const char *lock_id, int64 token, int64 now);

#endif							/* LOCKQ_STORE_H */

/*-------------------------------------------------------------------------
 *
 * lockq_tables.h
 *		The durable mirror of the lock state: lockq.owners and lockq.queue.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_tables.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_TABLES_H
#define LOCKQ_TABLES_H

#include "lockq.h"
#include "nodes/pg_list.h"
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

/*
 * One row of lockq.unsettled: a lock whose latest changes may have been
 * shown before they were flushed (see lockq_durability.c).
 */
typedef struct LqUnsettledRow
{
	ItemPointerData tid;		/* where the row is (loads) */
	const char *lock_id;
	int64		until;			/* leases shown unflushed end by this */
	int64		fence_ttl;		/* ends of grants with a ttl up to this may
								 * have been shown unflushed (0: none) */
	int64		delay_until;	/* after a restart: nothing granted before */
	int64		hold_token;		/* the grant that survived it... */
	int64		hold_until;		/* ...may be counted on until this */
} LqUnsettledRow;

/*
 * The row of lock server k's wide marker (lockq_durability.c) in
 * lockq.unsettled: '' for lock server 0, and for the others an id longer
 * than any lock id may be (LQ_MAX_ID_LEN + 1 digits: the server's number,
 * zero-padded), so that no lock's row can be one.
 */
#define LQ_WIDE_ROW_LEN		(LQ_MAX_ID_LEN + 1)

typedef enum LqEndResult
{
	LQ_END_DELETED,				/* the row is gone: the lock is free */
	LQ_END_LOCKED,				/* a fenced transaction holds the row */
	LQ_END_MISSING				/* there was no such row */
} LqEndResult;

/* What lq_tables_try_lock could not lock, and who holds it (0: unknown). */
typedef struct LqLockFailure
{
	Oid			relid;
	int			holder;
} LqLockFailure;

typedef void (*lq_owner_cb) (const LqOwnerRow *row, void *arg);
typedef void (*lq_queue_cb) (const LqQueueRow *row, void *arg);
typedef void (*lq_unsettled_cb) (const LqUnsettledRow *row, void *arg);

/* Worker side; all need an open transaction (loads: an SPI connection). */
extern bool lq_tables_installed(Oid *extoid);
extern void lq_tables_prepare(void);
extern Oid	lq_tables_owners_relid(void);
extern bool lq_tables_try_lock(LqLockFailure *fail);
extern void lq_tables_note_files(void);
extern bool lq_tables_rewritten(void);
extern void lq_tables_end_batch(bool commit);
extern void lq_tables_owner_insert(const LqOwnerRow *row, ItemPointer tid);
extern LqEndResult lq_tables_owner_end(ItemPointer tid);
extern void lq_tables_owner_update(ItemPointer tid, const LqOwnerRow *row);
extern void lq_tables_queue_insert(const LqQueueRow *row, ItemPointer tid);
extern void lq_tables_queue_delete(ItemPointer tid);
extern int64 lq_tables_clock_read(void);
extern void lq_tables_seqs_lock(void);
extern void lq_tables_clock_write(int64 ceiling);
extern int64 lq_tables_token_read(void);
extern void lq_tables_token_write(int64 ceiling);
extern void lq_tables_unsettled_put(const LqUnsettledRow *row, ItemPointer tid);
extern void lq_tables_unsettled_delete(ItemPointer tid);
extern void lq_tables_load_unsettled(lq_unsettled_cb cb, void *arg);
extern void lq_tables_settle(int64 now, bool continuous, int64 low);
extern void lq_tables_wide_row(int server, char *buf);
extern bool lq_tables_wide_row_server(const char *lock_id, int *server);
extern void lq_tables_load_owners(lq_owner_cb cb, void *arg);
extern void lq_tables_load_queue(lq_queue_cb cb, void *arg);

/* Backend side. */
extern LqHeld lq_tables_holds(const char *lock_id, int64 token, int64 now,
							  Oid role, bool admin);
extern List *lq_tables_fencer_pids(ItemPointer tid);

#endif							/* LOCKQ_TABLES_H */

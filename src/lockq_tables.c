/*-------------------------------------------------------------------------
 *
 * lockq_tables.c
 *		The durable mirror of the lock state: the tables lockq.owners (one
 *		row per current grant) and lockq.queue (one row per client-side
 *		waiter, in (ts, owner) order), and the sequences behind the token
 *		ceiling, the clock ceiling and the lease horizon.
 *
 * Only the lock-server worker writes these, always inside its batch
 * transaction, with the heap and index routines directly (the hot path:
 * no executor, no SPI); it keeps the TID of every row it owns, so it never
 * searches for one.  The rare bulk statements (loading the state after a
 * restart) use SPI with schema-qualified names and search_path =
 * pg_catalog, so no user object can be substituted.
 *
 * Ending a grant deletes its owners row without waiting: when a fenced
 * transaction (lockq_holds) holds a KEY SHARE lock on it, the delete
 * reports that and the worker defers the hand-off instead of blocking.
 * lq_tables_holds, run by a backend, is the other half: it finds the current
 * row with the latest snapshot and takes that KEY SHARE lock.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_tables.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/multixact.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/sinvaladt.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "storage/itemptr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_tables.h"

/* Attribute numbers of lockq.owners, in table order. */
#define OWN_LOCK_ID			1
#define OWN_TOKEN			3
#define OWN_EXPIRES			6
#define OWN_ROLE			7
#define OWN_NATTS			8
#define QUE_NATTS			7
#define UNS_NATTS			6

static Oid	lq_owners_rel = InvalidOid;
static Oid	lq_queue_rel = InvalidOid;
static Oid	lq_token_seq = InvalidOid;
static Oid	lq_clock_seq = InvalidOid;
static Oid	lq_unsettled_rel = InvalidOid;

/* The relations of the current batch, opened on first use. */
static Relation lq_owners = NULL;
static CatalogIndexState lq_owners_idx = NULL;
static Relation lq_queue = NULL;
static CatalogIndexState lq_queue_idx = NULL;
static Relation lq_unsettled = NULL;
static CatalogIndexState lq_unsettled_idx = NULL;

/*
 * lq_tables_installed reports whether the extension exists in this database,
 * and its OID.  Needs a transaction.
 */
bool
lq_tables_installed(Oid *extoid)
{
	*extoid = get_extension_oid("lockq", true);
	return OidIsValid(*extoid);
}

static Oid
lq_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid(LQ_SCHEMA, false);
	Oid			relid = get_relname_relid(relname, nsp);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist", LQ_SCHEMA, relname),
				 errhint("If an older version of lockq is installed, run ALTER EXTENSION lockq UPDATE; otherwise reinstall it.")));
	return relid;
}

/*
 * lq_tables_prepare looks up the tables and sequences, after the extension
 * was (re)installed.  Needs a transaction.
 */
void
lq_tables_prepare(void)
{
	lq_owners_rel = lq_relid(LQ_OWNERS_TABLE);
	lq_queue_rel = lq_relid(LQ_QUEUE_TABLE);
	lq_token_seq = lq_relid(LQ_TOKEN_SEQ);
	lq_clock_seq = lq_relid(LQ_CLOCK_SEQ);
	lq_unsettled_rel = lq_relid(LQ_UNSETTLED_TABLE);
}

Oid
lq_tables_owners_relid(void)
{
	return lq_owners_rel;
}

/*
 * lq_lock_holder returns the pid of a process whose lock on relid conflicts
 * with RowExclusiveLock, or 0.  For the log and the error only.
 */
static int
lq_lock_holder(Oid relid)
{
	LOCKTAG		tag;
	VirtualTransactionId *vxids;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
	vxids = GetLockConflicts(&tag, RowExclusiveLock, NULL);
	for (; VirtualTransactionIdIsValid(*vxids); vxids++)
	{
		PGPROC	   *proc = BackendIdGetProc(vxids->backendId);

		if (proc != NULL && proc->pid != 0)
			return proc->pid;
	}
	return 0;
}

static bool
lq_try_lock_one(Oid relid, LqLockFailure *fail)
{
	if (ConditionalLockRelationOid(relid, RowExclusiveLock))
		return true;
	fail->relid = relid;
	fail->holder = lq_lock_holder(relid);
	return false;
}

/*
 * lq_tables_try_lock takes, without waiting, every lock a batch may need on
 * lockq's relations: the tables, their indexes and the sequences, in
 * RowExclusiveLock (what writing them takes).  A batch takes them before it
 * changes anything, so that a conflicting lock (LOCK TABLE, VACUUM FULL,
 * ALTER, REINDEX, an open DROP EXTENSION) never blocks the lock server
 * half-way through a batch: the batch is then not run at all.  Returns
 * false and what could not be locked, by whom, if any lock is not free.
 * Locks taken are kept to the end of the transaction.
 */
bool
lq_tables_try_lock(LqLockFailure *fail)
{
	Oid			tables[3] = {lq_owners_rel, lq_queue_rel, lq_unsettled_rel};
	Oid			seqs[2] = {lq_token_seq, lq_clock_seq};
	int			i;

	for (i = 0; i < lengthof(tables); i++)
	{
		Relation	rel;
		List	   *indexes;
		ListCell   *lc;

		if (!lq_try_lock_one(tables[i], fail))
			return false;
		rel = relation_open(tables[i], NoLock);
		indexes = RelationGetIndexList(rel);
		relation_close(rel, NoLock);
		foreach(lc, indexes)
		{
			if (!lq_try_lock_one(lfirst_oid(lc), fail))
				return false;
		}
		list_free(indexes);
	}
	for (i = 0; i < lengthof(seqs); i++)
	{
		if (!lq_try_lock_one(seqs[i], fail))
			return false;
	}
	return true;
}

/*
 * The files the lock server's remembered row addresses (TIDs) point into:
 * those of lockq.owners, lockq.queue and lockq.unsettled when the state was
 * loaded.  A rewrite (VACUUM FULL, CLUSTER, SET TABLESPACE, a swap of the
 * file by a tool) gives a table a new file with its rows at new places.
 */
static RelFileNode lq_loaded_files[3];

static void
lq_tables_relids(Oid *relids)
{
	relids[0] = lq_owners_rel;
	relids[1] = lq_queue_rel;
	relids[2] = lq_unsettled_rel;
}

/*
 * lq_current_file returns the file of relid as of this transaction.  The
 * caller holds a lock on relid, so no rewrite can come between (and the
 * invalidations of an earlier one were read when the lock was taken).
 */
static RelFileNode
lq_current_file(Oid relid)
{
	Relation	rel = relation_open(relid, NoLock);
	RelFileNode node = rel->rd_node;

	relation_close(rel, NoLock);
	return node;
}

/*
 * lq_tables_note_files remembers the tables' files, when the state (and with
 * it every row address) is loaded, under the locks of lq_tables_try_lock.
 */
void
lq_tables_note_files(void)
{
	Oid			relids[3];
	int			i;

	lq_tables_relids(relids);
	for (i = 0; i < lengthof(relids); i++)
		lq_loaded_files[i] = lq_current_file(relids[i]);
}

/*
 * lq_tables_rewritten tells whether any of the tables was rewritten since the
 * state was loaded: then every remembered row address is stale (a delete
 * there would hit another grant's row), and the state must be loaded anew
 * before anything is written.  Takes RowExclusiveLock on the tables (kept
 * to the end of the transaction, as writing them would take it), waiting
 * if need be; a batch has them already (lq_tables_try_lock).
 */
bool
lq_tables_rewritten(void)
{
	Oid			relids[3];
	int			i;

	lq_tables_relids(relids);
	for (i = 0; i < lengthof(relids); i++)
	{
		RelFileNode node;

		LockRelationOid(relids[i], RowExclusiveLock);
		node = lq_current_file(relids[i]);
		if (!RelFileNodeEquals(node, lq_loaded_files[i]))
			return true;
	}
	return false;
}

static void
lq_open_owners(void)
{
	if (lq_owners == NULL)
	{
		lq_owners = table_open(lq_owners_rel, RowExclusiveLock);
		lq_owners_idx = CatalogOpenIndexes(lq_owners);
	}
}

static void
lq_open_queue(void)
{
	if (lq_queue == NULL)
	{
		lq_queue = table_open(lq_queue_rel, RowExclusiveLock);
		lq_queue_idx = CatalogOpenIndexes(lq_queue);
	}
}

static void
lq_open_unsettled(void)
{
	if (lq_unsettled == NULL)
	{
		lq_unsettled = table_open(lq_unsettled_rel, RowExclusiveLock);
		lq_unsettled_idx = CatalogOpenIndexes(lq_unsettled);
	}
}

/*
 * lq_tables_end_batch closes the batch's relations, before its commit
 * (commit true), or forgets them after an abort, which has released them.
 */
void
lq_tables_end_batch(bool commit)
{
	if (commit)
	{
		if (lq_owners != NULL)
		{
			CatalogCloseIndexes(lq_owners_idx);
			table_close(lq_owners, NoLock);
		}
		if (lq_queue != NULL)
		{
			CatalogCloseIndexes(lq_queue_idx);
			table_close(lq_queue, NoLock);
		}
		if (lq_unsettled != NULL)
		{
			CatalogCloseIndexes(lq_unsettled_idx);
			table_close(lq_unsettled, NoLock);
		}
	}
	lq_owners = NULL;
	lq_owners_idx = NULL;
	lq_queue = NULL;
	lq_queue_idx = NULL;
	lq_unsettled = NULL;
	lq_unsettled_idx = NULL;
}

static Datum
lq_text(const char *s)
{
	return PointerGetDatum(cstring_to_text(s));
}

static HeapTuple
lq_owner_tuple(const LqOwnerRow *row)
{
	Datum		values[OWN_NATTS];
	bool		nulls[OWN_NATTS];

	memset(nulls, 0, sizeof(nulls));
	values[0] = lq_text(row->lock_id);
	values[1] = lq_text(row->owner);
	values[2] = Int64GetDatum(row->token);
	values[3] = Int64GetDatum(row->ttl);
	values[4] = Int64GetDatum(row->acquired);
	values[5] = Int64GetDatum(row->expires);
	values[6] = ObjectIdGetDatum(row->role);
	if (row->channel != NULL && row->channel[0] != '\0')
		values[7] = lq_text(row->channel);
	else
		nulls[7] = true;
	return heap_form_tuple(RelationGetDescr(lq_owners), values, nulls);
}

/*
 * How the lock server writes its tables.  Rows are written with the heap
 * and index routines directly: this is the lock server's hot path, and it
 * knows the TID of every row it keeps.  The index half is PostgreSQL's
 * catalog helper (CatalogTupleInsertWithInfo / UpdateWithInfo), which
 * inserts into every index of the table and keeps HOT updates HOT; it
 * supports plain column indexes only, and lockq's tables have no others
 * (their primary keys: lockq--1.1.sql).  It does not run the executor, so
 * it does not evaluate the tables' CHECK constraints: lq_check_positive
 * enforces them (ttl > 0, heartbeat > 0) before a row is formed, raising
 * check_violation as the executor would.  The command counter advances
 * after every write, so that a row written earlier in the batch can be
 * changed later in it.
 */

/*
 * lq_check_positive is a CHECK (column > 0) of table, for a row the lock
 * server is about to write (see above).
 */
static void
lq_check_positive(const char *table, const char *column, int64 value)
{
	if (value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("new row for relation \"%s.%s\" violates its check of \"%s\"",
						LQ_SCHEMA, table, column),
				 errdetail("%s is " INT64_FORMAT ".", column, value)));
}

/*
 * lq_tables_owner_insert adds a grant's row and returns where it is (see
 * above for how).
 */
void
lq_tables_owner_insert(const LqOwnerRow *row, ItemPointer tid)
{
	HeapTuple	tup;

	lq_open_owners();
	lq_check_positive(LQ_OWNERS_TABLE, "ttl", row->ttl);
	tup = lq_owner_tuple(row);
	CatalogTupleInsertWithInfo(lq_owners, tup, lq_owners_idx);
	*tid = tup->t_self;
	heap_freetuple(tup);
	CommandCounterIncrement();
}

/*
 * lq_tables_owner_end deletes a grant's row, without waiting: if a
 * concurrent transaction holds a lock on it (a fenced write in progress,
 * see lq_tables_holds), the row stays and LQ_END_LOCKED tells the worker to
 * defer the hand-off.
 */
LqEndResult
lq_tables_owner_end(ItemPointer tid)
{
	TM_FailureData tmfd;
	TM_Result	res;

	lq_open_owners();
	res = heap_delete(lq_owners, tid, GetCurrentCommandId(true),
					  InvalidSnapshot, false, &tmfd, false);
	switch (res)
	{
		case TM_Ok:
			CommandCounterIncrement();
			return LQ_END_DELETED;
		case TM_BeingModified:
		case TM_WouldBlock:
			return LQ_END_LOCKED;
		case TM_Deleted:
		case TM_Invisible:
			return LQ_END_MISSING;
		default:
			elog(ERROR, "unexpected result %d deleting a lockq.owners row", (int) res);
	}
	return LQ_END_MISSING;		/* keep compiler quiet */
}

/*
 * lq_tables_owner_update rewrites a grant's row (a new lease end) and moves
 * *tid to the new version.  Only non-key columns change, so a fenced
 * transaction's KEY SHARE lock does not block it.
 */
void
lq_tables_owner_update(ItemPointer tid, const LqOwnerRow *row)
{
	HeapTuple	tup;

	lq_open_owners();
	lq_check_positive(LQ_OWNERS_TABLE, "ttl", row->ttl);
	tup = lq_owner_tuple(row);
	CatalogTupleUpdateWithInfo(lq_owners, tid, tup, lq_owners_idx);
	*tid = tup->t_self;
	heap_freetuple(tup);
	CommandCounterIncrement();
}

void
lq_tables_queue_insert(const LqQueueRow *row, ItemPointer tid)
{
	Datum		values[QUE_NATTS];
	bool		nulls[QUE_NATTS];
	HeapTuple	tup;

	lq_open_queue();
	lq_check_positive(LQ_QUEUE_TABLE, "ttl", row->ttl);
	lq_check_positive(LQ_QUEUE_TABLE, "heartbeat", row->heartbeat);
	memset(nulls, 0, sizeof(nulls));
	values[0] = lq_text(row->lock_id);
	values[1] = Int64GetDatum(row->ts);
	values[2] = lq_text(row->owner);
	values[3] = Int64GetDatum(row->ttl);
	values[4] = Int64GetDatum(row->heartbeat);
	values[5] = ObjectIdGetDatum(row->role);
	if (row->channel != NULL && row->channel[0] != '\0')
		values[6] = lq_text(row->channel);
	else
		nulls[6] = true;
	tup = heap_form_tuple(RelationGetDescr(lq_queue), values, nulls);
	CatalogTupleInsertWithInfo(lq_queue, tup, lq_queue_idx);
	*tid = tup->t_self;
	heap_freetuple(tup);
	CommandCounterIncrement();
}

void
lq_tables_queue_delete(ItemPointer tid)
{
	lq_open_queue();
	simple_heap_delete(lq_queue, tid);
	CommandCounterIncrement();
}

/*
 * lq_tables_unsettled_put writes a lock's row of lockq.unsettled: a new one
 * (*tid invalid) or a new version of the row at *tid; *tid is moved to it.
 */
void
lq_tables_unsettled_put(const LqUnsettledRow *row, ItemPointer tid)
{
	Datum		values[UNS_NATTS];
	bool		nulls[UNS_NATTS];
	HeapTuple	tup;

	lq_open_unsettled();
	memset(nulls, 0, sizeof(nulls));
	values[0] = lq_text(row->lock_id);
	values[1] = Int64GetDatum(row->until);
	values[2] = Int64GetDatum(row->fence_ttl);
	values[3] = Int64GetDatum(row->delay_until);
	values[4] = Int64GetDatum(row->hold_token);
	values[5] = Int64GetDatum(row->hold_until);
	tup = heap_form_tuple(RelationGetDescr(lq_unsettled), values, nulls);
	if (ItemPointerIsValid(tid))
		CatalogTupleUpdateWithInfo(lq_unsettled, tid, tup, lq_unsettled_idx);
	else
		CatalogTupleInsertWithInfo(lq_unsettled, tup, lq_unsettled_idx);
	*tid = tup->t_self;
	heap_freetuple(tup);
	CommandCounterIncrement();
}

void
lq_tables_unsettled_delete(ItemPointer tid)
{
	lq_open_unsettled();
	simple_heap_delete(lq_unsettled, tid);
	CommandCounterIncrement();
}

/*
 * lq_seq_read returns a sequence's value, less one if nextval was never
 * called (then the value itself was not handed out), and never below 0
 * (all three sequences hold non-negative values).  Needs SPI.
 */
static int64
lq_seq_read(const char *seqname)
{
	char		sql[128];
	bool		isnull;
	Datum		d;
	int			rc;

	snprintf(sql, sizeof(sql),
			 "SELECT greatest(last_value - (NOT is_called)::int, 0) FROM lockq.%s", seqname);
	rc = SPI_execute(sql, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read lockq.%s", seqname);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(d);
}

/*
 * The durable values behind the clock, the tokens and the lease horizon
 * (see lockq_worker.c).  setval is not rolled back and writes WAL; a value
 * becomes durable when the worker's transaction commits with a flush,
 * which the callers arrange.
 */
int64
lq_tables_clock_read(void)
{
	return lq_seq_read(LQ_CLOCK_SEQ);
}

int64
lq_tables_token_read(void)
{
	return lq_seq_read(LQ_TOKEN_SEQ);
}

static void
lq_setval(Oid seq, int64 value)
{
	DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seq), Int64GetDatum(value));
}

/*
 * lq_tables_seqs_lock takes the lock a setval of the clock or the token
 * sequence takes (RowExclusiveLock; a batch normally holds it already,
 * lq_tables_try_lock), so that a setval made under an LWLock
 * (lockq_durability.c, lq_ceiling_raise) never waits for a heavyweight
 * lock.  Raises an ERROR if the sequences are gone.
 */
void
lq_tables_seqs_lock(void)
{
	LockRelationOid(lq_token_seq, RowExclusiveLock);
	LockRelationOid(lq_clock_seq, RowExclusiveLock);
}

void
lq_tables_clock_write(int64 ceiling)
{
	lq_setval(lq_clock_seq, ceiling);
}

void
lq_tables_token_write(int64 ceiling)
{
	lq_setval(lq_token_seq, ceiling);
}

static int64 lq_getint64(HeapTuple tup, TupleDesc desc, int col, int64 dflt);

/*
 * lq_settle_list runs query (a count and a list, with lq_tables_settle's
 * arguments) and returns the count, the list cut to about 1 kB in *list
 * (unless list is NULL).
 */
static int64
lq_settle_list(const char *query, Oid *types, Datum *values, char **list)
{
	char	   *s;

	if (SPI_execute_with_args(query, 3, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not list what lockq settles after a restart");
	if (list == NULL)
		return lq_getint64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, 0);
	s = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	if (s != NULL && strlen(s) > 1024)
	{
		s[pg_mbcliplen(s, strlen(s), 1024)] = '\0';
		s = psprintf("%s...", s);
	}
	*list = s;
	return lq_getint64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, 0);
}

/*
 * The fence_ttl that covers a grant of lockq.owners alias a after a crash:
 * its lock's own marker's or the wide marker's, whichever is larger (NULL:
 * neither is there).
 */
#define LQ_FENCE_OF(a) \
	"greatest((SELECT fence_ttl FROM lockq.unsettled" \
	"           WHERE lock_id OPERATOR(pg_catalog.=) " a ".lock_id)," \
	"         (SELECT fence_ttl FROM lockq.unsettled" \
	"           WHERE lock_id OPERATOR(pg_catalog.=) ''))"

/*
 * lq_tables_wide_row writes the lock_id of lock server server's wide
 * marker's row into buf (LQ_WIDE_ROW_LEN + 1 bytes).
 */
void
lq_tables_wide_row(int server, char *buf)
{
	if (server == 0)
		buf[0] = '\0';
	else
		snprintf(buf, LQ_WIDE_ROW_LEN + 1, "%0*d", LQ_WIDE_ROW_LEN, server);
}

/*
 * lq_tables_wide_row_server: is lock_id (of a lockq.unsettled row) a wide
 * marker's, and whose (*server)?
 */
bool
lq_tables_wide_row_server(const char *lock_id, int *server)
{
	if (lock_id[0] == '\0')
		*server = 0;
	else if (strlen(lock_id) > LQ_MAX_ID_LEN)
		*server = atoi(lock_id);
	else
		return false;
	return true;
}

/*
 * lq_tables_settle runs once when the lock server starts with shared memory
 * made anew (a server start, a crash restart, a promotion), before it
 * loads anything; see doc/design/durability.md.  Every lock that
 * lockq.unsettled names may have had changes shown before they were flushed
 * and lost in the crash: a grant or renewal (whose lease ends by the row's
 * until), or the end (a release, say) of a grant whose ttl is up to the
 * row's fence_ttl.  Such a grant is ended (its token may be one whose end
 * was shown: it must never hold again), and the lock is delayed until every
 * lease that may have been shown has ended.  Grants
 * that ended by time are deleted.  When the time the server was down is not
 * known (continuous false: another machine or boot), a surviving grant keeps
 * its lease end for lockq_holds, but its lock is delayed as long as its
 * holder may still count on it (hold_until), unless the holder releases or
 * renews it before.  A bound b from before the stop becomes
 * b itself with a continuous clock, else now + (b - low), low being the
 * earliest the stop can have happened.  Afterwards the rows of
 * lockq.unsettled say only how long each lock is delayed.
 *
 * With several lock servers each has a wide marker (lq_tables_wide_row),
 * which covers the locks of its partition; the partitions may be others
 * now (lockq.lock_servers changed), so every wide marker is merged into
 * lock server 0's first, which covers every lock.
 */
void
lq_tables_settle(int64 now, bool continuous, int64 low)
{
	Datum		values[3];
	Oid			types[3] = {INT8OID, BOOLOID, INT8OID};
	static const char *const steps[] = {
		/*
		 * grants whose end may have been shown unflushed end; the wide
		 * marker (lock_id '') covers every lock, and waits for all of them
		 */
		"WITH dead AS (DELETE FROM lockq.owners o"
		"  WHERE o.ttl OPERATOR(pg_catalog.<=) " LQ_FENCE_OF("o") ""
		"  RETURNING o.lock_id, o.expires)"
		" UPDATE lockq.unsettled u"
		"  SET until = greatest(u.until, d.expires)"
		"  FROM (SELECT lock_id, pg_catalog.max(expires) AS expires FROM dead"
		"        GROUP BY lock_id"
		"        UNION ALL SELECT '', pg_catalog.max(expires) FROM dead) d"
		"  WHERE u.lock_id OPERATOR(pg_catalog.=) d.lock_id",
		/* the delays, in the new clock's time */
		"UPDATE lockq.unsettled"
		"  SET delay_until = CASE WHEN $2"
		"      THEN greatest(until, delay_until)"
		"      ELSE $1 OPERATOR(pg_catalog.+) greatest(0,"
		"           greatest(until, delay_until) OPERATOR(pg_catalog.-) $3) END,"
		"      hold_until = CASE WHEN $2 OR hold_until OPERATOR(pg_catalog.=) 0"
		"      THEN hold_until"
		"      ELSE $1 OPERATOR(pg_catalog.+) greatest(0,"
		"           hold_until OPERATOR(pg_catalog.-) $3) END,"
		"      until = 0, fence_ttl = 0",
		/* grants that ended by time */
		"DELETE FROM lockq.owners WHERE expires OPERATOR(pg_catalog.<=) $1",
		/* without a continuous clock, a lock is delayed as long as the
		 * holder of its grant may count on its lease */
		"INSERT INTO lockq.unsettled (lock_id, hold_token, hold_until)"
		" SELECT lock_id, token, $1 OPERATOR(pg_catalog.+) (expires OPERATOR(pg_catalog.-) $3)"
		"  FROM lockq.owners"
		"  WHERE NOT $2 AND $1 OPERATOR(pg_catalog.+) (expires OPERATOR(pg_catalog.-) $3)"
		"        OPERATOR(pg_catalog.>) expires"
		" ON CONFLICT (lock_id) DO UPDATE"
		"  SET hold_token = excluded.hold_token, hold_until = excluded.hold_until",
		"DELETE FROM lockq.unsettled WHERE delay_until OPERATOR(pg_catalog.<=) $1"
		"  AND hold_until OPERATOR(pg_catalog.<=) $1"
	};
	int			i;
	int64		nended;
	int64		ndelayed;
	bool		every;
	char	   *ended;
	char	   *delayed;

	values[0] = Int64GetDatum(now);
	values[1] = BoolGetDatum(continuous);
	values[2] = Int64GetDatum(low);
	if (SPI_execute("WITH w AS (DELETE FROM lockq.unsettled"
					"  WHERE pg_catalog.octet_length(lock_id) OPERATOR(pg_catalog.>) "
					CppAsString2(LQ_MAX_ID_LEN)
					"  RETURNING until, fence_ttl, delay_until)"
					" INSERT INTO lockq.unsettled AS u (lock_id, until, fence_ttl, delay_until)"
					"  SELECT '', pg_catalog.max(until), pg_catalog.max(fence_ttl),"
					"         pg_catalog.max(delay_until) FROM w"
					"  HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0"
					" ON CONFLICT (lock_id) DO UPDATE"
					"  SET until = greatest(u.until, excluded.until),"
					"      fence_ttl = greatest(u.fence_ttl, excluded.fence_ttl),"
					"      delay_until = greatest(u.delay_until, excluded.delay_until)",
					false, 0) < 0)
		elog(ERROR, "could not merge lockq's wide markers after a restart");
	nended = lq_settle_list("SELECT count(*), pg_catalog.string_agg(s, ', ') FROM"
							" (SELECT o.lock_id || ' (token ' || o.token || ')' AS s"
							"   FROM lockq.owners o"
							"  WHERE o.ttl OPERATOR(pg_catalog.<=) " LQ_FENCE_OF("o") ""
							"  ORDER BY o.lock_id) l",
							types, values, &ended);
	for (i = 0; i < lengthof(steps); i++)
	{
		int			rc = SPI_execute_with_args(steps[i], 3, types, values, NULL,
											   false, 0);

		if (rc < 0)
			elog(ERROR, "could not settle lockq's state after a restart (step %d)", i + 1);
	}
	ndelayed = lq_settle_list("SELECT count(*), pg_catalog.string_agg(lock_id, ', ') FROM"
							  " (SELECT lock_id FROM lockq.unsettled"
							  "   WHERE greatest(delay_until, hold_until) OPERATOR(pg_catalog.>) $1"
							  "     AND lock_id OPERATOR(pg_catalog.<>) ''"
							  "   ORDER BY lock_id) l",
							  types, values, &delayed);
	every = lq_settle_list("SELECT count(*) FROM lockq.unsettled"
						   " WHERE lock_id OPERATOR(pg_catalog.=) ''"
						   "   AND delay_until OPERATOR(pg_catalog.>) $1",
						   types, values, NULL) > 0;
	if (nended > 0)
		ereport(LOG,
				(errmsg_plural("lockq ended %lld grant whose end may have been shown before it was flushed",
							   "lockq ended %lld grants whose end may have been shown before it was flushed",
							   nended, (long long) nended),
				 errdetail("Locks and tokens: %s.", ended)));
	if (every)
		ereport(LOG,
				(errmsg("lockq delays every lock until every lease that may have been lost has ended"),
				 ndelayed > 0 ?
				 errdetail("A stream of locks taken for the first time had made every lock unsettled (lockq.max_unsettled_rate); unsettled on their own: %s.",
						   delayed) :
				 errdetail("A stream of locks taken for the first time had made every lock unsettled (lockq.max_unsettled_rate).")));
	else if (ndelayed > 0)
		ereport(LOG,
				(errmsg_plural("lockq delays %lld lock until every lease that may have been lost or may still be counted on has ended",
							   "lockq delays %lld locks until every lease that may have been lost or may still be counted on has ended",
							   ndelayed, (long long) ndelayed),
				 errdetail("Locks: %s.", delayed)));
}

static char *
lq_getstr(HeapTuple tup, TupleDesc desc, int col)
{
	return SPI_getvalue(tup, desc, col);
}

static int64
lq_getint64(HeapTuple tup, TupleDesc desc, int col, int64 dflt)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? dflt : DatumGetInt64(d);
}

static void
lq_gettid(HeapTuple tup, TupleDesc desc, int col, ItemPointer tid)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (isnull)
		elog(ERROR, "lockq: row without a ctid");
	ItemPointerCopy((ItemPointer) DatumGetPointer(d), tid);
}

/*
 * lq_scan runs a query through a cursor, calling emit for each row in
 * chunks, so that loading a large table does not need all of it in memory.
 * emit may modify the table (stale rows are deleted as they are found).
 */
static void
lq_scan(const char *sql, void (*emit) (HeapTuple, TupleDesc, void *),
		void *arg)
{
	Portal		portal;
	SPIPlanPtr	plan = SPI_prepare(sql, 0, NULL);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\"", sql);
	/* not read-only: it must see what this transaction deleted so far */
	portal = SPI_cursor_open(NULL, plan, NULL, NULL, false);
	for (;;)
	{
		SPITupleTable *tuptable;
		uint64		ntuples;
		uint64		i;

		/*
		 * emit may run SPI statements of its own, which overwrite
		 * SPI_tuptable and SPI_processed: keep this chunk in locals.
		 */
		SPI_cursor_fetch(portal, true, 1000);
		tuptable = SPI_tuptable;
		ntuples = SPI_processed;
		if (ntuples == 0)
			break;
		for (i = 0; i < ntuples; i++)
			emit(tuptable->vals[i], tuptable->tupdesc, arg);
		SPI_freetuptable(tuptable);
	}
	SPI_cursor_close(portal);
	SPI_freeplan(plan);
}

typedef struct LqOwnerScan
{
	lq_owner_cb cb;
	void	   *arg;
} LqOwnerScan;

static void
lq_emit_owner(HeapTuple tup, TupleDesc desc, void *arg)
{
	LqOwnerScan *scan = arg;
	LqOwnerRow	row;

	row.lock_id = lq_getstr(tup, desc, 1);
	row.owner = lq_getstr(tup, desc, 2);
	row.token = lq_getint64(tup, desc, 3, 0);
	row.ttl = lq_getint64(tup, desc, 4, 0);
	row.acquired = lq_getint64(tup, desc, 5, 0);
	row.expires = lq_getint64(tup, desc, 6, 0);
	row.role = (Oid) lq_getint64(tup, desc, 7, 0);
	row.channel = lq_getstr(tup, desc, 8);
	lq_gettid(tup, desc, 9, &row.tid);
	scan->cb(&row, scan->arg);
}

void
lq_tables_load_owners(lq_owner_cb cb, void *arg)
{
	LqOwnerScan scan = {cb, arg};

	lq_scan("SELECT lock_id, owner, token, ttl, acquired, expires,"
			" role::int8, channel, ctid"
			" FROM lockq.owners", lq_emit_owner, &scan);
}

typedef struct LqQueueScan
{
	lq_queue_cb cb;
	void	   *arg;
} LqQueueScan;

static void
lq_emit_queue(HeapTuple tup, TupleDesc desc, void *arg)
{
	LqQueueScan *scan = arg;
	LqQueueRow	row;

	row.lock_id = lq_getstr(tup, desc, 1);
	row.ts = lq_getint64(tup, desc, 2, 0);
	row.owner = lq_getstr(tup, desc, 3);
	row.ttl = lq_getint64(tup, desc, 4, 0);
	row.heartbeat = lq_getint64(tup, desc, 5, 0);
	row.role = (Oid) lq_getint64(tup, desc, 6, 0);
	row.channel = lq_getstr(tup, desc, 7);
	lq_gettid(tup, desc, 8, &row.tid);
	scan->cb(&row, scan->arg);
}

typedef struct LqUnsettledScan
{
	lq_unsettled_cb cb;
	void	   *arg;
} LqUnsettledScan;

static void
lq_emit_unsettled(HeapTuple tup, TupleDesc desc, void *arg)
{
	LqUnsettledScan *scan = arg;
	LqUnsettledRow row;

	row.lock_id = lq_getstr(tup, desc, 1);
	row.until = lq_getint64(tup, desc, 2, 0);
	row.fence_ttl = lq_getint64(tup, desc, 3, 0);
	row.delay_until = lq_getint64(tup, desc, 4, 0);
	row.hold_token = lq_getint64(tup, desc, 5, 0);
	row.hold_until = lq_getint64(tup, desc, 6, 0);
	lq_gettid(tup, desc, 7, &row.tid);
	scan->cb(&row, scan->arg);
}

void
lq_tables_load_unsettled(lq_unsettled_cb cb, void *arg)
{
	LqUnsettledScan scan = {cb, arg};

	lq_scan("SELECT lock_id, until, fence_ttl, delay_until, hold_token, hold_until, ctid"
			" FROM lockq.unsettled",
			lq_emit_unsettled, &scan);
}

/*
 * lq_tables_load_queue returns the waiters lock by lock in queue order.
 */
void
lq_tables_load_queue(lq_queue_cb cb, void *arg)
{
	LqQueueScan scan = {cb, arg};

	lq_scan("SELECT lock_id, ts, owner, ttl, heartbeat, role::int8, channel, ctid"
			" FROM lockq.queue ORDER BY lock_id, ts, owner",
			lq_emit_queue, &scan);
}

/*
 * lq_owner_row_is_current tests a heap tuple of lockq.owners against the
 * lock, the token and the clock.
 */
static bool
lq_owner_row_is_current(TupleTableSlot *slot, const char *lock_id,
						int64 token, int64 now)
{
	bool		isnull;
	Datum		d;

	d = slot_getattr(slot, OWN_TOKEN, &isnull);
	if (isnull || DatumGetInt64(d) != token)
		return false;
	d = slot_getattr(slot, OWN_LOCK_ID, &isnull);
	if (isnull || strcmp(TextDatumGetCString(d), lock_id) != 0)
		return false;
	d = slot_getattr(slot, OWN_EXPIRES, &isnull);
	if (isnull || DatumGetInt64(d) <= now)
		return false;
	return true;
}

/*
 * lq_tables_holds is lockq_holds' check, run in the caller's transaction.
 * It finds the grant's row by its token with the latest snapshot (whatever
 * the isolation level), and if the row is the lock's and the lease has not
 * run out, takes a KEY SHARE row lock on the newest version and checks
 * again.  The row lock lasts until the caller's transaction ends and blocks
 * the worker's DELETE of the row, so the lock cannot be handed to anyone
 * else meanwhile (the fence).  Renewals change no key column (the key is
 * the token) and pass.  Only the grant's own role (or an administrator)
 * may hold a hand-off back: for any other role the answer is given without
 * the row lock.  Bypasses table privileges: the caller learns only true or
 * false.  Returns LQ_HELD_NO, LQ_HELD_FENCED or LQ_HELD_UNFENCED.
 */
LqHeld
lq_tables_holds(const char *lock_id, int64 token, int64 now, Oid role,
				bool admin)
{
	Relation	rel;
	Relation	irel;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	ScanKeyData key;
	LqHeld		result = LQ_HELD_NO;
	Oid			nsp;
	Oid			relid;
	Oid			indexid;

	nsp = get_namespace_oid(LQ_SCHEMA, true);
	relid = OidIsValid(nsp) ? get_relname_relid(LQ_OWNERS_TABLE, nsp) : InvalidOid;
	indexid = OidIsValid(nsp) ? get_relname_relid(LQ_OWNERS_PKEY, nsp) : InvalidOid;
	if (!OidIsValid(relid) || !OidIsValid(indexid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lockq is not installed in this database"),
				 errhint("Run CREATE EXTENSION lockq.")));

	rel = table_open(relid, RowShareLock);
	irel = index_open(indexid, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(token));
	scan = index_beginscan(rel, irel, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);

	if (index_getnext_slot(scan, ForwardScanDirection, slot) &&
		lq_owner_row_is_current(slot, lock_id, token, now))
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;
		TM_Result	res;
		bool		isnull;
		Oid			grant_role = DatumGetObjectId(slot_getattr(slot, OWN_ROLE, &isnull));

		if (grant_role != role && !admin)
			result = LQ_HELD_UNFENCED;
		else
		{
			LQ_FAULT("holds-before-lock");
			res = table_tuple_lock(rel, &tid, snapshot, slot,
								   GetCurrentCommandId(true),
								   LockTupleKeyShare, LockWaitBlock,
								   TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
			if (res == TM_Ok && lq_owner_row_is_current(slot, lock_id, token, now))
				result = LQ_HELD_FENCED;
		}
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(irel, AccessShareLock);
	/* keep RowShareLock on the table to the end, like SELECT FOR SHARE */
	table_close(rel, NoLock);

	return result;
}

/*
 * lq_tables_fencer_pids lists the pids of the backends whose transactions
 * hold the row at tid locked (fenced, see lq_tables_holds): its locker, or
 * the members of its multixact, that are still running.  Worker only, in a
 * batch.
 */
List *
lq_tables_fencer_pids(ItemPointer tid)
{
	Buffer		buf;
	HeapTupleData tup;
	TransactionId xmax;
	uint16		infomask;
	List	   *pids = NIL;

	lq_open_owners();
	tup.t_self = *tid;
	if (!heap_fetch(lq_owners, SnapshotAny, &tup, &buf, false))
		return NIL;
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	xmax = HeapTupleHeaderGetRawXmax(tup.t_data);
	infomask = tup.t_data->t_infomask;
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	ReleaseBuffer(buf);

	if (infomask & HEAP_XMAX_INVALID)
		return NIL;
	if (infomask & HEAP_XMAX_IS_MULTI)
	{
		MultiXactMember *members;
		int			n = GetMultiXactIdMembers(xmax, &members, false, false);
		int			i;

		for (i = 0; i < n; i++)
		{
			int			pid = BackendXidGetPid(members[i].xid);

			if (pid != 0)
				pids = lappend_int(pids, pid);
		}
		if (n > 0)
			pfree(members);
	}
	else
	{
		int			pid = BackendXidGetPid(xmax);

		if (pid != 0)
			pids = lappend_int(pids, pid);
	}
	return pids;
}

/*-------------------------------------------------------------------------
 *
 * lockq_durability.c
 *		The lock server's durability: the ceilings of the clock and of the
 *		tokens, the unsettled locks, and the decision, batch by batch,
 *		whether a batch must be flushed before anyone learns of it.
 *
 * A WAL flush costs as much as the rest of a batch, so the lock server
 * waits for one only when a crash could otherwise break a promise.  The
 * promises, and what keeps each (doc/design/durability.md has the why):
 *
 *	- Tokens never repeat, lockq_now() never goes back: every value shown is
 *	  below a durable ceiling (a sequence, and the state file, which
 *	  survives DROP EXTENSION).  Raising a ceiling flushes the batch.
 *	- A lease that was shown is honoured after a crash (I2), and an end
 *	  that was shown is never undone (I1).  A batch that shows a lease
 *	  longer than lockq.max_grace (or any, with lockq.synchronous_grants)
 *	  is flushed.  Shorter leases and early ends (releases, force releases,
 *	  a lease cut for a fenced transaction) of grants with a ttl up to
 *	  lockq.max_grace may be shown before their flush only on an
 *	  *unsettled* lock: one with a durable row in lockq.unsettled saying
 *	  that its leases shown unflushed end by until, and that ends of grants
 *	  with a ttl up to fence_ttl may have been shown unflushed.  Making a
 *	  lock unsettled (or raising its until) flushes the batch; every later
 *	  batch that the row covers need not be flushed.  After a crash the
 *	  lock server ends such grants of unsettled locks and delays every
 *	  unsettled lock until its leases have ended (lq_tables_settle); every
 *	  other lock is exactly as its last flushed batch left it, and is
 *	  available at once.  An end by the passing of time needs nothing: the
 *	  row's lease end is durable, and the clock never goes back.
 *	- A lock settles once everything shown relying on its row is flushed and
 *	  it has been quiet for LQ_UNSETTLED_SLACK_US: the row is deleted, in
 *	  any batch (WAL is sequential: if the delete survives a crash, so did
 *	  everything it covered).
 *	- Under a stream of locks that each need a row of their own (more than
 *	  lockq.max_unsettled_rate per second: a lock per job, say), one flush
 *	  per lock would bound the lock server by the disk.  Then every lock is
 *	  made unsettled at once instead, by the *wide* row (lock_id '', which
 *	  no lock id can be): its until covers every lease shown relying on it
 *	  and its fence_ttl is lockq.max_grace.  After a crash it delays every
 *	  lock and ends every grant with a ttl up to it, as a row of each lock
 *	  would have; it is raised once per LQ_UNSETTLED_SLACK_US of a stream,
 *	  not once per lock.
 *
 * Everything here runs in the lock server, inside its batch transaction.
 * What a batch changes in memory is undone if it fails
 * (lq_durability_discard).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_durability.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lockq_clock.h"
#include "lockq_durability.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_shmem.h"
#include "lockq_statefile.h"
#include "lockq_tables.h"

/* How far an unsettled lock's until is set beyond the lease that needs it. */
#define LQ_UNSETTLED_SLACK_US	(INT64CONST(2) * 1000000)
/* How often quiet unsettled locks are settled. */
#define LQ_SETTLE_PERIOD_US		(INT64CONST(1) * 1000000)
/* The key of the wide marker: no lock id is empty. */
#define LQ_WIDE_ID				""

/* An unsettled lock; its row is in lockq.unsettled (tid). */
typedef struct LqMarker
{
	char		lock_id[LQ_MAX_ID_LEN + 1]; /* hash key, must be first */
	ItemPointerData tid;
	int64		until;
	int64		fence_ttl;
	int64		delay_until;
	int64		hold_token;
	int64		hold_until;
	int64		last_change;	/* last change shown relying on it */
	XLogRecPtr	last_lsn;		/* the commit of the last batch that relied
								 * on it: once that is flushed, nothing it
								 * covers can be lost any more */
} LqMarker;

/* A marker as it was before the batch changed it. */
typedef struct LqMarkerUndo
{
	bool		existed;
	LqMarker	old;
} LqMarkerUndo;

static MemoryContext lq_durability_cxt = NULL;
static HTAB *lq_markers = NULL;
static int64 lq_next_settle = 0;
static LqStateFile lq_file;

/* Per batch. */
static bool lq_flush = false;
static int64 lq_pending_clock = 0;	/* clock ceiling this batch makes durable */
static int64 lq_pending_token = 0;	/* token ceiling likewise */
static bool lq_file_dirty = false;
static bool lq_stopping = false;
static List *lq_undo = NIL;		/* of LqMarkerUndo, in lq_durability_cxt */
static List *lq_relied = NIL;	/* lock ids whose markers this batch relied on */
static List *lq_needs_rows = NIL;	/* locks whose grant must get its row
									 * before their marker settles */
static bool lq_needs_all_rows = false;	/* likewise, every lock: the wide
										 * marker is to settle */

/* Changes that needed a marker of their lock's own, this second and the last. */
static int64 lq_rate_start = 0;
static int	lq_rate_now = 0;
static int	lq_rate_last = 0;

/*
 * lq_markers_reset forgets the unsettled locks (their rows stay).
 */
static void
lq_markers_reset(void)
{
	HASHCTL		ctl;

	if (lq_markers != NULL)
		hash_destroy(lq_markers);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = LQ_MAX_ID_LEN + 1;
	ctl.entrysize = sizeof(LqMarker);
	ctl.hcxt = TopMemoryContext;
	lq_markers = hash_create("lockq unsettled locks", 256, &ctl,
							 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	lq_undo = NIL;
}

/*
 * lq_durability_init sets up the ledger's memory.  Lock server start only.
 */
void
lq_durability_init(void)
{
	lq_durability_cxt = AllocSetContextCreate(TopMemoryContext, "lockq ledger",
											  ALLOCSET_SMALL_SIZES);
	lq_markers_reset();
}

void
lq_durability_begin(void)
{
	lq_flush = false;
	lq_pending_clock = 0;
	lq_pending_token = 0;
	lq_file_dirty = false;
	lq_stopping = false;
	lq_undo = NIL;
	lq_relied = NIL;
	MemoryContextReset(lq_durability_cxt);
}

bool
lq_durability_flush_needed(void)
{
	return lq_flush;
}

/*
 * The state file, kept in memory as last written: the ceilings go into it
 * before the commit of the batch that raises them
 * (lq_durability_prepare_commit).  Every lock server writes it, under the
 * ceiling lock, with the highest ceilings any has written to the sequences
 * (clock_logged, token_logged): one that writes after another must not
 * take the file below what the other counts on.  lq_file_write_locked
 * expects the caller to hold lq_shmem_ceiling_lock.
 */
static void
lq_file_write_locked(void)
{
	lq_file.clock_ceiling = Max(lq_file.clock_ceiling, lq_shared->clock_logged);
	lq_file.token_ceiling = Max(lq_file.token_ceiling, lq_shared->token_logged);
	lq_statefile_write(&lq_file);
}

static void
lq_file_update(void)
{
	lq_file.clock_ceiling = Max(lq_file.clock_ceiling,
								Max(lq_pending_clock, lq_clock_ceiling()));
	lq_file.token_ceiling = Max(lq_file.token_ceiling,
								Max(lq_pending_token, lq_shared->token_ceiling));
	lq_file.clean = false;
	lq_file.clock_last = 0;
	LWLockAcquire(lq_shmem_ceiling_lock(), LW_EXCLUSIVE);
	lq_file_write_locked();
	LWLockRelease(lq_shmem_ceiling_lock());
}

/*
 * lq_durability_prepare_commit makes durable, before the batch's commit, what
 * must not depend on the extension's objects: the raised ceilings go into
 * the state file.  Raises an ERROR if it cannot (then the batch fails).
 */
void
lq_durability_prepare_commit(void)
{
	if (lq_file_dirty)
		lq_file_update();
}

/*
 * lq_durability_committed publishes what the batch made durable: the raised
 * ceilings.  After a clean stop, the state file records it.
 */
void
lq_durability_committed(void)
{
	ListCell   *lc;

	if (lq_pending_clock > 0)
		lq_clock_publish_ceiling(lq_pending_clock);
	if (lq_pending_token > 0)
	{
		LWLockAcquire(lq_shmem_ceiling_lock(), LW_EXCLUSIVE);
		if (lq_pending_token > lq_shared->token_ceiling)
			lq_shared->token_ceiling = lq_pending_token;
		LWLockRelease(lq_shmem_ceiling_lock());
	}
	foreach(lc, lq_relied)
	{
		LqMarker   *m = hash_search(lq_markers, lfirst(lc), HASH_FIND, NULL);

		if (m != NULL)
			m->last_lsn = XactLastCommitEnd;
	}
	lq_relied = NIL;
	lq_undo = NIL;
	MemoryContextReset(lq_durability_cxt);
	lq_file_dirty = false;
	if (lq_stopping)
		lq_statefile_write(&lq_file);
}

/*
 * lq_durability_discard undoes what a failed batch changed in memory; its rows
 * and sequence values went with its transaction (a sequence value set by
 * setval stays, but only ever above what was shown).
 */
void
lq_durability_discard(void)
{
	int			i;

	/* newest first: a marker changed twice gets its oldest copy back */
	for (i = list_length(lq_undo) - 1; i >= 0; i--)
	{
		LqMarkerUndo *u = list_nth(lq_undo, i);

		if (u->existed)
		{
			LqMarker   *m = hash_search(lq_markers, u->old.lock_id, HASH_ENTER, NULL);

			*m = u->old;
		}
		else
			(void) hash_search(lq_markers, u->old.lock_id, HASH_REMOVE, NULL);
	}
	lq_durability_begin();
}

/*
 * lq_marker_touch returns the lock's marker, created (without a row) if
 * create and there is none, noting its state for lq_durability_discard.
 */
static LqMarker *
lq_marker_touch(const char *lock_id, bool create)
{
	LqMarker   *m;
	bool		found;
	MemoryContext old;
	LqMarkerUndo *u;

	m = hash_search(lq_markers, lock_id,
					create ? HASH_ENTER : HASH_FIND, &found);
	if (m == NULL)
		return NULL;
	old = MemoryContextSwitchTo(lq_durability_cxt);
	u = palloc0(sizeof(LqMarkerUndo));
	u->existed = found;
	if (found)
		u->old = *m;
	else
	{
		strlcpy(u->old.lock_id, lock_id, sizeof(u->old.lock_id));
		ItemPointerSetInvalid(&m->tid);
		m->until = 0;
		m->fence_ttl = 0;
		m->delay_until = 0;
		m->hold_token = 0;
		m->hold_until = 0;
		m->last_change = 0;
		m->last_lsn = InvalidXLogRecPtr;
	}
	lq_undo = lappend(lq_undo, u);
	MemoryContextSwitchTo(old);
	return m;
}

/*
 * lq_marker_relied notes that this batch shows a change relying on the
 * lock's marker: the marker may settle only once this batch is flushed.
 */
static void
lq_marker_relied(LqMarker *m, int64 now)
{
	MemoryContext old = MemoryContextSwitchTo(lq_durability_cxt);

	m->last_change = now;
	lq_relied = lappend(lq_relied, pstrdup(m->lock_id));
	MemoryContextSwitchTo(old);
}

static void
lq_marker_write(LqMarker *m)
{
	LqUnsettledRow row;
	char		wide[LQ_WIDE_ROW_LEN + 1];

	if (strcmp(m->lock_id, LQ_WIDE_ID) == 0)
	{
		lq_tables_wide_row(lq_my_server_no, wide);
		row.lock_id = wide;
	}
	else
		row.lock_id = m->lock_id;
	row.until = m->until;
	row.fence_ttl = m->fence_ttl;
	row.delay_until = m->delay_until;
	row.hold_token = m->hold_token;
	row.hold_until = m->hold_until;
	lq_tables_unsettled_put(&row, &m->tid);
}

static void
lq_marker_remove(LqMarker *m)
{
	if (ItemPointerIsValid(&m->tid))
		lq_tables_unsettled_delete(&m->tid);
	(void) hash_search(lq_markers, m->lock_id, HASH_REMOVE, NULL);
}

/*
 * lq_wide_marker is asked for a change of a lock new to the rules (its
 * first grant, or that grant's end) that its own marker does not cover: a
 * lease shown until expires (ttl 0), or the early end of a grant with this
 * ttl (expires 0).  It counts such changes per second, and
 * returns the wide marker if that covers the change, or if their rate is
 * above lockq.max_unsettled_rate and it was made to cover it (written in
 * this batch, which is then flushed).  NULL: the lock needs a marker of
 * its own.
 */
static LqMarker *
lq_wide_marker(int64 now, int64 expires, int64 ttl)
{
	LqMarker   *w;

	if (now - lq_rate_start >= USECS_PER_SEC)
	{
		lq_rate_last = now - lq_rate_start < 2 * USECS_PER_SEC ? lq_rate_now : 0;
		lq_rate_now = 0;
		lq_rate_start = now;
	}
	lq_rate_now++;
	w = hash_search(lq_markers, LQ_WIDE_ID, HASH_FIND, NULL);
	if (w != NULL && w->until >= expires && w->fence_ttl >= ttl)
	{
		lq_marker_relied(w, now);
		return w;
	}
	if (lockq_max_unsettled_rate < 0 ||
		Max(lq_rate_now, lq_rate_last) <= lockq_max_unsettled_rate)
		return NULL;
	w = lq_marker_touch(LQ_WIDE_ID, true);
	if (expires > 0)
		w->until = Max(w->until, expires + LQ_UNSETTLED_SLACK_US);
	w->fence_ttl = Max(w->fence_ttl, (int64) lockq_max_grace * USECS_PER_SEC);
	lq_marker_relied(w, now);
	lq_marker_write(w);
	lq_flush = true;
	return w;
}

/*
 * lq_durability_lease_shown is told of every lease end a batch will show for a
 * grant that outlives its session (a grant, a renewal, a confirmation).
 * A long lease (or any, with lockq.synchronous_grants) needs the batch
 * flushed; a short one needs the lock unsettled with an until beyond the
 * lease end, which is made so (and flushed) if it is not yet: by the wide
 * marker for a change of a lock new to the rules (new_lock) under a stream
 * of them, else by the lock's own.
 */
void
lq_durability_lease_shown(const char *lock_id, int64 expires, int64 lease_us,
						  int64 now, bool new_lock)
{
	LqMarker   *m;

	if (lockq_synchronous_grants ||
		lease_us > (int64) lockq_max_grace * USECS_PER_SEC)
	{
		lq_flush = true;
		return;
	}
	m = hash_search(lq_markers, lock_id, HASH_FIND, NULL);
	if (m != NULL && m->until >= expires)
	{
		lq_marker_relied(m, now);
		return;
	}
	m = new_lock ? lq_wide_marker(now, expires, 0) : NULL;
	if (m == NULL)
	{
		m = lq_marker_touch(lock_id, true);
		m->until = expires + LQ_UNSETTLED_SLACK_US;
		lq_marker_relied(m, now);
		lq_marker_write(m);
		lq_flush = true;
	}
}

/*
 * lq_durability_end_shown is told of every grant (outliving its session) that
 * a batch ends before its lease did: a release, a force release, a grant a
 * cancel hands back.  The end of a grant with a ttl up to lockq.max_grace
 * may be shown before its flush if the lock is unsettled with a fence_ttl
 * that covers it, which is made so (and the batch flushed) if it is not.
 * After a crash such grants end (lq_tables_settle), whether or not their
 * end survived; so the end of a longer grant is always flushed, and such a
 * grant survives a crash unless its own end was lost with it.
 */
void
lq_durability_end_shown(const char *lock_id, int64 ttl, int64 now,
						bool new_lock)
{
	int64		max_grace = (int64) lockq_max_grace * USECS_PER_SEC;
	LqMarker   *m;

	if (lockq_synchronous_grants || ttl > max_grace)
	{
		lq_flush = true;
		return;
	}
	m = hash_search(lq_markers, lock_id, HASH_FIND, NULL);
	if (m != NULL && m->fence_ttl >= ttl)
	{
		lq_marker_relied(m, now);
		return;
	}
	m = new_lock ? lq_wide_marker(now, 0, ttl) : NULL;
	if (m == NULL)
	{
		m = lq_marker_touch(lock_id, true);
		m->fence_ttl = max_grace;
		lq_marker_relied(m, now);
		lq_marker_write(m);
		lq_flush = true;
	}
}

/*
 * lq_durability_end_covered: may the end of this grant (of lock_id, with this
 * ttl) be shown before its flush, with no flush of this batch to make it
 * so?  Then its lock is unsettled with a fence_ttl that covers ttl (its own
 * marker, or the wide one), written by a batch that was flushed before
 * anyone learned of it, and a session may release the grant by itself
 * (lockq_leases.c).  The batch relies on that marker: it must not settle
 * at the end of this batch, after which the grant is put in the table.
 */
bool
lq_durability_end_covered(const char *lock_id, int64 ttl, int64 now)
{
	LqMarker   *m;

	if (lockq_synchronous_grants ||
		ttl > (int64) lockq_max_grace * USECS_PER_SEC)
		return false;
	m = hash_search(lq_markers, lock_id, HASH_FIND, NULL);
	if (m == NULL || m->fence_ttl < ttl)
		m = hash_search(lq_markers, LQ_WIDE_ID, HASH_FIND, NULL);
	if (m == NULL || m->fence_ttl < ttl)
		return false;
	lq_marker_relied(m, now);
	return true;
}

/*
 * lq_marker_covering returns the marker of key (a lock id, or LQ_WIDE_ID)
 * if it covers a grant's lease until expires (its until) and its end with
 * this ttl (its fence_ttl); NULL otherwise.
 */
static LqMarker *
lq_marker_covering(const char *key, int64 expires, int64 ttl)
{
	LqMarker   *m = hash_search(lq_markers, key, HASH_FIND, NULL);

	return m != NULL && m->until >= expires && m->fence_ttl >= ttl ? m : NULL;
}

/*
 * lq_durability_covers: may this grant (of lock_id, lease until expires, with
 * this ttl) do without its lockq.owners row?  Then a crash could neither
 * keep its lease (the marker's until delays the lock past it) nor needs
 * the row to end it (its fence_ttl covers the ttl): its own marker or the
 * wide one covers both, written by a batch flushed before anyone learns of
 * the grant.  The batch relies on that marker, as lq_durability_end_covered.
 */
bool
lq_durability_covers(const char *lock_id, int64 expires, int64 ttl, int64 now)
{
	LqMarker   *m;

	if (lockq_synchronous_grants ||
		ttl > (int64) lockq_max_grace * USECS_PER_SEC)
		return false;
	m = lq_marker_covering(lock_id, expires, ttl);
	if (m == NULL)
		m = lq_marker_covering(LQ_WIDE_ID, expires, ttl);
	if (m == NULL)
		return false;
	lq_marker_relied(m, now);
	return true;
}

/*
 * lq_durability_hold_lifted: the holder of the grant that survived a restart
 * with an unknown downtime released or renewed it, so its lock need not
 * wait for it any longer.  Written in this batch, flushed or not: lost, it
 * only keeps a delay that is no longer needed.
 */
void
lq_durability_hold_lifted(const char *lock_id)
{
	LqMarker   *m = lq_marker_touch(lock_id, false);

	if (m == NULL || m->hold_until == 0)
		return;
	m->hold_token = 0;
	m->hold_until = 0;
	lq_marker_write(m);
}

/*
 * lq_own_covers / lq_wide_covers: does the lock's own marker (the wide
 * marker) cover a grant's lease until expires and its end with this ttl?
 * For lockq_leases.c, which asks them under its LWLock.
 */
static bool
lq_own_covers(const char *lock_id, int64 expires, int64 ttl)
{
	return lq_marker_covering(lock_id, expires, ttl) != NULL;
}

static bool
lq_wide_covers(const char *lock_id, int64 expires, int64 ttl)
{
	return lq_marker_covering(LQ_WIDE_ID, expires, ttl) != NULL;
}

/*
 * lq_durability_settle_markers settles the unsettled locks that have been
 * quiet long enough: everything shown relying on them is flushed by now
 * (WAL is sequential: once the last batch that relied on a marker is
 * flushed, nothing it covers can be lost), and nothing was shown relying
 * on them for LQ_UNSETTLED_SLACK_US (so that a busy lock does not settle
 * and need a flush to become unsettled again at once).  A delay still
 * running after a restart keeps its lock.  Their rows are deleted in this
 * batch, flushed or not (see the top of the file).  Runs at most every
 * LQ_SETTLE_PERIOD_US.
 */
void
lq_durability_settle_markers(int64 now)
{
	HASH_SEQ_STATUS seq;
	LqMarker   *m;
	List	   *done = NIL;
	ListCell   *lc;
	XLogRecPtr	flushed;

	if (now < lq_next_settle)
		return;
	lq_next_settle = now + LQ_SETTLE_PERIOD_US;
	flushed = GetFlushRecPtr(NULL);
	hash_seq_init(&seq, lq_markers);
	while ((m = hash_seq_search(&seq)) != NULL)
	{
		if (m->delay_until <= now && m->hold_until <= now &&
			now - m->last_change >= LQ_UNSETTLED_SLACK_US &&
			m->last_lsn <= flushed)
			done = lappend(done, pstrdup(m->lock_id));
	}
	foreach(lc, done)
	{
		/*
		 * not while a release made relying on it waits to be applied (on
		 * the wide marker, any release)
		 */
		bool		wide = strcmp(lfirst(lc), LQ_WIDE_ID) == 0;
		bool		rowless = false;

		if (wide ? !lq_leases_revoke_all(lq_own_covers, &rowless) :
			(!lq_leases_entry_covered(lfirst(lc), lq_wide_covers) &&
			 !lq_leases_revoke(lfirst(lc))))
		{
			/* a grant kept without its row gets it first (next time) */
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			if (wide)
				lq_needs_all_rows |= rowless;
			else
				lq_needs_rows = lappend(lq_needs_rows, pstrdup(lfirst(lc)));
			MemoryContextSwitchTo(old);
			continue;
		}
		m = lq_marker_touch(lfirst(lc), false);
		if (m != NULL)
			lq_marker_remove(m);
	}
	list_free_deep(done);
}

/*
 * lq_durability_take_needs_rows returns (and forgets) the locks whose markers
 * could not settle because a grant there may have no row: the caller gives
 * those grants their rows (lq_rules_give_rows), in this batch, so that the
 * marker can settle in a later one.  *all: every lock's.
 */
List *
lq_durability_take_needs_rows(bool *all)
{
	List	   *l = lq_needs_rows;

	*all = lq_needs_all_rows;
	lq_needs_rows = NIL;
	lq_needs_all_rows = false;
	return l;
}

/*
 * lq_durability_next_deadline: when the next settling is due (0: nothing to
 * settle).
 */
int64
lq_durability_next_deadline(void)
{
	return hash_get_num_entries(lq_markers) > 0 ? lq_next_settle : 0;
}

/* The two durable ceilings, each a sequence. */
typedef enum LqCeiling
{
	LQ_CEILING_CLOCK,
	LQ_CEILING_TOKEN
} LqCeiling;

/*
 * lq_ceiling_raise makes which's durable ceiling (its sequence) at least
 * need, in this batch, and returns the ceiling the batch makes durable:
 * the last one written, by this lock server or another, if that is at
 * least need; otherwise want (at least need), written now.  A setval is
 * WAL-logged at once and stays whether or not its transaction commits, so
 * a ceiling written before is made durable by this batch's commit (the
 * caller flushes it), which comes after it in WAL.  The writes are made
 * under lq_shmem_ceiling_lock and only ever raise the sequence between a
 * start and a clean stop, so that two lock servers cannot leave it below
 * what either counts on.  The sequences' relation locks are taken before
 * the LWLock, so that nothing waits for a heavyweight lock under it.
 * Raises an ERROR if the sequence cannot be written (the batch then fails;
 * an ERROR releases the LWLock).
 */
static int64
lq_ceiling_raise(LqCeiling which, int64 need, int64 want)
{
	int64	   *logged = which == LQ_CEILING_TOKEN ?
		&lq_shared->token_logged : &lq_shared->clock_logged;
	int64		ceiling;

	lq_tables_seqs_lock();
	LWLockAcquire(lq_shmem_ceiling_lock(), LW_EXCLUSIVE);
	if (*logged >= need)
		ceiling = *logged;
	else
	{
		ceiling = Max(want, need);
		if (which == LQ_CEILING_TOKEN)
			lq_tables_token_write(ceiling);
		else
			lq_tables_clock_write(ceiling);
		*logged = ceiling;
	}
	LWLockRelease(lq_shmem_ceiling_lock());
	return ceiling;
}

/*
 * lq_ceilings_logged records what the sequences hold now, after a start or
 * a clean stop wrote them (perhaps lower than before: a stop brings them
 * down to what was shown, and a new CREATE EXTENSION begins them anew).
 */
static void
lq_ceilings_logged(int64 clock, int64 token)
{
	LWLockAcquire(lq_shmem_ceiling_lock(), LW_EXCLUSIVE);
	lq_shared->clock_logged = clock;
	lq_shared->token_logged = token;
	LWLockRelease(lq_shmem_ceiling_lock());
}

/*
 * lq_durability_extend_clock moves the clock's durable ceiling past now
 * plus LQ_CLOCK_MARGIN_US, to now plus the reserve unless a write already
 * made reaches that far (lq_ceiling_raise), in this batch, which is then
 * flushed before anything is shown.
 */
void
lq_durability_extend_clock(int64 now)
{
	lq_pending_clock = Max(lq_pending_clock,
						   lq_ceiling_raise(LQ_CEILING_CLOCK,
											now + LQ_CLOCK_MARGIN_US + 1,
											now + LQ_CLOCK_RESERVE_US));
	lq_file_dirty = true;
	lq_flush = true;
}

/*
 * lq_durability_tick hands out a clock value for something others will see (a
 * queue position, an acquisition time).  It may pass the published ceiling
 * up to the ceiling this batch is making durable, extending it if needed;
 * nothing of the batch is shown before that commit.
 */
int64
lq_durability_tick(void)
{
	int64		v;

	if (lq_clock_next(Max(lq_clock_ceiling(), lq_pending_clock), &v))
		return v;
	lq_durability_extend_clock(lq_clock_peek());
	if (!lq_clock_next(lq_pending_clock, &v))
		elog(ERROR, "lockq clock could not be advanced");
	return v;
}

/*
 * lq_durability_next_token issues a fencing token: one above the last, raising
 * the durable ceiling first when the reserve is used up.  (Each start of
 * the lock server moves the tokens up to its clock first:
 * lq_durability_start.) Backends take tokens from the same counter for the
 * grants they make by themselves (lq_shmem_token_take), hence the atomic
 * increment.
 */
int64
lq_durability_next_token(void)
{
	int64		token = (int64) pg_atomic_add_fetch_u64(&lq_shared->token_high, 1);

	if (token > Max(lq_shared->token_ceiling, lq_pending_token))
	{
		lq_pending_token = lq_ceiling_raise(LQ_CEILING_TOKEN, token,
											token + LQ_TOKEN_RESERVE);
		lq_file_dirty = true;
		lq_flush = true;
	}
	return token;
}

/*
 * lq_plan_clock decides, on the first start in a shared-memory lifetime,
 * where the clock resumes: continuously, from the state file's offset,
 * when the machine has not rebooted since this server last ran it (the
 * time it was down counts); otherwise at the wall clock or above every
 * ceiling, and then the downtime is not known (see lq_tables_settle).  The
 * first attempt decides; a retry after it failed keeps its decision (the
 * state file may have been written meanwhile).
 */
static void
lq_plan_clock(const LqStateFile *file, bool have_file, const char *boot,
			  int64 seq_clock, int64 clock_ceiling)
{
	bool		own = have_file && file->clock_ceiling >= seq_clock;
	bool		continuous = own && boot[0] != '\0' &&
		strcmp(file->boot_id, boot) == 0;
	int64		offset;
	int64		last;

	if (lq_shared->start_planned)
		return;
	if (continuous)
	{
		offset = file->clock_offset;
		last = file->clean ? file->clock_last : 0;
	}
	else
	{
		int64		start = Max(lq_clock_wall_us(), clock_ceiling + 1);

		offset = start - lq_clock_boottime_us();
		last = start - 1;
	}
	lq_clock_setup(offset, last, clock_ceiling);
	lq_shared->start_continuous = continuous;
	lq_shared->start_low = (own && file->clean) ? file->clock_last :
		clock_ceiling - LQ_CLOCK_RESERVE_US;
	lq_shared->start_planned = true;
	if (!continuous)
		ereport(LOG,
				(errmsg("lockq clock starts at the wall clock or above its last ceiling; the time the server was down is not known, so held locks are delayed as long as their holders may count on them")));
}

/*
 * lq_raise_token_ceiling makes ceiling the lowest token ceiling from now
 * on (it only ever rises).
 */
static void
lq_raise_token_ceiling(int64 ceiling, bool reset)
{
	if (reset)
		lq_shared->token_ceiling = ceiling;
	else
		lq_shared->token_ceiling = Max(lq_shared->token_ceiling, ceiling);
	if (reset || (int64) pg_atomic_read_u64(&lq_shared->token_high) < ceiling)
		pg_atomic_write_u64(&lq_shared->token_high, (uint64) ceiling);
}

/*
 * lq_durability_start takes over the ceilings and the clock when the lock
 * server starts, in its first transaction, and returns the clock reading.
 *
 * first_start (shared memory made anew: a server start, a crash restart,
 * a promotion): tokens continue above the larger of the two durable
 * ceilings (sequence, state file).  The clock continues exactly where it
 * was if the state file was written in this boot of this machine by the
 * last lock server to raise the ceiling: lockq time is then CLOCK_BOOTTIME
 * plus the same offset, and the time the server was down counts exactly.
 * Otherwise it starts at the wall clock, or above the ceiling if the wall
 * clock is behind, and the downtime is not known: lq_tables_settle then
 * counts leases from low, the earliest the stop can have been.  Then the
 * state left by the stop is settled (lq_tables_settle).
 *
 * Otherwise (the lock server restarted, shared memory kept): the clock and
 * the token counter run on; the ceilings are read again (the extension may
 * have been created anew).
 *
 * Either way tokens continue above the clock (the token floor): durable
 * state can go back without the lock server being told (a dump restored
 * into a new cluster, a point-in-time recovery, a standby promoted while
 * it was behind), bringing back a ceiling below tokens already issued, but
 * the clock does not go back with it.  Tokens grow by one a grant from
 * their start, so a token stays below the clock at its grant as long as
 * the grants since the start number fewer than the microseconds (and above
 * it by at most LQ_TOKEN_RESERVE after a crash): every token issued after
 * such a restore is above every token issued before it, provided the
 * restored server's clock is past the old history's last grant (doc/design/clock-and-tokens.md,
 * "Why the clock is the floor").
 *
 * And the sequences are raised to the floors kept in the state file, so
 * that they replicate, and the batch is flushed.
 */
int64
lq_durability_start(bool first_start)
{
	int64		seq_clock;
	int64		seq_token;
	LqStateFile file;
	bool		have_file = lq_statefile_read(&file);
	char		boot[LQ_BOOT_ID_LEN];
	int64		clock_ceiling;
	int64		token_ceiling;
	int64		now;

	/*
	 * Other lock servers may be raising the ceilings meanwhile (all but the
	 * first start, which lock server 0 makes alone): what the sequences
	 * hold is read, and raised, under the ceiling lock, and never taken
	 * below what they count on (token_logged, clock_logged).
	 */
	lq_tables_seqs_lock();
	LWLockAcquire(lq_shmem_ceiling_lock(), LW_EXCLUSIVE);
	seq_clock = lq_tables_clock_read();
	seq_token = lq_tables_token_read();
	lq_statefile_boot_id(boot);
	clock_ceiling = Max(seq_clock, have_file ? file.clock_ceiling : 0);
	token_ceiling = Max(seq_token, have_file ? file.token_ceiling : 0);
	token_ceiling = Max(token_ceiling, (int64) pg_atomic_read_u64(&lq_shared->token_high));
	clock_ceiling = Max(clock_ceiling, lq_clock_ceiling());
	if (!first_start)
	{
		clock_ceiling = Max(clock_ceiling, lq_shared->clock_logged);
		token_ceiling = Max(token_ceiling, lq_shared->token_logged);
	}
	lq_flush = true;

	if (first_start)
	{
		lq_plan_clock(&file, have_file, boot, seq_clock, clock_ceiling);
		token_ceiling = Max(token_ceiling, lq_clock_peek());
		lq_raise_token_ceiling(token_ceiling, true);
		memset(&lq_file, 0, sizeof(lq_file));
		strlcpy(lq_file.boot_id, boot, sizeof(lq_file.boot_id));
		lq_file.clock_offset = lq_shared->clock_offset;
		lq_file.clock_ceiling = clock_ceiling;
		lq_file.token_ceiling = token_ceiling;
		lq_statefile_write(&lq_file);
	}
	else
	{
		lq_clock_reopen(clock_ceiling);
		token_ceiling = Max(token_ceiling, lq_clock_peek());
		lq_raise_token_ceiling(token_ceiling, false);
		if (have_file)
			lq_file = file;
		else
		{
			strlcpy(lq_file.boot_id, boot, sizeof(lq_file.boot_id));
			lq_file.clock_offset = lq_shared->clock_offset;
		}
		lq_file.clock_ceiling = Max(lq_file.clock_ceiling, clock_ceiling);
		lq_file.token_ceiling = Max(lq_file.token_ceiling, token_ceiling);
		lq_file_write_locked();
	}
	if (seq_clock < clock_ceiling)
		lq_tables_clock_write(clock_ceiling);
	if (seq_token < lq_shared->token_ceiling)
		lq_tables_token_write(lq_shared->token_ceiling);
	lq_shared->clock_logged = Max(seq_clock, clock_ceiling);
	lq_shared->token_logged = Max(seq_token, lq_shared->token_ceiling);
	LWLockRelease(lq_shmem_ceiling_lock());

	now = lq_clock_peek();
	if (first_start)
		lq_tables_settle(now, lq_shared->start_continuous,
						 lq_shared->start_low);
	return now;
}

/*
 * lq_load_marker takes one row of lockq.unsettled: the marker of one of the
 * calling lock server's locks, or its wide marker, becomes its own; the
 * delay of lock server 0's wide marker (every wide marker's, merged there
 * by lq_tables_settle) is every lock's, so every lock server honours it.
 */
static void
lq_load_marker(const LqUnsettledRow *row, void *arg)
{
	List	  **delays = arg;
	int			server;
	bool		wide = lq_tables_wide_row_server(row->lock_id, &server);
	const char *key = wide ? LQ_WIDE_ID : row->lock_id;
	bool		mine = wide ? server == lq_my_server_no :
		lq_shmem_mine(row->lock_id);

	if (mine)
	{
		LqMarker   *m = hash_search(lq_markers, key, HASH_ENTER, NULL);

		m->tid = row->tid;
		m->until = row->until;
		m->fence_ttl = row->fence_ttl;
		m->delay_until = row->delay_until;
		m->hold_token = row->hold_token;
		m->hold_until = row->hold_until;
		m->last_change = 0;
		m->last_lsn = InvalidXLogRecPtr;
	}
	if ((mine || (wide && server == 0)) &&
		(row->delay_until > 0 || row->hold_until > 0))
	{
		LqDelay    *d = palloc(sizeof(LqDelay));

		d->lock_id = pstrdup(key);
		d->until = row->delay_until;
		d->hold_token = row->hold_token;
		d->hold_until = row->hold_until;
		*delays = lappend(*delays, d);
	}
}

/*
 * lq_durability_load reads the unsettled locks (after lq_durability_start) and
 * returns the delayed ones, for the rules to honour; the wide marker's
 * delay, which is every lock's, comes apart in *all_until (0: none).
 */
List *
lq_durability_load(int64 now, int64 *all_until)
{
	List	   *delays = NIL;
	ListCell   *lc;

	lq_markers_reset();
	lq_next_settle = now + LQ_SETTLE_PERIOD_US;
	lq_tables_load_unsettled(lq_load_marker, &delays);
	*all_until = 0;
	foreach(lc, delays)
	{
		LqDelay    *d = lfirst(lc);

		if (strcmp(d->lock_id, LQ_WIDE_ID) == 0)
		{
			*all_until = Max(*all_until, d->until);
			delays = foreach_delete_current(delays, lc);
		}
	}
	return delays;
}

/*
 * lq_durability_stop records a stop, in a batch that is flushed: the
 * unsettled locks settle (the flush covers all they covered; a delay still
 * running is kept).  With all (the last lock server to stop, when every
 * other has stopped: nobody shows a token or a clock value any more), the
 * stop is also clean: the ceilings come down to exactly what was shown (so
 * that restarts skip nothing), and after the commit the state file says
 * where the clock stopped.  Without all, the ceilings stay as they are,
 * which is safe.
 */
void
lq_durability_stop(int64 last_clock, bool all)
{
	HASH_SEQ_STATUS seq;
	LqMarker   *m;
	List	   *markers = NIL;
	ListCell   *lc;
	int64		token = (int64) pg_atomic_read_u64(&lq_shared->token_high);

	if (all)
	{
		lq_tables_clock_write(last_clock);
		if (token > 0)
			lq_tables_token_write(token);
		lq_ceilings_logged(last_clock, token > 0 ? token : lq_tables_token_read());
	}

	hash_seq_init(&seq, lq_markers);
	while ((m = hash_seq_search(&seq)) != NULL)
		markers = lappend(markers, pstrdup(m->lock_id));
	foreach(lc, markers)
	{
		m = lq_marker_touch(lfirst(lc), false);
		if (m->delay_until > last_clock || m->hold_until > last_clock)
		{
			m->until = 0;
			m->fence_ttl = 0;
			lq_marker_write(m);
		}
		else
			lq_marker_remove(m);
	}
	list_free_deep(markers);
	lq_flush = true;
	if (!all)
		return;

	lq_file.clock_ceiling = last_clock;
	lq_file.token_ceiling = Max(token, 0);
	lq_file.clean = true;
	lq_file.clock_last = last_clock;
	lq_stopping = true;
}

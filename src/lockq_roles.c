/*-------------------------------------------------------------------------
 *
 * lockq_roles.c
 *		What each role has in the lock servers' state (grants with an
 *		owner, waiters, session-bound grants), for its limits
 *		(lockq.max_*_per_role, lockq_set_role_limits).
 *
 * A role's limits count over all of its locks, and with several lock
 * servers (doc/design/scaling.md) its locks are spread over them, so the
 * counts live in shared memory: a dshash table keyed by role, in a DSA
 * area that the first lock server of a shared-memory lifetime creates and
 * pins, and every later one attaches to.  A role's entry has a count per
 * lock server, which only that lock server changes: one that rebuilds its
 * state (a failed batch, a restart) zeroes its own column and counts again
 * as it loads (lq_roles_forget_mine).  An entry whose counts are all zero
 * is removed, so the table holds only the roles that hold or wait for a
 * lock; it grows with them, as the lock server's own memory does.  The
 * entry of InvalidOid (LQ_ROLES_ALL) counts what every role has: its
 * waiters for lockq.max_waiters, and its session-bound grants for the room
 * in shared memory (lockq.session_locks_per_backend).
 *
 * A limit is checked by taking what it allows (lq_roles_reserve): the sum
 * over the lock servers is read and the calling one's count raised in one
 * hold of the entry's lock, so two lock servers cannot both let a role past
 * its limit.  The request that reserved then adds its grant or waiter,
 * which consumes the reservation instead of counting again
 * (lq_roles_count), or adds nothing, and lq_roles_end_request gives the
 * reservation back.
 *
 * Locking: dshash's partition locks, taken by each call below for the one
 * entry it reads or changes (dshash_find, dshash_find_or_insert); the
 * table's creation under AddinShmemInitLock.  Each count is written by
 * one lock server only, so a read of another's is a snapshot that may be
 * a batch old.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_roles.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/dshash.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"

#include "lockq_roles.h"
#include "lockq_shmem.h"

#define LQ_ROLES_TRANCHE	"lockq role usage"

/* One role's entry. */
typedef struct LqRoleEntry
{
	Oid			role;			/* hash key, must be first */
	int32		count[LQ_MAX_SERVERS][LQ_ROLE_NCOUNTS];
} LqRoleEntry;

/* A count the current request has reserved and not yet used. */
typedef struct LqRoleReservation
{
	Oid			role;
	LqRoleCount what;
} LqRoleReservation;

#define LQ_ROLES_MAX_RESERVED	4	/* all of a kind and the role's, and a
										 * hand-off's room */

static LqRoleReservation lq_reserved[LQ_ROLES_MAX_RESERVED];
static int	lq_nreserved = 0;

static dsa_area *lq_roles_area = NULL;
static dshash_table *lq_roles_table = NULL;

static dshash_parameters lq_roles_params = {
	sizeof(Oid),
	sizeof(LqRoleEntry),
	dshash_memcmp,
	dshash_memhash,
	0							/* set from lq_shared->roles_tranche */
};

/*
 * lq_roles_attach creates the table (the first lock server of this
 * shared-memory lifetime) or attaches to it, once per process.  Raises an
 * ERROR if dynamic shared memory cannot be had.
 */
void
lq_roles_attach(void)
{
	if (lq_roles_table != NULL)
		return;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	if (lq_shared->roles_area == DSM_HANDLE_INVALID)
	{
		lq_shared->roles_tranche = LWLockNewTrancheId();
		LWLockRegisterTranche(lq_shared->roles_tranche, LQ_ROLES_TRANCHE);
		lq_roles_params.tranche_id = lq_shared->roles_tranche;
		lq_roles_area = dsa_create(lq_shared->roles_tranche);
		dsa_pin(lq_roles_area);
		dsa_pin_mapping(lq_roles_area);
		lq_roles_table = dshash_create(lq_roles_area, &lq_roles_params, NULL);
		lq_shared->roles_table = dshash_get_hash_table_handle(lq_roles_table);
		lq_shared->roles_area = dsa_get_handle(lq_roles_area);
	}
	else
	{
		LWLockRegisterTranche(lq_shared->roles_tranche, LQ_ROLES_TRANCHE);
		lq_roles_params.tranche_id = lq_shared->roles_tranche;
		lq_roles_area = dsa_attach(lq_shared->roles_area);
		dsa_pin_mapping(lq_roles_area);
		lq_roles_table = dshash_attach(lq_roles_area, &lq_roles_params,
									   lq_shared->roles_table, NULL);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* lq_role_empty: has the entry nothing left in any lock server? */
static bool
lq_role_empty(const LqRoleEntry *e)
{
	int			i;
	int			k;

	for (i = 0; i < lq_shared->nservers; i++)
		for (k = 0; k < LQ_ROLE_NCOUNTS; k++)
			if (e->count[i][k] != 0)
				return false;
	return true;
}

/*
 * lq_roles_add adds delta to the calling lock server's count of what for
 * role, and removes a role that has nothing left.  With limit >= 0 it adds
 * only if the sum over all lock servers is below limit, and returns whether
 * it did.  Raises an ERROR only if the table cannot grow (out of memory).
 */
static bool
lq_roles_add(Oid role, LqRoleCount what, int delta, int limit)
{
	LqRoleEntry *e;
	bool		found;
	bool		added = true;

	e = dshash_find_or_insert(lq_roles_table, &role, &found);
	if (!found)
		memset(e->count, 0, sizeof(e->count));
	if (limit >= 0)
	{
		int			have = 0;
		int			i;

		for (i = 0; i < lq_shared->nservers; i++)
			have += e->count[i][what];
		added = have < limit;
	}
	if (added)
		e->count[lq_my_server_no][what] += delta;
	if (lq_role_empty(e))
		dshash_delete_entry(lq_roles_table, e);
	else
		dshash_release_lock(lq_roles_table, e);
	return added;
}

/*
 * lq_roles_count adds delta to the calling lock server's count of what for
 * role.  One unit of a positive delta is a reservation of the current
 * request's, if it holds one for role and what: it is counted already.
 */
void
lq_roles_count(Oid role, LqRoleCount what, int delta)
{
	int			i;

	if (delta > 0)
	{
		for (i = 0; i < lq_nreserved; i++)
		{
			if (lq_reserved[i].role == role && lq_reserved[i].what == what)
			{
				lq_reserved[i] = lq_reserved[--lq_nreserved];
				delta--;
				break;
			}
		}
		if (delta == 0)
			return;
	}
	(void) lq_roles_add(role, what, delta, -1);
}

/*
 * lq_roles_reserve takes one of what for role if all lock servers together
 * count fewer than limit (true), for the current request to use or to give
 * back at its end (lq_roles_end_request); false: the role is at its limit,
 * and nothing changed.
 */
bool
lq_roles_reserve(Oid role, LqRoleCount what, int limit)
{
	if (lq_nreserved >= LQ_ROLES_MAX_RESERVED)
		elog(ERROR, "lockq request holds too many reservations");
	if (!lq_roles_add(role, what, 1, limit))
		return false;
	lq_reserved[lq_nreserved].role = role;
	lq_reserved[lq_nreserved].what = what;
	lq_nreserved++;
	return true;
}

/*
 * lq_roles_end_request gives back what the request just applied reserved
 * and did not use: a limit's check that was followed by no grant and no
 * waiter.
 */
void
lq_roles_end_request(void)
{
	while (lq_nreserved > 0)
	{
		lq_nreserved--;
		(void) lq_roles_add(lq_reserved[lq_nreserved].role,
							lq_reserved[lq_nreserved].what, -1, -1);
	}
}

/*
 * lq_roles_forget_mine zeroes the calling lock server's counts, for a
 * rebuild of its state, which counts again as it loads; roles left with
 * nothing are removed, and so are the current request's reservations.
 */
void
lq_roles_forget_mine(void)
{
	dshash_seq_status seq;
	LqRoleEntry *e;

	dshash_seq_init(&seq, lq_roles_table, true);
	while ((e = dshash_seq_next(&seq)) != NULL)
	{
		memset(e->count[lq_my_server_no], 0, sizeof(e->count[0]));
		if (lq_role_empty(e))
			dshash_delete_current(&seq);
	}
	dshash_seq_term(&seq);
	lq_nreserved = 0;			/* went with the counts */
}

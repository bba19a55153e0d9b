/*-------------------------------------------------------------------------
 *
 * lockq_fences.c
 *		The fences a backend's transaction takes with lockq_holds, and
 *		their end with the transaction.
 *
 * lockq_holds(lock_id, token) called by the grant's own role (or an
 * administrator) fences a current grant until the transaction ends: the
 * grant cannot pass to anyone else before then, so a write fenced by
 * lockq_holds commits before the next holder is granted.  Where the fence
 * lives depends on where the grant does:
 *	- a session-bound grant: a count in its shared-memory entry
 *	  (lockq_session.c), and its token in this backend's slot, so that the
 *	  lock server can tell whose transaction holds a hand-off back
 *	  (lq_shmem_slot_fencers);
 *	- a leased grant kept without its lockq.owners row: a count in its
 *	  entry in the table of quick releases (lockq_leases.c);
 *	- any other leased grant: a KEY SHARE lock on its row in lockq.owners
 *	  (lockq_tables.c), which ends with the transaction by itself.
 * The counts are taken off again at the end of the transaction
 * (lq_fences_end, from the transaction callback in lockq_hooks.c), which
 * also tells the lock server: it may have hand-offs waiting for them.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fences.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "lockq.h"
#include "lockq_call.h"
#include "lockq_fences.h"
#include "lockq_leases.h"
#include "lockq_policy.h"
#include "lockq_session.h"
#include "lockq_shmem.h"
#include "lockq_tables.h"

static bool lq_fenced = false;	/* this transaction holds a fence */

/*
 * lq_note_fence lists a session-bound grant this transaction is now fenced
 * on in our slot, for the lock server (lq_shmem_slot_fencers).
 */
static void
lq_note_fence(int64 token)
{
	LqSlot	   *slot = &lq_slots[lq_call_slotno()];

	SpinLockAcquire(&slot->mutex);
	if (slot->nfences < LQ_MAX_SLOT_FENCES)
		slot->fence_tokens[slot->nfences++] = token;
	else
		slot->fences_overflow = true;
	SpinLockRelease(&slot->mutex);
}

/*
 * lq_fences_hold answers lockq_holds(lock_id, token) for a positive token:
 * is that grant current?  When it is, and the caller's role is the grant's
 * own (or an administrator), it also fences the grant until the
 * transaction ends (see above).  Any other role learns true or false,
 * without a fence: it cannot hold another role's hand-off back.  A fence
 * lasts at most lockq.fence_timeout past the end of the grant's lease: then
 * the lock server ends the fencing transaction's session.  The caller has
 * registered the transaction callback that ends the fences
 * (lq_hooks_watch_xact).  May make a round trip to the lock server for the
 * clock (lq_call_now_bounded) and raise what it raises.
 */
bool
lq_fences_hold(const char *lock_id, int64 token)
{
	int64		now;
	LqHeld		held;
	Oid			role;
	bool		admin;

	/* an answer false by time must hold after a crash: see the function */
	now = lq_call_now_bounded();
	role = GetUserId();
	admin = lq_call_is_admin(role);
	if (!lq_policy_may_use(lock_id, role, admin))
	{
		/* the answer, without a fence: see lq_session_holds */
		role = InvalidOid;
		admin = false;
	}
	lq_call_attach();
	held = lq_session_holds(lock_id, token, now, role, admin);
	/* a leased grant without a row is fenced in the table of quick releases */
	if (held == LQ_HELD_UNKNOWN)
		held = lq_leases_fence(lock_id, token, now, role, admin);
	if (held == LQ_HELD_FENCED)
		lq_note_fence(token);
	else if (held == LQ_HELD_UNKNOWN)
	{
		/* released by a session: the lock server has yet to delete the row */
		held = lq_leases_is_released(lock_id, token) ? LQ_HELD_NO :
			lq_tables_holds(lock_id, token, now, role, admin);
		if (held == LQ_HELD_FENCED)
			lq_fenced = true;
		/* released while the row lock was taken: false (the hand-off waits) */
		if (held != LQ_HELD_NO && lq_leases_is_released(lock_id, token))
			held = LQ_HELD_NO;
	}
	if (held == LQ_HELD_FENCED)
		lq_fenced = true;
	return held != LQ_HELD_NO;
}

/*
 * lq_fences_active: does this transaction hold a fence?
 */
bool
lq_fences_active(void)
{
	return lq_fenced;
}

/*
 * lq_fences_end ends this transaction's fences: the counts on session-bound
 * grants and their list in our slot (row locks on lockq.owners end with
 * the transaction by themselves), and tells the lock server, which may
 * have hand-offs waiting for them.
 */
void
lq_fences_end(void)
{
	LqSlot	   *slot = &lq_slots[lq_call_slotno()];

	lq_fenced = false;
	(void) lq_session_release_fences();
	(void) lq_leases_release_fences();
	/* at exit the slot may be free, or another session's, by now */
	SpinLockAcquire(&slot->mutex);
	if (slot->pid == MyProcPid && !slot->session_ended)
	{
		slot->nfences = 0;
		slot->fences_overflow = false;
	}
	SpinLockRelease(&slot->mutex);
	pg_atomic_fetch_add_u64(&lq_shared->fence_gen, 1);
	lq_shmem_wake_servers();
}

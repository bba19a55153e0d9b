/*-------------------------------------------------------------------------
 *
 * lockq_rules_int.h
 *		The rules' lock table, shared by lockq_rules.c, which applies
 *		requests to it, and lockq_recovery.c, which rebuilds it after a
 *		restart.  No other file includes this one.
 *
 * The structs here live in the lock server's private memory and are
 * touched by the lock server only, so they have no locking rules.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_rules_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_RULES_INT_H
#define LOCKQ_RULES_INT_H

#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "storage/itemptr.h"

#include "lockq.h"

/* A deadline in a timer heap (lockq_rules.c, "Timers"). */
typedef struct LqTimerGroup LqTimerGroup;
typedef enum LqTimerKind
{
	LQ_TIMER_LEASE,				/* LqLock.lease: the grant's lease ends */
	LQ_TIMER_DELAY,				/* LqLock.delay: a delay after a restart ends */
	LQ_TIMER_ROW,				/* LqLock.row: a grant without a row gets it */
	LQ_TIMER_WAITER				/* LqWaiter.timer: a timeout or heartbeat */
} LqTimerKind;

typedef struct LqTimer
{
	pairingheap_node ph;
	int64		at;
	bool		armed;
	LqTimerKind kind;
	bool		memory_only;	/* in lq_wait_timers */
	LqTimerGroup *group;		/* else: the group whose heap it is in */
} LqTimer;


typedef struct LqWaiter LqWaiter;

typedef struct LqLock
{
	char		lock_id[LQ_MAX_ID_LEN + 1]; /* hash key, must be first */
	bool		held;
	bool		ending;			/* grant over, row deletion deferred */
	bool		in_deferred;
	bool		in_shmem;		/* session-bound: in lockq_session.c, not in
								 * lockq.owners */
	bool		quick;			/* offered to lockq_leases.c: its session may
								 * release it by itself */
	bool		rowless;		/* a leased grant without its lockq.owners
								 * row: its record is its entry there */
	bool		was_rowless;	/* this grant was: transactions may be fenced
								 * on it in its entry */
	uint32		end_fences;		/* fences read when it was marked ending */
	char	   *owner;
	char	   *channel;		/* holder's NOTIFY channel, or NULL */
	int64		token;
	int64		ttl;
	int64		acquired;
	int64		expires;
	int			session_slot;	/* session-bound grants: the slot, else -1 */
	int			session_pid;
	int64		session_start;
	Oid			role;
	ItemPointerData row_tid;	/* its lockq.owners row, while held */
	int64		pickup_heartbeat;	/* granted to a lockq_await with the full
									 * lease: the waiter's heartbeat
									 * interval, the lease it keeps if the
									 * session never reads the answer */
	LqTimer		lease;
	LqTimer		row;			/* while rowless: when it gets its row */
	int64		delay_until;	/* after a restart: nothing is granted
								 * before this (see lockq_durability.c), the
								 * later of lost_until and hold_until */
	int64		lost_until;		/* leases that may have been lost end */
	int64		hold_token;		/* a grant that survived, whose holder */
	int64		hold_until;		/* ...may count on it until this */
	LqTimer		delay;
	dlist_node	session_node;	/* in LqSession.held */
	dlist_node	deferred_node;	/* in lq_deferred */
	dlist_head	queue;			/* of LqWaiter, head is next */
	int			nwaiters;
	int			durable_changes;	/* leases and early ends shown since the
									 * rules met it (lq_lock_is_new) */
} LqLock;

typedef struct LqWaiterKey
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	char		owner[LQ_MAX_OWNER_LEN + 1];
} LqWaiterKey;

struct LqWaiter
{
	LqWaiterKey key;			/* hash key, must be first */
	LqLock	   *lock;
	int64		ts;
	bool		client;			/* client-side waiter, else a backend */
	int			slot;			/* backend waiter: its slot and request */
	uint64		reqid;
	int			session_pid;
	int64		session_start;
	bool		session_owner;	/* owner is the waiting session itself */
	int64		ttl;
	int64		heartbeat;		/* client waiter: µs allowed between calls */
	Oid			role;
	char	   *channel;
	ItemPointerData row_tid;	/* client waiter: its lockq.queue row */
	int			await_slot;		/* client waiter: the session blocked in
								 * lockq_await for it (-1: none) */
	uint64		await_reqid;	/* ...and its request */
	LqTimer		timer;			/* timeout, heartbeat deadline, or the end
								 * of a lockq_await */
	dlist_node	node;
};

/*
 * Who holds a lock and on what terms: what lq_hold_lock writes into it, for
 * a new grant (lq_grant) and for one loaded after a restart.
 */
typedef struct LqHolder
{
	const char *owner;
	const char *channel;		/* a client waiter's NOTIFY channel, or NULL */
	int64		token;
	int64		ttl;			/* the lease it asked for */
	int64		acquired;
	int64		expires;
	Oid			role;
	bool		in_shmem;		/* session-bound: lockq_session.c, no row */
	int			session_slot;	/* session-bound: its live session's slot */
	int			session_pid;
	int64		session_start;
} LqHolder;

/* A waiter to queue (lq_waiter_create): new, or loaded after a restart. */
typedef struct LqWaiterSpec
{
	const char *owner;
	bool		client;			/* lockq_enqueue, else a backend in lockq_get */
	int64		ts;				/* its place; 0: a new waiter, at the tail */
	int64		since;			/* backend: when its call was made, or 0 */
	int64		ttl;			/* the lease it asks for */
	int64		heartbeat;		/* client: µs allowed between calls */
	Oid			role;
	const char *channel;		/* client: NOTIFY channel, or NULL */
	int			slotno;			/* backend: its slot, request and session */
	uint64		reqid;
	int			session_pid;
	int64		session_start;
} LqWaiterSpec;


typedef enum LqEndReason
{
	LQ_END_RELEASE,
	LQ_END_EXPIRE,
	LQ_END_SESSION,
	LQ_END_FORCE,
	LQ_END_CANCEL
} LqEndReason;

/* The state: reset, looked up, and changed as the rules change it. */
extern void lq_rules_reset(void);
extern LqLock *lq_rules_lock_lookup(const char *lock_id, bool create);
extern void lq_rules_hold(LqLock *lock, const LqHolder *h);
extern void lq_rules_timer_arm(LqTimer *t, int64 at);
extern void lq_rules_put_lease_entry(const LqLock *lock, int64 expires,
									 bool rowless);
extern void lq_rules_mark_quick(LqLock *lock);
extern void lq_rules_file_under_session(LqLock *lock, int slotno);
extern void lq_rules_defer_handoff(LqLock *lock, bool count);
extern LqWaiter *lq_rules_waiter_lookup(const char *lock_id,
										const char *owner);
extern LqWaiter *lq_rules_waiter_create(LqLock *lock,
										const LqWaiterSpec *spec);
extern void lq_rules_delay(LqLock *lock, int64 lost_until, int64 hold_token,
						   int64 hold_until, int64 until);
extern void lq_rules_delay_all(int64 all_until);
extern void lq_rules_end_grant(LqLock *lock, LqEndReason why, int64 now);
extern void lq_rules_hand_on_orphans(int64 now);

#endif							/* LOCKQ_RULES_INT_H */

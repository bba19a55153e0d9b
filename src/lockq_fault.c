/*-------------------------------------------------------------------------
 *
 * lockq_fault.c
 *		Fault injection for the test build: named points in the lock server
 *		and the backends at which a test makes the process fail in a chosen
 *		way, at the moment that matters.
 *
 * A point is a call LQ_FAULT("name") in the code (lockq_fault.h); it does
 * nothing unless a test armed a point of that name.  The armed points live
 * in a small table in shared memory, so that a test's session can arm a
 * point that fires in the lock server.  Each has an action:
 *	- error   ereport(ERROR): the lock server's batch fails and is retried;
 *	- fatal   ereport(FATAL): the process exits, the postmaster restarts
 *			  the lock server (shared memory survives);
 *	- panic   elog(PANIC): the whole cluster crashes and restarts (shared
 *			  memory is made anew, the WAL not yet written is lost);
 *	- sleep   the process stalls for arg milliseconds;
 *	- wait    the process stalls until lockq_fault_wakeup(name) (at most
 *			  five minutes).
 * A point fires after skip hits, then times times (times < 0: every hit).
 * A point armed for one lock server (server >= 0, lockq.lock_servers) is
 * hit only there; otherwise in any process that reaches it.
 *
 * A crash restart empties the table, so points on the recovery path are
 * armed from the GUC lockq.fault_points ('name:action[:arg[:skip[:times[:server]]]]'
 * items, comma-separated) by the lock server when it starts and on SIGHUP;
 * a point already in the table is not armed again, so such a point fires
 * at most times times per shared-memory lifetime.
 *
 * Compiled only with -DLOCKQ_FAULT_INJECTION (make FAULT_INJECTION=1).  The
 * SQL functions are not part of the extension: tests create them from
 * test/sql/lockq_fault.sql.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fault.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef LOCKQ_FAULT_INJECTION

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "lockq_fault.h"

#define LQ_FAULT_POINTS		32
#define LQ_FAULT_NAMELEN	64
/* The longest a 'wait' point stalls without a wakeup. */
#define LQ_FAULT_MAX_WAIT_MS	(5 * 60 * 1000)

typedef enum LqFaultAction
{
	LQ_FAULT_ERROR,
	LQ_FAULT_FATAL,
	LQ_FAULT_PANIC,
	LQ_FAULT_SLEEP,
	LQ_FAULT_WAIT
} LqFaultAction;

static const char *const lq_fault_action_names[] = {
	"error", "fatal", "panic", "sleep", "wait"
};

typedef struct LqFaultPoint
{
	bool		in_use;
	char		name[LQ_FAULT_NAMELEN];
	LqFaultAction action;
	int			arg;			/* sleep: milliseconds */
	int			skip;			/* hits still to let pass */
	int			remaining;		/* firings left; < 0: unlimited */
	int			server;			/* the lock server it is hit in; -1: any
								 * process */
	uint64		hits;
	uint64		fired;
	uint64		wake_gen;		/* bumped by lockq_fault_wakeup */
	int			waiting;		/* processes stalled in 'wait' */
} LqFaultPoint;

typedef struct LqFaultShared
{
	slock_t		mutex;			/* protects points[] */
	pg_atomic_uint32 narmed;	/* points in use: 0 keeps LQ_FAULT cheap */
	ConditionVariable wake;
	LqFaultPoint points[LQ_FAULT_POINTS];
} LqFaultShared;

static LqFaultShared *lq_faults = NULL;
static char *lq_fault_points_guc = NULL;
static int	lq_fault_my_server = -1;	/* lq_fault_set_server; -1: not a
										 * lock server */

PG_FUNCTION_INFO_V1(lockq_fault_arm);
PG_FUNCTION_INFO_V1(lockq_fault_disarm);
PG_FUNCTION_INFO_V1(lockq_fault_wakeup);
PG_FUNCTION_INFO_V1(lockq_faults);

Size
lq_fault_shmem_size(void)
{
	return sizeof(LqFaultShared);
}

/*
 * lq_fault_shmem_startup creates the table; called from lockq_shmem.c's
 * startup hook with AddinShmemInitLock held.
 */
void
lq_fault_shmem_startup(void)
{
	bool		found;

	lq_faults = ShmemInitStruct("lockq fault points", sizeof(LqFaultShared),
								&found);
	if (!found)
	{
		memset(lq_faults, 0, sizeof(LqFaultShared));
		SpinLockInit(&lq_faults->mutex);
		pg_atomic_init_u32(&lq_faults->narmed, 0);
		ConditionVariableInit(&lq_faults->wake);
	}
}

void
lq_fault_define_guc(void)
{
	DefineCustomStringVariable("lockq.fault_points",
							   "Fault-injection points the lock server arms when it starts (test build only).",
							   "A comma-separated list of name:action[:arg[:skip[:times[:server]]]].",
							   &lq_fault_points_guc,
							   "",
							   PGC_SIGHUP, GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}

/* Must be called with the mutex held. */
static LqFaultPoint *
lq_fault_find(const char *name)
{
	int			i;

	for (i = 0; i < LQ_FAULT_POINTS; i++)
	{
		LqFaultPoint *p = &lq_faults->points[i];

		if (p->in_use && strcmp(p->name, name) == 0)
			return p;
	}
	return NULL;
}

static bool
lq_fault_parse_action(const char *s, LqFaultAction *action)
{
	int			i;

	for (i = 0; i < lengthof(lq_fault_action_names); i++)
	{
		if (pg_strcasecmp(s, lq_fault_action_names[i]) == 0)
		{
			*action = (LqFaultAction) i;
			return true;
		}
	}
	return false;
}

/*
 * lq_fault_arm arms (or re-arms) a point, for lock server server only
 * (-1: any process).  With only_new, a point that is
 * already in the table is left as it is.  Raises when the table is full.
 */
static void
lq_fault_arm(const char *name, LqFaultAction action, int arg, int skip,
			 int times, int server, bool only_new)
{
	LqFaultPoint *p;
	int			i;
	bool		full = false;

	if (strlen(name) == 0 || strlen(name) >= LQ_FAULT_NAMELEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault point name \"%s\"", name)));

	SpinLockAcquire(&lq_faults->mutex);
	p = lq_fault_find(name);
	if (p != NULL && only_new)
	{
		SpinLockRelease(&lq_faults->mutex);
		return;
	}
	for (i = 0; p == NULL && i < LQ_FAULT_POINTS; i++)
	{
		if (!lq_faults->points[i].in_use)
		{
			p = &lq_faults->points[i];
			memset(p, 0, sizeof(LqFaultPoint));
			strlcpy(p->name, name, sizeof(p->name));
			p->in_use = true;
			pg_atomic_fetch_add_u32(&lq_faults->narmed, 1);
		}
	}
	if (p == NULL)
		full = true;
	else
	{
		p->action = action;
		p->arg = arg;
		p->skip = skip;
		p->remaining = times;
		p->server = server;
	}
	SpinLockRelease(&lq_faults->mutex);
	if (full)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many lockq fault points armed")));
}

/*
 * lq_fault_arm_from_guc arms the points listed in lockq.fault_points that
 * are not in the table yet.  The lock server calls it when it starts and
 * on SIGHUP.  A malformed item is logged and ignored.
 */
void
lq_fault_arm_from_guc(void)
{
	char	   *list;
	char	   *item;
	char	   *save = NULL;

	if (lq_faults == NULL || lq_fault_points_guc == NULL ||
		lq_fault_points_guc[0] == '\0')
		return;
	list = pstrdup(lq_fault_points_guc);
	for (item = strtok_r(list, ",", &save); item != NULL;
		 item = strtok_r(NULL, ",", &save))
	{
		char	   *fields[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
		char	   *fsave = NULL;
		char	   *f;
		int			n = 0;
		LqFaultAction action;

		for (f = strtok_r(item, ":", &fsave); f != NULL && n < 6;
			 f = strtok_r(NULL, ":", &fsave))
			fields[n++] = f;
		if (n < 2 || !lq_fault_parse_action(fields[1], &action))
		{
			ereport(LOG,
					(errmsg("ignoring malformed lockq.fault_points item \"%s\"",
							fields[0] ? fields[0] : "")));
			continue;
		}
		lq_fault_arm(fields[0], action, n > 2 ? atoi(fields[2]) : 0,
					 n > 3 ? atoi(fields[3]) : 0, n > 4 ? atoi(fields[4]) : 1,
					 n > 5 ? atoi(fields[5]) : -1, true);
		ereport(LOG, (errmsg("lockq fault point \"%s\" armed: %s",
							 fields[0], fields[1])));
	}
	pfree(list);
}

/*
 * lq_fault_stall sleeps for ms milliseconds without servicing interrupts,
 * like a process stuck in a system call, but leaving when the postmaster
 * dies.  The latch is not waited for, so a wake-up that arrives meanwhile
 * stays set for the caller's next wait; none is made up (a test must see
 * whether anybody woke the process).
 */
static void
lq_fault_stall(int ms)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);

		if (left <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left,
						 PG_WAIT_EXTENSION);
	}
}

/*
 * lq_fault_wait stalls until the point's wake generation moves past gen,
 * the point is disarmed, or LQ_FAULT_MAX_WAIT_MS pass.  Interrupts are
 * serviced as in any condition-variable sleep.
 */
static void
lq_fault_wait(const char *name, uint64 gen)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  LQ_FAULT_MAX_WAIT_MS);

	ConditionVariablePrepareToSleep(&lq_faults->wake);
	for (;;)
	{
		LqFaultPoint *p;
		bool		done;

		SpinLockAcquire(&lq_faults->mutex);
		p = lq_fault_find(name);
		done = (p == NULL || p->wake_gen != gen);
		SpinLockRelease(&lq_faults->mutex);
		if (done || GetCurrentTimestamp() >= end)
			break;
		(void) ConditionVariableTimedSleep(&lq_faults->wake, 100,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();

	SpinLockAcquire(&lq_faults->mutex);
	{
		LqFaultPoint *p = lq_fault_find(name);

		if (p != NULL && p->waiting > 0)
			p->waiting--;
	}
	SpinLockRelease(&lq_faults->mutex);
	SetLatch(MyLatch);
}

/*
 * lq_fault_hit is LQ_FAULT: if a point of this name is armed and due, do
 * its action.  Must not be called in a critical section or with a spinlock
 * held; an LWLock held during 'sleep' or 'wait' blocks whoever needs it.
 */
void
lq_fault_hit(const char *name)
{
	LqFaultPoint *p;
	LqFaultAction action = LQ_FAULT_ERROR;
	int			arg = 0;
	uint64		gen = 0;
	bool		fire = false;

	if (lq_faults == NULL || pg_atomic_read_u32(&lq_faults->narmed) == 0)
		return;

	SpinLockAcquire(&lq_faults->mutex);
	p = lq_fault_find(name);
	if (p != NULL && (p->server < 0 || p->server == lq_fault_my_server))
	{
		p->hits++;
		if (p->skip > 0)
			p->skip--;
		else if (p->remaining != 0)
		{
			if (p->remaining > 0)
				p->remaining--;
			p->fired++;
			fire = true;
			action = p->action;
			arg = p->arg;
			gen = p->wake_gen;
			if (action == LQ_FAULT_WAIT)
				p->waiting++;
		}
	}
	SpinLockRelease(&lq_faults->mutex);
	if (!fire)
		return;

	switch (action)
	{
		case LQ_FAULT_ERROR:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("lockq fault injection: error at \"%s\"", name)));
			break;
		case LQ_FAULT_FATAL:
			ereport(FATAL,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("lockq fault injection: fatal at \"%s\"", name)));
			break;
		case LQ_FAULT_PANIC:
			elog(PANIC, "lockq fault injection: panic at \"%s\"", name);
			break;
		case LQ_FAULT_SLEEP:
			ereport(LOG,
					(errmsg("lockq fault injection: sleeping %d ms at \"%s\"",
							arg, name)));
			lq_fault_stall(arg);
			break;
		case LQ_FAULT_WAIT:
			ereport(LOG,
					(errmsg("lockq fault injection: waiting at \"%s\"", name)));
			lq_fault_wait(name, gen);
			break;
	}
}

/*
 * lq_fault_set_server tells the fault points that this process is lock
 * server server.  Called by the lock server when it starts.
 */
void
lq_fault_set_server(int server)
{
	lq_fault_my_server = server;
}

static void
lq_fault_check_caller(void)
{
	if (lq_faults == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lockq must be loaded via \"shared_preload_libraries\"")));
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may arm lockq fault points")));
}

/*
 * lockq_fault_arm(name, action, arg, skip, times, server) arms a point,
 * replacing an earlier arming of the same name (its counters restart);
 * server NULL (or left out): hit in any process, else only in that lock
 * server.
 */
Datum
lockq_fault_arm(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *action_s;
	LqFaultAction action;

	lq_fault_check_caller();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fault point name and action must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	action_s = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (!lq_fault_parse_action(action_s, &action))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault action \"%s\"", action_s),
				 errhint("Use error, fatal, panic, sleep or wait.")));
	lq_fault_arm(name, action, PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2),
				 PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3),
				 PG_ARGISNULL(4) ? 1 : PG_GETARG_INT32(4),
				 (PG_NARGS() < 6 || PG_ARGISNULL(5)) ? -1 : PG_GETARG_INT32(5),
				 false);
	PG_RETURN_VOID();
}

/*
 * lockq_fault_disarm(name) removes a point (NULL: all of them) and wakes
 * whoever waits at it.
 */
Datum
lockq_fault_disarm(PG_FUNCTION_ARGS)
{
	char	   *name = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	int			i;

	lq_fault_check_caller();
	SpinLockAcquire(&lq_faults->mutex);
	for (i = 0; i < LQ_FAULT_POINTS; i++)
	{
		LqFaultPoint *p = &lq_faults->points[i];

		if (p->in_use && (name == NULL || strcmp(p->name, name) == 0))
		{
			p->in_use = false;
			pg_atomic_fetch_sub_u32(&lq_faults->narmed, 1);
		}
	}
	SpinLockRelease(&lq_faults->mutex);
	ConditionVariableBroadcast(&lq_faults->wake);
	PG_RETURN_VOID();
}

/*
 * lockq_fault_wakeup(name) lets every process waiting at the point go on.
 */
Datum
lockq_fault_wakeup(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	LqFaultPoint *p;

	lq_fault_check_caller();
	SpinLockAcquire(&lq_faults->mutex);
	p = lq_fault_find(name);
	if (p != NULL)
		p->wake_gen++;
	SpinLockRelease(&lq_faults->mutex);
	ConditionVariableBroadcast(&lq_faults->wake);
	PG_RETURN_VOID();
}

/*
 * lockq_faults() lists the points in the table: name, action, arg, skip
 * left, firings left, hits, firings, processes waiting, and the lock server
 * it is hit in (NULL: any process).
 */
Datum
lockq_faults(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LqFaultPoint copy[LQ_FAULT_POINTS];
	int			i;

	lq_fault_check_caller();
	InitMaterializedSRF(fcinfo, 0);
	SpinLockAcquire(&lq_faults->mutex);
	memcpy(copy, lq_faults->points, sizeof(copy));
	SpinLockRelease(&lq_faults->mutex);

	for (i = 0; i < LQ_FAULT_POINTS; i++)
	{
		Datum		values[9];
		bool		nulls[9] = {0};
		LqFaultPoint *p = &copy[i];

		if (!p->in_use)
			continue;
		values[0] = CStringGetTextDatum(p->name);
		values[1] = CStringGetTextDatum(lq_fault_action_names[p->action]);
		values[2] = Int32GetDatum(p->arg);
		values[3] = Int32GetDatum(p->skip);
		values[4] = Int32GetDatum(p->remaining);
		values[5] = Int64GetDatum((int64) p->hits);
		values[6] = Int64GetDatum((int64) p->fired);
		values[7] = Int32GetDatum(p->waiting);
		values[8] = Int32GetDatum(p->server);
		nulls[8] = p->server < 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

#endif							/* LOCKQ_FAULT_INJECTION */

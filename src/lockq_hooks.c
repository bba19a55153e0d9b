/*-------------------------------------------------------------------------
 *
 * lockq_hooks.c
 *		The backend hooks: the executor and utility hooks and the
 *		transaction callback.
 *
 * In every backend of the server (when lockq is preloaded):
 *	- the executor and utility hooks count this session's top-level
 *	  statements, so that a session-bound grant whose statement fails is
 *	  handed back at the end of the transaction (its caller never saw the
 *	  token);
 *	- the transaction callback does that, ends the transaction's fences
 *	  (lockq_fences.c) and refuses to prepare a fenced transaction;
 *	- the utility hook also refuses maintenance commands that would break
 *	  the lock server's tables (lockq_maint.c), ends the session-bound locks
 *	  at DISCARD ALL, lets DROP DATABASE of lockq.database through, and
 *	  carries the durable floors into a new installation of the extension.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_hooks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"

#include "lockq.h"
#include "lockq_call.h"
#include "lockq_clock.h"
#include "lockq_fences.h"
#include "lockq_guc.h"
#include "lockq_hooks.h"
#include "lockq_maint.h"
#include "lockq_shmem.h"
#include "lockq_statefile.h"

/*
 * Top-level statements of this session, counted by the executor and
 * utility hooks below: lq_stmt_seq is the number of the one running (or
 * last started), lq_stmt_done that of the last one that completed without
 * an error.  lq_nesting is the depth of nested statements (functions,
 * procedures) inside the top-level one.
 */
static uint64 lq_stmt_seq = 0;
static uint64 lq_stmt_done = 0;
static int	lq_nesting = 0;

/*
 * The session-bound grant that a top-level statement of this session
 * created, while that statement runs (lq_hooks_note_fresh_grant).  Should that
 * statement fail, its caller never saw the token: lq_xact_callback releases
 * the grant.  This covers a cancel or terminate that arrives just after
 * lockq_get has returned (the executor raises it at its next check), the
 * one case lq_call cannot hand back itself.  Once the statement has
 * completed, the grant is the caller's, whatever fails later in the
 * transaction (a later statement of the same query string, say).
 */
static struct
{
	bool		valid;
	uint64		stmt;			/* the top-level statement that made it */
	int64		token;
	char		lock_id[LQ_MAX_ID_LEN + 1];
}			lq_fresh;

static bool lq_xact_cb_registered = false;

static void lq_xact_callback(XactEvent event, void *arg);

/*
 * lq_hooks_watch_xact registers lq_xact_callback, once per session: from the
 * first fence or fresh session-bound grant on, the end of every
 * transaction is watched.
 */
void
lq_hooks_watch_xact(void)
{
	if (!lq_xact_cb_registered)
	{
		RegisterXactCallback(lq_xact_callback, NULL);
		lq_xact_cb_registered = true;
	}
}

/*
 * lq_hooks_note_fresh_grant records that the current statement created the
 * session-bound grant of lock_id under token: it belongs to the statement
 * until the statement ends (see lq_fresh).
 */
void
lq_hooks_note_fresh_grant(const char *lock_id, int64 token)
{
	lq_hooks_watch_xact();
	lq_fresh.valid = true;
	lq_fresh.stmt = lq_stmt_seq;
	lq_fresh.token = token;
	strlcpy(lq_fresh.lock_id, lock_id, sizeof(lq_fresh.lock_id));
}

/*
 * lq_xact_callback ends the fences a transaction took (lockq_holds) and
 * wakes the worker: a hand-off it held up can now proceed.  At
 * XACT_EVENT_COMMIT/ABORT the transaction is no longer in progress (its
 * writes are visible), so the worker's delete sees its row lock as gone,
 * and its fences on session-bound grants are taken off here.  A fence on a
 * session-bound grant lives in this backend, so it cannot be handed to a
 * prepared transaction: PREPARE TRANSACTION is refused then, as for
 * session-level advisory locks mixed with transaction-level ones.
 */
static void
lq_xact_callback(XactEvent event, void *arg)
{
	if (lq_fresh.valid && event == XACT_EVENT_ABORT &&
		lq_fresh.stmt > lq_stmt_done)
	{
		LqRequest	req;

		/* the statement that took it failed: nobody saw the token */
		memset(&req, 0, sizeof(req));
		strlcpy(req.lock_id, lq_fresh.lock_id, sizeof(req.lock_id));
		req.has_token = true;
		req.token = lq_fresh.token;
		(void) lq_call_quick_release(&req);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		lq_fresh.valid = false;
	if (!lq_fences_active())
		return;

	/*
	 * A fence must end with its session at the latest, so that the lock
	 * server can end it (lockq.fence_timeout): a prepared transaction would
	 * keep a row lock, or a count in shared memory, without anyone to end.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that is fenced by lockq_holds"),
				 errhint("Call lockq_holds in the transaction that commits the fenced write, not in a prepared one.")));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		lq_fences_end();
}

/*
 * DISCARD ALL ends the session's session-bound locks, as it releases its
 * advisory locks: a session pooler (pgbouncer's server_reset_query) runs it
 * to hand a server connection to the next client, which must not inherit
 * the last one's locks.  It runs outside a transaction block, so no
 * transaction of this session is fenced on them.  Only the lock servers
 * that may hold one of them are asked (lq_call_release_session): a session
 * that took no session-bound lock since its last DISCARD ALL is not held
 * up, and one that did waits for no other lock server.
 */
static ProcessUtility_hook_type lq_prev_process_utility = NULL;

/* How long DROP DATABASE of lockq.database waits for the lock server to go. */
#define LQ_DROPDB_WAIT_MS	10000

/*
 * lq_let_database_go: DROP DATABASE of lockq.database, by a role that may
 * drop it, must not fail because the lock server is connected to it (as
 * pg_restore --clean --create does).  The lock server is asked to stop
 * cleanly, and its successor waits before it connects while this backend
 * is dropping the database (dropping_pid, cleared when the statement
 * ends; lq_worker_wait_for_drop).  Waits up to LQ_DROPDB_WAIT_MS for it to
 * exit.  Returns whether it did all that (then the caller clears
 * dropping_pid).  Other databases, and roles that may not drop this one,
 * change nothing: DROP DATABASE reports their case itself.
 */
static bool
lq_let_database_go(const char *dbname)
{
	Oid			dboid;
	int			waited = 0;
	int			pid;

	if (lockq_database == NULL || dbname == NULL ||
		strcmp(dbname, lockq_database) != 0 || !process_shared_preload_libraries_done)
		return false;
	dboid = get_database_oid(dbname, true);
	if (!OidIsValid(dboid) || !pg_database_ownercheck(dboid, GetUserId()))
		return false;
	pg_atomic_write_u32(&lq_shared->dropping_pid, (uint32) MyProcPid);
	while ((pid = lq_shmem_server_pid()) != 0 && waited < LQ_DROPDB_WAIT_MS)
	{
		if (waited == 0)
		{
			int			i;

			ereport(LOG,
					(errmsg("lockq lock server leaves database \"%s\", which is being dropped", dbname)));
			for (i = 0; i < lq_shared->nservers; i++)
			{
				int			k = lq_shmem_server_pid_of(i);

				if (k != 0)
					(void) kill(k, SIGTERM);
			}
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited += 50;
	}
	return true;
}
static ExecutorStart_hook_type lq_prev_executor_start = NULL;
static ExecutorRun_hook_type lq_prev_executor_run = NULL;
static ExecutorFinish_hook_type lq_prev_executor_finish = NULL;
static ExecutorEnd_hook_type lq_prev_executor_end = NULL;

/*
 * The executor hooks count top-level statements (see lq_stmt_seq): a
 * statement starts at nesting level 0 and has completed when its
 * ExecutorEnd runs there (never after an error).  Nested statements run
 * inside ExecutorRun, ExecutorFinish or ProcessUtility of their caller,
 * which raise the nesting level, as pg_stat_statements does.
 */
static void
lq_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (lq_nesting == 0)
		lq_stmt_seq++;
	if (lq_prev_executor_start)
		lq_prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

static void
lq_executor_run(QueryDesc *queryDesc, ScanDirection direction, uint64 count,
				bool execute_once)
{
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_executor_run)
			lq_prev_executor_run(queryDesc, direction, count, execute_once);
		else
			standard_ExecutorRun(queryDesc, direction, count, execute_once);
	}
	PG_FINALLY();
	{
		lq_nesting--;
	}
	PG_END_TRY();
}

static void
lq_executor_finish(QueryDesc *queryDesc)
{
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_executor_finish)
			lq_prev_executor_finish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_FINALLY();
	{
		lq_nesting--;
	}
	PG_END_TRY();
}

static void
lq_executor_end(QueryDesc *queryDesc)
{
	if (lq_prev_executor_end)
		lq_prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	if (lq_nesting == 0)
		lq_stmt_done = lq_stmt_seq;
}

/*
 * lq_carry_floors raises the new installation's token and clock sequences
 * to the floors that survive the extension (the lock server's state file,
 * and shared memory), in the transaction of CREATE EXTENSION lockq (or of
 * ALTER EXTENSION lockq UPDATE).  The lock server continues above them
 * anyway; doing it here makes the floors part of what replicates with the
 * new installation, so that a standby promoted later never issues a token
 * again either.
 */
static void
lq_carry_floors(void)
{
	LqStateFile sf;
	int64		token_floor = 0;
	int64		clock_floor = 0;
	Datum		values[2];
	Oid			types[2] = {INT8OID, INT8OID};

	if (lq_statefile_read(&sf))
	{
		token_floor = sf.token_ceiling;
		clock_floor = sf.clock_ceiling;
	}
	if (lq_shared != NULL)
	{
		token_floor = Max(token_floor, (int64) pg_atomic_read_u64(&lq_shared->token_high));
		clock_floor = Max(clock_floor, lq_clock_ceiling());
	}
	if (token_floor <= 0 && clock_floor <= 0)
		return;
	values[0] = Int64GetDatum(Max(token_floor, 1));
	values[1] = Int64GetDatum(Max(clock_floor, 0));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(
							  "SELECT pg_catalog.setval('lockq.token_seq', $1)"
							  "  FROM lockq.token_seq"
							  " WHERE last_value OPERATOR(pg_catalog.<) $1;"
							  "SELECT pg_catalog.setval('lockq.clock_seq', $2)"
							  "  FROM lockq.clock_seq"
							  " WHERE last_value OPERATOR(pg_catalog.<) $2",
							  2, types, values, NULL, false, 0) < 0)
		elog(ERROR, "could not carry lockq's floors into the new installation");
	SPI_finish();
}

/*
 * lq_is_lockq_extension_stmt: is this CREATE EXTENSION lockq or ALTER
 * EXTENSION lockq UPDATE?
 */
static bool
lq_is_lockq_extension_stmt(Node *parsetree)
{
	if (IsA(parsetree, CreateExtensionStmt))
		return strcmp(((CreateExtensionStmt *) parsetree)->extname, "lockq") == 0;
	if (IsA(parsetree, AlterExtensionStmt))
		return strcmp(((AlterExtensionStmt *) parsetree)->extname, "lockq") == 0;
	return false;
}

/*
 * lq_process_utility counts top-level utility statements (CALL, DO, ...)
 * like the executor hooks, acts on DISCARD ALL (above), and carries the
 * floors into a new installation of the extension (lq_carry_floors).
 */
static void
lq_process_utility(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		top = (lq_nesting == 0);

	bool		dropping;

	lq_maint_check_utility(parsetree);
	dropping = IsA(parsetree, DropdbStmt) &&
		lq_let_database_go(((DropdbStmt *) parsetree)->dbname);
	if (top)
		lq_stmt_seq++;
	lq_nesting++;
	PG_TRY();
	{
		if (lq_prev_process_utility)
			lq_prev_process_utility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		lq_nesting--;
		if (dropping)
			pg_atomic_write_u32(&lq_shared->dropping_pid, 0);
	}
	PG_END_TRY();
	if (top)
		lq_stmt_done = lq_stmt_seq;

	if (lq_is_lockq_extension_stmt(parsetree))
		lq_carry_floors();

	if (IsA(parsetree, DiscardStmt) &&
		((DiscardStmt *) parsetree)->target == DISCARD_ALL)
		lq_call_release_session();
}

/*
 * lq_hooks_install chains lockq's utility and executor hooks (from
 * _PG_init, when preloaded).
 */
void
lq_hooks_install(void)
{
	lq_prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = lq_process_utility;
	lq_prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = lq_executor_start;
	lq_prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = lq_executor_run;
	lq_prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = lq_executor_finish;
	lq_prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = lq_executor_end;
}


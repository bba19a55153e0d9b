/*-------------------------------------------------------------------------
 *
 * lockq_guc.c
 *		lockq's settings (lockq.*): their variables and definitions.
 *
 * A leaf: it calls no other lockq module, and every module reads the
 * variables it needs through lockq_guc.h.  The README's configuration
 * table lists them with their units.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_guc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "lockq_guc.h"

/* The settings' variables (see lockq_guc.h). */
char	   *lockq_database = NULL;
int			lockq_max_ttl = 86400;
int			lockq_waiter_timeout = 10000;
int			lockq_max_waiters = 100000;
int			lockq_batch_size = 1024;
bool		lockq_synchronous_grants = false;
int			lockq_max_grace = 60;
int			lockq_max_unsettled_rate = 200;
int			lockq_grant_row_delay = 100;
int			lockq_spin_time = 300;
int			lockq_log_lease_ends = LOG;
int			lockq_session_locks_per_backend = 64;
int			lockq_table_lock_timeout = 2000;
int			lockq_fence_timeout = 10000;
int			lockq_max_owner_locks_per_role = 100000;
int			lockq_max_waiters_per_role = 10000;
int			lockq_max_session_locks_per_role = -1;
int			lockq_max_server_memory = 1024;
bool		lockq_namespace_privileges = false;
int			lockq_lock_servers = 1;

/* The levels lockq.log_lease_ends takes (off: never logged). */
static const struct config_enum_entry lq_log_levels[] = {
	{"off", 0, false},
	{"debug5", DEBUG5, false},
	{"debug4", DEBUG4, false},
	{"debug3", DEBUG3, false},
	{"debug2", DEBUG2, false},
	{"debug1", DEBUG1, false},
	{"info", INFO, false},
	{"notice", NOTICE, false},
	{"warning", WARNING, false},
	{"log", LOG, false},
	{NULL, 0, false}
};

/*
 * lq_guc_define defines the settings: those users may set always, those
 * the postmaster fixes only while preloading (they cannot be defined after
 * startup).  Never raises.
 */
void
lq_guc_define(void)
{
	DefineCustomIntVariable("lockq.max_ttl",
							"Sets the longest lease a grant may ask for.",
							"A ttl above this is rejected, not clamped.",
							&lockq_max_ttl,
							86400, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.waiter_timeout",
							"Sets how long a client-side waiter may go without a heartbeat before it is dropped from the queue.",
							"Also bounds the first lease of a grant handed to a client-side waiter until it confirms the grant.",
							&lockq_waiter_timeout,
							10000, 100, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_waiters",
							"Sets the most waiters that may be queued at once, over all locks.",
							NULL,
							&lockq_max_waiters,
							100000, 1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.batch_size",
							"Sets the most requests the lock server applies in one transaction.",
							NULL,
							&lockq_batch_size,
							1024, 1, LQ_MAX_BATCH_SIZE,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("lockq.synchronous_grants",
							 "Flushes every grant and renewal to WAL before it is returned.",
							 "Off: grants with a ttl up to lockq.max_grace may be returned before their flush (see doc/design/durability.md).",
							 &lockq_synchronous_grants,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_grace",
							"Sets the longest lease that may be returned before it is flushed to WAL.",
							"Grants and renewals with a longer ttl are always flushed first.  This bounds the grace period after a crash.",
							&lockq_max_grace,
							60, 0, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_unsettled_rate",
							"Sets how many locks per second may be made unsettled one at a time.",
							"Each costs a flush, and a crash delays only those locks.  Above this rate all locks are made unsettled together, and a crash delays every lock (see doc/design/durability.md, \"Unsettled locks\").  -1: always one at a time.",
							&lockq_max_unsettled_rate,
							200, -1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.spin_time",
							"Sets how long the lock server keeps looking for new requests, and a backend for its answer, before it sleeps, in microseconds.",
							"The lock server only while requests came that close together, a backend only while fewer processes spin than the server has CPUs (its affinity and its cgroup's CPU limit): a request that finds the lock server awake is taken without waking it, an answer that finds its backend awake costs no signal (see doc/design/shared-memory.md, \"The lock server's loop\").  0: both sleep at once.",
							&lockq_spin_time,
							300, 0, 1000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("lockq.log_lease_ends",
							 "Sets the level at which the lock server logs a grant that ended without its holder: a lease that expired, a forced release.",
							 "off: not logged.",
							 &lockq_log_lease_ends,
							 LOG, lq_log_levels,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.grant_row_delay",
							"Sets how long a leased grant on an unsettled lock may be kept without its lockq.owners row.",
							"A crash ends such a grant whether or not it has a row; once held this long it gets one, so that the crash leaves a record of it (see doc/design/leases.md, \"Grants without a row\").  0: every grant gets its row at once.",
							&lockq_grant_row_delay,
							100, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Superusers only: in postgresql.conf for the whole cluster, or per
	 * database or role (ALTER DATABASE ... SET).  Ordinary roles can neither
	 * turn it off for themselves nor pass it in their connection options.
	 */
	DefineCustomBoolVariable("lockq.namespace_privileges",
							 "Lets a role use only lock ids under prefixes granted to it.",
							 "Members of lockq_admin grant prefixes with lockq.lockq_grant(prefix, role).",
							 &lockq_namespace_privileges,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/*
	 * Per-role limits, for every role that lockq.role_limits does not set
	 * otherwise (see lockq_policy.c).
	 */
	DefineCustomIntVariable("lockq.max_owner_locks_per_role",
							"Sets the most locks with an owner one role may hold at once.",
							"A grant to a waiter that queued before the limit was reached is not refused.",
							&lockq_max_owner_locks_per_role,
							100000, 0, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_waiters_per_role",
							"Sets the most waiters one role may have queued at once, over all locks.",
							NULL,
							&lockq_max_waiters_per_role,
							10000, 0, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_session_locks_per_role",
							"Sets the most session-bound locks one role may hold at once.",
							"-1: a quarter of the room for them (lockq.session_locks_per_backend times max backends).",
							&lockq_max_session_locks_per_role,
							-1, -1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.max_server_memory",
							"Sets the most memory the lock server's lock state may use.",
							"Requests that would add a lock or a waiter are refused beyond it.",
							&lockq_max_server_memory,
							1024, 16, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.fence_timeout",
							"Sets how long after a grant ends a transaction fenced on it may hold its hand-off back.",
							"After that the lock server terminates the fencing transaction's session, so that its write cannot commit, and the lock passes on.",
							&lockq_fence_timeout,
							10000, 0, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.table_lock_timeout",
							"Sets how long a request waits while others lock lockq's own tables.",
							"The lock server never waits for a lock on its tables: while a conflicting lock is held (LOCK TABLE, VACUUM FULL, ALTER TABLE, an open DROP EXTENSION), requests that could write them fail with 55P03 after this long.",
							&lockq_table_lock_timeout,
							2000, 0, 600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;

	/* can't define PGC_POSTMASTER variables after startup */
	DefineCustomStringVariable("lockq.database",
							   "Sets the database in which the lock service runs.",
							   "lockq functions fail in every other database.",
							   &lockq_database,
							   "postgres",
							   PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.session_locks_per_backend",
							"Sets the room for session-bound locks in shared memory, per backend.",
							"Locks taken with owner NULL are kept in shared memory; the room is shared by all sessions, so one may hold more when others hold fewer.",
							&lockq_session_locks_per_backend,
							64, 1, 100000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lockq.lock_servers",
							"Sets the number of lock server processes; each serves the locks whose ids hash to it.",
							NULL,
							&lockq_lock_servers,
							1, 1, LQ_GUC_MAX_SERVERS,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
}

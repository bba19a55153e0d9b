/*-------------------------------------------------------------------------
 *
 * lockq.c
 *		Module entry point: defines the settings (lockq_guc.c), installs
 *		the shared-memory and backend hooks and registers the lock-server
 *		background worker.
 *
 * lockq only works when it is listed in shared_preload_libraries: the lock
 * server is a background worker and the request slots live in shared
 * memory, and both can only be set up by the postmaster.  Loaded any other
 * way the module defines its user-settable GUCs and every SQL function
 * refuses to run with a hint (see lq_call_check_available).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "lockq_hooks.h"
#include "lockq_fastpath.h"
#include "lockq_fault.h"
#include "lockq_guc.h"
#include "lockq_leases.h"
#include "lockq_session.h"
#include "lockq_shmem.h"
#include "lockq_worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init defines the GUCs and, when preloading, installs the shared-memory
 * hooks and registers the lock-server worker.  It never raises: a module
 * loaded too late simply stays unavailable.
 */
void
_PG_init(void)
{
	lq_guc_define();
	if (!process_shared_preload_libraries_in_progress)
		return;

	lq_fault_define_guc();
	MarkGUCPrefixReserved("lockq");

	lq_shmem_init_hooks();
	lq_session_init_hooks();
	lq_leases_init_hooks();
	lq_fastpath_init_hooks();
	lq_hooks_install();
	lq_worker_register();
}

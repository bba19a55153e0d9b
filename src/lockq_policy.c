/*-------------------------------------------------------------------------
 *
 * lockq_policy.c
 *		What a role may do, as administrators set it: per-role limits
 *		(lockq.role_limits over the lockq.max_*_per_role settings) and
 *		namespace privileges (lockq.namespaces, enforced when
 *		lockq.namespace_privileges is on).
 *
 * Both are small tables that members of lockq_admin write (directly or
 * through lockq_set_role_limits, lockq_grant and lockq_revoke).  A backend
 * reads them once and keeps them until they change: a statement trigger on
 * each table (lockq_policy_changed) sends a relcache invalidation for it,
 * which every backend's callback turns into "read again".
 *
 * The checks run in the backend, before a request reaches the lock server:
 * the limits travel with the request (the lock server counts and enforces,
 * lockq_rules.c); a lock id outside the role's namespaces is refused here.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_policy.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "lockq_guc.h"
#include "lockq_policy.h"
#include "lockq_session.h"

PG_FUNCTION_INFO_V1(lockq_policy_changed);
PG_FUNCTION_INFO_V1(lockq_role_limits);

/* A role's limits as lockq.role_limits sets them; -1: the setting's. */
typedef struct LqRoleLimits
{
	Oid			role;			/* hash key, must be first */
	int32		max_owner_locks;
	int32		max_waiters;
	int32		max_session_locks;
} LqRoleLimits;

/* A namespace: lock ids starting with prefix, granted to role. */
typedef struct LqNamespace
{
	char	   *prefix;
	Oid			role;
} LqNamespace;

static MemoryContext lq_policy_cxt = NULL;
static bool lq_policy_valid = false;
static HTAB *lq_role_limits = NULL;
static List *lq_namespaces = NIL;
static Oid	lq_limits_relid = InvalidOid;
static Oid	lq_namespaces_relid = InvalidOid;

/*
 * lq_policy_inval forgets what was read when either table may have
 * changed (or on a full reset).
 */
static void
lq_policy_inval(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == lq_limits_relid ||
		relid == lq_namespaces_relid)
		lq_policy_valid = false;
}

/*
 * lq_policy_lock takes an AccessShareLock on relid without ever waiting
 * long for it: a transaction that holds a conflicting lock (an open DROP
 * EXTENSION, TRUNCATE, LOCK TABLE) must not stall every lockq call of every
 * session.  Tries again every 10 ms for lockq.table_lock_timeout, as the
 * lock server does for its own tables, then raises lock_not_available.
 */
static void
lq_policy_lock(Oid relid)
{
	TimestampTz start = GetCurrentTimestamp();

	while (!ConditionalLockRelationOid(relid, AccessShareLock))
	{
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(),
									   lockq_table_lock_timeout))
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("lockq could not lock its tables within lockq.table_lock_timeout"),
					 errdetail("Another transaction holds a conflicting lock on relation \"%s.%s\".",
							   LQ_SCHEMA, get_rel_name(relid)),
					 errhint("An open DROP EXTENSION, TRUNCATE, ALTER TABLE or LOCK TABLE on lockq's tables stops every lockq call until it ends.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * lq_policy_scan calls fn for every row of relid (in lockq's schema, read
 * directly: every role's checks need them, whatever its privileges), as
 * the latest committed data has it (not the transaction's snapshot, which
 * in a repeatable read transaction would keep what an invalidation says
 * has changed).  No such table (lockq 1.0's SQL objects): no rows.
 */
static void
lq_policy_scan(Oid relid, void (*fn) (Datum *values, bool *nulls))
{
	Relation	rel;
	TableScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	Datum		values[4];
	bool		nulls[4];

	if (!OidIsValid(relid))
		return;
	lq_policy_lock(relid);
	rel = table_open(relid, NoLock);
	if (RelationGetDescr(rel)->natts > lengthof(values))
		elog(ERROR, "unexpected columns in \"%s\"", RelationGetRelationName(rel));
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		heap_deform_tuple(tup, RelationGetDescr(rel), values, nulls);
		fn(values, nulls);
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
}

/* One row of lockq.role_limits (role, max_owner_locks, max_waiters, max_session_locks). */
static void
lq_policy_limits_row(Datum *values, bool *nulls)
{
	Oid			role = DatumGetObjectId(values[0]);
	LqRoleLimits *l = hash_search(lq_role_limits, &role, HASH_ENTER, NULL);

	l->max_owner_locks = nulls[1] ? -1 : DatumGetInt32(values[1]);
	l->max_waiters = nulls[2] ? -1 : DatumGetInt32(values[2]);
	l->max_session_locks = nulls[3] ? -1 : DatumGetInt32(values[3]);
}

/* One row of lockq.namespaces (prefix, role). */
static void
lq_policy_namespace_row(Datum *values, bool *nulls)
{
	MemoryContext old = MemoryContextSwitchTo(lq_policy_cxt);
	LqNamespace *ns = palloc(sizeof(LqNamespace));

	ns->prefix = TextDatumGetCString(values[0]);
	ns->role = DatumGetObjectId(values[1]);
	lq_namespaces = lappend(lq_namespaces, ns);
	MemoryContextSwitchTo(old);
}

/*
 * lq_policy_load reads both tables into this backend's memory.  It marks
 * them read first: an invalidation that arrives while they are read (when
 * the tables are opened) marks them stale again.
 */
static void
lq_policy_load(void)
{
	static bool callback_registered = false;
	HASHCTL		ctl;
	Oid			nsp = get_namespace_oid(LQ_SCHEMA, true);

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(lq_policy_inval, (Datum) 0);
		callback_registered = true;
	}
	if (lq_policy_cxt == NULL)
		lq_policy_cxt = AllocSetContextCreate(TopMemoryContext, "lockq policy",
											  ALLOCSET_SMALL_SIZES);
	lq_policy_valid = true;
	MemoryContextReset(lq_policy_cxt);
	lq_namespaces = NIL;
	lq_limits_relid = get_relname_relid("role_limits", nsp);
	lq_namespaces_relid = get_relname_relid("namespaces", nsp);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LqRoleLimits);
	ctl.hcxt = lq_policy_cxt;
	lq_role_limits = hash_create("lockq role limits", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	PG_TRY();
	{
		lq_policy_scan(lq_limits_relid, lq_policy_limits_row);
		lq_policy_scan(lq_namespaces_relid, lq_policy_namespace_row);
	}
	PG_CATCH();
	{
		lq_policy_valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

static void
lq_policy_ensure(void)
{
	if (!lq_policy_valid)
		lq_policy_load();
}

/*
 * lq_policy_limits fills in the limits that apply to role: its row in
 * lockq.role_limits where it sets them, else the settings.
 */
void
lq_policy_limits(Oid role, LqRequest *req)
{
	LqRoleLimits *l;

	lq_policy_ensure();
	l = hash_search(lq_role_limits, &role, HASH_FIND, NULL);
	req->max_owner_locks = (l && l->max_owner_locks >= 0) ?
		l->max_owner_locks : lockq_max_owner_locks_per_role;
	req->max_waiters = (l && l->max_waiters >= 0) ?
		l->max_waiters : lockq_max_waiters_per_role;
	if (l && l->max_session_locks >= 0)
		req->max_session_locks = l->max_session_locks;
	else
		req->max_session_locks = lockq_max_session_locks_per_role >= 0 ?
			lockq_max_session_locks_per_role : lq_session_max() / 4;
}

/*
 * lq_policy_default_session_limit: does role's limit of session-bound
 * locks come from the default (lockq.max_session_locks_per_role = -1, no
 * row of its own)?  Only then may its sessions take locks on the fast path
 * (lockq_fastpath.c), whose grants the lock server counts only once it
 * adopts them.
 */
bool
lq_policy_default_session_limit(Oid role)
{
	LqRoleLimits *l;

	if (lockq_max_session_locks_per_role >= 0)
		return false;
	lq_policy_ensure();
	l = hash_search(lq_role_limits, &role, HASH_FIND, NULL);
	return l == NULL || l->max_session_locks < 0;
}

/*
 * lq_policy_may_use: may role take, queue for or fence lock_id?  Always,
 * unless lockq.namespace_privileges is on; then only an administrator, or
 * a role that has the privileges of a role granted a prefix of lock_id.
 */
bool
lq_policy_may_use(const char *lock_id, Oid role, bool admin)
{
	ListCell   *lc;

	if (!lockq_namespace_privileges || admin)
		return true;
	lq_policy_ensure();
	foreach(lc, lq_namespaces)
	{
		LqNamespace *ns = lfirst(lc);

		if (strncmp(lock_id, ns->prefix, strlen(ns->prefix)) == 0 &&
			has_privs_of_role(role, ns->role))
			return true;
	}
	return false;
}

/*
 * lq_policy_check_use raises insufficient_privilege unless role may use
 * lock_id (lq_policy_may_use).
 */
void
lq_policy_check_use(const char *lock_id, Oid role, bool admin)
{
	if (!lq_policy_may_use(lock_id, role, admin))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for lock \"%s\"", lock_id),
				 errhint("With lockq.namespace_privileges on, a role may use only lock ids under prefixes granted to it with lockq.lockq_grant(prefix, role) by a member of %s.",
						 LQ_ADMIN_ROLE)));
}

/*
 * lockq_policy_changed is the statement trigger on lockq.role_limits and
 * lockq.namespaces: every backend reads them again (see the top).
 */
Datum
lockq_policy_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "lockq_policy_changed: not called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}

/*
 * lockq_role_limits(role) returns the limits that apply to role now, as
 * this session sees them (lockq_role_usage shows them).
 */
Datum
lockq_role_limits(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	TupleDesc	desc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	lq_policy_limits(PG_GETARG_OID(0), &req);
	values[0] = Int32GetDatum(req.max_owner_locks);
	values[1] = Int32GetDatum(req.max_waiters);
	values[2] = Int32GetDatum(req.max_session_locks);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

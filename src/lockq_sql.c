/*-------------------------------------------------------------------------
 *
 * lockq_sql.c
 *		The SQL-callable functions of the lock service (lockq_get,
 *		lockq_try, lockq_release, lockq_renew, lockq_holds, lockq_enqueue,
 *		lockq_heartbeat, lockq_await, lockq_cancel, lockq_force_release,
 *		lockq_session_owner, lockq_now): their argument checks, and the
 *		answer turned into a result or an error.
 *
 * Bad input is rejected here, before anything is shared with the lock
 * server.  The request then goes to the lock server, or is answered by
 * this backend where it may (lockq_call.c); lockq_holds takes its fence
 * in lockq_fences.c.  The views' functions are in lockq_views.c, the
 * policy's in lockq_policy.c.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "lockq.h"
#include "lockq_call.h"
#include "lockq_clock.h"
#include "lockq_fences.h"
#include "lockq_guc.h"
#include "lockq_hooks.h"
#include "lockq_session.h"
#include "lockq_shmem.h"

PG_FUNCTION_INFO_V1(lockq_get);
PG_FUNCTION_INFO_V1(lockq_try);
PG_FUNCTION_INFO_V1(lockq_release);
PG_FUNCTION_INFO_V1(lockq_renew);
PG_FUNCTION_INFO_V1(lockq_holds);
PG_FUNCTION_INFO_V1(lockq_enqueue);
PG_FUNCTION_INFO_V1(lockq_heartbeat);
PG_FUNCTION_INFO_V1(lockq_await);
PG_FUNCTION_INFO_V1(lockq_cancel);
PG_FUNCTION_INFO_V1(lockq_force_release);
PG_FUNCTION_INFO_V1(lockq_session_owner);
PG_FUNCTION_INFO_V1(lockq_now);

/*
 * Argument helpers.  Each raises a clear error for bad input; nothing has
 * been shared with the worker at that point.
 */
static void
lq_arg_string(FunctionCallInfo fcinfo, int argno, const char *what,
			  int maxlen, char *out)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));

	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The %s is %d bytes long; the limit is %d bytes.",
						   what, len, maxlen)));
	memcpy(out, VARDATA_ANY(t), len);
	out[len] = '\0';
}

static void
lq_arg_lock_id(FunctionCallInfo fcinfo, int argno, LqRequest *req)
{
	lq_arg_string(fcinfo, argno, "lock id", LQ_MAX_ID_LEN, req->lock_id);
}

/*
 * lq_arg_owner reads the owner argument.  NULL means the calling session
 * (unless required is set); a name in the session namespace is refused so
 * that nobody can act as another session.
 */
static void
lq_arg_owner(FunctionCallInfo fcinfo, int argno, LqRequest *req, bool required)
{
	if (PG_ARGISNULL(argno) && !required)
	{
		lq_session_format_owner(req->owner, sizeof(req->owner), MyProcPid,
								MyStartTimestamp);
		req->session_owner = true;
		return;
	}
	lq_arg_string(fcinfo, argno, "owner", LQ_MAX_OWNER_LEN, req->owner);
	if (strncmp(req->owner, LQ_SESSION_PREFIX, strlen(LQ_SESSION_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("owner names starting with \"%s\" are reserved",
						LQ_SESSION_PREFIX),
				 errhint("Pass NULL as the owner to take a lock bound to this session.")));
	req->session_owner = false;
}

/*
 * lq_interval_us converts an interval to microseconds, counting a day as 24
 * hours and a month as 30 days, and raises on overflow.
 */
static int64
lq_interval_us(const Interval *iv, const char *what)
{
	int64		us;
	int64		part;

	if (pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH * USECS_PER_DAY, &us) ||
		pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &part) ||
		pg_add_s64_overflow(us, part, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", what)));
	return us;
}

static int64
lq_arg_ttl(FunctionCallInfo fcinfo, int argno)
{
	int64		us;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ttl must not be null")));
	us = lq_interval_us(PG_GETARG_INTERVAL_P(argno), "ttl");
	if (us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive")));
	if (us > (int64) lockq_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must not exceed %d seconds", lockq_max_ttl),
				 errhint("The limit is set by \"lockq.max_ttl\".")));
	return us;
}

/*
 * lq_arg_deadline reads a limit on a wait, an interval named what (positive,
 * at most 366 days), and returns the lockq time it ends at; NULL, or an
 * argument the function's SQL definition lacks (an older version's), gives
 * 0: no limit of its own.  hint, with the errors, says what NULL does.
 */
static int64
lq_arg_deadline(FunctionCallInfo fcinfo, int argno, const char *what,
				const char *hint)
{
	int64		us;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	us = lq_interval_us(PG_GETARG_INTERVAL_P(argno), what);
	if (us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errhint("%s", hint)));
	if (us > LQ_MAX_TIMEOUT_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not exceed 366 days", what),
				 errhint("%s", hint)));
	return lq_clock_peek() + us;
}

static void
lq_arg_token(FunctionCallInfo fcinfo, int argno, LqRequest *req)
{
	req->has_token = !PG_ARGISNULL(argno);
	req->token = req->has_token ? PG_GETARG_INT64(argno) : 0;
}

/*
 * lq_begin_request zeroes a request and fills in the operation and lock id.
 */
static void
lq_begin_request(LqRequest *req, LqOp op, FunctionCallInfo fcinfo)
{
	lq_call_check_available();
	memset(req, 0, sizeof(LqRequest));
	req->op = op;
	lq_arg_lock_id(fcinfo, 0, req);
}

/*
 * lq_bool_result returns the lock server's true or false answer to req,
 * or raises its error.
 */
static Datum
lq_bool_result(const LqRequest *req, const LqResult *res)
{
	lq_call_raise_if_error(req, res);
	PG_RETURN_BOOL(res->status == LQ_ST_TRUE);
}

/*
 * lq_note_session_grant records a session-bound grant this session holds
 * (for quick releases) and, if this call created it, that it belongs to
 * the current statement until the statement ends (lockq_hooks.c).
 */
static void
lq_note_session_grant(const LqRequest *req, const LqResult *res)
{
	lq_call_remember_grant(req->lock_id, res->token);
	if (res->fresh_grant)
		lq_hooks_note_fresh_grant(req->lock_id, res->token);
}

/*
 * lockq_get(lock_id, owner, ttl, timeout) waits in FIFO order for the lock
 * and returns the grant's fencing token.  Raises 55P03 on timeout.
 */
Datum
lockq_get(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_GET, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;
	req.deadline = lq_arg_deadline(fcinfo, 3, "timeout",
								   "Pass NULL to wait without a timeout, or use lockq_try not to wait.");

	if (!(req.session_owner && lq_call_take_fast(&req, &res)))
		res = lq_call(&req);
	if (res.status == LQ_ST_TIMEOUT)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not obtain lock \"%s\" within the timeout",
						req.lock_id),
				 lq_call_timeout_detail(&res)));
	lq_call_raise_if_error(&req, &res);
	Assert(res.status == LQ_ST_GRANTED);
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_try(lock_id, owner, ttl) takes the lock only if it is free and
 * nobody is queued (or the owner holds it already); NULL otherwise.
 */
Datum
lockq_try(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_TRY, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;

	if (!(req.session_owner && lq_call_take_fast(&req, &res)))
		res = lq_call(&req);
	lq_call_raise_if_error(&req, &res);
	if (res.status != LQ_ST_GRANTED)
	{
		lq_shmem_stat_add(LQ_STAT_FAILED_TRIES, 1);
		PG_RETURN_NULL();
	}
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_release(lock_id, owner, token) ends this owner's grant; false when
 * the owner does not hold it (or holds it under another token).
 */
Datum
lockq_release(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_RELEASE, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	lq_arg_token(fcinfo, 2, &req);

	if (req.session_owner ? lq_call_quick_release(&req) :
		lq_call_quick_release_leased(&req))
		PG_RETURN_BOOL(true);
	res = lq_call(&req);
	if (req.session_owner)
		lq_call_remember_grant(req.lock_id, 0);
	return lq_bool_result(&req, &res);
}

/*
 * lockq_renew(lock_id, owner, token, ttl) extends the lease to now + ttl
 * (the grant's own ttl when NULL); false when the grant is gone.
 */
Datum
lockq_renew(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_RENEW, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, false);
	lq_arg_token(fcinfo, 2, &req);
	if (!PG_ARGISNULL(3))
	{
		req.ttl_us = lq_arg_ttl(fcinfo, 3);
		req.has_ttl = true;
	}

	res = lq_call(&req);
	return lq_bool_result(&req, &res);
}

/*
 * lockq_holds(lock_id, token) is true while that grant is current.  When
 * true, and called by the grant's own role (or an administrator), it also
 * fences the grant until the transaction ends, so the grant cannot pass to
 * anyone else before then: a write fenced by lockq_holds commits before
 * the next holder is granted (lockq_fences.c).  Any other role learns
 * true or false, without a fence: it cannot hold another role's hand-off
 * back.  NULL or non-positive tokens are simply not held.
 */
Datum
lockq_holds(PG_FUNCTION_ARGS)
{
	char		lock_id[LQ_MAX_ID_LEN + 1];
	int64		token;

	lq_call_check_available();
	lq_arg_string(fcinfo, 0, "lock id", LQ_MAX_ID_LEN, lock_id);
	if (PG_ARGISNULL(1))
		PG_RETURN_BOOL(false);
	token = PG_GETARG_INT64(1);
	if (token <= 0)
		PG_RETURN_BOOL(false);

	/* the transaction's end ends the fence (lockq_hooks.c) */
	lq_hooks_watch_xact();
	PG_RETURN_BOOL(lq_fences_hold(lock_id, token));
}

/*
 * lockq_enqueue(lock_id, owner, ttl, channel, heartbeat, wait) queues a
 * client-side waiter without blocking: the token when the lock is granted
 * at once (or already held by this owner), NULL once queued.  The grant is
 * later announced by NOTIFY on channel; the waiter must call lockq_heartbeat
 * (or lockq_enqueue again) at least every heartbeat interval or it is
 * dropped.  With a wait (1.2), a queued waiter is then waited for here as
 * lockq_await does, for at most that long: the token if granted meanwhile.
 */
Datum
lockq_enqueue(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_ENQUEUE, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);
	req.ttl_us = lq_arg_ttl(fcinfo, 2);
	req.has_ttl = true;
	if (!PG_ARGISNULL(3))
		lq_arg_string(fcinfo, 3, "channel", LQ_MAX_CHANNEL_LEN, req.channel);
	if (PG_ARGISNULL(4))
		req.wait_ttl_us = (int64) lockq_waiter_timeout * 1000;
	else
	{
		req.wait_ttl_us = lq_interval_us(PG_GETARG_INTERVAL_P(4), "heartbeat");
		if (req.wait_ttl_us < 100 * 1000 ||
			req.wait_ttl_us > (int64) lockq_max_ttl * USECS_PER_SEC)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("heartbeat must be between 100 milliseconds and %d seconds",
							lockq_max_ttl),
					 errhint("The upper limit is set by \"lockq.max_ttl\".")));
	}
	/* 1.2: wait (the SQL definition of 1.1 has no such argument) */
	req.deadline = lq_arg_deadline(fcinfo, 5, "wait",
								   "Pass NULL not to wait; a wait ends at the heartbeat interval at the latest.");

	res = lq_call(&req);
	lq_call_raise_if_error(&req, &res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_heartbeat(lock_id, owner) keeps a client-side wait alive: NULL while
 * queued, the token once granted (which also confirms the grant and starts
 * its full lease).  Raises 55000 when the owner neither waits nor holds.
 */
Datum
lockq_heartbeat(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_HEARTBEAT, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);

	res = lq_call(&req);
	lq_call_raise_if_error(&req, &res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	if (req.session_owner)
		lq_note_session_grant(&req, &res);
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_await(lock_id, owner, timeout) waits in this backend for a
 * client-side waiter (lockq_enqueue) to be granted: the token as soon as
 * it is (with its full lease, no NOTIFY sent), NULL when timeout (at most
 * the waiter's heartbeat interval) passes first; the waiter keeps its
 * place either way, and each call counts as a heartbeat.  A cancel or a
 * lost connection leaves the waiter queued.  Raises 55000 when the owner
 * neither waits nor holds, or stops waiting meanwhile (lockq_cancel).
 */
Datum
lockq_await(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_AWAIT, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);
	req.deadline = lq_arg_deadline(fcinfo, 2, "timeout",
								   "Pass NULL to wait up to the heartbeat interval.");

	res = lq_call(&req);
	lq_call_raise_if_error(&req, &res);
	if (res.status != LQ_ST_GRANTED)
		PG_RETURN_NULL();
	PG_RETURN_INT64(res.token);
}

/*
 * lockq_cancel(lock_id, owner) withdraws a client-side waiter: it leaves the
 * queue, or, if the lock was granted to it meanwhile, the grant is released
 * and passes on.  True when there was something to withdraw.
 */
Datum
lockq_cancel(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_CANCEL, fcinfo);
	lq_arg_owner(fcinfo, 1, &req, true);

	res = lq_call(&req);
	return lq_bool_result(&req, &res);
}

/*
 * lockq_force_release(lock_id) ends whatever grant the lock has, as an
 * administrator's last resort.  EXECUTE is revoked from PUBLIC.
 */
Datum
lockq_force_release(PG_FUNCTION_ARGS)
{
	LqRequest	req;
	LqResult	res;

	lq_begin_request(&req, LQ_OP_FORCE_RELEASE, fcinfo);

	res = lq_call(&req);
	return lq_bool_result(&req, &res);
}

/*
 * lockq_session_owner() returns the owner name this session's locks taken
 * with owner NULL appear under.
 */
Datum
lockq_session_owner(PG_FUNCTION_ARGS)
{
	char		buf[LQ_MAX_OWNER_LEN + 1];

	lq_session_format_owner(buf, sizeof(buf), MyProcPid, MyStartTimestamp);
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}

/*
 * lockq_now() returns the lockq clock in microseconds since the Unix epoch.
 */
Datum
lockq_now(PG_FUNCTION_ARGS)
{
	lq_call_check_available();
	PG_RETURN_INT64(lq_call_now_handout());
}

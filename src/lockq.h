/*-------------------------------------------------------------------------
 *
 * lockq.h
 *		lockq's shared vocabulary: limits, names, and the request and answer
 *		that pass between a backend and the lock server.
 *
 * lockq is a fair, durable, lease-based lock service that lives inside
 * PostgreSQL.  Each module has its own header with what others may use;
 * DESIGN.md ("The modules") says which calls which: backend (SQL
 * functions -> hooks -> fences -> the call) -> shared memory <- lock
 * server; inside the lock server, worker -> rules -> outbox, with tables,
 * durability, clock and settings as leaves.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_H
#define LOCKQ_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Documented input limits (bytes, not counting the terminating NUL). */
#define LQ_MAX_ID_LEN		255
#define LQ_MAX_OWNER_LEN	255
#define LQ_MAX_CHANNEL_LEN	63		/* NAMEDATALEN - 1: a NOTIFY channel */
#define LQ_ERRMSG_LEN		256

/* Owners of session-bound locks (owner NULL) are named with this prefix. */
#define LQ_SESSION_PREFIX	"session:"
/* Members of this role may act for any owner (see lockq--1.0.sql). */
#define LQ_ADMIN_ROLE		"lockq_admin"

/* The longest wait a lockq_get timeout may ask for: one year. */
#define LQ_MAX_TIMEOUT_US	(INT64CONST(366) * 24 * 3600 * 1000000)

/*
 * How far ahead of the clock the durable ceiling is kept, and the margin at
 * which the worker extends it.  Every value lockq_now() hands out is at most
 * the durable ceiling, so after a crash the clock resumes above it.
 */
#define LQ_CLOCK_RESERVE_US	(INT64CONST(5) * 1000000)
#define LQ_CLOCK_MARGIN_US	(INT64CONST(2500) * 1000)

/* Schema and relation names of the durable mirror. */
#define LQ_SCHEMA			"lockq"
#define LQ_OWNERS_TABLE		"owners"
#define LQ_OWNERS_PKEY		"owners_pkey"
#define LQ_QUEUE_TABLE		"queue"
#define LQ_TOKEN_SEQ		"token_seq"
#define LQ_CLOCK_SEQ		"clock_seq"
#define LQ_UNSETTLED_TABLE	"unsettled"

/* Operations a backend can ask of the worker. */
typedef enum LqOp
{
	LQ_OP_NONE = 0,
	LQ_OP_GET,					/* blocking acquire */
	LQ_OP_TRY,					/* non-blocking acquire */
	LQ_OP_RELEASE,
	LQ_OP_RENEW,
	LQ_OP_ENQUEUE,				/* client waiter: queue, do not block */
	LQ_OP_HEARTBEAT,			/* client waiter: keep the wait alive */
	LQ_OP_CANCEL,				/* client waiter: withdraw */
	LQ_OP_AWAIT,				/* client waiter: wait in a backend */
	LQ_OP_FORCE_RELEASE,		/* administrator: end any grant */
	LQ_OP_RELEASE_SESSION,		/* DISCARD ALL: end the session's
								 * session-bound grants */
	LQ_OP_CLOCK					/* extend the clock's durable ceiling */
} LqOp;

/* Outcome of a request, filled in by the worker. */
typedef enum LqStatus
{
	LQ_ST_NONE = 0,
	LQ_ST_GRANTED,				/* token is valid */
	LQ_ST_QUEUED,				/* client waiter is queued */
	LQ_ST_NOT_AVAILABLE,		/* lockq_try: someone else has it */
	LQ_ST_TIMEOUT,				/* lockq_get: timeout expired */
	LQ_ST_TRUE,
	LQ_ST_FALSE,
	LQ_ST_OK,
	LQ_ST_ERROR					/* error says which */
} LqStatus;

/*
 * What went wrong with a request (LqResult.error).  The lock server sends
 * the code and the values its message needs, never a message: the backend
 * raises the error itself, with a literal message, in its own language
 * and encoding (lq_call_raise_if_error, lockq_call.c).  The lock id and the
 * owner a message names are the request's.
 */
typedef enum LqError
{
	LQ_ERR_NONE = 0,

	/* With LQ_ST_ERROR, from the lock server's rules (lockq_rules.c). */
	LQ_ERR_OTHER_ROLE,			/* the owner's grant or wait is another
								 * role's */
	LQ_ERR_NO_SESSION_ROOM,		/* the table of session-bound grants is full;
								 * arg: lockq.session_locks_per_backend */
	LQ_ERR_SERVER_MEMORY,		/* lockq.max_server_memory is reached */
	LQ_ERR_TOO_MANY_WAITERS,	/* lockq.max_waiters is reached */
	LQ_ERR_ROLE_OWNER_LOCKS,	/* the role's limit (arg) on grants with an
								 * owner is reached */
	LQ_ERR_ROLE_SESSION_LOCKS,	/* ...on session-bound grants */
	LQ_ERR_ROLE_WAITERS,		/* ...on waiters */
	LQ_ERR_ALREADY_WAITING,		/* lockq_get: the owner waits already */
	LQ_ERR_ALREADY_WAITING_IN_BACKEND,	/* lockq_enqueue: the owner waits
										 * already, in a lockq_get */
	LQ_ERR_WAITING_IN_BACKEND,	/* the owner waits in a lockq_get, not
								 * client-side */
	LQ_ERR_NOT_WAITING,			/* the owner neither waits nor holds */
	LQ_ERR_NO_LONGER_WAITING,	/* the waiter a lockq_await waited for is
								 * gone */
	LQ_ERR_INVALID_REQUEST,		/* an operation the lock server does not
								 * know */

	/* With LQ_ST_ERROR, from the lock server's loop (lockq_worker.c). */
	LQ_ERR_TABLES_LOCKED,		/* lockq's tables stayed locked for
								 * lockq.table_lock_timeout; message: the
								 * relation, arg: the holder's pid or 0 */
	LQ_ERR_NOT_INSTALLED,		/* no extension in the lock server's
								 * database */
	LQ_ERR_LOAD_FAILED,			/* the lock server cannot load its state;
								 * sqlerrcode, message, hint: the error it
								 * got */
	LQ_ERR_FAILED,				/* applying the request keeps failing;
								 * sqlerrcode, message, hint: the error */

	/*
	 * With LQ_ST_TIMEOUT, when a backend ended a wait at its limit itself,
	 * without the lock server's answer (lockq_call.c, lq_give_up).
	 */
	LQ_ERR_SERVER_NOT_RUNNING,	/* no lock server runs */
	LQ_ERR_SERVER_FLUSHING,		/* it waits for a flush; arg: since how
								 * long (µs) */
	LQ_ERR_SERVER_BUSY			/* no answer; message: what it is doing */
} LqError;

/*
 * lockq_holds' answer from one of the places that keep grants
 * (lq_session_holds, lq_leases_fence, lq_tables_holds).
 */
typedef enum LqHeld
{
	LQ_HELD_UNKNOWN = -1,		/* not a grant kept here: ask the next place */
	LQ_HELD_NO = 0,				/* not current at that time */
	LQ_HELD_FENCED,				/* current; this transaction is now fenced
								 * on it until it ends */
	LQ_HELD_UNFENCED			/* current, but the role may not fence it */
} LqHeld;

typedef struct LqRequest
{
	LqOp		op;
	bool		session_owner;	/* owner was NULL: bound to the session */
	bool		has_token;
	bool		has_ttl;
	int64		token;
	int64		ttl_us;			/* lease length */
	int64		deadline;		/* lockq_get: absolute lockq time, 0 = never */
	int64		wait_ttl_us;	/* client waiter: heartbeat interval bound */
	Oid			role;			/* role that made the request */
	bool		admin;			/* role is a member of lockq_admin (or a
								 * superuser): may act for any owner */
	int32		max_owner_locks;	/* the limits that apply to role, as */
	int32		max_waiters;	/* the requesting session sees them */
	int32		max_session_locks;	/* (lockq.max_*_per_role) */
	int32		server;			/* a request without a lock id
								 * (LQ_OP_RELEASE_SESSION, LQ_OP_CLOCK): the
								 * lock server it is for */
	char		lock_id[LQ_MAX_ID_LEN + 1];
	char		owner[LQ_MAX_OWNER_LEN + 1];
	char		channel[LQ_MAX_CHANNEL_LEN + 1];
} LqRequest;

typedef struct LqResult
{
	LqStatus	status;
	bool		fresh_grant;	/* this request created the grant */
	int64		token;
	LqError		error;			/* see LqError for the fields below */
	int64		arg;
	int			sqlerrcode;		/* an error the lock server got itself */
	char		message[LQ_ERRMSG_LEN]; /* ...its message (or a relation's
										 * name, what the lock server does) */
	char		hint[LQ_ERRMSG_LEN];	/* ...its hint; empty: none */
} LqResult;


#endif							/* LOCKQ_H */

/*-------------------------------------------------------------------------
 *
 * lockq_client_int.h
 *		liblockq internals shared with its tests, fuzzers and the lockq
 *		command: parsing of the lock server's NOTIFY payloads, how a client
 *		finds lockq's functions, and which versions of the extension it
 *		works with.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/lockq_client_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_CLIENT_INT_H
#define LOCKQ_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

/*
 * LOCKQC_SCHEMA_SQL: the schema of lockq's functions (a text column, NULL
 * when the extension is not installed).  1.1 keeps them in the schema
 * lockq, 1.0 in the schema it was created in (pg_extension.extnamespace):
 * rather than assume, ask where lockq_get is.  Every name is qualified and every operator
 * spelled OPERATOR(pg_catalog.=): nothing on the search_path can step in.
 */
#define LOCKQC_SCHEMA_SQL \
	"(SELECT n.nspname FROM pg_catalog.pg_extension e" \
	"   JOIN pg_catalog.pg_depend d" \
	"     ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" \
	"    AND d.refobjid OPERATOR(pg_catalog.=) e.oid" \
	"    AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass" \
	"    AND d.deptype OPERATOR(pg_catalog.=) 'e'" \
	"   JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid" \
	"   JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace" \
	"  WHERE e.extname OPERATOR(pg_catalog.=) 'lockq'" \
	"    AND p.proname OPERATOR(pg_catalog.=) 'lockq_get')"

/*
 * LOCKQC_EXTVERSION_SQL: the installed version of the extension (a text
 * column, NULL when it is not installed).
 */
#define LOCKQC_EXTVERSION_SQL \
	"(SELECT e.extversion FROM pg_catalog.pg_extension e" \
	"  WHERE e.extname OPERATOR(pg_catalog.=) 'lockq')"

/*
 * The oldest version of the extension whose SQL API liblockq and the lockq
 * command rely on.  Raise it when they start to use something a version
 * adds; it is not lockq's own version (LOCKQ_VERSION): a newer client works
 * with any extension from this one on.
 */
#define LOCKQC_MIN_EXTVERSION "1.1"

/*
 * lockqc_check_extversion: NULL if installed (an extversion) is at least
 * LOCKQC_MIN_EXTVERSION, else (also when it cannot be read as
 * MAJOR.MINOR) writes into msg, of size len, what is wrong and how to fix
 * it, and returns msg.
 */
extern const char *lockqc_check_extversion(const char *installed, char *msg,
										   size_t len);

typedef enum lockqc_event
{
	LOCKQC_EV_GRANT,			/* the lock was granted to this waiter */
	LOCKQC_EV_LOST,				/* this owner's grant ended */
	LOCKQC_EV_DROPPED			/* this waiter left the queue */
} lockqc_event;

/* A parsed payload; lock_id and owner point into the payload. */
typedef struct lockqc_notice
{
	lockqc_event event;
	int64_t		token;
	const char *lock_id;
	size_t		lock_len;
	const char *owner;
	size_t		owner_len;
} lockqc_notice;

/*
 * Parses "<event> <token> <length of lock id> <lock id> <owner>".  Returns
 * 0 on success, -1 when the payload is malformed.
 */
extern int	lockqc_parse_notice(const char *payload, lockqc_notice *out);

#endif							/* LOCKQ_CLIENT_INT_H */

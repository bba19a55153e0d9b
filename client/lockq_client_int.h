/*-------------------------------------------------------------------------
 *
 * lockq_client_int.h
 *		liblockq internals shared with its tests and fuzzers: parsing of
 *		the lock server's NOTIFY payloads.
 *
 * Copyright (c) 2026, lockq developers
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

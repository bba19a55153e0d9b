/*-------------------------------------------------------------------------
 *
 * fuzz_notify.c
 *		libFuzzer target for lockqc_parse_notice, liblockq's parser of the
 *		lock server's NOTIFY payloads (called by lqc_dispatch for every
 *		notification on the connection's channel).  Anyone who may NOTIFY
 *		can send that channel anything, so the payload is untrusted.
 *
 * Each input is used twice.
 *
 * 1. As a raw payload, in a buffer of exactly its length plus the NUL
 *    (AddressSanitizer catches any read past the end).  The result must
 *    agree with an independent reference parser of
 *    "<event> <token> <length of lock id> <lock id> <owner>": event one of
 *    grant, lost, dropped; token a decimal in 0..INT64_MAX; length a
 *    decimal in 1..255; then exactly that many bytes of lock id (spaces
 *    allowed), one space, and an owner of 1..255 bytes running to the end
 *    of the payload.  When accepted, the lock id and the owner must lie
 *    inside the payload, the lock id be followed by a space, and the owner
 *    end exactly at the terminator.
 *
 * 2. As a description of a notice (event, token, lock id and owner bytes
 *    of lengths 0..300) formatted exactly as the server formats it
 *    (lq_worker_notify: "%s " INT64_FORMAT " %d %s %s").  The parser must
 *    give back exactly those fields when both lengths are within 1..255
 *    (the server's limits), and reject the payload otherwise.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/fuzz/fuzz_notify.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdbool.h>

#include "lockq_client_int.h"
#include "fuzz_common.h"

#define MAX_NAME	255

static const char *const event_names[] = {"grant", "lost", "dropped"};
static const lockqc_event event_codes[] = {LOCKQC_EV_GRANT, LOCKQC_EV_LOST, LOCKQC_EV_DROPPED};

/*
 * ref_number reads a decimal at *pp (at least one digit, leading zeros
 * allowed) no greater than max.
 */
static bool
ref_number(const char **pp, uint64_t max, uint64_t *out)
{
	const char *p = *pp;
	uint64_t	v = 0;

	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++)
	{
		unsigned	d = (unsigned) (*p - '0');

		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*pp = p;
	*out = v;
	return true;
}

/* ref_parse is the reference parser; true when s is a valid payload. */
static bool
ref_parse(const char *s, lockqc_notice *out)
{
	const char *p = s;
	const char *space = strchr(s, ' ');
	uint64_t	token;
	uint64_t	len;
	size_t		i;
	size_t		rest;
	bool		found = false;

	if (space == NULL)
		return false;
	for (i = 0; i < 3; i++)
	{
		if ((size_t) (space - s) == strlen(event_names[i]) &&
			memcmp(s, event_names[i], (size_t) (space - s)) == 0)
		{
			out->event = event_codes[i];
			found = true;
		}
	}
	if (!found)
		return false;
	p = space + 1;
	if (!ref_number(&p, INT64_MAX, &token) || *p != ' ')
		return false;
	p++;
	if (!ref_number(&p, MAX_NAME, &len) || len == 0 || *p != ' ')
		return false;
	p++;
	rest = strlen(p);
	if (rest < len + 2 || p[len] != ' ' || rest - len - 1 > MAX_NAME)
		return false;
	out->token = (int64_t) token;
	out->lock_id = p;
	out->lock_len = len;
	out->owner = p + len + 1;
	out->owner_len = rest - len - 1;
	return true;
}

/* check_raw parses the input as a payload and compares with the reference. */
static void
check_raw(const uint8_t *data, size_t size)
{
	char	   *payload = lqf_cstring(data, size);
	size_t		plen = strlen(payload);
	lockqc_notice got;
	lockqc_notice want;
	int			rc;
	bool		ok;

	memset(&got, 0, sizeof(got));
	rc = lockqc_parse_notice(payload, &got);
	ok = ref_parse(payload, &want);
	lqf_check(rc == 0 || rc == -1, "rc %d", rc);
	lqf_check((rc == 0) == ok, "\"%s\": parser says %d, reference says %s",
			  payload, rc, ok ? "valid" : "invalid");
	if (rc == 0)
	{
		lqf_check(got.lock_id > payload && got.lock_id + got.lock_len < payload + plen,
				  "\"%s\": lock id outside the payload", payload);
		lqf_check(got.lock_id[got.lock_len] == ' ', "\"%s\": no space after the lock id", payload);
		lqf_check(got.owner == got.lock_id + got.lock_len + 1 &&
				  got.owner + got.owner_len == payload + plen,
				  "\"%s\": owner does not run to the end of the payload", payload);
		lqf_check(got.lock_len >= 1 && got.lock_len <= MAX_NAME &&
				  got.owner_len >= 1 && got.owner_len <= MAX_NAME,
				  "\"%s\": lengths %zu and %zu", payload, got.lock_len, got.owner_len);
		lqf_check(got.event == want.event && got.token == want.token &&
				  got.lock_id == want.lock_id && got.lock_len == want.lock_len &&
				  got.owner == want.owner && got.owner_len == want.owner_len,
				  "\"%s\": parser and reference disagree (token %" PRId64 " vs %" PRId64 ")",
				  payload, got.token, want.token);
	}
	free(payload);
}

/* fill takes len bytes for a name from b; NUL bytes (impossible in text) become '_' */
static void
fill(lqf_bytes *b, char *dst, size_t len)
{
	size_t		i;

	for (i = 0; i < len; i++)
	{
		dst[i] = (char) lqf_u8(b);
		if (dst[i] == '\0')
			dst[i] = '_';
	}
	dst[len] = '\0';
}

/* check_formatted builds a payload as the server does and parses it back. */
static void
check_formatted(const uint8_t *data, size_t size)
{
	lqf_bytes	b = {data, size};
	int			ev = lqf_u8(&b) % 3;
	int64_t		token = (int64_t) (lqf_u64(&b) & (uint64_t) INT64_MAX);
	size_t		lock_len = lqf_u8(&b) + (lqf_u8(&b) % 46);	/* 0..300 */
	size_t		owner_len = lqf_u8(&b) + (lqf_u8(&b) % 46);
	char		lock_id[301];
	char		owner[301];
	char	   *payload;
	size_t		plen;
	lockqc_notice got;
	int			rc;
	bool		valid;

	fill(&b, lock_id, lock_len);
	fill(&b, owner, owner_len);
	plen = (size_t) snprintf(NULL, 0, "%s %" PRId64 " %d %s %s", event_names[ev], token,
							 (int) lock_len, lock_id, owner);
	payload = malloc(plen + 1);
	if (payload == NULL)
		abort();
	snprintf(payload, plen + 1, "%s %" PRId64 " %d %s %s", event_names[ev], token,
			 (int) lock_len, lock_id, owner);

	rc = lockqc_parse_notice(payload, &got);
	valid = lock_len >= 1 && lock_len <= MAX_NAME && owner_len >= 1 && owner_len <= MAX_NAME;
	lqf_check((rc == 0) == valid, "\"%s\" (lock id %zu bytes, owner %zu bytes): rc %d",
			  payload, lock_len, owner_len, rc);
	if (rc == 0)
		lqf_check(got.event == event_codes[ev] && got.token == token &&
				  got.lock_len == lock_len && memcmp(got.lock_id, lock_id, lock_len) == 0 &&
				  got.owner_len == owner_len && memcmp(got.owner, owner, owner_len) == 0,
				  "\"%s\": fields not given back (token %" PRId64 ", want %" PRId64 ")",
				  payload, got.token, token);
	free(payload);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_raw(data, size);
	check_formatted(data, size);
	return 0;
}

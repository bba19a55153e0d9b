/*-------------------------------------------------------------------------
 *
 * fuzz_duration.c
 *		libFuzzer target for lockqc_parse_duration, the duration parser of
 *		liblockq's public API and of every duration option of the lockq
 *		CLI (--ttl, --timeout, --grace).
 *
 * Beyond "no crash, no undefined behaviour", every input is checked
 * against an independent reference parser that uses exact integer
 * arithmetic (no floating point):
 *	- the grammar: digits [ "." digits ] with at least one digit, then
 *	  nothing (seconds), "ms", "s", "m" or "h"; nothing else is accepted
 *	  (no sign, no spaces, no exponent);
 *	- the range: accepted exactly when the value is at most ten years
 *	  (366-day years), except within 1 us of that bound, where the
 *	  library's floating point may go either way;
 *	- the value: an accepted duration is non-negative and is the exact
 *	  value in milliseconds rounded to the nearest integer (either
 *	  neighbour when the exact value is within 1 us of a half);
 *	- "-" followed by an accepted duration is rejected (never negative).
 * And round trips: for the parsed value and for a value taken from the
 * input's first 8 bytes, "<ms>ms", "<s>.<ms>s", "<s>.<ms>" and, where
 * the value divides evenly, "<s>s", "<s>", "<m>m" and "<h>h" all parse
 * back to exactly that value.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/fuzz/fuzz_duration.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdbool.h>

#include "lockq_client.h"
#include "fuzz_common.h"

/* ten years of 366 days, the library's upper bound */
#define LIMIT_MS	INT64_C(316224000000)

typedef unsigned __int128 u128;

typedef struct ref_duration
{
	bool		syntax_ok;		/* matches the grammar */
	bool		in_range;		/* exact value <= LIMIT_MS */
	bool		near_limit;		/* within 1 us of LIMIT_MS */
	int64_t		floor_ms;		/* exact value, rounded down */
	double		frac;			/* exact value minus floor_ms, in [0, 1) */
} ref_duration;

/*
 * ref_parse parses s with exact arithmetic: the value in milliseconds
 * times 10^k, where k is the number of fraction digits kept (at most 18;
 * further digits change the value by less than 4e-12 ms).
 */
static void
ref_parse(const char *s, ref_duration *r)
{
	const char *p = s;
	u128		ip = 0;
	bool		big = false;
	int			ndigits = 0;
	uint64_t	fnum = 0;
	int			k = 0;
	u128		pow10k = 1;
	u128		unit;
	u128		scaled;
	u128		limit_scaled;
	u128		rem;
	u128		tol;

	memset(r, 0, sizeof(*r));
	for (; *p >= '0' && *p <= '9'; p++, ndigits++)
	{
		if (!big)
		{
			ip = ip * 10 + (u128) (*p - '0');
			if (ip > (u128) 10000000000000ULL)
				big = true;
		}
	}
	if (*p == '.')
	{
		for (p++; *p >= '0' && *p <= '9'; p++, ndigits++)
		{
			if (k < 18)
			{
				fnum = fnum * 10 + (uint64_t) (*p - '0');
				pow10k *= 10;
				k++;
			}
		}
	}
	if (ndigits == 0)
		return;
	if (strcmp(p, "") == 0 || strcmp(p, "s") == 0)
		unit = 1000;
	else if (strcmp(p, "ms") == 0)
		unit = 1;
	else if (strcmp(p, "m") == 0)
		unit = 60000;
	else if (strcmp(p, "h") == 0)
		unit = 3600000;
	else
		return;
	r->syntax_ok = true;
	if (big)
		return;					/* at least 1e13 ms: far out of range */

	scaled = ip * unit * pow10k + (u128) fnum * unit;
	limit_scaled = (u128) LIMIT_MS * pow10k;
	tol = pow10k / 1000;		/* 1 us, scaled */
	r->in_range = scaled <= limit_scaled;
	r->near_limit = (scaled > limit_scaled ? scaled - limit_scaled
					 : limit_scaled - scaled) <= tol;
	r->floor_ms = (int64_t) (scaled / pow10k);
	rem = scaled % pow10k;
	r->frac = (double) rem / (double) pow10k;
}

/* parse_ok parses text, which must give exactly want. */
static void
expect_parse(const char *text, int64_t want)
{
	int64_t		got = -12345;
	int			rc = lockqc_parse_duration(text, &got);

	lqf_check(rc == 0 && got == want,
			  "\"%s\" gave rc %d, %" PRId64 " ms; expected %" PRId64 " ms",
			  text, rc, got, want);
}

/* round_trip formats ms in every unit that represents it exactly. */
static void
round_trip(int64_t ms)
{
	char		buf[64];

	snprintf(buf, sizeof(buf), "%" PRId64 "ms", ms);
	expect_parse(buf, ms);
	snprintf(buf, sizeof(buf), "%" PRId64 ".%03" PRId64 "s", ms / 1000, ms % 1000);
	expect_parse(buf, ms);
	snprintf(buf, sizeof(buf), "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000);
	expect_parse(buf, ms);
	if (ms % 1000 == 0)
	{
		snprintf(buf, sizeof(buf), "%" PRId64 "s", ms / 1000);
		expect_parse(buf, ms);
		snprintf(buf, sizeof(buf), "%" PRId64, ms / 1000);
		expect_parse(buf, ms);
	}
	if (ms % 60000 == 0)
	{
		snprintf(buf, sizeof(buf), "%" PRId64 "m", ms / 60000);
		expect_parse(buf, ms);
	}
	if (ms % 3600000 == 0)
	{
		snprintf(buf, sizeof(buf), "%" PRId64 "h", ms / 3600000);
		expect_parse(buf, ms);
	}
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *s = lqf_cstring(data, size);
	int64_t		ms = -12345;
	int			rc;
	ref_duration ref;
	lqf_bytes	b = {data, size};

	rc = lockqc_parse_duration(s, &ms);
	lqf_check(rc == 0 || rc == -1, "\"%s\": rc %d", s, rc);
	ref_parse(s, &ref);

	if (!ref.syntax_ok)
		lqf_check(rc == -1, "\"%s\" is not a duration but gave %" PRId64 " ms", s, ms);
	else if (!ref.near_limit)
		lqf_check((rc == 0) == ref.in_range,
				  "\"%s\": rc %d, but the value is %s ten years", s, rc,
				  ref.in_range ? "within" : "beyond");

	if (rc == 0)
	{
		char	   *neg;

		lqf_check(ms >= 0 && ms <= LIMIT_MS, "\"%s\" gave %" PRId64 " ms", s, ms);
		if (ref.frac < 0.5 - 1e-3)
			lqf_check(ms == ref.floor_ms, "\"%s\" gave %" PRId64 " ms, exact %" PRId64 "+%.6f",
					  s, ms, ref.floor_ms, ref.frac);
		else if (ref.frac > 0.5 + 1e-3)
			lqf_check(ms == ref.floor_ms + 1, "\"%s\" gave %" PRId64 " ms, exact %" PRId64 "+%.6f",
					  s, ms, ref.floor_ms, ref.frac);
		else
			lqf_check(ms == ref.floor_ms || ms == ref.floor_ms + 1,
					  "\"%s\" gave %" PRId64 " ms, exact %" PRId64 "+%.6f",
					  s, ms, ref.floor_ms, ref.frac);
		round_trip(ms);

		neg = malloc(strlen(s) + 2);
		if (neg == NULL)
			abort();
		neg[0] = '-';
		strcpy(neg + 1, s);
		lqf_check(lockqc_parse_duration(neg, &ms) == -1, "\"%s\" was accepted", neg);
		free(neg);
	}
	free(s);

	/* a value from the first 8 bytes, in range, formatted and parsed back */
	round_trip((int64_t) (lqf_u64(&b) % (uint64_t) (LIMIT_MS + 1)));
	return 0;
}

/*-------------------------------------------------------------------------
 *
 * fuzz_common.h
 *		Helpers shared by liblockq's libFuzzer targets.
 *
 * A failed property check prints what was expected and aborts: libFuzzer
 * then reports a crash and saves the input as a crash-* artifact, like it
 * does for an AddressSanitizer or UndefinedBehaviorSanitizer report.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/fuzz/fuzz_common.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_FUZZ_COMMON_H
#define LOCKQ_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define lqf_check(cond, ...) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "lockq fuzz: check failed: %s\n    ", #cond); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
			abort(); \
		} \
	} while (0)

/*
 * lqf_cstring copies the fuzzer's bytes into a buffer of exactly size + 1
 * bytes ending in NUL, so that AddressSanitizer catches any read past the
 * terminator.  (An embedded NUL simply ends the string early.)
 */
static inline char *
lqf_cstring(const uint8_t *data, size_t size)
{
	char	   *s = malloc(size + 1);

	if (s == NULL)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/*
 * A little cursor over the fuzzer's bytes for structured inputs: reading
 * past the end yields zeros.
 */
typedef struct lqf_bytes
{
	const uint8_t *data;
	size_t		size;
} lqf_bytes;

static inline uint8_t
lqf_u8(lqf_bytes *b)
{
	uint8_t		v = 0;

	if (b->size > 0)
	{
		v = b->data[0];
		b->data++;
		b->size--;
	}
	return v;
}

static inline uint64_t
lqf_u64(lqf_bytes *b)
{
	uint64_t	v = 0;
	int			i;

	for (i = 0; i < 8; i++)
		v = (v << 8) | lqf_u8(b);
	return v;
}

#endif							/* LOCKQ_FUZZ_COMMON_H */

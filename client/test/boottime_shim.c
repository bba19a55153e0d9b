/*-------------------------------------------------------------------------
 *
 * boottime_shim.c
 *		An LD_PRELOAD shim for the "boottime" scenario of lockqc_test: it
 *		adds the number of milliseconds written in the file named by
 *		LQ_BOOT_OFFSET_FILE to CLOCK_BOOTTIME, and leaves every other clock
 *		alone.  Writing 10000 there looks, to the process, like a system
 *		suspend of 10 s: the boot-time clock jumps, the monotonic one does
 *		not.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/test/boottime_shim.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int			clock_gettime(clockid_t id, struct timespec *ts);

/* clock_gettime: the real one, plus the offset for CLOCK_BOOTTIME. */
int
clock_gettime(clockid_t id, struct timespec *ts)
{
	static int	(*real) (clockid_t, struct timespec *);
	int			rc;

	if (real == NULL)
		real = (int (*) (clockid_t, struct timespec *)) dlsym(RTLD_NEXT, "clock_gettime");
	rc = real(id, ts);
	if (rc == 0 && id == CLOCK_BOOTTIME)
	{
		const char *f = getenv("LQ_BOOT_OFFSET_FILE");
		long long	off = 0;
		FILE	   *fp = f ? fopen(f, "r") : NULL;

		if (fp != NULL)
		{
			if (fscanf(fp, "%lld", &off) != 1)
				off = 0;
			fclose(fp);
		}
		ts->tv_sec += off / 1000;
		ts->tv_nsec += (off % 1000) * 1000000;
		if (ts->tv_nsec >= 1000000000)
		{
			ts->tv_sec++;
			ts->tv_nsec -= 1000000000;
		}
	}
	return rc;
}

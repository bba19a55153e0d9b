/*-------------------------------------------------------------------------
 *
 * lockq_clock.c
 *		The lockq clock: microseconds since the Unix epoch that never go
 *		backwards, not across restarts or crashes and not when the system
 *		clock is set back.
 *
 * Rules:
 *	- The clock is CLOCK_BOOTTIME plus an offset, so it runs at the rate of
 *	  real time (suspend included) and ignores steps of the wall clock in
 *	  either direction.  Every value handed out is also strictly greater
 *	  than the one before (a CAS on clock_last).
 *	- No value above the durable ceiling is ever handed out.  The ceiling is
 *	  the value of the sequence lockq.clock_seq (and of the state file); the
 *	  lock server moves it ahead of the clock (LQ_CLOCK_RESERVE_US) and
 *	  flushes that before publishing it in shared memory.
 *	- The offset is set when the clock is first started in a boot of the
 *	  machine: so that the clock starts at the wall clock, or above the
 *	  durable ceiling if the wall clock is behind.  Later starts in the same
 *	  boot (server restarts, crashes) keep it: the clock runs on as if the
 *	  server had never stopped (see lockq_durability.c, lq_durability_start).
 *	- At a clean stop the lock server closes the clock (a flag bit in
 *	  clock_last, so no backend can hand out another value) and stores the
 *	  exact last value as the ceiling.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_clock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "lockq_clock.h"
#include "lockq_shmem.h"

/* Set in clock_last while the clock is closed (worker stopping). */
#define LQ_CLOCK_CLOSED		(UINT64CONST(1) << 63)


/*
 * lq_clock_boottime_us reads the system's clock that counts real time since
 * boot, suspend included, and is never set.
 */
int64
lq_clock_boottime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * lq_clock_wall_us reads the wall clock the way PostgreSQL does (now(),
 * clock_timestamp()), converted to microseconds since the Unix epoch.
 */
#define LQ_UNIX_TO_PG_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

int64
lq_clock_wall_us(void)
{
	return (int64) GetCurrentTimestamp() + LQ_UNIX_TO_PG_US;
}

/*
 * lq_clock_us_to_timestamptz converts lockq time (microseconds since the Unix
 * epoch) to a timestamptz, for display.
 */
TimestampTz
lq_clock_us_to_timestamptz(int64 us)
{
	return (TimestampTz) (us - LQ_UNIX_TO_PG_US);
}

bool
lq_clock_is_ready(void)
{
	return pg_atomic_read_u32(&lq_shared->clock_ready) != 0;
}

/*
 * lq_clock_peek returns the current lockq time without handing it out: it
 * is not stamped into clock_last and may exceed the ceiling.  Used for
 * comparisons (is a lease still valid?) and relative deadlines.
 */
int64
lq_clock_peek(void)
{
	uint64		last;
	int64		cand;

	if (!lq_clock_is_ready())
		return lq_clock_wall_us();

	pg_read_barrier();
	last = pg_atomic_read_u64(&lq_shared->clock_last) & ~LQ_CLOCK_CLOSED;
	cand = lq_clock_boottime_us() + lq_shared->clock_offset;
	return Max(cand, (int64) last);
}

/*
 * lq_clock_next hands out the next clock value if it is at most limit:
 * strictly greater than every earlier value, and equal to the monotonic
 * time when that is larger.  Returns false when the value would pass the
 * limit or the clock is not ready or closed; nothing is consumed then.
 */
bool
lq_clock_next(int64 limit, int64 *result)
{
	if (!lq_clock_is_ready())
		return false;
	pg_read_barrier();

	for (;;)
	{
		uint64		old = pg_atomic_read_u64(&lq_shared->clock_last);
		int64		cand;
		int64		v;

		if (old & LQ_CLOCK_CLOSED)
			return false;
		cand = lq_clock_boottime_us() + lq_shared->clock_offset;
		v = Max(cand, (int64) old + 1);
		if (v > limit)
			return false;
		if (pg_atomic_compare_exchange_u64(&lq_shared->clock_last, &old,
										   (uint64) v))
		{
			*result = v;
			return true;
		}
	}
}

/*
 * lq_clock_setup starts the clock for a new shared-memory lifetime: lockq
 * time is CLOCK_BOOTTIME + offset, and every value handed out is above
 * last.  Worker only; the published ceiling is the durable one until the
 * worker extends it.
 */
void
lq_clock_setup(int64 offset, int64 last, int64 durable_ceiling)
{
	lq_shared->clock_offset = offset;
	pg_atomic_write_u64(&lq_shared->clock_last, (uint64) Max(last, 0));
	pg_atomic_write_u64(&lq_shared->clock_ceiling, (uint64) durable_ceiling);
	pg_write_barrier();
	pg_atomic_write_u32(&lq_shared->clock_ready, 1);
}

/*
 * lq_clock_reopen is used by a restarted worker when shared memory (and so
 * the clock) survived: the offset stays, the published ceiling becomes the
 * durable value just read, and a clock closed by the previous worker opens.
 */
void
lq_clock_reopen(int64 durable_ceiling)
{
	uint64		ceiling = pg_atomic_read_u64(&lq_shared->clock_ceiling);

	if ((uint64) durable_ceiling > ceiling)
		pg_atomic_write_u64(&lq_shared->clock_ceiling, (uint64) durable_ceiling);
	pg_atomic_fetch_and_u64(&lq_shared->clock_last, ~LQ_CLOCK_CLOSED);
}

/*
 * lq_clock_close stops all backends from handing out clock values, lowers
 * the published ceiling to the last value handed out and returns it, for
 * the worker to persist exactly.  Any CAS racing with the close fails
 * because clock_last changed, so no value above the result escapes.
 */
int64
lq_clock_close(void)
{
	uint64		old = pg_atomic_fetch_or_u64(&lq_shared->clock_last,
											 LQ_CLOCK_CLOSED);
	int64		last = (int64) (old & ~LQ_CLOCK_CLOSED);

	pg_atomic_write_u64(&lq_shared->clock_ceiling, (uint64) last);
	return last;
}

int64
lq_clock_ceiling(void)
{
	return (int64) pg_atomic_read_u64(&lq_shared->clock_ceiling);
}

/*
 * lq_clock_publish_ceiling raises the published ceiling.  The caller must
 * have made the new value durable first.
 */
void
lq_clock_publish_ceiling(int64 ceiling)
{
	uint64		old = pg_atomic_read_u64(&lq_shared->clock_ceiling);

	while ((uint64) ceiling > old)
	{
		if (pg_atomic_compare_exchange_u64(&lq_shared->clock_ceiling, &old,
										   (uint64) ceiling))
			break;
	}
}

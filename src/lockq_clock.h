/*-------------------------------------------------------------------------
 *
 * lockq_clock.h
 *		The lockq clock (lockq_clock.c): microseconds since the Unix epoch
 *		that never go backwards.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_clock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_CLOCK_H
#define LOCKQ_CLOCK_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Anyone. */
extern int64 lq_clock_wall_us(void);
extern TimestampTz lq_clock_us_to_timestamptz(int64 us);
extern int64 lq_clock_peek(void);
extern bool lq_clock_next(int64 limit, int64 *result);
extern int64 lq_clock_ceiling(void);
extern bool lq_clock_is_ready(void);


/* The lock server. */
extern int64 lq_clock_boottime_us(void);
extern void lq_clock_setup(int64 offset, int64 last, int64 durable_ceiling);
extern void lq_clock_reopen(int64 durable_ceiling);
extern int64 lq_clock_close(void);
extern void lq_clock_publish_ceiling(int64 ceiling);

#endif							/* LOCKQ_CLOCK_H */

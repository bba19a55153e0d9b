/*-------------------------------------------------------------------------
 *
 * lockq_statefile.h
 *		The lock server's state file: floors that survive DROP EXTENSION,
 *		and what it takes to continue the clock across restarts.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_statefile.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_STATEFILE_H
#define LOCKQ_STATEFILE_H

#include "postgres.h"

#define LQ_BOOT_ID_LEN		40

typedef struct LqStateFile
{
	char		boot_id[LQ_BOOT_ID_LEN];	/* the machine boot it was written
											 * in; empty: unknown */
	int64		clock_offset;	/* lockq time = CLOCK_BOOTTIME + offset */
	int64		clock_ceiling;	/* no clock value above this was shown */
	int64		token_ceiling;	/* no token above this was issued */
	bool		clean;			/* written by a clean stop */
	int64		clock_last;		/* clean: the last clock value shown */
} LqStateFile;

extern bool lq_statefile_read(LqStateFile *sf);
extern void lq_statefile_write(const LqStateFile *sf);
extern void lq_statefile_boot_id(char *buf);

#endif							/* LOCKQ_STATEFILE_H */

/*-------------------------------------------------------------------------
 *
 * lockq_statefile.c
 *		The lock server's state file, lockq.state in the data directory.
 *
 * Two durable promises of lockq must hold whatever happens to the
 * extension's own objects: tokens never repeat and lockq_now() never goes
 * back.  The ceilings behind them are kept in sequences of the extension,
 * which replicate to standbys; but DROP EXTENSION drops them, and a new
 * installation would start from scratch.  So the lock server also writes
 * its ceilings here, outside the extension, whenever it raises them, and
 * at its start continues above the larger of the two.  (CREATE EXTENSION
 * copies the floors into the new sequences too, so that they replicate: see
 * lockq_hooks.c.)
 *
 * The file also says how to continue the clock.  Within one boot of the
 * machine, lockq time is CLOCK_BOOTTIME plus an offset that the file
 * keeps, so the clock runs on across server restarts and crashes exactly as
 * real time does, whatever the wall clock does; a lease keeps exactly the
 * time it had left, and one that ended stays ended.  A clean stop also
 * records the last value shown.
 *
 * The file is small text ("key value" lines), replaced atomically and
 * durably (durable_rename) by the lock server only.  A missing or
 * unreadable file only means that nothing is known: the lock server then
 * takes the conservative path.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_statefile.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "storage/fd.h"

#include "lockq_statefile.h"

#define LQ_STATEFILE		"lockq.state"
#define LQ_STATEFILE_TMP	"lockq.state.tmp"
#define LQ_STATEFILE_MAGIC	"lockq-state 1"

/*
 * lq_statefile_boot_id copies the kernel's id of the current boot into buf
 * (LQ_BOOT_ID_LEN bytes), or an empty string where there is none.
 */
void
lq_statefile_boot_id(char *buf)
{
	FILE	   *f = AllocateFile("/proc/sys/kernel/random/boot_id", "r");

	buf[0] = '\0';
	if (f == NULL)
		return;
	if (fgets(buf, LQ_BOOT_ID_LEN, f) == NULL)
		buf[0] = '\0';
	FreeFile(f);
	buf[strcspn(buf, "\n")] = '\0';
}

/*
 * lq_statefile_read fills *sf from the file; false (and *sf zeroed) when
 * there is no file or it cannot be parsed.
 */
bool
lq_statefile_read(LqStateFile *sf)
{
	FILE	   *f;
	char		line[256];
	int			found = 0;

	memset(sf, 0, sizeof(LqStateFile));
	f = AllocateFile(LQ_STATEFILE, "r");
	if (f == NULL)
		return false;
	if (fgets(line, sizeof(line), f) == NULL ||
		strncmp(line, LQ_STATEFILE_MAGIC, strlen(LQ_STATEFILE_MAGIC)) != 0)
	{
		FreeFile(f);
		return false;
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		char		key[32];
		char		val[LQ_BOOT_ID_LEN];
		long long	n;

		if (sscanf(line, "%31s %39s", key, val) != 2)
			continue;
		n = strtoll(val, NULL, 10);
		if (strcmp(key, "boot_id") == 0)
			strlcpy(sf->boot_id, strcmp(val, "-") == 0 ? "" : val, LQ_BOOT_ID_LEN);
		else if (strcmp(key, "clock_offset") == 0)
			sf->clock_offset = n;
		else if (strcmp(key, "clock_ceiling") == 0)
			sf->clock_ceiling = n;
		else if (strcmp(key, "token_ceiling") == 0)
			sf->token_ceiling = n;
		else if (strcmp(key, "clean") == 0)
			sf->clean = (n != 0);
		else if (strcmp(key, "clock_last") == 0)
			sf->clock_last = n;
		else
			continue;
		found++;
	}
	FreeFile(f);
	if (found < 6)
	{
		memset(sf, 0, sizeof(LqStateFile));
		return false;
	}
	return true;
}

/*
 * lq_statefile_write replaces the file durably: a new file is written and
 * fsynced, then renamed over the old one and the directory fsynced.  Raises
 * an ERROR if that fails: the caller must then not rely on the values.
 */
void
lq_statefile_write(const LqStateFile *sf)
{
	char		buf[512];
	int			len;
	int			fd;

	len = snprintf(buf, sizeof(buf),
				   LQ_STATEFILE_MAGIC "\n"
				   "boot_id %s\n"
				   "clock_offset " INT64_FORMAT "\n"
				   "clock_ceiling " INT64_FORMAT "\n"
				   "token_ceiling " INT64_FORMAT "\n"
				   "clean %d\n"
				   "clock_last " INT64_FORMAT "\n",
				   sf->boot_id[0] ? sf->boot_id : "-", sf->clock_offset,
				   sf->clock_ceiling, sf->token_ceiling, sf->clean ? 1 : 0,
				   sf->clock_last);

	fd = OpenTransientFile(LQ_STATEFILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", LQ_STATEFILE_TMP)));
	errno = 0;
	if (write(fd, buf, len) != len)
	{
		int			save_errno = errno ? errno : ENOSPC;

		CloseTransientFile(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", LQ_STATEFILE_TMP)));
	}
	if (pg_fsync(fd) != 0)
	{
		int			save_errno = errno;

		CloseTransientFile(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", LQ_STATEFILE_TMP)));
	}
	if (CloseTransientFile(fd) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", LQ_STATEFILE_TMP)));
	(void) durable_rename(LQ_STATEFILE_TMP, LQ_STATEFILE, ERROR);
}

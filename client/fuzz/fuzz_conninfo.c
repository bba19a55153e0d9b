/*-------------------------------------------------------------------------
 *
 * fuzz_conninfo.c
 *		libFuzzer target for what liblockq does with a connection string:
 *		lockqc_connect(conninfo, &errmsg) up to the point where a server
 *		would answer.
 *
 * liblockq does not parse conninfo itself: lockqc_connect keeps a copy
 * (NULL becomes "") and hands it to libpq's PQconnectdb, at connect time
 * and again at every reconnect.  Multi-host failover, URIs and options
 * are all libpq's.  So this target fuzzes libpq's parser (PQconninfoParse,
 * the same parser PQconnectdb runs first; libpq is not instrumented, so
 * coverage guidance comes only from liblockq and this file) and
 * liblockq's own path around it: the copy, the self-pipe, the failure
 * handling, the error message handed back, and the clean-up.
 *
 * No connection may reach a server: the environment is pointed at a
 * directory that does not exist (PGHOST, and no PGHOSTADDR, service file
 * or sysconf directory), and lockqc_connect is only called for strings
 * that libpq rejects or whose every host is an absolute path that does
 * not exist (no hostaddr, no empty host element, which would mean the
 * default socket directory).  Other strings are only parsed.
 *
 * Checks:
 *	- PQconninfoParse either succeeds or gives an error message;
 *	- lockqc_connect returns NULL and a non-empty malloc'ed message (or
 *	  none when errmsg is NULL, which it must accept), and when libpq
 *	  rejected the string, the message contains libpq's reason;
 *	- nothing leaks (LeakSanitizer, run by libFuzzer after every input
 *	  that allocated more than it freed), no descriptor is left open.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/fuzz/fuzz_conninfo.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "fuzz_common.h"

#define NOWHERE		"/nonexistent/lockq-fuzz"

int			LLVMFuzzerInitialize(int *argc, char ***argv);
int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct stat st;

	if (stat("/nonexistent", &st) == 0)
	{
		fprintf(stderr, "fuzz_conninfo: /nonexistent exists; refusing to run\n");
		exit(1);
	}
	setenv("PGHOST", NOWHERE, 1);
	setenv("PGSERVICEFILE", NOWHERE "/pg_service.conf", 1);
	setenv("PGSYSCONFDIR", NOWHERE, 1);
	setenv("PGPASSFILE", NOWHERE "/pgpass", 1);
	setenv("PGUSER", "lockqfuzz", 1);
	unsetenv("PGHOSTADDR");
	unsetenv("PGSERVICE");
	unsetenv("PGDATABASE");
	return 0;
}

/*
 * safe_hosts is true when connecting with these options cannot reach
 * anything: every host is an absolute path that does not exist.
 */
static bool
safe_hosts(PQconninfoOption *opts)
{
	PQconninfoOption *o;

	for (o = opts; o->keyword != NULL; o++)
	{
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "hostaddr") == 0)
			return false;
		if (strcmp(o->keyword, "dbname") == 0 &&
			(strchr(o->val, '=') != NULL || strncmp(o->val, "postgres", 8) == 0))
			return false;		/* would be a connection string if expanded */
		if (strcmp(o->keyword, "host") == 0)
		{
			const char *p = o->val;

			for (;;)
			{
				const char *end = strchr(p, ',');
				size_t		len = end ? (size_t) (end - p) : strlen(p);
				char		path[4096];
				struct stat st;

				if (len == 0 || len >= sizeof(path) || p[0] != '/')
					return false;
				memcpy(path, p, len);
				path[len] = '\0';
				if (stat(path, &st) == 0 || errno != ENOENT)
					return false;
				if (end == NULL)
					break;
				p = end + 1;
			}
		}
	}
	return true;
}

/*
 * lowest_free_fd is the descriptor the next open() would get: if
 * lockqc_connect leaves a pipe or a socket open, it changes (they take
 * the lowest free descriptors too).
 */
static int
lowest_free_fd(void)
{
	int			fd = dup(2);

	if (fd < 0)
		abort();
	close(fd);
	return fd;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *conninfo = size > 0 ? lqf_cstring(data, size) : NULL;
	const char *shown = conninfo != NULL ? conninfo : "(NULL)";
	char	   *perr = NULL;
	PQconninfoOption *opts;
	bool		attempt;
	bool		want_msg = (size % 2 == 0);
	char	   *errmsg = (char *) "untouched";
	lockqc_conn *c;
	int			fds_before;

	opts = PQconninfoParse(conninfo != NULL ? conninfo : "", &perr);
	lqf_check(opts != NULL || perr != NULL, "\"%s\": rejected without a reason", shown);
	attempt = (opts == NULL || safe_hosts(opts));
	if (opts != NULL)
		PQconninfoFree(opts);

	if (attempt)
	{
		fds_before = lowest_free_fd();
		c = lockqc_connect(conninfo, want_msg ? &errmsg : NULL);
		lqf_check(c == NULL, "\"%s\": connected to something", shown);
		lqf_check(lowest_free_fd() == fds_before, "\"%s\": a file descriptor was left open", shown);
		if (want_msg)
		{
			lqf_check(errmsg != NULL && strcmp(errmsg, "untouched") != 0 && errmsg[0] != '\0',
					  "\"%s\": no error message", shown);
			if (perr != NULL)
			{
				/* libpq's reason, without its newline, is in our message */
				char	   *reason = strdup(perr);

				if (reason == NULL)
					abort();
				reason[strcspn(reason, "\n")] = '\0';
				lqf_check(strstr(errmsg, reason) != NULL,
						  "\"%s\": message \"%s\" lost libpq's reason \"%s\"",
						  shown, errmsg, reason);
				free(reason);
			}
			free(errmsg);
		}
	}
	PQfreemem(perr);
	free(conninfo);
	return 0;
}

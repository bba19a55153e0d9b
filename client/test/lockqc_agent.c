/*-------------------------------------------------------------------------
 *
 * lockqc_agent.c
 *		The C library's agent for the clients' fault matrix
 *		(test/t/309_client_matrix.pl), with the line commands of
 *		client/python/tools/agent.py.
 *
 * argv: CONNINFO.  Commands on stdin, answers on stdout:
 *
 *	 acquire LOCK TTL_MS TIMEOUT_MS HEARTBEAT_MS	(TIMEOUT_MS -1: forever)
 *		"acquired TOKEN PID" or "failed ERROR ELAPSED_MS"; once acquired,
 *		a thread does "protected work" as an application would: it reads
 *		the wall clock, then asks lockqc_held, and counts the time as work
 *		done under the lease only if the lease was held; when it is not, it
 *		prints "stopped LAST_WORK_NS" (wall-clock ns of the last work)
 *	 release
 *		"released 0|1 ELAPSED_MS" or "failed ERROR ELAPSED_MS"
 *	 cancel LOCK TTL_MS DELAY_MS HEARTBEAT_MS
 *		waits for LOCK and cancels the wait DELAY_MS later (cancel_flag and
 *		lockqc_wakeup); "cancel_done cancelled|acquired|ERROR ELAPSED_MS",
 *		where a grant that came first is released at once
 *	 ping
 *		takes and releases a lock of its own: "pong ok" or "pong ERROR"
 *	 quit
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lockq_client.h"

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static lockqc_conn *conn;

/* One answer line, whole, whichever thread says it. */
static void
say(const char *fmt,...)
{
	va_list		ap;

	pthread_mutex_lock(&out_mu);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

static int64_t
clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t
elapsed_ms(int64_t t0)
{
	return (clock_ns(CLOCK_MONOTONIC) - t0) / 1000000;
}

/*
 * The protected work: the wall clock is read first, then the lease is
 * checked, so a time counted as work was under a lease lockqc_held still
 * vouched for afterwards.
 */
static void *
work(void *arg)
{
	lockqc_handle *h = arg;
	int64_t		last = 0;

	for (;;)
	{
		int64_t		t = clock_ns(CLOCK_REALTIME);

		if (!lockqc_held(h))
		{
			say("stopped %lld", (long long) last);
			return NULL;
		}
		last = t;
		usleep(1000);
	}
}

/* The reason a call failed, as one word. */
static const char *
failure(int rc)
{
	static char word[64];
	const char *s;

	if (rc != LOCKQC_ERROR)
	{
		snprintf(word, sizeof(word), "%s", lockqc_status_str(rc));
		for (char *p = word; *p; p++)
			if (*p == ' ')
				*p = '_';
		return word;
	}
	s = lockqc_sqlstate(conn);
	snprintf(word, sizeof(word), "error%s%s", *s ? "_" : "", s);
	return word;
}

typedef struct canceller
{
	lockqc_cancel_flag flag;
	int64_t		delay_ms;
} canceller;

static void *
cancel_later(void *arg)
{
	canceller  *k = arg;

	usleep(k->delay_ms * 1000);
	atomic_store(&k->flag, 1);
	lockqc_wakeup(conn);
	return NULL;
}

int
main(int argc, char **argv)
{
	char		line[1024];
	char	   *err = NULL;
	lockqc_handle *held = NULL;
	pthread_t	worker;
	bool		working = false;

	if (argc != 2)
	{
		fprintf(stderr, "usage: lockqc_agent CONNINFO\n");
		return 2;
	}
	conn = lockqc_connect(argv[1], &err);
	if (conn == NULL)
	{
		fprintf(stderr, "lockqc_agent: %s\n", err);
		return 1;
	}
	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		char		cmd[32],
					lock[512];
		long long	ttl = 0,
					timeout = 0,
					hb = 0;
		int64_t		t0 = clock_ns(CLOCK_MONOTONIC);
		lockqc_opts opts;
		lockqc_handle *h = NULL;
		int			rc;

		if (sscanf(line, "%31s %511s %lld %lld %lld", cmd, lock, &ttl, &timeout, &hb) < 1)
			continue;
		lockqc_opts_init(&opts);
		if (strcmp(cmd, "acquire") == 0)
		{
			opts.ttl_ms = ttl;
			opts.timeout_ms = timeout;
			opts.heartbeat_ms = hb;
			rc = lockqc_lock(conn, lock, &opts, &h);
			if (rc != LOCKQC_OK)
			{
				say("failed %s %lld", failure(rc), (long long) elapsed_ms(t0));
				continue;
			}
			if (working)
				pthread_join(worker, NULL);
			held = h;
			say("acquired %lld %d", (long long) lockqc_token(h), (int) getpid());
			working = pthread_create(&worker, NULL, work, h) == 0;
		}
		else if (strcmp(cmd, "release") == 0 && held != NULL)
		{
			/* the worker reads the handle: it ends before the handle goes */
			lockqc_handle *r = held;

			held = NULL;
			rc = lockqc_unlock(r);
			if (working)
				pthread_join(worker, NULL);
			working = false;
			if (rc == LOCKQC_OK || rc == LOCKQC_LOST)
				say("released %d %lld", rc == LOCKQC_OK, (long long) elapsed_ms(t0));
			else
				say("failed %s %lld", failure(rc), (long long) elapsed_ms(t0));
		}
		else if (strcmp(cmd, "cancel") == 0)
		{
			canceller	k;
			pthread_t	kt;

			atomic_init(&k.flag, 0);
			k.delay_ms = timeout;
			opts.ttl_ms = ttl;
			opts.heartbeat_ms = hb;
			opts.cancel_flag = &k.flag;
			pthread_create(&kt, NULL, cancel_later, &k);
			rc = lockqc_lock(conn, lock, &opts, &h);
			pthread_join(kt, NULL);
			if (rc == LOCKQC_OK)
				rc = lockqc_unlock(h) == LOCKQC_OK ? LOCKQC_OK : LOCKQC_ERROR;
			say("cancel_done %s %lld",
				rc == LOCKQC_OK ? "acquired" : failure(rc), (long long) elapsed_ms(t0));
		}
		else if (strcmp(cmd, "ping") == 0)
		{
			char		own[64];

			snprintf(own, sizeof(own), "agent-ping-%d", (int) getpid());
			rc = lockqc_trylock(conn, own, &opts, &h);
			if (rc == LOCKQC_OK)
				rc = lockqc_unlock(h);
			say("pong %s", rc == LOCKQC_OK ? "ok" : failure(rc));
		}
		else if (strcmp(cmd, "quit") == 0)
			break;
	}
	fflush(stdout);
	_exit(0);					/* leave the worker and a broken connection */
}

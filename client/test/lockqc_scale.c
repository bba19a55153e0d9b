/*-------------------------------------------------------------------------
 *
 * lockqc_scale.c
 *		Many client-side waiters on one lock over a few connections, driven
 *		by test/t/502_scale.pl.
 *
 *	lockqc_scale pq  CONNINFO LOCK N NCONN HEARTBEAT_MS TTL_MS
 *	lockqc_scale lib CONNINFO LOCK N NCONN HEARTBEAT_MS TTL_MS
 *
 * Waiter i (1..N) has the owner name "w%05d" and uses connection
 * (i - 1) % NCONN.  Every waiter, once granted, releases the lock at once,
 * so the lock passes down the whole queue.
 *
 * pq:	plain libpq and the documented client-waiter protocol: each
 *		connection LISTENs on its own channel; the waiters are queued one by
 *		one in index order with lockq_enqueue(lock, owner, ttl, channel,
 *		heartbeat); a single-threaded loop polls all the sockets, and for
 *		every "grant" notification confirms with lockq_heartbeat and
 *		releases with the confirmed token.  Every HEARTBEAT_MS / 3 it also
 *		heartbeats every waiter still queued (the keep-alive the protocol
 *		asks for, and the way to learn of a grant when no NOTIFY comes).
 * lib:	liblockq: N threads share NCONN lockqc_conns, each thread does
 *		lockqc_lock, records its token and lockqc_unlock.  The order in
 *		which the threads queue is whatever order they get the connection
 *		in; the server's queue (lockq_waiters) says which it was.
 *
 * Output, one line each:
 *	ENQUEUED <n> <ms>			(pq) all n waiters are queued, in <ms>
 *	STARTED <n>					(lib) all n threads are started
 *	GRANT <owner> <token> <us>	one per grant, in the order the grants were
 *								confirmed (lib: printed at the end); <us>
 *								since the first grant was confirmed
 *	DONE <n> <us> <sweeps> <notices>
 *								all n were granted and released; <us> from
 *								the first confirmed grant to the last
 *								release; (pq) <sweeps>: heartbeat rounds,
 *								<notices>: grant notifications received
 *	ERROR <message>				and exit status 1
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/test/lockqc_scale.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "lockq_client_int.h"

/*
 * pq: no grant for this long ends the run; lib: the longest a thread waits
 * (lockqc_opts.timeout_ms), the whole drain included.
 */
#define STALL_MS	120000

static const char *conninfo;
static const char *lock_id;
static int	nwaiters;
static int	nconn;
static int64_t heartbeat_ms;
static int64_t ttl_ms;

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
die(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * die prints an ERROR line and exits with status 1.
 */
static void
die(const char *fmt,...)
{
	va_list		ap;

	printf("ERROR ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void
owner_name(char *buf, size_t len, int i)
{
	snprintf(buf, len, "w%05d", i);
}

/*
 * owner_index is the inverse of owner_name: 1..N, or 0 for a name that is
 * not one of ours.
 */
static int
owner_index(const char *s, size_t len)
{
	int			i = 0;
	size_t		k;

	if (len != 6 || s[0] != 'w')
		return 0;
	for (k = 1; k < len; k++)
	{
		if (s[k] < '0' || s[k] > '9')
			return 0;
		i = i * 10 + (s[k] - '0');
	}
	return (i >= 1 && i <= nwaiters) ? i : 0;
}

/*--------------------------------------------------------------------------
 * pq mode
 *--------------------------------------------------------------------------
 */
typedef struct pq_conn
{
	PGconn	   *pg;
	char		channel[64];
} pq_conn;

static pq_conn *conns;
static char *state;				/* per waiter: 'q' queued, 'n' notified,
								 * 'd' done */
static int *pending;			/* notified waiters, in arrival order */
static int	npending;
static int	notices;			/* grant notifications received */

/*
 * pq_value runs sql with text parameters on pg and returns a malloc'ed copy
 * of the single value, NULL for SQL NULL; an error ends the run.
 */
static char *
pq_value(PGconn *pg, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
	char	   *v;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die("%s: %s", sql, PQresultErrorMessage(res));
	v = PQgetisnull(res, 0, 0) ? NULL : strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/*
 * pq_collect moves the notifications that arrived on connection k into
 * the pending list (grants only; each waiter once).
 */
static void
pq_collect(int k)
{
	PGnotify   *n;

	if (!PQconsumeInput(conns[k].pg))
		die("connection %d: %s", k, PQerrorMessage(conns[k].pg));
	while ((n = PQnotifies(conns[k].pg)) != NULL)
	{
		lockqc_notice nt;
		int			i;

		if (strcmp(n->relname, conns[k].channel) != 0)
			die("notification on channel \"%s\"", n->relname);
		if (lockqc_parse_notice(n->extra, &nt) != 0 ||
			nt.event != LOCKQC_EV_GRANT ||
			(i = owner_index(nt.owner, nt.owner_len)) == 0 ||
			(i - 1) % nconn != k)
			die("unexpected notification \"%s\"", n->extra);
		notices++;
		if (state[i] == 'q')
		{
			if (npending > nwaiters)
				die("too many notifications");
			state[i] = 'n';
			pending[npending++] = i;
		}
		PQfreemem(n);
	}
}

/*
 * pq_try_grant asks the server whether waiter i holds the lock now
 * (lockq_heartbeat), and if so prints the grant and releases it.  Returns
 * true when it was granted.
 */
static bool
pq_try_grant(int i, int64_t *first, int64_t *last)
{
	PGconn	   *pg = conns[(i - 1) % nconn].pg;
	char		owner[16];
	const char *p[3] = {lock_id, owner, NULL};
	char	   *tok;
	char	   *ok;

	owner_name(owner, sizeof(owner), i);
	tok = pq_value(pg, "SELECT lockq_heartbeat($1, $2)", 2, p);
	if (tok == NULL)
	{
		state[i] = 'q';			/* still queued: the notice was early */
		return false;
	}
	if (*first == 0)
		*first = now_us();
	printf("GRANT %s %s %" PRId64 "\n", owner, tok, now_us() - *first);
	p[2] = tok;
	ok = pq_value(pg, "SELECT lockq_release($1, $2, $3::bigint)", 3, p);
	if (ok == NULL || strcmp(ok, "t") != 0)
		die("release by %s with token %s returned %s", owner, tok, ok ? ok : "NULL");
	*last = now_us();
	state[i] = 'd';
	free(tok);
	free(ok);
	return true;
}

static int
run_pq(void)
{
	char		ttl[64];
	char		hb[64];
	int64_t		t0;
	int64_t		first = 0;
	int64_t		last = 0;
	int64_t		last_progress;
	int64_t		next_sweep;
	int			done = 0;
	int			sweeps = 0;
	int			i;
	int			k;
	struct pollfd *fds;

	conns = calloc(nconn, sizeof(pq_conn));
	state = calloc(nwaiters + 1, 1);
	pending = calloc(nwaiters + 1, sizeof(int));
	fds = calloc(nconn, sizeof(struct pollfd));
	if (!conns || !state || !pending || !fds)
		die("out of memory");

	for (k = 0; k < nconn; k++)
	{
		char		sql[128];
		PGresult   *res;

		conns[k].pg = PQconnectdb(conninfo);
		if (PQstatus(conns[k].pg) != CONNECTION_OK)
			die("connect: %s", PQerrorMessage(conns[k].pg));
		snprintf(conns[k].channel, sizeof(conns[k].channel), "lqscale_%d", k);
		snprintf(sql, sizeof(sql), "SET application_name = 'lockqc_scale'; LISTEN %s",
				 conns[k].channel);
		res = PQexec(conns[k].pg, sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("%s: %s", sql, PQresultErrorMessage(res));
		PQclear(res);
	}

	snprintf(ttl, sizeof(ttl), "%" PRId64 " ms", ttl_ms);
	snprintf(hb, sizeof(hb), "%" PRId64 " ms", heartbeat_ms);
	t0 = now_us();
	for (i = 1; i <= nwaiters; i++)
	{
		char		owner[16];
		const char *p[5] = {lock_id, owner, ttl, conns[(i - 1) % nconn].channel, hb};
		char	   *v;

		owner_name(owner, sizeof(owner), i);
		v = pq_value(conns[(i - 1) % nconn].pg,
					 "SELECT lockq_enqueue($1, $2, $3::interval, $4, $5::interval)", 5, p);
		if (v != NULL)
			die("%s was granted at once (token %s): the lock must be held", owner, v);
		state[i] = 'q';
	}
	printf("ENQUEUED %d %" PRId64 "\n", nwaiters, (now_us() - t0) / 1000);
	fflush(stdout);

	last_progress = now_us();
	next_sweep = now_us() + heartbeat_ms * 1000 / 3;
	while (done < nwaiters)
	{
		int64_t		now;
		int			timeout;

		for (k = 0; k < nconn; k++)
			pq_collect(k);
		/* the notified ones, in the order the notices came */
		for (i = 0; i < npending; i++)
		{
			if (pq_try_grant(pending[i], &first, &last))
			{
				done++;
				last_progress = now_us();
			}
			/* our own queries brought in more notices */
			pq_collect((pending[i] - 1) % nconn);
		}
		npending = 0;

		now = now_us();
		if (now >= next_sweep)
		{
			/* keep-alive of every waiter still queued, in queue order */
			sweeps++;
			for (i = 1; i <= nwaiters; i++)
			{
				if (state[i] == 'q' && pq_try_grant(i, &first, &last))
				{
					done++;
					last_progress = now_us();
				}
			}
			next_sweep = now_us() + heartbeat_ms * 1000 / 3;
			continue;
		}
		if (done >= nwaiters)
			break;
		if (now - last_progress > (int64_t) STALL_MS * 1000)
			die("no grant for %d ms; %d of %d granted", STALL_MS, done, nwaiters);

		for (k = 0; k < nconn; k++)
		{
			fds[k].fd = PQsocket(conns[k].pg);
			fds[k].events = POLLIN;
			fds[k].revents = 0;
		}
		timeout = (int) ((next_sweep - now) / 1000) + 1;
		if (timeout > 1000)
			timeout = 1000;
		(void) poll(fds, nconn, timeout);
	}
	fflush(stdout);
	printf("DONE %d %" PRId64 " %d %d\n", done, last - first, sweeps, notices);
	fflush(stdout);
	for (k = 0; k < nconn; k++)
		PQfinish(conns[k].pg);
	return 0;
}

/*--------------------------------------------------------------------------
 * lib mode
 *--------------------------------------------------------------------------
 */
typedef struct lib_waiter
{
	int			index;
	lockqc_conn *c;
	int64_t		token;
	int			seq;			/* order of confirmed grants, from 1 */
	int			rc;
	int			unlock_rc;
	int64_t		granted_at;
	int64_t		released_at;
	char		err[256];
} lib_waiter;

static atomic_int lib_seq;

static void *
lib_thread(void *arg)
{
	lib_waiter *w = arg;
	lockqc_opts opts;
	lockqc_handle *h;
	char		owner[16];

	owner_name(owner, sizeof(owner), w->index);
	lockqc_opts_init(&opts);
	opts.owner = owner;
	opts.ttl_ms = ttl_ms;
	opts.heartbeat_ms = heartbeat_ms;
	opts.timeout_ms = STALL_MS;
	w->rc = lockqc_lock(w->c, lock_id, &opts, &h);
	if (w->rc != LOCKQC_OK)
	{
		snprintf(w->err, sizeof(w->err), "%s", lockqc_errmsg(w->c));
		return NULL;
	}
	w->granted_at = now_us();
	w->seq = atomic_fetch_add(&lib_seq, 1) + 1;
	w->token = lockqc_token(h);
	w->unlock_rc = lockqc_unlock(h);
	w->released_at = now_us();
	return NULL;
}

static int
cmp_seq(const void *a, const void *b)
{
	const lib_waiter *x = *(lib_waiter *const *) a;
	const lib_waiter *y = *(lib_waiter *const *) b;

	return (x->seq > y->seq) - (x->seq < y->seq);
}

static int
run_lib(void)
{
	lockqc_conn **cs = calloc(nconn, sizeof(lockqc_conn *));
	lib_waiter *ws = calloc(nwaiters + 1, sizeof(lib_waiter));
	lib_waiter **order = calloc(nwaiters, sizeof(lib_waiter *));
	pthread_t  *th = calloc(nwaiters + 1, sizeof(pthread_t));
	pthread_attr_t attr;
	int64_t		first = INT64_MAX;
	int64_t		last = 0;
	int			done = 0;
	int			i;
	int			k;

	if (!cs || !ws || !order || !th)
		die("out of memory");
	for (k = 0; k < nconn; k++)
	{
		char	   *err = NULL;
		char		ci[1024];

		snprintf(ci, sizeof(ci), "%s application_name=lockqc_scale", conninfo);
		cs[k] = lockqc_connect(ci, &err);
		if (cs[k] == NULL)
			die("connect: %s", err ? err : "?");
	}

	/* small stacks: thousands of threads that only wait */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (i = 1; i <= nwaiters; i++)
	{
		ws[i].index = i;
		ws[i].c = cs[(i - 1) % nconn];
		if (pthread_create(&th[i], &attr, lib_thread, &ws[i]) != 0)
			die("could not create thread %d", i);
	}
	pthread_attr_destroy(&attr);
	printf("STARTED %d\n", nwaiters);
	fflush(stdout);

	for (i = 1; i <= nwaiters; i++)
		pthread_join(th[i], NULL);
	for (i = 1; i <= nwaiters; i++)
	{
		if (ws[i].rc != LOCKQC_OK)
			die("w%05d: lockqc_lock returned %s: %s", i,
				lockqc_status_str(ws[i].rc), ws[i].err);
		if (ws[i].unlock_rc != LOCKQC_OK)
			die("w%05d: lockqc_unlock returned %s", i, lockqc_status_str(ws[i].unlock_rc));
		order[done++] = &ws[i];
		if (ws[i].granted_at < first)
			first = ws[i].granted_at;
		if (ws[i].released_at > last)
			last = ws[i].released_at;
	}
	qsort(order, done, sizeof(lib_waiter *), cmp_seq);
	for (i = 0; i < done; i++)
		printf("GRANT w%05d %" PRId64 " %" PRId64 "\n", order[i]->index, order[i]->token,
			   order[i]->granted_at - first);
	printf("DONE %d %" PRId64 " 0 0\n", done, last - first);
	fflush(stdout);
	for (k = 0; k < nconn; k++)
		lockqc_disconnect(cs[k]);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc != 8 || (strcmp(argv[1], "pq") != 0 && strcmp(argv[1], "lib") != 0))
	{
		fprintf(stderr, "usage: %s pq|lib CONNINFO LOCK N NCONN HEARTBEAT_MS TTL_MS\n", argv[0]);
		return 2;
	}
	conninfo = argv[2];
	lock_id = argv[3];
	nwaiters = atoi(argv[4]);
	nconn = atoi(argv[5]);
	heartbeat_ms = atoll(argv[6]);
	ttl_ms = atoll(argv[7]);
	if (nwaiters < 1 || nwaiters > 99999 || nconn < 1 || heartbeat_ms < 100 || ttl_ms < 1)
	{
		fprintf(stderr, "%s: bad arguments\n", argv[0]);
		return 2;
	}
	return strcmp(argv[1], "pq") == 0 ? run_pq() : run_lib();
}

/*-------------------------------------------------------------------------
 *
 * lockq_bench.c
 *		lockq against pg_advisory_lock, side by side.
 *
 *	lockq_bench [--quick] [--rounds N] [--seconds S] [--only LIST] CONNINFO
 *
 * Every client is a thread with its own connection.  For each point the
 * systems run alternately, several rounds, and the medians are reported.
 *
 * Scenarios:
 *	uncontended C   each client locks and releases its own fresh key;
 *					pairs/s and acquire latency
 *	contended C     all clients on one key: acquire, critical section,
 *					release; hand-offs/s, hand-off latency (release sent ->
 *					next holder running), waits, per-client counts, Jain's
 *					fairness index, FIFO inversions, mutual exclusion
 *	expiry          a holder vanishes; lag from its lease end to the next
 *					waiter's grant (lockq only: advisory locks have no leases)
 *	library C       the contended scenario through liblockq (NOTIFY path)
 *
 * FIFO inversions: client A's request reached the lock more than
 * INVERSION_MARGIN_US before client B's, but A was granted after B.  The
 * arrival is clock_timestamp() read by the acquiring statement itself,
 * right before it calls the lock function (liblockq: the client's clock
 * right before lockqc_lock).  The margin absorbs the scheduling of a
 * backend between that reading and its enqueue: with up to 256 sessions on
 * 2 cores that reaches several milliseconds, and pg_advisory_lock, which
 * queues strictly in order in the lock manager, shows "inversions" below
 * 5 ms as well.  The exact FIFO checks are the TAP tests (001_fifo).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		bench/lockq_bench.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"

#define INVERSION_MARGIN_US	10000
#define MAX_EVENTS			2000000

typedef enum
{
	SYS_ADVISORY,
	SYS_LOCKQ,
	SYS_LIBRARY
} bench_sys;

static const char *sys_name[] = {"advisory", "lockq", "liblockq"};

typedef struct point_result
{
	double		rate;			/* pairs/s or hand-offs/s */
	double		lat_p50;		/* acquire latency (uncontended) or
								 * hand-off latency (contended), µs */
	double		lat_p99;
	double		wait_p99;		/* contended: wait, µs */
	double		wait_max;
	double		jain;
	int64_t		inversions;
	int64_t		violations;
	int64_t		count_min;
	int64_t		count_max;
	int64_t		ops;
	double		cs_per_op;		/* context switches (whole machine) per op */
} point_result;

/* One critical-section entry, recorded by the holder. */
typedef struct cs_event
{
	int64_t		arrival;		/* server-side start (µs since epoch), or
								 * the client's wait start (liblockq) */
	int64_t		wait_start;
	int64_t		acquired;
	int64_t		release_start;
	int			client;
} cs_event;

static const char *conninfo;
static double seconds = 3.0;
static int	rounds = 3;

/* shared by the clients of one measurement */
static _Atomic bool stop_flag;
static pthread_barrier_t start_barrier;
static _Atomic int inside;
static _Atomic int64_t violations;
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static cs_event *events;
static int64_t nevents;

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static PGconn *
connect_db(void)
{
	PGconn	   *pg = PQconnectdb(conninfo);

	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "connect: %s", PQerrorMessage(pg));
		exit(1);
	}
	return pg;
}

static void
exec1(PGconn *pg, const char *sql, const char *param)
{
	const char *params[1] = {param};
	PGresult   *res = PQexecParams(pg, sql, param ? 1 : 0, NULL, params,
								   NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK &&
		PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "query \"%s\" failed: %s", sql, PQresultErrorMessage(res));
		exit(1);
	}
	PQclear(res);
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a;
	int64_t		y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

static double
pct(int64_t *v, int64_t n, double p)
{
	if (n == 0)
		return 0;
	return (double) v[(int64_t) ((n - 1) * p)];
}

/* ---------------------------------------------------------------------- */

typedef struct client
{
	int			id;
	bench_sys	sys;
	bool		contended;
	PGconn	   *pg;
	lockqc_conn *lc;
	int64_t		count;
	int64_t    *lat;			/* uncontended acquire latencies */
	int64_t		nlat;
	int64_t		cap;
} client;

/*
 * Runs an acquiring statement; returns the server's clock read just before
 * the lock function is called (same target list, evaluated in order), so
 * that neither parsing nor planning falls between arrival and request.
 */
static int64_t
exec_arrival(PGconn *pg, const char *sql, const char *param)
{
	const char *params[1] = {param};
	PGresult   *res = PQexecParams(pg, sql, 1, NULL, params, NULL, NULL, 0);
	int64_t		t;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "query \"%s\" failed: %s", sql, PQresultErrorMessage(res));
		exit(1);
	}
	t = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return t;
}

static int64_t
acquire(client *c, const char *key, lockqc_handle **h)
{
	switch (c->sys)
	{
		case SYS_ADVISORY:
			return exec_arrival(c->pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8,"
								" pg_advisory_lock(hashtextextended($1, 0))", key);
		case SYS_LOCKQ:
			return exec_arrival(c->pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8,"
								" lockq_get($1)", key);
		case SYS_LIBRARY:
			if (lockqc_lock(c->lc, key, NULL, h) != LOCKQC_OK)
			{
				fprintf(stderr, "lockqc_lock: %s\n", lockqc_errmsg(c->lc));
				exit(1);
			}
			break;
	}
	return 0;
}

static void
release(client *c, const char *key, lockqc_handle *h)
{
	switch (c->sys)
	{
		case SYS_ADVISORY:
			exec1(c->pg, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key);
			break;
		case SYS_LOCKQ:
			exec1(c->pg, "SELECT lockq_release($1)", key);
			break;
		case SYS_LIBRARY:
			if (lockqc_unlock(h) != LOCKQC_OK)
			{
				fprintf(stderr, "lockqc_unlock failed\n");
				exit(1);
			}
			break;
	}
}

static void *
client_main(void *arg)
{
	client	   *c = arg;
	char		key[64];
	int64_t		n = 0;
	lockqc_handle *wh = NULL;

	/*
	 * Warm up outside the measurement: a new session's first lockq call
	 * attaches to its request slot, which may first have to be freed by the
	 * lock server from the session that used it before (the clients of the
	 * previous point have just disconnected).
	 */
	snprintf(key, sizeof(key), "warmup:%d", c->id);
	(void) acquire(c, key, &wh);
	release(c, key, wh);

	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stop_flag))
	{
		lockqc_handle *h = NULL;
		int64_t		t0;
		int64_t		t1;
		int64_t		arrival;

		if (c->contended)
			snprintf(key, sizeof(key), "hot");
		else
			snprintf(key, sizeof(key), "u:%d:%" PRId64, c->id, n++);

		t0 = now_us();
		arrival = acquire(c, key, &h);
		t1 = now_us();

		if (c->contended)
		{
			if (atomic_fetch_add(&inside, 1) != 0)
				atomic_fetch_add(&violations, 1);
			pthread_mutex_lock(&ev_mu);
			if (nevents < MAX_EVENTS)
			{
				events[nevents].arrival = c->sys == SYS_LIBRARY ? t0 : arrival;
				events[nevents].wait_start = t0;
				events[nevents].acquired = t1;
				events[nevents].client = c->id;
			}
			atomic_fetch_sub(&inside, 1);
			if (nevents < MAX_EVENTS)
				events[nevents].release_start = now_us();
			nevents++;
			pthread_mutex_unlock(&ev_mu);
		}
		else if (c->nlat < c->cap)
			c->lat[c->nlat++] = t1 - t0;

		release(c, key, h);
		c->count++;
	}
	return NULL;
}

/*
 * measure runs one point: nclients of sys, contended or not, for seconds.
 */
/*
 * context_switches reads the machine's context-switch count (the ctxt line
 * of /proc/stat), or -1.  Per operation, it tells how many times the
 * kernel switched processes for one lock hand-off or pair.
 */
static int64_t
context_switches(void)
{
	FILE	   *f = fopen("/proc/stat", "r");
	char		line[256];
	int64_t		n = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		if (strncmp(line, "ctxt ", 5) == 0)
		{
			n = strtoll(line + 5, NULL, 10);
			break;
		}
	}
	fclose(f);
	return n;
}

static point_result
measure(bench_sys sys, int nclients, bool contended)
{
	client	   *cl = calloc(nclients, sizeof(client));
	pthread_t  *th = calloc(nclients, sizeof(pthread_t));
	point_result r;
	int64_t		t_start;
	int64_t		t_end;
	int64_t		cs_start;
	int64_t		cs_end;
	int64_t		total = 0;
	int			i;

	memset(&r, 0, sizeof(r));
	atomic_store(&stop_flag, false);
	atomic_store(&inside, 0);
	atomic_store(&violations, 0);
	nevents = 0;
	pthread_barrier_init(&start_barrier, NULL, nclients + 1);

	for (i = 0; i < nclients; i++)
	{
		cl[i].id = i;
		cl[i].sys = sys;
		cl[i].contended = contended;
		if (sys == SYS_LIBRARY)
		{
			char	   *err = NULL;

			cl[i].lc = lockqc_connect(conninfo, &err);
			if (cl[i].lc == NULL)
			{
				fprintf(stderr, "lockqc_connect: %s\n", err);
				exit(1);
			}
		}
		else
			cl[i].pg = connect_db();
		if (!contended)
		{
			cl[i].cap = 1000000;
			cl[i].lat = malloc(sizeof(int64_t) * cl[i].cap);
		}
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
	pthread_barrier_wait(&start_barrier);
	t_start = now_us();
	cs_start = context_switches();
	usleep((useconds_t) (seconds * 1e6));
	atomic_store(&stop_flag, true);
	t_end = now_us();
	cs_end = context_switches();
	for (i = 0; i < nclients; i++)
		pthread_join(th[i], NULL);

	for (i = 0; i < nclients; i++)
		total += cl[i].count;
	r.ops = total;
	r.rate = total / ((t_end - t_start) / 1e6);
	r.cs_per_op = total > 0 && cs_start >= 0 && cs_end >= 0 ?
		(double) (cs_end - cs_start) / total : 0;
	r.violations = atomic_load(&violations);

	if (!contended)
	{
		int64_t		n = 0;
		int64_t    *all;

		for (i = 0; i < nclients; i++)
			n += cl[i].nlat;
		all = malloc(sizeof(int64_t) * (n + 1));
		n = 0;
		for (i = 0; i < nclients; i++)
		{
			memcpy(all + n, cl[i].lat, sizeof(int64_t) * cl[i].nlat);
			n += cl[i].nlat;
		}
		qsort(all, n, sizeof(int64_t), cmp_i64);
		r.lat_p50 = pct(all, n, 0.50);
		r.lat_p99 = pct(all, n, 0.99);
		free(all);
	}
	else
	{
		int64_t		n = nevents < MAX_EVENTS ? nevents : MAX_EVENTS;
		int64_t    *handoff = malloc(sizeof(int64_t) * (n + 1));
		int64_t    *wait = malloc(sizeof(int64_t) * (n + 1));
		int64_t		nh = 0;
		int64_t		k;
		double		sum = 0;
		double		sumsq = 0;
		int64_t    *order;

		for (k = 0; k < n; k++)
		{
			wait[k] = events[k].acquired - events[k].wait_start;
			if (k > 0)
			{
				int64_t		h = events[k].acquired - events[k - 1].release_start;

				if (h >= 0)
					handoff[nh++] = h;
			}
		}
		qsort(handoff, nh, sizeof(int64_t), cmp_i64);
		r.lat_p50 = pct(handoff, nh, 0.50);
		r.lat_p99 = pct(handoff, nh, 0.99);
		qsort(wait, n, sizeof(int64_t), cmp_i64);
		r.wait_p99 = pct(wait, n, 0.99);
		r.wait_max = n > 0 ? (double) wait[n - 1] : 0;

		/*
		 * FIFO inversions: for each grant, the waits still pending that
		 * started more than the margin before it did.  Events are in grant
		 * order; an earlier starter granted later is an inversion.  With
		 * the client's own previous release as a barrier, a client has at
		 * most one wait in flight.
		 */
		order = malloc(sizeof(int64_t) * (n + 1));
		for (k = 0; k < n; k++)
			order[k] = events[k].arrival;
		for (k = 0; k < n; k++)
		{
			int64_t		j;
			int64_t		margin = INVERSION_MARGIN_US;

			/* look ahead a bounded window: later grants that arrived earlier */
			for (j = k + 1; j < n && j < k + 2 * nclients + 2; j++)
			{
				if (order[j] + margin < order[k])
					r.inversions++;
			}
		}
		free(order);

		r.count_min = INT64_MAX;
		for (i = 0; i < nclients; i++)
		{
			sum += cl[i].count;
			sumsq += (double) cl[i].count * cl[i].count;
			if (cl[i].count < r.count_min)
				r.count_min = cl[i].count;
			if (cl[i].count > r.count_max)
				r.count_max = cl[i].count;
		}
		r.jain = sumsq > 0 ? (sum * sum) / (nclients * sumsq) : 0;
		free(handoff);
		free(wait);
	}

	for (i = 0; i < nclients; i++)
	{
		if (cl[i].lc)
			lockqc_disconnect(cl[i].lc);
		if (cl[i].pg)
			PQfinish(cl[i].pg);
		free(cl[i].lat);
	}
	pthread_barrier_destroy(&start_barrier);
	free(cl);
	free(th);
	return r;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* median over rounds of each field separately */
static point_result
median_of(point_result *rs, int n)
{
	point_result m;
	double		v[64];
	int			i;

#define MED(field) \
	do { for (i = 0; i < n; i++) v[i] = (double) rs[i].field; \
		 qsort(v, n, sizeof(double), cmp_double); m.field = v[n / 2]; } while (0)
	memset(&m, 0, sizeof(m));
	MED(rate);
	MED(lat_p50);
	MED(lat_p99);
	MED(wait_p99);
	MED(wait_max);
	MED(jain);
	MED(count_min);
	MED(count_max);
	MED(ops);
	MED(cs_per_op);
#undef MED
	/* correctness counts: the worst round */
	for (i = 0; i < n; i++)
	{
		if (rs[i].inversions > m.inversions)
			m.inversions = rs[i].inversions;
		if (rs[i].violations > m.violations)
			m.violations = rs[i].violations;
	}
	return m;
}

static void
reset_server(void)
{
	PGconn	   *pg = connect_db();

	exec1(pg, "SELECT count(lockq_force_release(lock_id)) FROM lockq_locks", NULL);
	exec1(pg, "SELECT pg_advisory_unlock_all()", NULL);
	PQfinish(pg);
}

/*
 * run_point measures the systems alternately, rounds times each.
 */
static void
run_point(const char *scenario, int nclients, bool contended,
		  const bench_sys *systems, int nsys, point_result *out)
{
	point_result rs[8][16];
	int			r;
	int			s;

	for (r = 0; r < rounds; r++)
	{
		for (s = 0; s < nsys; s++)
		{
			/* alternate which system goes first */
			int			which = (r % 2 == 0) ? s : nsys - 1 - s;

			reset_server();
			rs[which][r] = measure(systems[which], nclients, contended);
		}
	}
	for (s = 0; s < nsys; s++)
		out[s] = median_of(rs[s], rounds);

	for (s = 0; s < nsys; s++)
	{
		point_result *p = &out[s];

		if (contended)
			printf("| %s | %s | %d | %.0f | %.0f | %.0f | %.1f | %.1f | %.4f | %" PRId64 " | %" PRId64 " | %" PRId64 "-%" PRId64 " | %.1f |\n",
				   scenario, sys_name[systems[s]], nclients, p->rate,
				   p->lat_p50, p->lat_p99, p->wait_p99 / 1000.0,
				   p->wait_max / 1000.0, p->jain, p->inversions,
				   p->violations, p->count_min, p->count_max, p->cs_per_op);
		else
			printf("| %s | %s | %d | %.0f | %.0f | %.0f | | | | | %" PRId64 " | | %.1f |\n",
				   scenario, sys_name[systems[s]], nclients, p->rate,
				   p->lat_p50, p->lat_p99, p->violations, p->cs_per_op);
	}
	if (nsys == 2 && out[0].rate > 0)
		printf("| %s | **%s / advisory** | %d | **%.2fx** | | | | | | | | | |\n",
			   scenario, sys_name[systems[1]], nclients, out[1].rate / out[0].rate);
	fflush(stdout);
}

/*
 * expiry: a holder takes the lock with a short lease and vanishes; a
 * waiter is blocked.  Lag = waiter's grant - holder's lease end, both
 * from the server.
 */
static void
run_expiry(int n, double *p50, double *p99)
{
	PGconn	   *mon = connect_db();
	PGconn	   *w = connect_db();
	int64_t    *lag = malloc(sizeof(int64_t) * n);
	int			i;

	for (i = 0; i < n; i++)
	{
		char		key[32];
		const char *params[1] = {key};
		PGresult   *res;
		int64_t		expires;

		snprintf(key, sizeof(key), "exp:%d", i);
		exec1(mon, "SELECT lockq_try($1, 'vanished', '200 ms')", key);
		/* a new statement: its snapshot sees the grant */
		res = PQexecParams(mon,
						   "SELECT (extract(epoch FROM expires) * 1000000)::int8 FROM lockq_locks WHERE lock_id = $1",
						   1, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			fprintf(stderr, "expiry: the grant is not in lockq_locks: %s",
					PQresultErrorMessage(res));
			exit(1);
		}
		expires = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		exec1(w, "SELECT lockq_get($1, 'next', '10 s')", key);
		res = PQexecParams(w,
						   "SELECT (extract(epoch FROM acquired) * 1000000)::int8 FROM lockq_locks WHERE lock_id = $1",
						   1, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			fprintf(stderr, "expiry: %s", PQresultErrorMessage(res));
			exit(1);
		}
		lag[i] = strtoll(PQgetvalue(res, 0, 0), NULL, 10) - expires;
		PQclear(res);
		exec1(w, "SELECT lockq_release($1, 'next')", key);
	}
	qsort(lag, n, sizeof(int64_t), cmp_i64);
	*p50 = pct(lag, n, 0.5);
	*p99 = pct(lag, n, 0.99);
	free(lag);
	PQfinish(w);
	PQfinish(mon);
}

static bool
wanted(const char *only, const char *name)
{
	return only == NULL || strstr(only, name) != NULL;
}

int
main(int argc, char **argv)
{
	static const bench_sys both[] = {SYS_ADVISORY, SYS_LOCKQ};
	static const bench_sys lib[] = {SYS_ADVISORY, SYS_LIBRARY};
	const char *only = NULL;
	bool		quick = false;
	int			prof_clients = 0;
	bench_sys	prof_sys = SYS_LOCKQ;
	int			uncont[] = {1, 4, 16};
	int			cont[] = {2, 16, 64, 256};
	int			libc[] = {2, 16, 64};
	point_result res[2];
	point_result c2_lockq = {0};
	double		exp50;
	double		exp99;
	size_t		i;

	for (i = 1; i < (size_t) argc; i++)
	{
		if (strcmp(argv[i], "--quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < (size_t) argc)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < (size_t) argc)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--only") == 0 && i + 1 < (size_t) argc)
			only = argv[++i];
		else if (strcmp(argv[i], "--profile") == 0 && i + 1 < (size_t) argc)
			prof_clients = atoi(argv[++i]);
		else if (strcmp(argv[i], "--system") == 0 && i + 1 < (size_t) argc)
		{
			i++;
			if (strcmp(argv[i], "advisory") == 0)
				prof_sys = SYS_ADVISORY;
			else if (strcmp(argv[i], "liblockq") == 0)
				prof_sys = SYS_LIBRARY;
			else
				prof_sys = SYS_LOCKQ;
		}
		else if (argv[i][0] == '-')
		{
			fprintf(stderr, "usage: %s [--quick] [--rounds N] [--seconds S] [--only LIST] [--profile CLIENTS [--system advisory|lockq|liblockq]] CONNINFO\n", argv[0]);
			return 2;
		}
		else
			conninfo = argv[i];
	}
	if (conninfo == NULL)
		conninfo = "";
	if (quick)
	{
		rounds = 1;
		seconds = 1.5;
	}
	if (rounds < 1 || rounds > 15)
		rounds = 3;
	events = malloc(sizeof(cs_event) * MAX_EVENTS);

	/* --profile C: one system, contended, C clients, one round (for perf) */
	if (prof_clients > 0)
	{
		point_result p = measure(prof_sys, prof_clients, true);

		printf("%s contended %d clients: %.0f hand-offs/s, hand-off p50 %.0f us, %.1f context switches per hand-off\n",
			   sys_name[prof_sys], prof_clients, p.rate, p.lat_p50, p.cs_per_op);
		return 0;
	}

	printf("rounds per point: %d, %.1f s each; medians; advisory and lockq alternate\n\n", rounds, seconds);
	printf("| scenario | system | clients | ops/s | lat p50 µs | lat p99 µs | wait p99 ms | wait max ms | Jain | FIFO inv. | ME viol. | per-client | cs/op |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

	if (wanted(only, "uncontended"))
		for (i = 0; i < sizeof(uncont) / sizeof(uncont[0]); i++)
			run_point("uncontended", uncont[i], false, both, 2, res);
	if (wanted(only, "contended"))
		for (i = 0; i < sizeof(cont) / sizeof(cont[0]); i++)
		{
			run_point("contended", cont[i], true, both, 2, res);
			if (cont[i] == 2)
				c2_lockq = res[1];
			if (cont[i] == 256 && c2_lockq.rate > 0)
				printf("|  | lockq 256 vs 2 clients | | %.2fx | | | | | | | | | |\n",
					   res[1].rate / c2_lockq.rate);
		}
	if (wanted(only, "library"))
		for (i = 0; i < sizeof(libc) / sizeof(libc[0]); i++)
			run_point("library", libc[i], true, lib, 2, res);
	if (wanted(only, "expiry"))
	{
		run_expiry(quick ? 10 : 30, &exp50, &exp99);
		printf("\nexpiry lag (lease end -> next grant): p50 %.2f ms, p99 %.2f ms\n",
			   exp50 / 1000.0, exp99 / 1000.0);
	}
	free(events);
	return 0;
}

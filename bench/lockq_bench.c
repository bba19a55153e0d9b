/*-------------------------------------------------------------------------
 *
 * lockq_bench.c
 *		lockq against pg_advisory_lock, side by side.
 *
 *	lockq_bench [--quick] [--rounds N] [--seconds S] [--only LIST]
 *				[--data FILE] [--pgbench PATH] [--fsync-us US] CONNINFO
 *
 * Every client is a thread with its own connection.  For each point the
 * systems run alternately, several rounds, and the medians are reported:
 * a Markdown table on stdout and, with --data, a table for gnuplot
 * (write_data; bench/plot.gp draws it).
 *
 * Systems: pg_advisory_lock (session level); lockq session-bound
 * (lockq_get(lock), owner NULL: no WAL); lockq leased (lockq_get(lock,
 * owner, '30 s') and lockq_release(lock, owner, token): the lease lockq
 * exists for); liblockq (the C library's client-side wait).
 *
 * Scenarios:
 *	uncontended C   each client locks and releases its own fresh key;
 *					pairs/s and acquire latency; 1 to 256 clients (the
 *					targets on many cores are at 64 and 256)
 *	contended C     all clients on one key: acquire, critical section,
 *					release; hand-offs/s, hand-off latency (release sent ->
 *					next holder running), waits, per-client counts, Jain's
 *					fairness index, FIFO inversions, mutual exclusion
 *	jobs C          a job runner: 100 job keys, C workers; each picks a
 *					random key, tries it (pg_try_advisory_lock / lockq_try),
 *					and if it got it, runs a fenced UPDATE of the job's row
 *					(lockq: ... AND lockq_holds(key, token)) and releases;
 *					jobs/s
 *	scaling C       leased, 1 to 64 clients, each on a key of its own,
 *					again and again: grant/release pairs/s of one server
 *					(the ceiling of one primary), beside pg_advisory_lock
 *					(a fresh key per pair, as in uncontended, costs a
 *					leased grant a WAL flush: a lock's first short lease
 *					makes it unsettled, doc/design/durability.md, "Unsettled locks")
 *	expiry          a holder vanishes; lag from its lease end to the next
 *					waiter's grant (lockq only: advisory locks have no leases)
 *	library C       the contended scenario through liblockq: waiting in the
 *					backend (lockq_await) and, told not to, on NOTIFY
 *	durable C       lockq.synchronous_grants = on (set for the scenario
 *					with ALTER SYSTEM): leased hand-offs on one lock against
 *					pgbench's UPDATEs of one shared row, and (durable_keys)
 *					leased pairs on a key of their own against two UPDATEs
 *					of a row of their own, synchronous_commit = on both; WAL
 *					flushes per op, and ops/s against one chain of flushes,
 *					1 / fdatasync (--fsync-us, from pg_test_fsync); see
 *					measure_pgbench
 *
 * --only takes a list of scenario names (durable runs both durable parts).
 * For each point the CPU time the cluster's processes and the benchmark
 * itself used is split: the lock server, the backends (and PostgreSQL's
 * other processes), the benchmark's clients; the share of the machine's
 * busy time spent in the kernel; and the share used by other processes
 * than these (other work on the machine: then the point is disturbed).
 * See cpu_sample.  Per operation, it says where the next speed-up must
 * come from.
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
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"

#define INVERSION_MARGIN_US	10000
#define MAX_EVENTS			2000000

/*
 * A contended point keeps the distribution of its waits as the waits at
 * the fractions 0, 1/WAIT_STEPS, ..., 1 of them (1 % apart; the last is
 * the longest wait), for the plot.
 */
#define WAIT_STEPS			100

typedef enum
{
	SYS_ADVISORY,
	SYS_LOCKQ,					/* session-bound: lockq_get(lock) */
	SYS_LEASED,					/* an owner and a lease, released by token */
	SYS_LIBRARY,				/* liblockq: a single wait per connection
								 * waits in the backend (lockq_await) */
	SYS_LIBNOTIFY,				/* liblockq told to wait on NOTIFY and
								 * heartbeats (LOCKQC_NO_AWAIT=1), as it
								 * does with several waits per connection,
								 * behind a pooler, or on extension 1.1 */
	SYS_PGBENCH					/* durable: pgbench's single-row UPDATEs */
} bench_sys;

static const char *sys_name[] = {"advisory", "lockq session", "lockq leased", "liblockq", "liblockq NOTIFY", "pgbench"};

/* the systems' names in the data file (--data): one word each */
static const char *sys_word[] = {"advisory", "session", "leased", "liblockq", "libnotify", "pgbench"};

/* liblockq in either mode */
static bool
is_library(bench_sys sys)
{
	return sys == SYS_LIBRARY || sys == SYS_LIBNOTIFY;
}

typedef enum
{
	SCEN_UNCONTENDED,			/* a fresh key per client and pair */
	SCEN_OWNKEY,				/* one key per client, again and again */
	SCEN_CONTENDED,
	SCEN_JOBS
} bench_scen;

#define JOB_KEYS			100

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
	double		cpu_server;		/* CPU µs per op: the lock server */
	double		cpu_backends;	/* the cluster's other processes */
	double		cpu_client;		/* the benchmark's own threads */
	double		cpu_kernel;		/* the machine's busy time in the kernel, % */
	double		cpu_foreign;	/* the machine's busy time used by others
								 * than the cluster and the benchmark, % */
	double		misses;			/* jobs: tries that found the key taken, % */
	double		wal_per_op;		/* durable: WAL flushes (pg_stat_wal.wal_sync)
								 * per op */
	double		wait_at[WAIT_STEPS + 1];	/* contended: waits, µs, see
											 * WAIT_STEPS */
} point_result;

/* every point measured, for the data file */
typedef struct saved_point
{
	const char *scenario;
	bench_sys	sys;
	bench_scen	scen;
	int			clients;
	point_result r;
} saved_point;

#define MAX_SAVED			128
static saved_point saved[MAX_SAVED];
static int	nsaved;

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

/* the durable scenarios */
static const char *pgbench_path = "pgbench";
static double fsync_us;			/* pg_test_fsync's fdatasync time, 0: unknown */
static bool count_wal;			/* measure WAL flushes per op */

/*
 * A process reports its WAL statistics at most once a second; one that
 * was held back then waits for its next report until it has something to
 * do again, or 10 s (PostgreSQL's PGSTAT_IDLE_INTERVAL).  See wal_flushes.
 */
#define STATS_SETTLE_US		1100000

/* shared by the clients of one measurement */
static _Atomic bool stop_flag;
static pthread_barrier_t ready_barrier;
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
	bench_scen	scen;
	PGconn	   *pg;
	lockqc_conn *lc;
	char		owner[32];		/* leased: this client's owner name */
	char		token[32];		/* leased: the token of the current grant */
	unsigned int seed;			/* jobs: rand_r */
	int64_t		misses;
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
exec_arrival(PGconn *pg, const char *sql, int nparams, const char *const *params,
			 char *token, size_t tokenlen)
{
	PGresult   *res = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
	int64_t		t;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "query \"%s\" failed: %s", sql, PQresultErrorMessage(res));
		exit(1);
	}
	t = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	if (token != NULL)
		snprintf(token, tokenlen, "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
	return t;
}

/*
 * exec_value runs a one-row, one-column statement and copies its value
 * (empty for NULL) into out.
 */
static void
exec_value(PGconn *pg, const char *sql, int nparams, const char *const *params,
		   char *out, size_t outlen)
{
	PGresult   *res = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "query \"%s\" failed: %s", sql, PQresultErrorMessage(res));
		exit(1);
	}
	snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
}

static int64_t
acquire(client *c, const char *key, lockqc_handle **h)
{
	const char *params[2] = {key, c->owner};

	switch (c->sys)
	{
		case SYS_ADVISORY:
			return exec_arrival(c->pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8,"
								" pg_advisory_lock(hashtextextended($1, 0))", 1, params, NULL, 0);
		case SYS_LOCKQ:
			return exec_arrival(c->pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8,"
								" lockq.lockq_get($1)", 1, params, NULL, 0);
		case SYS_LEASED:
			return exec_arrival(c->pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8,"
								" lockq.lockq_get($1, $2, '30 s')", 2, params,
								c->token, sizeof(c->token));
		case SYS_LIBRARY:
		case SYS_LIBNOTIFY:
			if (lockqc_lock(c->lc, key, NULL, h) != LOCKQC_OK)
			{
				fprintf(stderr, "lockqc_lock: %s\n", lockqc_errmsg(c->lc));
				exit(1);
			}
			break;
		case SYS_PGBENCH:
			abort();			/* pgbench runs on its own */
	}
	return 0;
}

static void
release(client *c, const char *key, lockqc_handle *h)
{
	const char *params[3] = {key, c->owner, c->token};
	char		ok[8];

	switch (c->sys)
	{
		case SYS_ADVISORY:
			exec1(c->pg, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key);
			break;
		case SYS_LOCKQ:
			exec1(c->pg, "SELECT lockq.lockq_release($1)", key);
			break;
		case SYS_LEASED:
			exec_value(c->pg, "SELECT lockq.lockq_release($1, $2, $3::int8)", 3, params,
					   ok, sizeof(ok));
			if (strcmp(ok, "t") != 0)
			{
				fprintf(stderr, "lockq_release(%s, %s, %s) returned %s\n", key,
						c->owner, c->token, ok);
				exit(1);
			}
			break;
		case SYS_LIBRARY:
		case SYS_LIBNOTIFY:
			if (lockqc_unlock(h) != LOCKQC_OK)
			{
				fprintf(stderr, "lockqc_unlock failed\n");
				exit(1);
			}
			break;
		case SYS_PGBENCH:
			abort();
	}
}

/*
 * job_step is one try of the job runner: a random job key; if the try gets
 * it, the job's row is updated (fenced, for lockq) and the key released.
 * Returns whether the job ran.
 */
static bool
job_step(client *c)
{
	char		key[32];
	char		id[16];
	char		got[32];
	const char *params[3] = {key, c->owner, c->token};
	const char *upd[3] = {id, key, c->token};
	int			k = (int) (rand_r(&c->seed) % JOB_KEYS);
	PGresult   *res;

	snprintf(key, sizeof(key), "job:%d", k);
	snprintf(id, sizeof(id), "%d", k);
	switch (c->sys)
	{
		case SYS_ADVISORY:
			exec_value(c->pg, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", 1, params,
					   got, sizeof(got));
			if (strcmp(got, "t") != 0)
				return false;
			res = PQexecParams(c->pg, "UPDATE bench_jobs SET n = n + 1 WHERE id = $1::int",
							   1, NULL, upd, NULL, NULL, 0);
			break;
		case SYS_LOCKQ:
		case SYS_LEASED:
			if (c->sys == SYS_LOCKQ)
				exec_value(c->pg, "SELECT lockq.lockq_try($1)", 1, params,
						   c->token, sizeof(c->token));
			else
				exec_value(c->pg, "SELECT lockq.lockq_try($1, $2, '30 s')", 2, params,
						   c->token, sizeof(c->token));
			if (c->token[0] == '\0')
				return false;
			res = PQexecParams(c->pg, "UPDATE bench_jobs SET n = n + 1"
							   " WHERE id = $1::int AND lockq.lockq_holds($2, $3::int8)",
							   3, NULL, upd, NULL, NULL, 0);
			break;
		default:
			fprintf(stderr, "jobs: no such system\n");
			exit(1);
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK || strcmp(PQcmdTuples(res), "1") != 0)
	{
		fprintf(stderr, "jobs: the fenced update of %s did not go through: %s%s\n", key,
				PQcmdTuples(res), PQresultErrorMessage(res));
		exit(1);
	}
	PQclear(res);
	if (c->sys == SYS_ADVISORY)
		exec1(c->pg, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key);
	else
		release(c, key, NULL);
	return true;
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

	pthread_barrier_wait(&ready_barrier);
	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stop_flag))
	{
		lockqc_handle *h = NULL;
		int64_t		t0;
		int64_t		t1;
		int64_t		arrival;

		if (c->scen == SCEN_JOBS)
		{
			if (job_step(c))
				c->count++;
			else
				c->misses++;
			continue;
		}
		if (c->scen == SCEN_CONTENDED)
			snprintf(key, sizeof(key), "hot");
		else if (c->scen == SCEN_OWNKEY)
			snprintf(key, sizeof(key), "own:%d", c->id);
		else
			snprintf(key, sizeof(key), "u:%d:%" PRId64, c->id, n++);

		t0 = now_us();
		arrival = acquire(c, key, &h);
		t1 = now_us();

		if (c->scen == SCEN_CONTENDED)
		{
			if (atomic_fetch_add(&inside, 1) != 0)
				atomic_fetch_add(&violations, 1);
			pthread_mutex_lock(&ev_mu);
			if (nevents < MAX_EVENTS)
			{
				events[nevents].arrival = is_library(c->sys) ? t0 : arrival;
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

/*
 * CPU time used by the cluster's processes and by this benchmark.
 *
 * Not from the utime and stime of /proc/PID/stat: with tick-based
 * accounting (CONFIG_TICK_CPU_ACCOUNTING) those are sampled at the timer
 * tick (10 ms) and rounded down per process, and a backend that runs a few
 * milliseconds in a 3 s window mostly gains nothing there.  At 256 clients
 * every backend runs that little, and their sum stayed near zero although
 * they used most of the machine.  /proc/PID/schedstat's first field is the
 * scheduler's own run time of the process, in nanoseconds, exact.  It has
 * no user/kernel split; the kernel's share comes from the machine's tick
 * counts in /proc/stat (every CPU, every tick: 600 samples in 3 s on 2
 * cores), which on an otherwise quiet machine are the cluster's and the
 * benchmark's.  Against the run time of those, the same counts say how
 * much of the busy time went to other processes (others %: sampled, so
 * give or take a few %; pgbench's own processes count as others).
 */
typedef struct cpu_sample
{
	int64_t		server_ns;		/* the lock server */
	int64_t		other_ns;		/* the cluster's other processes */
	int64_t		self_ns;		/* this benchmark, all its threads */
	int64_t		busy_ticks;		/* the machine: user, nice, system, irq, softirq */
	int64_t		kernel_ticks;	/* the machine: system, irq, softirq */
} cpu_sample;

static int	postmaster_pid;
static int	server_pids[32];	/* the lock servers (lockq.lock_servers) */
static int	nserver_pids;

static bool
is_server_pid(int pid)
{
	int			i;

	for (i = 0; i < nserver_pids; i++)
		if (server_pids[i] == pid)
			return true;
	return false;
}

/*
 * read_stat reads the parent pid and the user and system CPU ticks of a
 * process from /proc/PID/stat; false if it is gone.
 */
static bool
read_stat(const char *path, int *ppid, int64_t *utime, int64_t *stime)
{
	FILE	   *f = fopen(path, "r");
	char		buf[1024];
	char	   *p;
	bool		ok = false;

	if (f == NULL)
		return false;
	if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL)
	{
		long long	pp;
		unsigned long long ut;
		unsigned long long st;

		/* after "pid (comm)": state ppid pgrp session tty tpgid flags
		 * minflt cminflt majflt cmajflt utime stime */
		if (sscanf(p + 2, "%*c %lld %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				   &pp, &ut, &st) == 3)
		{
			*ppid = (int) pp;
			*utime = (int64_t) ut;
			*stime = (int64_t) st;
			ok = true;
		}
	}
	fclose(f);
	return ok;
}

/*
 * run_time_ns is the CPU time of a single-threaded process (PostgreSQL's
 * are) from /proc/PID/schedstat, or, where that is missing, from the
 * ticks of /proc/PID/stat.
 */
static int64_t
run_time_ns(int pid, int64_t utime, int64_t stime)
{
	char		path[64];
	FILE	   *f;
	unsigned long long ns;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	f = fopen(path, "r");
	if (f != NULL)
	{
		bool		ok = fscanf(f, "%llu", &ns) == 1;

		fclose(f);
		if (ok)
			return (int64_t) ns;
	}
	return (utime + stime) * (1000000000 / sysconf(_SC_CLK_TCK));
}

/* machine_ticks reads the busy and the kernel ticks of all CPUs. */
static void
machine_ticks(int64_t *busy, int64_t *kernel)
{
	FILE	   *f = fopen("/proc/stat", "r");
	unsigned long long user,
				nice,
				sys,
				idle,
				iowait,
				irq,
				softirq;

	*busy = *kernel = 0;
	if (f == NULL)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu",
			   &user, &nice, &sys, &idle, &iowait, &irq, &softirq) == 7)
	{
		*busy = (int64_t) (user + nice + sys + irq + softirq);
		*kernel = (int64_t) (sys + irq + softirq);
	}
	fclose(f);
}

/*
 * sample_cpu adds up the CPU time of the lock server, of the other
 * children of the postmaster (backends, WAL writer, ...) and of this
 * process.  Processes that exit between two samples are not counted, so
 * the clients' connections stay open until after the second sample.
 */
static cpu_sample
sample_cpu(void)
{
	cpu_sample	t;
	DIR		   *d;
	struct dirent *e;
	struct timespec ts;

	memset(&t, 0, sizeof(t));
	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
		t.self_ns = (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
	machine_ticks(&t.busy_ticks, &t.kernel_ticks);
	if (postmaster_pid <= 0 || (d = opendir("/proc")) == NULL)
		return t;
	while ((e = readdir(d)) != NULL)
	{
		char		path[300];
		int			pid = atoi(e->d_name);
		int			ppid;
		int64_t		u;
		int64_t		k;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if (!read_stat(path, &ppid, &u, &k) || ppid != postmaster_pid)
			continue;
		if (is_server_pid(pid))
			t.server_ns += run_time_ns(pid, u, k);
		else
			t.other_ns += run_time_ns(pid, u, k);
	}
	closedir(d);
	return t;
}

/*
 * find_server learns the pids of the lock servers, all of them
 * (lockq.lock_servers), and of the postmaster (the benchmark runs on the
 * server's machine, as make bench does; elsewhere the CPU columns stay
 * empty).
 */
static void
find_server(void)
{
	PGconn	   *pg = connect_db();
	char		pids[1024];
	char		path[64];
	char	   *p;
	char	   *end;
	int64_t		u;
	int64_t		k;

	exec_value(pg, "SELECT coalesce(string_agg(pid::text, ' '), '') FROM pg_stat_activity"
			   " WHERE backend_type = 'lockq lock server'", 0, NULL, pids, sizeof(pids));
	PQfinish(pg);
	nserver_pids = 0;
	for (p = pids; nserver_pids < 32; p = end)
	{
		long		pid = strtol(p, &end, 10);

		if (end == p)
			break;
		server_pids[nserver_pids++] = (int) pid;
	}
	postmaster_pid = 0;
	if (nserver_pids > 0)
	{
		snprintf(path, sizeof(path), "/proc/%d/stat", server_pids[0]);
		if (!read_stat(path, &postmaster_pid, &u, &k))
			postmaster_pid = 0;
	}
}

/*
 * wal_flushes reads how often WAL has been flushed (pg_stat_wal.wal_sync:
 * by the lock server, the backends and the WAL writer).  Backends report
 * when they exit; the lock server's last flushes of a measurement may be
 * held back (STATS_SETTLE_US), so once a second has passed it is given a
 * request that writes nothing (a session-bound lockq_try and its release),
 * after which it reports them.
 */
static int64_t
wal_flushes(void)
{
	PGconn	   *pg = connect_db();
	char		n[32];

	usleep(STATS_SETTLE_US);
	exec1(pg, "SELECT lockq.lockq_try('lockq_bench:report')", NULL);
	exec1(pg, "SELECT lockq.lockq_release('lockq_bench:report')", NULL);
	usleep(200000);
	exec_value(pg, "SELECT wal_sync FROM pg_stat_wal", 0, NULL, n, sizeof(n));
	PQfinish(pg);
	return strtoll(n, NULL, 10);
}

static point_result
measure(bench_sys sys, int nclients, bench_scen scen)
{
	client	   *cl = calloc(nclients, sizeof(client));
	pthread_t  *th = calloc(nclients, sizeof(pthread_t));
	point_result r;
	int64_t		t_start;
	int64_t		t_end;
	int64_t		cs_start;
	int64_t		cs_end;
	cpu_sample	cpu0;
	cpu_sample	cpu1;
	int64_t		total = 0;
	int64_t		misses = 0;
	int64_t		wal0 = 0;
	bool		contended = scen == SCEN_CONTENDED;
	int			i;

	memset(&r, 0, sizeof(r));
	atomic_store(&stop_flag, false);
	atomic_store(&inside, 0);
	atomic_store(&violations, 0);
	nevents = 0;
	pthread_barrier_init(&ready_barrier, NULL, nclients + 1);
	pthread_barrier_init(&start_barrier, NULL, nclients + 1);

	/*
	 * No thread of liblockq runs here (the last point's connections were
	 * closed and their threads joined), so nothing reads the environment
	 * while it is changed.
	 */
	if (sys == SYS_LIBNOTIFY)
		setenv("LOCKQC_NO_AWAIT", "1", 1);
	for (i = 0; i < nclients; i++)
	{
		cl[i].id = i;
		cl[i].sys = sys;
		cl[i].scen = scen;
		snprintf(cl[i].owner, sizeof(cl[i].owner), "bench-%d", i);
		cl[i].seed = (unsigned int) (i * 7919 + 17);
		if (is_library(sys))
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
		if (scen == SCEN_UNCONTENDED || scen == SCEN_OWNKEY)
		{
			cl[i].cap = 1000000;
			cl[i].lat = malloc(sizeof(int64_t) * cl[i].cap);
		}
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
	/* the clients have warmed up; they start together */
	pthread_barrier_wait(&ready_barrier);
	if (count_wal)
		wal0 = wal_flushes();
	pthread_barrier_wait(&start_barrier);
	t_start = now_us();
	cs_start = context_switches();
	cpu0 = sample_cpu();
	usleep((useconds_t) (seconds * 1e6));
	atomic_store(&stop_flag, true);
	t_end = now_us();
	cs_end = context_switches();
	cpu1 = sample_cpu();
	for (i = 0; i < nclients; i++)
		pthread_join(th[i], NULL);

	for (i = 0; i < nclients; i++)
	{
		total += cl[i].count;
		misses += cl[i].misses;
	}
	r.ops = total;
	r.rate = total / ((t_end - t_start) / 1e6);
	r.cs_per_op = total > 0 && cs_start >= 0 && cs_end >= 0 ?
		(double) (cs_end - cs_start) / total : 0;
	r.violations = atomic_load(&violations);
	r.misses = total + misses > 0 ? 100.0 * misses / (total + misses) : 0;
	if (total > 0)
	{
		int64_t		busy = cpu1.busy_ticks - cpu0.busy_ticks;

		r.cpu_server = (cpu1.server_ns - cpu0.server_ns) / 1000.0 / total;
		r.cpu_backends = (cpu1.other_ns - cpu0.other_ns) / 1000.0 / total;
		r.cpu_client = (cpu1.self_ns - cpu0.self_ns) / 1000.0 / total;
		r.cpu_kernel = busy > 0 ? 100.0 * (cpu1.kernel_ticks - cpu0.kernel_ticks) / busy : 0;
		if (busy > 0)
		{
			double		busy_ns = (double) busy * 1e9 / sysconf(_SC_CLK_TCK);
			double		ours = (double) (cpu1.server_ns - cpu0.server_ns) +
				(cpu1.other_ns - cpu0.other_ns) + (cpu1.self_ns - cpu0.self_ns);

			r.cpu_foreign = fmax(0.0, 100.0 * (1.0 - ours / busy_ns));
		}
	}

	if (scen == SCEN_UNCONTENDED || scen == SCEN_OWNKEY)
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
	else if (contended)
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
		for (k = 0; k <= WAIT_STEPS; k++)
			r.wait_at[k] = pct(wait, n, (double) k / WAIT_STEPS);

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
	unsetenv("LOCKQC_NO_AWAIT");
	if (count_wal && total > 0)
		r.wal_per_op = (double) (wal_flushes() - wal0) / total;
	pthread_barrier_destroy(&ready_barrier);
	pthread_barrier_destroy(&start_barrier);
	free(cl);
	free(th);
	return r;
}

/*
 * measure_pgbench runs pgbench for the durable scenarios, as the reference
 * for lockq's flushed grants: nclients clients (a thread each, like the
 * benchmark's), synchronous_commit = on, for seconds (rounded to whole
 * seconds, pgbench's unit), each transaction a single-row UPDATE of
 * bench_durable:
 *
 *	SCEN_CONTENDED		every client updates the same row.  This is what a
 *						hand-off of one lock is: each grant is a write to that
 *						lock's state, and it can only be made after the
 *						previous holder's release was; the row lock makes
 *						each UPDATE wait for the commit (and flush) of the
 *						one before, so these commits cannot share a flush.
 *	SCEN_OWNKEY			every client updates a row of its own, twice, in two
 *						transactions: the grant and the release of a lease on
 *						a key of its own.  Independent commits: PostgreSQL's
 *						group commit shares a flush among those that wait
 *						together.
 *
 * Returns the transactions (script runs) per second and WAL flushes per
 * run; pgbench's own CPU and its connections' are not split (they connect
 * and exit within the measurement).
 */
static point_result
measure_pgbench(int nclients, bench_scen scen)
{
	char		script[] = "/tmp/lockq_bench_pgbench.XXXXXX";
	const char *sql = scen == SCEN_CONTENDED ?
		"UPDATE bench_durable SET n = n + 1 WHERE id = 0;\n" :
		"UPDATE bench_durable SET n = n + 1 WHERE id = :client_id + 1;\n"
		"UPDATE bench_durable SET n = n + 1 WHERE id = :client_id + 1;\n";
	char		cstr[16];
	char		tstr[16];
	char		line[512];
	int			fd = mkstemp(script);
	int			pipefd[2];
	int			status;
	pid_t		pid;
	FILE	   *out;
	point_result r;
	int64_t		wal0 = 0;
	int64_t		done = -1;

	memset(&r, 0, sizeof(r));
	if (fd < 0 || write(fd, sql, strlen(sql)) != (ssize_t) strlen(sql) || close(fd) != 0)
	{
		perror(script);
		exit(1);
	}
	snprintf(cstr, sizeof(cstr), "%d", nclients);
	snprintf(tstr, sizeof(tstr), "%ld", lround(seconds) > 0 ? lround(seconds) : 1L);
	if (count_wal)
		wal0 = wal_flushes();
	if (pipe(pipefd) != 0 || (pid = fork()) < 0)
	{
		perror("pgbench");
		exit(1);
	}
	if (pid == 0)
	{
		/* the connection string is pgbench's database name, expanded */
		char	   *argv[] = {(char *) pgbench_path, "-n", "-M", "extended",
			"-c", cstr, "-j", cstr, "-T", tstr, "-f", script,
		(char *) conninfo, NULL};

		dup2(pipefd[1], 1);
		close(pipefd[0]);
		close(pipefd[1]);
		setenv("PGOPTIONS", "-c synchronous_commit=on", 1);
		execvp(pgbench_path, argv);
		perror(pgbench_path);
		_exit(127);
	}
	close(pipefd[1]);
	out = fdopen(pipefd[0], "r");
	while (fgets(line, sizeof(line), out) != NULL)
	{
		double		v;
		long long	n;

		if (sscanf(line, "tps = %lf", &v) == 1)
			r.rate = v;
		else if (sscanf(line, "number of transactions actually processed: %lld", &n) == 1)
			done = n;
	}
	fclose(out);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		WEXITSTATUS(status) != 0 || done < 0 || r.rate <= 0)
	{
		fprintf(stderr, "%s failed (-c %d, script %s)\n", pgbench_path, nclients, sql);
		exit(1);
	}
	unlink(script);
	r.ops = done;
	if (count_wal && done > 0)
		r.wal_per_op = (double) (wal_flushes() - wal0) / done;
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
	int			q;

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
	MED(cpu_server);
	MED(cpu_backends);
	MED(cpu_client);
	MED(cpu_kernel);
	MED(cpu_foreign);
	MED(misses);
	MED(wal_per_op);
	for (q = 0; q <= WAIT_STEPS; q++)
		MED(wait_at[q]);
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

	exec1(pg, "SELECT count(lockq.lockq_force_release(lock_id)) FROM lockq.lockq_locks", NULL);
	exec1(pg, "SELECT pg_advisory_unlock_all()", NULL);
	PQfinish(pg);
}

/* durable: is this one of the durable scenarios (its own table)? */
static bool
is_durable(const char *scenario)
{
	return strncmp(scenario, "durable", 7) == 0;
}

/* the name of a system in a scenario's rows */
static const char *
sys_label(const char *scenario, bench_scen scen, bench_sys sys)
{
	if (!is_durable(scenario))
		return sys_name[sys];
	if (sys == SYS_LEASED)
		return "lockq leased, synchronous_grants";
	return scen == SCEN_CONTENDED ? "pgbench: UPDATE one shared row" :
		"pgbench: 2 x UPDATE own row";
}

static void
print_row(const char *scenario, int nclients, bench_scen scen, bench_sys sys,
		  const point_result *p)
{
	const char *name = sys_label(scenario, scen, sys);
	char		cpu[96];

	snprintf(cpu, sizeof(cpu), "%.0f / %.0f / %.0f | %.0f / %.0f",
			 p->cpu_server, p->cpu_backends, p->cpu_client, p->cpu_kernel,
			 p->cpu_foreign);
	if (is_durable(scenario))
	{
		char		limit[32] = "";

		if (fsync_us > 0)
			snprintf(limit, sizeof(limit), "%.2fx", p->rate * fsync_us / 1e6);
		if (sys == SYS_PGBENCH)
			printf("| %s | %s | %d | %.0f | | | %.2f | %s | | | |\n",
				   scenario, name, nclients, p->rate, p->wal_per_op, limit);
		else
		{
			char		wait[32] = "";

			if (scen == SCEN_CONTENDED)
				snprintf(wait, sizeof(wait), "%.1f", p->wait_p99 / 1000.0);
			printf("| %s | %s | %d | %.0f | %.0f | %s | %.2f | %s | %.1f | %s |\n",
				   scenario, name, nclients, p->rate, p->lat_p50, wait,
				   p->wal_per_op, limit, p->cs_per_op, cpu);
		}
	}
	else if (scen == SCEN_CONTENDED)
		printf("| %s | %s | %d | %.0f | %.0f | %.0f | %.1f | %.1f | %.4f | %" PRId64 " | %" PRId64 " | %" PRId64 "-%" PRId64 " | %.1f | %s |\n",
			   scenario, name, nclients, p->rate,
			   p->lat_p50, p->lat_p99, p->wait_p99 / 1000.0,
			   p->wait_max / 1000.0, p->jain, p->inversions,
			   p->violations, p->count_min, p->count_max, p->cs_per_op, cpu);
	else if (scen == SCEN_JOBS)
		printf("| %s | %s | %d | %.0f | | | | | | | %" PRId64 " | %.0f %% missed | %.1f | %s |\n",
			   scenario, name, nclients, p->rate,
			   p->violations, p->misses, p->cs_per_op, cpu);
	else
		printf("| %s | %s | %d | %.0f | %.0f | %.0f | | | | | %" PRId64 " | | %.1f | %s |\n",
			   scenario, name, nclients, p->rate,
			   p->lat_p50, p->lat_p99, p->violations, p->cs_per_op, cpu);
}

/*
 * run_point measures the systems alternately, rounds times each, and
 * prints a row per system and the ratio of every other to the first
 * (pg_advisory_lock; pgbench in the durable scenarios).
 */
static void
run_point(const char *scenario, int nclients, bench_scen scen,
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
			if (systems[which] == SYS_PGBENCH)
				rs[which][r] = measure_pgbench(nclients, scen);
			else
				rs[which][r] = measure(systems[which], nclients, scen);
		}
	}
	for (s = 0; s < nsys; s++)
	{
		out[s] = median_of(rs[s], rounds);
		if (nsaved < MAX_SAVED)
		{
			saved[nsaved].scenario = scenario;
			saved[nsaved].sys = systems[s];
			saved[nsaved].scen = scen;
			saved[nsaved].clients = nclients;
			saved[nsaved].r = out[s];
			nsaved++;
		}
	}

	for (s = 0; s < nsys; s++)
		print_row(scenario, nclients, scen, systems[s], &out[s]);
	for (s = 1; s < nsys; s++)
		if (out[0].rate > 0)
		{
			int			c;

			printf("| %s | **%s / %s** | %d | **%.2fx** |",
				   scenario, sys_name[systems[s]], sys_name[systems[0]], nclients,
				   out[s].rate / out[0].rate);
			/* the other columns of the table, empty */
			for (c = 4; c < (is_durable(scenario) ? 11 : 15); c++)
				printf(" |");
			printf("\n");
		}
	fflush(stdout);
}

/*
 * set_synchronous_grants turns lockq.synchronous_grants on or back to its
 * default for the whole cluster, and gives the lock server a moment to
 * reload (the WAL flushes per op show whether it did).
 */
static void
set_synchronous_grants(bool on)
{
	PGconn	   *pg = connect_db();
	PGresult   *res;

	res = PQexec(pg, on ? "ALTER SYSTEM SET lockq.synchronous_grants = on" :
				 "ALTER SYSTEM RESET lockq.synchronous_grants");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "lockq.synchronous_grants: %s", PQresultErrorMessage(res));
		exit(1);
	}
	PQclear(res);
	exec1(pg, "SELECT pg_reload_conf()", NULL);
	PQfinish(pg);
	usleep(500000);
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

/* same_series: do two saved points belong to one line of a plot? */
static bool
same_series(const saved_point *a, const saved_point *b)
{
	return a->sys == b->sys && strcmp(a->scenario, b->scenario) == 0;
}

/*
 * write_data writes the medians of every point to path, a table of
 * whitespace-separated words for gnuplot (bench/plot.gp), one row per
 * value set; the first word says what the row is:
 *
 *	rate SCENARIO SYSTEM CLIENTS ops/s lat-p50-us lat-p99-us wait-p99-ms
 *		 cs/op cpu-server-us cpu-backends-us cpu-bench-us kernel-% wal/op
 *		 others-%
 *	wait SCENARIO SYSTEM CLIENTS wait-ms fraction
 *		 (a contended point's waits: that fraction of them took at most
 *		 wait-ms; the median over the rounds of each fraction's wait)
 *	limit durable fdatasync 0 ops/s
 *		 (1 / fdatasync: one chain of WAL flushes at most)
 *
 * The rows of one line of a plot (a scenario and system; for waits, also
 * the clients) are consecutive and in the order of clients: gnuplot breaks
 * a line where it skips rows.
 */
static void
write_data(const char *path)
{
	FILE	   *f = fopen(path, "w");
	int			i;
	int			j;
	int			k;

	if (f == NULL)
	{
		perror(path);
		exit(1);
	}
	fprintf(f, "# lockq_bench: %d round(s) of %.1f s per point, medians; the format is described in bench/lockq_bench.c (write_data)\n",
			rounds, seconds);
	for (i = 0; i < nsaved; i++)
	{
		/* a series is written at its first point, whole */
		for (j = 0; j < i && !same_series(&saved[j], &saved[i]); j++)
			;
		if (j < i)
			continue;
		for (j = i; j < nsaved; j++)
		{
			const saved_point *sp = &saved[j];
			const point_result *r = &sp->r;

			if (!same_series(sp, &saved[i]))
				continue;
			fprintf(f, "rate %s %s %d %.1f %.0f %.0f %.3f %.2f %.1f %.1f %.1f %.1f %.3f %.1f\n",
					sp->scenario, sys_word[sp->sys], sp->clients, r->rate,
					r->lat_p50, r->lat_p99, r->wait_p99 / 1000.0, r->cs_per_op,
					r->cpu_server, r->cpu_backends, r->cpu_client, r->cpu_kernel,
					r->wal_per_op, r->cpu_foreign);
		}
	}
	for (i = 0; i < nsaved; i++)
	{
		const saved_point *sp = &saved[i];

		if (sp->scen != SCEN_CONTENDED || sp->sys == SYS_PGBENCH)
			continue;
		for (k = 0; k <= WAIT_STEPS; k++)
			fprintf(f, "wait %s %s %d %.3f %.3f\n", sp->scenario,
					sys_word[sp->sys], sp->clients, sp->r.wait_at[k] / 1000.0,
					(double) k / WAIT_STEPS);
	}
	if (fsync_us > 0)
		fprintf(f, "limit durable fdatasync 0 %.1f\n", 1e6 / fsync_us);
	if (fclose(f) != 0)
	{
		perror(path);
		exit(1);
	}
}

/*
 * wanted: is the scenario name one of the words of --only (separated by
 * commas or spaces)?  A whole word: "contended" is not "uncontended".
 */
static bool
wanted(const char *only, const char *name)
{
	size_t		len = strlen(name);
	const char *p = only;

	if (only == NULL)
		return true;
	while (*p != '\0')
	{
		size_t		n;

		p += strspn(p, ", ");
		n = strcspn(p, ", ");
		if (n == len && strncmp(p, name, len) == 0)
			return true;
		p += n;
	}
	return false;
}

int
main(int argc, char **argv)
{
	static const bench_sys three[] = {SYS_ADVISORY, SYS_LOCKQ, SYS_LEASED};
	static const bench_sys lib[] = {SYS_ADVISORY, SYS_LIBRARY, SYS_LIBNOTIFY};
	static const bench_sys scaled[] = {SYS_ADVISORY, SYS_LEASED};
	static const bench_sys durable[] = {SYS_PGBENCH, SYS_LEASED};
	const char *only = NULL;
	const char *data = NULL;
	bool		quick = false;
	int			prof_clients = 0;
	bench_sys	prof_sys = SYS_LOCKQ;
	bench_scen	prof_scen = SCEN_CONTENDED;
	int			uncont[] = {1, 4, 16, 64, 256};
	int			cont[] = {2, 16, 64, 256};
	int			jobs[] = {4, 16, 64};
	int			scale[] = {1, 2, 4, 8, 16, 32, 64};
	int			libc[] = {2, 16, 64};
	int			dur_hot[] = {2, 16, 64, 256};
	int			dur_keys[] = {4, 16, 64};
	point_result res[3];
	point_result c2[3] = {{0}};
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
		else if (strcmp(argv[i], "--data") == 0 && i + 1 < (size_t) argc)
			data = argv[++i];
		else if (strcmp(argv[i], "--pgbench") == 0 && i + 1 < (size_t) argc)
			pgbench_path = argv[++i];
		else if (strcmp(argv[i], "--fsync-us") == 0 && i + 1 < (size_t) argc)
			fsync_us = atof(argv[++i]);
		else if (strcmp(argv[i], "--profile") == 0 && i + 1 < (size_t) argc)
			prof_clients = atoi(argv[++i]);
		else if (strcmp(argv[i], "--system") == 0 && i + 1 < (size_t) argc)
		{
			i++;
			if (strcmp(argv[i], "advisory") == 0)
				prof_sys = SYS_ADVISORY;
			else if (strcmp(argv[i], "liblockq") == 0)
				prof_sys = SYS_LIBRARY;
			else if (strcmp(argv[i], "libnotify") == 0)
				prof_sys = SYS_LIBNOTIFY;
			else if (strcmp(argv[i], "leased") == 0)
				prof_sys = SYS_LEASED;
			else
				prof_sys = SYS_LOCKQ;
		}
		else if (strcmp(argv[i], "--scenario") == 0 && i + 1 < (size_t) argc)
		{
			i++;
			if (strcmp(argv[i], "uncontended") == 0)
				prof_scen = SCEN_UNCONTENDED;
			else if (strcmp(argv[i], "scaling") == 0)
				prof_scen = SCEN_OWNKEY;
			else
				prof_scen = SCEN_CONTENDED;
		}
		else if (argv[i][0] == '-')
		{
			fprintf(stderr, "usage: %s [--quick] [--rounds N] [--seconds S] [--only LIST] [--data FILE] [--pgbench PATH] [--fsync-us US] [--profile CLIENTS [--system advisory|session|leased|liblockq|libnotify] [--scenario contended|uncontended|scaling]] CONNINFO\n", argv[0]);
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
	find_server();
	{
		PGconn	   *pg = connect_db();

		exec1(pg, "DROP TABLE IF EXISTS bench_jobs", NULL);
		exec1(pg, "CREATE TABLE bench_jobs (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)", NULL);
		exec1(pg, "INSERT INTO bench_jobs (id) SELECT generate_series(0, 99)", NULL);
		exec1(pg, "DROP TABLE IF EXISTS bench_durable", NULL);
		exec1(pg, "CREATE TABLE bench_durable (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)", NULL);
		exec1(pg, "INSERT INTO bench_durable (id) SELECT generate_series(0, 300)", NULL);
		PQfinish(pg);
	}

	/* --profile C: one system, contended, C clients, one round (for perf) */
	if (prof_clients > 0)
	{
		point_result p = measure(prof_sys, prof_clients, prof_scen);

		printf("%s %s %d clients: %.0f ops/s, p50 %.0f us, %.1f context switches per op\n",
			   sys_name[prof_sys], prof_scen == SCEN_CONTENDED ? "contended" :
			   prof_scen == SCEN_OWNKEY ? "scaling" : "uncontended",
			   prof_clients, p.rate, p.lat_p50, p.cs_per_op);
		return 0;
	}

	printf("rounds per point: %d, %.1f s each; medians; the systems alternate\n\n", rounds, seconds);
	printf("| scenario | system | clients | ops/s | lat p50 µs | lat p99 µs | wait p99 ms | wait max ms | Jain | FIFO inv. | ME viol. | per-client | cs/op | CPU µs/op: lock server / backends / bench | machine: kernel %% / others %% |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

	if (wanted(only, "uncontended"))
		for (i = 0; i < sizeof(uncont) / sizeof(uncont[0]); i++)
			run_point("uncontended", uncont[i], SCEN_UNCONTENDED, three, 3, res);
	if (wanted(only, "contended"))
		for (i = 0; i < sizeof(cont) / sizeof(cont[0]); i++)
		{
			run_point("contended", cont[i], SCEN_CONTENDED, three, 3, res);
			if (cont[i] == 2)
				memcpy(c2, res, sizeof(c2));
			if (cont[i] == 256 && c2[1].rate > 0 && c2[2].rate > 0)
				printf("|  | 256 vs 2 clients: session %.2fx, leased %.2fx | | | | | | | | | | | | | |\n",
					   res[1].rate / c2[1].rate, res[2].rate / c2[2].rate);
		}
	if (wanted(only, "jobs"))
		for (i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++)
			run_point("jobs", jobs[i], SCEN_JOBS, three, 3, res);
	if (wanted(only, "scaling"))
		for (i = 0; i < sizeof(scale) / sizeof(scale[0]); i++)
			run_point("scaling", scale[i], SCEN_OWNKEY, scaled, 2, res);
	if (wanted(only, "library"))
		for (i = 0; i < sizeof(libc) / sizeof(libc[0]); i++)
			run_point("library", libc[i], SCEN_CONTENDED, lib, 3, res);
	if (wanted(only, "expiry"))
	{
		run_expiry(quick ? 10 : 30, &exp50, &exp99);
		printf("\nexpiry lag (lease end -> next grant): p50 %.2f ms, p99 %.2f ms\n",
			   exp50 / 1000.0, exp99 / 1000.0);
	}
	if (wanted(only, "durable"))
	{
		printf("\nDurable path: lockq.synchronous_grants = on (every grant and release "
			   "flushed before it is answered), leased; pgbench with synchronous_commit = on. "
			   "durable: one lock, hand-offs/s, against UPDATEs of one shared row; "
			   "durable_keys: a key per client, grant/release pairs/s, against two UPDATEs "
			   "of a row per client. WAL flushes/op from pg_stat_wal.wal_sync.\n");
		if (fsync_us > 0)
			printf("Physical limit of one chain of flushes: 1 / fdatasync = %.0f/s "
				   "(pg_test_fsync: %.1f us per fdatasync); \"of 1/fdatasync\" is ops/s "
				   "against it.\n", 1e6 / fsync_us, fsync_us);
		printf("\n| scenario | system | clients | ops/s | lat p50 µs | wait p99 ms | WAL flushes/op | of 1/fdatasync | cs/op | CPU µs/op: lock server / backends / bench | machine: kernel %% / others %% |\n");
		printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
		count_wal = true;
		set_synchronous_grants(true);
		for (i = 0; i < sizeof(dur_hot) / sizeof(dur_hot[0]); i++)
			run_point("durable", dur_hot[i], SCEN_CONTENDED, durable, 2, res);
		for (i = 0; i < sizeof(dur_keys) / sizeof(dur_keys[0]); i++)
			run_point("durable_keys", dur_keys[i], SCEN_OWNKEY, durable, 2, res);
		set_synchronous_grants(false);
		count_wal = false;
	}
	if (data != NULL)
		write_data(data);
	free(events);
	return 0;
}

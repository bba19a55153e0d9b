/*-------------------------------------------------------------------------
 *
 * lockqc_test.c
 *		Tests of liblockq against a real lockq server.
 *
 *	lockqc_test SCENARIO CONNINFO
 *
 * Prints "ok - ..." / "not ok - ..." lines (relayed as TAP assertions by
 * test/t/301_client_lib.pl, and for failover_hold by test/t/117_failover.pl)
 * and exits 0 when all passed.  Some scenarios coordinate with the TAP
 * script through stdout ("READY") and stdin.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/test/lockqc_test.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "lockq_client_int.h"

static const char *conninfo;
static _Atomic int failures = 0;

static void
check(bool cond, const char *fmt,...)
{
	va_list		ap;

	printf("%s - ", cond ? "ok" : "not ok");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!cond)
		failures++;
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* A plain libpq connection for checks from "the outside". */
static PGconn *
monitor(void)
{
	PGconn	   *pg = PQconnectdb(conninfo);

	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "monitor: %s", PQerrorMessage(pg));
		exit(2);
	}
	return pg;
}

/* Runs sql with up to 3 text parameters; returns the first value (static). */
static const char *
q(PGconn *pg, const char *sql, const char *p1, const char *p2, const char *p3)
{
	static char buf[1024];
	const char *params[3] = {p1, p2, p3};
	int			n = p3 ? 3 : p2 ? 2 : p1 ? 1 : 0;
	PGresult   *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		snprintf(buf, sizeof(buf), "ERROR: %s", PQresultErrorMessage(res));
		PQclear(res);
		return buf;
	}
	snprintf(buf, sizeof(buf), "%s",
			 PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	return buf;
}

static int
count_waiters(PGconn *pg, const char *lock)
{
	return atoi(q(pg, "SELECT count(*) FROM lockq_waiters WHERE lock_id = $1", lock, NULL, NULL));
}

/* wait_until polls a monitor query until it returns want (10 s at most). */
static bool
wait_until(PGconn *pg, const char *sql, const char *p1, const char *want)
{
	int64_t		end = now_ms() + 10000;

	while (now_ms() < end)
	{
		if (strcmp(q(pg, sql, p1, NULL, NULL), want) == 0)
			return true;
		sleep_ms(10);
	}
	return false;
}

/* The library's connections say who they are, for the checks. */
static lockqc_conn *
connect_or_die(void)
{
	char	   *err = NULL;
	char		ci[1024];
	lockqc_conn *c;

	snprintf(ci, sizeof(ci), "%s application_name=lockqc_test", conninfo);
	c = lockqc_connect(ci, &err);

	if (c == NULL)
	{
		fprintf(stderr, "connect: %s\n", err ? err : "?");
		free(err);
		exit(2);
	}
	return c;
}

/* ---------------------------------------------------------------------- */

static void
scenario_basic(void)
{
	lockqc_conn *c = connect_or_die();
	lockqc_handle *h = NULL;
	lockqc_handle *h2 = NULL;
	lockqc_opts o;
	PGconn	   *m = monitor();
	char		tok[32];
	int64_t		ms;
	char	   *err = NULL;
	lockqc_notice nt;

	check(lockqc_trylock(c, "b", NULL, &h) == LOCKQC_OK, "trylock on a free lock");
	check(lockqc_held(h), "held after trylock");
	check(lockqc_token(h) > 0, "token %" PRId64, lockqc_token(h));
	check(strchr(lockqc_owner(h), ':') != NULL, "default owner is host:pid:thread:random (%s)", lockqc_owner(h));
	snprintf(tok, sizeof(tok), "%" PRId64, lockqc_token(h));
	check(strcmp(q(m, "SELECT owner FROM lockq_locks WHERE lock_id = 'b'", NULL, NULL, NULL),
				 lockqc_owner(h)) == 0, "the server shows the owner");
	check(strcmp(q(m, "SELECT lockq_holds('b', $1)", tok, NULL, NULL), "t") == 0,
		  "the token is current on the server");
	check(lockqc_trylock(c, "b", NULL, &h2) == LOCKQC_NOT_AVAILABLE && h2 == NULL,
		  "a second handle (another owner) cannot take it");
	lockqc_opts_init(&o);
	o.timeout_ms = 200;
	check(lockqc_lock(c, "b", &o, &h2) == LOCKQC_TIMEOUT && h2 == NULL,
		  "a default owner is per handle: no re-entrancy, the wait times out");
	check(count_waiters(m, "b") == 0, "the timed-out wait left nothing in the queue");
	check(lockqc_unlock(h) == LOCKQC_OK, "unlock");
	check(strcmp(q(m, "SELECT count(*) FROM lockq_locks", NULL, NULL, NULL), "0") == 0,
		  "nothing held on the server");

	/* an explicit owner is re-entrant, across handles */
	o.owner = "svc-1";
	check(lockqc_lock(c, "r", &o, &h) == LOCKQC_OK, "lock with explicit owner");
	check(lockqc_lock(c, "r", &o, &h2) == LOCKQC_OK &&
		  lockqc_token(h2) == lockqc_token(h), "same owner again: same token");
	check(lockqc_unlock(h2) == LOCKQC_OK, "one unlock releases the grant");
	check(lockqc_unlock(h) == LOCKQC_LOST, "unlocking it again reports the lease as lost");

	/* bad arguments */
	check(lockqc_lock(c, "", NULL, &h) == LOCKQC_EINVAL, "empty lock id rejected");
	check(strlen(lockqc_errmsg(c)) > 0, "with a message: %s", lockqc_errmsg(c));
	o.owner = "";
	check(lockqc_trylock(c, "x", &o, &h) == LOCKQC_EINVAL, "empty owner rejected");
	o.owner = "session:1:2";
	check(lockqc_trylock(c, "x", &o, &h) == LOCKQC_ERROR, "reserved owner rejected by the server");
	check(strstr(lockqc_errmsg(c), "reserved") != NULL, "message: %s", lockqc_errmsg(c));
	check(lockqc_lock(NULL, "x", NULL, &h) == LOCKQC_EINVAL, "NULL connection rejected");

	/* parsing */
	check(lockqc_parse_duration("500ms", &ms) == 0 && ms == 500, "500ms");
	check(lockqc_parse_duration("1.5s", &ms) == 0 && ms == 1500, "1.5s");
	check(lockqc_parse_duration("5m", &ms) == 0 && ms == 300000, "5m");
	check(lockqc_parse_duration("2", &ms) == 0 && ms == 2000, "bare number is seconds");
	check(lockqc_parse_duration("-1s", &ms) < 0 && lockqc_parse_duration("1x", &ms) < 0 &&
		  lockqc_parse_duration("", &ms) < 0 && lockqc_parse_duration("s", &ms) < 0,
		  "bad durations rejected");
	check(lockqc_parse_notice("grant 42 3 a b owner x", &nt) == 0 && nt.event == LOCKQC_EV_GRANT &&
		  nt.token == 42 && nt.lock_len == 3 && memcmp(nt.lock_id, "a b", 3) == 0 &&
		  strcmp(nt.owner, "owner x") == 0, "notice payload with spaces parsed");
	check(lockqc_parse_notice("grant 42 99 ab c", &nt) < 0 &&
		  lockqc_parse_notice("steal 1 1 a b", &nt) < 0 &&
		  lockqc_parse_notice("lost x 1 a b", &nt) < 0, "bad payloads rejected");

	check(lockqc_connect("host=/nonexistent/socket", &err) == NULL && err != NULL,
		  "connect failure reported: %s", err ? strtok(err, "\n") : "");
	free(err);

	lockqc_disconnect(c);
	PQfinish(m);
}

/* FIFO across library waiters (one shared connection) and SQL waiters. */
typedef struct fifo_arg
{
	lockqc_conn *c;
	const char *name;
	bool		sql;
} fifo_arg;

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static char order[256];

static void *
fifo_waiter(void *p)
{
	fifo_arg   *a = p;

	if (a->sql)
	{
		PGconn	   *pg = monitor();
		char		tok[64];

		snprintf(tok, sizeof(tok), "%s", q(pg, "SELECT lockq_get('F', $1, '1 minute')", a->name, NULL, NULL));
		pthread_mutex_lock(&order_mu);
		strcat(order, a->name);
		strcat(order, " ");
		pthread_mutex_unlock(&order_mu);
		q(pg, "SELECT lockq_release('F', $1)", a->name, NULL, NULL);
		PQfinish(pg);
	}
	else
	{
		lockqc_opts o;
		lockqc_handle *h;

		lockqc_opts_init(&o);
		o.owner = a->name;
		if (lockqc_lock(a->c, "F", &o, &h) != LOCKQC_OK)
			return NULL;
		pthread_mutex_lock(&order_mu);
		strcat(order, a->name);
		strcat(order, " ");
		pthread_mutex_unlock(&order_mu);
		lockqc_unlock(h);
	}
	return NULL;
}

static void
scenario_fifo(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	fifo_arg	args[] = {
		{c, "lib-1", false}, {c, "sql-2", true}, {c, "lib-3", false},
		{c, "lib-4", false}, {c, "sql-5", true}, {c, "lib-6", false}
	};
	pthread_t	th[6];
	int			i;

	q(m, "SELECT lockq_try('F', 'holder', '1 minute')", NULL, NULL, NULL);
	for (i = 0; i < 6; i++)
	{
		char		n[8];

		pthread_create(&th[i], NULL, fifo_waiter, &args[i]);
		snprintf(n, sizeof(n), "%d", i + 1);
		check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = 'F'", NULL, n),
			  "%s queued (position %d)", args[i].name, i + 1);
	}
	check(strcmp(q(m, "SELECT string_agg(kind, ',' ORDER BY position) FROM lockq_waiters", NULL, NULL, NULL),
				 "client,backend,client,client,backend,client") == 0,
		  "library waits queue as client waiters, SQL ones as backends, one queue");
	check(strcmp(q(m, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockqc_test'", NULL, NULL, NULL), "1") == 0,
		  "the four library waits share one connection");
	q(m, "SELECT lockq_release('F', 'holder')", NULL, NULL, NULL);
	for (i = 0; i < 6; i++)
		pthread_join(th[i], NULL);
	check(strcmp(order, "lib-1 sql-2 lib-3 lib-4 sql-5 lib-6 ") == 0,
		  "grant order is arrival order: %s", order);
	lockqc_disconnect(c);
	PQfinish(m);
}

static void
scenario_timeout(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		t0;
	int			rc;

	q(m, "SELECT lockq_try('T', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.timeout_ms = 300;
	t0 = now_ms();
	rc = lockqc_lock(c, "T", &o, &h);
	check(rc == LOCKQC_TIMEOUT, "lock times out (%s)", lockqc_status_str(rc));
	check(now_ms() - t0 >= 300 && now_ms() - t0 < 2000, "after about the timeout (%" PRId64 " ms)", now_ms() - t0);
	check(count_waiters(m, "T") == 0, "no queue entry left");
	check(lockqc_trylock(c, "T", NULL, &h) == LOCKQC_NOT_AVAILABLE, "trylock: not available");
	q(m, "SELECT lockq_release('T', 'holder')", NULL, NULL, NULL);
	check(lockqc_trylock(c, "T", NULL, &h) == LOCKQC_OK, "trylock after release");
	lockqc_unlock(h);
	lockqc_disconnect(c);
	PQfinish(m);
}

static lockqc_cancel_flag cancel_flag;

static void *
cancel_later(void *p)
{
	sleep_ms(300);
	atomic_store(&cancel_flag, 1);
	lockqc_wakeup((lockqc_conn *) p);
	return NULL;
}

static void
scenario_cancel(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	pthread_t	th;
	int64_t		t0 = now_ms();
	int			rc;

	q(m, "SELECT lockq_try('C', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.cancel_flag = &cancel_flag;
	pthread_create(&th, NULL, cancel_later, c);
	rc = lockqc_lock(c, "C", &o, &h);
	pthread_join(th, NULL);
	check(rc == LOCKQC_CANCELLED, "the cancel flag ends the wait (%s)", lockqc_status_str(rc));
	check(now_ms() - t0 < 2000, "promptly (%" PRId64 " ms)", now_ms() - t0);
	check(count_waiters(m, "C") == 0, "no queue entry left");
	q(m, "SELECT lockq_release('C', 'holder')", NULL, NULL, NULL);
	lockqc_disconnect(c);
	PQfinish(m);
}

static void
scenario_watchdog(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		end;
	bool		always = true;
	char		tok[32];
	int			renewals_before = atoi(q(m, "SELECT renewals FROM lockq_stats", NULL, NULL, NULL));

	lockqc_opts_init(&o);
	o.ttl_ms = 1000;
	check(lockqc_lock(c, "W", &o, &h) == LOCKQC_OK, "lock with a 1 s ttl");
	snprintf(tok, sizeof(tok), "%" PRId64, lockqc_token(h));
	end = now_ms() + 10000;
	while (now_ms() < end)
	{
		if (!lockqc_held(h))
			always = false;
		sleep_ms(50);
	}
	check(always, "held for 10 s without a gap");
	check(strcmp(q(m, "SELECT lockq_holds('W', $1)", tok, NULL, NULL), "t") == 0,
		  "and the server agrees, same token");
	check(atoi(q(m, "SELECT renewals FROM lockq_stats", NULL, NULL, NULL)) - renewals_before >= 20,
		  "renewed about every third of the ttl");
	check(lockqc_unlock(h) == LOCKQC_OK, "unlock");
	lockqc_disconnect(c);
	PQfinish(m);
}

static _Atomic int64_t lost_at = 0;

static void
record_lost(lockqc_handle *h, void *arg)
{
	atomic_store(&lost_at, now_ms());
}

static void
scenario_lost_admin(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		t0;

	lockqc_opts_init(&o);
	o.ttl_ms = 30000;
	o.on_lost = record_lost;
	check(lockqc_lock(c, "A", &o, &h) == LOCKQC_OK, "lock with a 30 s ttl");
	t0 = now_ms();
	check(strcmp(q(m, "SELECT lockq_force_release('A')", NULL, NULL, NULL), "t") == 0,
		  "an administrator removes the grant");
	while (atomic_load(&lost_at) == 0 && now_ms() - t0 < 10000)
		sleep_ms(10);
	check(atomic_load(&lost_at) != 0, "the lost-lease callback fired");
	check(atomic_load(&lost_at) - t0 < 2000, "within %" PRId64 " ms (told by NOTIFY, not the 30 s lease)",
		  atomic_load(&lost_at) - t0);
	check(!lockqc_held(h), "lockqc_held is false");
	check(lockqc_unlock(h) == LOCKQC_LOST, "unlock reports the loss");
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * lockqc_extend renews now with a new ttl, which the server has and later
 * renewals keep; a shorter one moves the local deadline, and the lost
 * callback, earlier; a lost lease, or one the server no longer has, is
 * not extended.  (ttls of seconds: it also runs under valgrind.)
 */
static void
scenario_extend(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		t0;

	lockqc_opts_init(&o);
	o.ttl_ms = 30000;
	check(lockqc_lock(c, "EXT", &o, &h) == LOCKQC_OK, "lock with a 30 s ttl, renewed");
	check(lockqc_extend(h, 0) == LOCKQC_EINVAL, "a ttl of 0 is refused");
	check(lockqc_extend(h, 3000) == LOCKQC_OK, "extended with a 3 s ttl");
	sleep_ms(4000);
	check(lockqc_held(h) && lockqc_remaining_ms(h) <= 3000,
		  "held past that ttl, %" PRId64 " ms left: renewals keep the new ttl",
		  lockqc_remaining_ms(h));
	check(strcmp(q(m, "SELECT expires <= now() + interval '10 s' FROM lockq_locks WHERE lock_id = 'EXT'",
				   NULL, NULL, NULL), "t") == 0, "and so does the server (not 30 s)");
	check(lockqc_extend(h, 60000) == LOCKQC_OK, "extended to 60 s");
	check(lockqc_remaining_ms(h) > 55000, "%" PRId64 " ms left", lockqc_remaining_ms(h));
	check(strcmp(q(m, "SELECT expires > now() + interval '50 s' FROM lockq_locks WHERE lock_id = 'EXT'",
				   NULL, NULL, NULL), "t") == 0, "the server has the new lease");
	check(lockqc_unlock(h) == LOCKQC_OK, "released");

	o.auto_renew = false;
	o.on_lost = record_lost;
	atomic_store(&lost_at, 0);
	check(lockqc_lock(c, "EXT", &o, &h) == LOCKQC_OK, "lock again, 30 s, no renewal");
	t0 = now_ms();
	check(lockqc_extend(h, 1000) == LOCKQC_OK, "shortened to 1 s");
	while (atomic_load(&lost_at) == 0 && now_ms() - t0 < 20000)
		sleep_ms(10);
	check(atomic_load(&lost_at) != 0 && atomic_load(&lost_at) - t0 < 10000,
		  "lost at its new deadline (after %" PRId64 " ms), not at the old one",
		  atomic_load(&lost_at) - t0);
	check(lockqc_extend(h, 5000) == LOCKQC_LOST, "a lost lease is not extended");
	lockqc_unlock(h);

	o.on_lost = NULL;
	check(lockqc_lock(c, "EXT2", &o, &h) == LOCKQC_OK, "lock EXT2 for 30 s");
	check(strcmp(q(m, "SELECT lockq_force_release('EXT2')", NULL, NULL, NULL), "t") == 0,
		  "an administrator removes the grant");
	check(lockqc_extend(h, 30000) == LOCKQC_LOST, "it is not extended");
	check(!lockqc_held(h), "and not held");
	lockqc_unlock(h);
	lockqc_disconnect(c);
	PQfinish(m);
}

/* The TAP script stops the server after READY. */
static void
scenario_lost_stop(void)
{
	lockqc_conn *c = connect_or_die();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		t0;
	int64_t		ready;
	int64_t		lost;

	lockqc_opts_init(&o);
	o.ttl_ms = 2000;
	o.on_lost = record_lost;
	t0 = now_ms();
	check(lockqc_lock(c, "S", &o, &h) == LOCKQC_OK, "lock with a 2 s ttl");
	printf("READY\n");
	fflush(stdout);
	ready = now_ms();
	/* the lease is renewed until the server goes; then the deadline */
	while (atomic_load(&lost_at) == 0 && now_ms() - t0 < 30000)
		sleep_ms(5);
	check(atomic_load(&lost_at) != 0, "the lost-lease callback fired when renewal became impossible");
	check(!lockqc_held(h), "lockqc_held is false");

	/*
	 * The server goes right after READY.  The last confirmed renewal was
	 * sent less than a ttl before that, so the local deadline, and the
	 * callback with it, comes less than a ttl after it (plus the time the
	 * stop takes).
	 */
	lost = atomic_load(&lost_at);
	check(lost - ready <= 2000 + 1000,
		  "within one ttl of the server going away (%" PRId64 " ms after READY)", lost - ready);
	check(lost - t0 >= 2000, "not before the first lease could end (%" PRId64 " ms)", lost - t0);
	lockqc_unlock(h);
	lockqc_disconnect(c);
}

/* lockqc_held must never be true after the deadline: sample it closely. */
static void
scenario_deadline(void)
{
	lockqc_conn *c = connect_or_die();
	lockqc_opts o;
	lockqc_handle *h;
	int64_t		before;
	int64_t		after;
	int64_t		last_true = 0;
	int64_t		cb;

	lockqc_opts_init(&o);
	o.ttl_ms = 1000;
	o.auto_renew = false;
	o.on_lost = record_lost;
	/*
	 * The library counts the lease from when it sent the request, which is
	 * between before and after: the deadline is in [before, after] + ttl.
	 */
	before = now_ms();
	check(lockqc_trylock(c, "D", &o, &h) == LOCKQC_OK, "trylock without auto-renew, 1 s ttl");
	after = now_ms();
	while (now_ms() - before < 2000)
	{
		if (lockqc_held(h))
			last_true = now_ms();
	}
	cb = atomic_load(&lost_at);
	check(last_true >= before + 990 && last_true <= after + 1000,
		  "held until, and not after, the local deadline (last true %" PRId64 " ms after the request)",
		  last_true - before);
	check(cb >= before + 1000 && cb <= after + 1000 + 50,
		  "the callback fired at the deadline (%" PRId64 " ms after the request)", cb - before);
	lockqc_unlock(h);
	lockqc_disconnect(c);
}

/* Threads sharing one connection, with a critical-section check. */
typedef struct thr_arg
{
	lockqc_conn *c;
	int			cycles;
} thr_arg;

static _Atomic int inside = 0;
static _Atomic int overlaps = 0;
static _Atomic int done_cycles = 0;

static void *
thr_main(void *p)
{
	thr_arg    *a = p;
	int			i;

	for (i = 0; i < a->cycles; i++)
	{
		lockqc_handle *h;

		if (lockqc_lock(a->c, "shared", NULL, &h) != LOCKQC_OK)
			continue;
		if (atomic_fetch_add(&inside, 1) != 0)
			atomic_fetch_add(&overlaps, 1);
		sleep_ms(1);
		atomic_fetch_sub(&inside, 1);
		if (lockqc_unlock(h) == LOCKQC_OK)
			atomic_fetch_add(&done_cycles, 1);
	}
	return NULL;
}

static void
scenario_threads(void)
{
	lockqc_conn *c = connect_or_die();
	enum
	{
		NTHREADS = 8, CYCLES = 40
	};
	pthread_t	th[NTHREADS];
	thr_arg		a = {c, CYCLES};
	int			i;

	for (i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, thr_main, &a);
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	check(atomic_load(&done_cycles) == NTHREADS * CYCLES, "%d of %d lock/unlock cycles done",
		  atomic_load(&done_cycles), NTHREADS * CYCLES);
	check(atomic_load(&overlaps) == 0, "no two threads were ever inside at once");
	lockqc_disconnect(c);
}

/*
 * Rapid hand-offs between two connections: a grant notice can arrive while
 * the waiter's own enqueue or heartbeat is in flight; it must still wake
 * the waiter at once, not at the next heartbeat (a third of 10 s).
 */
typedef struct ho_arg
{
	int			cycles;
	int64_t		max_wait;
	int			failed;
} ho_arg;

static void *
handoff_main(void *p)
{
	ho_arg	   *a = p;
	lockqc_conn *c = connect_or_die();
	int			i;

	for (i = 0; i < a->cycles; i++)
	{
		lockqc_handle *h;
		int64_t		t0 = now_ms();

		if (lockqc_lock(c, "handoff", NULL, &h) != LOCKQC_OK)
		{
			a->failed++;
			continue;
		}
		if (now_ms() - t0 > a->max_wait)
			a->max_wait = now_ms() - t0;
		lockqc_unlock(h);
	}
	lockqc_disconnect(c);
	return NULL;
}

static void
scenario_handoff(void)
{
	ho_arg		a[2] = {{300, 0, 0}, {300, 0, 0}};
	pthread_t	th[2];
	int64_t		t0 = now_ms();
	int			i;

	for (i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, handoff_main, &a[i]);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	check(a[0].failed + a[1].failed == 0, "600 lock/unlock cycles between two connections");
	check(a[0].max_wait < 1000 && a[1].max_wait < 1000,
		  "no wait took a heartbeat interval: the notice always woke the waiter (longest %" PRId64 " ms)",
		  a[0].max_wait > a[1].max_wait ? a[0].max_wait : a[1].max_wait);
	check(now_ms() - t0 < 30000, "in %" PRId64 " ms", now_ms() - t0);
}

/*
 * A single wait on a connection waits in the backend (lockq_await, 1.2),
 * woken by its grant alone.  Another request on the same connection
 * cancels that await at once and goes through, and the wait keeps its
 * place and carries on with NOTIFY and heartbeats; alone again, it waits
 * in the backend again.  A wait given up while it awaits is withdrawn.
 * (With LOCKQC_NO_AWAIT=1 the library never awaits: the TAP script runs
 * this scenario with it set and checks only the NOTIFY path's results.)
 */
typedef struct aw_arg
{
	lockqc_conn *c;
	int			rc;
} aw_arg;

static void *
await_main(void *p)
{
	aw_arg	   *a = p;
	lockqc_handle *h;

	a->rc = lockqc_lock(a->c, "AW", NULL, &h);
	if (a->rc == LOCKQC_OK)
		lockqc_unlock(h);
	return NULL;
}

static void
scenario_await(void)
{
	static const char awaiting[] =
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockqc_test'"
		" AND state = 'active' AND query LIKE '%lockq_await%' AND $1 = $1";
	bool		notify_only = getenv("LOCKQC_NO_AWAIT") != NULL;
	const char *expect = notify_only ? "0" : "1";
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	aw_arg		a = {c, -1};
	pthread_t	th;
	lockqc_handle *h2;
	lockqc_opts o;
	int64_t		t0;
	int			rc;

	q(m, "SELECT lockq_try('AW', 'holder', '1 hour')", NULL, NULL, NULL);
	pthread_create(&th, NULL, await_main, &a);
	check(wait_until(m, "SELECT count(*) FROM lockq_waiters WHERE lock_id = $1", "AW", "1"),
		  "the wait is queued");
	check(wait_until(m, awaiting, "x", expect),
		  notify_only ? "told not to, it does not wait in the backend" :
		  "a single wait on the connection waits in the backend");

	t0 = now_ms();
	rc = lockqc_trylock(c, "AW2", NULL, &h2);
	check(rc == LOCKQC_OK, "another request on that connection goes through (%s)",
		  lockqc_status_str(rc));
	check(now_ms() - t0 < 1000, "at once: %" PRId64 " ms", now_ms() - t0);
	check(count_waiters(m, "AW") == 1, "the wait kept its place");
	check(wait_until(m, awaiting, "x", "0"), "with two handles it waits on NOTIFY");
	lockqc_unlock(h2);
	check(wait_until(m, awaiting, "x", expect),
		  notify_only ? "alone again, still not in the backend" :
		  "alone again, it waits in the backend again");

	t0 = now_ms();
	q(m, "SELECT lockq_release('AW', 'holder')", NULL, NULL, NULL);
	pthread_join(th, NULL);
	check(a.rc == LOCKQC_OK, "the grant ended the wait (%s)", lockqc_status_str(a.rc));
	check(now_ms() - t0 < 1000, "within %" PRId64 " ms", now_ms() - t0);

	q(m, "SELECT lockq_try('AW', 'holder', '1 hour')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.timeout_ms = 500;
	rc = lockqc_lock(c, "AW", &o, &h2);
	check(rc == LOCKQC_TIMEOUT, "a timed wait times out (%s)", lockqc_status_str(rc));
	check(count_waiters(m, "AW") == 0, "and is withdrawn by the time lockqc_lock returns");
	q(m, "SELECT lockq_release('AW', 'holder')", NULL, NULL, NULL);
	lockqc_disconnect(c);
	PQfinish(m);
}

/* The TAP script restarts the server after READY and writes a line. */
typedef struct rw_arg
{
	lockqc_conn *c;
	int			rc;
	int64_t		token;
} rw_arg;

static void *
reconnect_waiter(void *p)
{
	rw_arg	   *a = p;
	lockqc_opts o;
	lockqc_handle *h;

	lockqc_opts_init(&o);
	o.heartbeat_ms = 20000;
	a->rc = lockqc_lock(a->c, "RW", &o, &h);
	if (a->rc == LOCKQC_OK)
	{
		a->token = lockqc_token(h);
		lockqc_unlock(h);
	}
	return NULL;
}

static void
scenario_reconnect(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	pthread_t	th;
	rw_arg		a = {c, -99, 0};
	char		tok[32];
	char		line[64];

	lockqc_opts_init(&o);
	o.ttl_ms = 30000;
	check(lockqc_lock(c, "RC", &o, &h) == LOCKQC_OK, "holding a lock before the restart");
	snprintf(tok, sizeof(tok), "%" PRId64, lockqc_token(h));
	q(m, "SELECT lockq_try('RW', 'sql-owner', '1 hour')", NULL, NULL, NULL);
	pthread_create(&th, NULL, reconnect_waiter, &a);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "RW", "1"),
		  "and waiting for another");
	PQfinish(m);
	printf("READY\n");
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		return;

	m = monitor();
	check(wait_until(m, "SELECT lockq_holds('RC', $1)::text", tok, "true"),
		  "after the restart the server still has our grant");
	check(lockqc_held(h), "and we still hold it, same token %s", tok);
	check(count_waiters(m, "RW") == 1, "the wait kept its place in the queue");
	q(m, "SELECT lockq_release('RW', 'sql-owner')", NULL, NULL, NULL);
	pthread_join(th, NULL);
	check(a.rc == LOCKQC_OK && a.token > 0, "the waiter was granted after the restart (%s)",
		  lockqc_status_str(a.rc));
	check(lockqc_unlock(h) == LOCKQC_OK, "unlock after the restart");
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * failover_hold: CONNINFO names a primary and its synchronous standby, with
 * target_session_attrs=read-write.  Two leases are held when the TAP script
 * (test/t/117_failover.pl) makes the standby the new primary after READY:
 * FH, with a 20 s ttl, must come through (renewed against the new primary,
 * same token); FL, with a 3 s ttl, runs out while there is no primary (the
 * script waits for its "LOST FL" before it promotes), so it must be
 * reported lost.  A thread samples lockqc_held(FH) all along.  The script
 * writes a line when the new primary serves.
 */
static _Atomic int64_t lost_fl_at = 0;
static _Atomic int64_t fh_gap_at = 0;
static _Atomic bool sampling = true;

static void
report_lost_fl(lockqc_handle *h, void *arg)
{
	atomic_store(&lost_fl_at, now_ms());
	printf("LOST FL\n");
	fflush(stdout);
}

static void *
sample_held(void *p)
{
	lockqc_handle *h = p;

	while (atomic_load(&sampling))
	{
		if (!lockqc_held(h) && atomic_load(&fh_gap_at) == 0)
			atomic_store(&fh_gap_at, now_ms());
		sleep_ms(2);
	}
	return NULL;
}

static void
scenario_failover_hold(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *fh = NULL;
	lockqc_handle *fl = NULL;
	pthread_t	th;
	char		tok_fh[32];
	char		tok_fl[32];
	char		line[64];
	int64_t		token_fh;
	bool		held;

	lockqc_opts_init(&o);
	o.ttl_ms = 20000;
	o.on_lost = record_lost;
	if (lockqc_lock(c, "FH", &o, &fh) != LOCKQC_OK)
	{
		check(false, "FH locked: %s", lockqc_errmsg(c));
		return;
	}
	o.ttl_ms = 3000;
	o.on_lost = report_lost_fl;
	if (lockqc_lock(c, "FL", &o, &fl) != LOCKQC_OK)
	{
		check(false, "FL locked: %s", lockqc_errmsg(c));
		return;
	}
	token_fh = lockqc_token(fh);
	snprintf(tok_fh, sizeof(tok_fh), "%" PRId64, token_fh);
	snprintf(tok_fl, sizeof(tok_fl), "%" PRId64, lockqc_token(fl));
	check(strcmp(q(m, "SELECT lockq_holds('FH', $1)", tok_fh, NULL, NULL), "t") == 0 &&
		  strcmp(q(m, "SELECT lockq_holds('FL', $1)", tok_fl, NULL, NULL), "t") == 0,
		  "FH (20 s ttl) and FL (3 s ttl) held on the primary");
	PQfinish(m);
	pthread_create(&th, NULL, sample_held, fh);
	printf("READY %s %s\n", tok_fh, tok_fl);
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
	{
		atomic_store(&sampling, false);
		pthread_join(th, NULL);
		return;
	}

	/* the new primary serves: the multi-host conninfo finds it */
	m = monitor();
	check(atomic_load(&lost_fl_at) != 0 && !lockqc_held(fl),
		  "FL: its lease ran out with no primary to renew it: the callback fired, lockqc_held is false");
	check(wait_until(m, "SELECT (renewals > 0)::text FROM lockq_stats", NULL, "true"),
		  "FH: the library reconnected to the new primary and renewed the lease there");
	held = lockqc_held(fh);
	check(held && strcmp(q(m, "SELECT lockq_holds('FH', $1)", tok_fh, NULL, NULL), "t") == 0,
		  "FH: the library holds it and the new primary agrees (lockq_holds)");
	check(lockqc_token(fh) == token_fh && atomic_load(&lost_at) == 0,
		  "FH: same token %s, no lost-lease callback", tok_fh);
	atomic_store(&sampling, false);
	pthread_join(th, NULL);
	check(atomic_load(&fh_gap_at) == 0,
		  "FH: lockqc_held was true at every sample (2 ms apart) through the failover");
	check(lockqc_unlock(fl) == LOCKQC_LOST, "FL: unlock reports the loss");
	check(strcmp(q(m, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'FL'", NULL, NULL, NULL), "0") == 0 &&
		  strcmp(q(m, "SELECT lockq_holds('FL', $1)", tok_fl, NULL, NULL), "f") == 0,
		  "FL: and leaves nothing held on the new primary");
	check(lockqc_unlock(fh) == LOCKQC_OK, "FH: unlock on the new primary");
	check(strcmp(q(m, "SELECT lockq_holds('FH', $1)", tok_fh, NULL, NULL), "f") == 0,
		  "FH: released");
	lockqc_disconnect(c);
	PQfinish(m);
}


/* ---------------------------------------------------------------------- */
/* Issue 10: API details, stalls, lost replies, disconnect races.         */

/*
 * api: ttl and heartbeat must be positive; timeout 0 means "do not wait";
 * lockqc_sqlstate; fallback_application_name; messages end without a
 * newline; the atomic cancel flag.
 */
static lockqc_cancel_flag api_cancel;

static void *
api_cancel_later(void *p)
{
	sleep_ms(300);
	atomic_store(&api_cancel, 1);
	lockqc_wakeup((lockqc_conn *) p);
	return NULL;
}

static void
scenario_api(void)
{
	lockqc_conn *c = connect_or_die();
	lockqc_conn *plain;
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h = NULL;
	char	   *err = NULL;
	int64_t		t0;
	int			rc;
	pthread_t	th;

	lockqc_opts_init(&o);
	o.ttl_ms = 0;
	check(lockqc_trylock(c, "api", &o, &h) == LOCKQC_EINVAL && h == NULL,
		  "ttl_ms 0 is an error, not the default (%s)", lockqc_errmsg(c));
	o.ttl_ms = -5;
	check(lockqc_lock(c, "api", &o, &h) == LOCKQC_EINVAL, "negative ttl_ms is an error");
	lockqc_opts_init(&o);
	o.heartbeat_ms = 0;
	check(lockqc_lock(c, "api", &o, &h) == LOCKQC_EINVAL, "heartbeat_ms 0 is an error");

	/* timeout 0: do not wait */
	q(m, "SELECT lockq_try('api', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.timeout_ms = LOCKQC_NO_WAIT;
	t0 = now_ms();
	rc = lockqc_lock(c, "api", &o, &h);
	check(rc == LOCKQC_TIMEOUT && h == NULL,
		  "timeout_ms 0 on a held lock returns LOCKQC_TIMEOUT (%s) in %" PRId64 " ms",
		  lockqc_status_str(rc), now_ms() - t0);
	check(now_ms() - t0 < 1000, "without waiting");
	check(count_waiters(m, "api") == 0, "and leaves nothing queued");
	q(m, "SELECT lockq_release('api', 'holder')", NULL, NULL, NULL);
	check(lockqc_lock(c, "api", &o, &h) == LOCKQC_OK, "timeout_ms 0 on a free lock takes it");
	lockqc_unlock(h);
	check(LOCKQC_WAIT_FOREVER < 0 && LOCKQC_NO_WAIT == 0, "named constants");

	/* sqlstate and messages */
	lockqc_opts_init(&o);
	o.owner = "session:1:2";
	check(lockqc_trylock(c, "x", &o, &h) == LOCKQC_ERROR, "reserved owner rejected by the server");
	check(strcmp(lockqc_sqlstate(c), "22023") == 0, "lockqc_sqlstate: %s", lockqc_sqlstate(c));
	check(lockqc_errmsg(c)[strlen(lockqc_errmsg(c)) - 1] != '\n', "no trailing newline: %s",
		  lockqc_errmsg(c));
	lockqc_opts_init(&o);
	o.ttl_ms = INT64_C(1000) * 3600 * 24 * 365 * 5;
	check(lockqc_trylock(c, "x", &o, &h) == LOCKQC_ERROR &&
		  strcmp(lockqc_sqlstate(c), "22023") == 0,
		  "a ttl above lockq.max_ttl: 22023 (%s)", lockqc_errmsg(c));
	check(lockqc_connect("host=/nonexistent/socket", &err) == NULL && err != NULL &&
		  strlen(err) > 0 && err[strlen(err) - 1] != '\n',
		  "connect failure message has no trailing newline: %s", err ? err : "");
	free(err);
	err = NULL;

	/* fallback_application_name */
	plain = lockqc_connect(conninfo, &err);
	check(plain != NULL, "connect without application_name");
	check(atoi(q(m, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockq'",
				 NULL, NULL, NULL)) >= 1,
		  "the library's connection shows as application_name lockq");
	lockqc_disconnect(plain);

	/* the atomic cancel flag */
	q(m, "SELECT lockq_try('api', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.cancel_flag = &api_cancel;
	pthread_create(&th, NULL, api_cancel_later, c);
	t0 = now_ms();
	rc = lockqc_lock(c, "api", &o, &h);
	pthread_join(th, NULL);
	check(rc == LOCKQC_CANCELLED && now_ms() - t0 < 2000,
		  "cancel_flag (atomic) ends the wait (%s, %" PRId64 " ms)", lockqc_status_str(rc), now_ms() - t0);
	check(count_waiters(m, "api") == 0, "no queue entry left");
	q(m, "SELECT lockq_release('api', 'holder')", NULL, NULL, NULL);
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * dropped: the server drops a wait (here an administrator cancels it; a
 * missed heartbeat does the same): lockqc_lock reports it with
 * LOCKQC_ERROR and SQLSTATE 55000 rather than queueing again at the back.
 */
/* drop_later cancels drop-me's wait from another session once queued. */
static void *
drop_later(void *p)
{
	PGconn	   *a = monitor();
	int64_t		end = now_ms() + 5000;

	while (now_ms() < end)
	{
		if (strcmp(q(a, "SELECT count(*)::text FROM lockq_waiters WHERE owner = 'drop-me'",
					 NULL, NULL, NULL), "1") == 0)
		{
			q(a, "SELECT lockq_cancel('DR', 'drop-me')", NULL, NULL, NULL);
			break;
		}
		sleep_ms(20);
	}
	PQfinish(a);
	return NULL;
}

static void
scenario_dropped(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h = NULL;
	int64_t		t0;
	int			rc;
	PGconn	   *w;

	q(m, "SELECT lockq_try('DR', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.owner = "drop-me";
	o.heartbeat_ms = 600;
	o.timeout_ms = 8000;
	/* a second waiter behind, from SQL */
	w = PQconnectdb(conninfo);
	PQsendQuery(w, "SELECT lockq_get('DR', 'behind', '1 minute', '20 seconds')");
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "DR", "1"),
		  "a SQL waiter is queued");
	t0 = now_ms();
	{
		pthread_t	th;

		pthread_create(&th, NULL, drop_later, NULL);
		rc = lockqc_lock(c, "DR", &o, &h);
		pthread_join(th, NULL);
	}
	check(rc == LOCKQC_ERROR, "a wait the server dropped fails (%s after %" PRId64 " ms: %s)",
		  lockqc_status_str(rc), now_ms() - t0, lockqc_errmsg(c));
	check(strcmp(lockqc_sqlstate(c), "55000") == 0, "with SQLSTATE 55000 (%s)", lockqc_sqlstate(c));
	check(strcmp(q(m, "SELECT count(*)::text FROM lockq_waiters WHERE owner = 'drop-me'", NULL, NULL, NULL), "0") == 0,
		  "and it did not queue again at the back");
	q(m, "SELECT lockq_release('DR', 'holder')", NULL, NULL, NULL);
	PQgetResult(w);
	while (PQgetResult(w) != NULL)
		;
	q(w, "SELECT lockq_release('DR', 'behind')", NULL, NULL, NULL);
	PQfinish(w);
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * disconnect_waiter: lockqc_disconnect while another thread waits in
 * lockqc_lock on the same connection: the waiter returns LOCKQC_ERROR, no
 * memory error (run under valgrind too), nothing left queued.
 */
typedef struct dw_arg
{
	lockqc_conn *c;
	_Atomic int rc;
	_Atomic int64_t at;
} dw_arg;

static void *
dw_waiter(void *p)
{
	dw_arg	   *a = p;
	lockqc_handle *h = NULL;
	int			rc = lockqc_lock(a->c, "DW", NULL, &h);

	atomic_store(&a->at, now_ms());
	atomic_store(&a->rc, rc);
	return NULL;
}

static void
scenario_disconnect_waiter(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	dw_arg		a = {c, 99, 0};
	pthread_t	th;
	int64_t		t0;

	q(m, "SELECT lockq_try('DW', 'holder', '1 minute')", NULL, NULL, NULL);
	pthread_create(&th, NULL, dw_waiter, &a);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "DW", "1"),
		  "a thread waits in lockqc_lock");
	t0 = now_ms();
	lockqc_disconnect(c);
	check(now_ms() - t0 < 4000, "lockqc_disconnect returned in %" PRId64 " ms", now_ms() - t0);
	pthread_join(th, NULL);
	check(atomic_load(&a.rc) == LOCKQC_ERROR, "the waiter returned LOCKQC_ERROR (%s)",
		  lockqc_status_str(atomic_load(&a.rc)));
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "DW", "0"),
		  "nothing left queued");
	q(m, "SELECT lockq_release('DW', 'holder')", NULL, NULL, NULL);
	PQfinish(m);
}

/* disconnect_callback: lockqc_disconnect from the lost-lease callback. */
static _Atomic int cb_done = 0;

static void
disconnect_in_cb(lockqc_handle *h, void *arg)
{
	lockqc_disconnect((lockqc_conn *) arg);
	atomic_store(&cb_done, 1);
}

static void
scenario_disconnect_callback(void)
{
	lockqc_conn *c = connect_or_die();
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *h;
	lockqc_handle *h2;
	int64_t		end;

	lockqc_opts_init(&o);
	o.on_lost = disconnect_in_cb;
	o.on_lost_arg = c;
	check(lockqc_lock(c, "DC", &o, &h) == LOCKQC_OK, "lock");
	lockqc_opts_init(&o);
	check(lockqc_lock(c, "DC2", &o, &h2) == LOCKQC_OK, "and another");
	q(m, "SELECT lockq_force_release('DC')", NULL, NULL, NULL);
	end = now_ms() + 10000;
	while (!atomic_load(&cb_done) && now_ms() < end)
		sleep_ms(10);
	check(atomic_load(&cb_done), "lockqc_disconnect called in the callback returned");
	check(wait_until(m, "SELECT count(*)::text FROM lockq_locks WHERE lock_id = $1", "DC2", "0"),
		  "and released the other lock");
	/* the timer thread frees the connection after the callback: let it */
	sleep_ms(200);
	PQfinish(m);
}

/* ---- stalled backend: SIGSTOP of the library's own server process ---- */

#define MAX_STOPPED 8
static pthread_mutex_t stopped_mu = PTHREAD_MUTEX_INITIALIZER;
static int	stopped[MAX_STOPPED];
static int	nstopped = 0;
static _Atomic bool stall_over = false;

static void
cont_all(void)
{
	pthread_mutex_lock(&stopped_mu);
	for (int i = 0; i < nstopped; i++)
		kill(stopped[i], SIGCONT);
	pthread_mutex_unlock(&stopped_mu);
}

/* the backend of our library connection not stopped yet, stopped now */
static int
stop_backend(PGconn *m, const char *app)
{
	char		sql[512];
	int			pid = 0;
	int64_t		end = now_ms() + 10000;

	while (pid == 0 && now_ms() < end)
	{
		char		excl[256] = "0";

		pthread_mutex_lock(&stopped_mu);
		for (int i = 0; i < nstopped; i++)
			snprintf(excl + strlen(excl), sizeof(excl) - strlen(excl), ",%d", stopped[i]);
		pthread_mutex_unlock(&stopped_mu);
		snprintf(sql, sizeof(sql),
				 "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid NOT IN (%s)", excl);
		pid = atoi(q(m, sql, app, NULL, NULL));
		if (pid == 0)
			sleep_ms(20);
	}
	pthread_mutex_lock(&stopped_mu);
	if (pid > 0 && nstopped < MAX_STOPPED)
	{
		kill(pid, SIGSTOP);
		stopped[nstopped++] = pid;
	}
	pthread_mutex_unlock(&stopped_mu);
	return pid;
}

/* if the library hangs (the old one did), un-stop after a while */
static void *
stall_watchdog(void *p)
{
	int64_t		end = now_ms() + 150000;

	while (!atomic_load(&stall_over) && now_ms() < end)
		sleep_ms(100);
	if (!atomic_load(&stall_over))
	{
		printf("not ok - watchdog: the library hung on a stalled backend; SIGCONT after 150 s\n");
		fflush(stdout);
		failures++;
		cont_all();
	}
	return NULL;
}

static lockqc_cancel_flag stall_cancel;

static void *
stall_cancel_later(void *p)
{
	sleep_ms(300);
	atomic_store(&stall_cancel, 1);
	lockqc_wakeup((lockqc_conn *) p);
	return NULL;
}

static void
scenario_stall(void)
{
	char		app[64];
	char		ci[1024];
	char	   *err = NULL;
	lockqc_conn *c;
	PGconn	   *m = monitor();
	lockqc_opts o;
	lockqc_handle *sa = NULL;
	lockqc_handle *sb = NULL;
	lockqc_handle *sc = NULL;
	lockqc_handle *h = NULL;
	pthread_t	wd;
	pthread_t	th;
	int64_t		t0;
	int64_t		el;
	int64_t		end;
	bool		always;
	int			rc;

	snprintf(app, sizeof(app), "lockqc_stall_%d", (int) getpid());
	snprintf(ci, sizeof(ci), "%s application_name=%s", conninfo, app);
	c = lockqc_connect(ci, &err);
	if (c == NULL)
	{
		check(false, "connect: %s", err);
		return;
	}
	pthread_create(&wd, NULL, stall_watchdog, NULL);
	q(m, "SELECT lockq_try('SW', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.ttl_ms = 60000;
	check(lockqc_lock(c, "SA", &o, &sa) == LOCKQC_OK, "SA held (60 s ttl)");

	/* 1. the backend stalls; the I/O timeout is long: calls keep their own */
	lockqc_set_io_timeout(c, 60000);
	check(stop_backend(m, app) > 0, "the library's backend is stopped (SIGSTOP)");
	lockqc_opts_init(&o);
	o.timeout_ms = 1000;
	t0 = now_ms();
	rc = lockqc_lock(c, "SW", &o, &h);
	el = now_ms() - t0;
	check(rc == LOCKQC_TIMEOUT, "lockqc_lock, timeout 1 s, stalled backend: %s", lockqc_status_str(rc));
	check(el <= 1000 + 1000 + 500, "returned after %" PRId64 " ms (bound: timeout + 1 s)", el);
	printf("# MEASURE lock_timeout expected=2000 observed=%" PRId64 "\n", el);

	lockqc_opts_init(&o);
	o.cancel_flag = &stall_cancel;
	pthread_create(&th, NULL, stall_cancel_later, c);
	t0 = now_ms();
	rc = lockqc_lock(c, "SW", &o, &h);
	el = now_ms() - t0;
	pthread_join(th, NULL);
	check(rc == LOCKQC_CANCELLED, "a cancel during the stall: %s", lockqc_status_str(rc));
	check(el <= 300 + 1000 + 500, "returned after %" PRId64 " ms (cancel at 300 ms; bound + 1 s)", el);
	printf("# MEASURE cancel expected=1300 observed=%" PRId64 "\n", el);

	/* 2. unlock with a 3 s I/O timeout: the stall is detected, a new
	 * connection releases */
	lockqc_set_io_timeout(c, 3000);
	t0 = now_ms();
	rc = lockqc_unlock(sa);
	el = now_ms() - t0;
	check(rc == LOCKQC_OK || rc == LOCKQC_ERROR, "lockqc_unlock during the stall: %s (%s)",
		  lockqc_status_str(rc), rc == LOCKQC_OK ? "" : lockqc_errmsg(c));
	check(el <= 3000 + 500, "returned after %" PRId64 " ms (bound: the I/O timeout, 3 s)", el);
	printf("# MEASURE unlock expected=3000 observed=%" PRId64 "\n", el);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_locks WHERE lock_id = $1", "SA", "0"),
		  "SA released on the server (over a new connection)");
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "SW", "0"),
		  "the timed-out and the cancelled waits were withdrawn after the reconnect");

	/* 3. a held lease survives a stall: renewed over a new connection */
	lockqc_opts_init(&o);
	o.ttl_ms = 3000;
	check(lockqc_lock(c, "SB", &o, &sb) == LOCKQC_OK, "SB held (3 s ttl)");
	check(stop_backend(m, app) > 0, "the new backend is stopped too");
	always = true;
	end = now_ms() + 6000;
	while (now_ms() < end)
	{
		if (!lockqc_held(sb))
			always = false;
		sleep_ms(5);
	}
	check(always, "SB held without a gap for 6 s (two ttls) of stall");
	check(lockqc_unlock(sb) == LOCKQC_OK, "and released");

	/* 4. trylock during a stall: the I/O timeout */
	lockqc_set_io_timeout(c, 1500);
	check(stop_backend(m, app) > 0, "stopped again");
	t0 = now_ms();
	rc = lockqc_trylock(c, "ST", NULL, &h);
	el = now_ms() - t0;
	check(rc == LOCKQC_ERROR || rc == LOCKQC_OK, "lockqc_trylock during the stall: %s", lockqc_status_str(rc));
	check(el <= 1500 + 500, "returned after %" PRId64 " ms (bound: the I/O timeout, 1.5 s)", el);
	printf("# MEASURE trylock expected=1500 observed=%" PRId64 "\n", el);
	if (rc == LOCKQC_OK)
		lockqc_unlock(h);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_locks WHERE lock_id = $1", "ST", "0"),
		  "nothing left held of the try");

	/* 5. disconnect during a stall */
	lockqc_set_io_timeout(c, 60000);
	lockqc_opts_init(&o);
	check(lockqc_lock(c, "SC", &o, &sc) == LOCKQC_OK, "SC held");
	check(stop_backend(m, app) > 0, "stopped once more");
	t0 = now_ms();
	lockqc_disconnect(c);
	el = now_ms() - t0;
	check(el <= 2000 + 500, "lockqc_disconnect returned after %" PRId64 " ms (bound: 2 s)", el);
	printf("# MEASURE disconnect expected=2000 observed=%" PRId64 "\n", el);

	atomic_store(&stall_over, true);
	cont_all();
	pthread_join(wd, NULL);
	q(m, "SELECT lockq_release('SW', 'holder')", NULL, NULL, NULL);
	q(m, "SELECT lockq_force_release('SC')", NULL, NULL, NULL);
	PQfinish(m);
}

/* ---- a TCP proxy (test/t/302_client_faults.pl) that black-holes traffic ---- */

/*
 * proxy_failover: CONNINFO lists the proxy first and the server itself
 * second (target_session_attrs=read-write, connect_timeout=2).  The proxy
 * (pid in argv[3]) stops forwarding anything (SIGUSR1), without a reset:
 * the old primary "vanished".  The held lease must come through, renewed
 * over the second host, and the queued wait keep its place.
 */
typedef struct pf_arg
{
	lockqc_conn *c;
	_Atomic int rc;
} pf_arg;

typedef struct bh_arg
{
	lockqc_conn *c;
	lockqc_opts *o;
	lockqc_handle **h;
	int			rc;
	int64_t		done_at;
} bh_arg;

static void *
bh_waiter(void *p)
{
	bh_arg	   *a = p;

	a->rc = lockqc_lock(a->c, "BW", a->o, a->h);
	a->done_at = now_ms();
	if (a->rc == LOCKQC_OK)
		lockqc_unlock(*a->h);
	return NULL;
}

static void *
pf_waiter(void *p)
{
	pf_arg	   *a = p;
	lockqc_opts o;
	lockqc_handle *h;

	lockqc_opts_init(&o);
	o.heartbeat_ms = 30000;
	o.owner = "pf-waiter";
	atomic_store(&a->rc, lockqc_lock(a->c, "PW", &o, &h));
	if (atomic_load(&a->rc) == LOCKQC_OK)
		lockqc_unlock(h);
	return NULL;
}

static void
scenario_proxy_failover(int proxy)
{
	lockqc_conn *c;
	char	   *err = NULL;
	PGconn	   *m;
	lockqc_opts o;
	lockqc_handle *h;
	pthread_t	th;
	pf_arg		a;
	char		tok[32];
	int64_t		end;
	int64_t		t0;
	bool		always = true;
	char		direct[1024];

	snprintf(direct, sizeof(direct), "%s application_name=lockqc_pf", conninfo);
	c = lockqc_connect(direct, &err);
	if (c == NULL)
	{
		check(false, "connect through the proxy: %s", err);
		return;
	}
	/* the monitor goes straight to the server (the second host) */
	snprintf(direct, sizeof(direct), "%s", getenv("LOCKQC_DIRECT"));
	m = PQconnectdb(direct);
	a.c = c;
	atomic_init(&a.rc, 99);
	lockqc_opts_init(&o);
	o.ttl_ms = 12000;
	o.on_lost = record_lost;
	check(lockqc_lock(c, "PF", &o, &h) == LOCKQC_OK, "PF held (12 s ttl) through the proxy");
	check(strcmp(q(m, "SELECT count(*)::text FROM pg_stat_activity WHERE client_port > 0"
				   " AND application_name = 'lockqc_pf'", NULL, NULL, NULL), "1") == 0,
		  "the library's connection is a TCP one (through the proxy, the first host)");
	snprintf(tok, sizeof(tok), "%" PRId64, lockqc_token(h));
	q(m, "SELECT lockq_try('PW', 'holder', '1 minute')", NULL, NULL, NULL);
	pthread_create(&th, NULL, pf_waiter, &a);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "PW", "1"),
		  "a wait is queued");

	kill(proxy, SIGUSR1);
	t0 = now_ms();
	end = t0 + 15000;
	while (now_ms() < end)
	{
		if (!lockqc_held(h))
			always = false;
		sleep_ms(5);
	}
	check(always && atomic_load(&lost_at) == 0,
		  "PF held without a gap for 15 s after the first host vanished (no reset)");
	check(strcmp(q(m, "SELECT lockq_holds('PF', $1)", tok, NULL, NULL), "t") == 0,
		  "the server agrees: same token %s, renewed over the second host", tok);
	check(strcmp(q(m, "SELECT owner FROM lockq_waiters WHERE lock_id = 'PW'", NULL, NULL, NULL), "pf-waiter") == 0,
		  "the wait kept its place");
	q(m, "SELECT lockq_release('PW', 'holder')", NULL, NULL, NULL);
	pthread_join(th, NULL);
	check(atomic_load(&a.rc) == LOCKQC_OK, "and was granted (%s)", lockqc_status_str(atomic_load(&a.rc)));
	check(lockqc_unlock(h) == LOCKQC_OK, "unlock over the second host");
	lockqc_disconnect(c);
	printf("# MEASURE failover_gap_ms=0 (held throughout)\n");
	PQfinish(m);
}

/*
 * proxy_open connects the library through the proxy (conninfo) and a
 * monitor straight to the server (LOCKQC_DIRECT); false, with a failed
 * check, if the library cannot connect.
 */
static bool
proxy_open(lockqc_conn **c, PGconn **m)
{
	char	   *err = NULL;

	*c = lockqc_connect(conninfo, &err);
	if (*c == NULL)
	{
		check(false, "connect through the proxy: %s", err);
		return false;
	}
	*m = PQconnectdb(getenv("LOCKQC_DIRECT"));
	return true;
}

/*
 * proxy_blackhole_wait: a wait (heartbeat_ms 3000) goes on through the
 * proxy (argv[3]) until the proxy black-holes everything (SIGUSR1: no
 * reset, new connections accepted and never answered, as a host that
 * vanished).  The wait fails with 08006 within the heartbeat interval of
 * the server's last answer, as doc/liblockq.md says, not after a connect
 * timeout on top.
 */
static void
scenario_proxy_blackhole_wait(int proxy)
{
	lockqc_conn *c;
	PGconn	   *m;
	lockqc_opts o;
	lockqc_handle *h = NULL;
	int64_t		t0;
	int64_t		el;
	int			rc;

	if (!proxy_open(&c, &m))
		return;
	q(m, "SELECT lockq_try('BW', 'holder', '1 minute')", NULL, NULL, NULL);
	lockqc_opts_init(&o);
	o.heartbeat_ms = 3000;
	o.owner = "blackhole-waiter";
	o.timeout_ms = 60000;
	/* the wait is queued and heartbeating when the host vanishes */
	{
		pthread_t	th;
		bh_arg		a = {c, &o, &h, 99, 0};

		pthread_create(&th, NULL, bh_waiter, &a);
		check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE lock_id = $1", "BW", "1"),
			  "a wait is queued through the proxy");
		sleep_ms(1500);				/* a heartbeat or two */
		kill(proxy, SIGUSR1);
		t0 = now_ms();
		pthread_join(th, NULL);
		rc = a.rc;
		el = a.done_at - t0;
	}
	check(rc == LOCKQC_ERROR && strcmp(lockqc_sqlstate(c), "08006") == 0,
		  "the wait fails with 08006 (%s, %s)", lockqc_status_str(rc), lockqc_sqlstate(c));
	check(el <= 3000 + 500, "within the heartbeat interval (3 s) of the black hole: %" PRId64 " ms", el);
	printf("# MEASURE blackhole_wait_fail_ms=%" PRId64 "\n", el);
	q(m, "SELECT lockq_release('BW', 'holder')", NULL, NULL, NULL);
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * proxy_lostreply: the proxy (argv[3]) forwards requests but drops every
 * reply (SIGUSR2): a try and an enqueue happen on the server, their
 * answers never come.  The calls end on time, and once the proxy forwards
 * again (SIGHUP) the library withdraws the grant and the wait by owner,
 * long before their ttl and heartbeat interval would.
 */
static void
scenario_proxy_lostreply(int proxy)
{
	lockqc_conn *c;
	PGconn	   *m;
	lockqc_opts o;
	lockqc_handle *h = NULL;
	int64_t		t0;
	int64_t		el;
	int			rc;

	if (!proxy_open(&c, &m))
		return;
	lockqc_set_io_timeout(c, 2000);
	q(m, "SELECT lockq_try('LW', 'holder', '1 minute')", NULL, NULL, NULL);
	kill(proxy, SIGUSR2);
	sleep_ms(100);				/* (the proxy takes the signal) */

	lockqc_opts_init(&o);
	o.owner = "lostreply-try";
	o.ttl_ms = 120000;
	t0 = now_ms();
	rc = lockqc_trylock(c, "LR", &o, &h);
	el = now_ms() - t0;
	check(rc == LOCKQC_ERROR, "trylock whose reply is lost: %s (%s)", lockqc_status_str(rc), lockqc_errmsg(c));
	check(el <= 2000 + 500, "after %" PRId64 " ms (the 2 s I/O timeout)", el);
	check(strcmp(q(m, "SELECT owner FROM lockq_locks WHERE lock_id = 'LR'", NULL, NULL, NULL), "lostreply-try") == 0,
		  "the server did grant it (a 120 s lease nobody holds)");

	lockqc_opts_init(&o);
	o.owner = "lostreply-wait";
	o.heartbeat_ms = 120000;
	o.timeout_ms = 1500;
	t0 = now_ms();
	rc = lockqc_lock(c, "LW", &o, &h);
	el = now_ms() - t0;
	check(rc == LOCKQC_TIMEOUT, "lock whose replies are lost: %s", lockqc_status_str(rc));
	check(el <= 1500 + 1000 + 500, "after %" PRId64 " ms (timeout 1.5 s + at most 1 s)", el);
	printf("# MEASURE lostreply_lock expected=2500 observed=%" PRId64 "\n", el);

	kill(proxy, SIGHUP);		/* forwards again */
	t0 = now_ms();
	check(wait_until(m, "SELECT count(*)::text FROM lockq_locks WHERE owner = $1", "lostreply-try", "0"),
		  "after the reconnect the library released the grant it never got (%" PRId64 " ms)", now_ms() - t0);
	check(wait_until(m, "SELECT count(*)::text FROM lockq_waiters WHERE owner = $1", "lostreply-wait", "0"),
		  "and withdrew the wait (%" PRId64 " ms; its heartbeat interval is 120 s)", now_ms() - t0);
	q(m, "SELECT lockq_release('LW', 'holder')", NULL, NULL, NULL);
	lockqc_disconnect(c);
	PQfinish(m);
}

/*
 * boottime: run with test/boottime_shim.so preloaded.  A 10 s jump of
 * CLOCK_BOOTTIME (what a system suspend looks like; CLOCK_MONOTONIC does
 * not move) ends a 5 s lease's local deadline: the server's lease clock
 * went on during the suspend, so the library must not go on believing it
 * holds the lock.
 */
static void
boot_offset(int64_t ms)
{
	FILE	   *f = fopen(getenv("LQ_BOOT_OFFSET_FILE"), "w");

	if (f != NULL)
	{
		fprintf(f, "%lld\n", (long long) ms);
		fclose(f);
	}
}

static void
scenario_boottime(void)
{
	lockqc_conn *c;
	lockqc_opts o;
	lockqc_handle *h;

	if (getenv("LQ_BOOT_OFFSET_FILE") == NULL)
	{
		check(false, "LQ_BOOT_OFFSET_FILE is not set");
		return;
	}
	boot_offset(0);
	c = connect_or_die();
	lockqc_opts_init(&o);
	o.ttl_ms = 5000;
	o.auto_renew = false;
	check(lockqc_trylock(c, "BT", &o, &h) == LOCKQC_OK, "lock with a 5 s ttl, no renewal");
	check(lockqc_held(h) && lockqc_remaining_ms(h) > 4000, "held, %" PRId64 " ms left",
		  lockqc_remaining_ms(h));
	boot_offset(10000);
	check(!lockqc_held(h), "after a (simulated) 10 s suspend it is no longer held");
	check(lockqc_remaining_ms(h) == 0, "and no time is left");
	boot_offset(0);
	lockqc_unlock(h);
	lockqc_disconnect(c);
}

int
main(int argc, char **argv)
{
	const char *scenario;

	if (argc != 3 && argc != 4)
	{
		fprintf(stderr, "usage: %s SCENARIO CONNINFO [PROXY_PID]\n", argv[0]);
		return 2;
	}
	scenario = argv[1];
	conninfo = argv[2];
	/* (the TAP framework sets it; it would hide fallback_application_name) */
	unsetenv("PGAPPNAME");
	if (strcmp(scenario, "basic") == 0)
		scenario_basic();
	else if (strcmp(scenario, "fifo") == 0)
		scenario_fifo();
	else if (strcmp(scenario, "timeout") == 0)
		scenario_timeout();
	else if (strcmp(scenario, "cancel") == 0)
		scenario_cancel();
	else if (strcmp(scenario, "watchdog") == 0)
		scenario_watchdog();
	else if (strcmp(scenario, "lost_admin") == 0)
		scenario_lost_admin();
	else if (strcmp(scenario, "extend") == 0)
		scenario_extend();
	else if (strcmp(scenario, "lost_stop") == 0)
		scenario_lost_stop();
	else if (strcmp(scenario, "deadline") == 0)
		scenario_deadline();
	else if (strcmp(scenario, "threads") == 0)
		scenario_threads();
	else if (strcmp(scenario, "handoff") == 0)
		scenario_handoff();
	else if (strcmp(scenario, "await") == 0)
		scenario_await();
	else if (strcmp(scenario, "reconnect") == 0)
		scenario_reconnect();
	else if (strcmp(scenario, "failover_hold") == 0)
		scenario_failover_hold();
	else if (strcmp(scenario, "api") == 0)
		scenario_api();
	else if (strcmp(scenario, "boottime") == 0)
		scenario_boottime();
	else if (strcmp(scenario, "dropped") == 0)
		scenario_dropped();
	else if (strcmp(scenario, "disconnect_waiter") == 0)
		scenario_disconnect_waiter();
	else if (strcmp(scenario, "disconnect_callback") == 0)
		scenario_disconnect_callback();
	else if (strcmp(scenario, "stall") == 0)
		scenario_stall();
	else if (strcmp(scenario, "proxy_failover") == 0 && argc == 4)
		scenario_proxy_failover(atoi(argv[3]));
	else if (strcmp(scenario, "proxy_blackhole_wait") == 0 && argc == 4)
		scenario_proxy_blackhole_wait(atoi(argv[3]));
	else if (strcmp(scenario, "proxy_lostreply") == 0 && argc == 4)
		scenario_proxy_lostreply(atoi(argv[3]));
	else
	{
		fprintf(stderr, "unknown scenario %s\n", scenario);
		return 2;
	}
	return failures == 0 ? 0 : 1;
}

/*-------------------------------------------------------------------------
 *
 * lockq_torture.c
 *		The workload of the randomized crash test: clients that take, renew,
 *		check, use and release lockq locks, and record everything they were
 *		told, for test/torture/check_history.pl.
 *
 *	lockq_torture [-s SEED] [-d SECONDS] [-w WORKERS] [-l LOCKS] [-o DIR]
 *				  CONNINFO
 *
 * -s: the master seed (default: from the time); -d: how long the workers
 * run (default 20 s); -w: how many workers (default 8); -l: how many locks
 * (default 3, named L0, L1, ...); -o: where the histories go (default ".").
 *
 * Each worker is a thread with its own PRNG, seeded from the master seed
 * and its number, and its own history file DIR/wN.tsv.  Workers are of four
 * kinds, assigned round-robin (own, sess, cw, lib, own, cw, sess, own):
 *
 *	own		SQL with an explicit owner: lockq_get with a timeout, lockq_try,
 *			lockq_renew, lockq_release with the token, lockq_holds, fenced
 *			writes, re-entrant lockq_get/lockq_try, lockq_now, and probes of
 *			tokens it held before (holds, renew, release);
 *	sess	the same with owner NULL (session-bound grants), and now and then
 *			it closes its session on purpose;
 *	cw		a client-side waiter: lockq_enqueue (channel NULL, a 2 s
 *			heartbeat interval; half of them with a wait in the backend),
 *			lockq_heartbeat or lockq_await (with a timeout) until granted,
 *			lockq_cancel when it gives up; once granted, as "own";
 *	lib		liblockq: lockqc_lock / lockqc_trylock with an owner name of its
 *			own, lockqc_held, fenced writes with lockqc_token on a second
 *			(plain libpq) connection, lockqc_unlock.
 *
 * A fenced write is BEGIN; SELECT lockq_holds(L, t); and, if true,
 * UPDATE torture_counter SET n = n + 1, last_token = t WHERE lock_id = L
 * RETURNING n; COMMIT.  n is the write's place in the lock's commit order.
 *
 * Owners are fresh for every acquisition (wN.K), so a token is only ever
 * returned to one owner again when that owner asked again on purpose
 * (re-entrancy).  Each grant keeps one ttl for all its extensions.  Ttls
 * are mostly short (0.3 - 3 s) so that leases run out and pass on, some
 * long (4 - 8 s).  A worker that loses its connection logs the call in
 * flight as "info" (unknown outcome) and reconnects (a new incarnation);
 * "own" and "cw" workers keep their grants and waits across that (explicit
 * owners outlive sessions), "sess" workers forget theirs (the session is
 * gone).  When the time is up every worker releases what it holds and
 * withdraws what it waits for.
 *
 * History files (see test/torture/README.md for the format): one line per
 * event, tab-separated:
 *	t_ns proc inc opid type f lock owner ttl_ms token value note
 * t_ns is CLOCK_MONOTONIC in nanoseconds, read just before a call is sent
 * (invoke) and just after its answer came (completion).
 *
 * The database needs lockq and a table
 *	torture_counter(lock_id text PRIMARY KEY, n bigint, last_token bigint)
 * with a row for each lock; the program creates both rows and table if
 * they are missing.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/test/lockq_torture.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"

#define MAX_WORKERS		64
#define MAX_LOCKS		16
#define NPAST			8		/* past tokens kept for probes */
#define HEARTBEAT_MS	2000	/* client-side waiters' heartbeat interval */
#define NAMELEN			128

typedef enum
{
	K_OWN, K_SESS, K_CW, K_LIB
} Kind;

static const char *const kind_name[] = {"own", "sess", "cw", "lib"};
static const Kind kind_cycle[] = {K_OWN, K_SESS, K_CW, K_LIB, K_OWN, K_CW, K_SESS, K_OWN};

/* How a statement ended. */
typedef enum
{
	RES_OK,						/* it succeeded */
	RES_ERR,						/* the server raised an error; session alive */
	RES_CONN						/* the connection broke: outcome unknown */
} RKind;

typedef struct Res
{
	PGresult   *r;
	RKind		kind;
	int64_t		t_done;			/* monotonic ns, just after the answer */
	char		sqlstate[6];
	char		msg[200];
} Res;

/* A call in flight: what its invoke line said. */
typedef struct Op
{
	long		id;
	const char *f;
	char		lock[16];
	char		owner[NAMELEN];
	int			ttl_ms;
	int64_t		token;
	int64_t		t_inv;
} Op;

/* A token this worker held once, for probes. */
typedef struct Past
{
	char		lock[16];
	char		owner[NAMELEN];
	int64_t		token;
	int			ttl_ms;
} Past;

typedef struct Worker
{
	int			id;
	Kind		kind;
	uint64_t	rng;
	FILE	   *log;
	long		opid;
	int			inc;			/* incarnation: bumped at every (re)connect */

	PGconn	   *pg;				/* SQL connection (lib: for fenced writes) */
	char		sess_owner[NAMELEN];	/* lockq_session_owner() of pg */
	lockqc_conn *lc;			/* lib only */
	lockqc_handle *h;			/* lib only: the held handle */

	/* the grant this worker holds (by its own reckoning) */
	bool		held;
	char		lock[16];
	char		owner[NAMELEN];
	int64_t		token;
	int			ttl_ms;
	int64_t		reckon_ns;		/* lease end by its own reckoning */
	int			hold_ops;		/* operations left before it releases */

	/* cw: the wait in progress */
	bool		waiting;
	int64_t		give_up_ns;

	Past		past[NPAST];
	int			npast;
	int			probe_burst;	/* probes to make first (after a reconnect) */
	int			owner_seq;

	/* counters */
	long		n_ops, n_ok, n_fail, n_info, n_grants, n_writes, n_reconnects;
} Worker;

/*
 * Tokens that ended recently (released, dropped, found dead), shared by all
 * workers: after a reconnect every worker asks lockq_holds about the latest
 * ones, the grants a crash is most likely to bring back.
 */
#define NRECENT		32
static struct
{
	char		lock[16];
	int64_t		token;
}			recent[NRECENT];
static int	nrecent;
static pthread_mutex_t recent_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *conninfo;
static int	nlocks = 3;
static int64_t deadline_ns;
static volatile sig_atomic_t stop_flag;

/* ---------------------------------------------------------------------
 * Small helpers
 * --------------------------------------------------------------------- */

static int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* splitmix64: the PRNG of each worker, and its seeding from the master seed */
static uint64_t
rnd(uint64_t *s)
{
	uint64_t	z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* rnd_range returns a number in [lo, hi]. */
static int64_t
rnd_range(Worker *w, int64_t lo, int64_t hi)
{
	return lo + (int64_t) (rnd(&w->rng) % (uint64_t) (hi - lo + 1));
}

/* chance(w, pct) is true with a probability of pct percent. */
static bool
chance(Worker *w, int pct)
{
	return (int) (rnd(&w->rng) % 100) < pct;
}

static bool
time_up(void)
{
	return stop_flag || mono_ns() >= deadline_ns;
}

/* sleep_ms sleeps, but not past the end of the run. */
static void
sleep_ms(int64_t ms)
{
	int64_t		until = mono_ns() + ms * 1000000;
	struct timespec ts;

	if (until > deadline_ns)
		until = deadline_ns;
	while (!stop_flag)
	{
		int64_t		left = until - mono_ns();

		if (left <= 0)
			break;
		if (left > 50000000)
			left = 50000000;
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		nanosleep(&ts, NULL);
	}
}

/* clean copies s into buf with tabs and newlines turned into spaces. */
static void
clean(char *buf, size_t len, const char *s)
{
	size_t		i;

	for (i = 0; s != NULL && s[i] != '\0' && i + 1 < len; i++)
		buf[i] = (s[i] == '\t' || s[i] == '\n' || s[i] == '\r') ? ' ' : s[i];
	buf[i] = '\0';
	if (i == 0)
		strcpy(buf, "-");
}

/*
 * pick_ttl: mostly short leases (they run out and pass on while the test
 * goes on), some long ones (they outlive crashes and restarts).
 */
static int
pick_ttl(Worker *w)
{
	int			p = (int) rnd_range(w, 0, 99);

	if (p < 55)
		return (int) rnd_range(w, 300, 1500);
	if (p < 88)
		return (int) rnd_range(w, 1500, 3000);
	return (int) rnd_range(w, 4000, 8000);
}

static void
pick_lock(Worker *w, char *buf)
{
	snprintf(buf, 16, "L%d", (int) rnd_range(w, 0, nlocks - 1));
}

static void
new_owner(Worker *w, char *buf)
{
	snprintf(buf, NAMELEN, "w%d.%d", w->id, ++w->owner_seq);
}

/* ---------------------------------------------------------------------
 * The history
 * --------------------------------------------------------------------- */

/*
 * put_line writes one history line and flushes it, so that a run that is
 * killed still leaves everything up to that point.
 */
static void
put_line(Worker *w, int64_t t, long id, const char *type, const char *f,
		 const char *lock, const char *owner, int ttl_ms, int64_t token,
		 const char *value, const char *note)
{
	char		ttl[24],
				tok[24],
				nt[256];

	if (ttl_ms > 0)
		snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
	else
		strcpy(ttl, "-");
	if (token > 0)
		snprintf(tok, sizeof(tok), "%" PRId64, token);
	else
		strcpy(tok, "-");
	clean(nt, sizeof(nt), note);
	fprintf(w->log, "%" PRId64 "\tw%d\t%d\t%ld\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			t, w->id, w->inc, id, type, f, lock && *lock ? lock : "-",
			owner && *owner ? owner : "-", ttl, tok,
			value && *value ? value : "-", nt);
	fflush(w->log);
}

/* meta writes an event that is not a call (connect, lost, close, end). */
static void
meta(Worker *w, const char *f, const char *owner, const char *value,
	 const char *note)
{
	put_line(w, mono_ns(), ++w->opid, "meta", f, NULL, owner, 0, 0, value,
			 note);
}

/*
 * op_begin logs the invoke of a call; its time is read last, just before
 * the caller sends the call.
 */
static void
op_begin(Worker *w, Op *op, const char *f, const char *lock,
		 const char *owner, int ttl_ms, int64_t token)
{
	op->id = ++w->opid;
	op->f = f;
	snprintf(op->lock, sizeof(op->lock), "%s", lock ? lock : "");
	snprintf(op->owner, sizeof(op->owner), "%s", owner ? owner : "");
	op->ttl_ms = ttl_ms;
	op->token = token;
	/* (writing the line takes time: the call is sent a little later) */
	op->t_inv = mono_ns();
	put_line(w, op->t_inv, op->id, "invoke", f, op->lock, op->owner, ttl_ms,
			 token, NULL, NULL);
	w->n_ops++;
}

/* op_end logs the completion of a call, at t (taken just after the answer). */
static void
op_end(Worker *w, Op *op, int64_t t, const char *type, int64_t token,
	   const char *value, const char *note)
{
	put_line(w, t, op->id, type, op->f, op->lock, op->owner, op->ttl_ms,
			 token > 0 ? token : op->token, value, note);
	if (strcmp(type, "ok") == 0)
		w->n_ok++;
	else if (strcmp(type, "fail") == 0)
		w->n_fail++;
	else
		w->n_info++;
}

/* op_end_res logs the completion of a call that did not succeed. */
static void
op_end_res(Worker *w, Op *op, const Res *res)
{
	if (res->kind == RES_CONN)
		op_end(w, op, res->t_done, "info", 0, "conn", res->msg);
	else
		op_end(w, op, res->t_done, "fail", 0, res->sqlstate, res->msg);
}

/* ---------------------------------------------------------------------
 * SQL
 * --------------------------------------------------------------------- */

/*
 * sql_exec runs one parameterised statement on pg and classifies the
 * outcome.  A broken connection, and the errors with which a server ends
 * sessions (class 57P, 08), are RES_CONN: the call may or may not have taken
 * effect.  The caller clears res->r with res_clear.
 */
static void
sql_exec(PGconn *pg, const char *sql, int n, const char *const *params,
		 Res *res)
{
	ExecStatusType st;

	res->sqlstate[0] = '\0';
	res->msg[0] = '\0';
	res->r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
	res->t_done = mono_ns();
	st = res->r ? PQresultStatus(res->r) : PGRES_FATAL_ERROR;
	if (res->r != NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
	{
		res->kind = RES_OK;
		return;
	}
	if (res->r != NULL)
	{
		const char *s = PQresultErrorField(res->r, PG_DIAG_SQLSTATE);
		const char *m = PQresultErrorField(res->r, PG_DIAG_MESSAGE_PRIMARY);

		snprintf(res->sqlstate, sizeof(res->sqlstate), "%s", s ? s : "");
		clean(res->msg, sizeof(res->msg), m ? m : PQresultErrorMessage(res->r));
	}
	else
		clean(res->msg, sizeof(res->msg), PQerrorMessage(pg));
	if (PQstatus(pg) == CONNECTION_BAD || res->sqlstate[0] == '\0' ||
		strncmp(res->sqlstate, "57P", 3) == 0 ||
		strncmp(res->sqlstate, "08", 2) == 0)
		res->kind = RES_CONN;
	else
		res->kind = RES_ERR;
}

static void
res_clear(Res *res)
{
	PQclear(res->r);
	res->r = NULL;
}

/* res_null: is the single value of a successful SELECT NULL? */
static bool
res_null(const Res *res)
{
	return PQntuples(res->r) != 1 || PQgetisnull(res->r, 0, 0);
}

static const char *
res_val(const Res *res)
{
	return PQgetvalue(res->r, 0, 0);
}

/* op_end_value logs a call whose answer is a value: ok with it, or why not. */
static void
op_end_value(Worker *w, Op *op, const Res *res)
{
	if (res->kind == RES_OK && !res_null(res))
		op_end(w, op, res->t_done, "ok", 0, res_val(res), NULL);
	else
		op_end_res(w, op, res);
}

static void
fmt_ms(char *buf, size_t len, int ms)
{
	snprintf(buf, len, "%d milliseconds", ms);
}

/*
 * past_add remembers a grant this worker held (for its own probes) and puts
 * its token in the shared list of recently ended ones.
 */
static void
past_add(Worker *w, const char *lock, const char *owner, int64_t token,
		 int ttl_ms)
{
	Past	   *p;

	pthread_mutex_lock(&recent_mu);
	snprintf(recent[nrecent % NRECENT].lock, sizeof(recent[0].lock), "%s", lock);
	recent[nrecent % NRECENT].token = token;
	nrecent++;
	pthread_mutex_unlock(&recent_mu);

	if (w->npast < NPAST)
		p = &w->past[w->npast++];
	else
	{
		memmove(&w->past[0], &w->past[1], sizeof(Past) * (NPAST - 1));
		p = &w->past[NPAST - 1];
	}
	snprintf(p->lock, sizeof(p->lock), "%s", lock);
	snprintf(p->owner, sizeof(p->owner), "%s", owner);
	p->token = token;
	p->ttl_ms = ttl_ms;
}

/* forget_grant ends what this worker believes it holds. */
static void
forget_grant(Worker *w)
{
	if (w->held)
		past_add(w, w->lock, w->owner, w->token, w->ttl_ms);
	w->held = false;
	w->waiting = false;
}

/*
 * conn_lost closes a broken connection.  A session-bound worker's grants
 * ended with the session; explicit owners keep theirs.
 */
static void
conn_lost(Worker *w, const char *why)
{
	meta(w, "lost", w->kind == K_SESS ? w->sess_owner : NULL, "-", why);
	PQfinish(w->pg);
	w->pg = NULL;
	if (w->kind == K_SESS)
		forget_grant(w);
	w->probe_burst = 4;
}

/*
 * res_done ends a call's result: clears it and, when the connection broke,
 * closes it (conn_lost).
 */
static void
res_done(Worker *w, Res *res)
{
	res_clear(res);
	if (res->kind == RES_CONN)
		conn_lost(w, res->msg);
}

/*
 * sql_connect (re)connects w->pg until it works or the run is over, and
 * starts a new incarnation: application_name torture_wN, the session's
 * owner name for session-bound locks, a statement_timeout as a safety net.
 */
static bool
sql_connect(Worker *w)
{
	int			delay = 20;

	while (!time_up())
	{
		Res			res;
		char		app[32];
		const char *params[1] = {app};

		w->pg = PQconnectdb(conninfo);
		if (PQstatus(w->pg) == CONNECTION_OK)
		{
			snprintf(app, sizeof(app), "torture_w%d", w->id);
			sql_exec(w->pg,
					 "SELECT lockq_session_owner(), pg_backend_pid(), "
					 "set_config('application_name', $1, false), "
					 "set_config('statement_timeout', '30s', false)",
					 1, params, &res);
			if (res.kind == RES_OK && PQntuples(res.r) == 1)
			{
				w->inc++;
				w->n_reconnects++;
				snprintf(w->sess_owner, sizeof(w->sess_owner), "%s",
						 PQgetvalue(res.r, 0, 0));
				meta(w, "conn", w->sess_owner,
					 w->kind == K_LIB ? "libsql" : kind_name[w->kind],
					 PQgetvalue(res.r, 0, 1));
				res_clear(&res);
				return true;
			}
			res_clear(&res);
		}
		PQfinish(w->pg);
		w->pg = NULL;
		sleep_ms(delay);
		delay = delay * 2 > 500 ? 500 : delay * 2;
	}
	return false;
}

/* The owner as the SQL functions get it: NULL for session-bound workers. */
static const char *
sql_owner(Worker *w, const char *owner)
{
	return w->kind == K_SESS ? NULL : owner;
}

/* The owner as the history shows it. */
static const char *
log_owner(Worker *w, const char *owner)
{
	return w->kind == K_SESS ? w->sess_owner : owner;
}

/*
 * took_grant records a grant (new or re-entrant) this worker was told of:
 * its lease ends, by the worker's reckoning, ttl after the call was sent.
 */
static void
took_grant(Worker *w, const char *lock, const char *owner, int64_t token,
		   int ttl_ms, int64_t t_inv)
{
	int64_t		end = t_inv + (int64_t) ttl_ms * 1000000;

	if (w->held && w->token == token)
	{
		if (end > w->reckon_ns)
			w->reckon_ns = end;
		return;
	}
	if (w->held)
		forget_grant(w);
	w->held = true;
	snprintf(w->lock, sizeof(w->lock), "%s", lock);
	snprintf(w->owner, sizeof(w->owner), "%s", owner);
	w->token = token;
	w->ttl_ms = ttl_ms;
	w->reckon_ns = end;
	w->hold_ops = (int) rnd_range(w, 1, 8);
	w->n_grants++;
}

/* ---------------------------------------------------------------------
 * SQL operations.  Each logs its invoke and completion; a broken
 * connection is logged as info and closed.
 * --------------------------------------------------------------------- */

/* op_acquire: lockq_get (with a timeout) or lockq_try, by a new owner or,
 * re-entrantly, by the holder (same owner and ttl). */
static void
op_acquire(Worker *w, bool reentrant)
{
	char		lock[16],
				owner[NAMELEN],
				ttl[40],
				tmo[40];
	int			ttl_ms,
				tmo_ms;
	bool		is_get = chance(w, 65);
	const char *params[4];
	Op			op;
	Res			res;

	if (reentrant)
	{
		snprintf(lock, sizeof(lock), "%s", w->lock);
		snprintf(owner, sizeof(owner), "%s", w->owner);
		ttl_ms = w->ttl_ms;
	}
	else
	{
		pick_lock(w, lock);
		new_owner(w, owner);
		ttl_ms = pick_ttl(w);
	}
	tmo_ms = chance(w, 80) ? (int) rnd_range(w, 100, 3000) : (int) rnd_range(w, 3000, 6000);
	fmt_ms(ttl, sizeof(ttl), ttl_ms);
	fmt_ms(tmo, sizeof(tmo), tmo_ms);
	params[0] = lock;
	params[1] = sql_owner(w, owner);
	params[2] = ttl;
	params[3] = tmo;
	op_begin(w, &op, is_get ? "get" : "try", lock, log_owner(w, owner), ttl_ms, 0);
	sql_exec(w->pg, is_get ?
			 "SELECT lockq_get($1, $2, $3::interval, $4::interval)" :
			 "SELECT lockq_try($1, $2, $3::interval)",
			 is_get ? 4 : 3, params, &res);
	if (res.kind == RES_OK)
	{
		if (res_null(&res))
			op_end(w, &op, res.t_done, "ok", 0, "null", NULL);
		else
		{
			int64_t		token = strtoll(res_val(&res), NULL, 10);

			op_end(w, &op, res.t_done, "ok", token, res_val(&res), NULL);
			took_grant(w, lock, log_owner(w, owner), token, ttl_ms, op.t_inv);
		}
	}
	else
		op_end_res(w, &op, &res);
	res_done(w, &res);
}

/*
 * op_token_call: lockq_holds, lockq_renew or lockq_release of token (on
 * lock, by owner), answering a boolean.  Returns 1 for true, 0 for false,
 * -1 when unknown.
 */
static int
op_token_call(Worker *w, const char *f, const char *lock, const char *owner,
			  int64_t token, int ttl_ms)
{
	char		tok[24],
				ttl[40];
	const char *params[4];
	const char *sql;
	int			n;
	int			rc = -1;
	bool		null_ttl = false;
	Op			op;
	Res			res;

	snprintf(tok, sizeof(tok), "%" PRId64, token);
	params[0] = lock;
	if (strcmp(f, "holds") == 0)
	{
		params[1] = tok;
		sql = "SELECT lockq_holds($1, $2::bigint)";
		n = 2;
		ttl_ms = 0;
	}
	else if (strcmp(f, "renew") == 0)
	{
		/* NULL means the grant's own ttl, the same one */
		null_ttl = chance(w, 50);
		fmt_ms(ttl, sizeof(ttl), ttl_ms);
		params[1] = sql_owner(w, owner);
		params[2] = tok;
		params[3] = null_ttl ? NULL : ttl;
		sql = "SELECT lockq_renew($1, $2, $3::bigint, $4::interval)";
		n = 4;
	}
	else
	{
		params[1] = sql_owner(w, owner);
		params[2] = tok;
		sql = "SELECT lockq_release($1, $2, $3::bigint)";
		n = 3;
		ttl_ms = 0;
	}
	op_begin(w, &op, f, lock, strcmp(f, "holds") == 0 ? NULL : log_owner(w, owner),
			 ttl_ms, token);
	sql_exec(w->pg, sql, n, params, &res);
	if (res.kind == RES_OK && !res_null(&res))
	{
		rc = strcmp(res_val(&res), "t") == 0;
		op_end(w, &op, res.t_done, "ok", 0, rc ? "t" : "f", null_ttl ? "ttl NULL" : NULL);
	}
	else if (res.kind == RES_OK)
		op_end(w, &op, res.t_done, "fail", 0, "null", "unexpected NULL");
	else
		op_end_res(w, &op, &res);
	if (rc == 1 && strcmp(f, "renew") == 0 && w->held && w->token == token)
	{
		int64_t		end = op.t_inv + (int64_t) ttl_ms * 1000000;

		if (end > w->reckon_ns)
			w->reckon_ns = end;
	}
	res_done(w, &res);
	return rc;
}

/*
 * op_fenced_write: BEGIN; lockq_holds (logged as "fholds"); if true, the
 * UPDATE of torture_counter and COMMIT (logged together as "fwrite", whose
 * value is the row's new n).  Returns the holds answer (1, 0, -1 unknown).
 */
static int
op_fenced_write(Worker *w, PGconn *pg, const char *lock, int64_t token)
{
	char		tok[24];
	const char *params[2] = {lock, tok};
	int			rc = -1;
	Op			op;
	Res			res;

	snprintf(tok, sizeof(tok), "%" PRId64, token);
	sql_exec(pg, "BEGIN", 0, NULL, &res);
	if (res.kind != RES_OK)
		goto broken;
	res_clear(&res);

	op_begin(w, &op, "fholds", lock, NULL, 0, token);
	sql_exec(pg, "SELECT lockq_holds($1, $2::bigint)", 2, params, &res);
	if (res.kind == RES_OK && res_null(&res))
	{
		res.kind = RES_ERR;
		strcpy(res.msg, "lockq_holds returned NULL");
	}
	if (res.kind != RES_OK)
	{
		op_end_res(w, &op, &res);
		goto broken;
	}
	rc = strcmp(res_val(&res), "t") == 0;
	op_end(w, &op, res.t_done, "ok", 0, rc ? "t" : "f", NULL);
	res_clear(&res);
	if (rc == 0)
	{
		sql_exec(pg, "ROLLBACK", 0, NULL, &res);
		if (res.kind != RES_OK)
			goto broken;
		res_clear(&res);
		return rc;
	}

	/* sometimes keep the fence a little: a hand-off must wait for it */
	if (chance(w, 20))
	{
		sql_exec(pg, "SELECT pg_sleep(0.02)", 0, NULL, &res);
		if (res.kind != RES_OK)
			goto broken;
		res_clear(&res);
	}
	op_begin(w, &op, "fwrite", lock, NULL, 0, token);
	sql_exec(pg, "UPDATE torture_counter SET n = n + 1, last_token = $2::bigint "
			 "WHERE lock_id = $1 RETURNING n", 2, params, &res);
	if (res.kind != RES_OK || PQntuples(res.r) != 1)
	{
		if (res.kind == RES_OK)
		{
			res.kind = RES_ERR;
			snprintf(res.msg, sizeof(res.msg), "no row for %s", lock);
		}
		op_end_res(w, &op, &res);
		if (res.kind == RES_CONN)
			goto broken;
		res_clear(&res);
		sql_exec(pg, "ROLLBACK", 0, NULL, &res);
		if (res.kind != RES_OK)
			goto broken;
		res_clear(&res);
		return rc;
	}
	{
		char		n[24];

		snprintf(n, sizeof(n), "%s", res_val(&res));
		res_clear(&res);
		sql_exec(pg, "COMMIT", 0, NULL, &res);
		if (res.kind == RES_OK && strcmp(PQcmdStatus(res.r), "COMMIT") == 0)
		{
			op_end(w, &op, res.t_done, "ok", 0, n, NULL);
			w->n_writes++;
		}
		else if (res.kind == RES_OK)
			op_end(w, &op, res.t_done, "fail", 0, "rollback", PQcmdStatus(res.r));
		else
		{
			op_end_res(w, &op, &res);
			if (res.kind == RES_CONN)
				goto broken;
		}
		res_clear(&res);
	}
	return rc;

broken:
	if (res.kind == RES_ERR)
	{
		/* an error in the transaction: end it and carry on */
		res_clear(&res);
		sql_exec(pg, "ROLLBACK", 0, NULL, &res);
		if (res.kind == RES_OK)
		{
			res_clear(&res);
			return rc;
		}
	}
	res_clear(&res);
	if (pg == w->pg)
		conn_lost(w, res.msg[0] ? res.msg : "fenced write");
	else
		PQfinish(pg);
	return rc;
}

/* op_now reads lockq_now(). */
static void
op_now(Worker *w)
{
	Op			op;
	Res			res;

	op_begin(w, &op, "now", NULL, NULL, 0, 0);
	sql_exec(w->pg, "SELECT lockq_now()", 0, NULL, &res);
	op_end_value(w, &op, &res);
	res_done(w, &res);
}

/*
 * op_probe_recent asks lockq_holds about the k-th most recently ended token
 * of any worker (k = 0: the latest).  False when there is none.
 */
static bool
op_probe_recent(Worker *w, int k)
{
	char		lock[16];
	int64_t		token = 0;

	pthread_mutex_lock(&recent_mu);
	if (k < nrecent && k < NRECENT)
	{
		int			i = (nrecent - 1 - k) % NRECENT;

		snprintf(lock, sizeof(lock), "%s", recent[i].lock);
		token = recent[i].token;
	}
	pthread_mutex_unlock(&recent_mu);
	if (token == 0)
		return false;
	op_token_call(w, "holds", lock, NULL, token, 0);
	return true;
}

/* op_probe asks about a token this worker held before. */
static void
op_probe(Worker *w)
{
	Past	   *p = &w->past[rnd_range(w, 0, w->npast - 1)];
	int			c = (int) rnd_range(w, 0, 99);

	if (c < 60 || w->kind == K_SESS)
		op_token_call(w, "holds", p->lock, NULL, p->token, 0);
	else if (c < 80)
		op_token_call(w, "renew", p->lock, p->owner, p->token, p->ttl_ms);
	else
		op_token_call(w, "release", p->lock, p->owner, p->token, 0);
}

/* release_held releases the held grant (any outcome ends the belief). */
static void
release_held(Worker *w)
{
	char		lock[16],
				owner[NAMELEN];
	int64_t		token = w->token;

	snprintf(lock, sizeof(lock), "%s", w->lock);
	snprintf(owner, sizeof(owner), "%s", w->owner);
	forget_grant(w);
	op_token_call(w, "release", lock, w->kind == K_SESS ? NULL : owner, token, 0);
}

/* ---------------------------------------------------------------------
 * Client-side waiters (cw)
 * --------------------------------------------------------------------- */

/* op_enqueue queues a new owner, or takes the lock at once. */
static void
op_enqueue(Worker *w)
{
	char		lock[16],
				owner[NAMELEN],
				ttl[40],
				hb[40],
				wait[40];
	int			ttl_ms = pick_ttl(w);
	bool		waits = rnd_range(w, 0, 1) == 1;
	const char *params[5];
	Op			op;
	Res			res;

	pick_lock(w, lock);
	new_owner(w, owner);
	fmt_ms(ttl, sizeof(ttl), ttl_ms);
	fmt_ms(hb, sizeof(hb), HEARTBEAT_MS);
	fmt_ms(wait, sizeof(wait), rnd_range(w, 50, 500));
	params[0] = lock;
	params[1] = owner;
	params[2] = ttl;
	params[3] = hb;
	params[4] = wait;
	op_begin(w, &op, "enqueue", lock, owner, ttl_ms, 0);
	sql_exec(w->pg, waits ?
			 "SELECT lockq_enqueue($1, $2, $3::interval, NULL, $4::interval, $5::interval)" :
			 "SELECT lockq_enqueue($1, $2, $3::interval, NULL, $4::interval)",
			 waits ? 5 : 4, params, &res);
	if (res.kind == RES_OK && res_null(&res))
	{
		op_end(w, &op, res.t_done, "ok", 0, "null", NULL);
		w->waiting = true;
		snprintf(w->lock, sizeof(w->lock), "%s", lock);
		snprintf(w->owner, sizeof(w->owner), "%s", owner);
		w->ttl_ms = ttl_ms;
		w->give_up_ns = mono_ns() + rnd_range(w, 300, 5000) * 1000000;
	}
	else if (res.kind == RES_OK)
	{
		int64_t		token = strtoll(res_val(&res), NULL, 10);

		op_end(w, &op, res.t_done, "ok", token, res_val(&res), NULL);
		took_grant(w, lock, owner, token, ttl_ms, op.t_inv);
	}
	else
		op_end_res(w, &op, &res);
	res_done(w, &res);
}

/*
 * op_heartbeat keeps the wait alive and learns of its grant: with
 * lockq_heartbeat, or half the time with lockq_await, which also waits in
 * the backend for the grant (the checker reads "await" as a heartbeat that
 * may take longer).
 */
static void
op_heartbeat(Worker *w)
{
	char		wait[40];
	const char *params[3] = {w->lock, w->owner, wait};
	bool		waits = rnd_range(w, 0, 1) == 1;
	Op			op;
	Res			res;

	fmt_ms(wait, sizeof(wait), rnd_range(w, 50, 500));
	op_begin(w, &op, waits ? "await" : "heartbeat", w->lock, w->owner, w->ttl_ms, 0);
	if (waits)
		sql_exec(w->pg, "SELECT lockq_await($1, $2, $3::interval)", 3, params, &res);
	else
		sql_exec(w->pg, "SELECT lockq_heartbeat($1, $2)", 2, params, &res);
	if (res.kind == RES_OK && res_null(&res))
		op_end(w, &op, res.t_done, "ok", 0, "null", NULL);
	else if (res.kind == RES_OK)
	{
		int64_t		token = strtoll(res_val(&res), NULL, 10);
		char		lock[16],
					owner[NAMELEN];

		op_end(w, &op, res.t_done, "ok", token, res_val(&res), NULL);
		snprintf(lock, sizeof(lock), "%s", w->lock);
		snprintf(owner, sizeof(owner), "%s", w->owner);
		w->waiting = false;
		took_grant(w, lock, owner, token, w->ttl_ms, op.t_inv);
	}
	else
	{
		op_end_res(w, &op, &res);
		if (res.kind == RES_ERR)
			w->waiting = false; /* dropped (55000) or refused: start again */
	}
	res_done(w, &res);
}

/* op_cancel withdraws the wait (a grant that won the race passes on). */
static void
op_cancel(Worker *w)
{
	const char *params[2] = {w->lock, w->owner};
	Op			op;
	Res			res;

	w->waiting = false;
	op_begin(w, &op, "cancel", w->lock, w->owner, 0, 0);
	sql_exec(w->pg, "SELECT lockq_cancel($1, $2)", 2, params, &res);
	op_end_value(w, &op, &res);
	res_done(w, &res);
}

/* ---------------------------------------------------------------------
 * One step of an SQL worker (own, sess, cw)
 * --------------------------------------------------------------------- */

/*
 * holder_step: one operation by a worker that holds a grant: check it,
 * write under it, renew it, take it again, release it, abandon it, or let
 * it run out.
 */
static void
holder_step(Worker *w)
{
	int			c = (int) rnd_range(w, 0, 99);
	int			r;

	if (w->hold_ops-- <= 0 || c < 15)
	{
		release_held(w);
		return;
	}
	if (c < 30)
	{
		r = op_token_call(w, "holds", w->lock, NULL, w->token, 0);
		if (r == 0)
			forget_grant(w);
	}
	else if (c < 60)
	{
		r = op_fenced_write(w, w->pg, w->lock, w->token);
		if (r == 0)
			forget_grant(w);
	}
	else if (c < 78)
	{
		r = op_token_call(w, "renew", w->lock, w->owner, w->token, w->ttl_ms);
		if (r == 0)
			forget_grant(w);
	}
	else if (c < 84 && w->kind != K_CW)
		op_acquire(w, true);
	else if (c < 87 && w->ttl_ms <= 3000 && w->kind != K_SESS)
	{
		/*
		 * Abandoned: the lease runs out.  (Not for a session-bound grant:
		 * its owner, the session, would get it back re-entrantly at its
		 * next acquisition, under another ttl than the worker believes.)
		 */
		forget_grant(w);
	}
	else if (c < 93)
	{
		/* let the lease run out, then see */
		int64_t		left = (w->reckon_ns - mono_ns()) / 1000000;

		if (left < 3000)
		{
			sleep_ms((left > 0 ? left : 0) + rnd_range(w, 20, 300));
			r = op_token_call(w, "holds", w->lock, NULL, w->token, 0);
			if (r != 1)
				forget_grant(w);
		}
	}
	else if (c < 97)
		op_now(w);
	else
		sleep_ms(rnd_range(w, 10, 200));
}

/*
 * sql_step makes one call of an SQL worker (own, sess, cw): probes after a
 * reconnect first, then holder, waiter or idle steps by its state.
 */
static void
sql_step(Worker *w)
{
	if (w->pg == NULL && !sql_connect(w))
		return;

	/*
	 * After a reconnect: its own grant, its latest ended one, and the
	 * latest ended ones of all workers.
	 */
	if (w->probe_burst > 0)
	{
		int			k = w->probe_burst--;

		if (k == 4 && w->held)
			op_token_call(w, "holds", w->lock, NULL, w->token, 0);
		else if (k == 4 && w->npast > 0)
			op_token_call(w, "holds", w->past[w->npast - 1].lock, NULL,
						  w->past[w->npast - 1].token, 0);
		else if (k < 4)
			op_probe_recent(w, 3 - k + (int) rnd_range(w, 0, 1));
		return;
	}
	if (w->held)
	{
		holder_step(w);
	}
	else if (w->kind == K_CW && w->waiting)
	{
		if (mono_ns() >= w->give_up_ns)
			op_cancel(w);
		else
		{
			sleep_ms(rnd_range(w, 30, 400));
			op_heartbeat(w);
		}
		return;
	}
	else
	{
		int			c = (int) rnd_range(w, 0, 99);

		if (c < 12 && w->npast > 0)
			op_probe(w);
		else if (c < 17)
			op_now(w);
		else if (c < 19 && w->kind == K_SESS)
		{
			/* end the session on purpose: its grants end with it */
			meta(w, "close", w->sess_owner, "-", NULL);
			PQfinish(w->pg);
			w->pg = NULL;
			forget_grant(w);
		}
		else if (w->kind == K_CW)
			op_enqueue(w);
		else
			op_acquire(w, false);
	}
	if (w->pg != NULL && w->held && chance(w, 30))
		sleep_ms(rnd_range(w, 0, 30));
}

/* ---------------------------------------------------------------------
 * The liblockq worker
 * --------------------------------------------------------------------- */

/*
 * lib_step makes one call of the liblockq worker: connect (the library
 * reconnects by itself afterwards), lock or trylock, check lockqc_held and
 * write under the fence a few times, unlock.
 */
static void
lib_step(Worker *w)
{
	if (w->lc == NULL)
	{
		char	   *err = NULL;

		w->lc = lockqc_connect(conninfo, &err);
		if (w->lc == NULL)
		{
			meta(w, "lost", NULL, "-", err ? err : "lockqc_connect");
			free(err);
			sleep_ms(100);
			return;
		}
		meta(w, "libconn", NULL, "lib", NULL);
	}

	if (w->h == NULL)
	{
		lockqc_opts opts;
		char		lock[16],
					owner[NAMELEN];
		bool		trylock = chance(w, 30);
		lockqc_handle *h = NULL;
		int			rc;
		int64_t		t;
		Op			op;

		lockqc_opts_init(&opts);
		pick_lock(w, lock);
		new_owner(w, owner);
		opts.ttl_ms = pick_ttl(w);
		opts.timeout_ms = rnd_range(w, 200, 4000);
		opts.heartbeat_ms = HEARTBEAT_MS;
		opts.owner = owner;
		op_begin(w, &op, trylock ? "trylock" : "lock", lock, owner, (int) opts.ttl_ms, 0);
		rc = trylock ? lockqc_trylock(w->lc, lock, &opts, &h) :
			lockqc_lock(w->lc, lock, &opts, &h);
		t = mono_ns();
		if (rc == LOCKQC_OK)
		{
			char		v[24];

			snprintf(v, sizeof(v), "%" PRId64, lockqc_token(h));
			op_end(w, &op, t, "ok", lockqc_token(h), v, NULL);
			w->h = h;
			w->held = true;
			snprintf(w->lock, sizeof(w->lock), "%s", lock);
			snprintf(w->owner, sizeof(w->owner), "%s", owner);
			w->token = lockqc_token(h);
			w->ttl_ms = (int) opts.ttl_ms;
			w->hold_ops = (int) rnd_range(w, 1, 12);
			w->n_grants++;
		}
		else if (rc == LOCKQC_TIMEOUT || rc == LOCKQC_NOT_AVAILABLE)
			op_end(w, &op, t, "fail", 0, lockqc_status_str(rc), NULL);
		else
		{
			/* the library could not reach the server: do not spin */
			op_end(w, &op, t, "info", 0, lockqc_status_str(rc), lockqc_errmsg(w->lc));
			sleep_ms(rnd_range(w, 50, 200));
		}
		return;
	}

	if (w->hold_ops-- > 0)
	{
		Op			op;
		bool		held;
		int64_t		t;

		op_begin(w, &op, "held", w->lock, w->owner, 0, w->token);
		held = lockqc_held(w->h);
		t = mono_ns();
		op_end(w, &op, t, "ok", 0, held ? "t" : "f", NULL);
		if (held && chance(w, 60))
		{
			if (w->pg == NULL)
				sql_connect(w);
			if (w->pg != NULL)
				op_fenced_write(w, w->pg, w->lock, w->token);
		}
		else if (!held)
			w->hold_ops = 0;
		sleep_ms(rnd_range(w, 0, 400));
		return;
	}

	{
		Op			op;
		int			rc;
		int64_t		t;

		op_begin(w, &op, "unlock", w->lock, w->owner, 0, w->token);
		rc = lockqc_unlock(w->h);
		t = mono_ns();
		w->h = NULL;
		past_add(w, w->lock, w->owner, w->token, w->ttl_ms);
		w->held = false;
		if (rc == LOCKQC_OK)
			op_end(w, &op, t, "ok", 0, "t", NULL);
		else if (rc == LOCKQC_LOST)
			op_end(w, &op, t, "fail", 0, "LOST", NULL);
		else
			op_end(w, &op, t, "info", 0, lockqc_status_str(rc), lockqc_errmsg(w->lc));
	}
}

/* ---------------------------------------------------------------------
 * Workers
 * --------------------------------------------------------------------- */

/*
 * finish releases what the worker holds and withdraws its wait when the
 * run is over (one attempt; a broken connection leaves it to the lease).
 */
static void
finish(Worker *w)
{
	if (w->kind == K_LIB)
	{
		if (w->h != NULL)
		{
			Op			op;
			int			rc;

			op_begin(w, &op, "unlock", w->lock, w->owner, 0, w->token);
			rc = lockqc_unlock(w->h);
			op_end(w, &op, mono_ns(), rc == LOCKQC_OK ? "ok" : rc == LOCKQC_LOST ? "fail" : "info",
				   0, rc == LOCKQC_OK ? "t" : lockqc_status_str(rc), NULL);
			w->h = NULL;
		}
		if (w->lc != NULL)
			lockqc_disconnect(w->lc);
		w->lc = NULL;
	}
	else if (w->pg != NULL)
	{
		if (w->held)
			release_held(w);
		else if (w->waiting && w->pg != NULL)
			op_cancel(w);
	}
	meta(w, "end", NULL, "-", NULL);
	if (w->pg != NULL)
		PQfinish(w->pg);
	w->pg = NULL;
}

/* worker_main runs one worker's steps until the time is up. */
static void *
worker_main(void *arg)
{
	Worker	   *w = arg;

	if (w->kind != K_LIB)
		sql_connect(w);
	while (!time_up())
	{
		if (w->kind == K_LIB)
			lib_step(w);
		else
			sql_step(w);
	}
	finish(w);
	return NULL;
}

static void
on_signal(int sig)
{
	stop_flag = 1;
}

/*
 * setup creates the fenced-write table and its rows if they are missing
 * (the TAP test creates them first; this makes a manual run work too).
 */
static int
setup(void)
{
	PGconn	   *pg = PQconnectdb(conninfo);
	Res			res;
	int			i;

	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "cannot connect: %s", PQerrorMessage(pg));
		PQfinish(pg);
		return -1;
	}
	sql_exec(pg, "CREATE TABLE IF NOT EXISTS torture_counter "
			 "(lock_id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0, last_token bigint)",
			 0, NULL, &res);
	if (res.kind != RES_OK)
	{
		fprintf(stderr, "cannot create torture_counter: %s\n", res.msg);
		res_clear(&res);
		PQfinish(pg);
		return -1;
	}
	res_clear(&res);
	for (i = 0; i < nlocks; i++)
	{
		char		lock[16];
		const char *params[1] = {lock};

		snprintf(lock, sizeof(lock), "L%d", i);
		sql_exec(pg, "INSERT INTO torture_counter (lock_id) VALUES ($1) "
				 "ON CONFLICT DO NOTHING", 1, params, &res);
		if (res.kind != RES_OK)
		{
			fprintf(stderr, "cannot insert into torture_counter: %s\n", res.msg);
			res_clear(&res);
			PQfinish(pg);
			return -1;
		}
		res_clear(&res);
	}
	PQfinish(pg);
	return 0;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: lockq_torture [-s SEED] [-d SECONDS] [-w WORKERS] [-l LOCKS] [-o DIR] CONNINFO\n");
	exit(64);
}

int
main(int argc, char **argv)
{
	uint64_t	seed = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 16);
	double		seconds = 20;
	int			nworkers = 8;
	const char *dir = ".";
	Worker	   *workers;
	pthread_t	threads[MAX_WORKERS];
	int			opt;
	int			i;
	long		tot_ops = 0,
				tot_info = 0,
				tot_grants = 0,
				tot_writes = 0;

	while ((opt = getopt(argc, argv, "s:d:w:l:o:")) != -1)
	{
		switch (opt)
		{
			case 's':
				seed = strtoull(optarg, NULL, 10);
				break;
			case 'd':
				seconds = atof(optarg);
				break;
			case 'w':
				nworkers = atoi(optarg);
				break;
			case 'l':
				nlocks = atoi(optarg);
				break;
			case 'o':
				dir = optarg;
				break;
			default:
				usage();
		}
	}
	if (optind != argc - 1 || nworkers < 1 || nworkers > MAX_WORKERS ||
		nlocks < 1 || nlocks > MAX_LOCKS || seconds <= 0)
		usage();
	conninfo = argv[optind];

	printf("# seed %" PRIu64 " workers %d locks %d seconds %.1f\n",
		   seed, nworkers, nlocks, seconds);
	fflush(stdout);
	if (setup() != 0)
		return 69;

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	deadline_ns = mono_ns() + (int64_t) (seconds * 1e9);

	workers = calloc(nworkers, sizeof(Worker));
	if (workers == NULL)
		return 70;
	for (i = 0; i < nworkers; i++)
	{
		Worker	   *w = &workers[i];
		char		path[4096];
		uint64_t	s = seed * 1000003 + (uint64_t) i;

		w->id = i;
		w->kind = kind_cycle[i % (sizeof(kind_cycle) / sizeof(kind_cycle[0]))];
		w->rng = rnd(&s);
		snprintf(path, sizeof(path), "%s/w%d.tsv", dir, i);
		w->log = fopen(path, "w");
		if (w->log == NULL)
		{
			fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
			return 73;
		}
		fprintf(w->log, "# lockq_torture seed %" PRIu64 " worker %d kind %s\n",
				seed, i, kind_name[w->kind]);
	}
	for (i = 0; i < nworkers; i++)
	{
		if (pthread_create(&threads[i], NULL, worker_main, &workers[i]) != 0)
		{
			fprintf(stderr, "cannot start worker %d\n", i);
			return 71;
		}
	}
	for (i = 0; i < nworkers; i++)
		pthread_join(threads[i], NULL);

	for (i = 0; i < nworkers; i++)
	{
		Worker	   *w = &workers[i];

		printf("# w%d %s: %ld calls (%ld ok, %ld fail, %ld info), %ld grants, %ld fenced writes, %ld connections\n",
			   i, kind_name[w->kind], w->n_ops, w->n_ok, w->n_fail, w->n_info,
			   w->n_grants, w->n_writes, w->n_reconnects);
		tot_ops += w->n_ops;
		tot_info += w->n_info;
		tot_grants += w->n_grants;
		tot_writes += w->n_writes;
		fclose(w->log);
	}
	printf("# total: %ld calls, %ld info, %ld grants, %ld fenced writes\n",
		   tot_ops, tot_info, tot_grants, tot_writes);
	free(workers);
	return 0;
}

/*-------------------------------------------------------------------------
 *
 * lockq_model.c
 *		A randomized test of lockq's SQL API against a reference model.
 *
 *	lockq_model [-k] [-s SEED] [-n STEPS] [-d SECONDS] [-t TRACEFILE] CONNINFO
 *
 * -s: the seed (default: from the time); -n: the most random steps; -d: the
 * most seconds of random steps (then the run drains and ends); -t: write
 * the trace of every call there; -k: see known_kept_grant.
 * Six libpq connections, driven from one thread, take random steps on three
 * locks: lockq_get (no timeout, a long one, one that runs out while the test
 * goes on, a short one), lockq_try, lockq_release, lockq_renew,
 * lockq_holds, lockq_enqueue, lockq_heartbeat, lockq_cancel,
 * pg_cancel_backend of a blocked lockq_get, pg_terminate_backend and
 * disconnects (session ends), two calls from two sessions at once, a
 * release racing with the cancel or termination of the waiter it hands the
 * lock to, and one racing with that waiter's timeout.  Arguments are sometimes garbage: NULLs, empty strings, lock ids
 * and owners of 256 bytes, reserved "session:" owners, ttls and timeouts
 * that are negative, zero, too long or out of range, wrong tokens and other
 * owners' tokens.
 *
 * The model (Model below) knows, for every lock, its holder and the FIFO
 * queue of waiters, blocked lockq_get calls and client-side waiters alike,
 * and predicts the result of every call from doc/sql.md: a token (the
 * holder's own for a re-entrant call, a new one otherwise), NULL, true,
 * false, or an error with its SQLSTATE.  A blocked lockq_get is "pending":
 * it may only return a token once the model handed it the lock, which
 * happens only at the head of the queue.  After every step an observer
 * connection compares lockq_locks, lockq_waiters (in order) and the gauges
 * of lockq_stats with the model: at once after a step whose effects are
 * complete when its call returns, and by polling (with a time limit that
 * fails) where an effect follows the call (a session's own release, a
 * session end, a lockq_get joining a queue).  Every token must be larger
 * than every token granted in an earlier step.
 *
 * Timing is kept out of the expected results: leases are far longer than
 * the test.  A lockq_get whose timeout may run out while the test goes on
 * must not answer 55P03 before its timeout; until it answered, the views
 * may or may not show it once its deadline may have passed.  A hand-off to
 * it must reach it if the call that handed the lock on returned before its
 * deadline could have passed; after that, either outcome is legal and the
 * waiter's own answer says which happened (then the lock must have gone to
 * the next waiter).  Calls whose result would depend on when such a
 * timeout strikes (its owner's own calls on that lock, hand-offs that
 * follow a call's answer) are not made.  Races (two calls at once, a
 * release racing with a cancel) accept exactly the outcomes of the
 * possible orders.
 *
 * Prints "ok - ..." / "not ok - ..." lines (relayed as TAP assertions by
 * test/t/013_reference_model.pl) and exits 0 when all passed.  On the first
 * discrepancy it prints the step, the call, what the model expected and
 * what came back, and the last steps of the trace, and exits 1.  The seed
 * is printed first; the same seed makes the same choices as long as the
 * few that depend on timing (which timed calls ran out first) come out the
 * same.
 *
 * The server needs lockq.max_ttl = 1d (the default) and
 * lockq.waiter_timeout of at least one hour (client-side waiters must not
 * be dropped while they wait).  No other session may use lockq meanwhile.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/test/lockq_model.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define NLOCK		3			/* locks */
#define NCONN		6			/* sessions taking steps */
#define NOWNER		5			/* explicit owner names */
#define MAXQ		(NOWNER + NCONN + 1)

/* Owner ids: 0..NOWNER-1 are explicit names, SESS(c) is connection c's session */
#define NO_OWNER	(-1)
#define SESS(c)		(NOWNER + (c))
#define IS_SESS(o)	((o) >= NOWNER)
#define SESS_CONN(o) ((o) - NOWNER)

#define EPS_S		0.002		/* clock slack between client and server */
#define WAIT_S		10.0		/* the longest wait for anything expected */

/* SQLSTATEs, as bits so that a set of acceptable ones is one word */
#define E22004		0x01
#define E22023		0x02
#define E55006		0x04
#define E55000		0x08
#define E55P03		0x10
#define E57014		0x20
#define E_OTHER		0x40

static const struct
{
	unsigned	bit;
	const char *code;
}			sqlstates[] =
{
	{E22004, "22004"}, {E22023, "22023"}, {E55006, "55006"},
	{E55000, "55000"}, {E55P03, "55P03"}, {E57014, "57014"},
};

/* ---------------------------------------------------------------------
 * Arguments
 * --------------------------------------------------------------------- */

/* One argument: its text (or SQL NULL), how the trace shows it, and the
 * SQLSTATE it must cause (0 when valid). */
typedef struct Str
{
	bool		null;
	char		v[300];
	char		disp[64];
	unsigned	err;
} Str;

typedef enum
{
	F_GET, F_TRY, F_RELEASE, F_RENEW, F_HOLDS, F_ENQUEUE, F_HEARTBEAT,
	F_CANCEL
} Fn;

static const char *const fn_name[] = {
	"lockq_get", "lockq_try", "lockq_release", "lockq_renew", "lockq_holds",
	"lockq_enqueue", "lockq_heartbeat", "lockq_cancel"
};

/* lockq_get's timeout: none, long (never runs out here), medium (may run
 * out while other steps go on), short (the step waits for it) */
typedef enum
{
	T_NONE, T_LONG, T_MEDIUM, T_SHORT
} TMode;

typedef struct Op
{
	Fn			fn;
	int			conn;
	int			lock;			/* lock index, -1 when the lock id is bad */
	Str			lk;
	int			owner;			/* owner id, NO_OWNER when the owner is bad */
	Str			ow;
	Str			ttl;
	Str			timeout;
	TMode		tmode;
	double		timeout_s;
	Str			token;			/* as text: bigint or NULL */
	int64_t		tokval;
	Str			channel;
	Str			hb;
	int			nargs;			/* lockq_release: 1, 2 or 3 arguments */
} Op;

/* What the model expects of one call. */
typedef enum
{
	X_TOKEN, X_NULL, X_TRUE, X_FALSE, X_ERROR, X_QUEUED, X_TIMEOUT
} XKind;

typedef struct Expect
{
	XKind		kind;
	int			ev;				/* X_TOKEN: the grant (its token, if known) */
	bool		fresh;			/* X_TOKEN: a new grant */
	unsigned	errs;			/* X_ERROR: acceptable SQLSTATEs */
	bool		handoff;		/* the call ended a grant with waiters */
} Expect;

/* What a call returned. */
typedef enum
{
	A_TOKEN, A_NULL, A_TRUE, A_FALSE, A_ERROR, A_LOST, A_OTHER
} AKind;

typedef struct Actual
{
	AKind		kind;
	int64_t		token;
	unsigned	err;
	char		msg[400];
} Actual;

/* ---------------------------------------------------------------------
 * The model
 * --------------------------------------------------------------------- */

typedef struct MWaiter
{
	int			owner;
	int			conn;			/* a blocked lockq_get's connection; -1 for
								 * a client-side waiter */
} MWaiter;

typedef struct MLock
{
	int			holder;			/* owner id or NO_OWNER */
	int			ev;				/* the current grant */
	int			nq;
	MWaiter		q[MAXQ];		/* q[0] is granted next */
} MLock;

typedef struct Model
{
	MLock		l[NLOCK];
	int			granted_ev[NCONN];	/* the grant handed to the connection's
									 * blocked lockq_get, until its answer
									 * is read; -1 */
} Model;

/* Grants, in the model's order: a token must exceed every token of an
 * earlier step (grants of one step may be made in any order). */
typedef struct Ev
{
	int64_t		token;			/* 0 while not known */
	int			seq;
	int			lock;
	bool		dead;			/* never happened (a waiter that timed out) */
} Ev;

static Ev  *evs = NULL;
static int	nev = 0;
static int	evcap = 0;
static int	cur_seq = 0;

static Model M;

/* ---------------------------------------------------------------------
 * Connections
 * --------------------------------------------------------------------- */

typedef struct Conn
{
	PGconn	   *pg;
	int			pid;
	char		sess[128];		/* lockq_session_owner() */
	int			gen;			/* sessions so far on this connection */
	/* the statement in flight */
	bool		busy;
	bool		done;
	bool		lost;
	PGresult   *res;
	double		sent;
	double		done_at;
	/* a blocked lockq_get */
	bool		is_get;
	int			g_lock;
	int			g_owner;
	TMode		g_tmode;
	double		g_timeout;
	bool		cancel_sent;
	bool		ambiguous;		/* handed the lock near its deadline */
	bool		handoff_checked;
	char		what[600];
} Conn;

static Conn conns[NCONN];
static PGconn *obs;				/* the observer */
static const char *conninfo;

/* ---------------------------------------------------------------------
 * Test state
 * --------------------------------------------------------------------- */

/* per mille: how often an argument is bad, and how often a call is made
 * by the lock's holder (both higher for calls on their own than in pairs) */
static int	garbage_pm = 40;
static int	holder_bias = 0;

static uint64_t rng_state;
static uint64_t seed;
static int	step_no = 0;
static double t_start;

/*
 * -k: a grant kept by a lockq_get that was cancelled (or terminated)
 * without receiving it contradicts doc/sql.md ("if the grant raced with the
 * cancel, it is released and passes on at once"); with -k it is reported
 * as a known issue (a TAP TODO line) and the run goes on from that state.
 */
static bool known_kept_grant = false;
static FILE *trace_file = NULL;

#define TRACE_KEEP 60
static char trace_ring[TRACE_KEEP][900];
static int	trace_n = 0;

static struct
{
	long		calls;
	long		results_checked;
	long		errors_checked;
	long		snapshots;
	long		polls;
	long		tokens;
	long		handoffs;		/* blocked lockq_get calls handed the lock */
	long		client_handoffs;
	long		queued;
	long		reentrant;
	long		e55006;
	long		e55000;
	long		timeouts;
	long		short_timeouts;
	long		cancels;
	long		cancel_races;
	long		cancel_race_granted;
	long		term_races;
	long		session_ends;
	long		pairs;
	long		pairs_both;
	long		ambiguous;
	long		ambiguous_granted;
	long		kept_grants;
	long		deadline_races;
	long		double_rows;
	long		nulls;
	long		falses;
	long		trues;
} st;

/* the valid lock ids and owner names */
static const char *lock_ids[NLOCK];
static const char *lock_disp[NLOCK];
static const char *owner_names[NOWNER];
static const char *owner_disp[NOWNER];
static char long_lock[256];
static char long_owner[256];
static char x256[257];
static char e128[257];
static char o256[257];
static char c63[64];
static char c64[65];

/* ---------------------------------------------------------------------
 * Utilities
 * --------------------------------------------------------------------- */

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* splitmix64 */
static uint64_t
rng_next(void)
{
	uint64_t	z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int
rnd(int n)
{
	return (int) (rng_next() % (uint64_t) n);
}

/* true with probability pm per mille */
static bool
chance(int pm)
{
	return rnd(1000) < pm;
}

static void
trace(const char *fmt,...)
{
	char		buf[900];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	snprintf(trace_ring[trace_n % TRACE_KEEP], sizeof(trace_ring[0]),
			 "[%7.3f] %.860s", now_s() - t_start, buf);
	trace_n++;
	if (trace_file)
	{
		fprintf(trace_file, "[%7.3f] %s\n", now_s() - t_start, buf);
		fflush(trace_file);
	}
}

/*
 * fail reports the first discrepancy as a failed assertion, with the seed
 * and the last steps of the trace, and exits.
 */
static void
fail(const char *fmt,...) __attribute__((noreturn, format(printf, 1, 2)));

static void
fail(const char *fmt,...)
{
	char		buf[4000];
	va_list		ap;
	int			i;
	int			from = trace_n > TRACE_KEEP ? trace_n - TRACE_KEEP : 0;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	trace("FAILED: %s", buf);
	printf("not ok - seed %" PRIu64 ", step %d: %s\n", seed, step_no, buf);
	fflush(stdout);
	fprintf(stderr, "lockq_model: seed %" PRIu64 " step %d: %s\n", seed,
			step_no, buf);
	fprintf(stderr, "last steps of the trace:\n");
	for (i = from; i < trace_n; i++)
		fprintf(stderr, "  %s\n", trace_ring[i % TRACE_KEEP]);
	fprintf(stderr, "reproduce with: lockq_model -s %" PRIu64 " '<conninfo>'\n",
			seed);
	exit(1);
}

static void
str_set(Str *s, const char *v, const char *disp, unsigned err)
{
	s->null = (v == NULL);
	snprintf(s->v, sizeof(s->v), "%s", v ? v : "");
	if (disp)
		snprintf(s->disp, sizeof(s->disp), "%s", disp);
	else if (v == NULL)
		snprintf(s->disp, sizeof(s->disp), "NULL");
	else
		snprintf(s->disp, sizeof(s->disp), "'%.58s'", v);
	s->err = err;
}

static const char *
owner_name(int o)
{
	return IS_SESS(o) ? conns[SESS_CONN(o)].sess : owner_names[o];
}

static const char *
owner_short(int o)
{
	static char buf[4][64];
	static int	i = 0;

	i = (i + 1) % 4;
	if (o == NO_OWNER)
		return "-";
	if (IS_SESS(o))
		snprintf(buf[i], sizeof(buf[i]), "session(c%d)", SESS_CONN(o));
	else
		snprintf(buf[i], sizeof(buf[i]), "%s", owner_disp[o]);
	return buf[i];
}

/* ---------------------------------------------------------------------
 * Grant events and tokens
 * --------------------------------------------------------------------- */

static int
new_event(int lock)
{
	if (nev == evcap)
	{
		evcap = evcap ? evcap * 2 : 1024;
		evs = realloc(evs, sizeof(Ev) * evcap);
		if (!evs)
			abort();
	}
	evs[nev].token = 0;
	evs[nev].seq = cur_seq;
	evs[nev].lock = lock;
	evs[nev].dead = false;
	return nev++;
}

static int64_t
ev_token(int ev)
{
	return ev >= 0 ? evs[ev].token : 0;
}

/*
 * learn_token records the token of grant ev, as a call returned it or the
 * view showed it: the same as known before, and larger than every token of
 * an earlier step and smaller than every token of a later one.
 */
static void
learn_token(int ev, int64_t token, const char *where)
{
	int			i;

	if (token <= 0)
		fail("%s: grant on lock %s has token %" PRId64 ", not positive",
			 where, lock_disp[evs[ev].lock], token);
	if (evs[ev].token != 0)
	{
		if (evs[ev].token != token)
			fail("%s: grant on lock %s has token %" PRId64 ", but it was %" PRId64 " before",
				 where, lock_disp[evs[ev].lock], token, evs[ev].token);
		return;
	}
	for (i = 0; i < nev; i++)
	{
		if (i == ev || evs[i].dead || evs[i].token == 0)
			continue;
		if ((evs[i].seq < evs[ev].seq && evs[i].token >= token) ||
			(evs[i].seq > evs[ev].seq && evs[i].token <= token) ||
			(evs[i].seq == evs[ev].seq && evs[i].token == token))
			fail("%s: token %" PRId64 " of a grant on lock %s (step %d) is out of order "
				 "with token %" PRId64 " of a grant on lock %s (step %d): tokens must "
				 "increase over all grants",
				 where, token, lock_disp[evs[ev].lock], evs[ev].seq,
				 evs[i].token, lock_disp[evs[i].lock], evs[i].seq);
	}
	evs[ev].token = token;
	st.tokens++;
}

/* ---------------------------------------------------------------------
 * Model operations
 * --------------------------------------------------------------------- */

static void
model_init(Model *m)
{
	int			i;

	memset(m, 0, sizeof(*m));
	for (i = 0; i < NLOCK; i++)
	{
		m->l[i].holder = NO_OWNER;
		m->l[i].ev = -1;
	}
	for (i = 0; i < NCONN; i++)
		m->granted_ev[i] = -1;
}

static int
q_find(const MLock *L, int owner)
{
	int			i;

	for (i = 0; i < L->nq; i++)
		if (L->q[i].owner == owner)
			return i;
	return -1;
}

static int
q_find_conn(const MLock *L, int conn)
{
	int			i;

	for (i = 0; i < L->nq; i++)
		if (L->q[i].conn == conn)
			return i;
	return -1;
}

static void
q_remove(MLock *L, int i)
{
	memmove(&L->q[i], &L->q[i + 1], sizeof(MWaiter) * (L->nq - i - 1));
	L->nq--;
}

static void
q_push(MLock *L, int owner, int conn)
{
	if (L->nq >= MAXQ)
		fail("model: queue overflow");
	L->q[L->nq].owner = owner;
	L->q[L->nq].conn = conn;
	L->nq++;
}

static void
m_grant(Model *m, int l, int owner, int conn)
{
	MLock	   *L = &m->l[l];

	L->holder = owner;
	L->ev = new_event(l);
	if (conn >= 0)
		m->granted_ev[conn] = L->ev;
}

/* the current grant ends: the lock goes to the head of the queue */
static bool
m_end_grant(Model *m, int l)
{
	MLock	   *L = &m->l[l];
	MWaiter		w;

	L->holder = NO_OWNER;
	L->ev = -1;
	if (L->nq == 0)
		return false;
	w = L->q[0];
	q_remove(L, 0);
	m_grant(m, l, w.owner, w.conn);
	return true;
}

/* a session ends: its blocked lockq_get leaves its queue, its
 * session-bound grants end */
static void
m_session_end(Model *m, int c)
{
	int			l;

	for (l = 0; l < NLOCK; l++)
	{
		int			i = q_find_conn(&m->l[l], c);

		if (i >= 0)
			q_remove(&m->l[l], i);
	}
	for (l = 0; l < NLOCK; l++)
		if (m->l[l].holder == SESS(c))
			m_end_grant(m, l);
}

/* the lock a connection's blocked lockq_get waits for, or -1 */
static int
m_waiting_lock(const Model *m, int c)
{
	int			l;

	for (l = 0; l < NLOCK; l++)
		if (q_find_conn(&m->l[l], c) >= 0)
			return l;
	return -1;
}

static unsigned
op_errors(const Op *op)
{
	unsigned	e = op->lk.err | op->ow.err;

	switch (op->fn)
	{
		case F_GET:
			e |= op->ttl.err | op->timeout.err;
			break;
		case F_TRY:
			e |= op->ttl.err;
			break;
		case F_RENEW:
			e |= op->ttl.err;
			break;
		case F_ENQUEUE:
			e |= op->ttl.err | op->channel.err | op->hb.err;
			break;
		case F_HOLDS:
			e = op->lk.err;
			break;
		default:
			break;
	}
	return e;
}

/* does the call's token argument match the current grant? */
static bool
token_matches(const Op *op, const MLock *L)
{
	return op->token.null || op->tokval == ev_token(L->ev);
}

/*
 * m_apply applies one call to the model and says what it must return.
 * This is doc/sql.md, rule by rule.
 */
static void
m_apply(Model *m, const Op *op, Expect *x)
{
	unsigned	errs = op_errors(op);
	MLock	   *L;
	int			o = op->owner;
	int			i;

	memset(x, 0, sizeof(*x));
	x->ev = -1;
	if (errs)
	{
		/* bad input is rejected before anything changes */
		x->kind = X_ERROR;
		x->errs = errs;
		return;
	}
	L = &m->l[op->lock];
	i = q_find(L, o);

	switch (op->fn)
	{
		case F_GET:
		case F_TRY:
			if (L->holder == o)
			{
				/* re-entrant: the same token, lease extended */
				x->kind = X_TOKEN;
				x->ev = L->ev;
			}
			else if (op->fn == F_GET && i >= 0)
			{
				/* an owner waits only once at a time */
				x->kind = X_ERROR;
				x->errs = E55006;
			}
			else if (L->holder == NO_OWNER && L->nq == 0)
			{
				m_grant(m, op->lock, o, -1);
				x->kind = X_TOKEN;
				x->ev = L->ev;
				x->fresh = true;
			}
			else if (op->fn == F_TRY)
				x->kind = X_NULL;	/* never waits, never barges */
			else if (op->tmode == T_SHORT)
				x->kind = X_TIMEOUT;	/* waits, times out, leaves nothing */
			else
			{
				q_push(L, o, op->conn);
				x->kind = X_QUEUED;
			}
			break;

		case F_RELEASE:
		case F_RENEW:
			if (L->holder == o && token_matches(op, L))
			{
				x->kind = X_TRUE;
				if (op->fn == F_RELEASE)
					x->handoff = m_end_grant(m, op->lock);
			}
			else
				x->kind = X_FALSE;
			break;

		case F_HOLDS:
			x->kind = (!op->token.null && op->tokval > 0 &&
					   L->holder != NO_OWNER &&
					   op->tokval == ev_token(L->ev)) ? X_TRUE : X_FALSE;
			break;

		case F_ENQUEUE:
			if (L->holder == o)
			{
				x->kind = X_TOKEN;
				x->ev = L->ev;
			}
			else if (i >= 0 && L->q[i].conn >= 0)
			{
				x->kind = X_ERROR;
				x->errs = E55006;
			}
			else if (i >= 0)
				x->kind = X_NULL;	/* keeps its place: a heartbeat */
			else if (L->holder == NO_OWNER && L->nq == 0)
			{
				m_grant(m, op->lock, o, -1);
				x->kind = X_TOKEN;
				x->ev = L->ev;
				x->fresh = true;
			}
			else
			{
				q_push(L, o, -1);
				x->kind = X_NULL;
			}
			break;

		case F_HEARTBEAT:
			if (L->holder == o)
			{
				x->kind = X_TOKEN;
				x->ev = L->ev;
			}
			else if (i >= 0 && L->q[i].conn < 0)
				x->kind = X_NULL;
			else if (i >= 0)
			{
				/* waits in a backend: "already waiting" */
				x->kind = X_ERROR;
				x->errs = E55006;
			}
			else
			{
				x->kind = X_ERROR;
				x->errs = E55000;
			}
			break;

		case F_CANCEL:
			if (i >= 0 && L->q[i].conn < 0)
			{
				q_remove(L, i);
				x->kind = X_TRUE;
			}
			else if (i < 0 && L->holder == o)
			{
				/* granted meanwhile: released, passes on */
				x->kind = X_TRUE;
				x->handoff = m_end_grant(m, op->lock);
			}
			else
				x->kind = X_FALSE;
			break;
	}
}

/* ---------------------------------------------------------------------
 * Describing calls and results
 * --------------------------------------------------------------------- */

static void
op_describe(const Op *op, char *buf, size_t len)
{
	switch (op->fn)
	{
		case F_GET:
			snprintf(buf, len, "c%d %s(%s, %s, %s, %s)", op->conn,
					 fn_name[op->fn], op->lk.disp, op->ow.disp, op->ttl.disp,
					 op->timeout.disp);
			break;
		case F_TRY:
			snprintf(buf, len, "c%d %s(%s, %s, %s)", op->conn, fn_name[op->fn],
					 op->lk.disp, op->ow.disp, op->ttl.disp);
			break;
		case F_RELEASE:
			if (op->nargs == 1)
				snprintf(buf, len, "c%d %s(%s)", op->conn, fn_name[op->fn],
						 op->lk.disp);
			else if (op->nargs == 2)
				snprintf(buf, len, "c%d %s(%s, %s)", op->conn,
						 fn_name[op->fn], op->lk.disp, op->ow.disp);
			else
				snprintf(buf, len, "c%d %s(%s, %s, %s)", op->conn,
						 fn_name[op->fn], op->lk.disp, op->ow.disp,
						 op->token.disp);
			break;
		case F_RENEW:
			snprintf(buf, len, "c%d %s(%s, %s, %s, %s)", op->conn,
					 fn_name[op->fn], op->lk.disp, op->ow.disp,
					 op->token.disp, op->ttl.disp);
			break;
		case F_HOLDS:
			snprintf(buf, len, "c%d %s(%s, %s)", op->conn, fn_name[op->fn],
					 op->lk.disp, op->token.disp);
			break;
		case F_ENQUEUE:
			snprintf(buf, len, "c%d %s(%s, %s, %s, %s, %s)", op->conn,
					 fn_name[op->fn], op->lk.disp, op->ow.disp, op->ttl.disp,
					 op->channel.disp, op->hb.disp);
			break;
		case F_HEARTBEAT:
		case F_CANCEL:
			snprintf(buf, len, "c%d %s(%s, %s)", op->conn, fn_name[op->fn],
					 op->lk.disp, op->ow.disp);
			break;
	}
}

static const char *
errs_describe(unsigned errs)
{
	static char buf[80];
	size_t		i;

	buf[0] = '\0';
	for (i = 0; i < sizeof(sqlstates) / sizeof(sqlstates[0]); i++)
		if (errs & sqlstates[i].bit)
		{
			if (buf[0])
				strcat(buf, " or ");
			strcat(buf, sqlstates[i].code);
		}
	return buf;
}

static const char *
expect_describe(const Expect *x)
{
	static char bufs[4][200];	/* one message may describe four */
	static int	n = 0;
	char	   *buf = bufs[n = (n + 1) % 4];

	switch (x->kind)
	{
		case X_TOKEN:
			if (x->fresh)
				snprintf(buf, sizeof(bufs[0]), "a new token");
			else if (ev_token(x->ev))
				snprintf(buf, sizeof(bufs[0]), "the holder's token %" PRId64,
						 ev_token(x->ev));
			else
				snprintf(buf, sizeof(bufs[0]), "the holder's token (not seen yet)");
			break;
		case X_NULL:
			return "NULL";
		case X_TRUE:
			return "true";
		case X_FALSE:
			return "false";
		case X_ERROR:
			snprintf(buf, sizeof(bufs[0]), "error %s", errs_describe(x->errs));
			break;
		case X_QUEUED:
			return "to wait in the queue";
		case X_TIMEOUT:
			return "to wait, then 55P03";
	}
	return buf;
}

static const char *
actual_describe(const Actual *a)
{
	static char bufs[2][500];	/* one message may describe two */
	static int	n = 0;
	char	   *buf = bufs[n = (n + 1) % 2];

	switch (a->kind)
	{
		case A_TOKEN:
			snprintf(buf, sizeof(bufs[0]), "token %" PRId64, a->token);
			break;
		case A_NULL:
			return "NULL";
		case A_TRUE:
			return "true";
		case A_FALSE:
			return "false";
		case A_ERROR:
			snprintf(buf, sizeof(bufs[0]), "error: %s", a->msg);
			break;
		case A_LOST:
			snprintf(buf, sizeof(bufs[0]), "connection lost: %s", a->msg);
			break;
		case A_OTHER:
			snprintf(buf, sizeof(bufs[0]), "unexpected result: %s", a->msg);
			break;
	}
	return buf;
}

/* classify a call's result */
static void
actual_of(Conn *c, bool boolean, Actual *a)
{
	PGresult   *r = c->res;

	memset(a, 0, sizeof(*a));
	if (r == NULL || c->lost)
	{
		a->kind = A_LOST;
		snprintf(a->msg, sizeof(a->msg), "%s",
				 r ? PQresultErrorMessage(r) : PQerrorMessage(c->pg));
		if (r && PQresultStatus(r) == PGRES_FATAL_ERROR &&
			PQresultErrorField(r, PG_DIAG_SQLSTATE) != NULL)
		{
			/* a FATAL from the server (terminated) */
			a->kind = A_LOST;
		}
		return;
	}
	if (PQresultStatus(r) == PGRES_FATAL_ERROR)
	{
		const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		size_t		i;

		a->kind = A_ERROR;
		a->err = E_OTHER;
		for (i = 0; code && i < sizeof(sqlstates) / sizeof(sqlstates[0]); i++)
			if (strcmp(code, sqlstates[i].code) == 0)
				a->err = sqlstates[i].bit;
		snprintf(a->msg, sizeof(a->msg), "%s %s", code ? code : "?????",
				 PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) ?
				 PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : "");
		return;
	}
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
		PQnfields(r) != 1)
	{
		a->kind = A_OTHER;
		snprintf(a->msg, sizeof(a->msg), "%s %s", PQresStatus(PQresultStatus(r)),
				 PQresultErrorMessage(r));
		return;
	}
	if (PQgetisnull(r, 0, 0))
		a->kind = A_NULL;
	else if (boolean)
	{
		const char *v = PQgetvalue(r, 0, 0);

		a->kind = strcmp(v, "t") == 0 ? A_TRUE : A_FALSE;
	}
	else
	{
		a->kind = A_TOKEN;
		a->token = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	}
}

static bool
fn_boolean(Fn fn)
{
	return fn == F_RELEASE || fn == F_RENEW || fn == F_HOLDS || fn == F_CANCEL;
}

/* does a result match an expectation (without learning anything)? */
static bool
result_matches(const Expect *x, const Actual *a)
{
	switch (x->kind)
	{
		case X_TOKEN:
			return a->kind == A_TOKEN &&
				(x->fresh || ev_token(x->ev) == 0 || ev_token(x->ev) == a->token);
		case X_NULL:
			return a->kind == A_NULL;
		case X_TRUE:
			return a->kind == A_TRUE;
		case X_FALSE:
			return a->kind == A_FALSE;
		case X_ERROR:
			return a->kind == A_ERROR && (a->err & x->errs) != 0;
		default:
			return false;
	}
}

/*
 * check_result compares a call's result with the model's expectation and
 * learns the token of a grant.
 */
static void
check_result(const Op *op, const Expect *x, const Actual *a)
{
	char		d[1000];

	op_describe(op, d, sizeof(d));
	trace("   %s -> %s (expected %s)", d, actual_describe(a), expect_describe(x));
	if (!result_matches(x, a))
		fail("%s returned %s; the model expected %s", d, actual_describe(a),
			 expect_describe(x));
	st.results_checked++;
	switch (x->kind)
	{
		case X_TOKEN:
			learn_token(x->ev, a->token, d);
			if (!x->fresh)
				st.reentrant++;
			break;
		case X_ERROR:
			st.errors_checked++;
			if (a->err == E55006)
				st.e55006++;
			if (a->err == E55000)
				st.e55000++;
			break;
		case X_NULL:
			st.nulls++;
			break;
		case X_TRUE:
			st.trues++;
			break;
		case X_FALSE:
			st.falses++;
			break;
		default:
			break;
	}
}

/* ---------------------------------------------------------------------
 * libpq plumbing
 * --------------------------------------------------------------------- */

static void
conn_reset_call(Conn *c)
{
	if (c->res)
		PQclear(c->res);
	c->res = NULL;
	c->busy = false;
	c->done = false;
	c->lost = false;
	c->is_get = false;
	c->cancel_sent = false;
	c->ambiguous = false;
	c->handoff_checked = false;
	c->g_lock = -1;
	c->g_owner = NO_OWNER;
	c->g_tmode = T_NONE;
	c->g_timeout = 0;
}

/* notices (and the FATAL an idle terminated session gets) go to the trace */
static void
notice_to_trace(void *arg, const char *message)
{
	trace("   c%d notice: %.*s", (int) (intptr_t) arg,
		  (int) strcspn(message, "\n"), message);
}

static void
conn_open(int i)
{
	Conn	   *c = &conns[i];
	PGresult   *r;

	c->pg = PQconnectdb(conninfo);
	if (PQstatus(c->pg) != CONNECTION_OK)
		fail("cannot connect: %s", PQerrorMessage(c->pg));
	PQsetNoticeProcessor(c->pg, notice_to_trace, (void *) (intptr_t) i);
	r = PQexec(c->pg, "SELECT pg_backend_pid(), lockq_session_owner()");
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail("c%d: %s", i, PQresultErrorMessage(r));
	c->pid = atoi(PQgetvalue(r, 0, 0));
	snprintf(c->sess, sizeof(c->sess), "%s", PQgetvalue(r, 0, 1));
	PQclear(r);
	c->gen++;
	conn_reset_call(c);
	trace("c%d connected: pid %d, session owner %s", i, c->pid, c->sess);
}

/* read what has arrived on a busy connection; done once the statement
 * is over (its transaction ended) */
static void
conn_receive(Conn *c)
{
	if (!c->busy || c->done)
		return;
	if (!PQconsumeInput(c->pg))
	{
		c->lost = true;
		c->done = true;
		c->done_at = now_s();
		return;
	}
	while (!PQisBusy(c->pg))
	{
		PGresult   *r = PQgetResult(c->pg);

		if (r == NULL)
		{
			c->done = true;
			c->done_at = now_s();
			return;
		}
		if (c->res == NULL)
			c->res = r;
		else
			PQclear(r);
		if (PQstatus(c->pg) == CONNECTION_BAD)
		{
			c->lost = true;
			c->done = true;
			c->done_at = now_s();
			return;
		}
	}
}

/* wait up to ms for input on any busy connection, then read it */
static void
pump(int ms)
{
	struct pollfd pfd[NCONN];
	int			n = 0;
	int			i;

	for (i = 0; i < NCONN; i++)
		if (conns[i].busy && !conns[i].done)
		{
			pfd[n].fd = PQsocket(conns[i].pg);
			pfd[n].events = POLLIN;
			pfd[n].revents = 0;
			n++;
		}
	if (n > 0 && ms > 0)
		(void) poll(pfd, n, ms);
	else if (ms > 0)
		(void) poll(NULL, 0, ms);
	for (i = 0; i < NCONN; i++)
		conn_receive(&conns[i]);
}

static void
conn_send(Conn *c, const char *sql, int n, const char *const *vals)
{
	int			i = (int) (c - conns);

	conn_reset_call(c);
	c->sent = now_s();
	if (!PQsendQueryParams(c->pg, sql, n, NULL, vals, NULL, NULL, 0))
		fail("c%d: cannot send: %s", i, PQerrorMessage(c->pg));
	c->busy = true;
	st.calls++;
}

static void
wait_done(Conn *c, double limit, const char *what)
{
	double		deadline = now_s() + limit;

	while (!c->done)
	{
		if (now_s() > deadline)
			fail("c%d: no answer within %.0f s to %s", (int) (c - conns),
				 limit, what);
		pump(20);
	}
}

/* send a call */
static void
op_send(const Op *op)
{
	Conn	   *c = &conns[op->conn];
	const char *v[5];
	const char *sql = NULL;
	int			n = 0;

#define P(s) (v[n++] = (s).null ? NULL : (s).v)
	P(op->lk);
	switch (op->fn)
	{
		case F_GET:
			P(op->ow);
			P(op->ttl);
			P(op->timeout);
			sql = "SELECT lockq_get($1, $2, $3::interval, $4::interval)";
			break;
		case F_TRY:
			P(op->ow);
			P(op->ttl);
			sql = "SELECT lockq_try($1, $2, $3::interval)";
			break;
		case F_RELEASE:
			if (op->nargs == 1)
				sql = "SELECT lockq_release($1)";
			else if (op->nargs == 2)
			{
				P(op->ow);
				sql = "SELECT lockq_release($1, $2)";
			}
			else
			{
				P(op->ow);
				P(op->token);
				sql = "SELECT lockq_release($1, $2, $3::bigint)";
			}
			break;
		case F_RENEW:
			P(op->ow);
			P(op->token);
			P(op->ttl);
			sql = "SELECT lockq_renew($1, $2, $3::bigint, $4::interval)";
			break;
		case F_HOLDS:
			P(op->token);
			sql = "SELECT lockq_holds($1, $2::bigint)";
			break;
		case F_ENQUEUE:
			P(op->ow);
			P(op->ttl);
			P(op->channel);
			P(op->hb);
			sql = "SELECT lockq_enqueue($1, $2, $3::interval, $4, $5::interval)";
			break;
		case F_HEARTBEAT:
			P(op->ow);
			sql = "SELECT lockq_heartbeat($1, $2)";
			break;
		case F_CANCEL:
			P(op->ow);
			sql = "SELECT lockq_cancel($1, $2)";
			break;
	}
#undef P
	conn_send(c, sql, n, v);
	op_describe(op, c->what, sizeof(c->what));
}

/* run a statement on the observer */
static PGresult *
obs_exec(const char *sql)
{
	PGresult   *r = PQexec(obs, sql);

	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail("observer: %s: %s", sql, PQresultErrorMessage(r));
	return r;
}

/*
 * settle_session_end waits until the lock server has applied the end of
 * the session of backend pid.  Its exit queues the end in the arrival ring
 * (lockq's before_shmem_exit callback) before pg_stat_activity drops the
 * backend, and the ring is applied in order, so the end is applied once
 * the backend is gone and a request the observer sends after that is
 * answered.  Until then the views may show what the end changes: a grant
 * handed to a waiter that never picked it up, released by the end.
 */
static void
settle_session_end(int pid)
{
	char		sql[200];
	double		deadline = now_s() + WAIT_S;

	snprintf(sql, sizeof(sql),
			 "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %d", pid);
	for (;;)
	{
		PGresult   *r = obs_exec(sql);
		bool		gone = strcmp(PQgetvalue(r, 0, 0), "t") == 0;

		PQclear(r);
		if (gone)
			break;
		if (now_s() > deadline)
			fail("backend %d did not exit within %.0f s of pg_terminate_backend",
				 pid, WAIT_S);
		usleep(2000);
	}
	/* a release of a lock nobody holds: a round trip, nothing changed */
	PQclear(obs_exec("SELECT lockq_release('lockq_model barrier', 'lockq_model')"));
}

/* ---------------------------------------------------------------------
 * Answers of blocked lockq_get calls
 * --------------------------------------------------------------------- */

/* a blocked lockq_get of connection c that timed out leaves the model */
static void
remove_waiter(int ci, const char *why)
{
	int			l = m_waiting_lock(&M, ci);

	if (l < 0)
		fail("c%d: %s, but the model has it neither waiting nor granted (%s)",
			 ci, why, conns[ci].what);
	q_remove(&M.l[l], q_find_conn(&M.l[l], ci));
}

/*
 * process_conn checks the answer that arrived for a blocked lockq_get
 * call: a token only after the model handed the lock to that call; 55P03
 * only for a timeout that has passed; 57014 only after a cancel.
 */
static void
process_conn(int ci)
{
	Conn	   *c = &conns[ci];
	Actual		a;
	double		elapsed;

	if (!c->busy || !c->is_get || !c->done)
		return;
	actual_of(c, false, &a);
	elapsed = c->done_at - c->sent;
	trace("   c%d blocked %s -> %s after %.3f s", ci, c->what,
		  actual_describe(&a), elapsed);
	if (a.kind == A_TOKEN)
	{
		int			ev = M.granted_ev[ci];

		if (ev < 0)
			fail("c%d: the blocked call %s returned token %" PRId64 " after %.3f s, "
				 "but the model has it still waiting (the lock was not handed to it: "
				 "not at the head of the queue, or not free)",
				 ci, c->what, a.token, elapsed);
		learn_token(ev, a.token, c->what);
		M.granted_ev[ci] = -1;
		st.handoffs++;
		st.results_checked++;
		if (c->ambiguous)
			st.ambiguous_granted++;
	}
	else if (a.kind == A_ERROR && a.err == E55P03)
	{
		if (c->g_tmode != T_MEDIUM)
			fail("c%d: %s returned 55P03 after %.3f s, but its timeout is not one "
				 "that can run out here", ci, c->what, elapsed);
		if (elapsed < c->g_timeout - EPS_S)
			fail("c%d: %s timed out after %.3f s, before its timeout of %.3f s",
				 ci, c->what, elapsed, c->g_timeout);
		if (M.granted_ev[ci] >= 0)
		{
			int			ev = M.granted_ev[ci];
			int			l = c->g_lock;

			if (!c->ambiguous)
				fail("c%d: %s timed out after %.3f s, but the lock was handed "
					 "to it before its deadline", ci, c->what, elapsed);
			/* the timeout came first: the lock went to the next one */
			if (M.l[l].ev != ev)
				fail("c%d: model: the grant that timed out is not current", ci);
			evs[ev].dead = true;
			M.granted_ev[ci] = -1;
			trace("   (timed out before the hand-off: the lock goes to the next waiter)");
			m_end_grant(&M, l);
		}
		else
			remove_waiter(ci, "timed out");
		st.timeouts++;
		st.results_checked++;
	}
	else if (a.kind == A_ERROR && a.err == E57014 && c->cancel_sent)
	{
		if (M.granted_ev[ci] >= 0)
			fail("c%d: %s was cancelled, but the lock had been handed to it "
				 "(the model saw no race)", ci, c->what);
		remove_waiter(ci, "was cancelled");
		st.cancels++;
		st.results_checked++;
	}
	else
		fail("c%d: the blocked call %s returned %s after %.3f s; the model has it %s",
			 ci, c->what, actual_describe(&a), elapsed,
			 M.granted_ev[ci] >= 0 ? "granted" : "waiting");
	conn_reset_call(c);
}

static void
process_pending(void)
{
	int			ci;

	for (ci = 0; ci < NCONN; ci++)
		process_conn(ci);
}

/*
 * resolve_handoffs looks at the hand-offs of this step to blocked
 * lockq_get calls that can time out.  If the call that handed the lock on
 * returned (t_dec) before the waiter's deadline could have passed, the
 * waiter must have it.  Otherwise the waiter's own answer says whether the
 * grant or the timeout came first; wait for it.
 */
static void
resolve_handoffs(double t_dec)
{
	for (;;)
	{
		bool		waited = false;
		int			ci;

		for (ci = 0; ci < NCONN; ci++)
		{
			Conn	   *c = &conns[ci];

			if (M.granted_ev[ci] < 0 || !c->busy || !c->is_get ||
				c->g_tmode != T_MEDIUM || c->handoff_checked)
				continue;
			c->handoff_checked = true;
			if (t_dec >= c->sent + c->g_timeout - EPS_S)
			{
				c->ambiguous = true;
				st.ambiguous++;
				trace("   c%d was handed the lock near its deadline: its answer decides", ci);
				wait_done(c, WAIT_S, c->what);
				/*
				 * Only its answer: if it timed out, the lock went to the
				 * next waiter at the same moment, which must be looked at
				 * the same way before its answer is read.
				 */
				process_conn(ci);
				waited = true;
			}
		}
		if (!waited)
			return;
	}
}

/* does lock l hold a waiter whose timeout can run out here? */
static bool
lock_has_timed(const Model *m, int l)
{
	int			i;

	for (i = 0; i < m->l[l].nq; i++)
	{
		int			ci = m->l[l].q[i].conn;

		if (ci >= 0 && conns[ci].g_tmode == T_MEDIUM)
			return true;
	}
	return false;
}

static bool
any_timed(const Model *m)
{
	int			l;

	for (l = 0; l < NLOCK; l++)
		if (lock_has_timed(m, l))
			return true;
	return false;
}

/* does a hand-off in m (against M) reach a waiter that can time out? */
static bool
hands_to_timed(const Model *m)
{
	int			ci;

	for (ci = 0; ci < NCONN; ci++)
		if (m->granted_ev[ci] >= 0 && M.granted_ev[ci] < 0 &&
			conns[ci].g_tmode == T_MEDIUM)
			return true;
	return false;
}

/* ---------------------------------------------------------------------
 * The observer: lockq_locks, lockq_waiters and lockq_stats against the model
 * --------------------------------------------------------------------- */

typedef struct SRow
{
	char		kind;			/* L, W or S */
	int			lock;			/* -1: not one of ours */
	char		lock_id[300];
	char		owner[300];
	int64_t		n;				/* token, position or holders */
	int64_t		pid;			/* session_pid (0 for NULL) or waiters */
	int			client;
} SRow;

typedef struct Snap
{
	int			n;
	SRow		r[200];
} Snap;

static void
snapshot(Snap *s)
{
	PGresult   *r;
	int			i;

	static bool prepared = false;

	if (!prepared)
	{
		r = PQprepare(obs, "snap",
					  "SELECT 'L', lock_id, owner, token, coalesce(session_pid, 0), 0 FROM lockq_locks "
					  "UNION ALL SELECT 'W', lock_id, owner, position, coalesce(session_pid, 0), "
					  "CASE kind WHEN 'client' THEN 1 WHEN 'backend' THEN 0 ELSE 2 END FROM lockq_waiters "
					  "UNION ALL SELECT 'S', '', '', holders, waiters, 0 FROM lockq_stats",
					  0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			fail("observer: %s", PQresultErrorMessage(r));
		PQclear(r);
		prepared = true;
	}
	r = PQexecPrepared(obs, "snap", 0, NULL, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail("observer: %s", PQresultErrorMessage(r));
	s->n = 0;
	for (i = 0; i < PQntuples(r) && s->n < 200; i++)
	{
		SRow	   *x = &s->r[s->n++];
		int			l;

		x->kind = PQgetvalue(r, i, 0)[0];
		snprintf(x->lock_id, sizeof(x->lock_id), "%s", PQgetvalue(r, i, 1));
		snprintf(x->owner, sizeof(x->owner), "%s", PQgetvalue(r, i, 2));
		x->n = strtoll(PQgetvalue(r, i, 3), NULL, 10);
		x->pid = strtoll(PQgetvalue(r, i, 4), NULL, 10);
		x->client = atoi(PQgetvalue(r, i, 5));
		x->lock = -1;
		for (l = 0; l < NLOCK; l++)
			if (strcmp(x->lock_id, lock_ids[l]) == 0)
				x->lock = l;
	}
	PQclear(r);
	st.snapshots++;
}

/* a lockq_get just sent, which the views must show (or it must answer) */
static int	must_show_conn = -1;

/* may this waiter be gone already (its timeout may have passed)? */
static bool
waiter_optional(const MWaiter *w)
{
	return w->conn >= 0 && w->conn != must_show_conn &&
		conns[w->conn].busy && conns[w->conn].is_get &&
		conns[w->conn].g_tmode == T_MEDIUM &&
		now_s() >= conns[w->conn].sent + conns[w->conn].g_timeout - EPS_S;
}

static void
app(char *buf, size_t len, const char *fmt,...)
{
	size_t		used = strlen(buf);
	va_list		ap;

	if (used >= len - 1)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/*
 * compare checks a snapshot against model m.  lw: locks and waiters match;
 * the return value: the gauges match too.  diff says how they differ.
 * With learn, tokens of grants the model has not seen yet are taken from
 * the snapshot (only once it matched).
 */
static bool
compare(const Model *m, const Snap *s, bool *lw, bool learn, char *diff,
		size_t dlen)
{
	int			l;
	int			i;
	int			held = 0;
	int			wmax = 0;
	int			wmin = 0;
	bool		ok = true;
	bool		gauges = false;

	diff[0] = '\0';
	for (i = 0; i < s->n; i++)
		if (s->r[i].kind != 'S' && s->r[i].lock < 0)
		{
			app(diff, dlen, "unknown lock id '%.40s' in %s; ", s->r[i].lock_id,
				s->r[i].kind == 'L' ? "lockq_locks" : "lockq_waiters");
			ok = false;
		}

	for (l = 0; l < NLOCK; l++)
	{
		const MLock *L = &m->l[l];
		const SRow *hold[8];
		const SRow *wait[64];
		int			nh = 0;
		int			nw = 0;
		int			j;
		int			k;

		for (i = 0; i < s->n; i++)
		{
			if (s->r[i].lock != l)
				continue;
			if (s->r[i].kind == 'L' && nh < 8)
				hold[nh++] = &s->r[i];
			else if (s->r[i].kind == 'W' && nw < 64)
				wait[nw++] = &s->r[i];
		}

		/* the holder */
		if (nh > 1)
		{
			app(diff, dlen, "%s: %d rows in lockq_locks; ", lock_disp[l], nh);
			st.double_rows++;
			ok = false;
		}
		if (L->holder == NO_OWNER && nh > 0)
		{
			app(diff, dlen, "%s: held by %.40s (token %" PRId64 "), the model has it free; ",
				lock_disp[l], hold[0]->owner, hold[0]->n);
			ok = false;
		}
		else if (L->holder != NO_OWNER)
		{
			int			o = L->holder;
			int64_t		want_pid = IS_SESS(o) ? conns[SESS_CONN(o)].pid : 0;

			held++;
			if (nh == 0)
			{
				app(diff, dlen, "%s: free, the model has it held by %s; ",
					lock_disp[l], owner_short(o));
				ok = false;
			}
			else if (nh == 1 &&
					 (strcmp(hold[0]->owner, owner_name(o)) != 0 ||
					  hold[0]->pid != want_pid ||
					  (ev_token(L->ev) != 0 && ev_token(L->ev) != hold[0]->n)))
			{
				app(diff, dlen, "%s: held by %.40s (pid %" PRId64 ", token %" PRId64 "), "
					"the model has %s (pid %" PRId64 ", token %" PRId64 "); ",
					lock_disp[l], hold[0]->owner, hold[0]->pid, hold[0]->n,
					owner_short(o), want_pid, ev_token(L->ev));
				ok = false;
			}
		}

		/* the queue, in order; positions 1..n */
		for (j = 0; j < nw; j++)
			for (k = j + 1; k < nw; k++)
				if (wait[k]->n < wait[j]->n)
				{
					const SRow *t = wait[j];

					wait[j] = wait[k];
					wait[k] = t;
				}
		for (j = 0; j < nw; j++)
			if (wait[j]->n != j + 1)
			{
				app(diff, dlen, "%s: waiter positions are not 1..%d; ",
					lock_disp[l], nw);
				ok = false;
				break;
			}
		j = 0;
		for (k = 0; k < L->nq; k++)
		{
			const MWaiter *w = &L->q[k];
			bool		opt = waiter_optional(w);
			int64_t		want_pid = w->conn >= 0 ? conns[w->conn].pid : 0;

			wmax++;
			if (!opt)
				wmin++;
			if (j < nw && strcmp(wait[j]->owner, owner_name(w->owner)) == 0 &&
				wait[j]->client == (w->conn < 0) && wait[j]->pid == want_pid)
				j++;
			else if (!opt)
			{
				app(diff, dlen, "%s: queue position %d: %.40s%s (pid %" PRId64 "), the model has %s %s (pid %" PRId64 ") there; ",
					lock_disp[l], j + 1, j < nw ? wait[j]->owner : "nobody",
					j < nw ? (wait[j]->client ? " client" : " backend") : "",
					j < nw ? wait[j]->pid : 0, owner_short(w->owner),
					w->conn < 0 ? "client" : "backend", want_pid);
				ok = false;
				break;
			}
		}
		if (ok && j < nw)
		{
			app(diff, dlen, "%s: %d waiters, the model has %d; ", lock_disp[l],
				nw, L->nq);
			ok = false;
		}
	}
	*lw = ok;

	for (i = 0; i < s->n; i++)
		if (s->r[i].kind == 'S')
		{
			gauges = s->r[i].n == held && s->r[i].pid >= wmin &&
				s->r[i].pid <= wmax;
			if (!gauges)
				app(diff, dlen, "lockq_stats: holders %" PRId64 ", waiters %" PRId64
					"; the model has %d holders and %d..%d waiters; ",
					s->r[i].n, s->r[i].pid, held, wmin, wmax);
		}

	if (ok && learn)
		for (l = 0; l < NLOCK; l++)
			if (m->l[l].holder != NO_OWNER && ev_token(m->l[l].ev) == 0)
				for (i = 0; i < s->n; i++)
					if (s->r[i].kind == 'L' && s->r[i].lock == l)
						learn_token(m->l[l].ev, s->r[i].n, "lockq_locks");
	return ok && gauges;
}

/*
 * observer_sync waits until the views show one of the candidate models
 * and returns its index.  cands[0] == &M (the only candidate then) lets
 * answers of blocked calls arrive and be checked meanwhile.  With strict,
 * locks and queues must match at the first look (the step's effects were
 * complete when its calls returned); the gauges are published just after
 * the answers, so they are always polled.
 */
static int
observer_sync(Model **cands, int ncand, bool strict, const char *what)
{
	double		deadline = now_s() + WAIT_S;
	int			iter;
	char		diff[3000];

	for (iter = 0;; iter++)
	{
		Snap		s;
		int			k;
		bool		any_lw = false;

		if (ncand == 1 && cands[0] == &M)
		{
			pump(0);
			process_pending();
		}
		snapshot(&s);
		for (k = 0; k < ncand; k++)
		{
			bool		lw;

			if (compare(cands[k], &s, &lw, false, diff, sizeof(diff)))
			{
				/* tokens not seen yet are learned for the real model only */
				if (cands[k] == &M)
					(void) compare(cands[k], &s, &lw, true, diff, sizeof(diff));
				if (iter > 0)
					st.polls++;
				return k;
			}
			any_lw |= lw;
		}
		if (strict && iter == 0 && !any_lw)
			fail("after %s the views disagree with the model at once: %s", what, diff);
		if (now_s() > deadline)
			fail("after %s the views did not come to agree with the model within %.0f s: %s",
				 what, WAIT_S, diff);
		pump(2);
	}
}

static void
sync_model(bool strict, const char *what)
{
	Model	   *c[1] = {&M};

	(void) observer_sync(c, 1, strict, what);
}

/* ---------------------------------------------------------------------
 * Choosing arguments
 * --------------------------------------------------------------------- */

static int
idle_conn(void)
{
	int			idle[NCONN];
	int			n = 0;
	int			i;

	for (i = 0; i < NCONN; i++)
		if (!conns[i].busy)
			idle[n++] = i;
	return n ? idle[rnd(n)] : -1;
}

static void
pick_lock(Op *op)
{
	if (chance(garbage_pm))
	{
		op->lock = -1;
		switch (rnd(4))
		{
			case 0:
				str_set(&op->lk, NULL, NULL, E22004);
				break;
			case 1:
				str_set(&op->lk, "", NULL, E22023);
				break;
			case 2:
				str_set(&op->lk, x256, "<x*256>", E22023);
				break;
			default:
				str_set(&op->lk, e128, "<e-acute*128: 256 bytes>", E22023);
				break;
		}
		return;
	}
	op->lock = rnd(NLOCK);
	str_set(&op->lk, lock_ids[op->lock], lock_disp[op->lock], 0);
}

/* the owner NULL: this session */
static void
owner_session(Op *op)
{
	op->owner = SESS(op->conn);
	str_set(&op->ow, NULL, NULL, 0);
}

static void
owner_explicit(Op *op, int o)
{
	op->owner = o;
	str_set(&op->ow, owner_names[o], owner_disp[o], 0);
}

/* an owner argument; NULL (this session) where allowed */
static void
pick_owner(Op *op, bool null_ok)
{
	int			r = rnd(1000);

	if (r < garbage_pm)
	{
		int			other = (op->conn + 1 + rnd(NCONN - 1)) % NCONN;

		op->owner = NO_OWNER;
		switch (rnd(5))
		{
			case 0:
				str_set(&op->ow, "", NULL, E22023);
				break;
			case 1:
				str_set(&op->ow, o256, "<o*256>", E22023);
				break;
			case 2:
				str_set(&op->ow, "session:1:2", NULL, E22023);
				break;
			case 3:
				/* another session's owner name cannot be used */
				str_set(&op->ow, conns[other].sess, "<another session's owner>",
						E22023);
				break;
			default:
				str_set(&op->ow, e128, "<e-acute*128: 256 bytes>", E22023);
				break;
		}
	}
	else if (r < 400)
	{
		if (null_ok)
			owner_session(op);
		else
		{
			op->owner = NO_OWNER;
			str_set(&op->ow, NULL, NULL, E22004);
		}
	}
	else
		owner_explicit(op, rnd(NOWNER));
}

static const char *const ttl_valid[] = {
	"10 min", "1 hour", "1 day", "86400 s", "2 hours 30 min", "1 day -1 hour"
};
static const char *const ttl_bad[] = {
	"0", "-5 s", "1 day 1 second", "100000000 years", "1 day -25 hours",
	"1 mon", "-1 microsecond"
};
static const char *const ttl_short[] = {"1 microsecond", "1 ms", "1 s"};

#define NELEM(a) ((int) (sizeof(a) / sizeof((a)[0])))

/* a ttl for lockq_get / lockq_try / lockq_enqueue; reentrant: the owner
 * holds the lock, so a short ttl must not shorten its lease */
static void
pick_ttl(Op *op, bool reentrant)
{
	/* (only for a call on its own: in a pair the other call may end the
	 * grant first, and a short ttl would then make a short lease) */
	if (chance(garbage_pm))
	{
		if (chance(200))
			str_set(&op->ttl, NULL, NULL, E22004);
		else
			str_set(&op->ttl, ttl_bad[rnd(NELEM(ttl_bad))], NULL, E22023);
	}
	else if (reentrant && chance(300))
		str_set(&op->ttl, ttl_short[rnd(NELEM(ttl_short))], NULL, 0);
	else
		str_set(&op->ttl, ttl_valid[rnd(NELEM(ttl_valid))], NULL, 0);
}

/* a token argument: the lock's current one, another grant's, or garbage */
static void
pick_token(Op *op, int null_pm)
{
	int64_t		t = 0;
	char		buf[32];
	int			r = rnd(1000);

	if (r < null_pm)
	{
		str_set(&op->token, NULL, NULL, 0);
		op->tokval = 0;
		return;
	}
	r = rnd(1000);
	if (r < 600 && op->lock >= 0 && M.l[op->lock].holder != NO_OWNER &&
		ev_token(M.l[op->lock].ev) != 0)
		t = ev_token(M.l[op->lock].ev);
	else if (r < 800 && nev > 0)
	{
		int			e = rnd(nev);

		t = evs[e].token;		/* an old grant's, or another lock's */
	}
	if (t == 0)
	{
		int64_t		max = 0;
		int			i;

		for (i = 0; i < nev; i++)
			if (evs[i].token > max)
				max = evs[i].token;
		switch (rnd(5))
		{
			case 0:
				t = 0;
				break;
			case 1:
				t = -1;
				break;
			case 2:
				t = INT64_MAX;
				break;
			case 3:
				t = INT64_MIN;
				break;
			default:
				t = max + 1000000;	/* never reached in a run */
				break;
		}
	}
	snprintf(buf, sizeof(buf), "%" PRId64, t);
	str_set(&op->token, buf, buf, 0);
	op->tokval = t;
}

/* the owner that holds lock l, acting from an idle connection (the holder's
 * own for a session-bound lock); false if it cannot act now */
static bool
pick_holder(Op *op)
{
	int			o;

	if (op->lock < 0 || M.l[op->lock].holder == NO_OWNER)
		return false;
	o = M.l[op->lock].holder;
	if (IS_SESS(o))
	{
		if (conns[SESS_CONN(o)].busy)
			return false;
		op->conn = SESS_CONN(o);
		owner_session(op);
	}
	else
		owner_explicit(op, o);
	return true;
}

/* an owner that waits as a client for lock l, if any */
static bool
pick_client_waiter(Op *op)
{
	int			cand[MAXQ];
	int			n = 0;
	int			i;

	if (op->lock < 0)
		return false;
	for (i = 0; i < M.l[op->lock].nq; i++)
		if (M.l[op->lock].q[i].conn < 0)
			cand[n++] = M.l[op->lock].q[i].owner;
	if (n == 0)
		return false;
	owner_explicit(op, cand[rnd(n)]);
	return true;
}

static void
op_init(Op *op, Fn fn, int conn)
{
	memset(op, 0, sizeof(*op));
	op->fn = fn;
	op->conn = conn;
	op->lock = -1;
	op->owner = NO_OWNER;
	str_set(&op->lk, NULL, NULL, 0);
	str_set(&op->ow, NULL, NULL, 0);
	str_set(&op->ttl, "1 hour", NULL, 0);
	str_set(&op->timeout, NULL, NULL, 0);
	str_set(&op->token, NULL, NULL, 0);
	str_set(&op->channel, NULL, NULL, 0);
	str_set(&op->hb, "1 hour", NULL, 0);
	op->nargs = 3;
}

/*
 * gen_op makes a random call of kind fn from connection conn (the
 * connection may change to the holder's for a session-bound lock).
 * blocking: a lockq_get may wait (else only with a short timeout).
 */
static void
gen_op(Op *op, Fn fn, int conn, bool blocking)
{
	char		buf[64];
	bool		reent;

	op_init(op, fn, conn);
	pick_lock(op);
	switch (fn)
	{
		case F_GET:
		case F_TRY:
			if (chance(150 + holder_bias) && pick_holder(op))
				;				/* re-entrant, unless the owner is garbage */
			else
			{
				op->conn = conn;
				pick_owner(op, true);
			}
			reent = blocking && op->lock >= 0 && op->owner != NO_OWNER &&
				M.l[op->lock].holder == op->owner;
			pick_ttl(op, reent);
			if (fn == F_GET)
			{
				int			r = rnd(1000);

				if (chance(garbage_pm))
				{
					op->tmode = T_NONE;
					str_set(&op->timeout, (const char *[]) {
						"0", "-1 s", "367 days", "100000000 years",
							"1 day -25 hours", "-1 microsecond"}[rnd(6)], NULL,
							E22023);
				}
				else if (!blocking || r < 150)
				{
					op->tmode = T_SHORT;
					op->timeout_s = (20 + rnd(41)) / 1000.0;
					snprintf(buf, sizeof(buf), "%d ms", (int) (op->timeout_s * 1000 + 0.5));
					str_set(&op->timeout, buf, NULL, 0);
				}
				else if (r < 350)
				{
					op->tmode = T_MEDIUM;
					op->timeout_s = (30 + rnd(371)) / 1000.0;
					snprintf(buf, sizeof(buf), "%d ms", (int) (op->timeout_s * 1000 + 0.5));
					str_set(&op->timeout, buf, NULL, 0);
				}
				else if (r < 450)
				{
					op->tmode = T_LONG;
					str_set(&op->timeout, chance(500) ? "1 hour" : "366 days", NULL, 0);
				}
				else
					op->tmode = T_NONE;
			}
			break;

		case F_RELEASE:
		case F_RENEW:
			if (chance(650 + holder_bias) && pick_holder(op))
				;
			else
			{
				op->conn = conn;
				pick_owner(op, true);
			}
			pick_token(op, 350);
			if (fn == F_RELEASE && op->ow.null && op->token.null && chance(300))
				op->nargs = 1;
			else if (fn == F_RELEASE && op->token.null && chance(300))
				op->nargs = 2;
			if (fn == F_RENEW)
			{
				if (chance(400))
					str_set(&op->ttl, NULL, NULL, 0);	/* the grant's own */
				else if (chance(100))
					str_set(&op->ttl, ttl_bad[rnd(NELEM(ttl_bad))], NULL, E22023);
				else
					str_set(&op->ttl, ttl_valid[rnd(3)], NULL, 0);
			}
			break;

		case F_HOLDS:
			pick_token(op, 100);
			break;

		case F_ENQUEUE:
			if (chance(100 + holder_bias) && pick_holder(op) && !op->ow.null)
				;
			else
			{
				op->conn = conn;
				pick_owner(op, false);
			}
			reent = blocking && op->lock >= 0 && op->owner != NO_OWNER &&
				M.l[op->lock].holder == op->owner;
			pick_ttl(op, reent);
			switch (chance(garbage_pm) ? rnd(2) : 2 + rnd(18))
			{
				case 0:
					str_set(&op->channel, "", NULL, E22023);
					break;
				case 1:
					str_set(&op->channel, c64, "<c*64>", E22023);
					break;
				case 2:
					str_set(&op->channel, c63, "<c*63>", 0);
					break;
				default:
					str_set(&op->channel, chance(500) ? NULL : "lockq_model_chan", NULL, 0);
					break;
			}
			switch (chance(garbage_pm) ? 0 : 1 + rnd(19))
			{
				case 0:
					str_set(&op->hb, (const char *[]) {
						"99 ms", "1 day 1 s", "0", "-1 s"}[rnd(4)], NULL, E22023);
					break;
				case 1:
				case 2:
				case 3:
				case 4:
				case 5:
				case 6:
				case 7:
					str_set(&op->hb, NULL, NULL, 0);	/* lockq.waiter_timeout */
					break;
				default:
					str_set(&op->hb, chance(700) ? "1 hour" : "1 day", NULL, 0);
					break;
			}
			break;

		case F_HEARTBEAT:
		case F_CANCEL:
			if (chance(500 + holder_bias) && pick_client_waiter(op))
				;
			else if (chance(300 + holder_bias) && pick_holder(op) && !op->ow.null)
				;
			else
			{
				op->conn = conn;
				pick_owner(op, false);
			}
			break;
	}
	/* pick_holder may have moved the call to the holder's connection */
	if (conns[op->conn].busy)
	{
		op->conn = conn;
		if (op->ow.null && !op->ow.err)
			op->owner = SESS(conn);
	}
}

/* ---------------------------------------------------------------------
 * Steps
 * --------------------------------------------------------------------- */

static void
step_begin(void)
{
	step_no++;
	cur_seq++;
	pump(0);
	process_pending();
}

/* the timeouts of blocked calls must come (and not much later) */
static void
check_overdue(void)
{
	int			ci;

	for (ci = 0; ci < NCONN; ci++)
	{
		Conn	   *c = &conns[ci];

		if (c->busy && c->is_get && c->g_tmode == T_MEDIUM && !c->done &&
			M.granted_ev[ci] < 0 && now_s() > c->sent + c->g_timeout + WAIT_S)
			fail("c%d: %s is still waiting %.1f s after its timeout of %.3f s",
				 ci, c->what, now_s() - c->sent - c->g_timeout, c->g_timeout);
	}
}

/* would this call end a session-bound grant (its hand-off then follows
 * the answer)? */
static bool
op_async_release(const Op *op, const Expect *x)
{
	return op->fn == F_RELEASE && x->kind == X_TRUE && IS_SESS(op->owner);
}

/*
 * step_call runs one call and checks it.  A lockq_get the model expects to
 * wait is left pending; the views must then show it at the tail of the
 * queue.
 */
static void
step_call(Op *op)
{
	Expect		x;
	Conn	   *c = &conns[op->conn];
	char		d[1000];
	Actual		a;
	bool		async;

	m_apply(&M, op, &x);
	op_describe(op, d, sizeof(d));
	trace("step %d: %s, expecting %s", step_no, d, expect_describe(&x));
	op_send(op);

	if (x.kind == X_QUEUED)
	{
		c->is_get = true;
		c->g_lock = op->lock;
		c->g_owner = op->owner;
		c->g_tmode = op->tmode;
		c->g_timeout = op->timeout_s;
		st.queued++;
		/*
		 * It must show up in the queue (or time out) before anything else
		 * happens: its place in the queue is taken when the lock server
		 * gets it.
		 */
		must_show_conn = op->conn;
		sync_model(false, d);
		must_show_conn = -1;
		return;
	}

	wait_done(c, x.kind == X_TIMEOUT ? op->timeout_s + WAIT_S : WAIT_S, d);
	actual_of(c, fn_boolean(op->fn), &a);
	if (x.kind == X_TIMEOUT)
	{
		double		elapsed = c->done_at - c->sent;

		trace("   %s -> %s after %.3f s", d, actual_describe(&a), elapsed);
		if (a.kind != A_ERROR || a.err != E55P03)
			fail("%s returned %s; the model expected it to wait and time out with 55P03",
				 d, actual_describe(&a));
		if (elapsed < op->timeout_s - EPS_S)
			fail("%s timed out after %.3f s, before its timeout", d, elapsed);
		st.short_timeouts++;
		st.results_checked++;
		conn_reset_call(c);
		sync_model(true, d);
		return;
	}
	check_result(op, &x, &a);
	conn_reset_call(c);
	async = op_async_release(op, &x);
	resolve_handoffs(async ? 1e30 : c->done_at);
	pump(0);
	process_pending();
	sync_model(!async, d);
}

/*
 * A call by the owner of a waiter that can time out, on that lock, would
 * get 55006 (or NULL, or false) or not depending on when the timeout
 * strikes.
 */
static bool
depends_on_timeout(const Op *op)
{
	int			i;

	if (op->lock < 0 || op->owner == NO_OWNER ||
		!(op->fn == F_GET || op->fn == F_ENQUEUE || op->fn == F_HEARTBEAT ||
		  op->fn == F_CANCEL))
		return false;
	i = q_find(&M.l[op->lock], op->owner);
	return i >= 0 && M.l[op->lock].q[i].conn >= 0 &&
		conns[M.l[op->lock].q[i].conn].g_tmode == T_MEDIUM;
}

/* may op run now?  No hand-off that follows the answer may reach a waiter
 * that can time out (when it happens is not known), and no call may depend
 * on whether such a waiter is still there */
static bool
op_allowed(const Op *op)
{
	Model		m = M;
	Expect		x;
	int			save = nev;
	bool		ok = true;

	if (depends_on_timeout(op))
		return false;
	m_apply(&m, op, &x);
	if (op_async_release(op, &x) && hands_to_timed(&m))
		ok = false;
	nev = save;
	return ok;
}

/*
 * step_pair sends two calls from two sessions at once.  The results must
 * be those of one of the two orders; the views then show that order's
 * state.
 */
static bool
step_pair(void)
{
	Op			ops[2];
	Model		cand[2];
	Expect		xs[2][2];
	Actual		a[2];
	int			c1 = idle_conn();
	int			c2;
	int			k;
	int			i;
	int			save = nev;
	int			match[2];
	int			nmatch = 0;
	Model	   *mc[2];
	char		d[2][1000];

	if (c1 < 0)
		return false;
	for (c2 = 0; c2 < NCONN; c2++)
		if (c2 != c1 && !conns[c2].busy)
			break;
	if (c2 == NCONN)
		return false;
	if (rnd(2))
	{
		int			t = c1;

		c1 = c2;
		c2 = t;
	}
	{
		static const Fn fns[] = {F_GET, F_TRY, F_TRY, F_RELEASE, F_RELEASE,
		F_RENEW, F_HOLDS, F_ENQUEUE, F_HEARTBEAT, F_CANCEL};

		/* mostly clean arguments and the holder acting: conflicts */
		garbage_pm = chance(800) ? 0 : 40;
		holder_bias = 200;
		/* half of the time the first one ends a grant */
		gen_op(&ops[0], chance(500) ? (chance(800) ? F_RELEASE : F_CANCEL) :
			   fns[rnd(NELEM(fns))], c1, false);
		gen_op(&ops[1], fns[rnd(NELEM(fns))], c2, false);
		garbage_pm = 40;
		holder_bias = 0;
	}
	if (ops[0].conn == ops[1].conn)
		return false;
	/* mostly on the same lock */
	if (ops[0].lock >= 0 && ops[1].lock >= 0 && chance(900))
	{
		ops[1].lock = ops[0].lock;
		str_set(&ops[1].lk, lock_ids[ops[0].lock], lock_disp[ops[0].lock], 0);
	}
	for (i = 0; i < 2; i++)
		if ((ops[i].fn == F_GET && ops[i].tmode == T_MEDIUM) ||
			depends_on_timeout(&ops[i]))
			return false;

	/* both orders: nothing may wait, no hand-off may reach a timed waiter */
	for (k = 0; k < 2; k++)
	{
		cand[k] = M;
		m_apply(&cand[k], &ops[k], &xs[k][k]);
		m_apply(&cand[k], &ops[1 - k], &xs[k][1 - k]);
		nev = save;
		for (i = 0; i < 2; i++)
			if (xs[k][i].kind == X_QUEUED || xs[k][i].kind == X_TIMEOUT)
				return false;
		if (hands_to_timed(&cand[k]))
			return false;
	}

	for (i = 0; i < 2; i++)
		op_describe(&ops[i], d[i], sizeof(d[i]));
	trace("step %d: at once: %s | %s", step_no, d[0], d[1]);
	op_send(&ops[0]);
	op_send(&ops[1]);
	wait_done(&conns[ops[0].conn], WAIT_S, d[0]);
	wait_done(&conns[ops[1].conn], WAIT_S, d[1]);
	for (i = 0; i < 2; i++)
	{
		actual_of(&conns[ops[i].conn], fn_boolean(ops[i].fn), &a[i]);
		trace("   %s -> %s", d[i], actual_describe(&a[i]));
	}

	/* which orders explain the results? */
	for (k = 0; k < 2; k++)
	{
		cand[k] = M;
		m_apply(&cand[k], &ops[k], &xs[k][k]);
		m_apply(&cand[k], &ops[1 - k], &xs[k][1 - k]);
		if (result_matches(&xs[k][0], &a[0]) && result_matches(&xs[k][1], &a[1]))
			match[nmatch++] = k;
		nev = save;
	}
	if (nmatch == 0)
		fail("at once: %s returned %s and %s returned %s; the model expected "
			 "%s and %s (first first) or %s and %s (second first)",
			 d[0], actual_describe(&a[0]), d[1], actual_describe(&a[1]),
			 expect_describe(&xs[0][0]), expect_describe(&xs[0][1]),
			 expect_describe(&xs[1][0]), expect_describe(&xs[1][1]));
	st.pairs++;
	if (nmatch == 2)
		st.pairs_both++;

	/* a session's own release hands on after its answer: poll */
	for (i = 0; i < nmatch; i++)
	{
		int			kk = match[i];

		cand[kk] = M;
		m_apply(&cand[kk], &ops[kk], &xs[kk][kk]);
		m_apply(&cand[kk], &ops[1 - kk], &xs[kk][1 - kk]);
		nev = save;
		mc[i] = &cand[kk];
	}
	k = nmatch == 1 ? 0 : observer_sync(mc, nmatch, false, "two calls at once");
	k = match[k];
	trace("   the order %s explains it", k == 0 ? "first, second" : "second, first");

	/* apply that order for real and check the results with it */
	m_apply(&M, &ops[k], &xs[k][k]);
	m_apply(&M, &ops[1 - k], &xs[k][1 - k]);
	check_result(&ops[k], &xs[k][k], &a[k]);
	check_result(&ops[1 - k], &xs[k][1 - k], &a[1 - k]);
	for (i = 0; i < 2; i++)
		conn_reset_call(&conns[ops[i].conn]);
	pump(0);
	process_pending();
	sync_model(false, "two calls at once");
	return true;
}

/* a blocked call that is waiting (not handed the lock); mostly not a timed
 * one, whose timeout should get a chance to run out */
static int
pick_waiting_conn(void)
{
	int			cand[NCONN];
	int			n = 0;
	int			ci;

	for (ci = 0; ci < NCONN; ci++)
	{
		int			l = m_waiting_lock(&M, ci);

		if (l < 0 || !conns[ci].busy || conns[ci].done)
			continue;
		/* (mostly let timeouts run out) */
		if (conns[ci].g_tmode == T_MEDIUM && chance(800))
			continue;
		cand[n++] = ci;
	}
	return n ? cand[rnd(n)] : -1;
}

/* pg_cancel_backend of a waiting lockq_get: 57014, nothing left queued */
static bool
step_pg_cancel(int ci)
{
	Conn	   *c;
	char		sql[100];
	PGresult   *r;

	if (ci < 0)
		ci = pick_waiting_conn();
	if (ci < 0)
		return false;
	c = &conns[ci];
	trace("step %d: pg_cancel_backend(c%d: %s)", step_no, ci, c->what);
	c->cancel_sent = true;
	snprintf(sql, sizeof(sql), "SELECT pg_cancel_backend(%d)", c->pid);
	r = obs_exec(sql);
	PQclear(r);
	wait_done(c, WAIT_S, c->what);
	{
		Actual		a;

		actual_of(c, false, &a);
		/* a timed call may have timed out first */
		if (!(a.kind == A_ERROR &&
			  (a.err == E57014 ||
			   (a.err == E55P03 && c->g_tmode == T_MEDIUM &&
				c->done_at - c->sent >= c->g_timeout - EPS_S))))
			fail("c%d: %s returned %s after pg_cancel_backend; expected 57014",
				 ci, c->what, actual_describe(&a));
	}
	process_pending();
	sync_model(true, "pg_cancel_backend");
	return true;
}

/* may connection ci's session end now (its hand-offs follow later)? */
static bool
session_end_allowed(int ci)
{
	Model		m = M;
	int			save = nev;
	bool		ok;

	if (conns[ci].busy && (conns[ci].done || M.granted_ev[ci] >= 0))
		return false;			/* an answer to read first */
	m_session_end(&m, ci);
	ok = !hands_to_timed(&m);
	nev = save;
	return ok;
}

/*
 * step_session_end ends connection ci's session by pg_terminate_backend or
 * by disconnecting: its blocked call leaves the queue and its
 * session-bound locks pass on.  Then it connects again.
 */
static bool
step_session_end(int ci, bool terminate)
{
	Conn	   *c = &conns[ci];

	if (!session_end_allowed(ci))
		return false;
	trace("step %d: %s c%d (pid %d)%s%s", step_no,
		  terminate ? "pg_terminate_backend" : "disconnect", ci, c->pid,
		  c->busy ? ", waiting in " : "", c->busy ? c->what : "");
	if (terminate)
	{
		char		sql[100];
		PGresult   *r;

		snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", c->pid);
		r = obs_exec(sql);
		if (strcmp(PQgetvalue(r, 0, 0), "t") != 0)
			fail("pg_terminate_backend(%d) failed", c->pid);
		PQclear(r);
		if (c->busy)
		{
			Actual		a;

			wait_done(c, WAIT_S, c->what);
			actual_of(c, false, &a);
			/* (a timed call may have timed out just before) */
			if (a.kind != A_LOST &&
				!(a.kind == A_ERROR && strncmp(a.msg, "57P01", 5) == 0) &&
				!(a.kind == A_ERROR && a.err == E55P03 &&
				  c->g_tmode == T_MEDIUM &&
				  c->done_at - c->sent >= c->g_timeout - EPS_S))
				fail("c%d: %s returned %s after pg_terminate_backend", ci,
					 c->what, actual_describe(&a));
		}
	}
	conn_reset_call(c);
	PQfinish(c->pg);
	c->pg = NULL;
	m_session_end(&M, ci);
	st.session_ends++;
	/* the lock server learns of the session end after it happened: poll */
	sync_model(false, terminate ? "pg_terminate_backend" : "disconnect");
	conn_open(ci);
	return true;
}

/*
 * kept_grant: the views show that a blocked lockq_get that was cancelled
 * (or terminated) as the lock was handed to it kept the grant although
 * its client never got the token.  README: "A query cancel, ...,
 * pg_terminate_backend or a client that disconnects leaves no queue entry
 * either; if the grant raced with the cancel, it is released and passes on
 * at once."
 */
static void
kept_grant(int ci, int owner, const char *release, const char *how,
		   const char *answer)
{
	char		msg[2000];

	snprintf(msg, sizeof(msg),
			 "%s was answered %s when %s hit it as %s handed it the lock, "
			 "yet the views show the grant kept (not released and passed on)",
			 conns[ci].what, answer, how, release);
	st.kept_grants++;

	/*
	 * doc/sql.md: a cancel that lands after lockq_get has returned (while the
	 * rest of the statement runs) leaves a grant with an explicit owner to
	 * that owner, which gets it back by asking again; a session-bound one
	 * is released, as its statement failed.
	 */
	if (!IS_SESS(owner))
	{
		trace("   the explicit owner keeps the grant (documented)");
		return;
	}
	if (!known_kept_grant)
		fail("%s", msg);
	trace("KNOWN ISSUE: %s", msg);
	printf("not ok - seed %" PRIu64 ", step %d: %s # TODO a lockq_get cancelled "
		   "just after its grant keeps the grant\n", seed, step_no, msg);
}

/*
 * step_race sends a release that hands the lock to a waiting lockq_get,
 * and at the same moment cancels (or terminates) that waiter.  Either the
 * waiter gets the grant, or it leaves the queue and the lock goes to the
 * next; never both, never neither.  A terminated waiter with an owner of
 * its own may keep a grant it was answered just before it died.
 */
static bool
step_race(bool terminate)
{
	Op			op;
	int			l;
	int			w;
	int			ci;
	Conn	   *c;
	Model		cand[2];
	Model	   *mc[2];
	Expect		x;
	int			save = nev;
	char		d[1000];
	char		sql[100];
	PGresult   *r;
	Actual		a;
	int			k;
	int			ncand;

	if (any_timed(&M))
		return false;
	/* a lock with a waiting lockq_get at the head, whose holder can act */
	l = rnd(NLOCK);
	if (M.l[l].nq == 0 || M.l[l].q[0].conn < 0)
		return false;
	ci = M.l[l].q[0].conn;
	w = M.l[l].q[0].owner;
	c = &conns[ci];
	if (!c->busy || c->done || M.granted_ev[ci] >= 0)
		return false;
	op_init(&op, F_RELEASE, idle_conn());
	if (op.conn < 0)
		return false;
	op.lock = l;
	str_set(&op.lk, lock_ids[l], lock_disp[l], 0);
	if (!pick_holder(&op) || conns[op.conn].busy)
		return false;
	if (terminate && !session_end_allowed(ci))
		return false;

	op_describe(&op, d, sizeof(d));
	trace("step %d: at once: %s | %s c%d (%s)", step_no, d,
		  terminate ? "pg_terminate_backend" : "pg_cancel_backend", ci, c->what);
	c->cancel_sent = true;
	op_send(&op);
	snprintf(sql, sizeof(sql), terminate ? "SELECT pg_terminate_backend(%d)" :
			 "SELECT pg_cancel_backend(%d)", c->pid);
	if (!PQsendQuery(obs, sql))
		fail("observer: %s", PQerrorMessage(obs));
	wait_done(&conns[op.conn], WAIT_S, d);
	while ((r = PQgetResult(obs)) != NULL)
	{
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			fail("observer: %s: %s", sql, PQresultErrorMessage(r));
		PQclear(r);
	}
	wait_done(c, WAIT_S, c->what);
	actual_of(&conns[op.conn], true, &a);
	if (a.kind != A_TRUE)
		fail("%s returned %s; the holder's release must return true", d,
			 actual_describe(&a));
	st.results_checked++;
	conn_reset_call(&conns[op.conn]);

	if (!terminate)
	{
		st.cancel_races++;
		actual_of(c, false, &a);
		trace("   c%d %s -> %s", ci, c->what, actual_describe(&a));
		if (a.kind == A_TOKEN)
		{
			/* the grant won: the waiter holds the lock */
			m_apply(&M, &op, &x);
			if (M.granted_ev[ci] < 0 || M.l[l].holder != w)
				fail("model: the race's release did not hand the lock to c%d", ci);
			st.cancel_race_granted++;
			process_pending();
		}
		else if (a.kind == A_ERROR && a.err == E57014)
		{
			/*
			 * The cancel won, or the grant was undone: the next one has it
			 * (and its answer may be here already).  The views tell that
			 * from the grant kept although its call was cancelled.
			 */
			cand[0] = M;
			q_remove(&cand[0].l[l], 0);
			m_apply(&cand[0], &op, &x);
			cand[1] = M;
			m_apply(&cand[1], &op, &x);
			cand[1].granted_ev[ci] = -1;
			nev = save;
			mc[0] = &cand[0];
			mc[1] = &cand[1];
			k = observer_sync(mc, 2, false, "a release racing with pg_cancel_backend");
			st.cancels++;
			st.results_checked++;
			conn_reset_call(c);
			if (k == 0)
			{
				q_remove(&M.l[l], 0);
				m_apply(&M, &op, &x);
			}
			else
			{
				kept_grant(ci, w, d, "pg_cancel_backend", "57014");
				m_apply(&M, &op, &x);
				M.granted_ev[ci] = -1;
			}
			process_pending();
		}
		else
			fail("c%d: %s returned %s when cancelled as the lock was handed to it; "
				 "expected its token or 57014", ci, c->what, actual_describe(&a));
		pump(0);
		process_pending();
		sync_model(false, "a release racing with pg_cancel_backend");
		return true;
	}

	/*
	 * Terminated: the session ended, with or without the grant.  If the
	 * token reached the client, the waiter had the grant (and keeps it if
	 * it has an owner of its own); otherwise either may have happened.
	 */
	st.term_races++;
	actual_of(c, false, &a);
	trace("   c%d %s -> %s", ci, c->what, actual_describe(&a));
	if (a.kind != A_TOKEN && a.kind != A_LOST &&
		!(a.kind == A_ERROR && strncmp(a.msg, "57P01", 5) == 0))
		fail("c%d: %s returned %s when terminated as the lock was handed to it",
			 ci, c->what, actual_describe(&a));
	{
		int64_t		tok = a.kind == A_TOKEN ? a.token : 0;
		bool		kept_possible = !IS_SESS(w);
		bool		left_possible = tok == 0 || IS_SESS(w);
		int			kinds[2];
		int			ev;
		int			pid = c->pid;

		conn_reset_call(c);
		PQfinish(c->pg);
		c->pg = NULL;
		/* a grant it never picked up shows until its end is applied */
		settle_session_end(pid);
		ncand = 0;
		if (left_possible)
		{
			cand[ncand] = M;
			m_session_end(&cand[ncand], ci);
			m_apply(&cand[ncand], &op, &x);
			mc[ncand] = &cand[ncand];
			kinds[ncand++] = 0;
			nev = save;
		}
		if (kept_possible)
		{
			cand[ncand] = M;
			m_apply(&cand[ncand], &op, &x);
			cand[ncand].granted_ev[ci] = -1;
			m_session_end(&cand[ncand], ci);
			mc[ncand] = &cand[ncand];
			kinds[ncand++] = 1;
			nev = save;
		}
		k = kinds[observer_sync(mc, ncand, false,
								"a release racing with pg_terminate_backend")];
		trace("   %s", k == 0 ? "the waiter left the queue; the lock went on" :
			  "the waiter's owner kept the grant");
		if (k == 1 && !tok)
			kept_grant(ci, w, d, "pg_terminate_backend", actual_describe(&a));
		if (k == 0 && tok)
		{
			/* its session-bound grant ended with the session */
			m_apply(&M, &op, &x);
			ev = M.granted_ev[ci];
			learn_token(ev, tok, c->what);
			M.granted_ev[ci] = -1;
			m_session_end(&M, ci);
		}
		else if (k == 0)
		{
			m_session_end(&M, ci);
			m_apply(&M, &op, &x);
		}
		else
		{
			m_apply(&M, &op, &x);
			ev = M.granted_ev[ci];
			if (tok)
				learn_token(ev, tok, c->what);
			M.granted_ev[ci] = -1;
			m_session_end(&M, ci);
		}
	}
	st.session_ends++;
	sync_model(false, "a release racing with pg_terminate_backend");
	conn_open(ci);
	return true;
}

/*
 * step_deadline_race releases a lock, from its holder with an owner of its
 * own, just around the deadline of the timed lockq_get at the head of its
 * queue: in the lock server the hand-off races with the timeout.  If the
 * release returned before the deadline could have passed, the waiter must
 * have the lock; otherwise its answer says which came first, and then the
 * lock must be with it or with the next one.
 */
static bool
step_deadline_race(void)
{
	int			l = rnd(NLOCK);
	int			ci;
	Op			op;
	double		target;

	if (M.l[l].nq == 0 || M.l[l].q[0].conn < 0)
		return false;
	ci = M.l[l].q[0].conn;
	if (conns[ci].g_tmode != T_MEDIUM || !conns[ci].busy || conns[ci].done ||
		M.granted_ev[ci] >= 0)
		return false;
	op_init(&op, F_RELEASE, idle_conn());
	if (op.conn < 0)
		return false;
	op.lock = l;
	str_set(&op.lk, lock_ids[l], lock_disp[l], 0);
	if (!pick_holder(&op) || op.ow.null)
		return false;
	/* from 4 ms before the deadline to 2 ms after it */
	target = conns[ci].sent + conns[ci].g_timeout + (rnd(7) - 4) / 1000.0;
	if (target - now_s() > 0.5)
		return false;
	trace("step %d: release %s near the deadline of c%d (%s)", step_no,
		  lock_disp[l], ci, conns[ci].what);
	while (now_s() < target)
		pump(1);
	st.deadline_races++;
	step_call(&op);
	return true;
}

/*
 * step_random takes one random step.  Returns false when nothing could be
 * done (every session waits, or the call chosen may not be made now).
 */
static bool
step_random(void)
{
	int			busy = 0;
	int			ci;
	int			w[15];
	int			total = 0;
	int			r;
	int			kind;
	Op			op;
	int			c;

	for (ci = 0; ci < NCONN; ci++)
		if (conns[ci].busy)
			busy++;

	/* weights: get, try, release, renew, holds, enqueue, heartbeat, cancel,
	 * pg_cancel, terminate, disconnect, pair, cancel race, terminate race,
	 * deadline race */
	w[0] = 160 * (NCONN - busy) / NCONN;
	w[1] = 110;
	w[2] = 150;
	w[3] = 50;
	w[4] = 60;
	w[5] = 80;
	w[6] = 40;
	w[7] = 40;
	w[8] = 15 + 15 * busy;
	w[9] = 10;
	w[10] = 10;
	w[11] = 90;
	w[12] = 25;
	w[13] = 8;
	w[14] = 40;
	for (kind = 0; kind < 15; kind++)
		total += w[kind];
	r = rnd(total);
	for (kind = 0; kind < 15 && r >= w[kind]; kind++)
		r -= w[kind];

	switch (kind)
	{
		case 8:
			return step_pg_cancel(-1);
		case 9:
		case 10:
			return step_session_end(rnd(NCONN), kind == 9);
		case 11:
			return step_pair();
		case 12:
		case 13:
			return step_race(kind == 13);
		case 14:
			return step_deadline_race();
		default:
			break;
	}
	c = idle_conn();
	if (c < 0)
		return false;
	gen_op(&op, (Fn) kind, c, true);
	if (!op_allowed(&op))
		return false;
	step_call(&op);
	return true;
}

/*
 * drain ends the run in order, every step checked as before: the waiting
 * calls are cancelled, the client-side waiters withdraw, the holders
 * release; then nothing may be left.
 */
static void
drain(void)
{
	double		deadline = now_s() + 60;

	for (;;)
	{
		int			ci;
		int			l;
		int			i;
		bool		busy = false;
		bool		acted = false;
		Op			op;

		if (now_s() > deadline)
			fail("could not drain the locks within 60 s");
		step_begin();
		check_overdue();
		for (ci = 0; ci < NCONN; ci++)
			busy |= conns[ci].busy;
		if (busy)
		{
			ci = pick_waiting_conn();
			if (ci >= 0)
				(void) step_pg_cancel(ci);
			else
				pump(20);		/* a timeout or an answer on its way */
			continue;
		}
		for (l = 0; l < NLOCK && !acted; l++)
			for (i = 0; i < M.l[l].nq && !acted; i++)
				if (M.l[l].q[i].conn < 0)
				{
					op_init(&op, F_CANCEL, 0);
					op.lock = l;
					str_set(&op.lk, lock_ids[l], lock_disp[l], 0);
					owner_explicit(&op, M.l[l].q[i].owner);
					step_call(&op);
					acted = true;
				}
		for (l = 0; l < NLOCK && !acted; l++)
			if (M.l[l].holder != NO_OWNER)
			{
				op_init(&op, F_RELEASE, 0);
				op.lock = l;
				str_set(&op.lk, lock_ids[l], lock_disp[l], 0);
				if (!pick_holder(&op))
					fail("drain: the holder of %s cannot act", lock_disp[l]);
				step_call(&op);
				acted = true;
			}
		if (!acted)
			return;
	}
}

/* ---------------------------------------------------------------------
 * main
 * --------------------------------------------------------------------- */

static void
init_strings(void)
{
	int			i;

	/* 255 bytes: the longest valid lock id and owner */
	for (i = 0; i < 127; i++)
		memcpy(long_lock + 2 * i, "\xc5\x82", 2);	/* l with stroke */
	long_lock[254] = 'k';
	long_lock[255] = '\0';
	for (i = 0; i < 127; i++)
		memcpy(long_owner + 2 * i, "\xc3\xb6", 2);	/* o umlaut */
	long_owner[254] = 'x';
	long_owner[255] = '\0';
	/* 256 bytes: one too many */
	memset(x256, 'x', 256);
	x256[256] = '\0';
	memset(o256, 'o', 256);
	o256[256] = '\0';
	for (i = 0; i < 128; i++)
		memcpy(e128 + 2 * i, "\xc3\xa9", 2);	/* e acute */
	e128[256] = '\0';
	memset(c63, 'c', 63);
	c63[63] = '\0';
	memset(c64, 'c', 64);
	c64[64] = '\0';

	lock_ids[0] = "L1";
	lock_disp[0] = "'L1'";
	lock_ids[1] = "lock:'\xce\xb2' two";
	lock_disp[1] = "'lock:''beta'' two'";
	lock_ids[2] = long_lock;
	lock_disp[2] = "<255-byte lock id>";

	owner_names[0] = "alpha";
	owner_disp[0] = "'alpha'";
	owner_names[1] = "b'eta \"q\" \\";
	owner_disp[1] = "'b''eta \"q\" \\'";
	owner_names[2] = long_owner;
	owner_disp[2] = "<255-byte owner>";
	owner_names[3] = "session";
	owner_disp[3] = "'session'";
	owner_names[4] = " session:lookalike";
	owner_disp[4] = "' session:lookalike'";
}

static void
check_server(void)
{
	PGresult   *r;

	r = obs_exec("SELECT current_setting('lockq.max_ttl'), "
				 "current_setting('lockq.waiter_timeout')::interval >= '1 hour', "
				 "(SELECT count(*) FROM lockq_locks), (SELECT count(*) FROM lockq_waiters)");
	if (strcmp(PQgetvalue(r, 0, 0), "1d") != 0)
		fail("lockq.max_ttl must be 1d (the default), not %s", PQgetvalue(r, 0, 0));
	if (strcmp(PQgetvalue(r, 0, 1), "t") != 0)
		fail("lockq.waiter_timeout must be at least 1 hour");
	if (strcmp(PQgetvalue(r, 0, 2), "0") != 0 || strcmp(PQgetvalue(r, 0, 3), "0") != 0)
		fail("lockq is in use: %s locks, %s waiters", PQgetvalue(r, 0, 2),
			 PQgetvalue(r, 0, 3));
	PQclear(r);
}

static void
usage(void)
{
	fprintf(stderr, "usage: lockq_model [-k] [-s SEED] [-n STEPS] [-d SECONDS] [-t TRACEFILE] CONNINFO\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int			opt;
	long		nsteps = 3000;
	double		budget = 40;
	int			i;
	int			idle_loops = 0;
	double		elapsed;

	seed = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 20);
	while ((opt = getopt(argc, argv, "ks:n:d:t:")) != -1)
	{
		switch (opt)
		{
			case 'k':
				known_kept_grant = true;
				break;
			case 's':
				seed = strtoull(optarg, NULL, 10);
				break;
			case 'n':
				nsteps = atol(optarg);
				break;
			case 'd':
				budget = atof(optarg);
				break;
			case 't':
				trace_file = fopen(optarg, "w");
				if (!trace_file)
				{
					perror(optarg);
					exit(2);
				}
				break;
			default:
				usage();
		}
	}
	if (optind != argc - 1)
		usage();
	conninfo = argv[optind];
	rng_state = seed;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# seed %" PRIu64 "\n", seed);
	t_start = now_s();
	trace("seed %" PRIu64 ", %ld steps, %.0f s at most", seed, nsteps, budget);

	init_strings();
	model_init(&M);
	obs = PQconnectdb(conninfo);
	if (PQstatus(obs) != CONNECTION_OK)
		fail("cannot connect: %s", PQerrorMessage(obs));
	check_server();
	for (i = 0; i < NCONN; i++)
		conn_open(i);

	while (step_no < nsteps && now_s() - t_start < budget)
	{
		int			tries;

		step_begin();
		check_overdue();
		for (tries = 0; tries < 20; tries++)
			if (step_random())
				break;
		if (tries == 20)
		{
			/* nothing to do: let timeouts and answers arrive */
			step_no--;
			if (++idle_loops % 50 == 0)
				trace("(idle)");
			pump(5);
		}
	}
	elapsed = now_s() - t_start;
	printf("# %d steps in %.1f s (%ld calls); draining\n", step_no, elapsed, st.calls);
	drain();
	sync_model(true, "the end");

	printf("ok - %d random steps, %ld calls: every result was the model's (%ld results, %ld of them errors with the documented SQLSTATE)\n",
		   step_no, st.calls, st.results_checked, st.errors_checked);
	printf("ok - the views matched the model after every step (%ld snapshots, %ld steps needed polling)\n",
		   st.snapshots, st.polls);
	printf("ok - %ld tokens, each larger than every token of an earlier grant\n",
		   st.tokens);
	printf("ok - %ld blocked lockq_get calls were handed the lock, each at the head of its queue\n",
		   st.handoffs);
	printf("ok - %ld lockq_get calls queued; %ld re-entrant calls returned the holder's token; "
		   "%ld x 55006, %ld x 55000\n",
		   st.queued, st.reentrant, st.e55006, st.e55000);
	printf("ok - %ld timeouts while others went on and %ld short ones, none early; "
		   "%ld releases near a waiter's deadline, %ld of them too close to call "
		   "(%ld granted, the others passed on to the next)\n",
		   st.timeouts, st.short_timeouts, st.deadline_races, st.ambiguous,
		   st.ambiguous_granted);
	printf("ok - %ld pg_cancel_backend, %ld session ends, %ld release/cancel races "
		   "(%ld granted), %ld release/terminate races\n",
		   st.cancels, st.session_ends, st.cancel_races, st.cancel_race_granted,
		   st.term_races);
	printf("ok - %ld pairs of calls at once matched one of their orders (%ld matched both)\n",
		   st.pairs, st.pairs_both);
	printf("ok - nothing left held or queued at the end\n");
	if (st.double_rows)
		printf("# lockq_locks showed two rows for one lock %ld times while a step was settling\n",
			   st.double_rows);

	/*
	 * A run that exercised too little proves too little: each kind of
	 * event must have happened at least about a quarter as often as it
	 * usually does (per 3000 steps, scaled to the steps taken).
	 */
	if (step_no >= 1000)
	{
		double		f = step_no / 3000.0;
		bool		cov = true;

#define AT_LEAST(n, per3000) (cov &= (n) >= (long) ((per3000) * f))
		AT_LEAST(st.handoffs, 15);
		AT_LEAST(st.queued, 45);
		AT_LEAST(st.reentrant, 50);
		AT_LEAST(st.e55006, 4);
		AT_LEAST(st.e55000, 12);
		AT_LEAST(st.errors_checked, 130);
		AT_LEAST(st.timeouts + st.short_timeouts, 7);
		AT_LEAST(st.cancels, 17);
		AT_LEAST(st.session_ends, 15);
		AT_LEAST(st.pairs, 60);
		AT_LEAST(st.nulls, 120);
		AT_LEAST(st.falses, 200);
		AT_LEAST(st.trues, 130);
#undef AT_LEAST
		if (step_no >= 2500)
			cov &= st.cancel_races >= 1;

		printf("%s - coverage: hand-offs, queueing, re-entrancy, 55006, 55000, bad input, "
			   "timeouts, cancels, session ends, calls at once, races all happened\n",
			   cov ? "ok" : "not ok");
		if (!cov)
			return 1;
	}

	for (i = 0; i < NCONN; i++)
		PQfinish(conns[i].pg);
	PQfinish(obs);
	if (trace_file)
		fclose(trace_file);
	return 0;
}

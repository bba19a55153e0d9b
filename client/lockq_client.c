/*-------------------------------------------------------------------------
 *
 * lockq_client.c
 *		liblockq: a thread-safe libpq client for lockq.
 *
 * Each lockqc_conn has:
 *	- one libpq connection, used under conn->mu by every thread;
 *	- an I/O thread that waits on that socket and on a self-pipe, and does
 *	  the periodic work: NOTIFY delivery, heartbeats of queued waits,
 *	  renewals of held leases (at a third of the ttl), reconnection;
 *	- a timer thread that watches the local lease deadlines and fires the
 *	  lost-lease callbacks.  It never touches libpq, so a stuck connection
 *	  cannot delay a callback past the deadline.
 *
 * A wait is queued with lockq_enqueue on the connection's own LISTEN
 * channel.  A notification is only a hint: the I/O thread then asks the
 * server (lockq_heartbeat), so a forged NOTIFY grants nothing.  The local
 * lease deadline is always counted from the moment the request that set
 * the lease was sent, on CLOCK_MONOTONIC, so it never ends after the
 * server's lease.
 *
 * Lock order: conn->mu before conn->tmu; the timer thread only takes tmu.
 * Handles are reference-counted so that a lost-lease callback racing with
 * lockqc_unlock never sees a freed handle.  Every SQL statement is
 * parameterised, names the extension's schema, and runs with an empty
 * search_path.
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		client/lockq_client.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "lockq_client_int.h"

#define LQC_DEFAULT_TTL_MS			30000
#define LQC_DEFAULT_HEARTBEAT_MS	10000
#define LQC_MAX_NAME				255
#define LQC_ERRLEN					1024
#define LQC_MAX_RECONNECT_DELAY_MS	1000

/* Handle states (atomic). */
enum
{
	LQC_WAITING,				/* queued, not granted yet */
	LQC_HELD,					/* granted; lease valid until deadline */
	LQC_LOST,					/* the lease is gone */
	LQC_FAILED,					/* the wait failed (connection) */
	LQC_DONE					/* unlocked / withdrawn */
};

/* The statements we send; %s is the extension's schema. */
enum
{
	SQL_ENQUEUE,
	SQL_HEARTBEAT,
	SQL_CANCEL,
	SQL_TRY,
	SQL_RELEASE,
	SQL_RENEW,
	SQL_HOLDS,
	SQL_COUNT
};

static const char *const lqc_sql_fmt[SQL_COUNT] = {
	[SQL_ENQUEUE] = "SELECT %s.lockq_enqueue($1, $2, $3::pg_catalog.interval, $4, $5::pg_catalog.interval)",
	[SQL_HEARTBEAT] = "SELECT %s.lockq_heartbeat($1, $2)",
	[SQL_CANCEL] = "SELECT %s.lockq_cancel($1, $2)",
	[SQL_TRY] = "SELECT %s.lockq_try($1, $2, $3::pg_catalog.interval)",
	[SQL_RELEASE] = "SELECT %s.lockq_release($1, $2, $3::pg_catalog.int8)",
	[SQL_RENEW] = "SELECT %s.lockq_renew($1, $2, $3::pg_catalog.int8, $4::pg_catalog.interval)",
	[SQL_HOLDS] = "SELECT %s.lockq_holds($1, $2::pg_catalog.int8)",
};

struct lockqc_handle
{
	lockqc_conn *c;
	char	   *lock_id;
	char	   *owner;
	int64_t		token;
	int64_t		ttl_ms;
	int64_t		heartbeat_ms;
	bool		auto_renew;
	lockqc_lost_cb on_lost;
	void	   *on_lost_arg;

	_Atomic int state;
	_Atomic int64_t deadline;	/* local lease end, monotonic ms */
	_Atomic int refs;

	/* under c->mu */
	pthread_cond_t cv;			/* wakes the lockqc_lock waiting on it */
	int64_t		next_renew;
	int64_t		next_heartbeat;
	bool		notified;		/* a grant/dropped notice came: ask now */
	bool		verify;			/* a "lost" notice came: ask the server */
	lockqc_handle *next;
	lockqc_handle *prev;

	/* under c->tmu */
	bool		armed;
	lockqc_handle *tnext;
	lockqc_handle *tprev;
	lockqc_handle *tfire;		/* timer thread's local list */
};

struct lockqc_conn
{
	pthread_mutex_t mu;			/* libpq connection, handle list */
	_Atomic bool wake_all;		/* lockqc_wakeup: every waiting lockqc_lock
								 * re-checks its cancel flag */
	PGconn	   *pg;
	char	   *conninfo;
	bool		broken;
	int64_t		broken_since;
	int64_t		next_reconnect;
	int64_t		reconnect_delay;
	char		channel[64];
	char	   *sql[SQL_COUNT];
	char		sqlstate[6];
	char		errmsg[LQC_ERRLEN];
	lockqc_handle *handles;
	bool		stop;

	int			wake[2];		/* self-pipe, read by the I/O thread */
	pthread_t	io_thread;

	pthread_mutex_t tmu;		/* the timer thread */
	pthread_cond_t tcv;
	bool		tstop;
	lockqc_handle *armed;
	pthread_t	timer_thread;
};

static __thread char lqc_tls_err[LQC_ERRLEN];
static __thread const lockqc_conn *lqc_tls_conn;

static bool lqc_reconnect(lockqc_conn *c);

static int64_t
lqc_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
lqc_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/*
 * lqc_error records an error for c: in the calling thread (what
 * lockqc_errmsg returns there) and on the connection.
 */
static void
lqc_error(lockqc_conn *c, const char *fmt,...)
{
	va_list		ap;
	size_t		len;

	va_start(ap, fmt);
	vsnprintf(lqc_tls_err, sizeof(lqc_tls_err), fmt, ap);
	va_end(ap);
	len = strlen(lqc_tls_err);
	while (len > 0 && (lqc_tls_err[len - 1] == '\n' || lqc_tls_err[len - 1] == ' '))
		lqc_tls_err[--len] = '\0';
	lqc_tls_conn = c;
	if (c != NULL)
		snprintf(c->errmsg, sizeof(c->errmsg), "%s", lqc_tls_err);
}

const char *
lockqc_errmsg(const lockqc_conn *c)
{
	if (c != NULL && lqc_tls_conn == c)
		return lqc_tls_err;
	return c != NULL ? c->errmsg : lqc_tls_err;
}

const char *
lockqc_status_str(int status)
{
	switch (status)
	{
		case LOCKQC_OK:
			return "ok";
		case LOCKQC_TIMEOUT:
			return "timeout";
		case LOCKQC_NOT_AVAILABLE:
			return "not available";
		case LOCKQC_LOST:
			return "lost";
		case LOCKQC_CANCELLED:
			return "cancelled";
		case LOCKQC_ERROR:
			return "error";
		case LOCKQC_EINVAL:
			return "invalid argument";
	}
	return "unknown";
}

void
lockqc_opts_init(lockqc_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->ttl_ms = LQC_DEFAULT_TTL_MS;
	opts->timeout_ms = -1;
	opts->heartbeat_ms = LQC_DEFAULT_HEARTBEAT_MS;
	opts->auto_renew = true;
}

/*
 * lqc_random_hex writes 16 hex digits from the kernel's random source.
 */
static void
lqc_random_hex(char *buf)
{
	uint64_t	r = 0;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = ((uint64_t) lqc_now() << 20) ^ (uint64_t) getpid() ^ (uint64_t) (uintptr_t) buf;
	snprintf(buf, 17, "%016llx", (unsigned long long) r);
}

/*
 * lqc_poke wakes the I/O thread.  Async-signal-safe.
 */
static void
lqc_poke(lockqc_conn *c)
{
	ssize_t		rc;

	do
		rc = write(c->wake[1], "x", 1);
	while (rc < 0 && errno == EINTR);
}

void
lockqc_wakeup(lockqc_conn *c)
{
	if (c != NULL)
	{
		atomic_store(&c->wake_all, true);
		lqc_poke(c);
	}
}

static void
lqc_drain_pipe(lockqc_conn *c)
{
	char		buf[64];

	while (read(c->wake[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * Parsing.
 */
int
lockqc_parse_duration(const char *s, int64_t *ms)
{
	double		value = 0;
	double		frac = 0.1;
	bool		digits = false;
	double		unit;
	const char *p = s;

	if (s == NULL)
		return -1;
	while (*p >= '0' && *p <= '9')
	{
		value = value * 10 + (*p++ - '0');
		digits = true;
		if (value > 1e12)
			return -1;
	}
	if (*p == '.')
	{
		p++;
		while (*p >= '0' && *p <= '9')
		{
			value += (*p++ - '0') * frac;
			frac /= 10;
			digits = true;
		}
	}
	if (!digits)
		return -1;
	if (strcmp(p, "ms") == 0)
		unit = 1;
	else if (strcmp(p, "s") == 0 || *p == '\0')
		unit = 1000;
	else if (strcmp(p, "m") == 0)
		unit = 60 * 1000;
	else if (strcmp(p, "h") == 0)
		unit = 3600 * 1000;
	else
		return -1;
	value *= unit;
	/* at most ten years */
	if (value > 10.0 * 366 * 24 * 3600 * 1000)
		return -1;
	*ms = (int64_t) (value + 0.5);
	return 0;
}

/*
 * lqc_parse_uint reads a decimal of at least one digit at *pp that fits in
 * an int64_t and advances *pp past it; -1 when there is none or it is too
 * large.
 */
static int
lqc_parse_uint(const char **pp, int64_t *out)
{
	const char *p = *pp;
	int64_t		v = 0;

	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9')
	{
		int			d = *p++ - '0';

		/* v * 10 + d <= INT64_MAX, exactly (up to INT64_MAX itself) */
		if (v > (INT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*pp = p;
	*out = v;
	return 0;
}

int
lockqc_parse_notice(const char *payload, lockqc_notice *out)
{
	const char *p = payload;
	int64_t		len;
	size_t		rest;

	if (payload == NULL)
		return -1;
	if (strncmp(p, "grant ", 6) == 0)
	{
		out->event = LOCKQC_EV_GRANT;
		p += 6;
	}
	else if (strncmp(p, "lost ", 5) == 0)
	{
		out->event = LOCKQC_EV_LOST;
		p += 5;
	}
	else if (strncmp(p, "dropped ", 8) == 0)
	{
		out->event = LOCKQC_EV_DROPPED;
		p += 8;
	}
	else
		return -1;

	if (lqc_parse_uint(&p, &out->token) != 0 || *p++ != ' ')
		return -1;
	if (lqc_parse_uint(&p, &len) != 0 || *p++ != ' ')
		return -1;
	if (len < 1 || len > LQC_MAX_NAME)
		return -1;
	rest = strlen(p);
	if ((size_t) len + 2 > rest || p[len] != ' ')
		return -1;
	out->lock_id = p;
	out->lock_len = (size_t) len;
	out->owner = p + len + 1;
	out->owner_len = rest - (size_t) len - 1;
	if (out->owner_len > LQC_MAX_NAME)
		return -1;
	return 0;
}

/*
 * Handles.
 */
static void
lqc_unref(lockqc_handle *h)
{
	if (atomic_fetch_sub(&h->refs, 1) == 1)
	{
		pthread_cond_destroy(&h->cv);
		free(h->lock_id);
		free(h->owner);
		free(h);
	}
}

static void
lqc_link(lockqc_conn *c, lockqc_handle *h)
{
	h->prev = NULL;
	h->next = c->handles;
	if (c->handles)
		c->handles->prev = h;
	c->handles = h;
}

static void
lqc_unlink(lockqc_conn *c, lockqc_handle *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else if (c->handles == h)
		c->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->next = h->prev = NULL;
}

/* Timer list; tmu held. */
static void
lqc_arm_locked(lockqc_conn *c, lockqc_handle *h)
{
	if (h->armed)
		return;
	h->tprev = NULL;
	h->tnext = c->armed;
	if (c->armed)
		c->armed->tprev = h;
	c->armed = h;
	h->armed = true;
}

static void
lqc_disarm_locked(lockqc_conn *c, lockqc_handle *h)
{
	if (!h->armed)
		return;
	if (h->tprev)
		h->tprev->tnext = h->tnext;
	else
		c->armed = h->tnext;
	if (h->tnext)
		h->tnext->tprev = h->tprev;
	h->tnext = h->tprev = NULL;
	h->armed = false;
}

static void
lqc_disarm(lockqc_conn *c, lockqc_handle *h)
{
	pthread_mutex_lock(&c->tmu);
	lqc_disarm_locked(c, h);
	pthread_mutex_unlock(&c->tmu);
}

static void lqc_init_cond(pthread_cond_t *cv);

/*
 * lqc_new_handle builds a handle from the options; NULL with an error for
 * bad arguments.
 */
static lockqc_handle *
lqc_new_handle(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts)
{
	lockqc_opts defaults;
	lockqc_handle *h;
	char		owner[LQC_MAX_NAME + 1];

	if (opts == NULL)
	{
		lockqc_opts_init(&defaults);
		opts = &defaults;
	}
	if (lock_id == NULL || lock_id[0] == '\0' || strlen(lock_id) > LQC_MAX_NAME)
	{
		lqc_error(c, "lock id must be 1 to %d bytes", LQC_MAX_NAME);
		return NULL;
	}
	if (opts->owner != NULL &&
		(opts->owner[0] == '\0' || strlen(opts->owner) > LQC_MAX_NAME))
	{
		lqc_error(c, "owner must be 1 to %d bytes", LQC_MAX_NAME);
		return NULL;
	}
	if (opts->owner == NULL)
	{
		char		host[65] = "";
		char		rnd[17];

		(void) gethostname(host, sizeof(host) - 1);
		lqc_random_hex(rnd);
		snprintf(owner, sizeof(owner), "%s:%d:%ld:%s", host, (int) getpid(),
				 (long) syscall(SYS_gettid), rnd);
	}
	else
		snprintf(owner, sizeof(owner), "%s", opts->owner);

	h = calloc(1, sizeof(*h));
	if (h == NULL)
	{
		lqc_error(c, "out of memory");
		return NULL;
	}
	h->c = c;
	h->lock_id = strdup(lock_id);
	h->owner = strdup(owner);
	if (h->lock_id == NULL || h->owner == NULL)
	{
		free(h->lock_id);
		free(h->owner);
		free(h);
		lqc_error(c, "out of memory");
		return NULL;
	}
	h->ttl_ms = opts->ttl_ms > 0 ? opts->ttl_ms : LQC_DEFAULT_TTL_MS;
	h->heartbeat_ms = opts->heartbeat_ms > 0 ? opts->heartbeat_ms : LQC_DEFAULT_HEARTBEAT_MS;
	h->auto_renew = opts->auto_renew;
	h->on_lost = opts->on_lost;
	h->on_lost_arg = opts->on_lost_arg;
	lqc_init_cond(&h->cv);
	atomic_init(&h->state, LQC_WAITING);
	atomic_init(&h->deadline, 0);
	atomic_init(&h->refs, 1);
	return h;
}

/*
 * Connection.
 */
static void
lqc_ignore_notice(void *arg, const char *message)
{
}

static bool
lqc_simple(lockqc_conn *c, const char *sql, ExecStatusType want)
{
	PGresult   *res = PQexecParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
	bool		ok = (res != NULL && PQresultStatus(res) == want);

	if (!ok)
		lqc_error(c, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
	PQclear(res);
	return ok;
}

/*
 * lqc_setup prepares a fresh connection: an empty search_path, the
 * statements naming the extension's schema, LISTEN on our channel.
 */
static bool
lqc_setup(lockqc_conn *c)
{
	PGresult   *res;
	char	   *schema;
	char	   *chan;
	char	   *listen;
	int			i;

	PQsetNoticeProcessor(c->pg, lqc_ignore_notice, NULL);
	if (!lqc_simple(c, "SELECT pg_catalog.set_config('search_path', '', false)",
					PGRES_TUPLES_OK))
		return false;

	res = PQexecParams(c->pg,
					   "SELECT n.nspname FROM pg_catalog.pg_extension e"
					   " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
					   " WHERE e.extname OPERATOR(pg_catalog.=) 'lockq'",
					   0, NULL, NULL, NULL, NULL, 0);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		lqc_error(c, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
		PQclear(res);
		return false;
	}
	if (PQntuples(res) != 1)
	{
		lqc_error(c, "the lockq extension is not installed in this database");
		PQclear(res);
		return false;
	}
	schema = PQescapeIdentifier(c->pg, PQgetvalue(res, 0, 0),
								strlen(PQgetvalue(res, 0, 0)));
	PQclear(res);
	if (schema == NULL)
	{
		lqc_error(c, "%s", PQerrorMessage(c->pg));
		return false;
	}
	for (i = 0; i < SQL_COUNT; i++)
	{
		free(c->sql[i]);
		if (asprintf(&c->sql[i], lqc_sql_fmt[i], schema) < 0)
			c->sql[i] = NULL;
	}
	PQfreemem(schema);
	for (i = 0; i < SQL_COUNT; i++)
	{
		if (c->sql[i] == NULL)
		{
			lqc_error(c, "out of memory");
			return false;
		}
	}

	chan = PQescapeIdentifier(c->pg, c->channel, strlen(c->channel));
	if (chan == NULL || asprintf(&listen, "LISTEN %s", chan) < 0)
	{
		PQfreemem(chan);
		lqc_error(c, "out of memory");
		return false;
	}
	PQfreemem(chan);
	i = lqc_simple(c, listen, PGRES_COMMAND_OK);
	free(listen);
	return i;
}

static void
lqc_mark_broken(lockqc_conn *c)
{
	if (!c->broken)
	{
		c->broken = true;
		c->broken_since = lqc_now();
		c->next_reconnect = 0;
		c->reconnect_delay = 50;
	}
}

/*
 * lqc_reconnect replaces a broken connection (c->mu held).  With a
 * multi-host conninfo and target_session_attrs=read-write it finds the new
 * primary.  Afterwards queued waits heartbeat at once (keeping their place
 * if the server still has them) and held leases are renewed or checked.
 */
static bool
lqc_reconnect(lockqc_conn *c)
{
	PGconn	   *pg;
	lockqc_handle *h;

	if (c->pg != NULL)
	{
		PQfinish(c->pg);
		c->pg = NULL;
	}
	pg = PQconnectdb(c->conninfo);
	if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
	{
		lqc_error(c, "could not reconnect: %s", pg ? PQerrorMessage(pg) : "out of memory");
		PQfinish(pg);
		c->next_reconnect = lqc_now() + c->reconnect_delay;
		c->reconnect_delay = lqc_min(c->reconnect_delay * 2, LQC_MAX_RECONNECT_DELAY_MS);
		return false;
	}
	c->pg = pg;
	if (!lqc_setup(c))
	{
		PQfinish(c->pg);
		c->pg = NULL;
		c->next_reconnect = lqc_now() + c->reconnect_delay;
		return false;
	}
	c->broken = false;
	for (h = c->handles; h != NULL; h = h->next)
	{
		if (atomic_load(&h->state) == LQC_WAITING)
			h->next_heartbeat = 0;
		else if (atomic_load(&h->state) == LQC_HELD)
		{
			if (h->auto_renew)
				h->next_renew = 0;
			else
				h->verify = true;
		}
	}
	lqc_poke(c);
	return true;
}

static lockqc_handle *
lqc_find(lockqc_conn *c, const lockqc_notice *n)
{
	lockqc_handle *h;

	for (h = c->handles; h != NULL; h = h->next)
	{
		if (strlen(h->lock_id) == n->lock_len &&
			memcmp(h->lock_id, n->lock_id, n->lock_len) == 0 &&
			strlen(h->owner) == n->owner_len &&
			memcmp(h->owner, n->owner, n->owner_len) == 0)
			return h;
	}
	return NULL;
}

/*
 * lqc_dispatch takes the notifications that arrived and marks the handles
 * they concern for the I/O thread, which then asks the server (c->mu held).
 */
static void
lqc_dispatch(lockqc_conn *c)
{
	PGnotify   *n;
	bool		poke = false;

	if (c->pg == NULL)
		return;
	(void) PQconsumeInput(c->pg);
	while ((n = PQnotifies(c->pg)) != NULL)
	{
		lockqc_notice nt;
		lockqc_handle *h;

		if (strcmp(n->relname, c->channel) == 0 &&
			lockqc_parse_notice(n->extra, &nt) == 0 &&
			(h = lqc_find(c, &nt)) != NULL)
		{
			int			st = atomic_load(&h->state);

			if (st == LQC_WAITING &&
				(nt.event == LOCKQC_EV_GRANT || nt.event == LOCKQC_EV_DROPPED))
			{
				h->next_heartbeat = 0;
				h->notified = true;
				poke = true;
			}
			else if (st == LQC_HELD && nt.event == LOCKQC_EV_LOST)
			{
				h->verify = true;
				poke = true;
			}
		}
		PQfreemem(n);
	}
	if (poke)
		lqc_poke(c);
}

/*
 * lqc_exec runs one of our statements with text parameters (c->mu held).
 * Returns a one-row result the caller clears, or NULL with the error and
 * c->sqlstate set.  A broken connection is re-established once and the
 * statement repeated: every statement we send may safely be repeated.
 */
static PGresult *
lqc_exec(lockqc_conn *c, int which, int nparams, const char *const *params)
{
	int			attempt;

	c->sqlstate[0] = '\0';
	for (attempt = 0; attempt < 2; attempt++)
	{
		PGresult   *res;

		if (c->broken && !lqc_reconnect(c))
			return NULL;
		res = PQexecParams(c->pg, c->sql[which], nparams, NULL, params,
						   NULL, NULL, 0);
		lqc_dispatch(c);
		if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK &&
			PQntuples(res) == 1)
			return res;
		if (res != NULL)
		{
			const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
			const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

			snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", st ? st : "");
			if (msg != NULL)
				lqc_error(c, "%s%s%s%s", msg, hint ? " (" : "", hint ? hint : "",
						  hint ? ")" : "");
			else
				lqc_error(c, "%s", PQresultErrorMessage(res));
			PQclear(res);
		}
		else
			lqc_error(c, "%s", PQerrorMessage(c->pg));
		if (PQstatus(c->pg) != CONNECTION_BAD)
			return NULL;		/* an error from the server */
		lqc_mark_broken(c);
	}
	return NULL;
}

static void
lqc_interval(char *buf, size_t len, int64_t ms)
{
	snprintf(buf, len, "%lld milliseconds", (long long) ms);
}

/*
 * lqc_granted records a grant whose lease was set by a request sent at
 * sent (c->mu held).
 */
static void
lqc_granted(lockqc_conn *c, lockqc_handle *h, int64_t token, int64_t sent)
{
	h->token = token;
	h->next_renew = sent + h->ttl_ms / 3;
	atomic_store(&h->deadline, sent + h->ttl_ms);
	atomic_store(&h->state, LQC_HELD);
	pthread_mutex_lock(&c->tmu);
	lqc_arm_locked(c, h);
	pthread_cond_signal(&c->tcv);
	pthread_mutex_unlock(&c->tmu);
	pthread_cond_signal(&h->cv);
}

/*
 * lqc_lose ends a held lease now: lockqc_held turns false and the timer
 * thread fires the callback.
 */
static void
lqc_lose(lockqc_conn *c, lockqc_handle *h)
{
	atomic_store(&h->deadline, 0);
	pthread_mutex_lock(&c->tmu);
	pthread_cond_signal(&c->tcv);
	pthread_mutex_unlock(&c->tmu);
}

/*
 * lqc_schedule_heartbeat sets the next heartbeat of a queued wait after an
 * answer that said "still queued".  A notice that arrived while that request
 * was in flight (lqc_exec dispatches them) must not be overwritten: then the
 * heartbeat is due at once.
 */
static void
lqc_schedule_heartbeat(lockqc_handle *h, int64_t sent)
{
	h->next_heartbeat = h->notified ? 0 : sent + h->heartbeat_ms / 3;
	h->notified = false;
}

/*
 * lqc_enqueue queues h (or takes the lock at once), c->mu held.
 */
static int
lqc_enqueue(lockqc_conn *c, lockqc_handle *h)
{
	char		ttl[64];
	char		hb[64];
	const char *params[5];
	int64_t		sent = lqc_now();
	PGresult   *res;

	lqc_interval(ttl, sizeof(ttl), h->ttl_ms);
	lqc_interval(hb, sizeof(hb), h->heartbeat_ms);
	params[0] = h->lock_id;
	params[1] = h->owner;
	params[2] = ttl;
	params[3] = c->channel;
	params[4] = hb;
	h->notified = false;
	res = lqc_exec(c, SQL_ENQUEUE, 5, params);
	if (res == NULL)
		return LOCKQC_ERROR;
	if (!PQgetisnull(res, 0, 0))
		lqc_granted(c, h, strtoll(PQgetvalue(res, 0, 0), NULL, 10), sent);
	else
	{
		atomic_store(&h->state, LQC_WAITING);
		lqc_schedule_heartbeat(h, sent);
	}
	PQclear(res);
	return LOCKQC_OK;
}

/*
 * lqc_heartbeat keeps a queued wait alive and learns of its grant (I/O
 * thread, c->mu held).  A wait the server dropped is queued again.
 */
static void
lqc_heartbeat(lockqc_conn *c, lockqc_handle *h)
{
	const char *params[2] = {h->lock_id, h->owner};
	int64_t		sent = lqc_now();
	PGresult   *res;

	h->notified = false;
	res = lqc_exec(c, SQL_HEARTBEAT, 2, params);
	if (res != NULL)
	{
		if (!PQgetisnull(res, 0, 0))
			lqc_granted(c, h, strtoll(PQgetvalue(res, 0, 0), NULL, 10), sent);
		else
			lqc_schedule_heartbeat(h, sent);
		PQclear(res);
		return;
	}
	if (strcmp(c->sqlstate, "55000") == 0 && lqc_enqueue(c, h) == LOCKQC_OK)
		return;
	if (c->broken)
		h->next_heartbeat = 0;
	else
	{
		atomic_store(&h->state, LQC_FAILED);
		pthread_cond_signal(&h->cv);
	}
}

static void
lqc_release_quietly(lockqc_conn *c, lockqc_handle *h)
{
	char		tok[32];
	const char *params[3] = {h->lock_id, h->owner, tok};
	PGresult   *res;

	snprintf(tok, sizeof(tok), "%lld", (long long) h->token);
	res = lqc_exec(c, SQL_RELEASE, 3, params);
	PQclear(res);
}

/*
 * lqc_renew extends a held lease (I/O thread, c->mu held).  On a failed
 * attempt it tries again soon; the local deadline decides when the lease
 * is lost.
 */
static void
lqc_renew(lockqc_conn *c, lockqc_handle *h)
{
	char		tok[32];
	char		ttl[64];
	const char *params[4] = {h->lock_id, h->owner, tok, ttl};
	int64_t		sent = lqc_now();
	PGresult   *res;

	snprintf(tok, sizeof(tok), "%lld", (long long) h->token);
	lqc_interval(ttl, sizeof(ttl), h->ttl_ms);
	res = lqc_exec(c, SQL_RENEW, 4, params);
	if (res == NULL)
	{
		h->next_renew = lqc_now() + lqc_min(h->ttl_ms / 10 + 10, 1000);
		return;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		lqc_lose(c, h);
	else if (atomic_load(&h->state) == LQC_HELD &&
			 atomic_load(&h->deadline) > lqc_now())
	{
		atomic_store(&h->deadline, sent + h->ttl_ms);
		h->next_renew = sent + h->ttl_ms / 3;
	}
	else
		lqc_release_quietly(c, h);	/* renewed too late: we gave it up */
	PQclear(res);
}

/*
 * lqc_verify asks the server whether a grant we were told we lost is
 * really gone (the notice could be forged).
 */
static void
lqc_verify(lockqc_conn *c, lockqc_handle *h)
{
	char		tok[32];
	const char *params[2] = {h->lock_id, tok};
	PGresult   *res;

	snprintf(tok, sizeof(tok), "%lld", (long long) h->token);
	res = lqc_exec(c, SQL_HOLDS, 2, params);
	if (res == NULL)
	{
		if (!c->broken)
			h->verify = false;
		return;
	}
	h->verify = false;
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		lqc_lose(c, h);
	PQclear(res);
}

/*
 * The I/O thread.
 */
static void *
lqc_io_main(void *arg)
{
	lockqc_conn *c = arg;

	pthread_mutex_lock(&c->mu);
	while (!c->stop)
	{
		int64_t		now = lqc_now();
		int64_t		next = now + 60000;
		lockqc_handle *h;
		struct pollfd fds[2];
		int			nfds = 1;

		if (c->broken && now >= c->next_reconnect)
			(void) lqc_reconnect(c);
		if (!c->broken)
			lqc_dispatch(c);

		for (h = c->handles; h != NULL; h = h->next)
		{
			int			st = atomic_load(&h->state);

			if (st == LQC_WAITING)
			{
				if (c->broken)
				{
					/* the server drops a wait that misses its heartbeats */
					if (now - c->broken_since > h->heartbeat_ms)
					{
						atomic_store(&h->state, LQC_FAILED);
						pthread_cond_signal(&h->cv);
					}
					continue;
				}
				if (now >= h->next_heartbeat)
					lqc_heartbeat(c, h);
				if (atomic_load(&h->state) == LQC_WAITING)
					next = lqc_min(next, h->next_heartbeat);
			}
			else if (st == LQC_HELD && !c->broken)
			{
				if (h->verify)
					lqc_verify(c, h);
				else if (h->auto_renew && now >= h->next_renew)
					lqc_renew(c, h);
				if (h->auto_renew && atomic_load(&h->state) == LQC_HELD)
					next = lqc_min(next, h->verify ? now : h->next_renew);
			}
		}
		if (c->broken)
			next = lqc_min(next, c->next_reconnect);

		fds[0].fd = c->wake[0];
		fds[0].events = POLLIN;
		if (!c->broken && c->pg != NULL && PQsocket(c->pg) >= 0)
		{
			fds[1].fd = PQsocket(c->pg);
			fds[1].events = POLLIN;
			nfds = 2;
		}
		/*
		 * After lockqc_wakeup, every waiting lockqc_lock re-checks its
		 * cancel flag.  Otherwise each is woken only for its own handle: one
		 * condition variable for all would wake every waiting thread at
		 * every event, which costs the square of their number.
		 */
		if (atomic_exchange(&c->wake_all, false))
		{
			for (lockqc_handle *w = c->handles; w != NULL; w = w->next)
				if (atomic_load(&w->state) == LQC_WAITING)
					pthread_cond_signal(&w->cv);
		}
		pthread_mutex_unlock(&c->mu);

		now = lqc_now();
		(void) poll(fds, nfds, next > now ? (int) lqc_min(next - now, INT_MAX) : 0);
		lqc_drain_pipe(c);

		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/*
 * The timer thread: ends leases at their local deadline and fires the
 * callbacks.  Never takes c->mu.
 */
static void *
lqc_timer_main(void *arg)
{
	lockqc_conn *c = arg;

	pthread_mutex_lock(&c->tmu);
	while (!c->tstop)
	{
		int64_t		now = lqc_now();
		int64_t		next = now + 3600 * 1000;
		lockqc_handle *fire = NULL;
		lockqc_handle *h;
		lockqc_handle *hn;
		struct timespec ts;

		for (h = c->armed; h != NULL; h = hn)
		{
			int64_t		d = atomic_load(&h->deadline);

			hn = h->tnext;
			if (d <= now)
			{
				int			expected = LQC_HELD;

				lqc_disarm_locked(c, h);
				if (atomic_compare_exchange_strong(&h->state, &expected, LQC_LOST))
				{
					atomic_fetch_add(&h->refs, 1);
					h->tfire = fire;
					fire = h;
				}
			}
			else
				next = lqc_min(next, d);
		}
		if (fire != NULL)
		{
			pthread_mutex_unlock(&c->tmu);
			while (fire != NULL)
			{
				h = fire;
				fire = h->tfire;
				if (h->on_lost != NULL)
					h->on_lost(h, h->on_lost_arg);
				lqc_unref(h);
			}
			pthread_mutex_lock(&c->tmu);
			continue;
		}
		ts.tv_sec = next / 1000;
		ts.tv_nsec = (next % 1000) * 1000000;
		(void) pthread_cond_timedwait(&c->tcv, &c->tmu, &ts);
	}
	pthread_mutex_unlock(&c->tmu);
	return NULL;
}

static void
lqc_free_conn(lockqc_conn *c)
{
	int			i;

	if (c->pg != NULL)
		PQfinish(c->pg);
	for (i = 0; i < SQL_COUNT; i++)
		free(c->sql[i]);
	free(c->conninfo);
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->tmu);
	pthread_cond_destroy(&c->tcv);
	free(c);
}

static void
lqc_init_cond(pthread_cond_t *cv)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &attr);
	pthread_condattr_destroy(&attr);
}

lockqc_conn *
lockqc_connect(const char *conninfo, char **errmsg)
{
	lockqc_conn *c = calloc(1, sizeof(*c));
	char		rnd[17];
	sigset_t	all;
	sigset_t	old;

	if (errmsg != NULL)
		*errmsg = NULL;
	if (c == NULL)
	{
		if (errmsg != NULL)
			*errmsg = strdup("out of memory");
		return NULL;
	}
	c->wake[0] = c->wake[1] = -1;
	atomic_init(&c->wake_all, false);
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->tmu, NULL);
	lqc_init_cond(&c->tcv);
	lqc_random_hex(rnd);
	snprintf(c->channel, sizeof(c->channel), "lockqc_%s", rnd);
	c->conninfo = strdup(conninfo != NULL ? conninfo : "");
	if (c->conninfo == NULL || pipe2(c->wake, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		if (errmsg != NULL)
			*errmsg = strdup("out of memory or file descriptors");
		lqc_free_conn(c);
		return NULL;
	}

	c->pg = PQconnectdb(c->conninfo);
	if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK || !lqc_setup(c))
	{
		if (errmsg != NULL)
			*errmsg = strdup(c->pg == NULL ? "out of memory" :
							 PQstatus(c->pg) != CONNECTION_OK ?
							 PQerrorMessage(c->pg) : c->errmsg);
		lqc_free_conn(c);
		return NULL;
	}

	/* our threads take no signals: the application's threads do */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (pthread_create(&c->io_thread, NULL, lqc_io_main, c) != 0)
	{
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (errmsg != NULL)
			*errmsg = strdup("could not start the liblockq thread");
		lqc_free_conn(c);
		return NULL;
	}
	if (pthread_create(&c->timer_thread, NULL, lqc_timer_main, c) != 0)
	{
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_mutex_lock(&c->mu);
		c->stop = true;
		pthread_mutex_unlock(&c->mu);
		lqc_poke(c);
		pthread_join(c->io_thread, NULL);
		if (errmsg != NULL)
			*errmsg = strdup("could not start the liblockq timer thread");
		lqc_free_conn(c);
		return NULL;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return c;
}

void
lockqc_disconnect(lockqc_conn *c)
{
	lockqc_handle *h;

	if (c == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_mutex_unlock(&c->mu);
	lqc_poke(c);
	pthread_join(c->io_thread, NULL);
	pthread_mutex_lock(&c->tmu);
	c->tstop = true;
	pthread_cond_signal(&c->tcv);
	pthread_mutex_unlock(&c->tmu);
	pthread_join(c->timer_thread, NULL);

	/* give back what is still held or queued, best effort */
	pthread_mutex_lock(&c->mu);
	while ((h = c->handles) != NULL)
	{
		int			st = atomic_exchange(&h->state, LQC_DONE);
		const char *params[2] = {h->lock_id, h->owner};

		lqc_unlink(c, h);
		if (st == LQC_HELD)
			lqc_release_quietly(c, h);
		else if (st == LQC_WAITING)
			PQclear(lqc_exec(c, SQL_CANCEL, 2, params));
		free(h->lock_id);
		free(h->owner);
		free(h);
	}
	pthread_mutex_unlock(&c->mu);
	lqc_free_conn(c);
}

/*
 * lqc_withdraw gives up a wait or grant (c->mu held) and frees the
 * caller's reference.  lockq_cancel both leaves the queue and releases a
 * grant that won the race.
 */
static void
lqc_withdraw(lockqc_conn *c, lockqc_handle *h)
{
	const char *params[2] = {h->lock_id, h->owner};

	atomic_store(&h->state, LQC_DONE);
	lqc_unlink(c, h);
	lqc_disarm(c, h);
	PQclear(lqc_exec(c, SQL_CANCEL, 2, params));
}

int
lockqc_lock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
			lockqc_handle **out)
{
	lockqc_handle *h;
	int64_t		deadline;
	int			rc;
	bool		queued;
	volatile sig_atomic_t *cancel = opts ? opts->cancel : NULL;

	if (out != NULL)
		*out = NULL;
	if (c == NULL || out == NULL)
		return LOCKQC_EINVAL;
	h = lqc_new_handle(c, lock_id, opts);
	if (h == NULL)
		return LOCKQC_EINVAL;
	deadline = (opts != NULL && opts->timeout_ms > 0) ?
		lqc_now() + opts->timeout_ms : INT64_MAX;

	pthread_mutex_lock(&c->mu);
	lqc_link(c, h);
	rc = lqc_enqueue(c, h);
	queued = (rc == LOCKQC_OK);
	if (queued)
	{
		lqc_poke(c);
		for (;;)
		{
			int			st = atomic_load(&h->state);
			int64_t		now;
			struct timespec ts;
			int64_t		until;

			if (st == LQC_HELD)
				break;
			if (st != LQC_WAITING)
			{
				lqc_error(c, "the wait for lock \"%s\" failed: %s", lock_id,
						  c->errmsg[0] ? c->errmsg : "connection lost");
				rc = LOCKQC_ERROR;
				break;
			}
			if (cancel != NULL && *cancel)
			{
				rc = LOCKQC_CANCELLED;
				break;
			}
			now = lqc_now();
			if (now >= deadline)
			{
				rc = LOCKQC_TIMEOUT;
				break;
			}
			until = lqc_min(deadline, now + 3600 * 1000);
			ts.tv_sec = until / 1000;
			ts.tv_nsec = (until % 1000) * 1000000;
			(void) pthread_cond_timedwait(&h->cv, &c->mu, &ts);
		}
		/* a cancel that raced with the grant still cancels */
		if (rc == LOCKQC_OK && cancel != NULL && *cancel)
			rc = LOCKQC_CANCELLED;
	}
	if (rc != LOCKQC_OK)
	{
		/* withdraw what this call queued; a failed enqueue queued nothing */
		if (queued && !c->broken)
			lqc_withdraw(c, h);
		else
		{
			atomic_store(&h->state, LQC_DONE);
			lqc_unlink(c, h);
			lqc_disarm(c, h);
		}
		pthread_mutex_unlock(&c->mu);
		lqc_unref(h);
		return rc;
	}
	pthread_mutex_unlock(&c->mu);
	*out = h;
	return LOCKQC_OK;
}

int
lockqc_trylock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
			   lockqc_handle **out)
{
	lockqc_handle *h;
	char		ttl[64];
	const char *params[3];
	int64_t		sent;
	PGresult   *res;

	if (out != NULL)
		*out = NULL;
	if (c == NULL || out == NULL)
		return LOCKQC_EINVAL;
	h = lqc_new_handle(c, lock_id, opts);
	if (h == NULL)
		return LOCKQC_EINVAL;
	lqc_interval(ttl, sizeof(ttl), h->ttl_ms);
	params[0] = h->lock_id;
	params[1] = h->owner;
	params[2] = ttl;

	pthread_mutex_lock(&c->mu);
	sent = lqc_now();
	res = lqc_exec(c, SQL_TRY, 3, params);
	if (res == NULL || PQgetisnull(res, 0, 0))
	{
		pthread_mutex_unlock(&c->mu);
		PQclear(res);
		lqc_unref(h);
		return res == NULL ? LOCKQC_ERROR : LOCKQC_NOT_AVAILABLE;
	}
	lqc_link(c, h);
	lqc_granted(c, h, strtoll(PQgetvalue(res, 0, 0), NULL, 10), sent);
	PQclear(res);
	lqc_poke(c);
	pthread_mutex_unlock(&c->mu);
	*out = h;
	return LOCKQC_OK;
}

int
lockqc_unlock(lockqc_handle *h)
{
	lockqc_conn *c;
	int			st;
	int			rc = LOCKQC_OK;
	char		tok[32];
	const char *params[3];
	PGresult   *res;

	if (h == NULL)
		return LOCKQC_EINVAL;
	c = h->c;
	pthread_mutex_lock(&c->mu);
	lqc_unlink(c, h);
	lqc_disarm(c, h);
	st = atomic_exchange(&h->state, LQC_DONE);
	snprintf(tok, sizeof(tok), "%lld", (long long) h->token);
	params[0] = h->lock_id;
	params[1] = h->owner;
	params[2] = tok;
	res = lqc_exec(c, SQL_RELEASE, 3, params);
	if (res == NULL)
		rc = LOCKQC_ERROR;
	else if (st != LQC_HELD || strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		rc = LOCKQC_LOST;
	PQclear(res);
	pthread_mutex_unlock(&c->mu);
	lqc_unref(h);
	return rc;
}

int64_t
lockqc_token(const lockqc_handle *h)
{
	return h != NULL ? h->token : 0;
}

bool
lockqc_held(const lockqc_handle *h)
{
	lockqc_handle *m = (lockqc_handle *) h;

	return h != NULL && atomic_load(&m->state) == LQC_HELD &&
		lqc_now() < atomic_load(&m->deadline);
}

const char *
lockqc_owner(const lockqc_handle *h)
{
	return h != NULL ? h->owner : NULL;
}

const char *
lockqc_lock_id(const lockqc_handle *h)
{
	return h != NULL ? h->lock_id : NULL;
}

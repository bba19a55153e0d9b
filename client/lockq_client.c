/*-------------------------------------------------------------------------
 *
 * lockq_client.c
 *		liblockq: a thread-safe libpq client for lockq.
 *
 * How it works (its two threads per connection, who may call libpq, the
 * "zombie" handles, reference counts, clocks and lock order) is in
 * doc/design/clients.md; what it promises is in doc/liblockq.md.  In the
 * code, conn->mu is the connection mutex and conn->tmu the timer mutex.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/lockq_client.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <ctype.h>
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
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "lockq_client_int.h"

#ifndef LOCKQ_VERSION
#error "LOCKQ_VERSION must be defined: make passes default_version of lockq.control"
#endif

#define LQC_DEFAULT_TTL_MS			30000
#define LQC_DEFAULT_HEARTBEAT_MS	10000
#define LQC_DEFAULT_IO_TIMEOUT_MS	10000
#define LQC_DEFAULT_CONNECT_TIMEOUT_MS 10000
#define LQC_MIN_STALL_MS			200		/* shortest stall limit */
#define LQC_WITHDRAW_WAIT_MS		1000	/* lockqc_lock waits this long for
											 * its withdrawal */
#define LQC_CLOSE_WAIT_MS			2000	/* lockqc_disconnect's clean-up */
#define LQC_MAX_NAME				255
#define LQC_ERRLEN					1024
#define LQC_MAX_RECONNECT_DELAY_MS	1000
#define LQC_FOREVER					INT64_MAX

/* Handle states (atomic). */
enum
{
	LQC_NEW,					/* enqueue/try not answered yet */
	LQC_WAITING,				/* queued, not granted yet */
	LQC_HELD,					/* granted; lease valid until deadline */
	LQC_LOST,					/* the lease is gone */
	LQC_FAILED,					/* the wait failed */
	LQC_DONE					/* unlocked / withdrawn / given up */
};

/* What an application call asks the I/O thread to send for a handle. */
enum
{
	OP_NONE,
	OP_ENQUEUE,
	OP_TRY,
	OP_RELEASE,
	OP_CANCEL,
	OP_EXTEND					/* lockqc_extend: a renewal with ext_ttl_ms */
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
	SQL_AWAIT,
	SQL_ENQUEUE_WAIT,
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
	[SQL_AWAIT] = "SELECT %s.lockq_await($1, $2, $3::pg_catalog.interval)",
	[SQL_ENQUEUE_WAIT] = "SELECT %s.lockq_enqueue($1, $2, $3::pg_catalog.interval, $4, $5::pg_catalog.interval, $6::pg_catalog.interval)",
};

/* Jobs of the I/O thread: one statement each. */
enum
{
	JOB_NONE,
	JOB_SETUP,					/* empty search_path, find the schema */
	JOB_LISTEN,
	JOB_ENQUEUE,
	JOB_TRY,
	JOB_RELEASE,
	JOB_CANCEL,
	JOB_HEARTBEAT,
	JOB_RENEW,
	JOB_HOLDS,
	JOB_AWAIT					/* a wait in the backend (lockq_await) */
};

/*
 * A cancel of a lockq_await in flight, sent by a thread of its own because
 * PQcancel blocks (PostgreSQL 15's libpq has no other).  It touches nothing
 * of the connection: it says it is done through its own eventfd, which the
 * I/O thread polls, and the last of the two threads frees it.
 */
typedef struct lqc_canceller
{
	PGcancel   *cancel;
	int			efd;
	_Atomic bool done;
	_Atomic int refs;
} lqc_canceller;

/* Connection states (I/O thread). */
enum
{
	CS_DOWN,					/* no connection; reconnect at next_reconnect */
	CS_CONNECTING,				/* PQconnectPoll in progress */
	CS_SETUP,					/* connected, setup statements running */
	CS_READY
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
	_Atomic int64_t deadline;	/* local lease end, CLOCK_BOOTTIME ms */
	_Atomic int refs;

	/* under c->mu */
	pthread_cond_t cv;			/* wakes the application call waiting on it */
	bool		linked;
	int			op;				/* OP_*: request of an application call */
	bool		op_done;		/* ... answered: op_rc */
	int			op_rc;
	bool		zombie;			/* the application let go; the I/O thread
								 * finishes op, then drops the handle */
	bool		returned;		/* handed to the application */
	bool		sent;			/* an enqueue/try was sent: the server may
								 * have a wait or grant for it */
	int64_t		created;
	int64_t		last_sent;		/* of the last enqueue/try/heartbeat */
	int64_t		zombie_until;	/* stop cleaning up after this */
	int64_t		next_renew;
	int64_t		ext_ttl_ms;		/* OP_EXTEND: the ttl asked for */
	int64_t		next_heartbeat;
	bool		notified;		/* a grant/dropped notice came: ask now */
	bool		verify;			/* a "lost" notice came: ask the server */
	char		err[LQC_ERRLEN];	/* why the wait or request failed */
	char		errstate[6];
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
	pthread_mutex_t mu;
	_Atomic bool wake_all;		/* lockqc_wakeup: every waiting call
								 * re-checks its cancel flag */
	int			wake[2];		/* self-pipe, read by the I/O thread */

	/* configuration (set before the threads start) */
	char	   *conninfo;
	int			nhosts;			/* > 1: each host is tried on its own */
	char	  **hosts;
	char	  **hostaddrs;
	char	  **ports;
	int64_t		connect_timeout_ms;
	char		channel[64];

	/* under mu */
	int64_t		io_timeout_ms;
	int			cstate;			/* CS_* */
	int			host_idx;
	bool		initial;		/* lockqc_connect is waiting */
	bool		connect_failed; /* ... and every host failed */
	pthread_cond_t ccv;			/* lockqc_connect / disconnect waits */
	int64_t		down_since;
	int64_t		reached;		/* when the last answered statement was
								 * sent: the server was reachable then */
	int64_t		next_reconnect;
	int64_t		reconnect_delay;
	int64_t		conn_deadline;
	int			setup_step;
	char	   *sql[SQL_COUNT];
	bool		no_await;		/* LOCKQC_NO_AWAIT=1 at lockqc_connect */
	bool		use_await;		/* lockq_await: extension 1.2 or later, and
								 * a direct connection (not a pooler) */
	char		sqlstate[6];
	char		errmsg[LQC_ERRLEN];
	lockqc_handle *handles;
	int			users;			/* application calls inside the library */
	bool		closing;		/* lockqc_disconnect began */
	bool		stop;			/* the I/O thread ends */
	int64_t		close_deadline;

	/* the I/O thread's own (libpq is used by it alone) */
	PGconn	   *pg;
	PostgresPollingStatusType poll_want;
	int			inflight;		/* JOB_* being answered */
	lockqc_handle *inflight_h;
	int			inflight_op;
	int64_t		inflight_sent;
	int64_t		inflight_io_timeout;	/* the I/O timeout when it was sent */
	int64_t		inflight_wait_ms;	/* JOB_AWAIT: its timeout */
	bool		inflight_cancelled; /* ... and a cancel was sent for it */
	lqc_canceller *canceller;	/* that cancel, until it is done */
	PGresult   *inflight_res;
	bool		want_write;
	pthread_t	io_thread;

	/* the timer thread */
	pthread_mutex_t tmu;
	bool		tstop;
	bool		timer_frees;	/* lockqc_disconnect ran in a callback */
	lockqc_handle *armed;
	int64_t		timer_at;		/* the timer thread sleeps until then (it
								 * looks at every armed lease when it
								 * wakes): only an earlier deadline needs
								 * to wake it */
	int			tfd;			/* timerfd on CLOCK_BOOTTIME */
	int			twake[2];
	pthread_t	timer_thread;
};

static __thread char lqc_tls_err[LQC_ERRLEN];
static __thread char lqc_tls_state[6];
static __thread const lockqc_conn *lqc_tls_conn;

static void lqc_free_conn(lockqc_conn *c);

/*
 * lqc_now is the library's clock, in milliseconds: CLOCK_BOOTTIME, which
 * goes on during a system suspend (CLOCK_MONOTONIC does not, and the lock
 * server's lease clock does).
 */
static int64_t
lqc_now(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
lqc_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t
lqc_max(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/*
 * lqc_cond_wait_until waits on cv (whose clock is CLOCK_MONOTONIC, the only
 * one besides the wall clock that condition variables take) until at most
 * the library-clock time until; a wait is at most a second long, so a
 * suspend makes it return late by at most that much.
 */
static void
lqc_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until)
{
	struct timespec ts;
	int64_t		left = until - lqc_now();
	int64_t		ns;

	if (left <= 0)
		return;
	left = lqc_min(left, 1000);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = ts.tv_nsec + (left % 1000) * 1000000;
	ts.tv_sec += left / 1000 + ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	(void) pthread_cond_timedwait(cv, mu, &ts);
}

/*
 * lqc_set_error records an error for c in the calling thread (what
 * lockqc_errmsg and lockqc_sqlstate return there) and, when the caller
 * holds c->mu (locked), on the connection.  Messages never end in a
 * newline.
 */
static void
lqc_set_error(lockqc_conn *c, bool locked, const char *sqlstate,
			  const char *fmt,...)
{
	va_list		ap;
	size_t		len;

	va_start(ap, fmt);
	vsnprintf(lqc_tls_err, sizeof(lqc_tls_err), fmt, ap);
	va_end(ap);
	len = strlen(lqc_tls_err);
	while (len > 0 && (lqc_tls_err[len - 1] == '\n' || lqc_tls_err[len - 1] == ' '))
		lqc_tls_err[--len] = '\0';
	snprintf(lqc_tls_state, sizeof(lqc_tls_state), "%s", sqlstate ? sqlstate : "");
	lqc_tls_conn = c;
	if (c != NULL && locked)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "%s", lqc_tls_err);
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", lqc_tls_state);
	}
}

/* lqc_chomp copies a libpq message without its trailing newline. */
static void
lqc_chomp(char *dst, size_t len, const char *src)
{
	size_t		n;

	snprintf(dst, len, "%s", src ? src : "");
	n = strlen(dst);
	while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
		dst[--n] = '\0';
}

const char *
lockqc_errmsg(const lockqc_conn *c)
{
	lockqc_conn *m = (lockqc_conn *) c;

	if (c == NULL || lqc_tls_conn == c)
		return lqc_tls_err;
	pthread_mutex_lock(&m->mu);
	snprintf(lqc_tls_err, sizeof(lqc_tls_err), "%s", m->errmsg);
	snprintf(lqc_tls_state, sizeof(lqc_tls_state), "%s", m->sqlstate);
	pthread_mutex_unlock(&m->mu);
	lqc_tls_conn = c;
	return lqc_tls_err;
}

const char *
lockqc_sqlstate(const lockqc_conn *c)
{
	if (c != NULL && lqc_tls_conn != c)
		(void) lockqc_errmsg(c);
	return lqc_tls_state;
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

const char *
lockqc_version(void)
{
	return LOCKQ_VERSION;
}

/*
 * lqc_parse_version reads the MAJOR.MINOR a version starts with (what
 * follows, say ".2" or "beta1", does not count); false if it cannot.
 */
static bool
lqc_parse_version(const char *v, long *major, long *minor)
{
	char	   *end;

	if (v == NULL || !isdigit((unsigned char) v[0]))
		return false;
	errno = 0;
	*major = strtol(v, &end, 10);
	if (errno != 0 || *end != '.' || !isdigit((unsigned char) end[1]))
		return false;
	*minor = strtol(end + 1, &end, 10);
	return errno == 0;
}

const char *
lockqc_check_extversion(const char *installed, char *msg, size_t len)
{
	long		major,
				minor,
				min_major,
				min_minor;

	if (!lqc_parse_version(LOCKQC_MIN_EXTVERSION, &min_major, &min_minor))
		abort();				/* cannot happen: a constant */
	if (lqc_parse_version(installed, &major, &minor) &&
		(major > min_major || (major == min_major && minor >= min_minor)))
		return NULL;
	snprintf(msg, len,
			 "lockq extension %s is installed; this client needs %s or later: run ALTER EXTENSION lockq UPDATE",
			 installed ? installed : "(unknown version)", LOCKQC_MIN_EXTVERSION);
	return msg;
}

void
lockqc_opts_init(lockqc_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->ttl_ms = LQC_DEFAULT_TTL_MS;
	opts->timeout_ms = LOCKQC_WAIT_FOREVER;
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

/* lqc_write_byte writes one byte to a non-blocking pipe.  Async-signal-safe. */
static void
lqc_write_byte(int fd)
{
	ssize_t		rc;
	int			saved = errno;

	do
		rc = write(fd, "x", 1);
	while (rc < 0 && errno == EINTR);
	errno = saved;
}

static void
lqc_drain(int fd)
{
	char		buf[64];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

/* lqc_poke wakes the I/O thread.  Async-signal-safe. */
static void
lqc_poke(lockqc_conn *c)
{
	lqc_write_byte(c->wake[1]);
}

/* lqc_tpoke wakes the timer thread. */
static void
lqc_tpoke(lockqc_conn *c)
{
	lqc_write_byte(c->twake[1]);
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

/* lqc_link puts h on c's list, which takes a reference (c->mu held). */
static void
lqc_link(lockqc_conn *c, lockqc_handle *h)
{
	atomic_fetch_add(&h->refs, 1);
	h->prev = NULL;
	h->next = c->handles;
	if (c->handles)
		c->handles->prev = h;
	c->handles = h;
	h->linked = true;
}

/* lqc_unlink takes h off c's list and drops the list's reference (c->mu). */
static void
lqc_unlink(lockqc_conn *c, lockqc_handle *h)
{
	if (!h->linked)
		return;
	if (h->prev)
		h->prev->next = h->next;
	else if (c->handles == h)
		c->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->next = h->prev = NULL;
	h->linked = false;
	lqc_unref(h);
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

static void
lqc_init_cond(pthread_cond_t *cv)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &attr);
	pthread_condattr_destroy(&attr);
}

/*
 * lqc_new_handle builds a handle from the options (one reference, the
 * caller's); NULL with an error for bad arguments.  need_heartbeat: the
 * heartbeat interval matters (a wait).
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
		lqc_set_error(c, false, "", "lock id must be 1 to %d bytes", LQC_MAX_NAME);
		return NULL;
	}
	if (opts->owner != NULL &&
		(opts->owner[0] == '\0' || strlen(opts->owner) > LQC_MAX_NAME))
	{
		lqc_set_error(c, false, "", "owner must be 1 to %d bytes", LQC_MAX_NAME);
		return NULL;
	}
	if (opts->ttl_ms <= 0)
	{
		lqc_set_error(c, false, "", "ttl_ms must be positive, not %lld",
					  (long long) opts->ttl_ms);
		return NULL;
	}
	if (opts->heartbeat_ms <= 0)
	{
		lqc_set_error(c, false, "", "heartbeat_ms must be positive, not %lld",
					  (long long) opts->heartbeat_ms);
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
		lqc_set_error(c, false, "", "out of memory");
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
		lqc_set_error(c, false, "", "out of memory");
		return NULL;
	}
	h->ttl_ms = opts->ttl_ms;
	h->heartbeat_ms = opts->heartbeat_ms;
	h->auto_renew = opts->auto_renew;
	h->on_lost = opts->on_lost;
	h->on_lost_arg = opts->on_lost_arg;
	h->created = lqc_now();
	lqc_init_cond(&h->cv);
	atomic_init(&h->state, LQC_NEW);
	atomic_init(&h->deadline, 0);
	atomic_init(&h->refs, 1);
	return h;
}

static void
lqc_interval(char *buf, size_t len, int64_t ms)
{
	snprintf(buf, len, "%lld milliseconds", (long long) ms);
}

/*
 * lqc_granted records a grant whose lease was set by a request sent at
 * sent (c->mu held) and wakes the call waiting for it.  Returns false,
 * recording nothing, when the answer came after the lease it set would
 * have ended by the local clock (a slow connection, a server that was
 * slow to answer): nobody may work under that grant, and a call waiting
 * for it must not wait for a HELD that never comes.  The request is then
 * sent again (op): the owner holds the lock, or held it, so an enqueue or
 * try for it returns the same token with a lease counted from the new
 * request, or, if the lease ended on the server meanwhile, queues again.
 */
static bool
lqc_granted(lockqc_conn *c, lockqc_handle *h, int64_t token, int64_t sent,
			int op)
{
	bool		poke;

	if (sent + h->ttl_ms <= lqc_now())
	{
		h->op = op;
		return false;
	}

	h->token = token;
	h->next_renew = sent + h->ttl_ms / 3;
	atomic_store(&h->deadline, sent + h->ttl_ms);
	atomic_store(&h->state, LQC_HELD);
	pthread_mutex_lock(&c->tmu);
	lqc_arm_locked(c, h);
	poke = sent + h->ttl_ms < c->timer_at;
	pthread_mutex_unlock(&c->tmu);
	if (poke)
		lqc_tpoke(c);
	pthread_cond_broadcast(&h->cv);
	return true;
}

/*
 * lqc_lose ends a held lease now: lockqc_held turns false and the timer
 * thread fires the callback.
 */
static void
lqc_lose(lockqc_conn *c, lockqc_handle *h)
{
	atomic_store(&h->deadline, 0);
	lqc_tpoke(c);
}

/*
 * lqc_fail ends a wait with an error the waiting lockqc_lock reports
 * (c->mu held).
 */
static void
lqc_fail(lockqc_handle *h, const char *sqlstate, const char *fmt,...)
{
	va_list		ap;
	int			expected;

	va_start(ap, fmt);
	vsnprintf(h->err, sizeof(h->err), fmt, ap);
	va_end(ap);
	snprintf(h->errstate, sizeof(h->errstate), "%s", sqlstate ? sqlstate : "");
	if (h->op == OP_ENQUEUE)
		h->op = OP_NONE;
	expected = LQC_WAITING;
	if (!atomic_compare_exchange_strong(&h->state, &expected, LQC_FAILED))
	{
		expected = LQC_NEW;
		(void) atomic_compare_exchange_strong(&h->state, &expected, LQC_FAILED);
	}
	pthread_cond_broadcast(&h->cv);
}

/*
 * lqc_op_done answers an application request on h (c->mu held); a zombie
 * whose request is answered leaves the list.
 */
static void
lqc_op_done(lockqc_conn *c, lockqc_handle *h, int rc)
{
	h->op = OP_NONE;
	h->op_done = true;
	h->op_rc = rc;
	pthread_cond_broadcast(&h->cv);
	if (h->zombie)
		lqc_unlink(c, h);
}

/*
 * lqc_schedule_heartbeat sets the next heartbeat of a queued wait after an
 * answer that said "still queued".  A notice that arrived while that request
 * was in flight must not be overwritten: then the heartbeat is due at once.
 */
static void
lqc_schedule_heartbeat(lockqc_handle *h, int64_t sent)
{
	h->next_heartbeat = h->notified ? 0 : sent + h->heartbeat_ms / 3;
	h->notified = false;
}

/*
 * The timer thread: ends leases at their local deadline and fires the
 * callbacks.  It sleeps on a timerfd of CLOCK_BOOTTIME, so a lease that
 * ended during a system suspend is reported as soon as the system resumes.
 * Never takes c->mu.  When lockqc_disconnect was called from a callback,
 * this thread frees the connection on its way out.
 */
static void *
lqc_timer_main(void *arg)
{
	lockqc_conn *c = arg;
	bool		frees;

	pthread_mutex_lock(&c->tmu);
	while (!c->tstop)
	{
		int64_t		now = lqc_now();
		int64_t		next = now + 3600 * 1000;
		lockqc_handle *fire = NULL;
		lockqc_handle *h;
		lockqc_handle *hn;

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
		c->timer_at = fire != NULL ? 0 : next;
		pthread_mutex_unlock(&c->tmu);
		if (fire != NULL)
		{
			while (fire != NULL)
			{
				h = fire;
				fire = h->tfire;
				if (h->on_lost != NULL)
					h->on_lost(h, h->on_lost_arg);
				lqc_unref(h);
			}
		}
		else
		{
			struct itimerspec its;
			struct pollfd fds[2];

			memset(&its, 0, sizeof(its));
			its.it_value.tv_sec = next / 1000;
			its.it_value.tv_nsec = (next % 1000) * 1000000 + 1;
			if (c->tfd >= 0)
				(void) timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL);
			fds[0].fd = c->twake[0];
			fds[0].events = POLLIN;
			fds[1].fd = c->tfd;
			fds[1].events = POLLIN;
			(void) poll(fds, c->tfd >= 0 ? 2 : 1,
						c->tfd >= 0 ? -1 : (int) lqc_min(lqc_max(next - lqc_now(), 0) + 1, 1000));
			lqc_drain(c->twake[0]);
			if (c->tfd >= 0)
				lqc_drain(c->tfd);
		}
		pthread_mutex_lock(&c->tmu);
	}
	frees = c->timer_frees;
	pthread_mutex_unlock(&c->tmu);
	if (frees)
	{
		pthread_detach(pthread_self());
		lqc_free_conn(c);
	}
	return NULL;
}

/*
 * Connections.
 */
static void
lqc_ignore_notice(void *arg, const char *message)
{
}

/*
 * lqc_split splits a comma-separated libpq list into a NULL-terminated
 * array of n (the count, returned) malloc'ed strings.
 */
static int
lqc_split(const char *s, char ***out)
{
	int			n = 1;
	int			i = 0;
	const char *p;
	char	  **v;

	*out = NULL;
	if (s == NULL || s[0] == '\0')
		return 0;
	for (p = s; *p; p++)
		if (*p == ',')
			n++;
	v = calloc(n + 1, sizeof(char *));
	if (v == NULL)
		return -1;
	for (p = s;; p++)
	{
		const char *e = strchr(p, ',');
		size_t		len = e ? (size_t) (e - p) : strlen(p);

		v[i] = strndup(p, len);
		if (v[i++] == NULL)
			return -1;
		if (e == NULL)
			break;
		p = e;
	}
	*out = v;
	return n;
}

static void
lqc_free_list(char **v)
{
	if (v == NULL)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/*
 * lqc_parse_conninfo reads what the library needs of the conninfo: the
 * host list (to try each host with its own deadline) and connect_timeout.
 * Returns false with a message in errbuf when libpq cannot parse it.
 */
static bool
lqc_parse_conninfo(lockqc_conn *c, char *errbuf, size_t errlen)
{
	char	   *err = NULL;
	PQconninfoOption *opts = PQconninfoParse(c->conninfo, &err);
	const char *host = NULL;
	const char *hostaddr = NULL;
	const char *port = NULL;
	int			nh,
				na,
				np;

	if (opts == NULL)
	{
		lqc_chomp(errbuf, errlen, err ? err : "out of memory");
		PQfreemem(err);
		return false;
	}
	c->connect_timeout_ms = LQC_DEFAULT_CONNECT_TIMEOUT_MS;
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
	{
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "host") == 0)
			host = o->val;
		else if (strcmp(o->keyword, "hostaddr") == 0)
			hostaddr = o->val;
		else if (strcmp(o->keyword, "port") == 0)
			port = o->val;
		else if (strcmp(o->keyword, "connect_timeout") == 0)
		{
			long		s = strtol(o->val, NULL, 10);

			/*
			 * As libpq: 0 or less is no limit, and at least 2 s; libpq
			 * refuses a value beyond an int, so no more is kept here.
			 */
			if (s > 0)
				c->connect_timeout_ms = (int64_t) (s < 2 ? 2 : s > INT_MAX ? INT_MAX : s) * 1000;
		}
	}
	nh = lqc_split(host, &c->hosts);
	na = lqc_split(hostaddr, &c->hostaddrs);
	np = lqc_split(port, &c->ports);
	PQconninfoFree(opts);
	if (nh < 0 || na < 0 || np < 0)
	{
		snprintf(errbuf, errlen, "out of memory");
		return false;
	}
	c->nhosts = lqc_max(nh, na);
	/* lists libpq would refuse: let libpq say so, on one attempt */
	if ((nh > 1 && na > 1 && nh != na) || (np > 1 && np != c->nhosts))
		c->nhosts = 0;
	if (c->nhosts <= 1)
		c->nhosts = 0;
	return true;
}

/*
 * lqc_start_connect begins a connection attempt to the current host (I/O
 * thread, c->mu held; dropped around PQconnectStartParams, which may
 * resolve a host name).  The library's defaults come before the conninfo,
 * which may override them; a single host of a multi-host list comes
 * after it.
 */
static void
lqc_start_connect(lockqc_conn *c)
{
	const char *kw[16];
	const char *val[16];
	int			n = 0;
	PGconn	   *pg;

	kw[n] = "keepalives";
	val[n++] = "1";
	kw[n] = "keepalives_idle";
	val[n++] = "5";
	kw[n] = "keepalives_interval";
	val[n++] = "2";
	kw[n] = "keepalives_count";
	val[n++] = "3";
	kw[n] = "tcp_user_timeout";
	val[n++] = "10000";
	kw[n] = "fallback_application_name";
	val[n++] = "lockq";
	kw[n] = "dbname";
	val[n++] = c->conninfo;
	if (c->nhosts > 1)
	{
		int			i = c->host_idx;

		if (c->hosts != NULL)
		{
			kw[n] = "host";
			val[n++] = c->hosts[i];
		}
		if (c->hostaddrs != NULL)
		{
			kw[n] = "hostaddr";
			val[n++] = c->hostaddrs[i];
		}
		if (c->ports != NULL && c->ports[1] != NULL)
		{
			kw[n] = "port";
			val[n++] = c->ports[i];
		}
	}
	kw[n] = NULL;
	val[n] = NULL;

	pthread_mutex_unlock(&c->mu);
	pg = PQconnectStartParams(kw, val, 1);
	pthread_mutex_lock(&c->mu);
	c->pg = pg;
	c->cstate = CS_CONNECTING;
	c->poll_want = PGRES_POLLING_WRITING;
	c->conn_deadline = lqc_now() + c->connect_timeout_ms;
}

static void lqc_connect_failed(lockqc_conn *c, const char *why);

static void
lqc_canceller_unref(lqc_canceller *k)
{
	if (atomic_fetch_sub(&k->refs, 1) == 1)
	{
		PQfreeCancel(k->cancel);
		close(k->efd);
		free(k);
	}
}

static void *
lqc_cancel_main(void *arg)
{
	lqc_canceller *k = arg;
	char		err[256];
	uint64_t	one = 1;
	ssize_t		rc;

	(void) PQcancel(k->cancel, err, sizeof(err));
	atomic_store(&k->done, true);
	do
		rc = write(k->efd, &one, sizeof(one));
	while (rc < 0 && errno == EINTR);
	lqc_canceller_unref(k);
	return NULL;
}

/*
 * lqc_cancel_await asks the server to end the lockq_await in flight (I/O
 * thread, c->mu held) because something else must be sent.  Nothing is
 * sent until the cancel is done (c->canceller is NULL again): a cancel that
 * reached the backend late would hit the next statement.  When no thread
 * can be started, the await ends at its own timeout.  The thread inherits
 * the I/O thread's signal mask (every signal blocked), so a SIGPIPE from
 * PQcancel's send never reaches the application.
 */
static void
lqc_cancel_await(lockqc_conn *c)
{
	lqc_canceller *k = calloc(1, sizeof(*k));
	pthread_attr_t attr;
	pthread_t	t;
	bool		ok = false;

	c->inflight_cancelled = true;
	if (k == NULL)
		return;
	k->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	k->cancel = PQgetCancel(c->pg);
	atomic_init(&k->done, false);
	atomic_init(&k->refs, 2);
	if (k->efd >= 0 && k->cancel != NULL && pthread_attr_init(&attr) == 0)
	{
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		ok = (pthread_create(&t, &attr, lqc_cancel_main, k) == 0);
		pthread_attr_destroy(&attr);
	}
	if (!ok)
	{
		if (k->cancel != NULL)
			PQfreeCancel(k->cancel);
		if (k->efd >= 0)
			close(k->efd);
		free(k);
		return;
	}
	c->canceller = k;
}

/*
 * lqc_forget_inflight forgets the statement in flight and a cancel sent for
 * it (c->mu held): the connection it was on is gone.  The cancel's thread
 * finishes on its own.
 */
static void
lqc_forget_inflight(lockqc_conn *c)
{
	if (c->inflight_res != NULL)
	{
		PQclear(c->inflight_res);
		c->inflight_res = NULL;
	}
	if (c->inflight_h != NULL)
		lqc_unref(c->inflight_h);
	c->inflight_h = NULL;
	c->inflight = JOB_NONE;
	c->inflight_cancelled = false;
	if (c->canceller != NULL)
		lqc_canceller_unref(c->canceller);
	c->canceller = NULL;
	c->want_write = false;
}

/*
 * lqc_break drops the connection (I/O thread, c->mu held): closed without
 * waiting (the socket is non-blocking), the statement in flight abandoned
 * (its request is repeated after the reconnect, or cleaned up), and a
 * reconnection scheduled.
 */
static void
lqc_break(lockqc_conn *c, const char *why)
{
	int64_t		now = lqc_now();

	if (c->cstate == CS_CONNECTING || c->cstate == CS_SETUP)
	{
		lqc_connect_failed(c, why);
		return;
	}
	lqc_set_error(c, true, "08006", "%s", why);
	if (c->pg != NULL)
	{
		PQfinish(c->pg);
		c->pg = NULL;
	}
	lqc_forget_inflight(c);
	if (c->cstate == CS_READY)
	{
		c->down_since = now;
		c->reconnect_delay = 50;
		c->next_reconnect = now;	/* at once: a new backend may do */
	}
	c->cstate = CS_DOWN;
	c->host_idx = 0;
}

/*
 * lqc_connect_failed ends a failed connection attempt (c->mu held): the
 * next host of the list, or, after the last, a pause (growing up to 1 s)
 * before the first again; lockqc_connect's first round reports failure.
 */
static void
lqc_connect_failed(lockqc_conn *c, const char *why)
{
	int64_t		now = lqc_now();

	lqc_set_error(c, true, "08006", "%s", why);
	if (c->pg != NULL)
	{
		PQfinish(c->pg);
		c->pg = NULL;
	}
	lqc_forget_inflight(c);
	c->cstate = CS_DOWN;
	if (c->nhosts > 1 && c->host_idx + 1 < c->nhosts)
	{
		c->host_idx++;
		c->next_reconnect = now;
		return;
	}
	c->host_idx = 0;
	if (c->initial)
	{
		c->connect_failed = true;
		pthread_cond_broadcast(&c->ccv);
		return;
	}
	c->next_reconnect = now + c->reconnect_delay;
	c->reconnect_delay = lqc_min(c->reconnect_delay * 2, LQC_MAX_RECONNECT_DELAY_MS);
}

/*
 * lqc_connected runs when the connection is ready for our statements
 * (c->mu held): waits heartbeat at once (keeping their place if the server
 * still has them), held leases are renewed or checked, enqueues and tries
 * whose answer was lost are repeated (idempotent for their owner).
 */
static void
lqc_connected(lockqc_conn *c)
{
	lockqc_handle *h;

	c->cstate = CS_READY;
	c->reconnect_delay = 50;
	for (h = c->handles; h != NULL; h = h->next)
	{
		int			st = atomic_load(&h->state);

		if (st == LQC_WAITING)
			h->next_heartbeat = 0;
		else if (st == LQC_HELD && !h->zombie)
		{
			if (h->auto_renew)
				h->next_renew = 0;
			else
				h->verify = true;
		}
	}
	if (c->initial)
		pthread_cond_broadcast(&c->ccv);
}

static lockqc_handle *
lqc_find(lockqc_conn *c, const lockqc_notice *n)
{
	lockqc_handle *h;

	for (h = c->handles; h != NULL; h = h->next)
	{
		if (!h->zombie &&
			strlen(h->lock_id) == n->lock_len &&
			memcmp(h->lock_id, n->lock_id, n->lock_len) == 0 &&
			strlen(h->owner) == n->owner_len &&
			memcmp(h->owner, n->owner, n->owner_len) == 0)
			return h;
	}
	return NULL;
}

/*
 * lqc_dispatch takes the notifications that arrived and marks the handles
 * they concern, which the I/O thread then asks the server about (c->mu
 * held).
 */
static void
lqc_dispatch(lockqc_conn *c)
{
	PGnotify   *n;

	while ((n = PQnotifies(c->pg)) != NULL)
	{
		lockqc_notice nt;
		lockqc_handle *h;

		if (strcmp(n->relname, c->channel) == 0 &&
			lockqc_parse_notice(n->extra, &nt) == 0 &&
			(h = lqc_find(c, &nt)) != NULL)
		{
			int			st = atomic_load(&h->state);

			if ((st == LQC_WAITING || st == LQC_NEW) &&
				(nt.event == LOCKQC_EV_GRANT || nt.event == LOCKQC_EV_DROPPED))
			{
				h->next_heartbeat = 0;
				h->notified = true;
			}
			else if (st == LQC_HELD && nt.event == LOCKQC_EV_LOST)
				h->verify = true;
		}
		PQfreemem(n);
	}
}

/*
 * lqc_shares_owner: does a handle other than h that the application still
 * uses have h's lock and owner?  Then withdrawing h by owner would take
 * that one's grant or wait too.
 */
static bool
lqc_shares_owner(lockqc_conn *c, lockqc_handle *h)
{
	for (lockqc_handle *o = c->handles; o != NULL; o = o->next)
		if (o != h && !o->zombie && strcmp(o->lock_id, h->lock_id) == 0 &&
			strcmp(o->owner, h->owner) == 0)
			return true;
	return false;
}

/*
 * lqc_may_await: may h, the application's request for it included, wait
 * in the backend (c->mu held)?  Only the connection's single handle does
 * (see lqc_scan), and only where lockq_await may be used.
 */
static bool
lqc_may_await(const lockqc_conn *c, const lockqc_handle *h)
{
	return c->use_await && !c->stop && c->handles == h && h->next == NULL &&
		!h->zombie;
}

/*
 * lqc_await_ms: how long one lockq_await of h may wait.  A third of the
 * heartbeat interval, as for heartbeats, so that a stalled connection is
 * noticed as soon; and at most a third of the ttl, because the local lease
 * of a grant is counted from when the await was sent (the grant came
 * later, but when is not known), and the renewal is due a third of the
 * ttl after that.
 */
static int64_t
lqc_await_ms(const lockqc_handle *h)
{
	return lqc_max(lqc_min(h->heartbeat_ms, h->ttl_ms) / 3, 100);
}

/*
 * lqc_send sends one statement (I/O thread, c->mu held).  h, if any, gets
 * a reference for as long as the statement is in flight.
 */
static void
lqc_send(lockqc_conn *c, int job, lockqc_handle *h, const char *sql,
		 int nparams, const char *const *params)
{
	int			f;

	if (!PQsendQueryParams(c->pg, sql, nparams, NULL, params, NULL, NULL, 0))
	{
		char		msg[LQC_ERRLEN];

		lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
		lqc_break(c, msg);
		return;
	}
	c->inflight = job;
	c->inflight_h = h;
	c->inflight_op = h ? h->op : OP_NONE;
	c->inflight_sent = lqc_now();
	c->inflight_io_timeout = c->io_timeout_ms;
	c->inflight_wait_ms = 0;
	c->inflight_cancelled = false;
	if (h != NULL)
		atomic_fetch_add(&h->refs, 1);
	f = PQflush(c->pg);
	if (f < 0)
	{
		char		msg[LQC_ERRLEN];

		lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
		lqc_break(c, msg);
		return;
	}
	c->want_write = (f == 1);
}

/*
 * lqc_send_wait sends a statement whose last parameter is how long it waits
 * in the backend (lockq_await, lockq_enqueue with a wait), and records that
 * wait: the statement's answer may take that much longer, and is cancelled
 * when something else must be sent (c->mu held).
 */
static void
lqc_send_wait(lockqc_conn *c, int job, lockqc_handle *h, int sqlno,
			  int nparams, const char **params)
{
	char		wait[64];
	int64_t		ms = lqc_await_ms(h);

	lqc_interval(wait, sizeof(wait), ms);
	params[nparams - 1] = wait;
	lqc_send(c, job, h, c->sql[sqlno], nparams, params);
	c->inflight_wait_ms = ms;
}

/*
 * lqc_send_job sends the statement of job for h (c->mu held).
 */
static void
lqc_send_job(lockqc_conn *c, int job, lockqc_handle *h)
{
	char		ttl[64];
	char		hb[64];
	char		tok[32];
	const char *params[6];

	if (job == JOB_SETUP)
	{
		lqc_send(c, job, NULL,
				 "SELECT pg_catalog.set_config('search_path', '', false), "
				 LOCKQC_SCHEMA_SQL ", " LOCKQC_EXTVERSION_SQL
				 ", pg_catalog.pg_backend_pid()",
				 0, NULL);
		return;
	}
	if (job == JOB_LISTEN)
	{
		char	   *chan = PQescapeIdentifier(c->pg, c->channel, strlen(c->channel));
		char	   *listen = NULL;

		if (chan == NULL || asprintf(&listen, "LISTEN %s", chan) < 0)
		{
			PQfreemem(chan);
			lqc_break(c, "out of memory");
			return;
		}
		PQfreemem(chan);
		lqc_send(c, job, NULL, listen, 0, NULL);
		free(listen);
		return;
	}

	lqc_interval(ttl, sizeof(ttl),
				 job == JOB_RENEW && h->op == OP_EXTEND ? h->ext_ttl_ms : h->ttl_ms);
	lqc_interval(hb, sizeof(hb), h->heartbeat_ms);
	snprintf(tok, sizeof(tok), "%lld", (long long) h->token);
	params[0] = h->lock_id;
	params[1] = h->owner;
	switch (job)
	{
		case JOB_ENQUEUE:
			params[2] = ttl;
			params[3] = c->channel;
			params[4] = hb;
			h->notified = false;
			h->sent = true;
			h->last_sent = lqc_now();
			if (lqc_may_await(c, h))	/* queued, it waits in the backend */
				lqc_send_wait(c, job, h, SQL_ENQUEUE_WAIT, 6, params);
			else
				lqc_send(c, job, h, c->sql[SQL_ENQUEUE], 5, params);
			break;
		case JOB_TRY:
			params[2] = ttl;
			h->sent = true;
			h->last_sent = lqc_now();
			lqc_send(c, job, h, c->sql[SQL_TRY], 3, params);
			break;
		case JOB_HEARTBEAT:
			h->notified = false;
			h->last_sent = lqc_now();
			lqc_send(c, job, h, c->sql[SQL_HEARTBEAT], 2, params);
			break;
		case JOB_CANCEL:
			lqc_send(c, job, h, c->sql[SQL_CANCEL], 2, params);
			break;
		case JOB_RELEASE:
			params[2] = tok;
			lqc_send(c, job, h, c->sql[SQL_RELEASE], 3, params);
			break;
		case JOB_RENEW:
			params[2] = tok;
			params[3] = ttl;
			lqc_send(c, job, h, c->sql[SQL_RENEW], 4, params);
			break;
		case JOB_HOLDS:
			params[0] = h->lock_id;
			params[1] = tok;
			lqc_send(c, job, h, c->sql[SQL_HOLDS], 2, params);
			break;
		case JOB_AWAIT:
			h->notified = false;
			h->last_sent = lqc_now();
			lqc_send_wait(c, job, h, SQL_AWAIT, 3, params);
			break;
	}
}

/*
 * lqc_await_usable: may waits on this connection use lockq_await?  The
 * extension must have it (1.2), and the backend that answered must be the
 * one the connection was opened to: behind a pooler (whose cancel key is
 * its own) an await would pin a pooled server connection, and a cancel
 * could reach a statement of another client.  LOCKQC_NO_AWAIT=1 in the
 * environment turns it off (tests of the NOTIFY path).
 */
static bool
lqc_await_usable(lockqc_conn *c, const PGresult *res)
{
	long		major,
				minor;

	if (c->no_await ||
		!lqc_parse_version(PQgetvalue(res, 0, 2), &major, &minor) ||
		(major == 1 && minor < 2) || major < 1)
		return false;
	return strtol(PQgetvalue(res, 0, 3), NULL, 10) == PQbackendPID(c->pg);
}

/*
 * lqc_setup_done takes the answer of a setup statement (c->mu held): the
 * schema to build our statements with, then LISTEN; then ready.
 */
static void
lqc_setup_done(lockqc_conn *c, int job, PGresult *res, bool ok)
{
	if (!ok)
	{
		char		msg[LQC_ERRLEN];

		lqc_chomp(msg, sizeof(msg), res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
		lqc_connect_failed(c, msg);
		return;
	}
	if (job == JOB_SETUP)
	{
		char	   *schema;
		char		msg[LQC_ERRLEN];
		int			i;

		/* a server that answers but cannot serve us: no other host will */
		if (PQgetisnull(res, 0, 1))
		{
			snprintf(msg, sizeof(msg),
					 "the lockq extension is not installed in database \"%s\"",
					 PQdb(c->pg));
			lqc_connect_failed(c, msg);
			return;
		}
		if (lockqc_check_extversion(PQgetvalue(res, 0, 2), msg, sizeof(msg)) != NULL)
		{
			lqc_connect_failed(c, msg);
			return;
		}
		schema = PQescapeIdentifier(c->pg, PQgetvalue(res, 0, 1),
									strlen(PQgetvalue(res, 0, 1)));
		if (schema == NULL)
		{
			lqc_connect_failed(c, "out of memory");
			return;
		}
		for (i = 0; i < SQL_COUNT; i++)
		{
			free(c->sql[i]);
			if (asprintf(&c->sql[i], lqc_sql_fmt[i], schema) < 0)
				c->sql[i] = NULL;
		}
		PQfreemem(schema);
		for (i = 0; i < SQL_COUNT; i++)
			if (c->sql[i] == NULL)
			{
				lqc_connect_failed(c, "out of memory");
				return;
			}
		c->use_await = lqc_await_usable(c, res);
		c->setup_step = 1;
	}
	else
		lqc_connected(c);
}

/*
 * lqc_extended takes the answer to lockqc_extend's renewal (I/O thread,
 * c->mu held): the lease gets the new ttl and a deadline counted from when
 * the renewal was sent, unless the server refused it (lost) or it came
 * after the local deadline (then the grant is released, as an automatic
 * renewal that came too late is).
 */
static void
lqc_extended(lockqc_conn *c, lockqc_handle *h, int64_t sent, bool ok,
			 const char *v, const char *state, const char *msg)
{
	if (!ok)
	{
		snprintf(h->err, sizeof(h->err), "%s", msg[0] ? msg : c->errmsg);
		snprintf(h->errstate, sizeof(h->errstate), "%s", state);
		lqc_op_done(c, h, LOCKQC_ERROR);
	}
	else if (v == NULL || strcmp(v, "t") != 0)
	{
		lqc_lose(c, h);
		lqc_op_done(c, h, LOCKQC_LOST);
	}
	else if (atomic_load(&h->state) == LQC_HELD &&
			 atomic_load(&h->deadline) > lqc_now())
	{
		bool		poke;

		h->ttl_ms = h->ext_ttl_ms;
		atomic_store(&h->deadline, sent + h->ttl_ms);
		h->next_renew = sent + h->ttl_ms / 3;
		/* a shorter ttl may move the deadline before the timer's wake-up */
		pthread_mutex_lock(&c->tmu);
		poke = sent + h->ttl_ms < c->timer_at;
		pthread_mutex_unlock(&c->tmu);
		if (poke)
			lqc_tpoke(c);
		lqc_op_done(c, h, LOCKQC_OK);
	}
	else
	{
		lqc_op_done(c, h, LOCKQC_LOST);
		h->op = OP_RELEASE;		/* renewed too late: we gave it up */
	}
}

/*
 * lqc_job_done takes the answer to the statement in flight (I/O thread,
 * c->mu held).  ok: one row came back; otherwise res (maybe NULL) has the
 * server's error.  A request whose handle was given up meanwhile (the
 * application timed out or cancelled) is not acted upon: the handle's
 * clean-up request follows.
 */
static void
lqc_job_done(lockqc_conn *c, PGresult *res, bool ok)
{
	int			job = c->inflight;
	lockqc_handle *h = c->inflight_h;
	int			sent_op = c->inflight_op;
	int64_t		sent = c->inflight_sent;
	char		msg[LQC_ERRLEN] = "";
	char		state[6] = "";
	const char *v = (ok && !PQgetisnull(res, 0, 0)) ? PQgetvalue(res, 0, 0) : NULL;
	bool		current;

	c->inflight = JOB_NONE;
	c->inflight_h = NULL;
	c->reached = lqc_max(c->reached, sent);
	if (job == JOB_SETUP || job == JOB_LISTEN)
	{
		lqc_setup_done(c, job, res, ok);
		return;
	}
	if (!ok && res != NULL)
	{
		const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

		snprintf(state, sizeof(state), "%s", st ? st : "");
		if (m != NULL)
			snprintf(msg, sizeof(msg), "%s%s%s%s", m, hint ? " (" : "",
					 hint ? hint : "", hint ? ")" : "");
		else
			lqc_chomp(msg, sizeof(msg), PQresultErrorMessage(res));
	}
	/* the request this answers is still the one the handle wants */
	current = (h->op == sent_op);

	switch (job)
	{
		case JOB_ENQUEUE:
			if (!current || h->zombie)
				break;
			if (!ok && c->inflight_cancelled && strcmp(state, "57014") == 0)
				break;			/* we cancelled its wait: enqueue again */
			h->op = OP_NONE;
			if (!ok)
			{
				h->sent = false;	/* an error changes nothing */
				lqc_fail(h, state, "%s", msg);
			}
			else if (v != NULL)
				(void) lqc_granted(c, h, strtoll(v, NULL, 10), sent, OP_ENQUEUE);
			else
			{
				atomic_store(&h->state, LQC_WAITING);
				if (c->inflight_wait_ms > 0)
				{
					/* it waited in the backend: a heartbeat at its end */
					h->next_heartbeat = lqc_now() + h->heartbeat_ms / 3;
					h->notified = false;
				}
				else
					lqc_schedule_heartbeat(h, sent);
			}
			break;
		case JOB_TRY:
			if (!current || h->zombie)
				break;
			if (!ok)
			{
				h->sent = false;
				snprintf(h->err, sizeof(h->err), "%s", msg);
				snprintf(h->errstate, sizeof(h->errstate), "%s", state);
				lqc_op_done(c, h, LOCKQC_ERROR);
			}
			else if (v != NULL)
			{
				if (lqc_granted(c, h, strtoll(v, NULL, 10), sent, OP_TRY))
					lqc_op_done(c, h, LOCKQC_OK);
			}
			else
			{
				h->sent = false;
				lqc_op_done(c, h, LOCKQC_NOT_AVAILABLE);
			}
			break;
		case JOB_HEARTBEAT:
		case JOB_AWAIT:
			if (h->zombie || atomic_load(&h->state) != LQC_WAITING)
				break;
			if (ok && v != NULL)
				(void) lqc_granted(c, h, strtoll(v, NULL, 10), sent, OP_ENQUEUE);
			else if (ok && job == JOB_AWAIT)
			{
				/* it ended as a heartbeat: the next await follows at once */
				h->next_heartbeat = lqc_now() + h->heartbeat_ms / 3;
				h->notified = false;
			}
			else if (ok)
				lqc_schedule_heartbeat(h, sent);
			else if (job == JOB_AWAIT && strcmp(state, "57014") == 0)
				h->next_heartbeat = 0;	/* we cancelled it: ask at once */
			else if (strcmp(state, "55000") == 0)
			{
				h->sent = false;
				lqc_fail(h, state,
						 "the server dropped the wait for lock \"%s\" (it missed its heartbeats, or was cancelled): %s",
						 h->lock_id, msg);
			}
			else
				lqc_fail(h, state, "%s", msg);
			break;
		case JOB_RENEW:
			if (h->zombie)
				break;
			if (sent_op == OP_EXTEND)
			{
				if (current)
					lqc_extended(c, h, sent, ok, v, state, msg);
				break;
			}
			if (!ok)
				h->next_renew = lqc_now() + lqc_min(h->ttl_ms / 10 + 10, 1000);
			else if (v == NULL || strcmp(v, "t") != 0)
				lqc_lose(c, h);
			else if (atomic_load(&h->state) == LQC_HELD &&
					 atomic_load(&h->deadline) > lqc_now())
			{
				atomic_store(&h->deadline, sent + h->ttl_ms);
				h->next_renew = sent + h->ttl_ms / 3;
			}
			else if (h->op == OP_NONE)
				h->op = OP_RELEASE; /* renewed too late: we gave it up */
			break;
		case JOB_HOLDS:
			if (h->zombie)
				break;
			h->verify = false;
			if (ok && (v == NULL || strcmp(v, "t") != 0))
				lqc_lose(c, h);
			break;
		case JOB_RELEASE:
			if (!current)
				break;
			if (!ok)
			{
				snprintf(h->err, sizeof(h->err), "%s", msg);
				snprintf(h->errstate, sizeof(h->errstate), "%s", state);
			}
			lqc_op_done(c, h, !ok ? LOCKQC_ERROR :
						(v != NULL && strcmp(v, "t") == 0) ? LOCKQC_OK : LOCKQC_LOST);
			break;
		case JOB_CANCEL:
			if (!current)
				break;
			h->sent = false;
			lqc_op_done(c, h, ok ? LOCKQC_OK : LOCKQC_ERROR);
			break;
	}
	lqc_unref(h);
}

/*
 * lqc_collect reads what arrived (I/O thread, c->mu held): notifications,
 * and the answer of the statement in flight once complete.
 */
static void
lqc_collect(lockqc_conn *c)
{
	if (!PQconsumeInput(c->pg))
	{
		char		msg[LQC_ERRLEN];

		lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
		lqc_break(c, msg);
		return;
	}
	if (c->want_write)
	{
		int			f = PQflush(c->pg);

		if (f < 0)
		{
			char		msg[LQC_ERRLEN];

			lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
			lqc_break(c, msg);
			return;
		}
		c->want_write = (f == 1);
	}
	lqc_dispatch(c);
	while (c->inflight != JOB_NONE && !PQisBusy(c->pg))
	{
		PGresult   *r = PQgetResult(c->pg);

		if (r != NULL)
		{
			if (c->inflight_res == NULL)
				c->inflight_res = r;
			else
				PQclear(r);
			continue;
		}
		/* the statement is complete */
		{
			PGresult   *res = c->inflight_res;
			ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
			bool		ok;

			c->inflight_res = NULL;
			if (c->inflight == JOB_LISTEN)
				ok = (st == PGRES_COMMAND_OK);
			else
				ok = (st == PGRES_TUPLES_OK && PQntuples(res) == 1);
			if (!ok && PQstatus(c->pg) == CONNECTION_BAD)
			{
				char		msg[LQC_ERRLEN];

				lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
				PQclear(res);
				lqc_break(c, msg);
				return;
			}
			lqc_job_done(c, res, ok);
			PQclear(res);
		}
		lqc_dispatch(c);
	}
}

/*
 * lqc_scan looks at every handle (I/O thread, c->mu held): drops zombies
 * whose clean-up no longer matters, fails waits the server must have
 * dropped while it could not be reached, and picks the next statement to
 * send when the connection is ready and idle: renewals and checks of held
 * leases first, then the applications' requests, then heartbeats.  It
 * lowers *next to the time something falls due and *stall to the time a
 * statement may take before the connection counts as stalled (a third of
 * the shortest ttl or heartbeat interval).  Returns the job (JOB_NONE if
 * nothing) and its handle in *jh.
 */
static int
lqc_scan(lockqc_conn *c, int64_t now, int64_t *next, int64_t *stall,
		 lockqc_handle **jh, bool *pending)
{
	static const int op_job[] = {
		[OP_NONE] = JOB_NONE, [OP_ENQUEUE] = JOB_ENQUEUE, [OP_TRY] = JOB_TRY,
		[OP_RELEASE] = JOB_RELEASE, [OP_CANCEL] = JOB_CANCEL,
		[OP_EXTEND] = JOB_RENEW
	};
	bool		pick = (c->cstate == CS_READY && c->inflight == JOB_NONE &&
						c->canceller == NULL);
	int			best = JOB_NONE;
	int			best_prio = 99;
	lockqc_handle *h;
	lockqc_handle *hn;

	*jh = NULL;
	for (h = c->handles; h != NULL; h = hn)
	{
		int			st = atomic_load(&h->state);
		int			job = JOB_NONE;
		int			prio = 99;

		hn = h->next;
		if (h->zombie)
		{
			if (now >= h->zombie_until || h->op == OP_NONE)
			{
				lqc_unlink(c, h);
				continue;
			}
			if (h->op == OP_CANCEL && lqc_shares_owner(c, h))
			{
				lqc_op_done(c, h, LOCKQC_OK);
				continue;
			}
			*next = lqc_min(*next, h->zombie_until);
			job = op_job[h->op];
			prio = 2;
		}
		else if (c->cstate != CS_READY)
		{
			/*
			 * The server drops a wait that misses its heartbeats: counted
			 * from when it was last reached (when the last statement it
			 * answered was sent), not from when the connection was taken
			 * as lost, which comes a third of the heartbeat interval later.
			 */
			if ((st == LQC_WAITING || st == LQC_NEW) && h->op != OP_TRY)
			{
				int64_t		since = lqc_max(c->reached, h->created);

				if (now - since > h->heartbeat_ms)
					lqc_fail(h, "08006",
							 "could not reach the server for longer than the wait's heartbeat interval (%lld ms): %s",
							 (long long) h->heartbeat_ms, c->errmsg);
				else
					*next = lqc_min(*next, since + h->heartbeat_ms + 1);
			}
			continue;
		}
		else if (h->op != OP_NONE)
		{
			job = op_job[h->op];
			prio = 2;
		}
		else if (st == LQC_HELD)
		{
			if (h->auto_renew)
				*stall = lqc_min(*stall, h->ttl_ms / 3);
			if (h->verify)
			{
				job = JOB_HOLDS;
				prio = 1;
			}
			else if (h->auto_renew && now >= h->next_renew)
			{
				job = JOB_RENEW;
				prio = 1;
			}
			else if (h->auto_renew)
				*next = lqc_min(*next, h->next_renew);
		}
		else if (st == LQC_WAITING)
		{
			*stall = lqc_min(*stall, h->heartbeat_ms / 3);
			if (c->inflight == JOB_AWAIT && c->inflight_h == h)
				;				/* the await in flight is its heartbeat */
			else if (now >= h->next_heartbeat)
			{
				job = JOB_HEARTBEAT;
				prio = 3;
			}
			else
				*next = lqc_min(*next, h->next_heartbeat);
		}
		/* (the request in flight is not waiting to be sent) */
		if (job != JOB_NONE &&
			!(h == c->inflight_h && h->op != OP_NONE && h->op == c->inflight_op))
			*pending = true;
		if (pick && job != JOB_NONE && prio < best_prio)
		{
			best = job;
			best_prio = prio;
			*jh = h;
		}
	}

	/*
	 * Nothing else to send, and a single wait on the connection: it waits
	 * in the backend (lockq_await), woken by its grant alone.  With more
	 * handles it stays on NOTIFY and heartbeats, which can interleave with
	 * their statements.
	 */
	h = c->handles;
	if (pick && best == JOB_NONE && h != NULL && lqc_may_await(c, h) &&
		h->op == OP_NONE && atomic_load(&h->state) == LQC_WAITING)
	{
		best = JOB_AWAIT;
		*jh = h;
	}
	return best;
}

/*
 * The I/O thread: the only user of the libpq connection.  It holds c->mu
 * except in poll() and in the libpq calls that may block on name
 * resolution.  It ends when told to stop and the clean-up of what is left
 * is done or its deadline has passed.
 */
static void *
lqc_io_main(void *arg)
{
	lockqc_conn *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;)
	{
		int64_t		now = lqc_now();
		int64_t		next = now + 60000;
		int64_t		stall = c->io_timeout_ms;
		lockqc_handle *jh = NULL;
		int			job;
		bool		pending = false;
		struct pollfd fds[3];
		int			nfds = 1;
		int			sock = -1;
		int			cfd = -1;

		if (c->stop)
		{
			bool		pending = false;

			for (lockqc_handle *h = c->handles; h != NULL; h = h->next)
				if (h->zombie && h->op != OP_NONE && now < h->zombie_until)
					pending = true;
			if (!pending || now >= c->close_deadline)
				break;
		}

		/* the connection */
		if (c->cstate == CS_DOWN && now >= c->next_reconnect && !c->connect_failed)
			lqc_start_connect(c);
		if (c->cstate == CS_CONNECTING)
		{
			if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD)
			{
				char		msg[LQC_ERRLEN];

				lqc_chomp(msg, sizeof(msg), c->pg ? PQerrorMessage(c->pg) : "out of memory");
				lqc_connect_failed(c, msg);
				continue;
			}
			if (lqc_now() >= c->conn_deadline)
			{
				char		msg[LQC_ERRLEN];

				snprintf(msg, sizeof(msg), "timeout expired connecting to server \"%s\" (%lld ms)",
						 PQhost(c->pg) ? PQhost(c->pg) : "?",
						 (long long) c->connect_timeout_ms);
				lqc_connect_failed(c, msg);
				continue;
			}
		}
		if (c->cstate == CS_SETUP && c->inflight == JOB_NONE)
		{
			lqc_send_job(c, c->setup_step == 0 ? JOB_SETUP : JOB_LISTEN, NULL);
			continue;
		}

		/* the next statement, and the times things fall due */
		job = lqc_scan(c, now, &next, &stall, &jh, &pending);
		if (job != JOB_NONE)
		{
			lqc_send_job(c, job, jh);
			continue;
		}
		if (c->inflight != JOB_NONE && c->inflight_wait_ms > 0 &&
			!c->inflight_cancelled && (pending || c->stop))
			lqc_cancel_await(c);
		if (c->inflight != JOB_NONE)
		{
			/*
			 * A longer I/O timeout set after the statement was sent does not
			 * extend it: a call that gave up on it at the old one (trylock,
			 * unlock) has reported the connection stalled, and the calls
			 * after it must not queue behind it for the new one.
			 */
			stall = lqc_min(stall, c->inflight_io_timeout);
			stall = lqc_max(stall, LQC_MIN_STALL_MS) + c->inflight_wait_ms;
			if (now - c->inflight_sent >= stall)
			{
				char		msg[128];

				snprintf(msg, sizeof(msg),
						 "no answer from the server for %lld ms: the connection is taken as lost",
						 (long long) (now - c->inflight_sent));
				lqc_break(c, msg);
				continue;
			}
			next = lqc_min(next, c->inflight_sent + stall);
		}
		if (c->cstate == CS_CONNECTING)
			next = lqc_min(next, c->conn_deadline);
		else if (c->cstate == CS_DOWN && !c->connect_failed)
			next = lqc_min(next, c->next_reconnect);
		if (c->stop)
			next = lqc_min(next, c->close_deadline);

		/*
		 * After lockqc_wakeup, every waiting call re-checks its cancel flag.
		 * Otherwise each is woken only for its own handle: one condition
		 * variable for all would wake every waiting thread at every event,
		 * which costs the square of their number.
		 */
		if (atomic_exchange(&c->wake_all, false))
		{
			for (lockqc_handle *w = c->handles; w != NULL; w = w->next)
				if (!w->zombie)
					pthread_cond_broadcast(&w->cv);
		}

		fds[0].fd = c->wake[0];
		fds[0].events = POLLIN;
		fds[0].revents = 0;
		if (c->pg != NULL && c->cstate != CS_DOWN && (sock = PQsocket(c->pg)) >= 0)
		{
			fds[1].fd = sock;
			fds[1].revents = 0;
			if (c->cstate == CS_CONNECTING)
				fds[1].events = c->poll_want == PGRES_POLLING_READING ? POLLIN : POLLOUT;
			else
				fds[1].events = POLLIN | (c->want_write ? POLLOUT : 0);
			nfds = 2;
		}
		if (c->canceller != NULL && nfds == 2)
		{
			cfd = nfds;
			fds[cfd].fd = c->canceller->efd;
			fds[cfd].events = POLLIN;
			fds[cfd].revents = 0;
			nfds++;
		}
		pthread_mutex_unlock(&c->mu);
		now = lqc_now();
		(void) poll(fds, nfds, next > now ? (int) lqc_min(next - now, 60000) : 0);
		lqc_drain(c->wake[0]);
		if (cfd >= 0 && atomic_load(&c->canceller->done))
		{
			/* only this thread changes c->canceller */
			lqc_canceller_unref(c->canceller);
			c->canceller = NULL;
		}
		if (c->cstate == CS_CONNECTING && nfds == 2 && fds[1].revents != 0)
		{
			/* only this thread changes cstate and pg: safe without c->mu */
			PostgresPollingStatusType r = PQconnectPoll(c->pg);

			pthread_mutex_lock(&c->mu);
			if (r == PGRES_POLLING_OK)
			{
				PQsetnonblocking(c->pg, 1);
				PQsetNoticeProcessor(c->pg, lqc_ignore_notice, NULL);
				c->cstate = CS_SETUP;
				c->setup_step = 0;
			}
			else if (r == PGRES_POLLING_FAILED)
			{
				char		msg[LQC_ERRLEN];

				lqc_chomp(msg, sizeof(msg), PQerrorMessage(c->pg));
				lqc_connect_failed(c, msg);
			}
			else
				c->poll_want = r;
			continue;
		}
		pthread_mutex_lock(&c->mu);
		if ((c->cstate == CS_SETUP || c->cstate == CS_READY) && c->pg != NULL)
			lqc_collect(c);
	}
	lqc_forget_inflight(c);
	if (c->pg != NULL)
		PQfinish(c->pg);
	c->pg = NULL;
	c->cstate = CS_DOWN;
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void
lqc_free_conn(lockqc_conn *c)
{
	int			i;

	while (c->handles != NULL)
		lqc_unlink(c, c->handles);
	if (c->pg != NULL)
		PQfinish(c->pg);
	for (i = 0; i < SQL_COUNT; i++)
		free(c->sql[i]);
	free(c->conninfo);
	lqc_free_list(c->hosts);
	lqc_free_list(c->hostaddrs);
	lqc_free_list(c->ports);
	for (i = 0; i < 2; i++)
	{
		if (c->wake[i] >= 0)
			close(c->wake[i]);
		if (c->twake[i] >= 0)
			close(c->twake[i]);
	}
	if (c->tfd >= 0)
		close(c->tfd);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->tmu);
	pthread_cond_destroy(&c->ccv);
	free(c);
}

/*
 * lqc_stop_threads ends both threads of a connection nobody else uses any
 * more and frees it.
 */
static void
lqc_stop_threads(lockqc_conn *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	c->close_deadline = lqc_now();
	pthread_mutex_unlock(&c->mu);
	lqc_poke(c);
	pthread_join(c->io_thread, NULL);
	pthread_mutex_lock(&c->tmu);
	c->tstop = true;
	pthread_mutex_unlock(&c->tmu);
	lqc_tpoke(c);
	pthread_join(c->timer_thread, NULL);
	lqc_free_conn(c);
}

lockqc_conn *
lockqc_connect(const char *conninfo, char **errmsg)
{
	lockqc_conn *c = calloc(1, sizeof(*c));
	char		rnd[17];
	char		err[LQC_ERRLEN];
	sigset_t	all;
	sigset_t	old;
	bool		failed;

	if (errmsg != NULL)
		*errmsg = NULL;
	if (c == NULL)
	{
		if (errmsg != NULL)
			*errmsg = strdup("out of memory");
		return NULL;
	}
	c->wake[0] = c->wake[1] = c->twake[0] = c->twake[1] = -1;
	atomic_init(&c->wake_all, false);
	{
		const char *na = getenv("LOCKQC_NO_AWAIT");

		c->no_await = (na != NULL && strcmp(na, "1") == 0);
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->tmu, NULL);
	lqc_init_cond(&c->ccv);
	lqc_random_hex(rnd);
	snprintf(c->channel, sizeof(c->channel), "lockqc_%s", rnd);
	c->io_timeout_ms = LQC_DEFAULT_IO_TIMEOUT_MS;
	c->reconnect_delay = 50;
	c->cstate = CS_DOWN;
	c->initial = true;
	c->tfd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->tfd < 0)
		c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	c->conninfo = strdup(conninfo != NULL ? conninfo : "");
	if (c->conninfo == NULL || pipe2(c->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
		pipe2(c->twake, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		if (errmsg != NULL)
			*errmsg = strdup("out of memory or file descriptors");
		lqc_free_conn(c);
		return NULL;
	}
	if (!lqc_parse_conninfo(c, err, sizeof(err)))
	{
		if (errmsg != NULL)
			*errmsg = strdup(err);
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

	/* the first round over the hosts: each with its own deadline */
	pthread_mutex_lock(&c->mu);
	while (c->cstate != CS_READY && !c->connect_failed)
		pthread_cond_wait(&c->ccv, &c->mu);
	failed = c->connect_failed;
	c->initial = false;
	snprintf(err, sizeof(err), "%s", c->errmsg);
	c->errmsg[0] = '\0';
	c->sqlstate[0] = '\0';
	pthread_mutex_unlock(&c->mu);
	if (failed)
	{
		if (errmsg != NULL)
			*errmsg = strdup(err[0] ? err : "could not connect");
		lqc_stop_threads(c);
		return NULL;
	}
	return c;
}

int
lockqc_set_io_timeout(lockqc_conn *c, int64_t ms)
{
	if (c == NULL || ms <= 0)
		return LOCKQC_EINVAL;
	pthread_mutex_lock(&c->mu);
	c->io_timeout_ms = ms;
	pthread_mutex_unlock(&c->mu);
	lqc_poke(c);
	return LOCKQC_OK;
}

/*
 * lqc_give_up withdraws what an application call no longer wants (c->mu
 * held, the caller keeps its reference): a request never sent is simply
 * dropped; otherwise the handle becomes a zombie the I/O thread cancels by
 * owner (leaving the queue, or releasing a grant that won the race).  When
 * wait is set and the connection is up, the withdrawal is awaited for up to
 * LQC_WITHDRAW_WAIT_MS.
 */
static void
lqc_give_up(lockqc_conn *c, lockqc_handle *h, bool wait)
{
	int64_t		until;

	atomic_store(&h->state, LQC_DONE);
	lqc_disarm(c, h);
	if (!h->linked || h->zombie)
		return;
	if (!h->sent)
	{
		lqc_unlink(c, h);
		return;
	}
	h->zombie = true;
	h->op = OP_CANCEL;
	h->op_done = false;
	h->zombie_until = h->last_sent + lqc_max(h->ttl_ms, h->heartbeat_ms) + 1000;
	lqc_poke(c);
	until = lqc_now() + LQC_WITHDRAW_WAIT_MS;
	while (wait && !h->op_done && h->linked && c->cstate == CS_READY &&
		   lqc_now() < until)
		lqc_cond_wait_until(&h->cv, &c->mu, until);
}

/* lqc_leave ends an application call (c->mu held). */
static void
lqc_leave(lockqc_conn *c)
{
	c->users--;
	if (c->closing)
		pthread_cond_broadcast(&c->ccv);
}

static bool
lqc_cancelled(const lockqc_opts *opts)
{
	if (opts == NULL)
		return false;
	if (opts->cancel_flag != NULL && atomic_load(opts->cancel_flag) != 0)
		return true;
	return opts->cancel != NULL && *opts->cancel != 0;
}

/*
 * lqc_acquire is lockqc_lock (trylock false) and lockqc_trylock: it asks
 * the I/O thread to enqueue (or try) and waits on the handle until the
 * answer, the timeout, a cancel or lockqc_disconnect.  Takes c->mu.
 */
static int
lqc_acquire(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
			lockqc_handle **out, bool trylock)
{
	lockqc_handle *h;
	int64_t		timeout = opts != NULL ? opts->timeout_ms : LOCKQC_WAIT_FOREVER;
	bool		wait = !trylock && timeout != 0;
	int64_t		deadline;
	int			rc = LOCKQC_ERROR;

	if (out != NULL)
		*out = NULL;
	if (c == NULL || out == NULL)
	{
		lqc_set_error(c, false, "", "no connection or no place for the handle");
		return LOCKQC_EINVAL;
	}
	h = lqc_new_handle(c, lock_id, opts);
	if (h == NULL)
		return LOCKQC_EINVAL;

	pthread_mutex_lock(&c->mu);
	if (c->closing)
	{
		lqc_set_error(c, true, "08003", "the connection is being closed");
		pthread_mutex_unlock(&c->mu);
		lqc_unref(h);
		return LOCKQC_ERROR;
	}
	c->users++;
	deadline = !wait ? lqc_now() + c->io_timeout_ms :
		timeout < 0 ? LQC_FOREVER : lqc_now() + timeout;
	lqc_link(c, h);
	h->op = wait ? OP_ENQUEUE : OP_TRY;
	lqc_poke(c);
	for (;;)
	{
		int			st = atomic_load(&h->state);

		if (wait && st == LQC_HELD)
		{
			rc = LOCKQC_OK;
			break;
		}
		if (wait && st == LQC_FAILED)
		{
			lqc_set_error(c, true, h->errstate, "the wait for lock \"%s\" failed: %s",
						  lock_id, h->err);
			rc = LOCKQC_ERROR;
			break;
		}
		if (!wait && h->op_done)
		{
			rc = h->op_rc;
			if (rc == LOCKQC_ERROR)
				lqc_set_error(c, true, h->errstate, "%s", h->err);
			break;
		}
		if (c->closing)
		{
			lqc_set_error(c, true, "08003", "the connection was closed while waiting for lock \"%s\"",
						  lock_id);
			rc = LOCKQC_ERROR;
			break;
		}
		if (lqc_cancelled(opts))
		{
			lqc_set_error(c, true, "", "the wait for lock \"%s\" was cancelled", lock_id);
			rc = LOCKQC_CANCELLED;
			break;
		}
		if (lqc_now() >= deadline)
		{
			if (wait)
			{
				lqc_set_error(c, true, "", "timed out waiting for lock \"%s\"", lock_id);
				rc = LOCKQC_TIMEOUT;
			}
			else
			{
				lqc_set_error(c, true, "08006",
							  "no answer from the server within %lld ms (%s)",
							  (long long) c->io_timeout_ms,
							  c->cstate == CS_READY ? "the connection stalls" : c->errmsg);
				rc = LOCKQC_ERROR;
			}
			break;
		}
		lqc_cond_wait_until(&h->cv, &c->mu, deadline);
	}
	/* a cancel that raced with the grant still cancels */
	if (rc == LOCKQC_OK && wait && lqc_cancelled(opts))
	{
		lqc_set_error(c, true, "", "the wait for lock \"%s\" was cancelled", lock_id);
		rc = LOCKQC_CANCELLED;
	}
	if (!trylock && !wait && rc == LOCKQC_NOT_AVAILABLE)
	{
		lqc_set_error(c, true, "", "lock \"%s\" is not free", lock_id);
		rc = LOCKQC_TIMEOUT;
	}
	if (rc == LOCKQC_OK)
		h->returned = true;
	else						/* (a stalled connection: no waiting) */
		lqc_give_up(c, h, rc == LOCKQC_TIMEOUT || rc == LOCKQC_CANCELLED);
	lqc_leave(c);
	pthread_mutex_unlock(&c->mu);
	if (rc != LOCKQC_OK)
	{
		lqc_unref(h);
		return rc;
	}
	*out = h;
	return LOCKQC_OK;
}

int
lockqc_lock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
			lockqc_handle **out)
{
	return lqc_acquire(c, lock_id, opts, out, false);
}

int
lockqc_trylock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
			   lockqc_handle **out)
{
	return lqc_acquire(c, lock_id, opts, out, true);
}

/*
 * lockqc_unlock asks the I/O thread to release (with the token, so it
 * never ends a later grant) and waits for the answer for at most the I/O
 * timeout, and not past the lease's local deadline (a second when the
 * lease is gone anyway, or nearly so).  If none comes, the
 * handle stays behind as a zombie that is released as soon as possible,
 * until the lease would have ended.  Takes c->mu.
 */
int
lockqc_unlock(lockqc_handle *h)
{
	lockqc_conn *c;
	int			st;
	int			rc;
	int64_t		now;
	int64_t		until;

	if (h == NULL)
		return LOCKQC_EINVAL;
	c = h->c;
	pthread_mutex_lock(&c->mu);
	c->users++;
	lqc_disarm(c, h);
	st = atomic_exchange(&h->state, LQC_DONE);
	now = lqc_now();
	h->op = OP_RELEASE;
	h->op_done = false;
	h->zombie = true;
	h->zombie_until = lqc_max(now + c->io_timeout_ms, atomic_load(&h->deadline));
	if (!h->linked)
		lqc_link(c, h);
	lqc_poke(c);
	/*
	 * A held lease waits for the answer up to the I/O timeout, but not
	 * past its local deadline (at least LQC_WITHDRAW_WAIT_MS): once the
	 * lease has ended the release changes nothing, and a caller that
	 * stopped its work because renewals failed (lockq run) should not be
	 * kept another I/O timeout by a server that does not answer.  The I/O
	 * thread goes on trying after we return, until zombie_until.
	 */
	until = now + (st == LQC_HELD ?
				   lqc_min(c->io_timeout_ms,
						   lqc_max(atomic_load(&h->deadline) - now, LQC_WITHDRAW_WAIT_MS)) :
				   lqc_min(c->io_timeout_ms, LQC_WITHDRAW_WAIT_MS));
	while (!h->op_done && !c->closing && lqc_now() < until)
		lqc_cond_wait_until(&h->cv, &c->mu, until);
	if (h->op_done)
	{
		rc = h->op_rc;
		if (rc == LOCKQC_OK && st != LQC_HELD)
			rc = LOCKQC_LOST;
		if (rc == LOCKQC_ERROR)
			lqc_set_error(c, true, h->errstate, "could not release lock \"%s\": %s",
						  h->lock_id, h->err);
	}
	else
	{
		lqc_set_error(c, true, "08006",
					  "the server did not confirm the release of lock \"%s\" in time (%s); it is retried until the lease ends",
					  h->lock_id, c->errmsg[0] ? c->errmsg : "no answer");
		rc = LOCKQC_ERROR;
	}
	lqc_leave(c);
	pthread_mutex_unlock(&c->mu);
	lqc_unref(h);
	return rc;
}

/*
 * lockqc_disconnect hands what is still held or queued to the I/O thread
 * to release or withdraw, makes the calls blocked on c return, waits up to
 * LQC_CLOSE_WAIT_MS for the clean-up and frees everything.  Called from a
 * lost-lease callback (the timer thread), it leaves the freeing to that
 * thread once the callback returns.
 */
void
lockqc_disconnect(lockqc_conn *c)
{
	bool		in_timer;
	lockqc_handle *h;
	lockqc_handle *hn;
	int64_t		now;

	if (c == NULL)
		return;
	in_timer = pthread_equal(pthread_self(), c->timer_thread);
	pthread_mutex_lock(&c->mu);
	if (c->closing)
	{
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->closing = true;
	now = lqc_now();
	for (h = c->handles; h != NULL; h = hn)
	{
		int			st;

		hn = h->next;
		pthread_cond_broadcast(&h->cv);
		if (h->zombie || !h->returned)
			continue;			/* a call is busy with it */
		st = atomic_exchange(&h->state, LQC_DONE);
		lqc_disarm(c, h);
		h->zombie = true;
		h->op_done = false;
		h->op = (st == LQC_HELD || st == LQC_LOST) ? OP_RELEASE : OP_CANCEL;
		h->zombie_until = now + LQC_CLOSE_WAIT_MS;
		lqc_unref(h);			/* the application's reference */
	}
	while (c->users > 0)
		pthread_cond_wait(&c->ccv, &c->mu);
	c->stop = true;
	c->close_deadline = lqc_now() + LQC_CLOSE_WAIT_MS;
	pthread_mutex_unlock(&c->mu);
	lqc_poke(c);
	pthread_join(c->io_thread, NULL);

	pthread_mutex_lock(&c->tmu);
	c->tstop = true;
	c->timer_frees = in_timer;
	pthread_mutex_unlock(&c->tmu);
	lqc_tpoke(c);
	if (!in_timer)
	{
		pthread_join(c->timer_thread, NULL);
		lqc_free_conn(c);
	}
}

/*
 * lockqc_forget drops the application's handle and sends nothing: the
 * grant is left to whoever else holds it under the same owner (takes
 * c->mu).
 */
int
lockqc_extend(lockqc_handle *h, int64_t ttl_ms)
{
	lockqc_conn *c;
	int64_t		now;
	int64_t		until;
	int			rc;

	if (h == NULL || ttl_ms <= 0)
		return LOCKQC_EINVAL;
	c = h->c;
	pthread_mutex_lock(&c->mu);
	now = lqc_now();
	if (atomic_load(&h->state) != LQC_HELD || atomic_load(&h->deadline) <= now)
	{
		pthread_mutex_unlock(&c->mu);
		return LOCKQC_LOST;
	}
	if (h->op != OP_NONE)
	{
		lqc_set_error(c, true, "", "lock \"%s\" has a request in progress", h->lock_id);
		pthread_mutex_unlock(&c->mu);
		return LOCKQC_EINVAL;
	}
	c->users++;
	h->ext_ttl_ms = ttl_ms;
	h->op = OP_EXTEND;
	h->op_done = false;
	lqc_poke(c);
	/* as a renewal: within the I/O timeout and the lease's local deadline */
	until = lqc_min(now + c->io_timeout_ms, atomic_load(&h->deadline));
	while (!h->op_done && !c->closing && lqc_now() < until)
		lqc_cond_wait_until(&h->cv, &c->mu, until);
	if (h->op_done)
	{
		rc = h->op_rc;
		if (rc == LOCKQC_ERROR)
			lqc_set_error(c, true, h->errstate, "could not extend the lease of lock \"%s\": %s",
						  h->lock_id, h->err);
	}
	else
	{
		/* not answered in time: the renewal is not sent again */
		if (h->op == OP_EXTEND)
			h->op = OP_NONE;
		lqc_set_error(c, true, "08006",
					  "the server did not answer the extension of lock \"%s\" in time (%s)",
					  h->lock_id, c->errmsg[0] ? c->errmsg : "no answer");
		rc = LOCKQC_ERROR;
	}
	lqc_leave(c);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void
lockqc_forget(lockqc_handle *h)
{
	lockqc_conn *c;

	if (h == NULL)
		return;
	c = h->c;
	pthread_mutex_lock(&c->mu);
	lqc_disarm(c, h);
	atomic_store(&h->state, LQC_DONE);
	lqc_unlink(c, h);
	pthread_mutex_unlock(&c->mu);
	lqc_unref(h);
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

int64_t
lockqc_remaining_ms(const lockqc_handle *h)
{
	lockqc_handle *m = (lockqc_handle *) h;
	int64_t		left;

	if (h == NULL || atomic_load(&m->state) != LQC_HELD)
		return 0;
	left = atomic_load(&m->deadline) - lqc_now();
	return left > 0 ? left : 0;
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

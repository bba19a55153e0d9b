/*-------------------------------------------------------------------------
 *
 * fuzz_cli.c
 *		libFuzzer target for the lockq CLI's command-line parsing: the
 *		global options, the subcommands, getopt_long's options of run,
 *		status and release, the durations (--ttl, --timeout, --grace) and
 *		the --token check, all from client/lockq.c, unmodified.
 *
 * The input is the argument list, one argument per line (argv[0] is
 * "lockq").  lockq.c is compiled into this file with its boundaries
 * replaced by stubs (macros below): exit() returns here by longjmp;
 * lockqc_connect, lockqc_lock and lockqc_trylock record what the CLI asks
 * for and pretend to succeed; fork() records the command and fails, so
 * run_command returns without running anything; the libpq calls of status
 * and release record their parameters and return a canned answer; signal
 * handlers are not installed; output goes to /dev/null.  getopt_long is
 * reset before each input to the state of a fresh process.
 *
 * Checks, beyond "no crash, no undefined behaviour, no leak":
 *	- lockq ends before connecting only with 0 (--help) or 64 (usage);
 *	- run: the ttl is positive and the timeout positive or unset, both at
 *	  most ten years, the grace period non-negative; each one that is not
 *	  the default (for the grace: 10 s, or what
 *	  fits in half the ttl) is a duration the input gave (an argument, or
 *	  the part after "=" of --opt=value); --no-wait never comes with a
 *	  timeout; with -c the command is /bin/sh -c and an input argument; the
 *	  lock id, the owner and the conninfo are (in) input arguments; the
 *	  command is exactly the input's trailing arguments, right after the
 *	  lock id or after a "--" right after it;
 *	- release: a lock id and an owner are given; a --token the CLI accepts
 *	  is also accepted by PostgreSQL's int8 input (as the server will
 *	  parse it), so it never turns into a server error;
 *	- status: at most one lock id, an input argument;
 *	- force-release: exactly one lock id, an input argument.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/fuzz/fuzz_cli.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "fuzz_common.h"

#define MAX_ARGS	64
#define LIMIT_MS	INT64_C(316224000000)	/* ten years, see fuzz_duration.c */

/* What the CLI did with one input. */
static struct
{
	jmp_buf		jmp;
	int			exit_code;
	bool		connected;		/* lockqc_connect called */
	const char *conninfo;
	bool		locked;			/* lockqc_lock or lockqc_trylock called */
	bool		no_wait;		/* ... and it was lockqc_trylock */
	const char *lock_id;
	lockqc_opts opts;
	bool		forked;			/* run_command reached fork() */
	char	  **cmd;			/* points into cmd_copy */
	int64_t		grace_ms;
	int			queries;		/* PQexecParams calls */
	int			nparams;		/* of the last one */
	const char *params[3];
	bool		getopt_fresh;	/* the next getopt_long call starts afresh */
} cap;

static FILE *lqf_null;
static char *lqf_argv[MAX_ARGS + 1];	/* what lockq's main() gets (and permutes) */
static char *lqf_cmd_copy[MAX_ARGS + 4];	/* the command fork() was given: with
											 * -c it is an array on cmd_run's
											 * stack, gone when it is checked */
static char lqf_fake_conn;
static char lqf_fake_handle;
static char lqf_fake_pg;
static char lqf_fake_setup_res;
static char lqf_fake_res;
static char lqf_public[] = "public";
static char lqf_true[] = "t";
static char lqf_empty[] = "";

/* stubs for lockq.c's boundaries (defined after it) */
static _Noreturn void lqf_exit(int code);
static int	lqf_getopt_long(int argc, char *const *argv, const char *optstring,
							const struct option *longopts, int *longindex);
static int	lqf_pipe2(int fds[2], int flags);
static int	lqf_sigaction(int sig, const struct sigaction *sa, struct sigaction *old);
static __attribute__((unused)) int lqf_setenv(const char *name, const char *value, int overwrite);
static pid_t lqf_fork(char **argv, int64_t grace_ms);
static lockqc_conn *lqf_lockqc_connect(const char *conninfo, char **errmsg);
static void lqf_lockqc_disconnect(lockqc_conn *c);
static int	lqf_lockqc_lock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
							lockqc_handle **out);
static int	lqf_lockqc_trylock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
							   lockqc_handle **out);
static int	lqf_lockqc_unlock(lockqc_handle *h);
static int64_t lqf_lockqc_token(const lockqc_handle *h);
static const char *lqf_lockqc_lock_id(const lockqc_handle *h);
static const char *lqf_lockqc_owner(const lockqc_handle *h);
static const char *lqf_lockqc_errmsg(const lockqc_conn *c);
static void lqf_lockqc_wakeup(lockqc_conn *c);
static const char *lqf_lockqc_sqlstate(const lockqc_conn *c);
static PGconn *lqf_PQconnectdb(const char *conninfo);
static PGconn *lqf_PQconnectdbParams(const char *const *kw, const char *const *val, int expand);
static ConnStatusType lqf_PQstatus(const PGconn *pg);
static char *lqf_PQerrorMessage(const PGconn *pg);
static void lqf_PQfinish(PGconn *pg);
static PGresult *lqf_PQexecParams(PGconn *pg, const char *command, int nParams,
								  const Oid *paramTypes, const char *const *paramValues,
								  const int *paramLengths, const int *paramFormats,
								  int resultFormat);
static ExecStatusType lqf_PQresultStatus(const PGresult *res);
static char *lqf_PQresultErrorMessage(const PGresult *res);
static int	lqf_PQntuples(const PGresult *res);
static int	lqf_PQgetisnull(const PGresult *res, int row, int col);
static char *lqf_PQgetvalue(const PGresult *res, int row, int col);
static void lqf_PQclear(PGresult *res);
static char *lqf_PQescapeIdentifier(PGconn *pg, const char *str, size_t len);
static void lqf_PQfreemem(void *p);
int			lockq_main(int argc, char **argv);

#define main lockq_main
#define exit(code) lqf_exit(code)
#define getopt_long lqf_getopt_long
#define pipe2 lqf_pipe2
#define sigaction(sig, sa, old) lqf_sigaction(sig, sa, old)
#define setenv lqf_setenv
/* run_command's own argv and grace_ms: what it was asked to run */
#define fork() lqf_fork(argv, grace_ms)
#define lockqc_connect lqf_lockqc_connect
#define lockqc_disconnect lqf_lockqc_disconnect
#define lockqc_lock lqf_lockqc_lock
#define lockqc_trylock lqf_lockqc_trylock
#define lockqc_unlock lqf_lockqc_unlock
#define lockqc_token lqf_lockqc_token
#define lockqc_lock_id lqf_lockqc_lock_id
#define lockqc_owner lqf_lockqc_owner
#define lockqc_errmsg lqf_lockqc_errmsg
#define lockqc_wakeup lqf_lockqc_wakeup
#define lockqc_sqlstate lqf_lockqc_sqlstate
#define PQconnectdb lqf_PQconnectdb
#define PQconnectdbParams lqf_PQconnectdbParams
#define PQstatus lqf_PQstatus
#define PQerrorMessage lqf_PQerrorMessage
#define PQfinish lqf_PQfinish
#define PQexecParams lqf_PQexecParams
#define PQresultStatus lqf_PQresultStatus
#define PQresultErrorMessage lqf_PQresultErrorMessage
#define PQntuples lqf_PQntuples
#define PQgetisnull lqf_PQgetisnull
#define PQgetvalue lqf_PQgetvalue
#define PQclear lqf_PQclear
#define PQescapeIdentifier lqf_PQescapeIdentifier
#define PQfreemem lqf_PQfreemem
#undef stdout
#undef stderr
#define stdout lqf_null
#define stderr lqf_null
#define printf(...) fprintf(lqf_null, __VA_ARGS__)
#define perror(s) ((void) (s))

#include "../lockq.c"

#undef main
#undef exit
#undef getopt_long
#undef pipe2
#undef sigaction
#undef setenv
#undef fork
#undef stdout
#undef stderr
#define stdout stdout
#define stderr stderr
#undef printf
#undef perror

/*
 * The stubs.
 */
static _Noreturn void
lqf_exit(int code)
{
	cap.exit_code = code;
	longjmp(cap.jmp, 1);
}

/*
 * lqf_getopt_long: the first call for an input starts from optind 0,
 * which makes glibc forget everything from the previous input (its
 * position inside a cluster of short options, the ordering taken from
 * "+" in optstring).  A fresh process starts that way too: lockq.c sets
 * optind to 1 in an uninitialized getopt.
 */
static int
lqf_getopt_long(int argc, char *const *argv, const char *optstring,
				const struct option *longopts, int *longindex)
{
	if (cap.getopt_fresh)
	{
		cap.getopt_fresh = false;
		if (optind == 1)
			optind = 0;
	}
	return getopt_long(argc, argv, optstring, longopts, longindex);
}

static int
lqf_pipe2(int fds[2], int flags)
{
	fds[0] = fds[1] = -1;
	return 0;
}

static int
lqf_sigaction(int sig, const struct sigaction *sa, struct sigaction *old)
{
	return 0;
}

static __attribute__((unused)) int
lqf_setenv(const char *name, const char *value, int overwrite)
{
	lqf_check(name != NULL && value != NULL, "setenv(%s, NULL)", name ? name : "NULL");
	return 0;
}

static pid_t
lqf_fork(char **argv, int64_t grace_ms)
{
	cap.forked = true;
	{
		int			n = 0;

		/* copied: argv may live on a stack frame that is gone by check_run */
		while (n < MAX_ARGS + 3 && argv[n] != NULL)
		{
			lqf_cmd_copy[n] = argv[n];
			n++;
		}
		lqf_cmd_copy[n] = NULL;
		cap.cmd = lqf_cmd_copy;
	}
	cap.grace_ms = grace_ms;
	errno = EAGAIN;
	return -1;
}

static lockqc_conn *
lqf_lockqc_connect(const char *conninfo, char **errmsg)
{
	cap.connected = true;
	cap.conninfo = conninfo;
	if (errmsg != NULL)
		*errmsg = NULL;
	return (lockqc_conn *) &lqf_fake_conn;
}

static void
lqf_lockqc_disconnect(lockqc_conn *c)
{
	lqf_check(c == (lockqc_conn *) &lqf_fake_conn, "disconnect of an unknown connection");
}

static int
lqf_lock_common(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
				lockqc_handle **out, bool no_wait)
{
	lqf_check(c == (lockqc_conn *) &lqf_fake_conn && opts != NULL && out != NULL,
			  "lock called with an unknown connection or without options");
	cap.locked = true;
	cap.no_wait = no_wait;
	cap.lock_id = lock_id;
	cap.opts = *opts;
	*out = (lockqc_handle *) &lqf_fake_handle;
	return LOCKQC_OK;
}

static int
lqf_lockqc_lock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
				lockqc_handle **out)
{
	return lqf_lock_common(c, lock_id, opts, out, false);
}

static int
lqf_lockqc_trylock(lockqc_conn *c, const char *lock_id, const lockqc_opts *opts,
				   lockqc_handle **out)
{
	return lqf_lock_common(c, lock_id, opts, out, true);
}

static int
lqf_lockqc_unlock(lockqc_handle *h)
{
	return LOCKQC_OK;
}

static int64_t
lqf_lockqc_token(const lockqc_handle *h)
{
	return 42;
}

static const char *
lqf_lockqc_lock_id(const lockqc_handle *h)
{
	return cap.lock_id;
}

static const char *
lqf_lockqc_owner(const lockqc_handle *h)
{
	return cap.opts.owner != NULL ? cap.opts.owner : "host:1:1:0123456789abcdef";
}

static const char *
lqf_lockqc_errmsg(const lockqc_conn *c)
{
	return "stub";
}

static void
lqf_lockqc_wakeup(lockqc_conn *c)
{
}

static const char *
lqf_lockqc_sqlstate(const lockqc_conn *c)
{
	return "";
}

/* the conninfo is the value of "dbname" (expanded) */
static PGconn *
lqf_PQconnectdbParams(const char *const *kw, const char *const *val, int expand)
{
	const char *conninfo = "";

	for (int i = 0; kw[i] != NULL; i++)
		if (strcmp(kw[i], "dbname") == 0)
			conninfo = val[i];
	lqf_check(expand == 1, "dbname not expanded");
	return lqf_PQconnectdb(conninfo);
}

static PGconn *
lqf_PQconnectdb(const char *conninfo)
{
	cap.connected = true;
	cap.conninfo = conninfo;
	return (PGconn *) &lqf_fake_pg;
}

static ConnStatusType
lqf_PQstatus(const PGconn *pg)
{
	return CONNECTION_OK;
}

static char *
lqf_PQerrorMessage(const PGconn *pg)
{
	return lqf_empty;
}

static void
lqf_PQfinish(PGconn *pg)
{
}

/*
 * lqf_PQexecParams: the first statement (pg_connect's, no parameters)
 * answers with the schema; the next one is the subcommand's, whose
 * parameters are recorded.
 */
static PGresult *
lqf_PQexecParams(PGconn *pg, const char *command, int nParams,
				 const Oid *paramTypes, const char *const *paramValues,
				 const int *paramLengths, const int *paramFormats,
				 int resultFormat)
{
	int			i;

	if (cap.queries++ == 0)
		return (PGresult *) &lqf_fake_setup_res;
	lqf_check(nParams >= 0 && nParams <= 3, "%d parameters", nParams);
	cap.nparams = nParams;
	for (i = 0; i < nParams; i++)
		cap.params[i] = paramValues[i];
	return (PGresult *) &lqf_fake_res;
}

static ExecStatusType
lqf_PQresultStatus(const PGresult *res)
{
	return PGRES_TUPLES_OK;
}

static char *
lqf_PQresultErrorMessage(const PGresult *res)
{
	return lqf_empty;
}

static int
lqf_PQntuples(const PGresult *res)
{
	return 0;
}

static int
lqf_PQgetisnull(const PGresult *res, int row, int col)
{
	return 0;
}

/*
 * lqf_PQgetvalue: pg_connect's statement reads the schema, the settings and
 * the installed extension's version (column 4: the oldest this client
 * accepts); every other answer is "t".
 */
static char *
lqf_PQgetvalue(const PGresult *res, int row, int col)
{
	static char extversion[] = LOCKQC_MIN_EXTVERSION;

	if (res != (PGresult *) &lqf_fake_setup_res)
		return lqf_true;
	return col == 4 ? extversion : lqf_public;
}

static void
lqf_PQclear(PGresult *res)
{
}

static char *
lqf_PQescapeIdentifier(PGconn *pg, const char *str, size_t len)
{
	char	   *s = malloc(len + 3);

	if (s == NULL)
		abort();
	s[0] = '"';
	memcpy(s + 1, str, len);
	s[len + 1] = '"';
	s[len + 2] = '\0';
	return s;
}

static void
lqf_PQfreemem(void *p)
{
	free(p);
}

/*
 * The checks.
 */

/* arg_index is the input argument p is (or points into), or -1. */
static int
arg_index(char **args, int nargs, const char *p, bool inside)
{
	int			i;

	for (i = 0; i < nargs; i++)
	{
		if (p == args[i])
			return i;
		if (inside && p > args[i] && p <= args[i] + strlen(args[i]))
			return i;
	}
	return -1;
}

/*
 * arg_copied is the input argument that p is a copy of, or of whose end
 * (-dVALUE, --dbname=VALUE), or -1: a -d argument with a password is
 * copied and the argument overwritten.
 */
static int
arg_copied(char **args, int nargs, const char *p)
{
	size_t		n = strlen(p);
	int			i;

	for (i = 0; i < nargs; i++)
	{
		size_t		len = strlen(args[i]);

		if (len >= n && strcmp(args[i] + len - n, p) == 0)
			return i;
	}
	return -1;
}

/*
 * given_duration: some argument (or its part after "=", or after a short
 * option's letter) parses to ms.
 */
static bool
given_duration(char **args, int nargs, int64_t ms)
{
	int			i;
	int64_t		v;

	for (i = 1; i < nargs; i++)
	{
		const char *eq = strchr(args[i], '=');

		if (lockqc_parse_duration(args[i], &v) == 0 && v == ms)
			return true;
		if (eq != NULL && lockqc_parse_duration(eq + 1, &v) == 0 && v == ms)
			return true;
		/* a short option with its value attached: -w2.5, or -vw2.5 */
		if (args[i][0] == '-' && args[i][1] != '-' && args[i][1] != '\0')
			for (size_t j = 2; args[i][j - 1] != '\0'; j++)
				if (lockqc_parse_duration(args[i] + j, &v) == 0 && v == ms)
					return true;
	}
	return false;
}

/*
 * pg_int8_ok: would PostgreSQL's int8 input accept s?  (pg_strtoint64:
 * spaces, an optional sign, digits, spaces; within the int64 range.)
 */
static bool
pg_int8_ok(const char *s)
{
	const char *p = s;
	bool		neg = false;
	uint64_t	v = 0;
	uint64_t	max;

	while (*p && isspace((unsigned char) *p))
		p++;
	if (*p == '-' || *p == '+')
		neg = (*p++ == '-');
	if (!isdigit((unsigned char) *p))
		return false;
	max = neg ? (uint64_t) INT64_MAX + 1 : (uint64_t) INT64_MAX;
	for (; isdigit((unsigned char) *p); p++)
	{
		unsigned	d = (unsigned) (*p - '0');

		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	while (*p && isspace((unsigned char) *p))
		p++;
	return *p == '\0';
}

static void
check_run(char **args, int nargs)
{
	int			lock_at = cap.lock_id ? arg_index(args, nargs, cap.lock_id, false) : -1;
	int			m = 0;
	int			i;

	lqf_check(lock_at > 0, "the lock id is not an input argument");
	lqf_check(cap.opts.ttl_ms > 0 && cap.opts.ttl_ms <= LIMIT_MS, "ttl %" PRId64, cap.opts.ttl_ms);
	lqf_check(cap.opts.ttl_ms == 30000 || given_duration(args, nargs, cap.opts.ttl_ms),
			  "ttl %" PRId64 " ms is not in the input", cap.opts.ttl_ms);
	lqf_check(cap.opts.timeout_ms == -1 ||
			  (cap.opts.timeout_ms > 0 && cap.opts.timeout_ms <= LIMIT_MS &&
			   given_duration(args, nargs, cap.opts.timeout_ms)),
			  "timeout %" PRId64, cap.opts.timeout_ms);
	lqf_check(!cap.no_wait || cap.opts.timeout_ms == -1, "--no-wait with a timeout");
	lqf_check(cap.opts.owner == NULL || arg_index(args, nargs, cap.opts.owner, true) > 0,
			  "the owner is not from the input");
	lqf_check(cap.opts.on_lost != NULL && cap.opts.cancel_flag != NULL,
			  "no lost-lease callback or cancel flag");
	lqf_check(cap.forked, "the lock was granted but no command was run");
	/* the default grace: 10 s, or what fits in half the ttl */
	lqf_check(cap.grace_ms >= 0 && cap.grace_ms <= LIMIT_MS &&
			  (cap.grace_ms <= 10000 || given_duration(args, nargs, cap.grace_ms)),
			  "grace %" PRId64, cap.grace_ms);

	/* -c STR: /bin/sh -c STR, STR from the input */
	if (cap.cmd[0] != NULL && strcmp(cap.cmd[0], "/bin/sh") == 0 && cap.cmd[1] != NULL &&
		strcmp(cap.cmd[1], "-c") == 0 && cap.cmd[2] != NULL && cap.cmd[3] == NULL &&
		arg_index(args, nargs, cap.cmd[2], true) > 0)
		return;

	/* the command: exactly the trailing arguments, after LOCK [--] */
	while (m < nargs && cap.cmd[m] != NULL)
		m++;
	lqf_check(m >= 1 && cap.cmd[m] == NULL, "an empty or unterminated command (%d)", m);
	for (i = 0; i < m; i++)
		lqf_check(cap.cmd[i] == args[nargs - m + i],
				  "command word %d is not input argument %d", i, nargs - m + i);
	lqf_check(lock_at == nargs - m - 1 ||
			  (lock_at == nargs - m - 2 && strcmp(args[lock_at + 1], "--") == 0),
			  "the lock id (argument %d) is not right before the command (argument %d)",
			  lock_at, nargs - m);
}

static void
check_release(char **args, int nargs)
{
	lqf_check(cap.nparams == 3, "release sent %d parameters", cap.nparams);
	lqf_check(cap.params[0] != NULL && arg_index(args, nargs, cap.params[0], false) > 0,
			  "release without a lock id from the input");
	lqf_check(cap.params[1] != NULL && arg_index(args, nargs, cap.params[1], true) > 0,
			  "release without an owner from the input");
	if (cap.params[2] != NULL)
		lqf_check(pg_int8_ok(cap.params[2]) && arg_index(args, nargs, cap.params[2], true) > 0,
				  "token \"%s\" accepted by lockq, not by int8", cap.params[2]);
}

int			LLVMFuzzerInitialize(int *argc, char ***argv);
int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	lqf_null = fopen("/dev/null", "w");
	if (lqf_null == NULL)
		abort();
	unsetenv("POSIXLY_CORRECT");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *args[MAX_ARGS + 1];
	char	   *given[MAX_ARGS + 1] = {NULL};
	int			nargs = 1;
	size_t		start = 0;
	size_t		i;
	volatile int rc = -1;
	const char *sub;

	/* "lockq", then one argument per line */
	args[0] = strdup("lockq");
	for (i = 0; size > 0 && i <= size && nargs < MAX_ARGS; i++)
	{
		if (i == size || data[i] == '\n')
		{
			if (i == size && i == start && nargs > 1)
				break;			/* a final newline ends the last argument */
			args[nargs++] = lqf_cstring(data + start, i - start);
			start = i + 1;
		}
	}
	args[nargs] = NULL;
	memcpy(lqf_argv, args, sizeof(lqf_argv));
	/* as given: main() overwrites a -d argument with a password */
	for (i = 0; i < (size_t) nargs; i++)
		given[i] = lqf_cstring((const uint8_t *) args[i], strlen(args[i]));

	memset(&cap, 0, sizeof(cap));
	cap.exit_code = -1;
	cap.getopt_fresh = true;
	opterr = 0;					/* getopt's own messages would go to stderr */
	got_signal = first_signal = 0;
	atomic_store(&cancel_wait, 0);
	atomic_store(&lease_lost, 0);
	foreground = false;
	conn = NULL;
	if (setjmp(cap.jmp) == 0)
		rc = lockq_main(nargs, lqf_argv);

	if (cap.exit_code >= 0)
		lqf_check(cap.exit_code == 0 || cap.exit_code == 64,
				  "lockq exited with %d before connecting", cap.exit_code);
	else
		lqf_check(rc == 0 || rc == 64 || cap.connected,
				  "lockq returned %d without connecting", rc);

	/* the subcommand, as main() finds it after the global options */
	sub = NULL;
	for (i = 1; i < (size_t) nargs; i++)
	{
		if (strcmp(args[i], "-d") == 0 || strcmp(args[i], "--dbname") == 0)
		{
			i++;
			continue;
		}
		sub = args[i];
		break;
	}
	if (cap.connected)
	{
		lqf_check(sub != NULL, "connected without a subcommand");
		lqf_check(cap.conninfo == NULL || cap.conninfo[0] == '\0' ||
				  arg_index(args, nargs, cap.conninfo, true) > 0 ||
				  arg_copied(given, nargs, cap.conninfo) > 0,
				  "the conninfo is not from the input");
	}
	if (cap.locked)
	{
		lqf_check(strcmp(sub, "run") == 0, "%s took a lock", sub);
		check_run(args, nargs);
	}
	else if (cap.queries > 1 && strcmp(sub, "release") == 0)
		check_release(args, nargs);
	else if (cap.queries > 1)
	{
		lqf_check((strcmp(sub, "status") == 0 || strcmp(sub, "force-release") == 0) &&
				  cap.nparams == 1,
				  "%s queried with %d parameters", sub, cap.nparams);
		lqf_check(cap.params[0] == NULL || arg_index(args, nargs, cap.params[0], false) > 0,
				  "%s of a lock id not from the input", sub);
		lqf_check(strcmp(sub, "status") == 0 || cap.params[0] != NULL,
				  "force-release without a lock id");
	}

	for (i = 0; i < (size_t) nargs; i++)
	{
		free(args[i]);
		free(given[i]);
	}
	return 0;
}

/*-------------------------------------------------------------------------
 *
 * lockq.c
 *		The lockq command-line tool: run a command under a cluster-wide
 *		lock (like flock(1) or etcdctl lock), show locks, release one.
 *
 *	lockq run [--ttl D] [--timeout D | --no-wait] [--owner O] [--grace D]
 *			  [-d CONNINFO] LOCK -- COMMAND [ARG...]
 *	lockq status [-d CONNINFO] [--json] [LOCK]
 *	lockq release [-d CONNINFO] LOCK --owner O [--token T]
 *
 * Copyright (c) 2026, lockq developers
 *
 * IDENTIFICATION
 *		client/lockq.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"

/* Exit codes (documented in the README and in --help). */
#define EXIT_NOT_HELD		1		/* release: the owner did not hold it */
#define EXIT_USAGE			64		/* bad command line */
#define EXIT_CONNECTION		69		/* could not reach the lock service */
#define EXIT_TIMEOUT		75		/* not acquired: timeout, or --no-wait */
#define EXIT_LOST			76		/* lease lost; the command was stopped */
#define EXIT_INTERRUPTED	130		/* interrupted while waiting */

static const char *progname = "lockq";

static volatile sig_atomic_t got_signal = 0;	/* last signal received */
static volatile sig_atomic_t cancel_wait = 0;	/* stop waiting for the lock */
static volatile sig_atomic_t lease_lost = 0;
static int	event_pipe[2] = {-1, -1};
static lockqc_conn *conn = NULL;

static void
usage(FILE *f)
{
	fprintf(f,
			"Usage:\n"
			"  %s run [OPTIONS] LOCK -- COMMAND [ARG...]\n"
			"      Wait for LOCK (first come, first served), run COMMAND while holding\n"
			"      it, renewing the lease, and release it when COMMAND exits.\n"
			"      COMMAND gets LOCKQ_LOCK, LOCKQ_TOKEN and LOCKQ_OWNER in its\n"
			"      environment.  If the lease is lost, COMMAND gets SIGTERM (and\n"
			"      SIGKILL after the grace period).\n"
			"        --ttl D         lease length (default 30s)\n"
			"        --timeout D     give up after waiting D\n"
			"        --no-wait       give up at once if the lock is not free\n"
			"        --owner O       owner name (default: host:pid:thread:random)\n"
			"        --grace D       time between SIGTERM and SIGKILL (default 10s)\n"
			"  %s status [--json] [LOCK]\n"
			"      Show holders and the ordered queue of every lock (or of LOCK).\n"
			"  %s release LOCK --owner O [--token T]\n"
			"      Release LOCK held by owner O (with token T, if given).\n"
			"\n"
			"Common options:\n"
			"  -d, --dbname CONNINFO   libpq connection string or URI (default: PG*\n"
			"                          environment variables)\n"
			"  -h, --help              show this help\n"
			"\n"
			"Durations: 500ms, 30s, 1.5s, 5m, 1h (a bare number is seconds).\n"
			"\n"
			"Exit status:\n"
			"  run:     COMMAND's exit status (128+N if killed by signal N), or\n"
			"           %d  not acquired (timeout, or --no-wait and the lock was busy)\n"
			"           %d  the lease was lost while COMMAND ran (COMMAND was stopped)\n"
			"           %d interrupted while waiting (nothing is left queued)\n"
			"  release: 0 released, %d the owner did not hold the lock\n"
			"  all:     %d usage error, %d cannot connect or server error\n",
			progname, progname, progname, EXIT_TIMEOUT, EXIT_LOST,
			EXIT_INTERRUPTED, EXIT_NOT_HELD, EXIT_USAGE, EXIT_CONNECTION);
}

static void
die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", progname);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry \"%s --help\" for more information.\n", progname);
	exit(EXIT_USAGE);
}

static int64_t
parse_duration_arg(const char *opt, const char *val)
{
	int64_t		ms;

	if (lockqc_parse_duration(val, &ms) != 0)
	{
		fprintf(stderr, "%s: invalid duration for %s: \"%s\"\n", progname, opt, val);
		exit(EXIT_USAGE);
	}
	return ms;
}

/* Signal handlers and the lost-lease callback only set flags and poke. */
static void
poke_main(void)
{
	int			saved = errno;
	ssize_t		rc = write(event_pipe[1], "x", 1);

	(void) rc;
	errno = saved;
}

static void
on_signal(int sig)
{
	got_signal = sig;
	cancel_wait = 1;
	if (conn != NULL)
		lockqc_wakeup(conn);
	poke_main();
}

static void
on_child(int sig)
{
	poke_main();
}

static void
on_lost(lockqc_handle *h, void *arg)
{
	lease_lost = 1;
	poke_main();
}

static void
set_handler(int sig, void (*fn) (int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;			/* no SA_RESTART: poll must wake up */
	sigaction(sig, &sa, NULL);
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * run_command forks and execs argv with the lock's environment, and waits
 * for it, stopping it if the lease is lost.  Returns lockq's exit status.
 */
static int
run_command(lockqc_handle *h, char **argv, int64_t grace_ms)
{
	char		token[32];
	pid_t		child;
	int			status = 0;
	int64_t		kill_at = 0;
	bool		terminated = false;

	snprintf(token, sizeof(token), "%" PRId64, lockqc_token(h));
	setenv("LOCKQ_LOCK", lockqc_lock_id(h), 1);
	setenv("LOCKQ_TOKEN", token, 1);
	setenv("LOCKQ_OWNER", lockqc_owner(h), 1);

	child = fork();
	if (child < 0)
	{
		fprintf(stderr, "%s: could not fork: %s\n", progname, strerror(errno));
		return EXIT_CONNECTION;
	}
	if (child == 0)
	{
		sigset_t	none;

		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		close(event_pipe[0]);
		close(event_pipe[1]);
		execvp(argv[0], argv);
		fprintf(stderr, "%s: could not run \"%s\": %s\n", progname, argv[0],
				strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}

	for (;;)
	{
		struct pollfd pfd = {event_pipe[0], POLLIN, 0};
		int			timeout = -1;
		char		buf[64];
		pid_t		rc = waitpid(child, &status, WNOHANG);

		if (rc == child)
			break;
		if (lease_lost && !terminated)
		{
			fprintf(stderr, "%s: lease on \"%s\" lost; stopping the command\n",
					progname, lockqc_lock_id(h));
			kill(child, SIGTERM);
			terminated = true;
			kill_at = now_ms() + grace_ms;
		}
		if (got_signal)
		{
			/* pass SIGINT, SIGTERM and SIGHUP on to the command */
			kill(child, got_signal);
			got_signal = 0;
		}
		if (terminated)
		{
			int64_t		left = kill_at - now_ms();

			if (left <= 0)
			{
				kill(child, SIGKILL);
				kill_at = INT64_MAX;
			}
			else
				timeout = (int) (left < 1000 ? left : 1000);
		}
		else
			timeout = 1000;		/* a safety net; events come by the pipe */
		(void) poll(&pfd, 1, timeout);
		while (read(event_pipe[0], buf, sizeof(buf)) > 0)
			;
	}

	if (lockqc_unlock(h) == LOCKQC_LOST)
		lease_lost = 1;
	if (lease_lost)
		return EXIT_LOST;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static int
cmd_run(int argc, char **argv, const char *conninfo)
{
	static const struct option longopts[] = {
		{"ttl", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'},
		{"no-wait", no_argument, NULL, 'n'},
		{"owner", required_argument, NULL, 'o'},
		{"grace", required_argument, NULL, 'g'},
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	lockqc_opts opts;
	lockqc_handle *h = NULL;
	bool		no_wait = false;
	bool		timeout_given = false;
	int64_t		grace_ms = 10000;
	char	   *errmsg = NULL;
	const char *lock_id;
	int			c;
	int			rc;

	lockqc_opts_init(&opts);
	opts.on_lost = on_lost;
	opts.cancel = &cancel_wait;
	while ((c = getopt_long(argc, argv, "+d:h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 't':
				opts.ttl_ms = parse_duration_arg("--ttl", optarg);
				if (opts.ttl_ms <= 0)
					die_usage("--ttl must be positive, not \"%s\"", optarg);
				break;
			case 'T':
				opts.timeout_ms = parse_duration_arg("--timeout", optarg);
				if (opts.timeout_ms <= 0)
					die_usage("--timeout must be positive, not \"%s\"", optarg);
				timeout_given = true;
				break;
			case 'n':
				no_wait = true;
				break;
			case 'o':
				opts.owner = optarg;
				break;
			case 'g':
				grace_ms = parse_duration_arg("--grace", optarg);
				break;
			case 'd':
				conninfo = optarg;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				die_usage("%s", "invalid option for run");
		}
	}
	if (no_wait && timeout_given)
		die_usage("%s", "--timeout and --no-wait cannot be used together");
	if (optind >= argc)
		die_usage("%s", "run needs a LOCK and a COMMAND");
	lock_id = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		die_usage("%s", "run needs a COMMAND after the LOCK (LOCK -- COMMAND ...)");

	if (pipe2(event_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		perror(progname);
		return EXIT_CONNECTION;
	}
	set_handler(SIGINT, on_signal);
	set_handler(SIGTERM, on_signal);
	set_handler(SIGHUP, on_signal);
	set_handler(SIGCHLD, on_child);

	conn = lockqc_connect(conninfo, &errmsg);
	if (conn == NULL)
	{
		fprintf(stderr, "%s: could not connect: %s", progname,
				errmsg ? errmsg : "unknown error\n");
		free(errmsg);
		return EXIT_CONNECTION;
	}

	rc = no_wait ? lockqc_trylock(conn, lock_id, &opts, &h)
		: lockqc_lock(conn, lock_id, &opts, &h);
	switch (rc)
	{
		case LOCKQC_OK:
			rc = run_command(h, argv + optind, grace_ms);
			break;
		case LOCKQC_TIMEOUT:
		case LOCKQC_NOT_AVAILABLE:
			fprintf(stderr, "%s: lock \"%s\" not acquired (%s)\n", progname,
					lock_id, lockqc_status_str(rc));
			rc = EXIT_TIMEOUT;
			break;
		case LOCKQC_CANCELLED:
			fprintf(stderr, "%s: interrupted while waiting for \"%s\"\n",
					progname, lock_id);
			rc = EXIT_INTERRUPTED;
			break;
		case LOCKQC_EINVAL:
			fprintf(stderr, "%s: %s\n", progname, lockqc_errmsg(conn));
			rc = EXIT_USAGE;
			break;
		default:
			fprintf(stderr, "%s: %s\n", progname, lockqc_errmsg(conn));
			rc = EXIT_CONNECTION;
			break;
	}
	lockqc_disconnect(conn);
	conn = NULL;
	return rc;
}

/*
 * pg_connect opens a plain libpq connection with an empty search_path and
 * returns the quoted schema of the extension in *schema (PQfreemem it).
 * The statement that empties search_path is parsed under the role's own,
 * which may put a hostile schema ahead of pg_catalog: everything in it is
 * qualified.
 */
static PGconn *
pg_connect(const char *conninfo, char **schema)
{
	PGconn	   *pg = PQconnectdb(conninfo ? conninfo : "");
	PGresult   *res;

	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "%s: could not connect: %s", progname, PQerrorMessage(pg));
		PQfinish(pg);
		exit(EXIT_CONNECTION);
	}
	res = PQexecParams(pg, "SELECT pg_catalog.set_config('search_path', '', false),"
					   " (SELECT n.nspname FROM pg_catalog.pg_extension e"
					   "   JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
					   "  WHERE e.extname OPERATOR(pg_catalog.=) 'lockq')",
					   0, NULL, NULL, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQgetisnull(res, 0, 1))
	{
		fprintf(stderr, "%s: %s\n", progname,
				PQresultStatus(res) != PGRES_TUPLES_OK ? PQresultErrorMessage(res)
				: "the lockq extension is not installed in this database");
		PQclear(res);
		PQfinish(pg);
		exit(EXIT_CONNECTION);
	}
	*schema = PQescapeIdentifier(pg, PQgetvalue(res, 0, 1),
								 strlen(PQgetvalue(res, 0, 1)));
	PQclear(res);
	return pg;
}

static PGresult *
pg_query(PGconn *pg, const char *sql, int n, const char *const *params)
{
	PGresult   *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "%s: %s", progname, PQresultErrorMessage(res));
		PQclear(res);
		PQfinish(pg);
		exit(EXIT_CONNECTION);
	}
	return res;
}

static int
cmd_status(int argc, char **argv, const char *conninfo)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	bool		json = false;
	const char *lock_id = NULL;
	char	   *schema;
	char	   *sql;
	PGconn	   *pg;
	PGresult   *res;
	int			c;
	int			i;

	while ((c = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'j':
				json = true;
				break;
			case 'd':
				conninfo = optarg;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				die_usage("%s", "invalid option for status");
		}
	}
	if (optind < argc)
		lock_id = argv[optind++];
	if (optind < argc)
		die_usage("unexpected argument \"%s\"", argv[optind]);

	pg = pg_connect(conninfo, &schema);
	{
		const char *params[1] = {lock_id};

		if (asprintf(&sql,
					 "SELECT k.lock_id, o.owner, o.token,"
					 "  round(extract(epoch FROM o.expires - pg_catalog.clock_timestamp())::numeric, 1),"
					 "  w.position, w.owner, w.kind,"
					 "  round(extract(epoch FROM pg_catalog.clock_timestamp() - w.waiting_since)::numeric, 1),"
					 "  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object("
					 "     'lock_id', k2.lock_id,"
					 "     'holder', (SELECT pg_catalog.json_build_object('owner', o2.owner,"
					 "                  'token', o2.token, 'role', o2.role,"
					 "                  'acquired', o2.acquired, 'expires', o2.expires)"
					 "                  FROM %s.lockq_locks o2 WHERE o2.lock_id = k2.lock_id),"
					 "     'waiters', coalesce((SELECT pg_catalog.json_agg(pg_catalog.json_build_object("
					 "                  'position', w2.position, 'owner', w2.owner,"
					 "                  'kind', w2.kind, 'waiting_since', w2.waiting_since)"
					 "                  ORDER BY w2.position)"
					 "                  FROM %s.lockq_waiters w2 WHERE w2.lock_id = k2.lock_id),"
					 "                '[]'::pg_catalog.json)) ORDER BY k2.lock_id)"
					 "     FROM (SELECT lock_id FROM %s.lockq_locks UNION SELECT lock_id FROM %s.lockq_waiters) k2"
					 "    WHERE $1::text IS NULL OR k2.lock_id = $1)"
					 " FROM (SELECT lock_id FROM %s.lockq_locks UNION SELECT lock_id FROM %s.lockq_waiters) k"
					 " LEFT JOIN %s.lockq_locks o ON o.lock_id = k.lock_id"
					 " LEFT JOIN %s.lockq_waiters w ON w.lock_id = k.lock_id"
					 " WHERE $1::text IS NULL OR k.lock_id = $1"
					 " ORDER BY k.lock_id, w.position",
					 schema, schema, schema, schema, schema, schema, schema, schema) < 0)
		{
			fprintf(stderr, "%s: out of memory\n", progname);
			exit(EXIT_CONNECTION);
		}
		res = pg_query(pg, sql, 1, params);
		free(sql);
	}
	PQfreemem(schema);

	if (json)
	{
		if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 8))
			printf("%s\n", PQgetvalue(res, 0, 8));
		else
			printf("[]\n");
	}
	else
	{
		const char *last = NULL;

		if (PQntuples(res) == 0 && lock_id != NULL)
			printf("%s: free\n", lock_id);
		else if (PQntuples(res) == 0)
			printf("no locks are held or waited for\n");
		for (i = 0; i < PQntuples(res); i++)
		{
			const char *lk = PQgetvalue(res, i, 0);

			if (last == NULL || strcmp(last, lk) != 0)
			{
				if (PQgetisnull(res, i, 1))
					printf("%s: free\n", lk);
				else
					printf("%s: held by %s, token %s, lease ends in %ss\n", lk,
						   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
						   PQgetvalue(res, i, 3));
				last = lk;
			}
			if (!PQgetisnull(res, i, 4))
				printf("  %s. %s (%s, waiting %ss)\n", PQgetvalue(res, i, 4),
					   PQgetvalue(res, i, 5), PQgetvalue(res, i, 6),
					   PQgetvalue(res, i, 7));
		}
	}
	PQclear(res);
	PQfinish(pg);
	return 0;
}

static int
cmd_release(int argc, char **argv, const char *conninfo)
{
	static const struct option longopts[] = {
		{"owner", required_argument, NULL, 'o'},
		{"token", required_argument, NULL, 't'},
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *owner = NULL;
	const char *token = NULL;
	const char *lock_id;
	char	   *schema;
	char	   *sql;
	PGconn	   *pg;
	PGresult   *res;
	int			c;
	int			rc;

	while ((c = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'o':
				owner = optarg;
				break;
			case 't':
				{
					char	   *end;

					errno = 0;
					(void) strtoll(optarg, &end, 10);
					if (errno != 0 || *end != '\0' || end == optarg)
						die_usage("invalid token \"%s\"", optarg);
					token = optarg;
				}
				break;
			case 'd':
				conninfo = optarg;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				die_usage("%s", "invalid option for release");
		}
	}
	if (optind >= argc)
		die_usage("%s", "release needs a LOCK");
	lock_id = argv[optind++];
	if (optind < argc)
		die_usage("unexpected argument \"%s\"", argv[optind]);
	if (owner == NULL)
		die_usage("%s", "release needs --owner");

	pg = pg_connect(conninfo, &schema);
	if (asprintf(&sql, "SELECT %s.lockq_release($1, $2, $3::pg_catalog.int8)", schema) < 0)
		exit(EXIT_CONNECTION);
	{
		const char *params[3] = {lock_id, owner, token};

		res = pg_query(pg, sql, 3, params);
	}
	free(sql);
	PQfreemem(schema);
	rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 0 : EXIT_NOT_HELD;
	if (rc != 0)
		fprintf(stderr, "%s: \"%s\" was not held by \"%s\"%s\n", progname,
				lock_id, owner, token ? " with that token" : "");
	PQclear(res);
	PQfinish(pg);
	return rc;
}

int
main(int argc, char **argv)
{
	const char *conninfo = NULL;
	const char *cmd;

	/* global options before the command: -d CONNINFO, --help */
	while (argc > 1 && argv[1][0] == '-')
	{
		if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		{
			usage(stdout);
			return 0;
		}
		if ((strcmp(argv[1], "-d") == 0 || strcmp(argv[1], "--dbname") == 0) && argc > 2)
		{
			conninfo = argv[2];
			argv[2] = argv[0];
			argv += 2;
			argc -= 2;
			continue;
		}
		die_usage("unknown option \"%s\"", argv[1]);
	}
	if (argc < 2)
	{
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[1];
	argv[1] = argv[0];
	argv++;
	argc--;
	optind = 1;
	if (strcmp(cmd, "run") == 0)
		return cmd_run(argc, argv, conninfo);
	if (strcmp(cmd, "status") == 0)
		return cmd_status(argc, argv, conninfo);
	if (strcmp(cmd, "release") == 0)
		return cmd_release(argc, argv, conninfo);
	die_usage("unknown command \"%s\"", cmd);
	return EXIT_USAGE;
}

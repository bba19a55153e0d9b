/*-------------------------------------------------------------------------
 *
 * lockq.c
 *		The lockq command-line tool: run a command under a cluster-wide
 *		lock (like flock(1) or etcdctl lock), show locks, release one.
 *
 *	lockq run [OPTIONS] LOCK [--] COMMAND [ARG...]
 *	lockq run [OPTIONS] LOCK -c 'SHELL COMMAND'
 *	lockq status [-d CONNINFO] [--json] [LOCK]
 *	lockq release [-d CONNINFO] LOCK --owner O [--token T]
 *	lockq force-release [-d CONNINFO] LOCK
 *
 * lockq run runs COMMAND in a process group of its own and signals the
 * whole group.  The command dies with lockq: its leader has
 * PR_SET_PDEATHSIG, and a small guardian process, which outlives a
 * kill -9 of lockq, kills the group when lockq's end of a socket closes
 * without a goodbye.  While renewals fail, the group is stopped early
 * enough to be dead before the lease can end on the server: SIGTERM at
 * deadline - grace - margin, SIGKILL at deadline - margin, on
 * CLOCK_BOOTTIME.  lockq tells the guardian each new deadline, and the
 * guardian kills the group at deadline - margin by itself: a lockq that
 * is stopped (SIGSTOP, Ctrl-Z) or starved renews nothing, and its command
 * must not run on.  Ctrl-Z stops the command with lockq, and fg continues
 * both.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lockq_client.h"
#include "lockq_client_int.h"

/* Exit codes (documented in lockq(1) and in --help). */
#define EXIT_NOT_HELD		1		/* release: the owner did not hold it;
									 * status: not held */
#define EXIT_USAGE			64		/* bad command line or arguments */
#define EXIT_CONNECTION		69		/* could not reach the lock service */
#define EXIT_TIMEOUT		75		/* not acquired: timeout, or --no-wait */
#define EXIT_LOST			76		/* lease lost (or about to be); the
									 * command was stopped */

static const char *progname = "lockq";
extern char **environ;

static volatile sig_atomic_t got_signal = 0;	/* last signal to pass on */
static volatile sig_atomic_t first_signal = 0;	/* the first signal received */
static lockqc_cancel_flag cancel_wait;			/* stop waiting for the lock */
static lockqc_cancel_flag lease_lost;
static bool foreground = false;
static int	event_pipe[2] = {-1, -1};
static volatile sig_atomic_t cmd_pgid = 0;	/* COMMAND's group, while it runs */
static int	tty_fd = -1;		/* the terminal, handed to COMMAND
								 * (--foreground) */
static lockqc_conn *conn = NULL;

static void
usage(FILE *f)
{
	fprintf(f,
			"Usage:\n"
			"  %s run [OPTIONS] LOCK [--] COMMAND [ARG...]\n"
			"  %s run [OPTIONS] LOCK -c 'SHELL COMMAND'\n"
			"      Wait for LOCK (first come, first served), run COMMAND while holding\n"
			"      it, renewing the lease, and release it when COMMAND exits.\n"
			"      COMMAND runs in a process group of its own, gets LOCKQ_LOCK,\n"
			"      LOCKQ_TOKEN and LOCKQ_OWNER in its environment, and dies with lockq.\n"
			"      If the lease is lost, or renewals fail for so long that it could\n"
			"      end, the group gets SIGTERM, and SIGKILL a grace period later or\n"
			"      a safety margin before the lease can end, whichever is first.\n"
			"        --ttl D             lease length (default 30s)\n"
			"        -w, --wait, --timeout D\n"
			"                            give up after waiting D\n"
			"        -n, --nonblock, --no-wait\n"
			"                            give up at once if the lock is not free\n"
			"        -E, --conflict-exit-code N\n"
			"                            exit status when not acquired (default %d)\n"
			"        -c, --command STR   run STR with /bin/sh -c\n"
			"        --owner O           owner name (default: host:pid:thread:random);\n"
			"                            a nested run with the owner and lock of the\n"
			"                            run around it (LOCKQ_OWNER, LOCKQ_LOCK) takes\n"
			"                            part in that grant and does not release it\n"
			"        --grace D           SIGTERM to SIGKILL (default 10s, or ttl/2 -\n"
			"                            margin if less; when renewals fail, at most that)\n"
			"        --margin D          the group is dead this long before the lease\n"
			"                            can end (default ttl/10, at most 2s)\n"
			"        --foreground        give COMMAND's group the terminal (for commands\n"
			"                            that read it); its signals then go to COMMAND\n"
			"        -v, --verbose       say when the lock is waited for, taken, released\n"
			"  %s status [--json] [LOCK]\n"
			"      Show holders and the ordered queue of every lock (or of LOCK).\n"
			"  %s release LOCK --owner O [--token T]\n"
			"      Release LOCK held by owner O (with token T, if given).\n"
			"  %s force-release LOCK\n"
			"      End whatever grant LOCK has (lockq_admin members and superusers).\n"
			"\n"
			"Common options:\n"
			"  -d, --dbname CONNINFO   libpq connection string or URI (default: PG*\n"
			"                          environment variables)\n"
			"  -h, --help              show this help\n"
			"  -V, --version           show lockq's version\n"
			"\n"
			"Durations: 500ms, 30s, 1.5s, 5m, 1h (a bare number is seconds).\n"
			"\n"
			"Exit status:\n"
			"  run:     COMMAND's exit status (128+N if killed by signal N), or\n"
			"           %d  not acquired (timeout, or --no-wait and the lock was busy;\n"
			"               -E changes it)\n"
			"           %d  COMMAND was stopped: its lease was lost, renewals failed,\n"
			"               or lockq was stopped or starved past the lease\n"
			"           128+N  signal N (SIGINT: 130, SIGTERM: 143) while waiting\n"
			"               (nothing is left queued)\n"
			"  status:  0 the lock (any lock, without LOCK) is held, %d it is not\n"
			"  release, force-release: 0 released, %d it was not held (by that owner)\n"
			"  all:     %d usage error (bad option, ttl above lockq.max_ttl, reserved\n"
			"           owner), %d cannot connect, or a server error\n",
			progname, progname, EXIT_TIMEOUT, progname, progname, progname,
			EXIT_TIMEOUT, EXIT_LOST, EXIT_NOT_HELD, EXIT_NOT_HELD, EXIT_USAGE,
			EXIT_CONNECTION);
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

/*
 * conninfo_arg takes a -d argument: if it holds a password, a copy is used
 * and the argument itself is overwritten, so that the password is not
 * readable by every local user in /proc/PID/cmdline of lockq and of its
 * guardian for as long as the command runs.  (Before that, it was there
 * for an instant; PGPASSWORD or a password file leave it out entirely.)
 * The copy lives until the next -d that needs one: only the last -d
 * counts.
 */
static const char *
conninfo_arg(char *arg)
{
	static char *copy = NULL;
	PQconninfoOption *opts = PQconninfoParse(arg, NULL);
	bool		has_password = false;

	if (opts == NULL)
		return arg;				/* invalid: libpq says why later */
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
		if (strcmp(o->keyword, "password") == 0 && o->val != NULL)
			has_password = true;
	PQconninfoFree(opts);
	if (!has_password)
		return arg;
	free(copy);
	copy = strdup(arg);
	if (copy == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(EXIT_CONNECTION);
	}
	memset(arg, 'x', strlen(arg));
	return copy;
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

/*
 * on_signal: SIGINT, SIGTERM, SIGHUP, SIGQUIT.  While waiting they end the
 * wait; while the command runs they are passed on to it once: in a
 * process group of its own it does not get the terminal's signals, and
 * with --foreground it does, so only signals sent by a process (kill) are
 * passed on then.
 */
static void
on_signal(int sig, siginfo_t *si, void *uc)
{
	if (first_signal == 0)
		first_signal = sig;
	if (!(foreground && si != NULL && si->si_code == SI_KERNEL))
		got_signal = sig;
	atomic_store(&cancel_wait, 1);
	if (conn != NULL)
		lockqc_wakeup(conn);
	poke_main();
}

static void
on_child(int sig)
{
	poke_main();
}

/*
 * suspend_with_command stops COMMAND's group and then lockq itself, as a
 * shell's job is stopped: for Ctrl-Z (SIGTSTP to lockq's group) or, with
 * --foreground, when the terminal stopped COMMAND's group.  The terminal
 * goes back to lockq's group first, so that the shell sees a stopped job.
 * While lockq is stopped nothing is renewed; the guardian, which does not
 * stop, kills the group once the lease's deadline less the margin comes.
 * Async-signal-safe.
 */
static void
suspend_with_command(void)
{
	int			saved = errno;

	if (cmd_pgid > 0)
		kill(-cmd_pgid, SIGTSTP);
	if (tty_fd >= 0 && tcgetpgrp(tty_fd) == cmd_pgid)
		(void) tcsetpgrp(tty_fd, getpgrp());
	kill(getpid(), SIGSTOP);
	errno = saved;
}

static void
on_tstp(int sig)
{
	suspend_with_command();
}

/*
 * on_cont: lockq was continued (fg, bg, kill -CONT): so is COMMAND's group.
 * With --foreground the terminal goes to it again if lockq has it (fg).
 */
static void
on_cont(int sig)
{
	int			saved = errno;

	if (cmd_pgid > 0)
	{
		if (tty_fd >= 0 && tcgetpgrp(tty_fd) == getpgrp())
			(void) tcsetpgrp(tty_fd, cmd_pgid);
		kill(-cmd_pgid, SIGCONT);
	}
	errno = saved;
	poke_main();
}

static void
on_lost(lockqc_handle *h, void *arg)
{
	atomic_store(&lease_lost, 1);
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

static void
set_info_handler(int sig)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_SIGINFO;
	sigaction(sig, &sa, NULL);
}

/* now_ms: CLOCK_BOOTTIME, which counts a system suspend, as leases do. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * child_env builds COMMAND's environment: ours, with LOCKQ_LOCK,
 * LOCKQ_TOKEN and LOCKQ_OWNER replaced.  (setenv would race with the
 * getenv of libpq in liblockq's I/O thread when it reconnects.)
 */
static char **
child_env(lockqc_handle *h)
{
	size_t		n = 0;
	size_t		k = 0;
	char	  **env;

	while (environ[n] != NULL)
		n++;
	env = calloc(n + 4, sizeof(char *));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LOCKQ_LOCK=", 11) != 0 &&
			strncmp(environ[i], "LOCKQ_TOKEN=", 12) != 0 &&
			strncmp(environ[i], "LOCKQ_OWNER=", 12) != 0)
			env[k++] = environ[i];
	if (asprintf(&env[k++], "LOCKQ_LOCK=%s", lockqc_lock_id(h)) < 0 ||
		asprintf(&env[k++], "LOCKQ_TOKEN=%" PRId64, lockqc_token(h)) < 0 ||
		asprintf(&env[k++], "LOCKQ_OWNER=%s", lockqc_owner(h)) < 0)
		return NULL;
	env[k] = NULL;
	return env;
}

/* free_child_env frees what child_env allocated. */
static void
free_child_env(char **env)
{
	if (env == NULL)
		return;
	for (char **e = env; *e != NULL; e++)
		if (strncmp(*e, "LOCKQ_LOCK=", 11) == 0 || strncmp(*e, "LOCKQ_TOKEN=", 12) == 0 ||
			strncmp(*e, "LOCKQ_OWNER=", 12) == 0)
			free(*e);
	free(env);
}

/* signal_command sends sig to COMMAND's process group. */
static void
signal_command(pid_t child, int sig)
{
	kill(-child, sig);
}

/*
 * reap collects every child (lockq is a subreaper); true once child ended.
 * *stopped is set when child was stopped (by a signal: job control).
 */
static bool
reap(pid_t child, int *status, bool *done, bool *stopped)
{
	pid_t		p;
	int			st;

	while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED)) > 0)
	{
		if (p == child && WIFSTOPPED(st))
			*stopped = true;
		else if (p == child)
		{
			*status = st;
			*done = true;
		}
	}
	return *done;
}

/* What lockq writes to the guardian: a deadline, none, or goodbye. */
#define GUARD_NO_DEADLINE	((int64_t) 0)
#define GUARD_GOODBYE		((int64_t) -1)
#define GUARD_FIRED			2	/* the guardian's exit status when it
								 * killed the group at a deadline */

/*
 * start_guardian forks the process that kills COMMAND's group if lockq
 * dies without saying goodbye (kill -9, the OOM killer), or if lockq does
 * not move the deadline it was last told (CLOCK_BOOTTIME ms, the lease's
 * local deadline less the margin) before it comes: lockq is stopped or
 * starved, and renews nothing.  It holds only one end of a socket pair whose
 * other end is lockq's alone, and reads int64 messages from it: a
 * deadline, GUARD_NO_DEADLINE, or GUARD_GOODBYE.  target is what to kill
 * (-pgid for the group).  Returns lockq's end, or -1.  Only
 * async-signal-safe calls and plain system calls after fork (lockq has
 * threads).
 */
static int
start_guardian(pid_t target, pid_t *gpid)
{
	int			p[2];
	pid_t		pid;

	/* a socket, not a pipe: send's MSG_NOSIGNAL spares lockq a SIGPIPE */
	sigset_t	all;
	sigset_t	old;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0)
		return -1;
	/*
	 * Born with every signal blocked: until its setpgid it is in lockq's
	 * group, and lockq's handlers (a Ctrl-Z would stop it) must not run.
	 */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = (fork) ();			/* (not the fuzzer's stub for the command) */
	if (pid != 0)
		sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
	{
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0)
	{
		unsigned char msg[sizeof(int64_t)];
		size_t		have = 0;
		bool		fired = false;
		int			tfd;
		struct sigaction ign;

		memset(&ign, 0, sizeof(ign));
		ign.sa_handler = SIG_IGN;
		sigaction(SIGINT, &ign, NULL);
		sigaction(SIGTERM, &ign, NULL);
		sigaction(SIGHUP, &ign, NULL);
		sigaction(SIGQUIT, &ign, NULL);
		sigaction(SIGTSTP, &ign, NULL);
		sigaction(SIGTTIN, &ign, NULL);
		sigaction(SIGTTOU, &ign, NULL);
		setpgid(0, 0);			/* out of lockq's group and the command's */
		/* nothing but its end: no socket of lockq's connections stays open here */
		if (p[0] > 3)
			syscall(SYS_close_range, 3, p[0] - 1, 0);
		syscall(SYS_close_range, p[0] + 1, ~0U, 0);
		tfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
		for (;;)
		{
			struct pollfd pfd[2] = {{p[0], POLLIN, 0}, {tfd, POLLIN, 0}};
			uint64_t	ticks;

			if (poll(pfd, tfd >= 0 ? 2 : 1, -1) < 0)
				continue;
			/* messages first: a new deadline re-arms the timer */
			if (pfd[0].revents != 0)
			{
				int64_t		v;
				ssize_t		r = read(p[0], msg + have, sizeof(msg) - have);

				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0)
				{
					/* lockq is gone without a goodbye */
					kill(target, SIGKILL);
					_exit(GUARD_FIRED);
				}
				have += r;
				if (have < sizeof(msg))
					continue;
				have = 0;
				memcpy(&v, msg, sizeof(v));
				if (v == GUARD_GOODBYE)
					_exit(fired ? GUARD_FIRED : 0);
				if (tfd >= 0)
				{
					struct itimerspec its;

					/* a zero it_value disarms the timer: no deadline */
					memset(&its, 0, sizeof(its));
					if (v != GUARD_NO_DEADLINE)
					{
						its.it_value.tv_sec = v / 1000;
						its.it_value.tv_nsec = (v % 1000) * 1000000 + 1;
					}
					(void) timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
				}
			}
			if (tfd >= 0 && read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks))
			{
				/* the deadline came and lockq did not move it */
				kill(target, SIGKILL);
				fired = true;
			}
		}
	}
	close(p[0]);
	*gpid = pid;
	return p[1];
}

/* guard_tell writes one message to the guardian (see start_guardian). */
static void
guard_tell(int fd, int64_t v)
{
	ssize_t		w;

	if (fd < 0)
		return;
	do
		w = send(fd, &v, sizeof(v), MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
}

static int64_t
lqc_cli_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t
lqc_cli_max(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* The options of run that run_command needs. */
typedef struct run_opts
{
	int64_t		grace_ms;		/* SIGTERM to SIGKILL */
	int64_t		stop_grace_ms;	/* the same when renewals fail: at most
								 * ttl/2 - margin */
	int64_t		margin_ms;
	int64_t		tick_ms;		/* the longest lockq sleeps while COMMAND
								 * runs (the guardian's deadline moves on
								 * then) */
	bool		verbose;
} run_opts;

/*
 * exec_command is the child's side of run_command's fork: it joins a
 * process group of its own (with --foreground, the terminal's foreground
 * group), undoes lockq's signal settings and execs argv with env.  parent
 * is lockq's pid.
 */
static _Noreturn void
exec_command(char **argv, char **env, pid_t parent)
{
	sigset_t	none;

	/* die with lockq, whatever kills it; it may be gone already */
	(void) prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(EXIT_LOST);
	setpgid(0, 0);
	if (tty_fd >= 0)
		(void) tcsetpgrp(tty_fd, getpid());
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
	signal(SIGTSTP, SIG_DFL);
	signal(SIGCONT, SIG_DFL);
	signal(SIGTTOU, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execvpe(argv[0], argv, env);
	fprintf(stderr, "%s: could not run \"%s\": %s\n", progname, argv[0],
			strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * run_command runs argv with the lock's environment (exec_command) and
 * waits for it.  h is the grant, or NULL for a run nested in an enclosing
 * run's grant (which the enclosing run watches and releases).  While it
 * runs: signals are passed on to the group once; if the lease is lost, or
 * its local deadline comes within grace + margin (renewals failing), the
 * group gets SIGTERM, and SIGKILL at the earlier of grace later and
 * margin before the deadline; the guardian is told each deadline.  When
 * COMMAND exits, what it left running in its group is stopped the same
 * way before the lock is released.  Returns lockq's exit status: 76 only if
 * the command was stopped for the lease; a lease found ended after the
 * command exited by itself is said on stderr, with the command's status.
 */
static int
run_command(lockqc_handle *h, char **argv, const run_opts *ro)
{
	int64_t		grace_ms = ro->grace_ms;
	int64_t		margin_ms = ro->margin_ms;
	pid_t		parent = getpid();
	pid_t		child;
	sigset_t	all;
	sigset_t	old_mask;
	pid_t		guardian = -1;
	int			guard_fd = -1;
	int64_t		guard_at = GUARD_NO_DEADLINE;
	int			tfd;
	int			status = 0;
	bool		done = false;
	bool		stopping = false;
	bool		stopped_for_lease = false;
	bool		killed = false;
	int64_t		kill_at = INT64_MAX;
	int64_t		started;
	char	  **env = h != NULL ? child_env(h) : environ;
	int			rc;

	if (env == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		return EXIT_CONNECTION;
	}
	/* orphans of COMMAND come to us, so that we can tell when all are gone */
	(void) prctl(PR_SET_CHILD_SUBREAPER, 1);

	/* as the guardian: lockq's handlers must not run in the child */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old_mask);
	child = fork();
	if (child == 0)
		exec_command(argv, env, parent);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (h != NULL)
		free_child_env(env);
	if (child < 0)
	{
		fprintf(stderr, "%s: could not fork: %s\n", progname, strerror(errno));
		return EXIT_CONNECTION;
	}
	setpgid(child, child);		/* (either of us may get there first) */
	if (tty_fd >= 0)
		(void) tcsetpgrp(tty_fd, child);
	cmd_pgid = child;
	started = now_ms();
	guard_fd = start_guardian(-child, &guardian);
	if (guard_fd < 0)
	{
		fprintf(stderr, "%s: could not start the guardian process: %s\n", progname,
				strerror(errno));
		signal_command(child, SIGKILL);
	}
	tfd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);

	for (;;)
	{
		struct pollfd pfd[2] = {{event_pipe[0], POLLIN, 0}, {tfd, POLLIN, 0}};
		bool		job_stopped = false;
		int64_t		now;
		int64_t		left;
		int64_t		wake = INT64_MAX;
		char		buf[64];

		if (reap(child, &status, &done, &job_stopped))
		{
			/* what COMMAND left running in its group must not outlive the lock */
			if (kill(-child, 0) != 0)
				break;
			if (!stopping)
			{
				fprintf(stderr, "%s: the command exited, but left processes in its group; stopping them\n",
						progname);
				signal_command(child, SIGTERM);
				stopping = true;
				kill_at = now_ms() + grace_ms;
			}
		}
		else if (job_stopped && tty_fd >= 0)
		{
			/* the terminal stopped the command (Ctrl-Z): so is its job */
			suspend_with_command();
			continue;
		}
		now = now_ms();
		left = h == NULL ? INT64_MAX : lockqc_remaining_ms(h);
		if (!stopping && (atomic_load(&lease_lost) || left == 0))
		{
			fprintf(stderr, "%s: lease on \"%s\" lost; stopping the command\n",
					progname, lockqc_lock_id(h));
			atomic_store(&lease_lost, 1);
			signal_command(child, SIGTERM);
			stopping = stopped_for_lease = true;
			kill_at = now + grace_ms;
		}
		else if (!stopping && left <= ro->stop_grace_ms + margin_ms)
		{
			fprintf(stderr, "%s: the lease on \"%s\" could not be renewed and ends in %" PRId64 " ms; stopping the command\n",
					progname, lockqc_lock_id(h), left);
			atomic_store(&lease_lost, 1);
			signal_command(child, SIGTERM);
			stopping = stopped_for_lease = true;
			kill_at = now + lqc_cli_max(left - margin_ms, 0);
		}
		else if (!stopping && left != INT64_MAX)
			wake = lqc_cli_min(now + left - ro->stop_grace_ms - margin_ms,
							   now + ro->tick_ms);
		if (stopping && !killed)
		{
			/* never later than the margin before the lease can end */
			if (!atomic_load(&lease_lost) || left > 0)
				kill_at = lqc_cli_min(kill_at, left == INT64_MAX ? INT64_MAX : now + left - margin_ms);
			if (now >= kill_at)
			{
				signal_command(child, SIGKILL);
				killed = true;
			}
			else
				wake = lqc_cli_min(wake, kill_at);
		}
		if (got_signal)
		{
			signal_command(child, got_signal);
			got_signal = 0;
		}

		/*
		 * The guardian kills the group if lockq cannot: at deadline -
		 * margin, or once the group is being stopped, when lockq would
		 * (a lease lost outright keeps its grace).
		 */
		{
			int64_t		at = stopping ? (killed ? GUARD_NO_DEADLINE : kill_at) :
				left == INT64_MAX ? GUARD_NO_DEADLINE : now + left - margin_ms;

			if (at != GUARD_NO_DEADLINE)
				at = lqc_cli_max(at, 1);
			if (at == INT64_MAX)
				at = GUARD_NO_DEADLINE;
			if (at != guard_at)
			{
				guard_at = at;
				guard_tell(guard_fd, guard_at);
			}
		}
		if (tfd >= 0 && wake != INT64_MAX)
		{
			struct itimerspec its;
			int64_t		abs_ms;

			/* the timer's clock is CLOCK_BOOTTIME, as now_ms() */
			memset(&its, 0, sizeof(its));
			abs_ms = lqc_cli_max(wake, now + 1);
			its.it_value.tv_sec = abs_ms / 1000;
			its.it_value.tv_nsec = (abs_ms % 1000) * 1000000;
			(void) timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
		}
		/* a safety net of 1 s (0.1 s while the group is being stopped) */
		(void) poll(pfd, tfd >= 0 ? 2 : 1,
					done || stopping ? 100 :
					wake == INT64_MAX ? 1000 : (int) lqc_cli_min(lqc_cli_max(wake - now, 1), 1000));
		while (read(event_pipe[0], buf, sizeof(buf)) > 0)
			;
		if (tfd >= 0)
			while (read(tfd, buf, sizeof(buf)) > 0)
				;
	}
	cmd_pgid = 0;
	if (tfd >= 0)
		close(tfd);
	if (tty_fd >= 0)
		(void) tcsetpgrp(tty_fd, getpgrp());	/* the terminal is ours again */

	/*
	 * Goodbye to the guardian: the group is gone, nothing to kill.  If it
	 * killed the group before lockq had begun to stop it, lockq could not
	 * renew in time.  (Once lockq stops the group, the guardian may only
	 * beat it to the same SIGKILL.)
	 */
	if (guard_fd >= 0)
	{
		int			gst = 0;

		guard_tell(guard_fd, GUARD_GOODBYE);
		close(guard_fd);
		if (guardian > 0 && waitpid(guardian, &gst, 0) == guardian &&
			WIFEXITED(gst) && WEXITSTATUS(gst) == GUARD_FIRED && !stopping)
		{
			fprintf(stderr, "%s: the lease on \"%s\" ran out while lockq could not renew it (stopped or starved); the command was killed\n",
					progname, h ? lockqc_lock_id(h) : "?");
			atomic_store(&lease_lost, 1);
			stopped_for_lease = true;
		}
	}

	if (h != NULL)
	{
		char	   *lock_id = strdup(lockqc_lock_id(h));
		int			urc = lockqc_unlock(h);

		if (urc == LOCKQC_LOST && !stopped_for_lease)
			fprintf(stderr, "%s: the release of \"%s\" found its grant already ended (an administrator, a crash of the server, or a lost reply to the release); the command had ended by itself before lockq noticed\n",
					progname, lock_id ? lock_id : "?");
		else if (urc != LOCKQC_OK && urc != LOCKQC_LOST)
			fprintf(stderr, "%s: %s\n", progname, lockqc_errmsg(conn));
		else if (urc == LOCKQC_OK && ro->verbose)
			fprintf(stderr, "%s: released \"%s\" after %.3f s\n", progname,
					lock_id ? lock_id : "?", (now_ms() - started) / 1000.0);
		free(lock_id);
	}

	if (stopped_for_lease)
		rc = EXIT_LOST;
	else if (WIFEXITED(status))
		rc = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		rc = 128 + WTERMSIG(status);
	else
		rc = 1;
	return rc;
}

/*
 * nested_in_enclosing_run: is this run inside a lockq run of the same lock
 * and owner (its LOCKQ_LOCK, LOCKQ_OWNER and LOCKQ_TOKEN in our
 * environment)?
 */
static bool
nested_in_enclosing_run(const char *lock_id, const char *owner)
{
	const char *el = getenv("LOCKQ_LOCK");
	const char *eo = getenv("LOCKQ_OWNER");

	return owner != NULL && el != NULL && eo != NULL &&
		strcmp(el, lock_id) == 0 && strcmp(eo, owner) == 0 &&
		getenv("LOCKQ_TOKEN") != NULL;
}

static PGconn *pg_connect(const char *conninfo, char **schema);
static PGresult *pg_query(PGconn *pg, const char *sql, int n,
						  const char *const *params);

/*
 * enclosing_grant_held asks the server whether the enclosing run's grant
 * (token) of lock_id still holds, without touching it: a nested run must
 * neither shorten nor end the enclosing run's lease (lockq_try by the same
 * owner would set it to the nested run's ttl).  Exits 69 if the server
 * cannot be asked.
 */
static bool
enclosing_grant_held(const char *conninfo, const char *lock_id, const char *token)
{
	char	   *schema;
	char	   *sql;
	PGconn	   *pg = pg_connect(conninfo, &schema);
	PGresult   *res;
	const char *params[2] = {lock_id, token};
	bool		held;

	if (asprintf(&sql, "SELECT %s.lockq_holds($1, $2::pg_catalog.int8)", schema) < 0)
		exit(EXIT_CONNECTION);
	res = pg_query(pg, sql, 2, params);
	held = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	free(sql);
	PQfreemem(schema);
	PQfinish(pg);
	return held;
}

static int
cmd_run(int argc, char **argv, const char *conninfo)
{
	static const struct option longopts[] = {
		{"ttl", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'w'},
		{"wait", required_argument, NULL, 'w'},
		{"no-wait", no_argument, NULL, 'n'},
		{"nonblock", no_argument, NULL, 'n'},
		{"conflict-exit-code", required_argument, NULL, 'E'},
		{"command", required_argument, NULL, 'c'},
		{"verbose", no_argument, NULL, 'v'},
		{"owner", required_argument, NULL, 'o'},
		{"grace", required_argument, NULL, 'g'},
		{"margin", required_argument, NULL, 'm'},
		{"foreground", no_argument, NULL, 'F'},
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	lockqc_opts opts;
	lockqc_handle *h = NULL;
	run_opts	ro = {0};
	bool		no_wait = false;
	bool		timeout_given = false;
	bool		grace_given = false;
	bool		margin_given = false;
	int			conflict_exit = EXIT_TIMEOUT;
	const char *shell_cmd = NULL;
	char	   *sh_argv[4];
	char	  **cmd_argv;
	char	   *errmsg = NULL;
	const char *lock_id;
	int64_t		t0;
	int			c;
	int			rc;

	lockqc_opts_init(&opts);
	opts.on_lost = on_lost;
	opts.cancel_flag = &cancel_wait;
	while ((c = getopt_long(argc, argv, "+d:hnw:E:c:v", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 't':
				opts.ttl_ms = parse_duration_arg("--ttl", optarg);
				if (opts.ttl_ms <= 0)
					die_usage("--ttl must be positive, not \"%s\"", optarg);
				break;
			case 'w':
				opts.timeout_ms = parse_duration_arg("--timeout", optarg);
				if (opts.timeout_ms <= 0)
					die_usage("--timeout must be positive, not \"%s\"", optarg);
				timeout_given = true;
				break;
			case 'n':
				no_wait = true;
				break;
			case 'E':
				{
					char	   *end;
					long		v;

					errno = 0;
					v = strtol(optarg, &end, 10);
					if (errno != 0 || end == optarg || *end != '\0' || v < 0 || v > 255)
						die_usage("--conflict-exit-code must be 0 to 255, not \"%s\"", optarg);
					conflict_exit = (int) v;
				}
				break;
			case 'c':
				shell_cmd = optarg;
				break;
			case 'v':
				ro.verbose = true;
				break;
			case 'o':
				opts.owner = optarg;
				if (strncmp(optarg, "session:", 8) == 0)
					die_usage("owner names starting with \"session:\" are reserved: \"%s\"", optarg);
				break;
			case 'g':
				ro.grace_ms = parse_duration_arg("--grace", optarg);
				grace_given = true;
				break;
			case 'm':
				ro.margin_ms = parse_duration_arg("--margin", optarg);
				margin_given = true;
				break;
			case 'F':
				foreground = true;
				break;
			case 'd':
				conninfo = conninfo_arg(optarg);
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
	/* flock(1) style: LOCK -c 'command' */
	if (shell_cmd == NULL && optind + 1 < argc + 0 && optind < argc &&
		(strcmp(argv[optind], "-c") == 0 || strcmp(argv[optind], "--command") == 0))
	{
		shell_cmd = argv[optind + 1];
		optind += 2;
	}
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (shell_cmd != NULL)
	{
		if (optind < argc)
			die_usage("unexpected argument \"%s\" after -c", argv[optind]);
		sh_argv[0] = "/bin/sh";
		sh_argv[1] = "-c";
		sh_argv[2] = (char *) shell_cmd;
		sh_argv[3] = NULL;
		cmd_argv = sh_argv;
	}
	else
	{
		if (optind >= argc)
			die_usage("%s", "run needs a COMMAND after the LOCK (LOCK -- COMMAND ..., or -c 'COMMAND')");
		cmd_argv = argv + optind;
	}

	/*
	 * The stop schedule must fit in the part of the lease that renewals
	 * keep: they come every third of the ttl, so the deadline is never less
	 * than two thirds of the ttl away while they work.  Half the ttl leaves
	 * room for a slow renewal.
	 */
	if (!margin_given)
		ro.margin_ms = lqc_cli_min(opts.ttl_ms / 10, 2000);
	if (!grace_given)
		ro.grace_ms = lqc_cli_max(lqc_cli_min(10000, opts.ttl_ms / 2 - ro.margin_ms), 0);
	if (ro.margin_ms > opts.ttl_ms / 2)
	{
		char		msg[200];

		snprintf(msg, sizeof(msg),
				 "--margin (%" PRId64 " ms) must be at most half the --ttl (%" PRId64 " ms)",
				 ro.margin_ms, opts.ttl_ms);
		die_usage("%s", msg);
	}
	/* a longer grace still applies to a lease lost outright */
	ro.stop_grace_ms = lqc_cli_min(ro.grace_ms, opts.ttl_ms / 2 - ro.margin_ms);
	/* renewals come every ttl/3: the guardian hears of each within ttl/8 */
	ro.tick_ms = lqc_cli_max(lqc_cli_min(opts.ttl_ms / 8, 1000), 10);

	if (pipe2(event_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		perror(progname);
		return EXIT_CONNECTION;
	}
	set_info_handler(SIGINT);
	set_info_handler(SIGTERM);
	set_info_handler(SIGHUP);
	set_info_handler(SIGQUIT);
	set_handler(SIGCHLD, on_child);
	set_handler(SIGTSTP, on_tstp);
	set_handler(SIGCONT, on_cont);
	if (foreground)
	{
		/* only if lockq has the terminal (a foreground job) */
		tty_fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (tty_fd >= 0 && tcgetpgrp(tty_fd) != getpgrp())
		{
			close(tty_fd);
			tty_fd = -1;
		}
		/* handing the terminal on and back, from the background */
		if (tty_fd >= 0)
			signal(SIGTTOU, SIG_IGN);
	}

	/* nested: the enclosing run holds, renews and releases the grant */
	if (nested_in_enclosing_run(lock_id, opts.owner))
	{
		const char *token = getenv("LOCKQ_TOKEN");

		if (!enclosing_grant_held(conninfo, lock_id, token))
		{
			fprintf(stderr, "%s: the enclosing run's grant of \"%s\" (token %s) has ended\n",
					progname, lock_id, token);
			return EXIT_LOST;
		}
		if (ro.verbose)
			fprintf(stderr, "%s: \"%s\" is held by the enclosing run (token %s); it renews and releases it\n",
					progname, lock_id, token);
		return run_command(NULL, cmd_argv, &ro);
	}

	conn = lockqc_connect(conninfo, &errmsg);
	if (conn == NULL)
	{
		fprintf(stderr, "%s: %s\n", progname, errmsg ? errmsg : "could not connect");
		free(errmsg);
		return EXIT_CONNECTION;
	}

	t0 = now_ms();
	if (ro.verbose && !no_wait)
		fprintf(stderr, "%s: waiting for \"%s\"\n", progname, lock_id);
	rc = no_wait ? lockqc_trylock(conn, lock_id, &opts, &h)
		: lockqc_lock(conn, lock_id, &opts, &h);
	switch (rc)
	{
		case LOCKQC_OK:
			if (ro.verbose)
				fprintf(stderr, "%s: acquired \"%s\" (token %" PRId64 ") after %.3f s\n",
						progname, lock_id, lockqc_token(h), (now_ms() - t0) / 1000.0);
			rc = run_command(h, cmd_argv, &ro);
			if (rc == EXIT_LOST && ro.verbose)
				fprintf(stderr, "%s: the command was stopped: the lease was lost\n", progname);
			break;
		case LOCKQC_TIMEOUT:
		case LOCKQC_NOT_AVAILABLE:
			fprintf(stderr, "%s: lock \"%s\" not acquired (%s)\n", progname,
					lock_id, lockqc_status_str(rc));
			rc = conflict_exit;
			break;
		case LOCKQC_CANCELLED:
			fprintf(stderr, "%s: interrupted while waiting for \"%s\"\n",
					progname, lock_id);
			rc = 128 + (first_signal ? first_signal : SIGINT);
			break;
		case LOCKQC_EINVAL:
			fprintf(stderr, "%s: %s\n", progname, lockqc_errmsg(conn));
			rc = EXIT_USAGE;
			break;
		default:
			fprintf(stderr, "%s: %s\n", progname, lockqc_errmsg(conn));
			/* the server refused the arguments (ttl, owner): a usage error */
			rc = strncmp(lockqc_sqlstate(conn), "22", 2) == 0 ? EXIT_USAGE : EXIT_CONNECTION;
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
	/* defaults the conninfo may override (it comes after them) */
	static const char *const kw[] = {"connect_timeout", "keepalives",
		"keepalives_idle", "keepalives_interval", "keepalives_count",
		"tcp_user_timeout", "fallback_application_name", "dbname", NULL};
	const char *val[] = {"10", "1", "5", "2", "3", "10000", "lockq",
		conninfo ? conninfo : "", NULL};
	PGconn	   *pg = PQconnectdbParams(kw, val, 1);
	PGresult   *res;
	char		msg[256];

	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "%s: %s", progname, PQerrorMessage(pg));
		PQfinish(pg);
		exit(EXIT_CONNECTION);
	}
	res = PQexecParams(pg, "SELECT pg_catalog.set_config('search_path', '', false),"
					   " " LOCKQC_SCHEMA_SQL ","
					   " pg_catalog.current_setting('lockq.database', true),"
					   " pg_catalog.current_database(),"
					   " " LOCKQC_EXTVERSION_SQL,
					   0, NULL, NULL, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQgetisnull(res, 0, 1) ||
		lockqc_check_extversion(PQgetvalue(res, 0, 4), msg, sizeof(msg)) != NULL)
	{
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			fprintf(stderr, "%s: %s", progname, PQresultErrorMessage(res));
		else if (PQgetisnull(res, 0, 1))
			fprintf(stderr, "%s: the lockq extension is not installed in database \"%s\"\n",
					progname, PQgetvalue(res, 0, 3));
		else
			fprintf(stderr, "%s: %s\n", progname, msg);
		PQclear(res);
		PQfinish(pg);
		exit(EXIT_CONNECTION);
	}
	/* the views are empty elsewhere: say so rather than "nothing held" */
	if (PQgetisnull(res, 0, 2) ||
		strcmp(PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3)) != 0)
	{
		if (PQgetisnull(res, 0, 2))
			fprintf(stderr, "%s: lockq is not loaded in this server (shared_preload_libraries)\n",
					progname);
		else
			fprintf(stderr, "%s: the lock service runs in database \"%s\" (lockq.database), not in \"%s\"\n",
					progname, PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3));
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

/*
 * escape_ctl returns s (malloc'd) with its control characters (C0, DEL and
 * the C1 range as UTF-8 encodes it) written as \xNN: lock ids and owners
 * are other roles' strings, and printed raw they could move the cursor,
 * redraw lines or set the window title of an administrator's terminal.
 * A backslash is written as \\, so that what is shown is unambiguous.
 */
static char *
escape_ctl(const char *s)
{
	size_t		len = strlen(s);
	char	   *out = malloc(len * 4 + 1);
	char	   *o = out;
	const unsigned char *p;

	if (out == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(EXIT_CONNECTION);
	}
	for (p = (const unsigned char *) s; *p != '\0'; p++)
	{
		if (*p < 0x20 || *p == 0x7f)
			o += sprintf(o, "\\x%02x", *p);
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
		{
			o += sprintf(o, "\\xc2\\x%02x", p[1]);
			p++;
		}
		else if (*p == '\\')
		{
			*o++ = '\\';
			*o++ = '\\';
		}
		else
			*o++ = (char) *p;
	}
	*o = '\0';
	return out;
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
	bool		held = false;
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
				conninfo = conninfo_arg(optarg);
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

	for (i = 0; i < PQntuples(res); i++)
		if (!PQgetisnull(res, i, 1))
			held = true;
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
		{
			char	   *lk = escape_ctl(lock_id);

			printf("%s: free\n", lk);
			free(lk);
		}
		else if (PQntuples(res) == 0)
			printf("no locks are held or waited for\n");
		for (i = 0; i < PQntuples(res); i++)
		{
			const char *id = PQgetvalue(res, i, 0);
			char	   *lk = escape_ctl(id);

			if (last == NULL || strcmp(last, id) != 0)
			{
				if (PQgetisnull(res, i, 1))
					printf("%s: free\n", lk);
				else
				{
					char	   *holder = escape_ctl(PQgetvalue(res, i, 1));

					printf("%s: held by %s, token %s, lease ends in %ss\n", lk,
						   holder, PQgetvalue(res, i, 2), PQgetvalue(res, i, 3));
					free(holder);
				}
				last = id;
			}
			if (!PQgetisnull(res, i, 4))
			{
				char	   *waiter = escape_ctl(PQgetvalue(res, i, 5));

				printf("  %s. %s (%s, waiting %ss)\n", PQgetvalue(res, i, 4),
					   waiter, PQgetvalue(res, i, 6), PQgetvalue(res, i, 7));
				free(waiter);
			}
			free(lk);
		}
	}
	PQclear(res);
	PQfinish(pg);
	return held ? 0 : EXIT_NOT_HELD;
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
				conninfo = conninfo_arg(optarg);
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

/*
 * cmd_force_release ends whatever grant LOCK has (lockq_force_release:
 * lockq_admin members and superusers).  0 if there was one, 1 if not.
 */
static int
cmd_force_release(int argc, char **argv, const char *conninfo)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
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
			case 'd':
				conninfo = conninfo_arg(optarg);
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				die_usage("%s", "invalid option for force-release");
		}
	}
	if (optind >= argc)
		die_usage("%s", "force-release needs a LOCK");
	lock_id = argv[optind++];
	if (optind < argc)
		die_usage("unexpected argument \"%s\"", argv[optind]);

	pg = pg_connect(conninfo, &schema);
	if (asprintf(&sql, "SELECT %s.lockq_force_release($1)", schema) < 0)
		exit(EXIT_CONNECTION);
	{
		const char *params[1] = {lock_id};

		res = pg_query(pg, sql, 1, params);
	}
	free(sql);
	PQfreemem(schema);
	rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 0 : EXIT_NOT_HELD;
	if (rc != 0)
		fprintf(stderr, "%s: \"%s\" was not held\n", progname, lock_id);
	PQclear(res);
	PQfinish(pg);
	return rc;
}

int
main(int argc, char **argv)
{
	const char *conninfo = NULL;
	const char *cmd;

	/* global options before the command: -d CONNINFO, --help, --version */
	while (argc > 1 && argv[1][0] == '-')
	{
		if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		{
			usage(stdout);
			return 0;
		}
		if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0)
		{
			printf("lockq %s\n", lockqc_version());
			return 0;
		}
		if ((strcmp(argv[1], "-d") == 0 || strcmp(argv[1], "--dbname") == 0) && argc > 2)
		{
			conninfo = conninfo_arg(argv[2]);
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
	if (strcmp(cmd, "force-release") == 0)
		return cmd_force_release(argc, argv, conninfo);
	die_usage("unknown command \"%s\"", cmd);
	return EXIT_USAGE;
}

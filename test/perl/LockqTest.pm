# test/perl/LockqTest.pm
#
# Helpers shared by lockq's TAP tests: a node with lockq preloaded, blocked
# waiters in background psql sessions, and polling on the lock views.
# Every wait is a poll_query_until or a pump until expected output; there
# are no bare sleeps.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

package LockqTest;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use File::Copy ();
use File::Path ();
use IPC::Run ();

use Exporter 'import';
our @EXPORT = qw(lockq_node start_waiter waiter_result wait_for_waiters
  wait_for_holder worker_pid scalar_query crash_restart end_session
  require_tool fault_functions fault_fired wait_for_worker queue_of
  backend_pid create_churn node_client go_client go_run start_pgbouncer
  poll_until wait_for_exit lock_servers server_sql server_of id_of_server
  id_beside at_server server_name);

# require_tool(ok, what) skips the whole test file when a tool it needs is
# missing (ok false), with what as the reason; but under make test
# (LOCKQ_MAKE_TEST=1), which installs every tool, a missing tool is a
# failure: no test is skipped silently there.
sub require_tool
{
	my ($ok, $what) = @_;
	return if $ok;
	if ($ENV{LOCKQ_MAKE_TEST})
	{
		plan tests => 1;
		fail("required tool missing under make test: $what");
		exit 0;
	}
	plan skip_all => $what;
}

# lockq_node(name, %opts) creates and starts a node with lockq preloaded
# and the extension created in database postgres.  opts: conf (more
# settings), init (options of init), new (of PostgreSQL::Test::Cluster->new,
# such as install_path), no_start, no_extension.
sub lockq_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name, %{ $opts{new} // {} });
	$node->init(%{ $opts{init} // {} });
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'lockq'
lockq.database = 'postgres'
log_min_messages = info
log_line_prefix = '%m [%p] %b '
max_connections = 100
search_path = '"\$user", public, lockq'
});
	# the suite's second configuration: N lock servers (make test LOCK_SERVERS=N)
	$node->append_conf('postgresql.conf',
		"lockq.lock_servers = $ENV{LOCKQ_TEST_LOCK_SERVERS}\n")
	  if $ENV{LOCKQ_TEST_LOCK_SERVERS};
	$node->append_conf('postgresql.conf', $opts{conf}) if $opts{conf};
	$node->start unless $opts{no_start};
	$node->safe_psql('postgres', 'CREATE EXTENSION lockq')
	  unless $opts{no_start} || $opts{no_extension};
	return $node;
}

# scalar_query(node, sql) runs a query and returns its single value.
sub scalar_query
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# start_waiter(node, name, sql) opens a background session, tags it with
# application_name = name and sends sql without waiting for it to finish.
# The statement's output appears in the session's stdout when it does.
sub start_waiter
{
	my ($node, $name, $sql) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET application_name = '$name'");
	$s->{stdin} .= "$sql\n";
	$s->{run}->pump_nb();
	return $s;
}

# waiter_result(session, regex) pumps the session until its output matches
# regex (or the default timeout hits) and returns the first capture group.
sub waiter_result
{
	my ($s, $re) = @_;
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	$s->{run}->pump_nb();
	until ($s->{stdout} =~ $re || $s->{stderr} =~ $re || $timeout->is_expired)
	{
		$s->{run}->pump();
	}
	my $out = $s->{stdout} . $s->{stderr};
	return $1 if $out =~ $re;
	return undef;
}

# end_session(session) ends a background psql whose server side may be gone
# (terminated backend, crashed server): psql keeps reading its input after
# a lost connection, so it must be told to quit.
sub end_session
{
	my ($s) = @_;
	# writing to a psql that already exited fails with EPIPE
	eval { $s->{run}->pump_nb(); };
	$s->{stdin} .= "\\q\n" if $s->{run}->pumpable();
	eval { $s->{run}->finish; };
	return;
}

# wait_for_waiters(node, lock, n) polls until lock has n queued waiters.
sub wait_for_waiters
{
	my ($node, $lock, $n) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM lockq_waiters WHERE lock_id = '$lock'");
}

# queue_of(node, lock) returns the owners queued for lock, in grant order,
# separated by spaces ('' when nobody waits).
sub queue_of
{
	my ($node, $lock) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(owner, ' ' ORDER BY position), '') FROM lockq_waiters WHERE lock_id = '$lock'"
	);
}

# backend_pid(node, app) returns the pid of the session whose
# application_name is app.
sub backend_pid
{
	my ($node, $app) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = '$app'");
}

# wait_for_holder(node, lock, owner) polls until owner holds lock.
sub wait_for_holder
{
	my ($node, $lock, $owner) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM lockq_locks WHERE lock_id = '$lock' AND owner = '$owner'"
	);
}

# poll_until(cond) calls cond every 50 ms until it returns true, or the
# default timeout passes; returns whether it did.  For a condition outside
# the database (a process, a file); inside, poll_query_until.
sub poll_until
{
	my ($cond) = @_;
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	$timeout->start;
	until ($cond->())
	{
		return 0 if $timeout->is_expired;
		select(undef, undef, undef, 0.05);
	}
	return 1;
}

# wait_for_exit(pid) polls until process pid is gone, zombie included (the
# postmaster has reaped it, so its PGPROC and BackendId are free); false if
# it is still there after the default timeout.
sub wait_for_exit
{
	my ($pid) = @_;
	return poll_until(sub { !-e "/proc/$pid" });
}

# crash_restart(node) kills the postmaster with SIGKILL and starts the node
# again.  The old postmaster and its children must be gone first: a process
# that has died but was not reaped yet still answers kill(pid, 0), and the
# new postmaster would refuse the data directory.  (The init process of
# some containers reaps orphans only every few seconds.)
sub crash_restart
{
	my ($node) = @_;
	my $pid = $node->{_pid};
	my $pgdata = $node->data_dir;
	$node->kill9;
	poll_until(sub { !(-e "/proc/$pid" || _has_children_of($pgdata)) });
	die "postmaster $pid did not go away" if -e "/proc/$pid";
	$node->start;
	return;
}

# _has_children_of(pgdata) is true while any postgres process of that data
# directory (by its command line or cwd) still exists, zombies included.
sub _has_children_of
{
	my ($pgdata) = @_;
	opendir(my $dh, '/proc') or return 0;
	for my $p (grep { /^\d+$/ } readdir $dh)
	{
		my $cwd = readlink("/proc/$p/cwd");
		if (defined $cwd && $cwd eq $pgdata)
		{
			closedir $dh;
			return 1;
		}
	}
	closedir $dh;
	return 0;
}

# fault_functions(node) creates the fault-injection functions of the test
# build (test/sql/lockq_fault.sql) in database postgres.  A build without
# fault injection cannot run these tests: that is a failure, not a skip.
sub fault_functions
{
	my ($node) = @_;
	my $sql = PostgreSQL::Test::Utils::slurp_file("$ENV{TESTDIR}/test/sql/lockq_fault.sql");
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	die "lockq was not built with FAULT_INJECTION=1 (make test does): $err"
	  if $rc != 0;
	return;
}

# fault_fired(node, name, n) polls until the fault point name has fired
# at least n times (default 1).
sub fault_fired
{
	my ($node, $name, $n) = @_;
	$n //= 1;
	return $node->poll_query_until('postgres',
		"SELECT coalesce((SELECT fired >= $n FROM lockq_faults() WHERE name = '$name'), false)");
}

# wait_for_worker(node, old_pid) polls until a lock server runs (one other
# than old_pid, if given) and answers; with several, until all run (none of
# them old_pid).
sub wait_for_worker
{
	my ($node, $old) = @_;
	if (lock_servers() > 1)
	{
		my $cond = defined $old ? "AND pid <> $old" : '';
		return $node->poll_query_until('postgres',
			"SELECT count(*) = " . lock_servers() . " FROM pg_stat_activity
			  WHERE backend_type = 'lockq lock server' $cond");
	}
	my $cond = defined $old ? "AND worker_pid <> $old" : '';
	return $node->poll_query_until('postgres',
		"SELECT worker_pid IS NOT NULL $cond FROM lockq_stats");
}

# create_churn(node) creates churn(n) in database postgres: n grants and
# releases of a session-bound lock, returning the largest token.
sub create_churn
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
CREATE FUNCTION churn(n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
	top bigint := 0;
BEGIN
	FOR i IN 1 .. n LOOP
		t := lockq_try('churn');
		IF t IS NULL OR NOT lockq_release('churn', NULL, t) THEN
			RAISE EXCEPTION 'churn: round % failed', i;
		END IF;
		top := greatest(top, t);
	END LOOP;
	RETURN top;
END $$;
});
	return;
}

# lock_servers(): the lock servers the nodes of lockq_node run
# (lockq.lock_servers: the suite's second configuration sets it).
sub lock_servers
{
	return $ENV{LOCKQ_TEST_LOCK_SERVERS} || 1;
}

# server_sql(expr): SQL for the number of the lock server that serves the
# lock id expr: its bucket (hashtext, which is the server's hash_bytes, of
# the id modulo 4096) modulo the number of lock servers.
sub server_sql
{
	my ($expr) = @_;
	return "((hashtext($expr)::bigint & 4294967295) % 4096) % " . lock_servers();
}

# server_of(node, lock) returns the number of the lock server that serves
# lock.
sub server_of
{
	my ($node, $lock) = @_;
	return 0 if lock_servers() == 1;
	return $node->safe_psql('postgres', 'SELECT ' . server_sql("'$lock'"));
}

# id_of_server(node, k, prefix) returns a lock id that lock server k
# serves: prefix itself, or prefix followed by the first number that makes
# one (so that a test can put locks of its own on one lock server).
sub id_of_server
{
	my ($node, $k, $prefix) = @_;
	return $prefix if lock_servers() == 1;
	return $node->safe_psql('postgres', qq{
		SELECT id FROM (SELECT i, '$prefix' || CASE WHEN i = 0 THEN '' ELSE i::text END AS id
						  FROM generate_series(0, 1000) i) s
		 WHERE } . server_sql('id') . qq{ = $k
		 ORDER BY i LIMIT 1});
}

# id_beside(node, lock, prefix): a lock id, as id_of_server makes them, that
# the lock server of lock serves.
sub id_beside
{
	my ($node, $lock, $prefix) = @_;
	return id_of_server($node, server_of($node, $lock), $prefix);
}

# at_server(node, lock) is what lockq_fault_arm's call takes after its
# other arguments so that the point fires only in the lock server of lock:
# ", server => k" with several lock servers, nothing with one.
sub at_server
{
	my ($node, $lock) = @_;
	return '' if lock_servers() == 1;
	return ', server => ' . server_of($node, $lock);
}

# server_name(node, [lock]): the application_name of the lock server that
# serves lock, or of lock server 0.
sub server_name
{
	my ($node, $lock) = @_;
	my $k = defined $lock ? server_of($node, $lock) : 0;
	return $k == 0 ? 'lockq lock server' : "lockq lock server $k";
}

# worker_pid(node, [lock]) returns the pid of the lock server that serves
# lock (with one lock server: the lock server), or of lock server 0.
sub worker_pid
{
	my ($node, $lock) = @_;
	my $name = server_name($node, $lock);
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'lockq lock server'
		    AND application_name = '$name'");
}

# node_client(): the Node.js client (client/node) in a directory of its
# own, with pg installed by npm ci (exactly the lock file's versions, from
# the registry).  Returns (dir, a sub for IPC::Run's init that enters it and
# sets npm's cache, npm's output); dir is undef if npm ci failed.
sub node_client
{
	my $src = "$ENV{TESTDIR}/client/node";
	my $dir = PostgreSQL::Test::Utils::tempdir() . '/node';
	File::Path::make_path("$dir/test", "$dir/tools", "$dir/app");
	File::Copy::copy("$src/$_", "$dir/$_") or die "copy $_: $!"
	  for qw(lockq.js lockq.d.ts README.md package.json package-lock.json test/lockq.test.js
	  tools/handoff.js tools/agent.js app/app.js app/typed-app.ts);
	my $env = sub {
		chdir $dir or die "chdir $dir: $!";
		$ENV{npm_config_cache} = "$dir/.npm";
		$ENV{npm_config_update_notifier} = 'false';
	};
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'npm', 'ci', '--no-audit', '--no-fund', '--ignore-scripts' ],
		'>', \$out, '2>', \$err, init => $env,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return (($? >> 8) == 0 ? $dir : undef, $env, $out . $err);
}

# go_client(): the Go module (client/go, import path "lockq") and the
# example that uses it (examples/go, "lockq-example") copied into a GOPATH
# of their own, built in GOPATH mode offline against Debian's
# golang-github-jackc-pgx-v4-dev, as a Debian -dev package of the module
# would be used.  Returns the GOPATH, or undef when go or pgx v4 is
# missing; the same one for every call of a test file.
my $gopath;

sub go_client
{
	return $gopath if $gopath;
	return undef unless system('go version >/dev/null 2>&1') == 0
	  && -d '/usr/share/gocode/src/github.com/jackc/pgx/v4/pgxpool';
	my $tmp = PostgreSQL::Test::Utils::tempdir();
	File::Path::make_path("$tmp/gopath/src");
	PostgreSQL::Test::RecursiveCopy::copypath("$ENV{TESTDIR}/client/go", "$tmp/gopath/src/lockq");
	PostgreSQL::Test::RecursiveCopy::copypath("$ENV{TESTDIR}/examples/go", "$tmp/gopath/src/lockq-example");
	return $gopath = "$tmp/gopath";
}

# go_run(args...): runs go in go_client()'s GOPATH (offline: Debian's
# sources only; the build cache persists where it can), from the example's
# directory; returns (exit status, output).
sub go_run
{
	my $cache = ($ENV{HOME} && -w $ENV{HOME}) ? "$ENV{HOME}/.cache/go-build" : "$gopath/../go-build";
	my $env = sub {
		chdir "$gopath/src/lockq-example" or die $!;
		@ENV{qw(GO111MODULE GOPATH GOCACHE GOPROXY GOFLAGS)} =
		  ('off', "$gopath:/usr/share/gocode", $cache, 'off', '');
	};
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'go', @_ ], '>', \$out, '2>', \$err, init => $env,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default * 2));
	return ($? >> 8, $out . $err);
}

# start_pgbouncer(node, %opts) starts a real pgbouncer in transaction
# pooling mode in front of node's database postgres, on the node's socket
# directory and on 127.0.0.1, with trust authentication.  opts: pool_size
# (default_pool_size; pgbouncer's default 20 if not given), databases (more
# lines for [databases]).  Returns a Cluster object that is never
# initialised and stands for pgbouncer's address (its psql, background_psql
# and poll_query_until connect through pgbouncer).  pgbouncer is stopped
# when the test ends, also when it dies.  In list context, also the
# IPC::Run handle of the pgbouncer process.
my @bouncers;

sub start_pgbouncer
{
	my ($node, %opts) = @_;
	my $bin = '/usr/sbin/pgbouncer';
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $bouncer = PostgreSQL::Test::Cluster->new('pgbouncer' . scalar(@bouncers), port => $port);
	my $dir = $bouncer->basedir;
	my $user = getpwuid($<);
	my ($host, $nport) = ($node->host, $node->port);
	my $size = defined $opts{pool_size} ? "default_pool_size = $opts{pool_size}\n" : '';
	PostgreSQL::Test::Utils::append_to_file("$dir/users.txt", qq{"$user" ""\n});
	PostgreSQL::Test::Utils::append_to_file(
		"$dir/pgbouncer.ini", qq{
[databases]
postgres = host=$host port=$nport dbname=postgres
@{[ $opts{databases} // '' ]}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $host
auth_type = trust
auth_file = $dir/users.txt
admin_users = $user
pool_mode = transaction
${size}max_client_conn = 100
logfile = @{[ $bouncer->logfile ]}
pidfile = $dir/pgbouncer.pid
});
	my ($out, $err) = ('', '');
	my $run = IPC::Run::start([ $bin, '-q', "$dir/pgbouncer.ini" ], '>', \$out, '2>', \$err);
	push @bouncers, $run;
	$bouncer->poll_query_until('postgres', 'SELECT true')
	  or BAIL_OUT("pgbouncer did not start: $err");
	return wantarray ? ($bouncer, $run) : $bouncer;
}

END
{
	local $?;
	for my $run (@bouncers)
	{
		next unless $run->pumpable;
		kill 'TERM', $run->{KIDS}[0]{PID};
		$run->finish;
	}
}

1;

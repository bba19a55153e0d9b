# Load and faults together.  Eight clients contend on three locks: three
# SQL sessions with explicit owners, two with session-bound locks, and
# three lockq run loops (liblockq, NOTIFY path).  Every critical section
# records itself in a fenced transaction (lockq_holds in the same
# transaction) when it starts and, if the lease is still valid, when it
# ends: (lock, owner, token, start, end) as seen by the holder.  Meanwhile
# the test kills -9 a lockq run process (holding or waiting), terminates a
# waiting backend, terminates the lock server, and kills -9 the postmaster
# and restarts it, twice over, each time waiting for the clients to make
# progress again.  Then:
#   - no two critical sections of one lock whose leases were valid at both
#     ends overlap in time;
#   - tokens of one lock strictly increase in the order of the sections;
#   - every client run ended cleanly or with a clear error (connection
#     lost, terminated, lock not acquired, lease lost), nothing else;
#   - nothing is left queued or held once the clients are gone and the
#     last leases ran out.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $lockq = "$ENV{TESTDIR}/client/lockq";
require_tool(-x $lockq, "$lockq not built");

my $node = lockq_node('chaos', conf => q{
lockq.max_grace = '2s'
max_connections = 60
});
my $conn = $node->connstr('postgres');
my $dir = "$PostgreSQL::Test::Utils::tmp_check/chaos";
mkdir $dir;
my ($bindir) = grep { -x "$_/psql" } split /:/, $ENV{PATH};
my $psql = "$bindir/psql";

$node->safe_psql('postgres', q{
CREATE TABLE chaos_log (id bigserial PRIMARY KEY, lock_id text, owner text,
	token bigint, via text, t_start timestamptz, t_end timestamptz);
CREATE TABLE chaos_lost (lock_id text, owner text, token bigint, via text);
CREATE TABLE chaos_stop ();

-- one critical section under lock l with token t: fenced start, some work,
-- fenced end (left NULL if the lease did not last)
CREATE PROCEDURE chaos_cs(l text, o text, t bigint, via text)
LANGUAGE plpgsql AS $$
DECLARE
	rid bigint;
BEGIN
	IF NOT lockq_holds(l, t) THEN
		INSERT INTO chaos_lost VALUES (l, o, t, via);
		COMMIT;
		RETURN;
	END IF;
	INSERT INTO chaos_log (lock_id, owner, token, via, t_start)
	VALUES (l, o, t, via, clock_timestamp()) RETURNING id INTO rid;
	COMMIT;
	PERFORM pg_sleep(0.005 + random() * 0.02);
	UPDATE chaos_log SET t_end = clock_timestamp()
	 WHERE id = rid AND lockq_holds(l, t);
	COMMIT;
END $$;

-- an SQL client: lockq_get, critical section, release, until told to stop
CREATE PROCEDURE chaos_sql_client(me text, session_bound boolean)
LANGUAGE plpgsql AS $$
DECLARE
	l text;
	o text;
	t bigint;
BEGIN
	LOOP
		EXIT WHEN EXISTS (SELECT FROM chaos_stop);
		l := 'L' || floor(random() * 3)::int;
		-- a new owner name for every run: a run that died may leave its
		-- grant behind until the lease ends
		o := CASE WHEN session_bound THEN NULL ELSE me || ':' || pg_backend_pid() END;
		t := lockq_get(l, o, '2 s', '60 s');
		COMMIT;
		CALL chaos_cs(l, coalesce(o, lockq_session_owner()), t, 'sql');
		PERFORM lockq_release(l, o, t);
		COMMIT;
	END LOOP;
END $$;
});

# The critical section run by lockq run, and the client loops.  Each loop
# writes one line per run: "rc=N" and the run's standard error.
open(my $fh, '>', "$dir/cs.sh") or die;
print $fh qq{#!/bin/sh
exec $psql -X -q -d "\$CHAOS_CONN" -c "CALL chaos_cs('\$LOCKQ_LOCK', '\$LOCKQ_OWNER', \$LOCKQ_TOKEN, 'lib')"
};
close $fh;
chmod 0755, "$dir/cs.sh";
$ENV{CHAOS_CONN} = $conn;

# sq(s) quotes s for the shell.
sub sq
{
	my ($s) = @_;
	$s =~ s/'/'\\''/g;
	return "'$s'";
}

# client_loop(name, cmd...) is a shell loop running cmd again and again
# until the stop file appears; a run that failed is retried after 0.2 s
# (the client's own back-off, as a real client would do).
sub client_loop
{
	my ($name, @cmd) = @_;
	my $q = join(' ', map { sq($_) } @cmd);
	my $err = sq("$dir/$name.err");
	my $log = sq("$dir/$name.log");
	my $stop = sq("$dir/stop");
	return qq{while [ ! -e $stop ]; do
	$q 2>$err >/dev/null; rc=\$?
	printf 'rc=%s %s\\n' "\$rc" "\$(tr '\\n' ' ' <$err)" >>$log
	[ \$rc -eq 0 ] || sleep 0.2
done};
}

my @clients;
for my $i (1 .. 3)
{
	push @clients, [ "sql$i", $psql, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conn,
		'-c', "CALL chaos_sql_client('sql$i', false)" ];
}
for my $i (4 .. 5)
{
	push @clients, [ "sql$i", $psql, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conn,
		'-c', "CALL chaos_sql_client('sql$i', true)" ];
}
for my $i (1 .. 3)
{
	push @clients, [ "lib$i", 'sh', '-c',
		"exec $lockq run -d " . sq($conn) . " --ttl 2s --timeout 60s --grace 1s L\$((\$\$ % 3)) -- $dir/cs.sh" ];
}
my @procs;
# should the test die half-way, the client loops must not outlive it
END
{
	if (defined $dir && -d $dir && open(my $sf, '>', "$dir/stop"))
	{
		close $sf;
	}
	eval { $_->kill_kill(grace => 5) for @procs; };
}
for my $c (@clients)
{
	my ($name, @cmd) = @$c;
	push @procs, IPC::Run::start([ 'bash', '-c', client_loop($name, @cmd) ],
		'<', '/dev/null', '>', '/dev/null', '2>', "$dir/$name.loop");
}

# progress(n): wait until n more critical sections have completed.
sub progress
{
	my ($n, $what) = @_;
	my $base = $node->safe_psql('postgres', 'SELECT count(t_end) FROM chaos_log');
	ok($node->poll_query_until('postgres',
			"SELECT count(t_end) >= $base + $n FROM chaos_log"),
		"clients make progress $what");
}

progress(30, 'at the start');
for my $round (1 .. 2)
{
	# kill -9 a lockq run process, holding or waiting
	my ($out, $err) = ('', '');
	my $killed = 0;
	for my $try (1 .. 2000)
	{
		IPC::Run::run([ 'pgrep', '-f', '--', "^$lockq run" ], '>', \$out, '2>', \$err);
		my @pids = grep { /^\d+$/ } split /\n/, $out;
		if (@pids)
		{
			$killed = kill 'KILL', $pids[ int(rand(@pids)) ];
			last if $killed;
		}
	}
	ok($killed, "round $round: a lockq run process killed with SIGKILL");
	progress(10, "after the kill -9 of a lockq run (round $round)");

	# terminate a backend that is waiting in lockq_get
	ok($node->poll_query_until('postgres', q{
		SELECT coalesce(bool_or(pg_terminate_backend(session_pid)), false)
		  FROM (SELECT session_pid FROM lockq_waiters
				 WHERE kind = 'backend' ORDER BY random() LIMIT 1) w}),
		"round $round: a waiting backend terminated");
	progress(10, "after a waiter was terminated (round $round)");

	# terminate the lock server
	my $w = worker_pid($node);
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($w)");
	ok($node->poll_query_until('postgres', qq{
		SELECT worker_pid IS NOT NULL AND worker_pid <> $w FROM lockq_stats}),
		"round $round: the lock server was terminated and came back");
	progress(10, "after the lock server restarted (round $round)");

	# kill -9 the postmaster, start again
	crash_restart($node);
	progress(10, "after a crash and restart (round $round)");
}

# stop the clients: the SQL loops check chaos_stop, lockq run ends its run
open($fh, '>', "$dir/stop") or die;
close $fh;
$node->safe_psql('postgres', 'INSERT INTO chaos_stop DEFAULT VALUES');
for my $p (@procs)
{
	$p->finish;
}
pass('every client loop ended');

# --- the checks ---------------------------------------------------------------
my $total = scalar_query($node, 'SELECT count(*) FROM chaos_log');
my $complete = scalar_query($node, 'SELECT count(t_end) FROM chaos_log');
my $lib = scalar_query($node, q{SELECT count(t_end) FROM chaos_log WHERE via = 'lib'});
note("critical sections: $total started, $complete with a valid lease at both ends, $lib of them through lockq run");
cmp_ok($lib, '>', 0, 'lockq run clients completed critical sections too');

is(scalar_query($node, q{
	SELECT count(*) FROM chaos_log a JOIN chaos_log b
	    ON a.lock_id = b.lock_id AND a.id < b.id
	 WHERE a.t_end IS NOT NULL AND b.t_end IS NOT NULL
	   AND b.t_start < a.t_end AND a.t_start < b.t_end}), '0',
	'no two critical sections of one lock with valid leases overlap');
is(scalar_query($node, q{
	SELECT count(*) FROM (
		SELECT token, lag(token) OVER (PARTITION BY lock_id ORDER BY id) AS prev
		  FROM chaos_log) x
	 WHERE token <= prev}), '0',
	'tokens of each lock strictly increase in the order of the sections');
is(scalar_query($node, 'SELECT count(DISTINCT token) = count(*) FROM chaos_log'), 't',
	'no token was issued twice');

# every run ended cleanly or with a clear error
my $clear = qr/^rc=(0|75|76|137|143) |^rc=[12] .*(terminating connection|server closed the connection unexpectedly|connection to server .* failed|could not connect|the database system is (starting up|in recovery mode|shutting down)|no connection to the server|connection to server was lost|Connection refused|No such file or directory)|^rc=69 .*(could not connect|connection|server|shutting down|starting up|recovery)/;
my (@unclear, $runs);
for my $c (@clients)
{
	my $name = $c->[0];
	open(my $lf, '<', "$dir/$name.log") or next;
	while (my $line = <$lf>)
	{
		chomp $line;
		$runs++;
		push @unclear, "$name: $line" unless $line =~ $clear;
	}
	close $lf;
}
cmp_ok($runs, '>', 0, 'client runs were logged');
is(scalar(@unclear), 0, 'every client run ended cleanly or with a clear error')
  or diag(join("\n", @unclear[ 0 .. ($#unclear > 20 ? 20 : $#unclear) ]));

# nothing is left for a dead waiter or holder
ok($node->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM lockq_waiters'),
	'no queue entry is left');
ok($node->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM lockq_locks'),
	'no grant is left once the last leases ran out');
is(scalar_query($node, 'SELECT count(*) FROM lockq.queue'), '0',
	'lockq.queue is empty');

done_testing();

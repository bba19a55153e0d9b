# The spins of lockq.spin_time.  The lock server's (lq_wait_for_work in
# lockq_worker.c): while requests come close together it stays awake
# between them instead of sleeping; when they come further apart it sleeps
# at once.  Measured as the share of the lock server's CPU time (from
# /proc) in the wall time of a stream of leased grants and releases from
# one session.  Checked:
#  * a dense stream (no pause): with lockq.spin_time = 1000 the lock server
#    is on the CPU most of the time (fails if it never spins), and with 0
#    far less of it (fails if 0 does not turn spinning off);
#  * a sparse stream (5 ms between pairs, each pair's release right after
#    its grant) with lockq.spin_time = 1000: it stays off the CPU (fails if
#    a single short wait started a spin: that would be 1 ms of every 5);
#  * every grant of both streams was answered and released;
#  * the backends' spin for their answers (lq_await_spin in lockq_call.c):
#    in a dense stream the session's backend sleeps (a voluntary context
#    switch, from /proc/self/status) for almost no answer where it has a
#    core beside the spinning lock server (fails if backends never spin),
#    for each with lockq.spin_time = 0 (fails if 0 does not turn it off),
#    and for many when the server runs on a single CPU (taskset: fails if
#    a backend spins where the lock server already takes the only core);
#  * a wait for a release is not spun for: lockq_enqueue with a wait (as
#    liblockq waits in the backend) for a lock that another owner holds
#    costs its backend far less CPU per call (from /proc/self/schedstat)
#    than the spin's 1 ms (fails if such an enqueue spins: it did, and
#    took the core that the holder's release needed).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use POSIX ();
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

plan skip_all => 'needs /proc' unless -r "/proc/$$/stat";

my $node = lockq_node('spin', conf => "lockq.spin_time = 1000\n");
$node->safe_psql('postgres', q{
CREATE FUNCTION stream(n int, pause float8) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
	done int := 0;
BEGIN
	FOR i IN 1 .. n LOOP
		t := lockq_try('spin:' || i, 'o', '30 seconds');
		IF t IS NOT NULL AND lockq_release('spin:' || i, 'o', t) THEN
			done := done + 1;
		END IF;
		IF pause > 0 THEN
			PERFORM pg_sleep(pause);
		END IF;
	END LOOP;
	RETURN done;
END $$;
-- this backend's time on a CPU so far, in ns
CREATE FUNCTION cpu_ns() RETURNS bigint LANGUAGE sql AS $$
	SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint
$$;
-- this backend's voluntary context switches (its sleeps) so far
CREATE FUNCTION sleeps() RETURNS bigint LANGUAGE sql AS $$
	SELECT (regexp_match(pg_read_file('/proc/self/status'),
						 '(?:^|\n)voluntary_ctxt_switches:\s+(\d+)'))[1]::bigint
$$;
});

my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK());

# cpu_ticks(pid): user + system time of a process, in clock ticks.
sub cpu_ticks
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or die "cannot read /proc/$pid/stat: $!";
	my $line = <$fh>;
	close($fh);
	# the fields after the command name, which is in parentheses
	my @f = split(' ', substr($line, rindex($line, ')') + 2));
	return $f[11] + $f[12];
}

# share(n, pause): runs stream(n, pause); returns the lock server's CPU
# time over the stream's wall time, and the pairs done.
sub share
{
	my ($n, $pause) = @_;
	my $pid = worker_pid($node);
	my $t0 = cpu_ticks($pid);
	my $w0 = time();
	my $done = $node->safe_psql('postgres', "SELECT stream($n, $pause)");
	my $wall = time() - $w0;
	my $cpu = (cpu_ticks($pid) - $t0) / $hz;
	note(sprintf('stream(%d, %s): %.2f s, lock server CPU %.2f s', $n, $pause, $wall, $cpu));
	return ($cpu / $wall, $done);
}

# sleeps_per_pair(n): runs a dense stream(n, 0) in one session; returns
# its backend's voluntary context switches per pair, and the pairs done.
# Only the lockq_try waits for an answer (the release by token is a quick
# release), so a backend that sleeps for every answer sleeps about once
# per pair.
sub sleeps_per_pair
{
	my ($n) = @_;
	my ($before, $done, $after) = split(/\n/,
		$node->safe_psql('postgres', "SELECT sleeps(); SELECT stream($n, 0); SELECT sleeps()"));
	my $per = ($after - $before) / $n;
	note(sprintf('stream(%d, 0): the backend slept %.3f times per pair', $n, $per));
	return ($per, $done);
}

# cpus(): the CPU list of this process's affinity (taskset's form, e.g.
# "0-3,6"), and how many CPUs it has; ('', 0) without taskset.  The
# server this test starts inherits it.
sub cpus
{
	my $out = `taskset -c -p $$ 2>/dev/null`;
	return ('', 0) unless defined $out && $out =~ /:\s*([\d,-]+)\s*$/;
	my $list = $1;
	my $n = 0;
	for my $r (split(/,/, $list))
	{
		my ($lo, $hi) = split(/-/, $r);
		$n += defined $hi ? $hi - $lo + 1 : 1;
	}
	return ($list, $n);
}
my ($cpu_list, $ncpus) = cpus();
# a cgroup CPU limit (a container's) counts too: the server logs its cap
my ($cap) = slurp_file($node->logfile) =~ /at most (\d+) process(?:es)? spins? for lockq at once/;
$ncpus = $cap if defined $cap && $cap < $ncpus;

# warm up (the first grants create the lock server's caches)
share(500, 0);

my ($dense, $done) = share(30000, 0);
is($done, 30000, 'dense stream: every pair granted and released');
cmp_ok($dense, '>', 0.6, 'spin_time 1000: the lock server spins between dense requests');

my ($sparse, $done2) = share(200, 0.005);
is($done2, 200, 'sparse stream: every pair granted and released');
cmp_ok($sparse, '<', 0.12, 'spin_time 1000: it sleeps between sparse requests');

SKIP:
{
	skip 'a backend spins only beside the lock server: needs two CPUs (affinity, cgroup limit)', 4
	  if $ncpus < 2;
	my ($per, $n) = sleeps_per_pair(20000);
	is($n, 20000, 'backend spin: every pair granted and released');
	cmp_ok($per, '<', 0.2,
		'spin_time 1000: a backend with a core beside the lock server waits for its answers awake');

	# 50 calls of 10 ms each, behind a lease of another owner (the server
	# runs on this kernel: its backends have schedstat where we have it)
	my $schedstat = -r '/proc/self/schedstat';
	my $cpu = $schedstat ? 'cpu_ns()' : 'NULL';
	my $t = $node->safe_psql('postgres', "SELECT lockq_try('spin:held', 'h', '1 minute')");
	my ($c0, $queued, $c1) = split(/\n/, $node->safe_psql('postgres', qq{
		SELECT $cpu;
		SELECT count(*) FROM generate_series(1, 50)
		 WHERE lockq_enqueue('spin:held', 'w', '30 seconds', NULL, '10 seconds', '10 ms') IS NULL;
		SELECT $cpu}));
	is($queued, 50, 'each lockq_enqueue with a wait behind the holder ends queued');
	SKIP:
	{
		skip 'needs /proc/self/schedstat', 1 unless $schedstat;
		my $us = ($c1 - $c0) / 50 / 1000;
		note(sprintf('lockq_enqueue with a wait behind a holder: %.0f us of CPU per call', $us));
		cmp_ok($us, '<', 300, 'a backend does not spin for an answer that waits for a release');
	}
	$node->safe_psql('postgres',
		"SELECT lockq_cancel('spin:held', 'w'), lockq_release('spin:held', 'h', $t)");
}

$node->append_conf('postgresql.conf', "lockq.spin_time = 0\n");
$node->restart;
wait_for_worker($node);
share(500, 0);
my ($off, $done3) = share(30000, 0);
is($done3, 30000, 'spin_time 0: every pair granted and released');
cmp_ok($off, '<', $dense - 0.2,
	'spin_time 0: the lock server sleeps between requests, far less on the CPU');
my ($per_off, $done4) = sleeps_per_pair(20000);
is($done4, 20000, 'spin_time 0: every pair of the session granted and released');
cmp_ok($per_off, '>', 0.8, 'spin_time 0: a backend sleeps for each answer');

# On one CPU the lock server's spin takes it: no backend spins beside it.
SKIP:
{
	skip 'needs taskset', 2 if $ncpus < 1;
	my ($first) = $cpu_list =~ /^(\d+)/;
	$node->append_conf('postgresql.conf', "lockq.spin_time = 1000\n");
	system('taskset', '-p', '-c', $first, $$) == 0 or die 'taskset failed';
	$node->restart;
	system('taskset', '-p', '-c', $cpu_list, $$) == 0 or die 'taskset failed';
	wait_for_worker($node);
	share(500, 0);
	my ($per1, $n1) = sleeps_per_pair(20000);
	is($n1, 20000, 'one CPU: every pair granted and released');
	# about half of the answers come as the lock server, woken, preempts
	# the backend before it sleeps; a backend that spins sleeps for none
	cmp_ok($per1, '>', 0.2, 'one CPU: backends do not spin beside the spinning lock server');
}

$node->stop;
done_testing();

# The lock server's spin (lockq.spin_time, lq_wait_for_work in
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
#  * every grant of both streams was answered and released.
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

# warm up (the first grants create the lock server's caches)
share(500, 0);

my ($dense, $done) = share(30000, 0);
is($done, 30000, 'dense stream: every pair granted and released');
cmp_ok($dense, '>', 0.6, 'spin_time 1000: the lock server spins between dense requests');

my ($sparse, $done2) = share(200, 0.005);
is($done2, 200, 'sparse stream: every pair granted and released');
cmp_ok($sparse, '<', 0.12, 'spin_time 1000: it sleeps between sparse requests');

$node->append_conf('postgresql.conf', "lockq.spin_time = 0\n");
$node->restart;
wait_for_worker($node);
share(500, 0);
my ($off, $done3) = share(30000, 0);
is($done3, 30000, 'spin_time 0: every pair granted and released');
cmp_ok($off, '<', $dense - 0.2,
	'spin_time 0: the lock server sleeps between requests, far less on the CPU');

$node->stop;
done_testing();

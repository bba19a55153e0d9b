# Nothing comes back from the dead (invariant I1): once lockq_holds(L, t)
# has returned false, or a later token of L was shown, or the release of t
# was acknowledged, t never holds again and cannot be renewed -- across a
# crash (kill -9, pg_ctl stop -m immediate) and a clean restart.  And a
# clean restart neither revives nor stretches leases: the time the server
# was down counts against them, exactly.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;

my $node = lockq_node('revival', conf => "restart_after_crash = on\n");

sub dead_after
{
	my ($what, $lock, $owner, $t) = @_;
	is(scalar_query($node, "SELECT lockq_holds('$lock', $t)"), 'f',
		"$what: lockq_holds($lock, $t) is false");
	# (before the crash, a grant whose hand-off a fenced transaction holds
	# back is still shown, with its lease cut)
	is(scalar_query($node,
			"SELECT count(*) FROM lockq_locks WHERE token = $t AND expires > now()"), '0',
		"$what: lockq_locks does not show it current");
	is(scalar_query($node, "SELECT lockq_renew('$lock', '$owner', $t, '1 hour')"), 'f',
		"$what: it cannot be renewed");
	return;
}

# seconds of lease left on a lock, by lockq's clock
sub remaining
{
	my ($lock) = @_;
	return scalar_query($node,
		"SELECT ((extract(epoch FROM expires) * 1000000)::bigint - lockq_now()) / 1000000.0 FROM lockq_locks WHERE lock_id = '$lock'");
}

# --- a release whose hand-off a fenced transaction holds back -------------
my $ta = scalar_query($node, "SELECT lockq_try('L1', 'a', '2 minutes')");
my $fence = $node->background_psql('postgres');
is($fence->query_safe("BEGIN; SELECT lockq_holds('L1', $ta)"), 't',
	'another transaction is fenced on a 2-minute grant of L1');
is(scalar_query($node, "SELECT lockq_release('L1', 'a', $ta)"), 't', 'a releases L1');
is(scalar_query($node, "SELECT deferred_handoffs FROM lockq_stats"), '1',
	'the hand-off is deferred');
dead_after('before the crash', 'L1', 'a', $ta);

# --- an expired short lease whose successor was told its token --------------
my $t1 = scalar_query($node, "SELECT lockq_try('L2', 'first', '1 second')");
my $w = start_waiter($node, 'second',
	"SELECT 'granted:' || lockq_get('L2', 'second', '30 seconds');");
my $t2 = waiter_result($w, qr/granted:(\d+)/);
ok($t2 > $t1, 'the 1 s lease of L2 expires and passes on; the successor is told its token');
dead_after('before the crash', 'L2', 'first', $t1);
$w->quit;

# --- the crash --------------------------------------------------------------
$node->stop('immediate');
$fence->{run}->kill_kill;
$node->start;
wait_for_worker($node);
dead_after('after pg_ctl stop -m immediate', 'L1', 'a', $ta);
dead_after('after pg_ctl stop -m immediate', 'L2', 'first', $t1);
my $h2 = scalar_query($node, "SELECT lockq_holds('L2', $t2)");
my $delayed = scalar_query($node, "SELECT count(*) FROM lockq.unsettled WHERE lock_id = 'L2' AND delay_until > 0");
ok($h2 eq 't' || $delayed eq '1',
	"the successor's grant survived ($h2), or, if the crash may have taken it, L2 is delayed");

# --- the same with kill -9, right after the end was shown -------------------
my $t3 = scalar_query($node, "SELECT lockq_try('L3', 'c', '30 seconds')");
is(scalar_query($node, "SELECT lockq_release('L3', 'c', $t3)"), 't', 'c releases L3');
my $t4 = scalar_query($node, "SELECT lockq_try('L3', 'd', '30 seconds')");
ok($t4 > $t3, 'd takes L3: a later token is shown');
crash_restart($node);
wait_for_worker($node);
dead_after('after kill -9', 'L3', 'c', $t3);

# --- a clean restart: nothing that ended comes back, nothing is stretched ---
my $short = scalar_query($node, "SELECT lockq_try('L4', 'e', '1 second')");
my $long = scalar_query($node, "SELECT lockq_try('L5', 'f', '2 minutes')");
ok($node->poll_query_until('postgres', "SELECT NOT lockq_holds('L4', $short)"),
	'the 1 s lease ends before the restart');
my $before = remaining('L5');
my $t_stop = time();
$node->restart;
wait_for_worker($node);
my $after = remaining('L5');
my $gap = time() - $t_stop;
note sprintf('L5: %.3f s left before, %.3f s after a restart of %.3f s', $before, $after, $gap);
dead_after('after a clean restart', 'L4', 'e', $short);
cmp_ok($after, '<=', $before - $gap + 0.5, 'the time the server was down counted against the lease');
cmp_ok($after, '>=', $before - $gap - 0.5, 'and nothing more');
ok(!$node->log_contains('could not open relation'), 'the clean stop wrote its state');

# --- and a crash: the lease keeps exactly the time it had ------------------
$before = remaining('L5');
$t_stop = time();
crash_restart($node);
wait_for_worker($node);
$after = remaining('L5');
$gap = time() - $t_stop;
note sprintf('L5: %.3f s left before, %.3f s after a crash of %.3f s', $before, $after, $gap);
cmp_ok($after, '<=', $before - $gap + 0.5, 'a crash does not stretch the lease either');
cmp_ok($after, '>=', $before - $gap - 0.5, 'nor shorten it');
is(scalar_query($node, "SELECT lockq_holds('L5', $long)"), 't', 'the long lease survived both');

# --- while the lock server settles after a crash --------------------------
# After a crash the tables still hold a grant whose release was shown but
# lost; the lock server ends it (lq_tables_settle) in its first transaction,
# and its clock is ready before that commits.  lockq_holds, which reads
# the table, must wait for that commit.  The new lock server is held right
# after the settle (recover-after-owners) to look into the window; a long
# wal_writer_delay keeps the release in WAL buffers until the crash.
fault_functions($node);
$node->append_conf('postgresql.conf', qq{
wal_writer_delay = '10s'
lockq.fault_points = 'recover-after-owners:wait'
});
$node->reload;
my $t6 = scalar_query($node, "SELECT lockq_try('L6', 'g', '30 seconds')");
is(scalar_query($node, "SELECT lockq_release('L6', 'g', $t6)"), 't', 'g releases L6');
crash_restart($node);
ok($node->poll_query_until('postgres',
		"SELECT coalesce((SELECT waiting > 0 FROM lockq_faults() WHERE name = 'recover-after-owners'), false)"),
	'the new lock server waits after settling, before its commit');
my $h = start_waiter($node, 'holds6', "SELECT 'holds:' || lockq_holds('L6', $t6);");
ok($node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE application_name = 'holds6'"),
	'lockq_holds waits for the lock server');
$h->{run}->pump_nb();
unlike($h->{stdout}, qr/holds:/, 'and has not answered');
$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('recover-after-owners')");
is(waiter_result($h, qr/holds:(\w)/), 'f',
	'once the lock server has committed, the released grant does not hold');
$h->quit;
dead_after('after kill -9, seen as the lock server starts', 'L6', 'g', $t6);
$node->adjust_conf('postgresql.conf', 'lockq.fault_points', "''");
$node->adjust_conf('postgresql.conf', 'wal_writer_delay', "'200ms'");
$node->reload;
$node->safe_psql('postgres', 'SELECT lockq_fault_disarm()');

$node->stop;
done_testing();

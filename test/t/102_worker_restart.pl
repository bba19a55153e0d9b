# The lock server is terminated (pg_terminate_backend): it restarts, keeps
# the grants and the queue, takes over requests that were in flight, and no
# waiter hangs.  With several lock servers (the suite's second
# configuration) the one terminated is that of the test's locks, and the
# locks of one case are put on one lock server.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $node = lockq_node('worker');

# restart_worker(lock): terminates the lock server of lock, waits for it
# to come back, returns its new pid.
sub restart_worker
{
	my ($lock) = @_;
	my $old = worker_pid($node, $lock);
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(wait_for_worker($node, $old), 'the lock server came back with a new pid');
	return worker_pid($node, $lock);
}

my $pid1 = worker_pid($node, 'W');
ok($pid1 > 0, 'lock server is running');

# Grants, backend waiters and a client-side waiter.
my $t_hold = scalar_query($node, "SELECT lockq_try('W', 'holder', '1 hour')");
my $other = id_beside($node, 'W', 'other');
my $t_sess = scalar_query($node, "SELECT lockq_try('$other', 'keeper', '1 hour')");
my @w;
for my $n (qw(w1 w2))
{
	push @w, start_waiter($node, $n,
		"SELECT 'granted:' || lockq_get('W', '$n', '1 hour');");
	ok(wait_for_waiters($node, 'W', scalar @w), "$n queued");
}
is(scalar_query($node, "SELECT lockq_enqueue('W', 'c1', '1 hour', NULL, '1 hour') IS NULL"),
	't', 'client waiter c1 queued');
my $queue_before = $node->safe_psql('postgres',
	"SELECT string_agg(owner || '\@' || ts, ' ' ORDER BY position) FROM lockq_waiters");

my $pid2 = restart_worker('W');
is($node->safe_psql('postgres',
		"SELECT string_agg(owner || '\@' || ts, ' ' ORDER BY position) FROM lockq_waiters"),
	$queue_before, 'the queue survived, same order and positions');
is(scalar_query($node, "SELECT token FROM lockq_locks WHERE lock_id = 'W'"),
	$t_hold, 'the grant survived');
is(scalar_query($node, "SELECT lockq_holds('$other', $t_sess)"), 't',
	'an unrelated grant is still current');
is(scalar_query($node, 'SELECT worker_starts FROM lockq_stats'), lock_servers() + 1,
	'the restart is counted');

# The service works: the queue drains in order.
is(scalar_query($node, "SELECT lockq_release('W', 'holder', $t_hold)"), 't',
	'holder releases after the restart');
like(waiter_result($w[0], qr/(granted:\d+)/), qr/granted/, 'w1 granted');
ok(scalar_query($node, "SELECT token FROM lockq_locks WHERE lock_id = 'W'") > $t_sess,
	'with a new, larger token');
is(scalar_query($node, "SELECT lockq_release('W', 'w1')"), 't', 'w1 releases');
like(waiter_result($w[1], qr/(granted:\d+)/), qr/granted/, 'w2 granted');
is(scalar_query($node, "SELECT lockq_release('W', 'w2')"), 't', 'w2 releases');
ok(scalar_query($node, "SELECT lockq_heartbeat('W', 'c1')") > 0,
	'c1 granted last');
scalar_query($node, "SELECT lockq_release('W', 'c1')");
$_->quit for @w;

# A request in flight when the worker goes: freeze the worker, send
# requests, terminate it, let it go.  The new worker answers them.
scalar_query($node, "SELECT lockq_try('F', 'holder', '1 hour')");
$pid2 = worker_pid($node, 'F');
my $g = id_beside($node, 'F', 'G');
kill 'STOP', $pid2;
my $try = start_waiter($node, 'inflight-try',
	"SELECT 'try:' || coalesce(lockq_try('$g', 'x', '1 minute')::text, 'null');");
my $get = start_waiter($node, 'inflight-get',
	"SELECT 'get:' || lockq_get('F', 'y', '1 minute');");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name LIKE 'inflight-%' AND wait_event = 'Extension'"
	),
	'both requests are waiting for the frozen worker');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid2)");
kill 'CONT', $pid2;
ok(wait_for_worker($node, $pid2), 'a new worker started');
like(waiter_result($try, qr/(try:\d+)/), qr/try:\d+/,
	'the in-flight lockq_try was answered with a token');
ok(wait_for_waiters($node, 'F', 1), 'the in-flight lockq_get was queued');
scalar_query($node, "SELECT lockq_release('F', 'holder')");
like(waiter_result($get, qr/(get:\d+)/), qr/get:\d+/,
	'and granted after the release');
$try->quit;
$get->quit;

# Clock and tokens keep increasing across worker restarts.
my $now_before = scalar_query($node, 'SELECT lockq_now()');
my $tok_before = scalar_query($node, "SELECT lockq_try('T', 'a')");
restart_worker('T');
ok(scalar_query($node, 'SELECT lockq_now()') > $now_before,
	'lockq_now keeps increasing across a worker restart');
ok(scalar_query($node, "SELECT lockq_try('T2', 'a')") > $tok_before,
	'tokens keep increasing across a worker restart');

# What a role has counts the same after a restart (the lock server counts
# its state again from what it loads, its old counts gone): a role at its
# limit of two grants with an owner is refused a third before and after,
# gets it once one of the two is released (not refused as if it had four,
# nor let past as if it had none), and is then at its limit again.
$node->safe_psql('postgres',
	"CREATE ROLE lim LOGIN; SELECT lockq_set_role_limits('lim', max_owner_locks => 2)");
sub as_lim
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', 'lim' ]);
}
my $t_l1 = as_lim("SELECT lockq_try('limit1', 'x', '1 hour')");
as_lim("SELECT lockq_try('limit2', 'x', '1 hour')");
sub refused_at_limit
{
	my ($id) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT lockq_try('$id', 'x', '1 hour')",
		extra_params => [ '-U', 'lim' ]);
	return $ret != 0
	  && $err =~ /as many locks with an owner as its limit allows \(2\)/;
}
ok(refused_at_limit('limit3'),
	'a third grant with an owner is refused at the limit');
restart_worker('limit1');
ok(refused_at_limit('limit3'),
	'and still refused after a restart of the lock server');
is(as_lim("SELECT lockq_release('limit1', 'x', $t_l1)"), 't',
	'one of the two released');
like(as_lim("SELECT lockq_try('limit3', 'x', '1 hour')"), qr/^\d+$/,
	'then the third is granted: the restart did not count the grants twice');
ok(refused_at_limit('limit4'), 'and a fourth is refused again');

$node->stop;
done_testing();

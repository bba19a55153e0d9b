# A batch of the lock server that fails, at each moment, leaves no trace
# and no reordering: waiters w1, w2, w3 queue behind a holder; the batch
# that releases the holder and hands the lock to w1 fails
#   - before its commit (an ERROR): it is applied again; w1, w2, w3 are
#     granted in that order;
#   - after its commit, before its answers are published (an ERROR): the
#     committed outcome is published, not applied a second time;
#   - after its commit, with the lock server exiting (FATAL): the next lock
#     server publishes it.
# In every case the holder's release is answered true exactly once and
# each waiter gets one token, in arrival order.  With several lock servers
# (the suite's second configuration) the fault is armed for the lock server
# of the scenario's lock.
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

my $node = lockq_node('batcherr');
fault_functions($node);

# scenario(lock, point, action): holder h and three waiters on lock; the
# fault fires in the batch that releases h.
sub scenario
{
	my ($lock, $point, $action) = @_;
	my $th = scalar_query($node, "SELECT lockq_try('$lock', 'h', '1 hour')");
	my @w;
	for my $i (1 .. 3)
	{
		push @w, start_waiter($node, "$lock-w$i",
			"SELECT 'granted:' || lockq_get('$lock', 'w$i', '1 hour');\n"
			  . "SELECT 'released:' || lockq_release('$lock', 'w$i');");
		ok(wait_for_waiters($node, $lock, $i), "$lock: w$i queues");
	}
	my $old = worker_pid($node, $lock);
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('$point', '$action'" . at_server($node, $lock) . ")");
	is(scalar_query($node, "SELECT lockq_release('$lock', 'h', $th)"), 't',
		"$lock: the holder's release is answered true ($point $action)");
	ok(fault_fired($node, $point), "$lock: the fault fired at $point");
	my @tok;
	for my $i (1 .. 3)
	{
		my $t = waiter_result($w[$i - 1], qr/granted:(\d+)/);
		ok(defined $t, "$lock: w$i is granted");
		push @tok, $t // 0;
		like(waiter_result($w[$i - 1], qr/(released:[tf])/), qr/released:t/,
			"$lock: w$i releases");
	}
	ok($tok[0] > $th && $tok[0] < $tok[1] && $tok[1] < $tok[2],
		"$lock: granted in arrival order, one token each (@tok after $th)");
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = '$lock'"),
		'0', "$lock: nothing is left held");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM lockq_waiters WHERE lock_id = '$lock'"),
		'0', "$lock: nothing is left queued");
	$_->quit for @w;
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('$point')");
	return $old;
}

scenario('before-commit', 'batch-before-commit', 'error');
scenario('after-commit', 'batch-after-commit', 'error');
my $old = scenario('after-commit-fatal', 'batch-after-commit', 'fatal');
ok(wait_for_worker($node, $old), 'the FATAL restarted the lock server');
ok($node->log_contains('published the last batch of its predecessor'),
	'the new lock server published the committed batch it found');
ok(!$node->log_contains('has two grants|holds two grants'),
	'never two grants of one lock');

$node->stop;
done_testing();

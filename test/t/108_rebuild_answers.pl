# A waiter whose lock becomes free while the lock server rebuilds its state
# (a restart of the lock server, the end of a grant's lease while none ran)
# is answered, once, with the grant; and a waiter's own timeout holds while
# the state cannot be loaded.  (Issue 21: the grant was decided while the
# state was loaded and its answer dropped by the pass over the requests in
# flight; the waiter waited forever, past its timeout.)  With several lock
# servers (the suite's second configuration) the one restarted is that of
# the case's lock.
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

my $node = lockq_node('rebuild');
fault_functions($node);

# lease_ends_while_down(owner_sql, label): a holder's lease ends while the
# lock server is gone (held at recover-start); the waiter that was queued
# behind it is granted when the new lock server loads the state, within its
# own timeout.
sub lease_ends_while_down
{
	my ($waiter_owner, $label) = @_;
	my $lock = "R-$label";
	my $t = scalar_query($node, "SELECT lockq_try('$lock', 'holder', '3 s')");
	ok($t > 0, "$label: holder has $lock with a short lease");
	my $until = scalar_query($node,
		"SELECT expires FROM lockq_locks WHERE lock_id = '$lock'");

	my $w = start_waiter($node, "w-$label",
		"SELECT 'got:' || lockq_get('$lock', $waiter_owner, '1 minute', timeout => '20 s');");
	ok(wait_for_waiters($node, $lock, 1), "$label: waiter queued");

	my $pid = worker_pid($node, $lock);
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('recover-start', 'wait'" . at_server($node, $lock) . ")");
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(fault_fired($node, 'recover-start'), "$label: the new lock server waits before it loads the state");
	ok($node->poll_query_until('postgres', "SELECT clock_timestamp() > '$until'::timestamptz + interval '100 ms'"),
		"$label: the lease ended while no lock server ran");
	my $woken = time;
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('recover-start')");
	like(waiter_result($w, qr/(got:\d+|ERROR:.*)/), qr/^got:\d+$/,
		"$label: the waiter is granted when the state is loaded");
	my $took = time - $woken;
	cmp_ok($took, '<', 10, "$label: within its timeout (${took}s)");
	ok(scalar_query($node,
			"SELECT token > $t FROM lockq_locks WHERE lock_id = '$lock'"),
		"$label: the lock is the waiter's, with a larger token");
	$w->quit;
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = '$lock'"),
		"$label: the waiter's session ended, and so did a session-bound grant")
	  if $waiter_owner eq 'NULL';
	scalar_query($node, "SELECT lockq_force_release('$lock')")
	  if $waiter_owner ne 'NULL';
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('recover-start')");
	return;
}

lease_ends_while_down("'w1'", 'owner');
lease_ends_while_down('NULL', 'session');

# timeout_while_down(fault, action, label): a lockq_get queued with a
# timeout, then the lock server goes and its successor cannot load the state
# (fault: waits before it, or fails at it): the call still ends at its own
# timeout (55P03, and the server log says why), and the wait is withdrawn:
# once the state loads, the lock is still the holder's and nobody waits.
sub timeout_while_down
{
	my ($fault, $action, $label) = @_;
	my $lock = "T-$label";
	my $t = scalar_query($node, "SELECT lockq_try('$lock', 'holder', '1 hour')");
	my $started = time;
	my $w = start_waiter($node, "t-$label",
		"SELECT 'got:' || lockq_get('$lock', 'tw', '1 minute', timeout => '4 s');");
	ok(wait_for_waiters($node, $lock, 1), "$label: waiter queued with a 4 s timeout");
	my $log_at = -s $node->logfile;
	my $pid = worker_pid($node, $lock);
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('$fault', '$action', 0, 0, 1000000" . at_server($node, $lock) . ")");
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(fault_fired($node, $fault), "$label: the new lock server cannot load the state");
	like(waiter_result($w, qr/(got:\d+|ERROR:.*)/),
		qr/could not obtain lock "$lock" within the timeout/,
		"$label: the waiter gets 55P03 at its timeout");
	my $took = time - $started;
	cmp_ok($took, '<', 7, "$label: 4 s timeout kept (${took}s from the call)");
	ok($node->wait_for_log(qr/lockq wait for lock "$lock" ended at its limit without an answer from the lock server/, $log_at),
		"$label: the server log says why");
	$w->quit;
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('$fault')");
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('$fault')") if $action eq 'wait';
	ok(wait_for_worker($node), "$label: the lock server loads the state");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM lockq_waiters WHERE lock_id = '$lock'"),
		"$label: the withdrawn wait is gone");
	is(scalar_query($node, "SELECT token FROM lockq_locks WHERE lock_id = '$lock'"),
		$t, "$label: the holder still holds");
	scalar_query($node, "SELECT lockq_release('$lock', 'holder', $t)");
	return;
}

timeout_while_down('recover-start', 'wait', 'not-running');
timeout_while_down('recover-after-owners', 'error', 'cannot-load');

done_testing();

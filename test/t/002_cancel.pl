# Timeout, query cancel and session death leave no queue entry behind and
# never an orphaned grant; session-bound locks end with their session.
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

my $node = lockq_node('cancel');

sub get_sql
{
	my ($lock, $owner, $timeout) = @_;
	my $t = defined $timeout ? ", '$timeout'" : '';
	return
	  "SELECT 'granted:' || lockq_get('$lock', '$owner', '1 hour'$t);\n\\echo after-$owner";
}

# --- timeout -------------------------------------------------------------
scalar_query($node, "SELECT lockq_try('T', 'holder', '1 hour')");
my $t1 = start_waiter($node, 'tw1', get_sql('T', 'tw1', '500 ms'));
ok(wait_for_waiters($node, 'T', 1), 'timed waiter queued');
my $t2 = start_waiter($node, 'tw2', get_sql('T', 'tw2'));
ok(wait_for_waiters($node, 'T', 2), 'second waiter queued behind it');
like(waiter_result($t1, qr/(could not obtain lock "T" within the timeout)/),
	qr/timeout/, 'lockq_get times out with the documented error');
ok(wait_for_waiters($node, 'T', 1), 'the timed-out waiter left the queue');
is(queue_of($node, 'T'), 'tw2', 'only the other waiter remains');
scalar_query($node, "SELECT lockq_release('T', 'holder')");
like(waiter_result($t2, qr/(granted:\d+)/), qr/granted/,
	'the next waiter still gets the lock');
$node->safe_psql('postgres', "SELECT lockq_release('T', 'tw2')");
$_->quit for ($t1, $t2);

# --- pg_cancel_backend and pg_terminate_backend of queued waiters ---------
scalar_query($node, "SELECT lockq_try('C', 'holder', '1 hour')");
my %w;
for my $n (qw(ca cb cc cd))
{
	$w{$n} = start_waiter($node, $n, get_sql('C', $n));
	ok(wait_for_waiters($node, 'C', scalar(keys %w)), "$n queued");
}
is(queue_of($node, 'C'), 'ca cb cc cd', 'four waiters in order');

$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(" . backend_pid($node, 'cb') . ")");
like(waiter_result($w{cb}, qr/(canceling statement due to user request)/),
	qr/canceling/, 'cancelled waiter gets the cancel error');
is(queue_of($node, 'C'), 'ca cc cd', 'cancelled waiter left no queue entry');

my $pid_cc = backend_pid($node, 'cc');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid_cc)");
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid_cc"),
	'terminated waiter is gone');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM lockq_waiters WHERE lock_id = 'C'"),
	'terminated waiter left no queue entry');
is(queue_of($node, 'C'), 'ca cd', 'remaining waiters keep their order');

scalar_query($node, "SELECT lockq_release('C', 'holder')");
like(waiter_result($w{ca}, qr/(granted:\d+)/), qr/granted/, 'ca is granted');
scalar_query($node, "SELECT lockq_release('C', 'ca')");
like(waiter_result($w{cd}, qr/(granted:\d+)/), qr/granted/, 'cd is granted after it');
scalar_query($node, "SELECT lockq_release('C', 'cd')");
end_session($w{cc});
$w{$_}->quit for qw(ca cb cd);

# --- a grant that races with a cancel is handed on at once -------------
# Stop the waiting backend, let the grant reach it, send the interrupt,
# then let it run: it sees the interrupt before it can take its answer.
for my $how (qw(cancel terminate))
{
	my $lock = "R-$how";
	scalar_query($node, "SELECT lockq_try('$lock', 'holder', '1 hour')");
	my $a = start_waiter($node, "ra-$how", get_sql($lock, 'ra'));
	ok(wait_for_waiters($node, $lock, 1), "$how: first waiter queued");
	my $b = start_waiter($node, "rb-$how", get_sql($lock, 'rb'));
	ok(wait_for_waiters($node, $lock, 2), "$how: second waiter queued");
	my $pid_a = backend_pid($node, "ra-$how");
	my $cancels = scalar_query($node, 'SELECT cancels FROM lockq_stats');

	kill 'STOP', $pid_a;
	scalar_query($node, "SELECT lockq_release('$lock', 'holder')");
	ok(wait_for_holder($node, $lock, 'ra'),
		"$how: the lock was granted to the stopped waiter");
	my $fn = $how eq 'cancel' ? 'pg_cancel_backend' : 'pg_terminate_backend';
	$node->safe_psql('postgres', "SELECT $fn($pid_a)");
	kill 'CONT', $pid_a;

	like(waiter_result($b, qr/(granted:\d+)/), qr/granted/,
		"$how: the grant passed on to the next waiter");
	is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = '$lock'"),
		'rb', "$how: the next waiter holds it");
	ok(scalar_query($node, 'SELECT cancels FROM lockq_stats') > $cancels,
		"$how: counted as a cancel");
	is(queue_of($node, $lock), '', "$how: nothing left in the queue");
	scalar_query($node, "SELECT lockq_release('$lock', 'rb')");
	end_session($a);
	$b->quit;
}

# --- session-bound locks end with the session ----------------------------
for my $how (qw(disconnect terminate))
{
	my $lock = "S-$how";
	my $h = $node->background_psql('postgres');
	$h->query_safe("SET application_name = 'sh-$how'");
	ok($h->query_safe("SELECT lockq_get('$lock', NULL, '1 hour')") > 0,
		"$how: session takes a session-bound lock with a one-hour lease");
	my $w = start_waiter($node, "sw-$how", get_sql($lock, 'sw'));
	ok(wait_for_waiters($node, $lock, 1), "$how: a waiter queues");

	if ($how eq 'disconnect')
	{
		$h->quit;
	}
	else
	{
		$node->safe_psql('postgres',
			"SELECT pg_terminate_backend(" . backend_pid($node, "sh-$how") . ")");
		end_session($h);
	}
	like(waiter_result($w, qr/(granted:\d+)/), qr/granted/,
		"$how: the waiter gets the lock without waiting for the lease");
	ok( scalar_query($node,
			"SELECT acquired < now() + interval '1 minute' FROM lockq_locks WHERE lock_id = '$lock'") eq 't',
		"$how: granted long before the holder's lease would have ended");
	scalar_query($node, "SELECT lockq_release('$lock', 'sw')");
	$w->quit;
}
ok(scalar_query($node, 'SELECT session_releases FROM lockq_stats') >= 2,
	'session ends are counted');

# --- a waiting session that disconnects leaves nothing ---------------------
scalar_query($node, "SELECT lockq_try('D', 'holder', '1 hour')");
my $d = start_waiter($node, 'dw',
	"SELECT 'granted:' || lockq_get('D', NULL, '1 hour');");
ok(wait_for_waiters($node, 'D', 1), 'session-owned waiter queued');
my $pid_d = backend_pid($node, 'dw');
$d->{run}->kill_kill;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid_d"),
	'client went away');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_waiters WHERE lock_id = 'D'"),
	'its queue entry went with it');
scalar_query($node, "SELECT lockq_release('D', 'holder')");

is(scalar_query($node, "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

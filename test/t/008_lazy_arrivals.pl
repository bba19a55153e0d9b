# Lazy arrivals: a lockq_get for a lock that another owner holds is queued
# without waking the lock server (it cannot be granted before that grant
# ends, and the lock server reads the arrival ring before it decides any
# end).  What must still hold:
#   - the views show such a waiter queued at once, in order, and count it,
#     waiting since its call (not since the lock server read it);
#   - waiters keep first-come-first-served order;
#   - a wait limit is kept, not stretched to the safety net (5 s);
#   - a waiter that read "held" just before the grant ended is not
#     stranded: whether it pushed its request after the lock server's last
#     look at the ring (it reads the hint again and wakes the lock server)
#     or before the lock server dropped the hint (the lock server looks at
#     the ring once more before it sleeps).  Both moments are forced with
#     fault points; a stranded waiter would wait for the 5 s safety net;
#   - a lazy arrival survives the lock server's restart and a failed batch.
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

# The holders here are session-bound and must be granted by the lock
# server, which writes the hints: a limit of session-bound locks set for
# the role keeps them off the fast path (lockq_fastpath.c).
my $node = lockq_node('lazy',
	conf => "lockq.max_session_locks_per_role = 100000\n");
fault_functions($node);

# waiting_in_call(app): the session named app sleeps in a lockq call
# (pg_stat_activity only: a view of lockq would wake the lock server).
sub waiting_in_call
{
	my ($app) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$app' "
		  . "AND wait_event_type = 'Extension' AND wait_event = 'Extension'");
}

# The holders below are bound to their sessions and the waiters too: such
# grants write no table, so the lock server has nothing of its own to do
# (no statistics to flush, no locks to settle) and sleeps until somebody
# wakes it.  A lazy arrival that nobody wakes it for shows as a wait at the
# 5 s safety net.
my $h = $node->background_psql('postgres');

# --- a wait limit is kept ---------------------------------------------------
{
	ok($h->query_safe("SELECT lockq_try('lz2')") > 0, 'a session holds lz2');
	my $start = time();
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT lockq_get('lz2', timeout => '400 ms')");
	my $took = time() - $start;
	like($err, qr/could not obtain lock "lz2" within the timeout/,
		'a lazy waiter with a 400 ms limit times out')
	  or diag("rc $rc out $out err $err");
	cmp_ok($took, '>=', 0.4, 'not before its limit');
	cmp_ok($took, '<', 1.5, 'and not at the 5 s safety net');
	is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'lz2'"),
		'0', 'and leaves no place in the queue');
	is($h->query_safe("SELECT lockq_release('lz2')"), 't', 'the holder releases lz2');
}

# --- the grant ends between the hint's read and the push ------------------
{
	ok($h->query_safe("SELECT lockq_try('lz3')") > 0, 'a session holds lz3');
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('submit-lazy-before-push', 'wait')");
	my $e = start_waiter($node, 'e', "SELECT 'got:' || lockq_get('lz3');");
	ok(fault_fired($node, 'submit-lazy-before-push'),
		'e read "held" and stalls before it pushes its request');
	is($h->query_safe("SELECT lockq_release('lz3')"), 't', 'the holder releases');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'lz3'")
	  or fail('lz3 becomes free');
	my $start = time();
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('submit-lazy-before-push')");
	like(waiter_result($e, qr/(got:\d+)/), qr/^got:\d+$/, 'e is granted');
	cmp_ok(time() - $start, '<', 2, 'at once, not at the 5 s safety net');
	$e->quit;
}

# --- the request is pushed before the lock server drops the hint ----------
{
	ok($h->query_safe("SELECT lockq_try('lz4')") > 0, 'a session holds lz4');
	my $f = $node->background_psql('postgres', on_error_stop => 0);
	# f's session takes its slot now: a session's first call may have to
	# wake the lock server to free the slot of an earlier session
	ok($f->query_safe("SELECT lockq_try('f-warm')") > 0, 'f takes a lock of its own');
	is($f->query_safe("SELECT lockq_release('f-warm')"), 't', 'and releases it');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'f-warm'")
	  or fail('f-warm is free');
	# the lock server stalls 1.5 s in the batch that ends the grant, after
	# it read the ring and before it drops the hint ('sleep', not 'wait':
	# the wakeup of a 'wait' may set the lock server's latch; more than 1 s,
	# so that no statistics are left to flush when it ends)
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('batch-start', 'sleep', 1500)");
	is($h->query_safe("SELECT lockq_release('lz4')"), 't',
		'the holder releases (the lock server ends the grant in its next batch)');
	ok(fault_fired($node, 'batch-start'), 'the lock server stalls in that batch');
	my $start = time();
	# f reads "held" (twice), pushes its request and sleeps
	$f->{stdin} .= "SELECT 'got:' || lockq_get('lz4');\n";
	$f->{run}->pump_nb();
	like(waiter_result($f, qr/(got:\d+)/), qr/^got:\d+$/, 'f is granted');
	cmp_ok(time() - $start, '<', 3,
		'when the batch ends, not at the 5 s safety net');
	$f->quit;
}
$h->quit;

# --- views show lazy arrivals at once, in order ---------------------------
{
	my $t = scalar_query($node, "SELECT lockq_try('lz1', 'h', '1 hour')");
	ok($t > 0, 'h holds lz1');
	my $b = start_waiter($node, 'b', "SELECT 'got:' || lockq_get('lz1', 'b');");
	ok(waiting_in_call('b'), 'b waits');
	# a clock reading after b's call began, before anything looked at it
	my $m = scalar_query($node, 'SELECT lockq_now()');
	my $c = start_waiter($node, 'c', "SELECT 'got:' || lockq_get('lz1', 'c');");
	ok(waiting_in_call('c'), 'c waits behind b');
	# one look, no polling: the view must not miss an arrival nobody read yet
	my $start = time();
	is(queue_of($node, 'lz1'), 'b c', 'lockq_waiters shows both, in arrival order, at once');
	cmp_ok(time() - $start, '<', 0.9, 'without waiting for the safety net');
	is(scalar_query($node, 'SELECT waiters FROM lockq_stats'), '2',
		'lockq_stats counts them');
	is(scalar_query($node, "SELECT ts < $m FROM lockq_waiters WHERE owner = 'b'"), 't',
		'b waits since its call, not since the lock server read it');
	is(scalar_query($node, "SELECT lockq_release('lz1', 'h', $t)"), 't', 'h releases');
	like(waiter_result($b, qr/(got:\d+)/), qr/^got:\d+$/, 'b is granted first');
	is(queue_of($node, 'lz1'), 'c', 'c still waits');
	is(scalar_query($node, "SELECT lockq_release('lz1', 'b')"), 't', 'b releases');
	like(waiter_result($c, qr/(got:\d+)/), qr/^got:\d+$/, 'then c is granted');
	is(scalar_query($node, "SELECT lockq_release('lz1', 'c')"), 't', 'c releases');
	$b->quit;
	$c->quit;
}

# --- the lock server is killed while a lazy arrival waits -----------------
{
	my $t = scalar_query($node, "SELECT lockq_try('lz5', 'h', '1 hour')");
	ok($t > 0, 'h holds lz5');
	my $g = start_waiter($node, 'g', "SELECT 'got:' || lockq_get('lz5', 'g');");
	ok(waiting_in_call('g'), 'g waits, unread by the lock server');
	my $old = worker_pid($node, 'lz5');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(wait_for_worker($node, $old), 'a new lock server runs');
	is(queue_of($node, 'lz5'), 'g', 'it has g queued (the slots in flight are read again)');
	my $start = time();
	is(scalar_query($node, "SELECT lockq_release('lz5', 'h', $t)"), 't', 'h releases');
	like(waiter_result($g, qr/(got:\d+)/), qr/^got:\d+$/, 'g is granted');
	cmp_ok(time() - $start, '<', 2, 'at once, not at the 5 s safety net');
	is(scalar_query($node, "SELECT lockq_release('lz5', 'g')"), 't', 'g releases');
	$g->quit;
}

# --- the batch that ends the grant fails ------------------------------------
{
	my $t = scalar_query($node, "SELECT lockq_try('lz6', 'h', '1 hour')");
	ok($t > 0, 'h holds lz6');
	my $k = start_waiter($node, 'k', "SELECT 'got:' || lockq_get('lz6', 'k');");
	ok(waiting_in_call('k'), 'k waits, unread by the lock server');
	# the next batch (the one with h's release and k's request) fails once
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('batch-apply', 'error')");
	my $start = time();
	is(scalar_query($node, "SELECT lockq_release('lz6', 'h', $t)"), 't',
		'h releases (applied again after the failed batch)');
	ok(fault_fired($node, 'batch-apply'), 'the batch failed');
	like(waiter_result($k, qr/(got:\d+)/), qr/^got:\d+$/, 'k is granted');
	cmp_ok(time() - $start, '<', 3, 'after the retry, not at the 5 s safety net');
	is(scalar_query($node, "SELECT lockq_release('lz6', 'k')"), 't', 'k releases');
	$k->quit;
}

# --- nothing is left behind -------------------------------------------------
is(scalar_query($node, 'SELECT holders || \'/\' || waiters FROM lockq_stats'), '0/0',
	'no holders, no waiters');

$node->stop;
done_testing();

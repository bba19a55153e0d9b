# lockq_await: a client-side waiter (lockq_enqueue) waits in a backend.
# Its grant answers the waiting session directly, in FIFO order, with no
# NOTIFY; a cancelled or lost await, and one that reaches its deadline
# (never later than the waiter's heartbeat interval), leave the waiter in
# its place; each await counts as a heartbeat; a second await takes over
# from the first; an await survives a restart of the lock server and a
# failed batch (test build: fault points) where it is linked or answered.
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

my $node = lockq_node('await');

# an awaiting session, named app, for owner's wait on lock
sub start_await
{
	my ($app, $lock, $owner, $timeout) = @_;
	my $t = defined $timeout ? ", '$timeout'" : '';
	return start_waiter($node, $app,
		"SELECT 'result:' || coalesce(lockq_await('$lock', '$owner'$t)::text, 'queued');\n\\echo done-$app"
	);
}

# poll until the session app is blocked in lockq_await
sub wait_awaiting
{
	my ($app) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$app' AND state = 'active' AND query LIKE '%lockq_await%'"
	);
}

sub enqueue
{
	my ($lock, $owner, $heartbeat) = @_;
	$heartbeat //= '1 minute';
	return scalar_query($node,
		"SELECT coalesce(lockq_enqueue('$lock', '$owner', '1 hour', 'lq_aw', '$heartbeat')::text, 'queued')"
	);
}

# A listener on the waiters' channel, to see which grants were announced.
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN lq_aw');
sub announced
{
	my $out = $listener->query_safe('SELECT 1');
	return join(' ', $out =~ /payload "grant \d+ \d+ \S+ (\S+)"/g);
}

# --- FIFO wake-ups, each by its own grant, none announced -----------------
my $tok = scalar_query($node, "SELECT lockq_try('F', 'holder', '1 hour')");
is(enqueue('F', $_), 'queued', "$_ queued") for qw(w1 w2 w3 w4);
my %a = map { $_ => start_await("a_$_", 'F', $_) } qw(w1 w2 w3);
ok(wait_awaiting("a_$_"), "$_ awaits in a backend") for qw(w1 w2 w3);
is(queue_of($node, 'F'), 'w1 w2 w3 w4', 'the awaits kept the order of the queue');

scalar_query($node, "SELECT lockq_release('F', 'holder', $tok)");
my $t1 = waiter_result($a{w1}, qr/result:(\w+)/);
like($t1, qr/^\d+$/, 'the head waiter\'s await returned its token');
ok($t1 > $tok, 'a newer token');
is(scalar_query($node, "SELECT owner || ' ' || token FROM lockq_locks WHERE lock_id = 'F'"),
	"w1 $t1", 'the lock server agrees');
is(scalar_query($node,
		"SELECT expires - acquired > interval '59 minutes' FROM lockq_locks WHERE lock_id = 'F'"),
	't', 'an awaited grant starts with the full lease');
ok(scalar_query($node, "SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('a_w2', 'a_w3') AND state = 'active'") == 2,
	'the others still wait');

scalar_query($node, "SELECT lockq_release('F', 'w1', $t1)");
my $t2 = waiter_result($a{w2}, qr/result:(\w+)/);
ok($t2 > $t1, 'then the second');
scalar_query($node, "SELECT lockq_release('F', 'w2', $t2)");
my $t3 = waiter_result($a{w3}, qr/result:(\w+)/);
ok($t3 > $t2, 'then the third');
is(announced(), '', 'no grant to an awaiting session was announced by NOTIFY');

# w4 does not await: its grant is announced, as before
scalar_query($node, "SELECT lockq_release('F', 'w3', $t3)");
ok($node->poll_query_until('postgres', "SELECT owner = 'w4' FROM lockq_locks WHERE lock_id = 'F'"),
	'w4 granted');
is(announced(), 'w4', 'a waiter nobody awaits is told by NOTIFY');
scalar_query($node, "SELECT lockq_release('F', 'w4')");
$_->quit for values %a;

# --- a cancelled await, and a lost one, leave the waiter in place ---------
$tok = scalar_query($node, "SELECT lockq_try('C', 'holder', '1 hour')");
enqueue('C', $_) for qw(c1 c2 c3);
my $c2 = start_await('a_c2', 'C', 'c2');
ok(wait_awaiting('a_c2'), 'c2 awaits');
scalar_query($node, "SELECT pg_cancel_backend(" . backend_pid($node, 'a_c2') . ")");
like(waiter_result($c2, qr/(canceling statement due to user request)/),
	qr/canceling/, 'a cancelled await gets the cancel error');
is(queue_of($node, 'C'), 'c1 c2 c3', 'and c2 keeps its place');
$c2->quit;

my $c1 = start_await('a_c1', 'C', 'c1');
ok(wait_awaiting('a_c1'), 'c1 awaits');
my $pid = backend_pid($node, 'a_c1');
scalar_query($node, "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'the awaiting session is gone');
end_session($c1);
is(queue_of($node, 'C'), 'c1 c2 c3', 'c1 keeps its place (a client-side waiter outlives the session)');
scalar_query($node, "SELECT lockq_release('C', 'holder', $tok)");
ok($node->poll_query_until('postgres', "SELECT owner = 'c1' FROM lockq_locks WHERE lock_id = 'C'"),
	'c1 is granted in turn');
scalar_query($node, "SELECT lockq_force_release('C')");
scalar_query($node, "SELECT lockq_cancel('C', 'c2'), lockq_cancel('C', 'c3')");
scalar_query($node, "SELECT lockq_force_release('C')");
is(announced(), 'c1 c2 c3', 'grants to waiters nobody awaited were announced');

# --- the deadline: at most one heartbeat interval; each await a heartbeat --
$tok = scalar_query($node, "SELECT lockq_try('H', 'holder', '1 hour')");
enqueue('H', 'h1', '1 second');
my $start = time;
is(scalar_query($node, "SELECT coalesce(lockq_await('H', 'h1')::text, 'queued')"),
	'queued', 'an await without a timeout ends still queued');
my $took = time - $start;
ok($took >= 0.9 && $took < 5, sprintf('after the heartbeat interval (1 s): %.2f s', $took));
$start = time;
is(scalar_query($node, "SELECT coalesce(lockq_await('H', 'h1', '300 ms')::text, 'queued')"),
	'queued', 'with a shorter timeout');
$took = time - $start;
ok($took >= 0.25 && $took < 0.9, sprintf('after the timeout (300 ms): %.2f s', $took));
# four awaits back to back span more than three heartbeat intervals
for my $i (1 .. 4)
{
	scalar_query($node, "SELECT lockq_await('H', 'h1')");
}
is(queue_of($node, 'H'), 'h1', 'awaits kept the waiter alive for 4 heartbeat intervals');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_waiters WHERE lock_id = 'H'"),
	'without them it is dropped');
scalar_query($node, "SELECT lockq_release('H', 'holder', $tok)");

# --- a second await for the same waiter takes over ------------------------
$tok = scalar_query($node, "SELECT lockq_try('T', 'holder', '1 hour')");
enqueue('T', 't1');
my $first = start_await('a_first', 'T', 't1');
ok(wait_awaiting('a_first'), 'a first await');
my $second = start_await('a_second', 'T', 't1');
is(waiter_result($first, qr/result:(\w+)/), 'queued',
	'a second await answers the first "still queued"');
ok(wait_awaiting('a_second'), 'and waits itself');
scalar_query($node, "SELECT lockq_release('T', 'holder', $tok)");
like(waiter_result($second, qr/result:(\w+)/), qr/^\d+$/, 'the grant answers the second');
scalar_query($node, "SELECT lockq_release('T', 't1')");
$_->quit for ($first, $second);

# --- lockq_cancel ends an await; a restarted lock server keeps one ---------
$tok = scalar_query($node, "SELECT lockq_try('R', 'holder', '1 hour')");
enqueue('R', $_) for qw(r1 r2);
my $r1 = start_await('a_r1', 'R', 'r1');
my $r2 = start_await('a_r2', 'R', 'r2');
ok(wait_awaiting($_), "$_ awaits") for qw(a_r1 a_r2);
scalar_query($node, "SELECT lockq_cancel('R', 'r2')");
like(waiter_result($r2, qr/(ERROR:.*)/), qr/55000|no longer waiting for lock "R"/,
	'lockq_cancel ends the await of the waiter it withdraws');
my $old = worker_pid($node, 'R');
scalar_query($node, "SELECT pg_terminate_backend($old)");
ok(wait_for_worker($node, $old), 'the lock server restarted');
is(queue_of($node, 'R'), 'r1', 'r1 still queued');
ok(wait_awaiting('a_r1'), 'and its session still awaits');
scalar_query($node, "SELECT lockq_release('R', 'holder', $tok)");
my $tr = waiter_result($r1, qr/result:(\w+)/);
like($tr, qr/^\d+$/, 'the await made before the restart is answered by the grant');
is(scalar_query($node, "SELECT owner || ' ' || token FROM lockq_locks WHERE lock_id = 'R'"),
	"r1 $tr", 'with the grant\'s token');
scalar_query($node, "SELECT lockq_release('R', 'r1', $tr)");
$_->quit for ($r1, $r2);

# --- a batch of the lock server fails where it links or answers an await --
# The await's slot is applied again by the rebuilt (or restarted) lock
# server: it links anew, or, when the grant was committed and its answer
# lost, finds its owner holding and returns the token.
fault_functions($node);

sub await_fault
{
	my ($lock, $point, $action, $when) = @_;
	my $what = "$lock: $point $action in the batch that "
	  . ($when eq 'attach' ? 'links the await' : 'grants its waiter');
	my $th = scalar_query($node, "SELECT lockq_try('$lock', 'holder', '1 hour')");
	enqueue($lock, 'fw');
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('$point', '$action')")
	  if $when eq 'attach';
	my $s = start_await("a_$lock", $lock, 'fw');
	ok(fault_fired($node, $point), "$what: fired") if $when eq 'attach';
	ok(wait_awaiting("a_$lock"), "$what: the session awaits");
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('$point', '$action')")
	  if $when eq 'grant';
	is(scalar_query($node, "SELECT lockq_release('$lock', 'holder', $th)"), 't',
		"$what: the holder's release is answered");
	ok(fault_fired($node, $point), "$what: fired") if $when eq 'grant';
	my $t = waiter_result($s, qr/result:(\w+)/);
	like($t // '', qr/^\d+$/, "$what: the await is answered with the token");
	is(scalar_query($node, "SELECT owner || ' ' || token FROM lockq_locks WHERE lock_id = '$lock'"),
		"fw " . ($t // ''), "$what: the token of fw's grant");
	scalar_query($node, "SELECT lockq_release('$lock', 'fw')");
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('$point')");
	$s->quit;
	return;
}

await_fault('FA', 'batch-before-commit', 'error', 'attach');
await_fault('FB', 'batch-before-commit', 'error', 'grant');
await_fault('FC', 'batch-after-commit', 'fatal', 'grant');
ok(wait_for_worker($node), 'a lock server runs after the FATAL');

is(scalar_query($node, "SELECT count(*) FROM lockq_locks") . '/'
	  . scalar_query($node, "SELECT count(*) FROM lockq_waiters"),
	'0/0', 'nothing left behind');
is(announced(), '', 'no grant in these sections was announced');
$listener->quit;

done_testing();

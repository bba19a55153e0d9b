# Client-side waiters: queued with lockq_enqueue, told of the grant by a
# NOTIFY on their own channel (a hand-off wakes one waiter, not all), kept
# alive by heartbeats, dropped within their heartbeat interval when they
# stop, and never blocking the queue for longer than that.  A NOTIFY is only
# a wake-up: a forged one grants nothing.
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

my $node = lockq_node('client');
my $worker = worker_pid($node, 'N');

# A client-side waiter: a session that listens on its own channel.
sub client
{
	my ($name) = @_;
	my $s = $node->background_psql('postgres');
	$s->query_safe("SET application_name = '$name'");
	$s->query_safe("LISTEN lq_$name");
	return $s;
}

# notifications(session) runs a trivial query so that psql prints what has
# arrived, and returns the payloads on that session's channel.
sub notifications
{
	my ($s) = @_;
	my $out = $s->query_safe('SELECT 1');
	return [ $out =~ /Asynchronous notification "lq_\w+" with payload "([^"]*)" received from server process with PID (\d+)/g ];
}

# wait_notification(session, regex) polls the session until a payload
# matching regex arrives; returns (payload, sender pid).
sub wait_notification
{
	my ($s, $re) = @_;
	my $t = $node->safe_psql('postgres', 'SELECT lockq_now()');
	for (;;)
	{
		my @n = @{ notifications($s) };
		while (my ($payload, $pid) = splice(@n, 0, 2))
		{
			return ($payload, $pid) if $payload =~ $re;
		}
		# give up after 30 s of lockq time
		return () if $node->safe_psql('postgres', "SELECT lockq_now() - $t > 30000000") eq 't';
		$node->poll_query_until('postgres', "SELECT lockq_now() - $t > 0");
	}
}

# --- grant notification, one waiter at a time ------------------------------
scalar_query($node, "SELECT lockq_try('N', 'holder', '1 hour')");
my %c = map { $_ => client($_) } qw(c1 c2 c3);
for my $n (qw(c1 c2 c3))
{
	is($c{$n}->query_safe("SELECT lockq_enqueue('N', '$n', '1 hour', 'lq_$n', '1 hour') IS NULL"),
		't', "$n queued");
}
is(scalar_query($node, "SELECT lockq_release('N', 'holder')"), 't', 'holder releases');
my ($payload, $pid) = wait_notification($c{c1}, qr/^grant /);
like($payload, qr/^grant \d+ 1 N c1$/, 'c1 is told of its grant: "grant <token> <len> <lock> <owner>"');
is($pid, $worker, 'the notification comes from the lock server');
my ($tok1) = $payload =~ /^grant (\d+)/;
is($c{c1}->query_safe("SELECT lockq_heartbeat('N', 'c1')"), $tok1,
	'c1 confirms the grant; the token matches the notification');
is_deeply(notifications($c{c2}), [], 'c2 was not woken (no thundering herd)');
is_deeply(notifications($c{c3}), [], 'c3 was not woken');

# hand-off to c2, then an administrator takes the lock away: c2 hears it
is($c{c1}->query_safe("SELECT lockq_release('N', 'c1', $tok1)"), 't', 'c1 releases');
($payload) = wait_notification($c{c2}, qr/^grant /);
like($payload, qr/^grant \d+ 1 N c2$/, 'c2 is told of its grant');
my ($tok2) = $payload =~ /^grant (\d+)/;
is($c{c2}->query_safe("SELECT lockq_heartbeat('N', 'c2')"), $tok2, 'c2 confirms');
is(scalar_query($node, "SELECT lockq_force_release('N')"), 't', 'an administrator forces the lock free');
($payload) = wait_notification($c{c2}, qr/^lost /);
is($payload, "lost $tok2 1 N c2", 'c2 is told it lost the lock');
is(scalar_query($node, "SELECT lockq_holds('N', $tok2)"), 'f', 'the old token is no longer current');

# c3 got it now; a forged NOTIFY to a waiter grants nothing
($payload) = wait_notification($c{c3}, qr/^grant /);
like($payload, qr/^grant \d+ 1 N c3$/, 'c3 is told of its grant');
my $c4 = client('c4');
is($c4->query_safe("SELECT lockq_enqueue('N', 'c4', '1 hour', 'lq_c4', '1 hour') IS NULL"), 't', 'c4 queued');
$node->safe_psql('postgres', "NOTIFY lq_c4, 'grant 999999 1 N c4'");
($payload) = wait_notification($c4, qr/^grant /);
is($payload, 'grant 999999 1 N c4', 'a forged grant notification arrives ...');
is($c4->query_safe("SELECT lockq_heartbeat('N', 'c4') IS NULL"), 't',
	'... but the server says c4 is still waiting');
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'N'"), 'c3',
	'and c3 still holds the lock');
scalar_query($node, "SELECT lockq_release('N', 'c3')");
# (the real grant notification is printed after the result, so match a line)
like($c4->query_safe("SELECT lockq_heartbeat('N', 'c4') > 0"), qr/^t$/m,
	'c4 gets it for real after c3');
scalar_query($node, "SELECT lockq_release('N', 'c4')");
$_->quit for (values %c, $c4);

# --- a client waiter that stops heartbeating is dropped ------------------
my $dead = client('dead');
scalar_query($node, "SELECT lockq_try('D', 'holder', '1 hour')");
my $t0 = time();
is($dead->query_safe("SELECT lockq_enqueue('D', 'dead', '1 hour', 'lq_dead', '300 ms') IS NULL"),
	't', 'a waiter with a 300 ms heartbeat interval queues');
is(scalar_query($node, "SELECT lockq_enqueue('D', 'alive', '1 hour', NULL, '1 hour') IS NULL"),
	't', 'another waiter queues behind it');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_waiters WHERE owner = 'dead'"),
	'the silent waiter is dropped');
my $elapsed = time() - $t0;
cmp_ok($elapsed, '<', 3, "within the bound (dropped after ${elapsed}s)");
($payload) = wait_notification($dead, qr/^dropped /);
is($payload, 'dropped 0 1 D dead', 'and told so, in case it is only slow');
is(scalar_query($node, "SELECT string_agg(owner, ' ') FROM lockq_waiters WHERE lock_id = 'D'"),
	'alive', 'the waiter behind it moved up');
ok(scalar_query($node, 'SELECT dropped_waiters FROM lockq_stats') >= 1, 'counted');
$dead->quit;

# A waiter that keeps heartbeating stays, well past its interval.  It
# heartbeats from one open session every 0.5 s, as a client would (a psql start
# per heartbeat could take longer than the interval on a loaded machine).
my $beater = $node->background_psql('postgres');
is($beater->query_safe("SELECT lockq_enqueue('D', 'beating', '1 hour', NULL, '2 s') IS NULL"),
	't', 'a waiter with a 2 s interval that heartbeats');
my $start = $beater->query_safe('SELECT lockq_now()');
my $beats = 0;
while ($beater->query_safe("SELECT lockq_now() - $start") < 6_000_000)
{
	$beater->query_safe('SELECT pg_sleep(0.5)');    # the client's pace, not a wait
	$beats++ if $beater->query_safe("SELECT lockq_heartbeat('D', 'beating') IS NULL") eq 't';
}
cmp_ok($beats, '>=', 6, "$beats heartbeats while queued");
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE owner = 'beating'"), '1',
	'after 6 s (three intervals) it is still queued');
$beater->quit;
scalar_query($node, "SELECT lockq_cancel('D', 'beating')");
scalar_query($node, "SELECT lockq_release('D', 'holder')");
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'D'"), 'alive',
	'the remaining waiter was granted');
scalar_query($node, "SELECT lockq_release('D', 'alive')");

# --- a dead client waiter at the head blocks the queue one interval at most
scalar_query($node, "SELECT lockq_try('H', 'holder', '1 hour')");
scalar_query($node, "SELECT lockq_enqueue('H', 'dead-head', '1 hour', NULL, '500 ms')");
scalar_query($node, "SELECT lockq_enqueue('H', 'next', '1 hour', NULL, '1 hour')");
scalar_query($node, "SELECT lockq_release('H', 'holder')");
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'H'"), 'dead-head',
	'the lock went to a client waiter that never picks it up');
is(scalar_query($node, "SELECT expires - acquired FROM lockq_locks WHERE lock_id = 'H'"),
	'00:00:00.5', 'its first lease is its heartbeat interval, not the one-hour ttl');
my $acq = scalar_query($node, "SELECT acquired FROM lockq_locks WHERE lock_id = 'H'");
ok(wait_for_holder($node, 'H', 'next'), 'the next waiter gets the lock');
my $gap = scalar_query($node,
	"SELECT extract(epoch FROM acquired - '$acq'::timestamptz) FROM lockq_locks WHERE lock_id = 'H'");
cmp_ok($gap, '<', 1.5, "after one heartbeat interval (${gap}s), not the ttl");
scalar_query($node, "SELECT lockq_release('H', 'next')");

# --- the default interval is lockq.waiter_timeout (reloadable) -----------
$node->safe_psql('postgres', "ALTER SYSTEM SET lockq.waiter_timeout = '400ms'");
$node->reload;
scalar_query($node, "SELECT lockq_try('G', 'holder', '1 hour')");
$node->poll_query_until('postgres', "SELECT current_setting('lockq.waiter_timeout') = '400ms'");
scalar_query($node, "SELECT lockq_enqueue('G', 'default-interval')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_waiters WHERE owner = 'default-interval'"),
	'a waiter without an explicit interval is dropped after lockq.waiter_timeout');
scalar_query($node, "SELECT lockq_release('G', 'holder')");

is(scalar_query($node, "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

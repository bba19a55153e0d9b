# kill -9 of the postmaster, then restart: durable grants are still held
# with their tokens, session-bound grants and waiting backends are gone,
# client-side waiters keep their place, leases do not count the downtime,
# and tokens and lockq_now() keep increasing.  A token handed out just
# before the crash is never handed out again.  A lease returned before its
# flush (ttl up to lockq.max_grace) may be lost in a crash; then nothing is
# granted until every such lease has ended (the grace period), and with
# lockq.synchronous_grants no grace is needed.
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

my $node = lockq_node('crash');

sub wait_for_service
{
	return $node->poll_query_until('postgres',
		'SELECT worker_pid IS NOT NULL FROM lockq_stats');
}

# --- state before the crash ----------------------------------------------
my $t_a = scalar_query($node, "SELECT lockq_try('A', 'svc-a', '1 hour')");
my $t_b = scalar_query($node, "SELECT lockq_try('B', 'svc-b', '10 minutes')");
my $sess = $node->background_psql('postgres');
my $t_s = $sess->query_safe("SELECT lockq_try('S')");
ok($t_s > 0, 'a session-bound lock is held');
my $w = start_waiter($node, 'bw', "SELECT lockq_get('A', 'waiting-backend');");
ok(wait_for_waiters($node, 'A', 1), 'a backend waits for A');
is(scalar_query($node, "SELECT lockq_enqueue('A', 'waiting-client', '1 hour', NULL, '1 hour') IS NULL"),
	't', 'a client-side waiter waits for A');
# a grant commits synchronously, flushing the queue entries written before
my $t_c = scalar_query($node, "SELECT lockq_try('C', 'svc-c', '1 hour')");

my $remaining_b = scalar_query($node,
	"SELECT (extract(epoch FROM expires) * 1000000)::bigint - lockq_now() FROM lockq_locks WHERE lock_id = 'B'"
);
my $now_before = scalar_query($node, 'SELECT lockq_now()');
my $max_token = $t_c;

# --- crash ----------------------------------------------------------------
crash_restart($node);
end_session($w);
end_session($sess);
ok(wait_for_service(), 'the lock service is back after the crash');

is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(lock_id || '=' || owner || ':' || token, ' ' ORDER BY lock_id) FROM lockq_locks"
	),
	"A=svc-a:$t_a B=svc-b:$t_b C=svc-c:$t_c",
	'durable grants are still held, same owners and tokens; the session-bound grant is gone');
is(scalar_query($node, "SELECT lockq_holds('A', $t_a)"), 't',
	'a durable grant is still current for fencing');
is( $node->safe_psql('postgres',
		"SELECT string_agg(owner || ':' || kind, ' ' ORDER BY position) FROM lockq_waiters"),
	'waiting-client:client',
	'the client-side waiter kept its place; the dead backend waiter is gone');

my $remaining_after = scalar_query($node,
	"SELECT (extract(epoch FROM expires) * 1000000)::bigint - lockq_now() FROM lockq_locks WHERE lock_id = 'B'"
);
note "lease of B: ${remaining_b}us left before the crash, ${remaining_after}us after";
cmp_ok($remaining_after, '>', $remaining_b - 5_000_000,
	'the downtime did not count against the lease');
cmp_ok($remaining_after, '<', $remaining_b + 10_000_000,
	'and the lease was not extended by more than the clock reserve');

ok(scalar_query($node, 'SELECT lockq_now()') > $now_before,
	'lockq_now() continues above every value before the crash');
is(scalar_query($node, 'SELECT grace_until IS NULL FROM lockq_stats'), 't',
	'no lock is delayed: every lease before the crash was longer than lockq.max_grace, so flushed');
my $t_new = scalar_query($node, "SELECT lockq_try('D', 'svc-d', '1 hour')");
ok($t_new > $max_token, 'the next token is above every token before the crash');
$max_token = $t_new;

# The queue works after the crash: release A, the client waiter gets it.
is(scalar_query($node, "SELECT lockq_release('A', 'svc-a', $t_a)"), 't',
	'release after the crash');
ok(scalar_query($node, "SELECT lockq_heartbeat('A', 'waiting-client')") > $max_token,
	'the surviving client waiter is granted with a new token');

# --- tokens handed out right before a crash are never reissued -----------
# even when the administrator turned synchronous_commit off server-wide
$node->safe_psql('postgres', 'ALTER SYSTEM SET synchronous_commit = off');
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('synchronous_commit') = 'off'");
for my $round (1 .. 3)
{
	my $last = 0;
	for my $i (1 .. 20)
	{
		$last = scalar_query($node,
			"SELECT lockq_try('R$round-$i', 'o', '1 hour')");
	}
	my $now_last = scalar_query($node, 'SELECT lockq_now()');
	crash_restart($node);
	ok(wait_for_service(), "round $round: service back");
	my $next = scalar_query($node, "SELECT lockq_try('R$round-next', 'o', '1 hour')");
	ok($next > $last,
		"round $round: the first token after the crash ($next) is above the last one shown before it ($last)"
	);
	ok(scalar_query($node, 'SELECT lockq_now()') > $now_last,
		"round $round: so is the clock");
}
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'R%'"),
	'63', 'every grant made before the crashes is still held');

$node->safe_psql('postgres', 'ALTER SYSTEM RESET synchronous_commit');
$node->reload;

# --- short leases: returned before their flush, a delay after a crash -------
# Short leases on a lock that changes hands again and again are returned
# before their flush: the lock is unsettled (lockq.unsettled), which a flush
# made durable first.  A crash may take the latest of them back: that lock
# is then delayed until every lease that may have been lost has ended, and
# its grant, whatever survived, is ended.  Every other lock is available at
# once.
my $flushes_before = scalar_query($node, 'SELECT sync_commits FROM lockq_stats');
my $last_short;
for my $i (1 .. 30)
{
	$last_short = scalar_query($node, "SELECT lockq_try('hot', 'o$i', '4 seconds')");
	scalar_query($node, "SELECT lockq_release('hot', 'o$i', $last_short)")
	  if $i < 30;
}
ok($last_short > $max_token, 'short leases are granted and released');
my $flushes = scalar_query($node, 'SELECT sync_commits FROM lockq_stats') - $flushes_before;
note "30 short grants and 29 releases of one lock took $flushes flushes";
cmp_ok($flushes, '<', 15, 'most of them were returned without waiting for a flush');
is(scalar_query($node, "SELECT count(*) FROM lockq.unsettled WHERE lock_id = 'hot' AND fence_ttl > 0"),
	'1', 'the lock is unsettled, with its ends covered');
my $t_long = scalar_query($node, "SELECT lockq_try('quiet', 'q', '1 hour')");
crash_restart($node);
ok(wait_for_service(), 'service back after crashing with short leases out');
my $delay_left = scalar_query($node,
	'SELECT extract(epoch FROM grace_until) - lockq_now() / 1000000.0 FROM lockq_stats');
note "delay of the hot lock left after the crash: ${delay_left}s";
cmp_ok($delay_left, '>', 1, 'the crash left the hot lock delayed');
cmp_ok($delay_left, '<', 4 + 2 + 1,
	'no longer than its lease and the slack');
is(scalar_query($node, 'SELECT delayed_locks FROM lockq_stats'), '1', 'one lock is delayed');
is(scalar_query($node, "SELECT lockq_holds('hot', $last_short)"), 'f',
	'the hot lock\'s last grant is ended: its end may have been shown and lost');
is(scalar_query($node, "SELECT lockq_renew('hot', 'o30', $last_short)"), 'f',
	'and cannot be renewed');
is(scalar_query($node, "SELECT lockq_try('hot', 'o2') IS NULL"), 't',
	'nothing is granted on the hot lock during its delay');
ok(scalar_query($node, "SELECT lockq_try('fresh', 'o')") > $last_short,
	'a lock nobody used is granted at once');
is(scalar_query($node, "SELECT lockq_holds('quiet', $t_long)"), 't',
	'a settled lock\'s grant survived the crash');
my $gw = start_waiter($node, 'delay-waiter',
	"SELECT 'granted:' || lockq_get('hot', 'after-delay', '1 hour');");
ok(wait_for_waiters($node, 'hot', 1), 'lockq_get waits during the delay');
ok($node->poll_query_until('postgres', 'SELECT grace_until IS NULL FROM lockq_stats'),
	'the delay ends');
my $granted = waiter_result($gw, qr/granted:(\d+)/);
ok($granted > $last_short, 'then the waiter is served, with a token above every token before the crash');
$gw->quit;

# --- lockq.synchronous_grants: every lease flushed, no grace needed -------
$node->append_conf('postgresql.conf', 'lockq.synchronous_grants = on');
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('lockq.synchronous_grants') = 'on'");
# wait until the hot lock has settled
$node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM lockq.unsettled');
my $sync = scalar_query($node, "SELECT lockq_try('SYNC', 'o', '4 seconds')");
ok($sync > $granted, 'a short lease is granted with synchronous_grants on');
crash_restart($node);
ok(wait_for_service(), 'service back');
is(scalar_query($node, 'SELECT grace_until IS NULL FROM lockq_stats'), 't',
	'no lock is delayed with synchronous_grants on');
is(scalar_query($node, "SELECT lockq_holds('SYNC', $sync)"), 't',
	'the short lease granted right before the crash survived it');
ok(scalar_query($node, "SELECT lockq_try('after-sync', 'o')") > $sync,
	'and grants go on at once after the crash');

$node->stop;
done_testing();

# kill -9 of the postmaster, then restart: durable grants are still held
# with their tokens, session-bound grants and waiting backends are gone,
# client-side waiters keep their place, leases do not count the downtime,
# and tokens and lockq_now() keep increasing.  A token handed out just
# before the crash is never handed out again.  A lease returned before its
# flush (ttl up to lockq.max_grace) may be lost in a crash; then nothing is
# granted until every such lease has ended (the grace period), and with
# lockq.synchronous_grants no grace is needed.
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
	'no grace period: every lease before the crash was longer than lockq.max_grace, so flushed');
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

# --- short leases: returned before their flush, a grace period after ------
# Each 4 s grant raises the lease horizon ahead of itself (with a flush) or
# is covered by the horizon already raised; those are not flushed before
# their holders see them.  A crash may take them back: then nothing at all
# is granted until the horizon has passed.
my @short;
my $flushes_before = scalar_query($node, 'SELECT sync_commits FROM lockq_stats');
for my $i (1 .. 30)
{
	push @short, [ "S$i", scalar_query($node, "SELECT lockq_try('S$i', 'o', '4 seconds')") ];
}
my $last_short = $short[-1][1];
ok($last_short > $max_token, 'short leases are granted');
my $flushes = scalar_query($node, 'SELECT sync_commits FROM lockq_stats') - $flushes_before;
note "30 short grants took $flushes flushes";
cmp_ok($flushes, '<', 15, 'most of them were returned without waiting for a flush');
crash_restart($node);
ok(wait_for_service(), 'service back after crashing with short leases out');
my $grace_left = scalar_query($node,
	'SELECT extract(epoch FROM grace_until) - lockq_now() / 1000000.0 FROM lockq_stats');
note "grace period left after the crash: ${grace_left}s";
cmp_ok($grace_left, '>', 1, 'the crash left a grace period');
cmp_ok($grace_left, '<', 4 + 2 + 5 + 1,
	'no longer than the lease, the horizon slack and the clock reserve');
like(slurp_file($node->logfile), qr/lockq grants nothing for [0-9.]+ s after a crash or a promotion/,
	'the grace period is logged');

# Whatever survived of the short grants keeps its lease at least until the
# grace period ends; nothing new is granted meanwhile, not even a lock
# nobody held; a waiter queues and is served when the period ends.
my $survivors = scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'S%'");
note "$survivors of 30 short grants survived the crash";
is(scalar_query($node, "SELECT lockq_try('fresh', 'o') IS NULL"), 't',
	'lockq_try of a free lock gets nothing during the grace period');
is(scalar_query($node, "SELECT lockq_try('S30', 'o2') IS NULL"), 't',
	'nor does a lock whose short grant may have been lost');
my $gw = start_waiter($node, 'grace-waiter',
	"SELECT 'granted:' || lockq_get('fresh', 'after-grace', '1 hour');");
ok(wait_for_waiters($node, 'fresh', 1), 'lockq_get waits during the grace period');
ok($node->poll_query_until('postgres', 'SELECT grace_until IS NULL FROM lockq_stats'),
	'the grace period ends');
like(slurp_file($node->logfile), qr/lockq grace period after the crash is over/,
	'and that is logged');
my $granted = waiter_result($gw, qr/granted:(\d+)/);
ok($granted > $last_short, 'then the waiter is served, with a token above every token before the crash');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'S%'"),
	'and the short leases carried over the crash end');
$gw->quit;

# --- lockq.synchronous_grants: every lease flushed, no grace needed -------
$node->append_conf('postgresql.conf', 'lockq.synchronous_grants = on');
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('lockq.synchronous_grants') = 'on'");
# wait until the horizon left by the short leases is behind the clock
$node->poll_query_until('postgres',
	"SELECT last_value < lockq_now() - 5000000 FROM lockq.horizon_seq");
my $sync = scalar_query($node, "SELECT lockq_try('SYNC', 'o', '4 seconds')");
ok($sync > $granted, 'a short lease is granted with synchronous_grants on');
crash_restart($node);
ok(wait_for_service(), 'service back');
is(scalar_query($node, 'SELECT grace_until IS NULL FROM lockq_stats'), 't',
	'no grace period with synchronous_grants on');
is(scalar_query($node, "SELECT lockq_holds('SYNC', $sync)"), 't',
	'the short lease granted right before the crash survived it');
ok(scalar_query($node, "SELECT lockq_try('after-sync', 'o')") > $sync,
	'and grants go on at once after the crash');

$node->stop;
done_testing();

# Lease expiry: a grant that is not renewed ends at its deadline, and the
# worker hands the lock to the next waiter promptly (target: within 50 ms).
# A holder that renews keeps the lock.  lockq.max_ttl is read on reload.
# The lock server logs a lease that expired and a forced release, with the
# owner and token, at lockq.log_lease_ends (LOG by default; off: nothing).
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

my $node = lockq_node('expiry');

# Lag between the lease deadline and the next waiter's grant, in ms,
# measured on the lockq clock (both values are recorded by the server).
my @lags;
for my $round (1 .. 5)
{
	my $lock = "E$round";
	scalar_query($node, "SELECT lockq_try('$lock', 'short', '300 ms')");
	my $deadline = scalar_query($node,
		"SELECT (extract(epoch FROM expires) * 1000000)::bigint FROM lockq_locks WHERE lock_id = '$lock'"
	);
	my $w = start_waiter($node, "ew$round",
		"SELECT 'granted:' || lockq_get('$lock', 'next', '1 minute');");
	ok(defined waiter_result($w, qr/(granted:\d+)/),
		"round $round: the waiter got the lock after the lease ran out");
	my $acquired = scalar_query($node,
		"SELECT (extract(epoch FROM acquired) * 1000000)::bigint FROM lockq_locks WHERE lock_id = '$lock'"
	);
	my $lag_ms = ($acquired - $deadline) / 1000.0;
	ok($lag_ms >= 0, "round $round: not granted before the deadline ($lag_ms ms)");
	push @lags, $lag_ms;
	scalar_query($node, "SELECT lockq_release('$lock', 'next')");
	$w->quit;
}
my @sorted = sort { $a <=> $b } @lags;
my $median = $sorted[2];
note sprintf('expiry hand-over lag (ms): %s; median %.2f',
	join(', ', map { sprintf('%.2f', $_) } @lags), $median);
cmp_ok($median, '<', 50, 'median hand-over lag is within the 50 ms target');
cmp_ok($sorted[-1], '<', 250, 'no hand-over took longer than 250 ms');
is(scalar_query($node, 'SELECT expiries FROM lockq_stats'), '5', 'five expiries counted');

# An expired lock with nobody waiting simply disappears.
my $tok = scalar_query($node, "SELECT lockq_try('lonely', 'o', '200 ms')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'lonely'"),
	'an expired lock without waiters leaves lockq_locks');
is(scalar_query($node, "SELECT lockq_renew('lonely', 'o', $tok)"), 'f',
	'and cannot be renewed');

# A holder that keeps renewing keeps the lock well past its ttl, and a
# waiter stays queued meanwhile.  The lease is taken long and cut to 1 s
# once the waiter is queued (a renewal sets the lease, shorter too), so
# that starting the waiter on a busy machine cannot outlast it; each
# renewal comes about 200 ms after the previous one (each psql call may
# take a while on a loaded machine: 1 s leaves room for that).
$tok = scalar_query($node, "SELECT lockq_try('kept', 'renewer', '1 minute')");
my $w = start_waiter($node, 'kw',
	"SELECT 'granted:' || lockq_get('kept', 'patient', '1 minute');");
ok(wait_for_waiters($node, 'kept', 1), 'a waiter queues behind the renewer');
is(scalar_query($node, "SELECT lockq_renew('kept', 'renewer', $tok, '1 s')"),
	't', 'the lease cut to 1 s');
my $start = scalar_query($node, 'SELECT lockq_now()');
my $renewals = 0;
while (scalar_query($node, 'SELECT lockq_now()') - $start < 4_000_000)
{
	# renew every ~200 ms of lockq time (the poll waits, no bare sleep)
	my $since = scalar_query($node, 'SELECT lockq_now()');
	$node->poll_query_until('postgres',
		"SELECT lockq_now() - $since > 200000");
	is(scalar_query($node, "SELECT lockq_renew('kept', 'renewer', $tok, '1 s')"),
		't', 'renewal ' . ++$renewals . ' succeeds')
	  if $renewals < 1000;
}
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'kept'"),
	'renewer', 'after 4 s with a 1 s ttl, the renewer still holds the lock');
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'kept'"),
	'1', 'the waiter is still waiting');
# stop renewing: the waiter gets it when the lease ends
ok(defined waiter_result($w, qr/(granted:\d+)/),
	'once renewals stop, the lease ends and the waiter is granted');
$w->quit;

# lockq.max_ttl is a SIGHUP setting.
$node->safe_psql('postgres', "ALTER SYSTEM SET lockq.max_ttl = '60s'");
$node->reload;
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT lockq_try('big', 'o', '2 minutes')");
like($err, qr/ttl must not exceed 60 seconds/, 'a reloaded lockq.max_ttl applies');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET lockq.max_ttl');
$node->reload;

# --- lease ends in the log --------------------------------------------------
my $offset = -s $node->logfile;
$tok = scalar_query($node, "SELECT lockq_try('L1', 'worker-7', '200 ms')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'L1'"),
	'L1: the lease runs out');
ok($node->wait_for_log(qr/lockq: the grant of lock "L1" to owner "worker-7" expired\n.*DETAIL:  Token $tok, held for \d+ ms, lease of 200 ms\./, $offset),
	'the log names the lock, owner and token of the lease that expired');
$tok = scalar_query($node, "SELECT lockq_try('L2', 'worker-8', '1 minute')");
is(scalar_query($node, "SELECT lockq_force_release('L2')"), 't', 'L2 is released by force');
ok($node->wait_for_log(qr/lockq: the grant of lock "L2" to owner "worker-8" was released by force\n.*DETAIL:  Token $tok,/, $offset),
	'the log names the grant released by force');
$node->append_conf('postgresql.conf', "lockq.log_lease_ends = off\n");
$node->reload;
ok($node->poll_query_until('postgres', "SELECT setting = 'off' FROM pg_settings WHERE name = 'lockq.log_lease_ends'"),
	'lockq.log_lease_ends is off');
# the lock server reloads at its next wake-up: a request of its own first
scalar_query($node, "SELECT lockq_try('L0', 'x', '1 minute')");
$offset = -s $node->logfile;
scalar_query($node, "SELECT lockq_try('L3', 'worker-9', '200 ms')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'L3'"),
	'L3: the lease runs out');
scalar_query($node, "SELECT lockq_force_release('L0')");
# the force release is applied after the expiry: once it is, both would be logged
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'L0'"),
	'L0 is released by force');
ok(!$node->log_contains(qr/lockq: the grant of lock "L[03]"/, $offset),
	'with lockq.log_lease_ends = off neither is logged');

$node->stop;
done_testing();

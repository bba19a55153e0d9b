# One role's wave of expiries does not hold up another role.  Role wave
# lines up the lease ends of 60,000 locks on one instant T; role other's
# lease on X ends 20 ms after T while other's waiter is queued for X, and
# other calls lockq_try on a free lock during the wave.  The lock server
# fires due timers in turns per role, a slice each, a bounded number per
# batch (issue 21: the whole wave was fired in one batch, 0.7 s for
# 90,000, and other's hand-off and requests waited for all of it).  The
# wave itself still ends every lease, and the waiter keeps its answer
# through the state rebuild that may follow it.
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

my $n = 60000;
my $node = lockq_node('wave');
$node->safe_psql('postgres', q{
	CREATE ROLE wave LOGIN; CREATE ROLE other LOGIN;
	GRANT USAGE ON SCHEMA lockq TO wave, other;});

sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE $role; $sql");
}

# wave takes n locks, each with a lease that ends at T (lockq time, µs).
my $t_end = scalar_query($node, 'SELECT lockq_now() + 14000000');
as('wave', qq{
	DO \$\$ BEGIN
		FOR i IN 1 .. $n LOOP
			PERFORM lockq_try('w:' || i, 'wave',
				make_interval(secs => ($t_end - lockq_now()) / 1e6));
		END LOOP;
	END \$\$;});
is(scalar_query($node, "SELECT count(*) FROM lockq.owners WHERE lock_id LIKE 'w:%'"), $n,
	"wave holds $n locks");
ok(scalar_query($node, 'SELECT lockq_now()') < $t_end - 500000,
	'their leases all end at one instant T, still ahead');

# other holds X until T + 20 ms, and waits for it from another session.
my $tx = as('other', "SELECT lockq_try('X', 'ox', '1 hour')");
as('other', "SELECT lockq_renew('X', 'ox', $tx, make_interval(secs => ($t_end + 20000 - lockq_now()) / 1e6))");
my $w = start_waiter($node, 'other-waiter',
	"SET ROLE other; SELECT 'got:' || lockq_get('X', 'wx', '1 minute', timeout => '60 s');");
ok(wait_for_waiters($node, 'X', 1), "other's waiter is queued for X");

# timed_try(at): other's lockq_try on a free lock, in a session that has
# called lockq before, at lockq time at; returns its token and how long it
# took, in ms, timed in the server.
sub timed_try
{
	my ($lock, $at) = @_;
	my $out = (split /\n/, as('other', qq{
		SELECT lockq_try('Y0', 'oy', '1 minute');
		SELECT pg_sleep(greatest($at - lockq_now(), 0) / 1e6);
		WITH t AS MATERIALIZED (SELECT lockq_try('$lock', 'oy', '1 minute') AS tok)
		SELECT tok || '|' || extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000 FROM t}))[-1];
	return split /\|/, $out;
}
my (undef, $idle_ms) = timed_try('Y1', 0);

# During the wave, other's request on a free lock, timed in the server.
# (The session sleeps until 2 ms after T so that the request arrives in
# the wave: a moment to aim at, not a condition to wait for.)
my ($ty, $try_ms) = timed_try('Y', $t_end + 2000);
ok($ty > 0, 'other takes a free lock during the wave');

like(waiter_result($w, qr/(got:\d+|ERROR:.*)/), qr/^got:\d+$/, "other's waiter is granted X");
my $acquired = scalar_query($node, "SELECT acquired FROM lockq.owners WHERE lock_id = 'X'");
my $handoff_ms = ($acquired - ($t_end + 20000)) / 1000;
diag(sprintf('hand-off of X %.1f ms after its lease ended; lockq_try during the wave %.1f ms, before it %.1f ms', $handoff_ms, $try_ms, $idle_ms));
# The bounds separate a slice from the whole wave.  On the machine this
# test was first run on, a slice took 1-5 ms and the whole wave 67 ms (76
# for lockq_try); on a slower 2-core VM a slice takes 14-40 ms (lockq_try
# 25-43 ms), and the whole wave longer than there.
cmp_ok($handoff_ms, '<', 60, 'within 60 ms of its lease end, not after the whole wave');
cmp_ok($try_ms, '<', 70, "other's lockq_try is not held up by the wave (70 ms)");
$w->quit;

ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq.owners WHERE lock_id LIKE 'w:%'"),
	'every lease of the wave ended');
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'X'"), 'wx',
	'X is still the waiter\'s');

done_testing();

# Two sessions contend for one lock through many acquire/release cycles.
# The critical section reads a counter in one transaction and writes it in
# another, fenced with lockq_holds: if two holders ever overlapped, updates
# would be lost.  A second phase uses leases shorter than the critical
# section, so leases expire under the holders: fencing must reject every
# late write, and still no update may be lost.
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

my $node = lockq_node('stress');

$node->safe_psql(
	'postgres', q{
CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL);
INSERT INTO counter VALUES (1, 0);
-- one row per grant, and one per fenced write that went through
CREATE TABLE grants (client int, token bigint);
CREATE TABLE writes (client int, token bigint, value int);
});

# The critical section: read, (maybe) dawdle, write only if still holding,
# (maybe) keep the fenced transaction open a while, then release.
sub script
{
	my ($ttl, $before, $inside) = @_;
	return qq{
SELECT lockq_get('ctr', NULL, '$ttl') AS tok \\gset
INSERT INTO grants VALUES (:client_id, :tok);
SELECT value AS v FROM counter WHERE id = 1 \\gset
$before
BEGIN;
WITH w AS (UPDATE counter SET value = :v + 1
            WHERE id = 1 AND lockq_holds('ctr', :tok) RETURNING value)
INSERT INTO writes SELECT :client_id, :tok, value FROM w;
$inside
COMMIT;
SELECT lockq_release('ctr', NULL, :tok);
};
}

sub check_invariants
{
	my ($phase) = @_;
	my ($count, $distinct, $max, $counter) = split /\|/,
	  $node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT value), max(value), (SELECT value FROM counter) FROM writes'
	  );
	is($distinct, $count, "$phase: every fenced write saw a different counter value (no lost update)");
	is($max, $count, "$phase: the written values are exactly 1..$count");
	is($counter, $count, "$phase: the counter equals the number of fenced writes");
	is( $node->safe_psql(
			'postgres',
			'SELECT count(*) FROM (SELECT token, lag(token) OVER (ORDER BY value) AS prev FROM writes) s WHERE token <= prev'
		),
		'0',
		"$phase: tokens strictly increase with the counter value (fencing order)");
	is($node->safe_psql('postgres', 'SELECT count(DISTINCT token) = count(*) FROM grants'),
		't', "$phase: every grant has its own token");
	return $count;
}

# Phase 1: long leases, 2 clients x 400 cycles.
$node->pgbench(
	'--no-vacuum --client=2 --jobs=2 --transactions=400',
	0,
	[qr{processed: 800/800}],
	[qr{^$}],
	'phase 1: 800 cycles, no errors',
	{ 'lockq_stress_1' => script('30 seconds', '', '') });
my $writes = check_invariants('phase 1');
is($writes, 800, 'phase 1: all 800 writes went through');
is($node->safe_psql('postgres', 'SELECT count(*) FROM grants'), '800',
	'phase 1: 800 grants');

# Phase 2: 60 ms leases; 0..100 ms between the read and the fenced write
# (the lease often ends there: the write must be rejected), and 0..80 ms
# between the fenced write and its commit (the lease often ends there too:
# the next holder must not be granted, and so not read the counter, before
# that commit).
$node->safe_psql('postgres', 'TRUNCATE grants, writes; UPDATE counter SET value = 0');
my $expiries = scalar_query($node, 'SELECT expiries FROM lockq_stats');
$node->pgbench(
	'--no-vacuum --client=2 --jobs=2 --transactions=100',
	0,
	[qr{processed: 200/200}],
	[qr{^$}],
	'phase 2: 200 cycles with expiring leases, no errors',
	{
		'lockq_stress_2' => script(
			'60 milliseconds',
			"\\set d random(0, 100)\nSELECT pg_sleep(:d / 1000.0);",
			"\\set e random(0, 80)\nSELECT pg_sleep(:e / 1000.0);")
	});
$writes = check_invariants('phase 2');
my $grants = scalar_query($node, 'SELECT count(*) FROM grants');
is($grants, '200', 'phase 2: 200 grants');
cmp_ok($writes, '<', $grants,
	'phase 2: some holders outlived their lease and their write was rejected');
cmp_ok($writes, '>', 0, 'phase 2: and the others wrote');
ok(scalar_query($node, 'SELECT expiries FROM lockq_stats') > $expiries,
	'phase 2: leases expired under the holders');
ok(scalar_query($node, 'SELECT deferred_handoffs FROM lockq_stats') > 0,
	'phase 2: some hand-offs waited for an open fenced transaction');
note "phase 2: $grants grants, $writes fenced writes went through";

is(scalar_query($node, "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

# Held hints are exact: a lockq_get arrives lazily (without waking the lock
# server) only when the very lock id it asks for is held by another owner.
# A free lock id whose 32-bit hash (hashtext, the hash the hints are
# indexed by) equals that of a lock another role holds must be granted at
# once, not when the lock server next wakes for something else (up to the
# 5 s safety net).  What is checked:
#   - colliding pairs of lock ids are found with SQL, over generated ids;
#   - with role alice holding one id of a pair, role bob's lockq_get on the
#     other (free) id is granted within 0.5 s, three pairs in a row with
#     session-bound locks and once with owners, and it was not lazy (the
#     backend fault point submit-lazy-before-push, armed to count only, is
#     not reached); a non-colliding free id for comparison;
#   - bob's lockq_get on the id alice really holds is still lazy, and is
#     granted as soon as she releases it;
#   - ids up to the hint's length are lazy, longer ids never are (and are
#     still granted at the release);
#   - a hint read while the lock server is changing it is not believed
#     (the lock server is stopped in mid-write with the fault point
#     hint-write): the arrival is not lazy.
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

# the longest lock id a held hint keeps (LQ_HINT_ID_LEN in lockq_shmem.h)
my $hint_id_len = 119;

# The holders here are session-bound and must be granted by the lock
# server, which writes the hints: a limit of session-bound locks set for
# the roles keeps them off the fast path (lockq_fastpath.c).
my $node = lockq_node('hints',
	conf => "lockq.max_session_locks_per_role = 100000\n");
fault_functions($node);
$node->safe_psql(
	'postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	-- the time one lockq_get takes inside the server, in seconds (no psql
	-- round trip in it); the lock stays held by owner (NULL: the session)
	CREATE FUNCTION hc_timed_get(id text, owner text, OUT secs float8)
	LANGUAGE plpgsql AS $$
	DECLARE
		t0 timestamptz := clock_timestamp();
	BEGIN
		PERFORM lockq.lockq_get(id, owner, timeout => '30 s');
		secs := extract(epoch FROM clock_timestamp() - t0);
	END $$;
	GRANT EXECUTE ON FUNCTION hc_timed_get(text, text) TO PUBLIC;});

# --- colliding pairs, found with SQL ----------------------------------------
# 300,000 ids give about ten pairs with equal 32-bit hashes (n^2 / 2^33).
my $start = time();
my @pairs = map { [ split / / ] } split /\n/, scalar_query(
	$node, q{
	SELECT min(id) || ' ' || max(id)
	FROM (SELECT 'hc:' || g AS id FROM generate_series(1, 300000) g) s
	GROUP BY hashtext(id COLLATE "C")
	HAVING count(*) = 2
	ORDER BY 1 LIMIT 3});
diag(sprintf('found %d colliding pairs in %.2f s', scalar(@pairs), time() - $start));
is(scalar(@pairs), 3, 'three pairs of lock ids with equal 32-bit hashes');
my ($a0, $b0) = @{ $pairs[0] };
is(scalar_query($node,
	"SELECT '$a0' <> '$b0' AND hashtext('$a0' COLLATE \"C\") = hashtext('$b0' COLLATE \"C\")"),
	't', "$a0 and $b0 differ, their hashes do not");
my $free = 'hc:free';
is(scalar_query($node,
	"SELECT count(*) FROM (VALUES ('$a0'), ('$pairs[1][0]'), ('$pairs[2][0]')) v(id) "
	  . "WHERE hashtext(id COLLATE \"C\") = hashtext('$free' COLLATE \"C\")"),
	'0', "$free collides with none of them");

my $alice = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
my $bob = $node->background_psql('postgres', extra_params => [ '-U', 'bob' ]);
# each session takes its slot now: a session's first call may have to wake
# the lock server to free the slot of an earlier session
for my $s ($alice, $bob)
{
	ok($s->query_safe("SELECT lockq_try('hc-warm') > 0"), 'a session takes its slot');
	is($s->query_safe("SELECT lockq_release('hc-warm')"), 't', 'and releases');
}

# lazy_hits(): how often a lockq_get arrived lazily (the fault point is
# armed to count its hits and never fire)
$node->safe_psql('postgres',
	"SELECT lockq_fault_arm('submit-lazy-before-push', 'sleep', 0, 0, 0)");
sub lazy_hits
{
	return scalar_query($node,
		"SELECT hits FROM lockq_faults() WHERE name = 'submit-lazy-before-push'");
}

# timed_get(id, owner): bob's lockq_get on id for owner (undef: his
# session), its time in seconds, and whether it arrived lazily; bob
# releases it again
sub timed_get
{
	my ($id, $owner) = @_;
	my $o = defined $owner ? "'$owner'" : 'NULL';
	my $hits = lazy_hits();
	my $secs = $bob->query_safe("SELECT hc_timed_get('$id', $o)");
	my $lazy = lazy_hits() - $hits;
	is($bob->query_safe("SELECT lockq_release('$id', $o)"), 't', "bob releases $id");
	return ($secs, $lazy);
}

# --- a free id colliding with another role's lock is granted at once --------
# The bound: such a call takes a few milliseconds (one round of the lock
# server); a lazy arrival waits until the lock server wakes for something
# else, up to the 5 s safety net (about 1 s at best, when it has statistics
# to report), so 0.5 s leaves a loaded machine room and still tells them
# apart.
{
	my ($secs, $lazy) = timed_get($free);
	diag(sprintf('non-colliding %s: %.1f ms', $free, $secs * 1000));
	cmp_ok($secs, '<', 0.5, "bob's lockq_get on $free is granted at once");
	is($lazy, 0, 'not lazily');
}
for my $p (@pairs)
{
	my ($a, $b) = @$p;
	ok($alice->query_safe("SELECT lockq_try('$a') > 0"), "alice holds $a");
	my ($secs, $lazy) = timed_get($b);
	diag(sprintf('%s colliding with %s held by alice: %.1f ms', $b, $a, $secs * 1000));
	cmp_ok($secs, '<', 0.5, "bob's lockq_get on the free $b is granted at once");
	is($lazy, 0, 'not lazily');
	is($alice->query_safe("SELECT lockq_release('$a')"), 't', "alice releases $a");
}
# the same with owners: grants that write lockq's tables, after which the
# lock server wakes by itself within about a second to report statistics
{
	my ($a, $b) = @{ $pairs[0] };
	ok($alice->query_safe("SELECT lockq_try('$a', 'alice-o', '1 min') > 0"),
		"alice-o holds $a");
	my ($secs, $lazy) = timed_get($b, 'bob-o');
	diag(sprintf('%s for an owner, colliding with %s held by alice-o: %.1f ms',
		$b, $a, $secs * 1000));
	cmp_ok($secs, '<', 0.5, "bob-o's lockq_get on the free $b is granted at once");
	is($lazy, 0, 'not lazily');
	is($alice->query_safe("SELECT lockq_release('$a', 'alice-o')"), 't',
		"alice-o releases $a");
}

# --- the id alice holds: still lazy, granted at her release ---------------
# bob_waits_lazily(id): alice holds id, bob's lockq_get on it waits; returns
# whether it arrived lazily, after checking that alice's release grants it
# at once
sub bob_waits_lazily
{
	my ($id) = @_;
	ok($alice->query_safe("SELECT lockq_try('$id') > 0"), 'alice holds an id of ' . length($id) . ' bytes');
	my $hits = lazy_hits();
	$bob->{stdin} .= "SELECT 'got:' || lockq_get('$id');\n";
	$bob->{run}->pump_nb();
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'bob' "
		  . "AND wait_event_type = 'Extension' AND wait_event = 'Extension'")
	  or fail('bob waits in lockq_get');
	# the count only: a view of lockq would wake the lock server
	my $lazy = lazy_hits() - $hits;
	my $start = time();
	is($alice->query_safe("SELECT lockq_release('$id')"), 't', 'alice releases it');
	like(waiter_result($bob, qr/(got:\d+)/), qr/^got:\d+$/, 'bob is granted');
	cmp_ok(time() - $start, '<', 2, 'at once, not at the 5 s safety net');
	$bob->{stdout} = '';
	is($bob->query_safe("SELECT lockq_release('$id')"), 't', 'bob releases it');
	return $lazy;
}
is(bob_waits_lazily($pairs[0][0]), 1, "bob's lockq_get on the id alice holds arrives lazily");
is(bob_waits_lazily('hc:' . ('x' x ($hint_id_len - 3))), 1,
	'so does one on an id as long as a hint keeps');
is(bob_waits_lazily('hc:' . ('x' x ($hint_id_len - 2))), 0,
	'one on a longer id never does');

# --- a hint read while the lock server writes it counts as "not held" -----
# The lock server stops in the middle of dropping alice's hint (its count
# odd, the id still there); bob's lockq_get on the id then reads a hint
# that is being changed: it must not believe it (no lazy arrival), and is
# granted as soon as the lock server goes on.
{
	my $id = 'hc:torn';
	ok($alice->query_safe("SELECT lockq_try('$id') > 0"), "alice holds $id");
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('hint-write', 'wait')");
	is($alice->query_safe("SELECT lockq_release('$id')"), 't', 'alice releases it');
	ok(fault_fired($node, 'hint-write'), 'the lock server stops while it drops the hint');
	my $hits = lazy_hits();
	$bob->{stdin} .= "SELECT 'got:' || lockq_get('$id');\n";
	$bob->{run}->pump_nb();
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'bob' "
		  . "AND wait_event_type = 'Extension' AND wait_event = 'Extension'")
	  or fail('bob waits in lockq_get');
	is(lazy_hits() - $hits, 0, "bob's lockq_get does not arrive lazily");
	my $start = time();
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('hint-write')");
	like(waiter_result($bob, qr/(got:\d+)/), qr/^got:\d+$/, 'bob is granted');
	cmp_ok(time() - $start, '<', 2, 'when the lock server goes on');
	$bob->{stdout} = '';
	is($bob->query_safe("SELECT lockq_release('$id')"), 't', 'bob releases it');
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('hint-write')");
}

$alice->quit;
$bob->quit;
is(scalar_query($node, q{SELECT holders || '/' || waiters FROM lockq_stats}), '0/0',
	'no holders, no waiters');

$node->stop;
done_testing();

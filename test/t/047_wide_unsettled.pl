# A stream of first-time locks (a lock per job) above
# lockq.max_unsettled_rate: every lock is made unsettled at once, by the
# wide marker (lock_id '' in lockq.unsettled), not one flush per lock; a
# crash then ends every short grant and delays every lock, named anywhere or
# not, until the leases that may have been lost have ended.  With
# lockq.max_unsettled_rate = -1 the same stream costs a flush per batch and
# a crash delays only the locks it touched (026_scoped_delay has the rest
# of that case).
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

my $node = lockq_node('wide', conf => "lockq.max_unsettled_rate = 50\n");
my $ttl = 3;
my $slack = 2;

# stream(prefix, n): n first-time locks, each taken and released at once
sub stream
{
	my ($prefix, $n) = @_;
	return scalar_query($node, qq{
		SELECT count(*) FROM generate_series(1, $n) i
		 WHERE lockq_release('$prefix' || i, 'w',
				lockq_try('$prefix' || i, 'w', '$ttl seconds'))});
}

sub stats
{
	my ($col) = @_;
	return scalar_query($node, "SELECT $col FROM lockq_stats");
}

sub flushed
{
	my $lsn = scalar_query($node, 'SELECT pg_current_wal_insert_lsn()');
	return $node->poll_query_until('postgres',
		"SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn");
}

# --- the stream, with every lock unsettled at once
my $sync0 = stats('sync_commits');
is(stream('job:', 3000), '3000', 'a stream of 3,000 first-time locks is granted and released');
my $sync = stats('sync_commits') - $sync0;
note "flushed batches for 3,000 first-time locks: $sync";
cmp_ok($sync, '<', 300, 'far fewer flushes than locks');
is(scalar_query($node, q{SELECT count(*) FROM lockq.unsettled WHERE lock_id = ''}), '1',
	'the wide marker is there');
cmp_ok(scalar_query($node, q{SELECT count(*) FROM lockq.unsettled WHERE lock_id <> ''}), '<=', 120,
	'and a row of their own only for the locks before the rate was reached');

# a short grant made under it, a long one, and an id never used
my $short = scalar_query($node, qq{SELECT lockq_try('job:short', 'a', '$ttl seconds')});
stream('more:', 200);
my $long = scalar_query($node, q{SELECT lockq_try('job:long', 'b', '2 minutes')});
ok(flushed(), 'both grants have reached the disk');
crash_restart($node);
my $t_up = time();

is(scalar_query($node, qq{SELECT lockq_holds('job:short', $short)}), 'f',
	'after the crash the short grant is ended (its release might have been lost)');
is(scalar_query($node, qq{SELECT lockq_holds('job:long', $long)}), 't',
	'a grant longer than lockq.max_grace survives');
is(scalar_query($node, q{SELECT lockq_try('never:1', 'c') IS NULL}), 't',
	'a lock id never used is delayed too');
my $left = scalar_query($node,
	'SELECT extract(epoch FROM grace_until) - lockq_now() / 1000000.0 FROM lockq_stats');
note "every lock is delayed for ${left}s more";
cmp_ok($left, '>', 0, 'grace_until says until when');
my $grace = scalar_query($node, 'SELECT extract(epoch FROM grace_until) FROM lockq_stats');
cmp_ok($left, '<=', $ttl + $slack, 'for no longer than the leases and the slack');
cmp_ok(stats('delayed_locks'), '>=', 1, 'delayed_locks counts it');
ok($node->log_contains(qr/LOG:  lockq delays \d+ locks? until every lease.*\n.*DETAIL:  Locks: .*\(every lock\)/),
	'the log says every lock is delayed');
ok($node->log_contains(qr/LOG:  lockq ended \d+ grants? whose end may have been shown.*\n.*DETAIL:  Locks and tokens: .*job:short \(token $short\)/),
	'and names the short grant it ended');

# a waiter queued meanwhile is granted when the delay ends, not before
my $w = start_waiter($node, 'w', q{SELECT 'got=' || lockq_get('never:2', 'd', '1 minute', timeout => '30 s');});
ok(wait_for_waiters($node, 'never:2', 1), 'a lockq_get of another unused id queues');
my $start = time();
ok($node->poll_query_until('postgres', q{SELECT lockq_try('never:1', 'c') IS NOT NULL}),
	'once the delay is over, the unused id is granted');
my $waited = time() - $t_up;
note sprintf('granted %.3f s after the restart', $waited);
cmp_ok($waited, '<', $ttl + $slack + 2, 'within its bound');
ok(waiter_result($w, qr/got=(\d+)/), 'and the waiter is granted');
is(scalar_query($node, qq{SELECT acquired >= to_timestamp($grace) FROM lockq_locks WHERE lock_id = 'never:2'}),
	't', 'not before the delay ended');
end_session($w);
scalar_query($node, q{SELECT lockq_release('never:1', 'c'), lockq_release('never:2', 'd'),
	lockq_release('job:long', 'b')});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM lockq.unsettled'),
	'every lock settles afterwards');

# --- the same stream, one lock at a time
$node->append_conf('postgresql.conf', "lockq.max_unsettled_rate = -1\n");
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.max_unsettled_rate') = '-1'}),
	'lockq.max_unsettled_rate = -1');
$sync0 = stats('sync_commits');
is(stream('job2:', 500), '500', 'a stream of 500 first-time locks');
$sync = stats('sync_commits') - $sync0;
note "flushed batches for 500 first-time locks, one at a time: $sync";
cmp_ok($sync, '>=', 500, 'costs a flush per lock');
is(scalar_query($node, q{SELECT count(*) FROM lockq.unsettled WHERE lock_id = ''}), '0',
	'and no wide marker');
ok(flushed(), 'the stream has reached the disk');
crash_restart($node);
is(scalar_query($node, q{SELECT lockq_try('never:3', 'e') IS NOT NULL}), 't',
	'after a crash an unused lock id is granted at once');

$node->stop;
done_testing();

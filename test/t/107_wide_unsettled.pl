# A stream of first-time locks (a lock per job) above
# lockq.max_unsettled_rate: every lock is made unsettled at once, by the
# wide marker (lock_id '' in lockq.unsettled), not one flush per lock; a
# crash then ends every short grant and delays every lock, named anywhere or
# not, until the leases that may have been lost have ended.  With
# lockq.max_unsettled_rate = -1 the same stream costs a flush per batch and
# a crash delays only the locks it touched (106_scoped_delay has the rest
# of that case).  Last, a quick release covered only by the wide marker:
# the crash after it must not bring the released grant back.
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
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM lockq.owners WHERE lock_id LIKE 'job:%'}),
	'both grants have their rows (the short one once held for 100 ms)');
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
ok($node->log_contains(qr/LOG:  lockq delays every lock until every lease that may have been lost has ended\n.*DETAIL:  A stream of locks taken for the first time had made every lock unsettled/),
	'the log says every lock is delayed, and why');
ok($node->log_contains(qr/LOG:  lockq ended \d+ grants? whose end may have been shown.*\n.*DETAIL:  Locks and tokens: .*job:short \(token $short\)/),
	'and names the short grant it ended');

# a waiter queued meanwhile is granted when the delay ends, not before
my $w = start_waiter($node, 'w', q{SELECT 'got=' || lockq_get('never:2', 'd', '1 minute', timeout => '30 s');});
ok(wait_for_waiters($node, 'never:2', 1), 'a lockq_get of another unused id queues');
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

# --- a quick release covered only by the wide marker's fence ------------
# L has a marker of its own that covers its leases but no release (it was
# only renewed), so the release of its grant may be answered by the
# session only thanks to the wide marker's fence.  The batch that renews
# L (and so lets its session release it by itself) must keep the wide
# marker from settling at its end: else the grant is put in the table of
# quick releases after the wide row is deleted, its release is answered,
# and a crash before the lock server has written that release brings the
# grant back (I1).  The lock server is stalled for more than the 2 s after
# which a quiet marker settles, with the renewal waiting.
my $q = lockq_node('wide2', conf => "lockq.max_unsettled_rate = 50\nrestart_after_crash = on\n");
fault_functions($q);
my $tl = scalar_query($q, q{SELECT lockq_try('L', 'a', '30 s')});
scalar_query($q, qq{SELECT lockq_renew('L', 'a', $tl)}) for 1 .. 2;
# sessions that use lockq before the lock server is stalled
my @sess = map { my $b = $q->background_psql('postgres'); $b->query_safe("SELECT lockq_holds('none', 1)"); $b } 1 .. 2;
is(scalar_query($q, q{
	SELECT count(*) FROM generate_series(1, 1000) i
	 WHERE lockq_release('s:' || i, 'w', lockq_try('s:' || i, 'w', '3 seconds'))}),
	'1000', 'a stream of first-time locks');
is(scalar_query($q, q{SELECT count(*) FROM lockq.unsettled WHERE lock_id = '' AND fence_ttl > 0}), '1',
	'makes the wide marker');
is(scalar_query($q, q{SELECT fence_ttl FROM lockq.unsettled WHERE lock_id = 'L'}), '0',
	"L's own marker covers no release");

sub stall
{
	my ($n) = @_;
	$q->safe_psql('postgres', "SELECT lockq_fault_arm('batch-start', 'wait')");
	my $nudge = start_waiter($q, 'nudge', "SELECT lockq_try('nudge', 'n');");
	ok(fault_fired($q, 'batch-start', $n), 'the lock server is stalled');
	return $nudge;
}
my $nudge = stall(1);
$sess[0]->{stdin} .= "SELECT 'renewed=' || lockq_renew('L', 'a', $tl);\n";
$sess[0]->{run}->pump_nb();
my $t_stall = time();
# more than the 2 s after which a quiet marker settles
ok($q->poll_query_until('postgres', "SELECT extract(epoch FROM clock_timestamp()) > $t_stall + 2.5"),
	'2.5 s pass');
$sess[1]->query_safe("SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
is(waiter_result($sess[0], qr/renewed=(\w)/), 't', 'L is renewed in the batch after the stall');
end_session($nudge);
my $fired = scalar_query($q, q{SELECT fired FROM lockq_faults() WHERE name = 'batch-start'});
$nudge = stall($fired + 1);
is($sess[1]->query_safe(qq{SELECT lockq_release('L', 'a', $tl)}), 't',
	"L's release is answered while the lock server is stalled");
is($sess[1]->query_safe(qq{SELECT lockq_holds('L', $tl)}), 'f', 'lockq_holds is false');
my $lsn = $sess[1]->query_safe('SELECT pg_current_wal_insert_lsn()');
chomp $lsn;
ok($q->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn"),
	'everything before the release has reached the disk');
crash_restart($q);
end_session($_) for ($nudge, @sess);
wait_for_worker($q);
is(scalar_query($q, qq{SELECT lockq_holds('L', $tl)}), 'f',
	'after a crash the released grant does not hold again');
is(scalar_query($q, qq{SELECT lockq_renew('L', 'a', $tl)}), 'f', 'nor can it be renewed');
$q->stop;
done_testing();

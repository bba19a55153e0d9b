# After a crash, only a lock that may have had a grant lost in it waits:
# one lock changes hands continuously with short leases (returned before
# their flush), 1,000 other lock ids are idle; kill -9 of the postmaster.
# The idle ids are granted within 1 s of the restart; the hot lock waits
# no longer than its own bound (its lease, 2 s, plus the 2 s slack).
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

my $node = lockq_node('scoped');
my $ttl = 2;
my $slack = 2;

# the 1,000 idle ids: taken and released once, long before the crash
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 1000) i
	 WHERE lockq_release('idle:' || i, 'x', lockq_try('idle:' || i, 'x', '2 seconds'))});

# two sessions hand the hot lock back and forth
my @loop;
for my $who (qw(a b))
{
	push @loop, start_waiter($node, "hot-$who", qq{
		DO \$\$
		DECLARE t bigint;
		BEGIN
			LOOP
				t := lockq_get('hot', '$who', '$ttl seconds');
				PERFORM lockq_release('hot', '$who', t);
			END LOOP;
		END \$\$;});
}
ok($node->poll_query_until('postgres', 'SELECT handoffs > 200 FROM lockq_stats'),
	'the hot lock changes hands continuously');
ok($node->poll_query_until('postgres',
		q{SELECT string_agg(lock_id, ',') = 'hot' FROM lockq.unsettled}),
	'it is unsettled, and only it: the idle ids have settled');
# (the hot lock is free for a moment between its holders: read a token of
# it while it is held)
my $hot_token = '';
ok(poll_until(sub {
			$hot_token = scalar_query($node,
				q{SELECT max(token) FROM lockq_locks WHERE lock_id = 'hot'});
			return $hot_token ne '';
		}),
	'a token of the hot lock before the crash');

# A second lock, e, is released and taken again with short leases just
# before the crash: its grant is one the crash must end (the hot lock may
# be between two holders at that moment).
my $te = scalar_query($node, q{SELECT lockq_try('e', 'e1', '2 seconds')});
scalar_query($node, qq{SELECT lockq_release('e', 'e1', $te)});
$te = scalar_query($node, q{SELECT lockq_try('e', 'e2', '2 seconds')});
# e2's grant was shown before its flush (e is unsettled), so the crash
# could take the grant itself with it: then nothing is left to end.  Wait
# until it has its row (a grant its marker covers gets one once it has
# been held for 100 ms) and the WAL writer has flushed it, as it does
# within a fraction of a second, so that the crash must end a grant that
# survived.
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM lockq.owners WHERE lock_id = 'e'}),
	"e2's grant has its row");
my $lsn = scalar_query($node, 'SELECT pg_current_wal_insert_lsn()');
ok($node->poll_query_until('postgres',
		"SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn"),
	"e2's grant has reached the disk");
crash_restart($node);
my $t_up = time();
end_session($_) for @loop;

# every idle id, at once
my ($rc, $out, $err) = $node->psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 1000) i
	 WHERE lockq_try('idle:' || i, 'y', '1 minute') IS NOT NULL});
my $t_idle = time() - $t_up;
is($out, '1000', 'all 1,000 idle ids are granted after the crash') or diag($err);
note sprintf('the idle ids were granted %.3f s after the restart', $t_idle);
cmp_ok($t_idle, '<', 1, 'within 1 s of the restart');

# the hot lock: delayed, for no longer than its bound
my $left = scalar_query($node,
	'SELECT extract(epoch FROM grace_until) - lockq_now() / 1000000.0 FROM lockq_stats');
note "the hot lock is delayed for ${left}s more";
is(scalar_query($node, 'SELECT delayed_locks FROM lockq_stats'), '2',
	'two locks are delayed: the hot one and e');
ok($node->log_contains(qr/LOG:  lockq delays 2 locks until every lease that may have been lost.*\n.*DETAIL:  Locks: e, hot\./),
	'the log names them');
ok($node->log_contains(qr/LOG:  lockq ended \d+ grants? whose end may have been shown before it was flushed\n.*DETAIL:  Locks and tokens: e \(token $te\)/),
	"and e's grant, which the crash ended");
is(scalar_query($node, "SELECT lockq_holds('e', $te)"), 'f', "e's grant is ended");
cmp_ok($left, '<=', $ttl + $slack, 'for no longer than its lease and the slack');
is(scalar_query($node, q{SELECT lockq_try('hot', 'c') IS NULL}), 't',
	'nothing is granted on it meanwhile');
my $start = time();
ok($node->poll_query_until('postgres', q{SELECT lockq_try('hot', 'c') IS NOT NULL}),
	'then it is granted');
my $waited = time() - $start;
note sprintf('granted %.3f s later', $waited);
cmp_ok($waited, '<', $ttl + $slack + 1, 'once its bound has passed');
my $hot_after = scalar_query($node, q{SELECT token FROM lockq_locks WHERE lock_id = 'hot'});
ok($hot_after ne '' && $hot_after > $hot_token,
	'with a token above every one before the crash')
  or diag("before: $hot_token; after: '$hot_after'; its row: "
	  . $node->safe_psql('postgres', q{SELECT string_agg(owner || ' ' || token, ', ') FROM lockq.owners WHERE lock_id = 'hot'}));

$node->stop;
done_testing();

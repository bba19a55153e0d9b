# After a lock-server restart the views answer at once (issue 21: every read
# of lockq_stats, lockq_waiters and lockq_role_usage took a second until a
# request came, because the new lock server started counting the arrival
# ring from 0); and a lockq_await session that is terminated as its grant
# arrives leaves the grant with one heartbeat interval of lease, not the
# full lease (nobody has picked the grant up).
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

my $node = lockq_node('views');

# --- the views after a restart of the lock server ------------------------------
scalar_query($node, "SELECT lockq_release('v', 'o', lockq_try('v', 'o', '1 minute'))");
my $pid = worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(wait_for_worker($node, $pid), 'the lock server restarted');
for my $view ('lockq_stats', 'lockq_waiters', 'lockq_role_usage')
{
	my $ms = scalar_query($node, qq{
		WITH t AS MATERIALIZED (SELECT count(*) FROM $view)
		SELECT round(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)
		  FROM t});
	cmp_ok($ms, '<', 300, "$view answers at once after the restart (${ms} ms)");
}

# --- a lockq_await session terminated as its grant arrives ---------------------
my $th = scalar_query($node, "SELECT lockq_try('A', 'holder', '1 hour')");
is(scalar_query($node,
		"SELECT lockq_enqueue('A', 'cw', '10 minutes', NULL, '2 seconds') IS NULL"),
	't', 'a client-side waiter with a 2 s heartbeat and a 10 minute ttl');
my $aw = start_waiter($node, 'awaiter', "SELECT 'got:' || lockq_await('A', 'cw', '20 s');");
ok($node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE application_name = 'awaiter'"),
	'a session awaits it');
my $apid = backend_pid($node, 'awaiter');
kill 'STOP', $apid;
is(scalar_query($node, "SELECT lockq_release('A', 'holder', $th)"), 't',
	'the holder releases while the awaiting session cannot read its answer');
ok($node->poll_query_until('postgres', "SELECT owner = 'cw' FROM lockq_locks WHERE lock_id = 'A'"),
	'the grant went to the waiter, with its answer in the session\'s slot');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($apid)");
kill 'CONT', $apid;
end_session($aw);
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $apid"),
	'the session is gone before it read the answer');
ok($node->poll_query_until('postgres',
		"SELECT expires < clock_timestamp() + interval '3 s' FROM lockq_locks WHERE lock_id = 'A' AND owner = 'cw'"),
	'the grant keeps one heartbeat interval of lease, not ten minutes');
ok(scalar_query($node, "SELECT lockq_heartbeat('A', 'cw')") > $th,
	'its client picks it up with a heartbeat');
ok(scalar_query($node, "SELECT expires > clock_timestamp() + interval '9 minutes' FROM lockq_locks WHERE lock_id = 'A'"),
	'and then it has its full lease');

done_testing();

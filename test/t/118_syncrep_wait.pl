# The lock server waiting for a synchronous standby that is gone: nothing
# it waits for is answered before the standby has it, whatever signals
# the lock server gets.
#   - A query cancel (pg_cancel_backend) would end a wait for synchronous
#     replication early, and the answer would go out; the lock server
#     ignores it (checked by polling for 3 s for it to leave the wait).
#   - A terminate ends the wait and the lock server exits without answering;
#     the restarted one waits for the standby before it answers anyone.
#   - A fast shutdown does not hang on the wait.
#   - Meanwhile callers' limits hold: a lockq_get with a timeout and a call
#     under statement_timeout return at them, and the server log says why;
#     so does a lockq_get with a timeout in a session whose previous call
#     the lock server has not confirmed the end of, and in a new session
#     once every request slot it could take is held by an ended session
#     (until then, new sessions in the place of ended ones take a spare
#     slot at once).
# With several lock servers (the suite's second configuration) the one
# looked at, cancelled and terminated is that of the case's lock (each
# waits for the standby when it has something to commit).
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

my $primary = lockq_node('primary', init => { allows_streaming => 1 });
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	"primary_conninfo = '" . $primary->connstr . " application_name=standby'\n");
$standby->start;
$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'standby'\n");
$primary->reload;
ok($primary->poll_query_until('postgres',
		q{SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'},
		'sync'),
	'the standby is synchronous');

# durable_wait(lock): the lock server of lock waits for the standby
sub durable_wait
{
	my ($lock) = @_;
	my $app = server_name($primary, $lock);
	return $primary->poll_query_until('postgres', qq{
		SELECT wait_event = 'SyncRep' FROM pg_stat_activity
		 WHERE backend_type = 'lockq lock server' AND application_name = '$app'});
}

# --- cancel, then terminate, while the lock server waits -----------------------
# u: a session that has its request slot (below: a call of its own that ends
# unconfirmed)
my $u = $primary->background_psql('postgres', on_error_stop => 0);
my $tu = $u->query_safe(q{SELECT lockq_try('u0', 'owner-u', '1 hour')});
is($u->query_safe(qq{SELECT lockq_release('u0', 'owner-u', $tu)}), 't', 'u takes and releases a lock');
$standby->stop;
my $a = start_waiter($primary, 'a',
	q{SELECT 'token:' || lockq_try('x', 'owner-a', '1 hour');});
ok(durable_wait('x'), 'with the standby gone, the lock server waits for it to grant x');
is( scalar_query($primary,
		"SELECT query FROM pg_stat_activity WHERE application_name = '" . server_name($primary, 'x') . "'"),
	'lockq: waiting until the batch is flushed (WAL, synchronous standbys)',
	'pg_stat_activity says what it waits for');
is( scalar_query($primary,
		'SELECT flush_wait_since IS NOT NULL FROM lockq_lock_servers WHERE server = '
		  . server_of($primary, 'x')),
	't', 'lockq_lock_servers shows since when it waits');
my $w = worker_pid($primary, 'x');
my $log_offset = -s $primary->logfile;
is(scalar_query($primary, "SELECT pg_cancel_backend($w)"), 't',
	'the lock server is sent a query cancel');
{
	# the cancel must change nothing: poll (for 3 s) for the lock server to
	# leave the wait, which it would do at once if the cancel worked
	local $PostgreSQL::Test::Utils::timeout_default = 3;
	ok(!$primary->poll_query_until('postgres', qq{
			SELECT wait_event IS DISTINCT FROM 'SyncRep' FROM pg_stat_activity WHERE pid = $w}),
		'it keeps waiting for the standby');
}
$a->{run}->pump_nb();
unlike($a->{stdout}, qr/token:/, 'and a has no answer');

# Callers' own limits hold while the lock server waits (issue 21: under
# Patroni's split brain every call hung until the standby came back).
{
	my $t0 = time;
	my ($rc, $out, $err) = $primary->psql('postgres',
		q{SELECT lockq_get('z', 'owner-z', '1 hour', timeout => '2 s')});
	my $took = time - $t0;
	like($err, qr/could not obtain lock "z" within the timeout/, 'a lockq_get with a timeout gets 55P03 meanwhile');
	like($err, qr/synchronous standbys/, 'its detail says the lock server waits for the standbys');
	cmp_ok($took, '<', 4, "at its timeout (2 s: ${took}s)");
	$t0 = time;
	($rc, $out, $err) = $primary->psql('postgres',
		q{SET statement_timeout = '2s'; SELECT lockq_try('z2', 'owner-z', '1 hour')});
	$took = time - $t0;
	like($err, qr/statement timeout/, 'a lockq_try ends at statement_timeout');
	cmp_ok($took, '<', 4, "without waiting for the lock server to confirm (2 s: ${took}s)");
	ok($primary->log_contains('lockq call gave up without the lock server\'s confirmation of its cancel', $log_offset),
		'the server log says so');
	ok($primary->log_contains('for its last batch to be flushed to WAL and to the synchronous standbys', $log_offset),
		'and why');

	# A session whose call ended so, unconfirmed, keeps its request slot
	# busy until the lock server confirms; its next wait with a limit must
	# still end by that limit.
	$u->query("SET statement_timeout = '1s'");
	$u->query("SELECT lockq_try('z3', 'owner-u', '1 hour')");
	like($u->{stderr}, qr/statement timeout/, 'a session\'s lockq_try ends at statement_timeout');
	$u->query("SET statement_timeout = '20s'");
	$t0 = time;
	$u->query("SELECT lockq_get('z4', 'owner-u', '1 hour', timeout => '2 s')");
	$took = time - $t0;
	like($u->{stderr}, qr/could not obtain lock "z4" within the timeout/,
		'its next lockq_get with a timeout gets 55P03');
	cmp_ok($took, '<', 4, "at its timeout, without the confirmation (2 s: ${took}s)");
	ok($primary->log_contains(
			'lockq wait for lock "z4" ended at its limit before the lock server confirmed the end of this session\'s previous call',
			$log_offset),
		'the server log says why');
	$u->quit;

	# A session that ends keeps its request slot until every lock server
	# has applied its end, so while one waits, each session that used lockq
	# and ends keeps one.  A new session takes the slot of its BackendId
	# (the lowest free one, that of the session before), else a spare: each
	# of the sessions below takes a session-bound lock on the fast path
	# (the lock server is not needed) at once and ends, until every slot
	# it could take is held.  Then a call waits for a slot, and ends at its
	# limit.
	my ($taken, $met) = (0, 0);
	my $most = 3 * scalar_query($primary,
		q{SELECT current_setting('max_connections')::int
			+ current_setting('autovacuum_max_workers')::int + 1
			+ current_setting('max_worker_processes')::int
			+ current_setting('max_wal_senders')::int});
	for my $i (1 .. $most)
	{
		$t0 = time;
		($rc, $out, $err) = $primary->psql('postgres',
			qq{SET statement_timeout = '20s'; SELECT pg_backend_pid(); SELECT lockq_get('f$i', timeout => '2 s') > 0});
		$took = time - $t0;
		my ($pid, $got) = split /\n/, $out // '';
		ok(defined $pid && $pid =~ /^\d+$/ && wait_for_exit($pid), "session $i has exited");
		if (($got // '') eq 't')
		{
			$taken++;
			next;
		}
		like($err, qr/could not obtain lock "f$i" within the timeout/,
			"session $i: a lockq_get with a timeout gets 55P03");
		cmp_ok($took, '<', 4, "session $i: at its timeout (2 s: ${took}s)");
		$met = $primary->log_contains(
			qq{lockq wait for lock "f$i" ended at its limit while every request slot it could take was held by an ended session that a lock server has not cleaned up after yet},
			$log_offset);
		last;
	}
	cmp_ok($taken, '>=', 10,
		"$taken new sessions, each in the place of one that ended, took a slot and a lock at once");
	ok($met, 'then every slot was held by an ended session, and the next wait for one ended at its limit');
}
is(scalar_query($primary, "SELECT pg_terminate_backend($w)"), 't',
	'the lock server is sent a terminate');
ok(wait_for_worker($primary, $w), 'it exited and a new lock server started');
ok($primary->log_contains('canceling the wait for synchronous replication and terminating connection due to administrator command',
		$log_offset),
	'the terminate, not the cancel, ended its wait');
ok(!$primary->log_contains('canceling wait for synchronous replication due to user request',
		$log_offset),
	'the cancel did not end the wait');
ok(durable_wait('x'), 'the new lock server waits for the standby before it answers');
$a->{run}->pump_nb();
unlike($a->{stdout}, qr/token:/, 'so a has no answer yet');

$standby->start;
like(waiter_result($a, qr/(token:\d+)/), qr/^token:\d+$/,
	'once the standby is back, a gets x');
ok($primary->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'f%'}),
	'and the ended sessions\' locks are gone');
my ($tok) = $a->{stdout} =~ /token:(\d+)/;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', q{SELECT owner || ':' || token FROM lockq_locks WHERE lock_id = 'x'}),
	"owner-a:$tok", 'and the standby has that grant');
$a->quit;

# --- a fast shutdown while the lock server waits ----------------------------
$standby->stop;
my $b = start_waiter($primary, 'b',
	q{SELECT 'token:' || lockq_try('y', 'owner-b', '1 hour');});
ok(durable_wait('y'), 'the lock server waits for the standby to grant y');
$log_offset = -s $primary->logfile;
{
	local $ENV{PGCTLTIMEOUT} = 60;
	ok($primary->stop('fast', fail_ok => 1), 'a fast shutdown does not hang on the wait');
}
end_session($b);
unlike($b->{stdout}, qr/token:/, 'b got no answer');
ok($primary->log_contains('canceling the wait for synchronous replication and terminating connection due to administrator command',
		$log_offset),
	'the shutdown ended the wait');

$standby->start;
$primary->start;
ok($primary->poll_query_until('postgres',
		q{SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'},
		'sync'),
	'after the restart the standby is synchronous again');
ok(wait_for_worker($primary), 'the lock server runs');
# y was committed on the primary only: after the wait, it is served (its
# owner can take it again: same token) and it is on the standby
my $ty = scalar_query($primary, q{SELECT lockq_try('y', 'owner-b', '1 hour')});
like($ty, qr/^\d+$/, 'owner-b gets y');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', q{SELECT owner || ':' || token FROM lockq_locks WHERE lock_id = 'y'}),
	"owner-b:$ty", 'and the standby has it');

# --- a hand-off committed while the lock server waits, then terminated ------
# S holds L2 bound to its session; ow waits for it with an owner and a long
# lease (flushed, so its batch waits for the standby).  S releases; the
# batch that ends S's grant and hands L2 to ow commits locally and waits;
# the lock server is terminated there.  The next one must not see S's
# grant current again beside ow's row: it publishes that committed batch
# once the standby has it.
my $s = $primary->background_psql('postgres');
my $ts = $s->query_safe("SELECT lockq_try('L2')");
ok($ts > 0, 'S holds L2, bound to its session');
my $ow = start_waiter($primary, 'ow', q{SELECT 'token:' || lockq_get('L2', 'ow', '1 hour');});
ok(wait_for_waiters($primary, 'L2', 1), 'ow waits for L2 with an owner');
$standby->stop;
is($s->query_safe("SELECT lockq_release('L2')"), 't', 'S releases L2 (at once)');
ok(durable_wait('L2'), 'the lock server waits for the standby to hand L2 to ow');
$w = worker_pid($primary, 'L2');
$log_offset = -s $primary->logfile;
$primary->safe_psql('postgres', "SELECT pg_terminate_backend($w)");
ok(wait_for_worker($primary, $w), 'it is terminated in the wait and a new lock server starts');
ok(durable_wait('L2'), 'the new lock server waits for the standby first');
$standby->start;
like(waiter_result($ow, qr/(token:\d+)/), qr/^token:\d+$/,
	'once the standby is back, ow is answered with its grant');
is(scalar_query($primary, q{SELECT string_agg(owner, ',') FROM lockq_locks WHERE lock_id = 'L2'}),
	'ow', 'L2 has one grant, ow\'s');
ok($primary->log_contains('published the last batch of its predecessor', $log_offset),
	'the new lock server published the batch that had committed');
ok(!$primary->log_contains('two grants', $log_offset), 'never two grants of L2');
like(scalar_query($primary, q{SELECT lockq_try('unrelated', 'u', '1 hour')}), qr/^\d+$/,
	'an unrelated lockq_try is served');
$s->quit;
$ow->quit;

$primary->stop;
$standby->stop;
done_testing();

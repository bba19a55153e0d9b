# A lock on lockq's own tables (LOCK TABLE, an open DROP EXTENSION) never
# stalls the lock server: it takes its table locks without waiting, and
# while it cannot, requests that could write the tables fail with 55P03
# after lockq.table_lock_timeout, waiting lockq_get calls still time out
# and can be cancelled on time, and the log names the relation and the
# process holding it.  Once the lock is gone, everything due happens.
# With several lock servers (the suite's second configuration) each meets
# the table lock with its own requests; the one looked at or terminated is
# that of the case's lock.
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

# Session-bound requests here must reach the lock server (a free lock is
# otherwise granted by the backend itself, without the tables: 012_fast_path): a
# limit of the role's own keeps them there.
my $node = lockq_node('tlocks',
	conf => "lockq.table_lock_timeout = '1s'\nlockq.max_session_locks_per_role = 100000\n");

# timed(sql) runs sql and returns (seconds, stdout, stderr)
sub timed
{
	my ($sql) = @_;
	my $start = time();
	my ($rc, $out, $err) = $node->psql('postgres', "SET statement_timeout = '60s'; $sql");
	return (time() - $start, $out, $err);
}

my $t_held = scalar_query($node, "SELECT lockq_try('held', 'h', '2 seconds')");
my $w = start_waiter($node, 'w-timeout',
	"SELECT lockq_get('held', 'w1', timeout => '3 seconds');");
my $c = start_waiter($node, 'w-cancel', "SELECT lockq_get('held', 'w2');");
ok(wait_for_waiters($node, 'held', 2), 'two waiters queue behind a 2 s lease');
my $cpid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'w-cancel'");

# A session that will end, holding a session-bound grant, while the tables
# are locked; and one whose call will be cancelled after its answer (a
# grant) came: both need the tables to finish, and neither may keep its
# request slot until the table lock is released.
my $gone = $node->background_psql('postgres');
ok($gone->query_safe("SELECT lockq_try('gone')") > 0, 'a session takes a session-bound grant');
my $gone_pid = $gone->query_safe('SELECT pg_backend_pid()');
fault_functions($node);
$node->safe_psql('postgres', "SELECT lockq_fault_arm('call-after-submit', 'wait')");
my $undo = start_waiter($node, 'undo', "SELECT lockq_try('undo1');");
ok(fault_fired($node, 'call-after-submit'), 'a session-bound call stalls after it sent its request');
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM lockq_locks WHERE lock_id = 'undo1'"),
	'which the lock server grants');
my $undo_pid = backend_pid($node, 'undo');

# --- LOCK TABLE lockq.owners ------------------------------------------------
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE lockq.owners IN ACCESS EXCLUSIVE MODE');
my $lpid = $locker->query_safe('SELECT pg_backend_pid()');
my $offset = -s $node->logfile;

my ($secs, $out, $err) = timed("SELECT lockq_try('free1')");
like($err, qr/lockq lock server could not lock its tables within lockq.table_lock_timeout/,
	'a session-bound lockq_try fails with a clear error');
like($err, qr/Relation "lockq.owners" is locked by process $lpid/,
	'naming the relation and the process that holds it');
cmp_ok($secs, '>', 0.9, 'after waiting lockq.table_lock_timeout');
cmp_ok($secs, '<', 8, 'not more');
($secs, $out, $err) = timed("SELECT lockq_try('free2', 'o', '1 minute')");
like($err, qr/could not lock its tables/, 'so does a lockq_try with an owner');
($secs, $out, $err) = timed("SELECT lockq_renew('held', 'h', $t_held)");
like($err, qr/could not lock its tables/, 'and a renewal');

my $free1_pid = worker_pid($node, 'free1');
is( $node->safe_psql('postgres',
		qq{SELECT state || ': ' || query FROM pg_stat_activity WHERE pid = $free1_pid}),
	'active: lockq: waiting for a lock on its tables (see the log)',
	'pg_stat_activity shows the lock server waiting for the table lock');

like(waiter_result($w, qr/(ERROR:.*)/), qr/could not obtain lock "held" within the timeout/,
	'a waiting lockq_get still times out on time');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($cpid)"), 't',
	'a waiting lockq_get is cancelled');
like(waiter_result($c, qr/(ERROR:.*)/), qr/canceling statement due to user request/,
	'and the cancel returns');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_waiters WHERE lock_id = 'held'"),
	'both left the queue while the table was locked');
ok($node->log_contains(
		qr/lockq lock server cannot lock relation "lockq.owners", locked by process $lpid/, $offset),
	'the log names the relation and the process');

# The session that ends: a new session takes the lowest free BackendId,
# which is the one it had, and with it its request slot.  Its calls must
# fail in lockq.table_lock_timeout as every other session's do, not wait for
# the ended session's grants to end (they need the tables).
$gone->quit;
ok(wait_for_exit($gone_pid), 'the session holding a grant ends');
($secs, $out, $err) = timed("SELECT lockq_try('gone2', 'o')");
like($err, qr/could not lock its tables/,
	'the next session\'s call (same slot) gets the same error');
cmp_ok($secs, '<', 8, 'in bounded time, not when the table lock ends');

# The cancelled call: its grant is handed back once the tables are free,
# and the session's next call does not wait for that.
my $start = time();
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($undo_pid)"), 't',
	'the stalled call is cancelled after its answer came');
like(waiter_result($undo, qr/(ERROR:.*)/), qr/canceling statement due to user request/,
	'the cancel returns');
cmp_ok(time() - $start, '<', 5, 'at once, not after the wait for its confirmation');
$start = time();
$undo->{stdin} .= "SELECT lockq_try('undo2', 'o3');\n";
like(waiter_result($undo, qr/(ERROR:.*could not lock its tables.*)/), qr/could not lock its tables/,
	'the session\'s next call gets the same error as any other');
cmp_ok(time() - $start, '<', 8, 'in bounded time');

# The lock server exits before it can hand the grant back: the next one must
# still end it, though its session lives on and never read it.
my $wpid = worker_pid($node, 'undo1');
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)"), 't',
	'the lock server is terminated while the tables are locked');
ok(wait_for_worker($node, $wpid), 'and a new one starts');

$locker->query_safe('COMMIT');
my $unlocked = time();
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'held'"),
	'once the table lock is released, the lease expires');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id IN ('gone', 'undo1')"),
	'the ended session\'s grant ends, and the cancelled call\'s is handed back');
# (a session-bound lease that nobody renews would end only after 30 s)
cmp_ok(time() - $unlocked, '<', 10, 'at once, not when their leases run out');
ok(!$node->log_contains('two grants'), 'never two grants');
ok($node->wait_for_log(qr/lockq lock server can lock its tables again/, $offset),
	'and the log says the lock server works again');
ok( $node->poll_query_until('postgres',
		q{SELECT string_agg(DISTINCT state || ': ' || query, ', ') FROM pg_stat_activity
		   WHERE backend_type = 'lockq lock server'},
		'idle: lockq: waiting for requests'),
	'and pg_stat_activity shows it idle, waiting for requests');
ok(scalar_query($node, "SELECT lockq_try('free1')") > 0, 'requests are served again');

# --- an open DROP EXTENSION ---------------------------------------------------
# Again a call stalls after its answer, this one with an owner; it is
# cancelled while the drop is open, and this lock server, which noted the
# grant to hand back, does so once the drop is rolled back.
$node->safe_psql('postgres',
	"SELECT lockq_fault_disarm('call-after-submit'); SELECT lockq_fault_arm('call-after-submit', 'wait')");
my $undo_l = start_waiter($node, 'undo-l', "SELECT lockq_try('undo3', 'o4', '1 minute');");
ok(fault_fired($node, 'call-after-submit'), 'a call with an owner stalls after it sent its request');
ok(wait_for_holder($node, 'undo3', 'o4'), 'which the lock server grants');
my $undo_l_pid = backend_pid($node, 'undo-l');

$locker->query_safe('BEGIN; DROP EXTENSION lockq');
($secs, $out, $err) = timed("SELECT lockq_try('free3', 'o')");
like($err, qr/could not lock its tables/, 'an open DROP EXTENSION gives the same error');
cmp_ok($secs, '<', 8, 'in bounded time');
$start = time();
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($undo_l_pid)"), 't',
	'the stalled call is cancelled while the drop is open');
like(waiter_result($undo_l, qr/(ERROR:.*)/), qr/canceling statement due to user request/,
	'the cancel returns');
cmp_ok(time() - $start, '<', 5, 'at once');
$locker->query_safe('ROLLBACK');
$unlocked = time();
ok($node->poll_query_until('postgres', "SELECT lockq_try('free3', 'o') IS NOT NULL"),
	'after its rollback the service resumes');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'undo3'"),
	'and the grant the cancelled call never read is handed back');
cmp_ok(time() - $unlocked, '<', 10, 'at once, not when its lease of 1 minute runs out');

$locker->quit;
$w->quit;
$c->quit;
end_session($undo);
end_session($undo_l);
$node->stop;
done_testing();

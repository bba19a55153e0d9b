# Locks bound to their session (owner NULL) live in shared memory: they
# write no WAL, the room for them is lockq.session_locks_per_backend per
# backend (a clear error when it is full), they survive a restart of the
# lock server with their queue, and a hand-off held back by a fenced
# transaction stays held back across that restart.  A transaction fenced on
# one cannot be prepared.
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

my $node = lockq_node('session',
	conf => "autovacuum = off\nlockq.session_locks_per_backend = 1\nmax_prepared_transactions = 2\n");

sub wal_bytes_for
{
	my ($sql) = @_;
	my $before = scalar_query($node, 'SELECT pg_current_wal_insert_lsn()');
	scalar_query($node, $sql);
	return scalar_query($node,
		"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$before')");
}

# --- no WAL ------------------------------------------------------------------
my $n = 2000;
my $session_wal = wal_bytes_for(
	"SELECT count(*) FROM (SELECT lockq_try('s' || i), lockq_release('s' || i) FROM generate_series(1, $n) i) s");
# with a lease over lockq.max_grace, which every crash must keep (shorter
# ones on a busy lock may go without a row: see lockq.grant_row_delay)
my $durable_wal = wal_bytes_for(
	"SELECT count(*) FROM (SELECT lockq_try('d' || i, 'o', '2 minutes'), lockq_release('d' || i, 'o') FROM generate_series(1, $n) i) s");
note "WAL for $n lock/unlock pairs: session-bound $session_wal bytes, with an owner $durable_wal bytes";
cmp_ok($durable_wal, '>', $n * 100, 'grants with an owner are written to WAL');
cmp_ok($session_wal, '<', $durable_wal / 20,
	'session-bound grants are not (only the token and clock ceilings, now and then)');

# --- room ----------------------------------------------------------------------
my $room = scalar_query($node,
	"SELECT current_setting('lockq.session_locks_per_backend')::int *
	        (current_setting('max_connections')::int + current_setting('autovacuum_max_workers')::int + 1 +
	         current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int)");
# one role may take a quarter of the room (lockq.max_session_locks_per_role
# = -1); then 53400, which names the setting
my $quarter = int($room / 4);
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(lockq_try('quarter' || i)) FROM generate_series(1, $room) i");
like($err, qr/this role already holds as many session-bound locks as its limit allows \($quarter\)/,
	"one role gets a quarter of the room ($quarter)");
like($err, qr/lockq.max_session_locks_per_role/, 'the hint names the setting');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'quarter%'"), '0',
	'they ended with the session');
$node->safe_psql('postgres',
	'ALTER SYSTEM SET lockq.max_session_locks_per_role = 1000000; SELECT pg_reload_conf()');
ok($node->poll_query_until('postgres', 'SHOW lockq.max_session_locks_per_role', '1000000'),
	'with lockq.max_session_locks_per_role raised');
my $sess = $node->background_psql('postgres');
my $got = $sess->query_safe(
	"SELECT count(lockq_try('room' || i)) FROM generate_series(1, $room) i");
is($got, $room, "$room session-bound locks fit (1 per backend, shared)");
($ret, $out, $err) = $node->psql('postgres', "SELECT lockq_try('one-more')");
like($err, qr/ERROR:  out of shared memory for session-bound locks/,
	'one more is refused with a clear error');
like($err, qr/HINT:  Increase "lockq.session_locks_per_backend" \(1\), or take the lock with an owner\./,
	'and a hint');
ok(scalar_query($node, "SELECT lockq_try('one-more', 'named-owner')") > 0,
	'a lock with an owner still works');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'room%'"), $room,
	'the locks taken before are untouched');
$sess->query_safe("SELECT lockq_release('room1')");
ok(scalar_query($node, "SELECT lockq_try('one-more-again') IS NOT NULL"),
	'after a release there is room again');
$sess->quit;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'room%'"),
	'the session end freed the rest');

# --- restart of the lock server ------------------------------------------------
my $holder = $node->background_psql('postgres');
my $tok = $holder->query_safe("SELECT lockq_try('R')");
my $w = start_waiter($node, 'r-waiter', "SELECT 'granted:' || lockq_get('R');");
ok(wait_for_waiters($node, 'R', 1), 'a session-bound waiter queues behind a session-bound holder');
my $old = worker_pid($node, 'R');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = " . lock_servers() . " FROM pg_stat_activity WHERE backend_type = 'lockq lock server' AND pid <> $old"),
	'the lock server restarted');
is(scalar_query($node, "SELECT token FROM lockq_locks WHERE lock_id = 'R'"), $tok,
	'the session-bound grant is still there, from shared memory');
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'R'"), '1',
	'and its waiter');
is($holder->query_safe("SELECT lockq_release('R')"), 't', 'the holder releases');
my $next = waiter_result($w, qr/granted:(\d+)/);
ok($next > $tok, 'the waiter is granted');
$w->quit;

# --- a fenced hand-off across a restart ----------------------------------------
my $t2 = $holder->query_safe("SELECT lockq_try('F')");
my $fenced = $node->background_psql('postgres');
$fenced->query_safe('BEGIN');
is($fenced->query_safe("SELECT lockq_holds('F', $t2)"), 't', 'a transaction fences on the grant');
my $w2 = start_waiter($node, 'f-waiter', "SELECT 'granted:' || lockq_get('F');");
ok(wait_for_waiters($node, 'F', 1), 'a waiter queues');
is($holder->query_safe("SELECT lockq_release('F')"), 't', 'the holder releases');
ok($node->poll_query_until('postgres',
		"SELECT deferred_handoffs > 0 FROM lockq_stats"),
	'the hand-off waits for the fenced transaction');
$old = worker_pid($node, 'F');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = " . lock_servers() . " FROM pg_stat_activity WHERE backend_type = 'lockq lock server' AND pid <> $old"),
	'the lock server restarted');
# the waiter must still be waiting: nobody holds F, and the fence is open
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'F'"), '1',
	'after the restart the waiter still waits');
is(scalar_query($node, "SELECT lockq_holds('F', $t2)"), 'f',
	'the released grant is not current');
$fenced->query_safe('COMMIT');
like(waiter_result($w2, qr/(granted:\d+)/), qr/granted/,
	'the fenced transaction ends, the waiter is granted');
$w2->quit;

# --- PREPARE --------------------------------------------------------------------
my $t3 = $holder->query_safe("SELECT lockq_try('P')");
($ret, $out, $err) = $node->psql('postgres',
	"BEGIN; SELECT lockq_holds('P', $t3); PREPARE TRANSACTION 'lq';");
like($err, qr/ERROR:  cannot prepare a transaction that is fenced by lockq_holds/,
	'a transaction fenced on a session-bound lock cannot be prepared');
is(scalar_query($node, 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
is($holder->query_safe("SELECT lockq_release('P')"), 't',
	'and the fence is gone: the release goes through');
my $t4 = scalar_query($node, "SELECT lockq_try('P2', 'owner')");
($ret, $out, $err) = $node->psql('postgres',
	"BEGIN; SELECT lockq_holds('P2', $t4); PREPARE TRANSACTION 'lq2';");
like($err, qr/ERROR:  cannot prepare a transaction that is fenced by lockq_holds/,
	'nor one fenced on a grant with an owner: a fence must end with its session');
is(scalar_query($node, 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
$holder->quit;
$fenced->quit;

$node->stop;
done_testing();

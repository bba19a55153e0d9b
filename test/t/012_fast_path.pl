# Session-bound grants that a backend makes by itself (lockq_fastpath.c):
# a lock nobody holds, waits for or asks for is granted and released
# without the lock server.  Checked:
#  * pairs on free locks cost the lock server no request, also past the
#    token reserve (a fallback raises it now and then);
#  * such a grant is shown (lockq_locks, holders) and fenced as any;
#  * a lockq_get of another session finds it adopted: it queues behind it
#    and gets the lock when the holder releases it (FIFO, higher token);
#  * a fence on it holds the hand-off back after its release;
#  * a request on its way to the lock server keeps the fast path off for
#    its lock: with the lock server stalled, a later lockq_try waits for it
#    and finds the lock taken (fails without the claims);
#  * a request that meets a grant half made finds it whole before it
#    grants: with the grant stalled, the lock server waits for it and
#    answers the lockq_try with another owner NULL;
#  * its lease runs out: lockq_holds false, another session gets the lock,
#    the late release is false;
#  * the end of its session, a lock-server restart and a crash;
#  * a role with a limit of its own takes the normal path.
# With several lock servers (the suite's second configuration) the faults
# are armed for the lock server of the case's lock.
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

my $node = lockq_node('fast', conf => "restart_after_crash = on\n");
fault_functions($node);

sub q1
{
	my ($sql) = @_;
	return scalar_query($node, $sql);
}

sub stats
{
	my ($col) = @_;
	return q1("SELECT $col FROM lockq_stats");
}

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SELECT lockq_holds('none', 1)");
	return $s;
}

# --- pairs on free locks do not reach the lock server ------------------------
# (a lock of each lock server: one that answers has loaded its state and
# opened the fast path for its locks)
for my $k (0 .. lock_servers() - 1)
{
	my $warm = id_of_server($node, $k, 'warm');
	q1("SELECT lockq_release('$warm', NULL, lockq_try('$warm'))");
}
my $r0 = stats('requests');
is(q1(q{SELECT count(*) FROM generate_series(1, 1000) i
		 WHERE lockq_release('f' || i, NULL, lockq_try('f' || i))}), '1000',
	'1,000 session-bound pairs on free locks');
is(stats('requests') - $r0, 0, 'the lock server applied no request for them');
$r0 = stats('requests');
is(q1(q{SELECT count(*) FROM generate_series(1, 10000) i
		 WHERE lockq_release('g' || i, NULL, lockq_try('g' || i))}), '10000',
	'10,000 more, past the token reserve of 4,096');
my $fallbacks = stats('requests') - $r0;
cmp_ok($fallbacks, '>', 0, 'a few went to the lock server, which raised the ceiling');
cmp_ok($fallbacks, '<=', 10, "no more than a few ($fallbacks)");

# --- shown and fenced as any grant -------------------------------------------
my $a = session();
my $apid = $a->query_safe('SELECT pg_backend_pid()');
$r0 = stats('requests');
my $ta = $a->query_safe("SELECT lockq_try('X')");
is(stats('requests') - $r0, 0, 'X is taken on the fast path');
is(q1("SELECT session_pid || ':' || token FROM lockq_locks WHERE lock_id = 'X'"),
	"$apid:$ta", 'lockq_locks shows it, with its session and token');
is(stats('holders'), '1', 'lockq_stats counts it');
is(q1("SELECT lockq_holds('X', $ta)"), 't', 'lockq_holds is true for its token');

# --- no table needed ---------------------------------------------------------------
my $locker = session();
$locker->query_safe('BEGIN; LOCK TABLE lockq.owners, lockq.queue IN ACCESS EXCLUSIVE MODE');
my $tt = q1("SELECT lockq_try('T')");
ok($tt > 0, 'while lockq.owners is locked, a free session-bound lock is granted');
$locker->query_safe('COMMIT');
$locker->quit;

# --- another session queues behind it ------------------------------------------
my $w = start_waiter($node, 'wb', "SELECT 'granted:' || lockq_get('X');");
ok(wait_for_waiters($node, 'X', 1), 'a lockq_get of X from another session waits');
is(q1("SELECT session_pid FROM lockq_locks WHERE lock_id = 'X'"), $apid,
	'X is still held by the session that took it');
is($a->query_safe("SELECT lockq_release('X')"), 't', 'its holder releases it');
my $tb = waiter_result($w, qr/granted:(\d+)/);
ok(defined $tb && $tb > $ta, 'the waiter is granted, with a higher token');
end_session($w);
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'X'"),
	'and its session end frees X');

# --- a fence holds the hand-off back ------------------------------------------
$ta = $a->query_safe("SELECT lockq_try('F')");
my $m = session();
is($m->query_safe("BEGIN; SELECT lockq_holds('F', $ta)"), 't',
	'a transaction fences a grant made on the fast path');
$w = start_waiter($node, 'wf', "SELECT 'granted:' || lockq_get('F');");
ok(wait_for_waiters($node, 'F', 1), 'another session waits for F');
my $d0 = stats('deferred_handoffs');
is($a->query_safe("SELECT lockq_release('F')"), 't', 'the holder releases F');
is(q1("SELECT lockq_holds('F', $ta)"), 'f', 'lockq_holds is false for its token at once');
ok($node->poll_query_until('postgres', "SELECT deferred_handoffs > $d0 FROM lockq_stats"),
	'the hand-off is held back by the fence');
is(q1("SELECT count(*) FROM lockq_locks WHERE lock_id = 'F'"), '0',
	'nobody holds F while the fenced transaction is open');
$m->query_safe('COMMIT');
like(waiter_result($w, qr/(granted:\d+)/), qr/granted/, 'then the waiter gets F');
end_session($w);

# --- a request on its way keeps the fast path off -----------------------------
my $b = session();
my $c = session();
$node->safe_psql('postgres',
	"SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, 'Q') . ")");
my $nudge_id = id_beside($node, 'Q', 'nudge');
my $nudge = start_waiter($node, 'nudge', "SELECT lockq_try('$nudge_id', 'n');");
ok(fault_fired($node, 'batch-start'), 'the lock server is stalled');
$b->{stdin} .= "SELECT 'b:' || lockq_get('Q', 'b');\n";
$b->{run}->pump_nb();
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%lockq_get(''Q'', ''b'')%'"),
	"b's lockq_get of the free lock Q, with an owner, waits for the stalled lock server");
$c->{stdin} .= "SELECT 'c:' || coalesce(lockq_try('Q')::text, 'none');\n";
$c->{run}->pump_nb();
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%lockq_try(''Q'')%'"),
	"c's later lockq_try of Q waits for it too, instead of taking Q by itself");
$a->query_safe("SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
ok(defined waiter_result($b, qr/b:(\d+)/), 'b, first in line, gets Q');
is(waiter_result($c, qr/c:(\w+)/), 'none', 'c does not');
end_session($nudge);
$b->query_safe("SELECT lockq_release('Q', 'b')");

# --- a grant half made when a request meets its lock -------------------------
# a's check of the bucket comes before d's claim; the lock server, looking
# while a's grant is not counted yet, finds the lock free, and must find it
# taken once it goes to grant it (both got a token: 013_reference_model)
ok($node->poll_query_until('postgres', 'SELECT holders = 0 FROM lockq_stats'),
	'nothing is held');
$node->safe_psql('postgres', "SELECT lockq_fault_arm('fast-grant-checked', 'wait')");
my $half = start_waiter($node, 'half', "SELECT 'half:' || lockq_try('H');");
ok(fault_fired($node, 'fast-grant-checked'), "a's grant of the free lock H is half made");
my $d = start_waiter($node, 'd', "SELECT 'd:' || coalesce(lockq_try('H', 'd')::text, 'none');");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'lockq fast path'"),
	"the lock server, applying d's lockq_try of H, waits for a's grant to be whole");
$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('fast-grant-checked')");
my $th = waiter_result($half, qr/half:(\d+)/);
ok(defined $th, 'a gets H');
is(waiter_result($d, qr/d:(\w+)/), 'none', 'd does not');
is(q1("SELECT count(*) || ':' || max(token) FROM lockq_locks WHERE lock_id = 'H'"),
	'1:' . ($th // ''), 'H has one holder, with the token a got');
end_session($_) for ($half, $d);
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'H'"),
	"the end of a's session frees H");
is(q1("SELECT lockq_release('H', 'd', lockq_try('H', 'd'))"), 't', 'then d gets and releases H');

# --- its lease runs out ----------------------------------------------------------
my $te = $a->query_safe("SELECT lockq_try('E', NULL, '1 s')");
ok($node->poll_query_until('postgres', "SELECT NOT lockq_holds('E', $te)"),
	'lockq_holds turns false when the lease of a grant made on the fast path runs out');
ok(q1("SELECT lockq_try('E', 'other')") > $te, 'another owner gets E then');
is($a->query_safe("SELECT lockq_release('E')"), 'f', 'and the late release is false');
q1("SELECT lockq_release('E', 'other')");

# --- the end of its session ----------------------------------------------------------
my $sr0 = stats('session_releases');
$b->query_safe("SELECT lockq_try('S')");
$b->quit;
ok($node->poll_query_until('postgres', "SELECT session_releases > $sr0 FROM lockq_stats"),
	'the lock server ends the grants of a session that ended');
is(q1("SELECT count(*) FROM lockq_locks WHERE lock_id = 'S'"), '0', 'S is free');

# --- a lock server restart keeps it --------------------------------------------------
my $tr = $a->query_safe("SELECT lockq_try('R')");
my $pid = worker_pid($node, 'R');
$node->safe_psql('postgres',
	"SELECT lockq_fault_arm('batch-start', 'fatal'" . at_server($node, 'R') . ")");
$nudge_id = id_beside($node, 'R', 'nudge');
$nudge = start_waiter($node, 'nudge2', "SELECT lockq_try('$nudge_id', 'n');");
ok(fault_fired($node, 'batch-start'), 'the lock server exits');
ok(wait_for_worker($node, $pid), 'its successor runs');
end_session($nudge);
is(q1("SELECT lockq_holds('R', $tr)"), 't', 'the grant made on the fast path still holds');
is(q1("SELECT lockq_try('R', 'other') IS NULL"), 't', 'nobody else gets R');
is($a->query_safe("SELECT lockq_release('R')"), 't', 'its holder releases it');
ok(q1("SELECT lockq_try('R', 'other')") > $tr, 'then another owner gets it');

# --- a role with a limit of its own takes the normal path ---------------------------
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET lockq.max_session_locks_per_role = 1000;
	SELECT pg_reload_conf();});
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.max_session_locks_per_role') = '1000'}),
	'lockq.max_session_locks_per_role is set');
$r0 = stats('requests');
q1("SELECT lockq_release('L', NULL, lockq_try('L'))");
cmp_ok(stats('requests') - $r0, '>=', 1, 'then a session-bound lock goes through the lock server');

# --- a crash: tokens never come back -----------------------------------------------------
my $tc = $a->query_safe("SELECT lockq_try('C')");
crash_restart($node);
end_session($_) for ($a, $c, $m);
wait_for_worker($node);
ok(q1("SELECT lockq_try('C')") > $tc, 'after a crash the next token is above every one made on the fast path');

$node->stop;
done_testing();

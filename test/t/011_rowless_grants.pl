# Leased grants kept without their lockq.owners row (lockq_rules.c,
# lq_grant; lockq_leases.c): a grant whose lock is unsettled with a marker
# that covers its lease and its end gets no row for its first
# lockq.grant_row_delay, since a crash ends it either way.  Here the delay
# is a minute, so that every such grant stays rowless until the test says
# otherwise.  Checked:
#  * the views and lockq_holds show the grant as any other;
#  * lockq_holds fences it: a hand-off waits for the fenced transaction,
#    also after a renewal that the marker no longer covers gave it its row;
#  * a lock server that restarts with shared memory intact keeps it;
#  * a lock server whose last batch ended it (released by its session),
#    handed the lock on and committed, but did not publish, has a successor
#    that loads its state with only the new grant;
#  * its marker settles only after it got its row, and it then survives a
#    crash as any grant of a settled lock;
#  * a clean restart gives it its row and keeps it;
#  * a crash loses it whole: its token never holds again and the lock is
#    delayed;
#  * lockq.grant_row_delay gives it its row once it has been held that
#    long; 0 gives every grant its row at once.
# With several lock servers (the suite's second configuration) the faults
# are armed for the lock server of the case's locks.
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

my $node = lockq_node('rowless', conf => qq{
restart_after_crash = on
track_commit_timestamp = on
lockq.grant_row_delay = '1min'
lockq.fence_timeout = '5min'
});
fault_functions($node);

sub q1
{
	my ($sql) = @_;
	return scalar_query($node, $sql);
}

sub rows
{
	my ($lock) = @_;
	return q1("SELECT count(*) FROM lockq.owners WHERE lock_id = '$lock'");
}

sub rowless
{
	my ($lock) = @_;
	return q1("SELECT count(*) FROM lockq_rowless_grants() WHERE lock_id = '$lock'");
}

# A lock's first release by token makes it unsettled with a fence_ttl
# (flushed); its next grants with a ttl up to lockq.max_grace are covered.
sub covered_grant
{
	my ($lock, $owner) = @_;
	my $t = q1("SELECT lockq_try('$lock', 'first', '30 s')");
	q1("SELECT lockq_release('$lock', 'first', $t)");
	return q1("SELECT lockq_try('$lock', '$owner', '30 s')");
}

sub deferred
{
	return q1('SELECT deferred_handoffs FROM lockq_stats');
}

sub flushed
{
	my $lsn = q1('SELECT pg_current_wal_insert_lsn()');
	return $node->poll_query_until('postgres',
		"SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn");
}

# --- shown as any grant, without a row ----------------------------------
my $t1 = covered_grant('R1', 'a');
is(rows('R1'), '0', 'a covered grant has no row in lockq.owners');
is(rowless('R1'), '1', 'lockq_rowless_grants lists it');
is(q1("SELECT owner || ':' || token FROM lockq_locks WHERE lock_id = 'R1'"), "a:$t1",
	'lockq_locks shows it with its owner and token');
is(q1('SELECT sum(owner_locks) FROM lockq_role_usage'), '1',
	'lockq_role_usage counts it');
is(q1("SELECT lockq_holds('R1', $t1)"), 't', 'lockq_holds is true for its token');

# --- fenced by lockq_holds ------------------------------------------------
my $f = $node->background_psql('postgres');
is($f->query_safe("BEGIN; SELECT lockq_holds('R1', $t1)"), 't',
	'a transaction fences the grant and stays open');
my $w = start_waiter($node, 'w1', "SELECT 'granted:' || lockq_get('R1', 'b', '30 s');");
ok(wait_for_waiters($node, 'R1', 1), 'b waits for R1');
my $d0 = deferred();
is(q1("SELECT lockq_release('R1', 'a', $t1)"), 't', 'a releases R1');
ok($node->poll_query_until('postgres', "SELECT deferred_handoffs > $d0 FROM lockq_stats"),
	'the lock server holds the hand-off back');
is(q1("SELECT count(*) FROM lockq_locks WHERE lock_id = 'R1' AND owner = 'b'"), '0',
	'b is not granted while the fenced transaction is open');
$f->query_safe('COMMIT');
like(waiter_result($w, qr/(granted:\d+)/), qr/granted/,
	'b is granted once it ends');
end_session($w);

# --- a renewal the marker no longer covers: the row, and the fence, stay ---
my $t8 = covered_grant('R8', 'a');
is($f->query_safe("BEGIN; SELECT lockq_holds('R8', $t8)"), 't',
	'a transaction fences a grant without a row');
my $t9 = covered_grant('R9', 'a');
my $g = $node->background_psql('postgres');
my $gpid = $g->query_safe('SELECT pg_backend_pid()');
is($g->query_safe("BEGIN; SELECT lockq_holds('R9', $t9)"), 't',
	'another fences a second one');
$node->append_conf('postgresql.conf', 'lockq.max_grace = 10');
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.max_grace') = '10s'}),
	'lockq.max_grace is now below the grant ttl');
is(q1("SELECT lockq_renew('R8', 'a', $t8)"), 't', 'the grant is renewed');
is(rows('R8'), '1', 'a renewal no marker covers gives it its row');
is(q1("SELECT lockq_renew('R9', 'a', $t9)"), 't', 'so is the second');
$w = start_waiter($node, 'w8', "SELECT 'granted:' || lockq_get('R8', 'b', '30 s');");
ok(wait_for_waiters($node, 'R8', 1), 'b waits for R8');
$d0 = deferred();
is(q1("SELECT lockq_release('R8', 'a', $t8)"), 't', 'a releases R8');
ok($node->poll_query_until('postgres', "SELECT deferred_handoffs > $d0 FROM lockq_stats"),
	'the hand-off waits for the fence taken before the grant had its row');
is(q1("SELECT count(*) FROM lockq_locks WHERE lock_id = 'R8' AND owner = 'b'"), '0',
	'b is not granted while that transaction is open');
$f->query_safe('COMMIT');
like(waiter_result($w, qr/(granted:\d+)/), qr/granted/, 'then b is');
end_session($w);
$f->quit;
# lockq.fence_timeout finds the fence in the entry too
$node->append_conf('postgresql.conf', "lockq.fence_timeout = '1s'");
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.fence_timeout') = '1s'}),
	'lockq.fence_timeout is 1 s');
$w = start_waiter($node, 'w9', "SELECT 'granted:' || lockq_get('R9', 'b', '30 s');");
ok(wait_for_waiters($node, 'R9', 1), 'b waits for R9');
is(q1("SELECT lockq_release('R9', 'a', $t9)"), 't', 'a releases R9');
like(waiter_result($w, qr/(granted:\d+)/), qr/granted/,
	'b is granted after the fence timeout');
ok($node->log_contains(qr/lockq is terminating process $gpid: its transaction has held back the hand-off of lock "R9"/),
	'which ended the transaction fenced on the grant before it had its row');
end_session($w);
end_session($g);
$node->append_conf('postgresql.conf', "lockq.fence_timeout = '5min'");
$node->append_conf('postgresql.conf', 'lockq.max_grace = 60');
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.max_grace') = '1min'}),
	'lockq.max_grace is back to 60 s');

# --- a lock server that restarts with shared memory intact keeps it -------
my $t2 = covered_grant('R2', 'a');
is(rowless('R2'), '1', 'R2 is held without a row');
my $pid = worker_pid($node, 'R2');
my $nudge_id = id_beside($node, 'R2', 'nudge');
q1("SELECT lockq_fault_arm('batch-start', 'fatal'" . at_server($node, 'R2') . ")");
my $nudge = start_waiter($node, 'nudge', "SELECT lockq_try('$nudge_id', 'n');");
ok(fault_fired($node, 'batch-start'), 'the lock server exits');
q1("SELECT lockq_fault_disarm('batch-start')");
ok(wait_for_worker($node, $pid), 'its successor runs');
end_session($nudge);
is(q1("SELECT lockq_holds('R2', $t2)"), 't', 'the grant without a row still holds');
is(q1("SELECT owner FROM lockq_locks WHERE lock_id = 'R2'"), 'a', 'and is shown');
is(q1("SELECT lockq_try('R2', 'c', '30 s') IS NULL"), 't', 'nobody else gets R2');
is(q1("SELECT lockq_release('R2', 'a', $t2)"), 't', 'its holder releases it');
ok(q1("SELECT lockq_try('R2', 'c', '30 s')") > $t2, 'then c gets R2');

# --- released, handed on, and committed by a lock server that then exits ---
# The lock server's last batch ends a grant without a row that its session
# released by itself, hands the lock to a session-bound waiter and commits,
# and the lock server exits before it publishes that batch (the torture
# test found this: its successor, which publishes the batch, then met both
# grants of the lock as it loaded its state, and failed to load it again and
# again).  The first release of another lock in the same batch, which makes
# that lock unsettled (a row, flushed), gives the batch a transaction to
# commit.
my $t10 = covered_grant('R10', 'a');
is(rowless('R10'), '1', 'R10 is held without a row');
my $x = id_beside($node, 'R10', 'X10');
my $x10 = q1("SELECT lockq_try('$x', 'x', '30 s')");
is(rows($x), '1', 'X10 is held, with a row, for the first time');
my $sb = start_waiter($node, 'sb', "SELECT 'sb:' || (lockq_get('R10') IS NOT NULL);");
ok(wait_for_waiters($node, 'R10', 1), 'a session-bound waiter queues for R10');
$pid = worker_pid($node, 'R10');
$nudge_id = id_beside($node, 'R10', 'nudge');
q1("SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, 'R10') . ")");
my $stall = start_waiter($node, 'stall', "SELECT lockq_try('$nudge_id', 'n');");
ok(fault_fired($node, 'batch-start'), 'the lock server is stalled');
my $rx = start_waiter($node, 'rx', "SELECT 'rx:' || lockq_release('$x', 'x', $x10);");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'rx' AND wait_event_type = 'Extension'"),
	'the release of X10 waits for the lock server');
is(q1("SELECT lockq_release('R10', 'a', $t10)"), 't', 'a releases R10, answered at once');
# the stalled batch commits first (skipped), the next one is the releases'
my $log_offset = -s $node->logfile;
q1("SELECT lockq_fault_arm('batch-after-commit', 'fatal', 0, 1" . at_server($node, 'R10') . ")");
q1("SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
ok(fault_fired($node, 'batch-after-commit'), 'the lock server exits after the commit of that batch');
q1("SELECT lockq_fault_disarm('batch-after-commit')");
ok(wait_for_worker($node, $pid), 'its successor loads its state and runs');
ok($node->log_contains('published the last batch of its predecessor, which had committed', $log_offset),
	'it published the batch its predecessor had committed');
is(waiter_result($sb, qr/sb:(\w+)/), 'true', 'the waiter has R10');
is(waiter_result($rx, qr/rx:(\w+)/), 'true', 'x released X10');
is(q1("SELECT count(*) FROM lockq_locks WHERE lock_id = 'R10'"), '1', 'R10 has one holder');
is(q1("SELECT owner <> 'a' AND token > $t10 FROM lockq_locks WHERE lock_id = 'R10'"), 't',
	"the waiter's, not a's");
is(q1("SELECT lockq_holds('R10', $t10)"), 'f', "a's released grant holds no more");
is(rowless('R10'), '0', 'and has no entry left');
is(q1("SELECT lockq_try('R10', 'c', '30 s') IS NULL"), 't', 'nobody else gets R10');
end_session($_) for ($sb, $rx, $stall);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'R10'"),
	'R10 is free once its session ended');

# --- its marker settles only after it got its row --------------------------
my $t3 = covered_grant('R3', 'a');
is(rowless('R3'), '1', 'R3 is held without a row');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq.unsettled WHERE lock_id = 'R3'"),
	'R3 settles a few seconds after its last change');
is(rows('R3'), '1', 'by then the grant has its row');
is(rowless('R3'), '0', 'and no longer counts as rowless');
ok(flushed(), 'the row and the settling have reached the disk');

# --- a crash: R3 survives (settled), a grant without a row is lost whole ----
my $t5 = covered_grant('R5', 'a');
is(rowless('R5'), '1', 'R5 is held without a row');
ok(flushed(), 'its marker has reached the disk');
crash_restart($node);
wait_for_worker($node);
is(q1("SELECT lockq_holds('R3', $t3)"), 't',
	'after a crash the grant that got its row holds, as on any settled lock');
is(q1("SELECT lockq_holds('R5', $t5)"), 'f', 'the grant without a row does not');
is(q1("SELECT lockq_renew('R5', 'a', $t5)"), 'f', 'and cannot be renewed');
is(rows('R5'), '0', 'nothing of it is left in lockq.owners');
is(q1("SELECT lockq_try('R5', 'c', '30 s') IS NULL"), 't',
	'R5 is delayed: its lost lease may still be counted on');
ok($node->log_contains(qr/LOG:  lockq delays \d+ locks? until every lease that may have been lost.*\n.*DETAIL:  Locks: .*R5/),
	'the log names R5 among the delayed locks');
ok($node->poll_query_until('postgres', "SELECT lockq_try('R5', 'c', '30 s') IS NOT NULL"),
	'R5 is granted once the delay ends');
ok(q1("SELECT token FROM lockq_locks WHERE lock_id = 'R5'") > $t5,
	'with a token above the lost one');

# --- a clean restart gives it its row and keeps it -------------------------
my $t4 = covered_grant('R4', 'a');
is(rowless('R4'), '1', 'R4 is held without a row');
$node->restart;
wait_for_worker($node);
is(rows('R4'), '1', 'after a clean restart it has its row');
is(q1("SELECT lockq_holds('R4', $t4)"), 't', 'and holds');

# --- lockq.grant_row_delay ---------------------------------------------------
$node->append_conf('postgresql.conf', "lockq.grant_row_delay = '300ms'");
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.grant_row_delay') = '300ms'}),
	'lockq.grant_row_delay is 300 ms');
my $t0 = time();
my $t6 = covered_grant('R6', 'a');
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM lockq.owners WHERE lock_id = 'R6' AND token = $t6"),
	'a grant without a row gets it once held that long');
is(rowless('R6'), '0', 'and is then listed as an ordinary grant');
is(q1("SELECT pg_xact_commit_timestamp(xmin) >= to_timestamp($t0) + '300 ms' FROM lockq.owners WHERE lock_id = 'R6'"),
	't', 'not before: the row was committed 300 ms or more after the grant');
$node->append_conf('postgresql.conf', 'lockq.grant_row_delay = 0');
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('lockq.grant_row_delay') = '0'}),
	'lockq.grant_row_delay is 0');
covered_grant('R7', 'a');
is(rows('R7'), '1', 'with 0, a covered grant has its row at once');

$node->stop;
done_testing();

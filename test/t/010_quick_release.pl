# The quick release of a leased grant (lockq_leases.c): a session releases
# a grant with an owner by itself, without waiting for the lock server,
# when a crash could not undo the release (its lock is unsettled with a
# fence_ttl that covers the grant).  The release is the mark in shared
# memory; the lock server applies it in its turn.  Checked with the lock
# server stalled, so that the moment between the answer and the lock
# server's write is held open:
#  * the release is answered, lockq_holds is false and the views no
#    longer show the grant, while lockq.owners still has its row;
#  * a crash in that moment does not bring the grant back (I1), and the
#    lock is delayed rather than handed to someone else at once (I2);
#  * a lock server that exits in that moment leaves nothing held: its
#    successor ends the grant;
#  * the lock does not settle while a release marked by a session waits to
#    be queued (else a crash would revive the grant);
#  * the first release of a lock (which makes it unsettled with a fence_ttl)
#    and the release of a lease longer than lockq.max_grace wait for the
#    lock server;
#  * a lockq_locks query whose snapshot still sees the row, and which reads
#    the released grants only after the lock server has applied the release
#    and taken the grant out of its table (fault point
#    released-tokens-read), leaves the grant out (fails if the table forgets
#    the grants it took out at once).
# With several lock servers (the suite's second configuration) the one
# stalled is that of the case's locks.
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

my $node = lockq_node('quick', conf => "restart_after_crash = on\n");
fault_functions($node);

# While the lock server is stalled, a new session cannot start using lockq
# (its slot may wait for the lock server to free it after the session that
# had it): the checks run in a session that is set up before.
my $s;

sub session
{
	$s = $node->background_psql('postgres');
	$s->query_safe("SELECT lockq_holds('none', 1)");
	return;
}

sub sq
{
	my ($sql) = @_;
	my $out = $s->query_safe($sql);
	chomp $out;
	return $out;
}

# stall_lock_server(lock): the lock server of lock (with several, the
# suite's second configuration, the others run on) stalls at its next batch.
sub stall_lock_server
{
	my ($lock) = @_;
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, $lock) . ")");
	# a request of its own makes the lock server start a batch, and stall
	my $id = id_beside($node, $lock, 'nudge');
	my $nudge = start_waiter($node, 'nudge', "SELECT lockq_try('$id', 'n');");
	ok(fault_fired($node, 'batch-start'), 'the lock server is stalled');
	return $nudge;
}

sub resume_lock_server
{
	my ($nudge) = @_;
	sq("SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
	end_session($nudge);
	return;
}

sub owners_rows
{
	my ($lock) = @_;
	return scalar_query($node, "SELECT count(*) FROM lockq.owners WHERE lock_id = '$lock'");
}

# A lock's first release by token takes the normal path: it makes the lock
# unsettled with a fence_ttl, flushed (lockq_durability.c).  Releases of the
# lock's next grants may then be quick.
sub changed_hands
{
	my ($lock) = @_;
	my $t = scalar_query($node, "SELECT lockq_try('$lock', 'first', '30 s')");
	scalar_query($node, "SELECT lockq_release('$lock', 'first', $t)");
	return;
}

# --- answered while the lock server is stalled --------------------------
session();
changed_hands('Q1');
my $t1 = sq("SELECT lockq_try('Q1', 'a', '30 s')");
# its marker covers it, so it gets its row only once held for 100 ms: a
# grant the crash below must end, not one it takes whole
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM lockq.owners WHERE lock_id = 'Q1'"),
	'the grant has its row');
my $nudge = stall_lock_server('Q1');
my $t0 = time();
is(sq("SET statement_timeout = '5s'; SELECT lockq_release('Q1', 'a', $t1)"),
	't', 'the release of a 30 s lease is answered while the lock server is stalled');
note sprintf('answered in %.1f ms', (time() - $t0) * 1000);
is(sq("SELECT lockq_holds('Q1', $t1)"), 'f', 'lockq_holds is false at once');
is(sq("SELECT count(*) FROM lockq_locks WHERE lock_id = 'Q1'"), '0',
	'lockq_locks no longer shows the grant');
is(sq("SELECT coalesce(sum(owner_locks), 0) FROM lockq_role_usage"), '0',
	'nor does lockq_role_usage count it');
is(sq("SELECT count(*) FROM lockq.owners WHERE lock_id = 'Q1'"), '1', 'while lockq.owners still has its row: the lock server has not applied it');
is(sq("SELECT count(*) FROM lockq.unsettled WHERE lock_id = 'Q1' AND fence_ttl >= 30000000"),
	'1', 'its lock is unsettled with a fence_ttl that covers the grant');

# --- a crash now: the grant does not come back, the lock waits -----------
crash_restart($node);
end_session($nudge);
end_session($s);
wait_for_worker($node);
is(scalar_query($node, "SELECT lockq_holds('Q1', $t1)"), 'f',
	'after the crash the released grant does not hold');
is(scalar_query($node, "SELECT lockq_renew('Q1', 'a', $t1)"), 'f', 'and cannot be renewed');
is(owners_rows('Q1'), '0', 'recovery ended it');
is(scalar_query($node, "SELECT lockq_try('Q1', 'b', '30 s') IS NULL"), 't',
	'the lock is delayed: nobody gets it before the lease the crash may have cut could have ended');

# --- the lock server exits before the release it applied commits --------
session();
changed_hands('Q2');
my $t2 = sq("SELECT lockq_try('Q2', 'a', '30 s')");
my $pid = worker_pid($node, 'Q2');
$nudge = stall_lock_server('Q2');
is(sq("SELECT lockq_release('Q2', 'a', $t2)"), 't',
	'Q2 is released while the lock server is stalled');
sq("SELECT lockq_fault_arm('batch-before-commit', 'fatal'" . at_server($node, 'Q2') . "); "
	  . "SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
ok(fault_fired($node, 'batch-before-commit'),
	'the batch that applied the release fails before its commit: the lock server exits');
end_session($nudge);
$s->quit;
wait_for_worker($node, $pid);
$t0 = time();
ok($node->poll_query_until('postgres', "SELECT lockq_try('Q2', 'b', '30 s') IS NOT NULL"),
	'its successor ends the grant: another owner gets the lock');
cmp_ok(time() - $t0, '<', 25, 'long before the 30 s lease would have ended');
is(scalar_query($node, "SELECT lockq_holds('Q2', $t2)"), 'f', 'the released grant does not hold');

# --- the lock does not settle under a release not yet queued -------------
changed_hands('Q3');
my $t3 = scalar_query($node, "SELECT lockq_try('Q3', 'a', '30 s')");
$node->safe_psql('postgres',
	"SELECT lockq_fault_arm('quick-release-before-queue', 'wait')");
my $rel = start_waiter($node, 'rel', "SELECT lockq_release('Q3', 'a', $t3);");
ok(fault_fired($node, 'quick-release-before-queue'),
	'a session has marked the grant released and stalls before queueing the release');
is(scalar_query($node, "SELECT lockq_holds('Q3', $t3)"), 'f', 'the mark is the release');
# a lock changed after Q3 was: once it settles, Q3 could have too
changed_hands('C3');
my $tc = scalar_query($node, "SELECT lockq_try('C3', 'c', '30 s')");
is(scalar_query($node, "SELECT lockq_release('C3', 'c', $tc)"), 't', 'C3 taken and released');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq.unsettled WHERE lock_id = 'C3'"),
	'C3 settles, 2 s after its release');
is(scalar_query($node, "SELECT count(*) FROM lockq.unsettled WHERE lock_id = 'Q3'"), '1',
	'Q3 has not settled: a release marked in shared memory relies on it');
crash_restart($node);
end_session($rel);
wait_for_worker($node);
is(scalar_query($node, "SELECT lockq_holds('Q3', $t3)"), 'f',
	'after a crash the grant released before it stays released');

# --- a first release, and a long lease, are released the normal way -------
session();
my $q5 = id_beside($node, 'Q4', 'Q5');
my %t = (Q4 => sq("SELECT lockq_try('Q4', 'a', '2 minutes')"),
	$q5 => sq("SELECT lockq_try('$q5', 'a', '30 s')"));
$nudge = stall_lock_server('Q4');
my %rel;
for my $lock (sort keys %t)
{
	$rel{$lock} = start_waiter($node, "rel$lock",
		"SELECT 'released:' || lockq_release('$lock', 'a', $t{$lock});");
}
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name IN ('relQ4', 'rel$q5') AND wait_event_type = 'Extension'"),
	'the releases of a 2-minute lease and of a fresh lock wait for the stalled lock server');
is(sq("SELECT lockq_holds('Q4', $t{Q4})"), 't', 'meanwhile the 2-minute grant holds');
is(sq("SELECT lockq_holds('$q5', $t{$q5})"), 't', 'and so does the fresh one');
resume_lock_server($nudge);
$s->quit;
for my $lock (sort keys %t)
{
	is(waiter_result($rel{$lock}, qr/released:(\w)/), 't',
		"once the lock server runs, $lock is released");
	end_session($rel{$lock});
	is(scalar_query($node, "SELECT lockq_holds('$lock', $t{$lock})"), 'f',
		"and no longer holds");
	is(owners_rows($lock), '0', 'its row is gone');
}

# --- a view read across the lock server's write ---------------------------
# lockq_locks reads lockq.owners under its statement's snapshot and the
# released grants from shared memory after that; when the lock server
# applies the release in between (deletes the row, takes the grant out of
# the table), the view must still leave the grant out.
session();
changed_hands('Q6');
my $t6 = sq("SELECT lockq_try('Q6', 'a', '30 s')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM lockq.owners WHERE lock_id = 'Q6'"),
	'Q6 has its row');
$nudge = stall_lock_server('Q6');
is(sq("SELECT lockq_release('Q6', 'a', $t6)"), 't', 'Q6 is released while the lock server is stalled');
sq("SELECT lockq_fault_arm('released-tokens-read', 'wait')");
my $view = start_waiter($node, 'view',
	"SELECT 'shown:' || count(*) FROM lockq_locks WHERE lock_id = 'Q6';");
ok(fault_fired($node, 'released-tokens-read'),
	'a lockq_locks query has its snapshot, which sees the row, and stalls before it reads the released grants');
resume_lock_server($nudge);
my $after = id_beside($node, 'Q6', 'after-Q6');
ok($node->poll_query_until('postgres', "SELECT lockq_try('$after', 'x', '30 s') IS NOT NULL"),
	'the lock server has applied the release and published its batch');
is(owners_rows('Q6'), '0', 'the row is gone');
$s->query_safe("SELECT lockq_fault_wakeup('released-tokens-read'); SELECT lockq_fault_disarm('released-tokens-read')");
is(waiter_result($view, qr/shown:(\d+)/), '0',
	'the query still leaves the released grant out');
end_session($view);
$s->quit;

$node->stop;
done_testing();

# Waking the backends a batch answered (lq_shmem_wakes_hand_on): the lock server
# wakes the first itself and leaves the others to be woken by the backends
# it woke, two each.  Checked:
#  * 30 lockq_get calls answered in one batch all return;
#  * when the first backend woken stalls before it passes the wake-ups on
#    (fault point wakes-pass), the others still return: the lock server
#    wakes what is left, at its next batch or before it sleeps (fails if
#    it does not);
#  * the stalled one returns with its grant once it goes on.
# With several lock servers (the suite's second configuration) every lock
# of a round is lock server 0's, and the faults are armed for it.
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

my $n = 30;
my $node = lockq_node('wakes');
fault_functions($node);

# idle(tag, want): polls until want of the round's sessions, its nudge
# among them, have finished their statement (state idle in
# pg_stat_activity).
sub idle
{
	my ($tag, $want) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = $want FROM pg_stat_activity WHERE application_name ~ '^(${tag}[0-9]+|nudge${tag})\$' AND state = 'idle'");
}

# the lock ids of a round: lock server 0's (id_of_server)
my %ids;
sub lock_of
{
	my ($tag, $i) = @_;
	$ids{"$tag$i"} //= id_of_server($node, 0, "$tag$i-");
	return $ids{"$tag$i"};
}

# tokens(sessions, tag): how many sessions printed their token.
sub tokens
{
	my ($sessions, $tag) = @_;
	my $count = 0;
	foreach my $i (0 .. $#$sessions)
	{
		$count++ if defined waiter_result($sessions->[$i], qr/$tag$i:(\d+)/);
	}
	return $count;
}

# round(tag): the lock server is stalled; n sessions each send a lockq_get
# of a lock of their own, with an owner (so that it goes to the lock
# server); returns the sessions once all of them wait.  The next batch
# answers all n.
sub round
{
	my ($tag) = @_;
	my $nudge_id = lock_of('nudge', $tag);
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, $nudge_id) . ")");
	my $nudge = start_waiter($node, "nudge$tag", "SELECT lockq_try('$nudge_id', 'n');");
	ok(fault_fired($node, 'batch-start'), "$tag: the lock server is stalled");
	my @s;
	foreach my $i (0 .. $n - 1)
	{
		my $id = lock_of($tag, $i);
		push @s, start_waiter($node, "$tag$i",
			"SELECT '$tag$i:' || lockq_get('$id', 'o$i', '1 min');");
	}
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = $n FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND application_name LIKE '$tag%' AND application_name <> 'nudge$tag'"),
		"$tag: $n lockq_get calls wait for the stalled lock server");
	cmp_ok(scalar_query($node, 'SELECT queued_requests FROM lockq_lock_servers WHERE server = 0'),
		'>=', $n, "$tag: lockq_lock_servers shows them waiting in its ring");
	return ($nudge, @s);
}

# --- all answered in one batch return -----------------------------------------
my ($nudge_a, @a) = round('a');
my $batches = 'SELECT batches FROM lockq_lock_servers WHERE server = 0';
my $b0 = scalar_query($node, $batches);
$node->safe_psql('postgres',
	"SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
ok(idle('a', $n + 1), "all $n return (and the nudge)");
is(tokens(\@a, 'a'), $n, 'each with its grant');
cmp_ok(scalar_query($node, $batches) - $b0, '<=', 3,
	'answered in a batch or two (a session passes the wake-ups on)');
end_session($_) foreach ($nudge_a, @a);

# --- the first backend woken stalls before it passes them on ------------------
my ($nudge_b, @b) = round('b');
# The lock server sleeps 2 s after each publish, so that the first backend
# it wakes reaches the fault point before the lock server, going to sleep,
# wakes the others itself.  The nudge may be answered in the same batch as
# the 30 (when the lock server took them before its stall): then it may be
# the one that stalls, and all 30 return.  Either way, all of the 31 but
# the stalled one must return.
$node->safe_psql('postgres',
	"SELECT lockq_fault_arm('wakes-pass', 'wait', 0, 0, 1); "
	  . "SELECT lockq_fault_arm('batch-after-publish', 'sleep', 2000, 0, -1"
	  . at_server($node, lock_of('nudge', 'b')) . "); "
	  . "SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
ok(fault_fired($node, 'wakes-pass'), 'a woken backend stalls before it passes the wake-ups on');
ok(idle('b', $n),
	'the others return all the same: the lock server wakes them');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'b%'"),
	$n, "all $n hold their lock");
$node->safe_psql('postgres',
	"SELECT lockq_fault_disarm('batch-after-publish'); SELECT lockq_fault_wakeup('wakes-pass')");
ok(idle('b', $n + 1), 'the stalled one returns too, once it goes on');
is(tokens(\@b, 'b'), $n, 'each with its grant');
end_session($_) foreach ($nudge_b, @b);

$node->stop;
done_testing();

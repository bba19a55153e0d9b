# The lock server under faults that leave shared memory in place:
#   - a renewal in flight while the lock server restarts must not revive a
#     lease that ended meanwhile (timers run before requests in flight);
#   - database settings made by the database's owner (read-only or
#     serializable transactions, a role) do not reach the lock server;
#   - a lock server that cannot load its state answers requests with the
#     error instead of leaving them waiting;
#   - the extension dropped while a quick release is queued: the release is
#     dropped cleanly, the slot stays usable;
#   - a request answered while the lock server rebuilt its state leaves a
#     stale entry in the arrival ring; the session's quick release and next
#     request, made before that entry is handled, are applied in their
#     order (the next lockq_get gets a new grant, not the ended one).
#
# With several lock servers (the suite's second configuration) each fault
# is armed for the lock server of the case's lock.
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
# otherwise granted by the backend itself, lockq_fastpath.c, even while
# the lock server restarts): a limit of the role's own keeps them there.
my $node = lockq_node('wfaults',
	conf => "lockq.max_session_locks_per_role = 100000\n");
fault_functions($node);

# --- a renewal in flight across a lock-server restart ----------------------
{
	my $t = scalar_query($node, "SELECT lockq_try('r10', 'o10', '1 second')");
	ok($t > 0, 'a 1 s lease is granted');
	# the next lock server stalls 2.5 s before it loads anything
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('recover-start', 'sleep', 2500"
		  . at_server($node, 'r10') . ")");
	my $old = worker_pid($node, 'r10');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my $r = start_waiter($node, 'renewer',
		"SELECT 'renewed:' || lockq_renew('r10', 'o10', $t, '1 hour');");
	ok(fault_fired($node, 'recover-start'), 'the new lock server stalls before loading');
	is(scalar_query($node, "SELECT lockq_holds('r10', $t)"), 'f',
		'meanwhile the lease ends (lockq_holds is false)');
	is(waiter_result($r, qr/(renewed:[tf])/), 'renewed:f',
		'the renewal sent before the end, applied after it, fails');
	is(scalar_query($node, "SELECT lockq_holds('r10', $t)"), 'f',
		'the lease stays ended');
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'r10'"), '0',
		'and the lock is free');
	$r->quit;
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('recover-start')");
}

# --- database settings do not reach the lock server -------------------------
{
	$node->safe_psql('postgres', q{
		CREATE ROLE dbo LOGIN;
		CREATE ROLE plain NOLOGIN;
		GRANT plain TO dbo;
		ALTER DATABASE postgres OWNER TO dbo;});
	# what a database owner may do to every session of its database
	$node->safe_psql('postgres', q{
		SET ROLE dbo;
		ALTER DATABASE postgres SET default_transaction_read_only = on;
		ALTER DATABASE postgres SET default_transaction_isolation = 'serializable';
		ALTER DATABASE postgres SET role = 'plain';
		ALTER DATABASE postgres SET search_path = 'nowhere';
		ALTER DATABASE postgres SET lock_timeout = '1ms';
		ALTER DATABASE postgres SET statement_timeout = '1ms';});
	$node->restart;
	# our own sessions override the database's settings at connection
	local $ENV{PGOPTIONS} = '-c statement_timeout=60s -c lock_timeout=0 '
	  . '-c search_path=public,lockq -c default_transaction_read_only=off -c role=none';
	my $start = time();
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT lockq_try('db8', 'o8', '1 hour');");
	like($out, qr/^\d+$/, 'a grant with an owner is made and written under those settings')
	  or diag($err);
	cmp_ok(time() - $start, '<', 30, 'promptly');
	is($node->safe_psql('postgres',
			"SELECT owner FROM lockq_locks WHERE lock_id = 'db8'"),
		'o8', 'the grant is in the table');
	ok(!$node->log_contains('cannot execute .* in a read-only transaction'),
		'the lock server never ran read-only');
	$node->safe_psql('postgres', q{
		ALTER DATABASE postgres RESET ALL;
		ALTER DATABASE postgres OWNER TO CURRENT_USER;});
}

# --- a state that cannot be loaded: requests get the error -----------------
{
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('recover-start', 'error', 0, 0, -1"
		  . at_server($node, 'e8') . ")");
	my $old = worker_pid($node, 'e8');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(fault_fired($node, 'recover-start'), 'the restarted lock server cannot load its state');
	my $start = time();
	my ($rc, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '60s'; SELECT lockq_try('e8', 'o')");
	like($err, qr/lockq lock server could not load its state: lockq fault injection/,
		'a request gets the error')
	  or diag("rc $rc out $out err $err");
	cmp_ok(time() - $start, '<', 10, 'within seconds, not when loading finally works');
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('recover-start')");
	$node->poll_query_until('postgres', "SELECT lockq_try('e8', 'o') IS NOT NULL")
	  or fail('the service resumes once the state loads');
	pass('the service resumes once the state loads');
}

# --- the extension dropped while a quick release is queued -----------------
{
	my $s = $node->background_psql('postgres');
	my $t = $s->query_safe("SELECT lockq_try('q6')");
	ok($t > 0, 'a session-bound lock is held');
	# the lock server stalls at its next batch, so the release stays queued
	# (its lock server: the nudge goes to the same one)
	my $nudge_id = id_beside($node, 'q6', 'nudge');
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, 'q6') . ")");
	my $nudge = start_waiter($node, 'nudge', "SELECT lockq_try('$nudge_id', 'o', '1 second');");
	ok(fault_fired($node, 'batch-start'), 'the lock server is stalled');
	is($s->query_safe("SELECT lockq_release('q6')"), 't',
		'the holder releases at once (a quick release, queued for the lock server)');
	$node->safe_psql('postgres', 'DROP EXTENSION lockq');
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('batch-start')");
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('batch-start')");
	like(waiter_result($nudge, qr/(ERROR:.*)/), qr/lockq is not installed|does not exist/,
		'the request in flight when the extension was dropped gets an error');
	$nudge->quit;
	$node->safe_psql('postgres', 'CREATE EXTENSION lockq');
	ok($node->poll_query_until('postgres', "SELECT lockq_try('after-drop', 'o') IS NOT NULL"),
		'the service works in the new installation');
	my $t2 = $s->query_safe("SELECT lockq_try('q6')");
	ok($t2 > $t, 'the session that released can lock again');
	is($s->query_safe("SELECT lockq_release('q6')"), 't', 'and release again');
	$s->quit;
	ok(!$node->log_contains('stuck spinlock|PANIC|out of range'),
		'no stray shared-memory access');
}

# --- a stale ring entry, a quick release, and the next request --------------
{
	# the next lock server waits before it loads its state: a lockq_get sent
	# meanwhile is answered from the slots in flight, its ring entry stays
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('recover-start', 'wait'" . at_server($node, 'stale') . ")");
	my $old = worker_pid($node, 'stale');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(fault_fired($node, 'recover-start'), 'the new lock server waits before loading');
	my $s = start_waiter($node, 'stale', "SELECT 'first:' || lockq_get('stale', NULL, '1 min');");
	ok( $node->poll_query_until('postgres',
			q{SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE application_name = 'stale'}),
		'a lockq_get waits for it');
	# its first batch, which has that entry, waits too
	$node->safe_psql('postgres',
		"SELECT lockq_fault_arm('batch-start', 'wait'" . at_server($node, 'stale') . ")");
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('recover-start')");
	my $t1 = waiter_result($s, qr/first:(\d+)/);
	ok($t1 > 0, 'the lockq_get is granted while the state is rebuilt');
	ok(fault_fired($node, 'batch-start'), 'the next batch holds the stale entry');
	# meanwhile the session releases (quickly: no answer needed) and asks again
	$s->{stdout} = '';
	$s->{stdin} .= "SELECT 'released:' || lockq_release('stale');\n"
	  . "SELECT 'second:' || lockq_get('stale', NULL, '1 min');\n";
	$s->{run}->pump_nb();
	is(waiter_result($s, qr/(released:[tf])/), 'released:t', 'the session releases the lock');
	ok( $node->poll_query_until('postgres',
			q{SELECT wait_event_type = 'Extension' AND query LIKE '%second%'
			    FROM pg_stat_activity WHERE application_name = 'stale'}),
		'and asks for it again');
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('batch-start')");
	my $t2 = waiter_result($s, qr/second:(\d+)/);
	cmp_ok($t2, '>', $t1, 'the second lockq_get gets a new grant, not the released one');
	is(scalar_query($node, "SELECT lockq_holds('stale', $t1)::text || lockq_holds('stale', $t2)::text"),
		'falsetrue', 'the released grant stays ended; the new one holds');
	$s->quit;
	$node->safe_psql('postgres', 'SELECT lockq_fault_disarm()');
}

$node->stop;
done_testing();

# Fences (lockq_holds) by role, and their bound:
#   - a role fences only its own grants (or any, as lockq_admin): another
#     role's lockq_holds answers true or false but holds no hand-off back;
#   - a fence holds a hand-off back at most lockq.fence_timeout past the
#     grant's end: then the fencing session is terminated, so its write
#     never commits, and the lock passes on;
#   - a fenced transaction cannot be prepared (a fence must end with its
#     session);
#   - hand-offs held back cost the lock server nothing while nothing
#     changes: no retries every 50 ms.
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

my $node = lockq_node('fences',
	conf => "lockq.fence_timeout = '1s'\nmax_prepared_transactions = 5\n");
$node->safe_psql('postgres', q{
	CREATE ROLE role_a LOGIN; CREATE ROLE role_b LOGIN; CREATE ROLE role_m LOGIN;
	CREATE TABLE fenced_writes (lock_id text, by text);
	GRANT ALL ON fenced_writes TO PUBLIC;});

sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', $role ]);
}

sub session
{
	my ($role) = @_;
	return $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role ]);
}

# --- another role cannot hold a hand-off back ----------------------------------
my $ta = as('role_a', "SELECT lockq_try('L', 'a', '1 hour')");
my $wb = start_waiter($node, 'b-waits', "SET ROLE role_b; SELECT 'granted:' || lockq_get('L', 'b', '1 hour');");
ok(wait_for_waiters($node, 'L', 1), 'role_b waits for L');
my $m = session('role_m');
is($m->query_safe("BEGIN; SELECT lockq_holds('L', $ta)"), 't',
	"role_m learns that role_a's grant is current");
my $t0 = time();
is(as('role_a', "SELECT lockq_release('L', 'a', $ta)"), 't', 'role_a releases L');
like(waiter_result($wb, qr/(granted:\d+)/), qr/granted/,
	"role_b is granted at once: role_m's open transaction holds nothing back");
cmp_ok(time() - $t0, '<', 0.9, 'well within lockq.fence_timeout');
is(scalar_query($node, 'SELECT deferred_handoffs FROM lockq_stats'), '0',
	'no hand-off was deferred');
$m->query_safe('COMMIT');
$wb->quit;

# the same for a session-bound grant of role_a
my $sa = session('role_a');
my $ts = $sa->query_safe("SELECT lockq_try('S')");
is($m->query_safe("BEGIN; SELECT lockq_holds('S', $ts)"), 't',
	"role_m learns that role_a's session-bound grant is current");
is($sa->query_safe("SELECT lockq_release('S')"), 't', 'role_a releases it');
ok(as('role_b', "SELECT lockq_try('S', 'b2', '1 minute')") > $ts,
	'and role_b takes it at once');
$m->query_safe('COMMIT');

# --- a role's own fence: bounded by lockq.fence_timeout -------------------------
my $t2 = as('role_a', "SELECT lockq_try('F', 'a', '1 hour')");
my $f = session('role_a');
is($f->query_safe("BEGIN; SELECT lockq_holds('F', $t2)"), 't',
	"role_a fences its own grant in a transaction, and leaves it open");
my $fpid = $f->query_safe('SELECT pg_backend_pid()');
$f->query_safe("INSERT INTO fenced_writes VALUES ('F', 'late')");
my $wb2 = start_waiter($node, 'b2-waits', "SET ROLE role_b; SELECT 'granted:' || lockq_get('F', 'b', '1 hour');");
ok(wait_for_waiters($node, 'F', 1), 'role_b waits for F');
$t0 = time();
is(as('role_a', "SELECT lockq_release('F', 'a', $t2)"), 't', 'role_a releases F from another session');
is(scalar_query($node, 'SELECT deferred_handoffs FROM lockq_stats'), '1',
	'the hand-off is held back by the fence');
like(waiter_result($wb2, qr/(granted:\d+)/), qr/granted/,
	'role_b is granted once lockq.fence_timeout has passed');
my $waited = time() - $t0;
note sprintf('the hand-off waited %.3f s', $waited);
cmp_ok($waited, '>=', 0.9, 'not before the fence timeout');
cmp_ok($waited, '<', 5, 'and not much after it');
ok($node->log_contains(
		qr/lockq is terminating process $fpid: its transaction has held back the hand-off of lock "F"/),
	'the log says which session was ended, and why');
eval { $f->query('COMMIT'); };
end_session($f);
is(scalar_query($node, "SELECT count(*) FROM fenced_writes WHERE by = 'late'"), '0',
	'the fenced write of the ended transaction never commits');
$wb2->quit;

# --- a fenced transaction cannot be prepared -------------------------------------
my $t3 = as('role_a', "SELECT lockq_try('P', 'a', '1 hour')");
my ($ret, $o, $e) = $node->psql('postgres',
	"SET ROLE role_a; BEGIN; SELECT lockq_holds('P', $t3); PREPARE TRANSACTION 'lqp';");
like($e, qr/cannot prepare a transaction that is fenced by lockq_holds/,
	'PREPARE TRANSACTION of a fenced transaction is refused');
is(scalar_query($node, 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
($ret, $o, $e) = $node->psql('postgres',
	"SET ROLE role_m; BEGIN; SELECT lockq_holds('P', $t3); PREPARE TRANSACTION 'lqm';");
is($ret, 0, "another role's unfenced answer does not stand in the way of PREPARE");
$node->safe_psql('postgres', "ROLLBACK PREPARED 'lqm'");
as('role_a', "SELECT lockq_release('P', 'a', $t3)");

# --- held-back hand-offs cost nothing while nothing changes ---------------------
$node->append_conf('postgresql.conf', "lockq.fence_timeout = '10min'\n");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('lockq.fence_timeout') = '10min'");
my $many = session('role_a');
$many->query_safe(q{BEGIN; SELECT count(*) FROM generate_series(1, 2000) i
	WHERE lockq_holds('d' || i, lockq_try('d' || i, 'a', '1 hour'))});
is(as('role_a', q{SELECT count(*) FROM generate_series(1, 2000) i WHERE lockq_release('d' || i, 'a')}),
	'2000', '2,000 grants are released while one transaction fences them all');
is(scalar_query($node, 'SELECT deferred_handoffs FROM lockq_stats'), '2001',
	'2,000 hand-offs are held back');
my $b0 = scalar_query($node, 'SELECT batches FROM lockq_stats');
my $until = scalar_query($node, 'SELECT lockq_now() + 2000000');
$node->poll_query_until('postgres', "SELECT lockq_now() > $until");
my $b1 = scalar_query($node, 'SELECT batches FROM lockq_stats');
note sprintf('%d batches in 2 s with 2,000 hand-offs held back and nothing else going on', $b1 - $b0);
cmp_ok($b1 - $b0, '<', 40, 'the lock server does not retry them periodically');
$t0 = time();
for my $i (1 .. 50)
{
	as('role_b', "SELECT lockq_release('x$i', 'b', lockq_try('x$i', 'b'))");
}
note sprintf('50 try/release pairs took %.3f s meanwhile', time() - $t0);
$many->query_safe('COMMIT');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'd%'}),
	'once the fencing transaction ends, every held-back hand-off completes');
$many->quit;
$sa->quit;
$m->quit;

$node->stop;
done_testing();

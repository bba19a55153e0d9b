# No role can stall, starve or squat on another role's locks:
#   - CREATE EXTENSION refuses a lockq_admin role that lockq did not make
#     (a CREATEROLE user's, with LOGIN and members);
#   - per-role limits from the settings: a role at its limit is refused
#     (53400, the hint names the setting) and no other role notices;
#   - one role with 100 connections, flooding the lock server, filling its
#     waiter limit and trying to fence another role's grant, delays neither
#     another role's hand-off nor its requests beyond the documented bound
#     (doc/security.md);
#   - the lock server's memory: refused beyond lockq.max_server_memory
#     (53200), and returned to the system after a flood;
#   - lowering lockq.max_ttl bounds renewals of existing leases;
#   - a LATIN1 client gets 42501 for another role's long multibyte owner
#     name (the backend makes the message, in the client's encoding), not
#     22021;
#   - namespace privileges turned on in postgresql.conf, and a role's
#     lockq_holds outside its namespaces holds nothing back.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use List::Util qw(max);
use LockqTest;

my $node = lockq_node('security',
	init => { extra => [ '--encoding=UTF8', '--locale=C' ] },
	conf => "max_connections = 140\nlockq.max_waiters_per_role = 200\n",
	no_extension => 1);

sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', $role ]);
}

sub as_err
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	return $ret == 0 ? "ok: $out" : $err;
}

sub session
{
	my ($role) = @_;
	return $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role ]);
}

# reload(setting, value, shown): sets it for the whole server and waits
# until a new session shows it (the lock server reloads with every backend).
sub reload
{
	my ($setting, $value, $shown) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $setting = '$value'; SELECT pg_reload_conf()");
	ok($node->poll_query_until('postgres', "SHOW $setting", $shown), "$setting = $value");
	return;
}

# --- lockq_admin: made by lockq, or refused --------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN CREATEROLE;
	CREATE ROLE role_a LOGIN; CREATE ROLE role_b LOGIN; CREATE ROLE role_m LOGIN;
	CREATE ROLE boss LOGIN;});
as('mallory', 'CREATE ROLE lockq_admin LOGIN; GRANT lockq_admin TO mallory');
my ($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION lockq');
like($err, qr/role "lockq_admin" already exists and was not made by lockq/,
	"CREATE EXTENSION refuses a lockq_admin that a CREATEROLE user made");
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_extension WHERE extname = 'lockq'"),
	'0', 'and installs nothing');
$node->safe_psql('postgres', 'DROP ROLE lockq_admin');
$node->safe_psql('postgres', 'CREATE EXTENSION lockq');
is( $node->safe_psql('postgres', q{
	SELECT r.rolcanlogin, (SELECT count(*) FROM pg_auth_members m WHERE m.roleid = r.oid),
		   shobj_description(r.oid, 'pg_authid') IS NOT NULL
	  FROM pg_roles r WHERE rolname = 'lockq_admin'}),
	'f|0|t', 'lockq makes its own lockq_admin: NOLOGIN, no members, marked');
# made by lockq, the role is adopted again after DROP EXTENSION (it is
# cluster-wide and stays)
$node->safe_psql('postgres', 'DROP EXTENSION lockq; CREATE EXTENSION lockq; GRANT lockq_admin TO boss');
pass('a lockq_admin that lockq made is adopted again');
wait_for_worker($node);

# --- per-role limits from the settings ------------------------------------------
as('role_m', q{SELECT lockq.lockq_try('m-hot', 'm', '1 hour')});
as('role_m', q{
	DO $$
	BEGIN
		FOR i IN 1 .. 200 LOOP
			PERFORM lockq.lockq_enqueue('m-hot', 'mq' || i, '1 s', NULL, '1 hour');
		END LOOP;
	END $$});
my $e = as_err('role_m', q{SELECT lockq.lockq_enqueue('m-hot', 'mq-extra', '1 s', NULL, '1 hour')});
like($e, qr/53400: this role already has as many waiters queued as its limit allows \(200\)/,
	'role_m is refused its 201st waiter (53400)');
like($e, qr/HINT:  lockq.max_waiters_per_role sets the limit/, 'the hint names the setting');
is($node->safe_psql('postgres',
		q{SELECT waiters, max_waiters FROM lockq.lockq_role_usage WHERE role = 'role_m'}),
	'200|200', 'lockq_role_usage shows role_m at its limit');
# A refusal by the role's limit takes nothing from lockq.max_waiters: the
# check of all waiters reserves one before the role's is checked, and a
# refused request gives it back.  With room for 5 more waiters in all, 20
# refusals of role_m leave role_b its place.
reload('lockq.max_waiters', '205', '205');
as('role_m', q{
	DO $$
	BEGIN
		FOR i IN 1 .. 20 LOOP
			BEGIN
				PERFORM lockq.lockq_enqueue('m-hot', 'mq-again' || i, '1 s', NULL, '1 hour');
				RAISE 'role_m queued beyond its limit';
			EXCEPTION WHEN configuration_limit_exceeded THEN NULL;
			END;
		END LOOP;
	END $$});
is(as('role_b', q{SELECT lockq.lockq_enqueue('m-hot', 'b', '1 s', NULL, '1 hour') IS NULL}),
	't', 'role_b still queues for the same lock, 20 refusals of role_m later');
reload('lockq.max_waiters', '100000', '100000');
ok(as('role_b', q{SELECT lockq.lockq_try('b-free', 'b', '1 minute')}) > 0,
	'and takes a free lock');
as('role_b', q{SELECT lockq.lockq_cancel('m-hot', 'b'); SELECT lockq.lockq_release('b-free', 'b')});

# --- one role with 100 connections ----------------------------------------------
# role_m keeps 100 sessions busy: taking and releasing its own locks,
# asking for waiters beyond its limit (refused), and holding transactions
# open with lockq_holds on role_a's grant (answered, but no fence).
$node->safe_psql('postgres', q{
	CREATE SCHEMA m AUTHORIZATION role_m;
	CREATE FUNCTION m.flood(c int, k int) RETURNS int LANGUAGE plpgsql AS $$
	DECLARE
		refused int := 0;
	BEGIN
		BEGIN
			PERFORM lockq.lockq_try('m-' || k, 'm-' || c, '2 s');
			PERFORM lockq.lockq_release('m-' || k, 'm-' || c);
		EXCEPTION WHEN others THEN refused := refused + 1;
		END;
		BEGIN
			PERFORM lockq.lockq_enqueue('m-hot', 'mq-' || c || '-' || k, '1 s', NULL, '1 hour');
		EXCEPTION WHEN others THEN refused := refused + 1;
		END;
		RETURN refused;
	END $$;
	ALTER FUNCTION m.flood(int, int) OWNER TO role_m;});
my $script = $node->basedir . '/flood.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set k random(1, 50)
SELECT m.flood(:client_id, :k);
BEGIN;
SELECT lockq.lockq_holds(l.lock_id, l.token) FROM lockq.lockq_locks l WHERE l.lock_id = 'v';
SELECT pg_sleep(0.05);
COMMIT;
});

# request latency of role_b: a lockq_try and a lockq_release, in seconds
my $sb = session('role_b');
sub latencies
{
	my ($tag, $count) = @_;
	my @l;
	for my $i (1 .. $count)
	{
		my $t0 = time();
		$sb->query_safe("SELECT lockq.lockq_try('lat-$tag-$i', 'b', '10 s')");
		$sb->query_safe("SELECT lockq.lockq_release('lat-$tag-$i', 'b')");
		push @l, (time() - $t0) / 2;
	}
	@l = sort { $a <=> $b } @l;
	return ($l[ int(@l / 2) ], $l[-1]);
}
my ($med0, $max0) = latencies('idle', 40);

# hand-off delay of another role's lock: role_a takes v for 1 s, role_b
# waits for it; the delay is from the end of role_a's lease (expires) to
# role_b's grant (acquired), both on the lockq clock
sub handoff_delay
{
	my ($round) = @_;
	my $ta = as('role_a', q{SELECT lockq.lockq_try('v', 'a', '1 s')});
	my $expires = $node->safe_psql('postgres',
		q{SELECT extract(epoch FROM expires) FROM lockq.lockq_locks WHERE lock_id = 'v'});
	my $w = session('role_b');
	$w->{stdin} .= "SELECT 'granted:' || lockq.lockq_get('v', 'b$round', '30 s', '30 s');\n";
	$w->{run}->pump_nb();
	my $tb = waiter_result($w, qr/granted:(\d+)/);
	my $acquired = $node->safe_psql('postgres',
		q{SELECT extract(epoch FROM acquired) FROM lockq.lockq_locks WHERE lock_id = 'v'});
	$w->query_safe("SELECT lockq.lockq_release('v', 'b$round')");
	$w->quit;
	return defined($tb) && $tb > $ta ? $acquired - $expires : 999;
}
my @idle_handoffs = map { handoff_delay("i$_") } 1 .. 3;

my $requests0 = $node->safe_psql('postgres', 'SELECT requests FROM lockq.lockq_stats');
my ($bout, $berr) = ('', '');
my $bench = IPC::Run::start(
	[
		'pgbench', '--no-vacuum', '--client=100', '--jobs=2', '--time=25',
		'--file=' . $script, '--host=' . $node->host, '--port=' . $node->port,
		'--username=role_m', 'postgres'
	],
	'>', \$bout, '2>', \$berr);
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) >= 100 FROM pg_stat_activity WHERE usename = 'role_m'}),
	'role_m runs 100 sessions');

my @handoffs = map { handoff_delay("m$_") } 1 .. 5;
my ($med1, $max1) = latencies('busy', 40);
my $requests1 = $node->safe_psql('postgres', 'SELECT requests FROM lockq.lockq_stats');
my $during = $node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE usename = 'role_m'});
$bench->finish;
like($bout, qr/number of transactions actually processed: [1-9]/, 'role_m\'s pgbench ran');
note("role_m pgbench: " . join(' ', grep { /tps|processed|latency average/ } split /\n/, $bout));
cmp_ok($during, '>=', 100, 'role_m still had 100 sessions when role_b was measured');
cmp_ok($requests1 - $requests0, '>', 1000, 'role_m kept the lock server busy');

note(sprintf("hand-off delay after the lease's end, idle: %s s; under role_m's flood: %s s",
		join(', ', map { sprintf('%.3f', $_) } @idle_handoffs),
		join(', ', map { sprintf('%.3f', $_) } @handoffs)));
note(sprintf("role_b request latency, idle: median %.1f ms, max %.1f ms; under role_m's flood: median %.1f ms, max %.1f ms",
		$med0 * 1000, $max0 * 1000, $med1 * 1000, $max1 * 1000));
cmp_ok(max(@handoffs), '<', 1.0,
	'under the flood, role_b is granted within 1 s of the end of role_a\'s lease (every round)');
cmp_ok(max(@handoffs), '>=', 0, 'and never before it');
cmp_ok($max1, '<', 1.0, 'role_b\'s requests take under 1 s each under the flood');
is($node->safe_psql('postgres', 'SELECT deferred_handoffs FROM lockq.lockq_stats'),
	'0', 'role_m\'s lockq_holds on role_a\'s grants held no hand-off back');
as('role_m', q{SELECT count(lockq.lockq_cancel('m-hot', owner)) FROM lockq.lockq_waiters WHERE lock_id = 'm-hot'});

# --- the lock server's memory ----------------------------------------------------
reload('lockq.max_owner_locks_per_role', '1000000', '1000000');
reload('lockq.max_server_memory', '40MB', '40MB');
my $pid = worker_pid($node);
sub rss_kb
{
	open my $fh, '<', "/proc/$pid/status" or return -1;
	while (<$fh>) { return $1 if /^RssAnon:\s+(\d+)/; }
	return -1;
}
my $rss0 = rss_kb();
# long lock ids and owner names (255 bytes): about 1 kB of state each
# (lockq.max_server_memory bounds each lock server: with several, the
# suite's second configuration, the flood's locks are all lock server 0's)
my $flood = q{
	DO $$
	DECLARE
		i int := 0;
		n int := 0;
		id text;
		st text;
		msg text;
		hint text;
	BEGIN
		LOOP
			i := i + 1;
			id := rpad('mem-' || i, 255, 'x');
			CONTINUE WHEN } . server_sql('id') . q{ <> 0;
			n := n + 1;
			PERFORM lockq.lockq_try(id, rpad('o', 255, 'y'), '1 hour');
		END LOOP;
	EXCEPTION WHEN others THEN
		GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
		RAISE NOTICE 'after % locks: %: % (%)', n - 1, st, msg, hint;
	END $$};
($ret, $out, $err) = $node->psql('postgres', $flood, extra_params => [ '-U', 'role_m' ]);
like($err, qr/53200: lockq lock server is at its memory limit \(lockq.max_server_memory/,
	'a flood of locks is refused at lockq.max_server_memory (53200)');
my ($granted) = $err =~ /after (\d+) locks/;
note("refused after $granted locks of 255-byte ids and owners");
cmp_ok($granted, '>', 10000, 'after many locks');
my $mem = $node->safe_psql('postgres',
	'SELECT state_memory FROM lockq.lockq_lock_servers WHERE server = 0');
cmp_ok($mem, '<', 44 * 1024 * 1024, 'the state stays near its bound (state_memory)');
my $held = $node->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_locks');
my $b_one = id_of_server($node, 0, 'b-one');
like(as_err('role_b', qq{SELECT lockq.lockq_try('$b_one', 'b', '1 minute')}), qr/53200/,
	'the bound is the server\'s: it refuses every role (the per-role limits keep one role below it)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_locks'), $held,
	'refused requests changed nothing');
my $rss1 = rss_kb();

# the flood ends: the memory goes back
is( as('role_m', q{
	SELECT count(*) FILTER (WHERE NOT lockq.lockq_release(lock_id, owner))
	  FROM lockq.lockq_locks WHERE lock_id LIKE 'mem-%'}),
	'0', 'role_m releases them all');
ok( $node->poll_query_until('postgres',
		'SELECT state_memory < 8 * 1024 * 1024 FROM lockq.lockq_lock_servers WHERE server = 0'),
	'the lock server rebuilds its state and returns the memory');
ok($node->log_contains('lockq lock server rebuilt its state to return memory'),
	'and says so in the log');
my $rss2 = rss_kb();
note(sprintf("lock server RssAnon: %d kB before, %d kB at the bound, %d kB after the flood ended; state_memory %.1f MB at the bound",
		$rss0, $rss1, $rss2, $mem / 1048576));
cmp_ok($rss2, '<', $rss0 + ($rss1 - $rss0) / 4, 'its resident memory drops back (RssAnon)');
ok(as('role_b', qq{SELECT lockq.lockq_try('$b_one', 'b', '1 minute')}) > 0,
	'and role_b takes a lock again');
as('role_b', qq{SELECT lockq.lockq_release('$b_one', 'b')});
reload('lockq.max_server_memory', '1GB', '1GB');

# --- a lower lockq.max_ttl bounds renewals ---------------------------------------
my $tt = as('role_a', q{SELECT lockq.lockq_try('ttl', 'a', '1 hour')});
reload('lockq.max_ttl', '10s', '10s');
ok( $node->poll_query_until('postgres', qq{
		SELECT lockq.lockq_renew('ttl', 'a', $tt)
		   AND (SELECT expires <= now() + interval '11 s' FROM lockq.lockq_locks WHERE lock_id = 'ttl')}),
	'after lockq.max_ttl is lowered to 10 s, a renewal of a 1-hour lease lasts 10 s');
is(as('role_a', q{SELECT lockq.lockq_release('ttl', 'a')}), 't', 'released');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET lockq.max_ttl; SELECT pg_reload_conf()');

# --- a LATIN1 client and a multibyte owner name ---------------------------------
my $long_utf8 = 'x' . ("\xc3\xa9" x 127);
as('role_a', "SELECT lockq.lockq_try('mb', '$long_utf8', '1 hour')");
{
	local $ENV{PGCLIENTENCODING} = 'LATIN1';
	my $sql_latin1 = "SELECT lockq.lockq_release('mb', 'x" . ("\xe9" x 127) . "')";
	($ret, $out, $err) = $node->psql('postgres', $sql_latin1,
		extra_params => [ '-U', 'role_b', '-v', 'VERBOSITY=verbose' ]);
}
like($err, qr/ERROR:  42501: owner "x\xe9+/, 'a LATIN1 client gets 42501 and the owner name in its encoding');
unlike($err, qr/22021|invalid byte sequence/, 'not an encoding error');
ok(!$node->log_contains('invalid byte sequence'), 'nor does the log get one');
$node->safe_psql('postgres', "SELECT lockq.lockq_force_release('mb')");

# --- namespace privileges from postgresql.conf -----------------------------------
reload('lockq.namespace_privileges', 'on', 'on');
like(as_err('role_b', q{SELECT lockq.lockq_try('reports:nightly', 'b', '1 hour')}),
	qr/42501: permission denied for lock "reports:nightly"/, 'role_b may not take reports:nightly');
like(as_err('role_m', q{SELECT lockq.lockq_enqueue('reports:nightly', 'squat', '1 day', NULL, '1 day')}),
	qr/42501/, 'nor queue for it (role_m)');
is(as('boss', q{SELECT lockq.lockq_grant('reports:', 'role_b')}), 't', 'boss (lockq_admin) grants reports: to role_b');
my $tr = as('role_b', q{SELECT lockq.lockq_try('reports:nightly', 'b', '1 hour')});
ok($tr > 0, 'now role_b takes it');
like(as_err('role_m', q{SELECT lockq.lockq_try('reports:weekly', 'm', '1 hour')}), qr/42501/,
	'role_m still may not');
# after a revoke, role_b's own fence on what it holds is an answer only
is(as('boss', q{SELECT lockq.lockq_revoke('reports:', 'role_b')}), 't', 'boss revokes it');
my $deferred0 = $node->safe_psql('postgres', 'SELECT deferred_handoffs FROM lockq.lockq_stats');
is(as('boss', q{SELECT lockq.lockq_enqueue('reports:nightly', 'boss', '1 minute', NULL, '1 minute') IS NULL}),
	't', 'boss queues for reports:nightly');
my $f = session('role_b');
is($f->query_safe("BEGIN; SELECT lockq.lockq_holds('reports:nightly', $tr)"), 't',
	'role_b\'s lockq_holds answers true');
is(as('role_b', "SELECT lockq.lockq_release('reports:nightly', 'b', $tr)"), 't',
	'role_b releases from another session');
ok( $node->poll_query_until('postgres',
		q{SELECT owner = 'boss' FROM lockq.lockq_locks WHERE lock_id = 'reports:nightly'}),
	'the lock passes on while role_b\'s transaction is open');
is($node->safe_psql('postgres', 'SELECT deferred_handoffs FROM lockq.lockq_stats'),
	$deferred0, 'nothing was held back');
$f->query_safe('COMMIT');
$f->quit;
$sb->quit;

done_testing();

# Another role attacks.  Mallory, an ordinary role with CREATE on the
# database, plants a schema whose operators and lockq-named functions
# shadow the real ones (each records who called it, then does the real
# thing, so the attack would be silent) and puts it first in the search_path
# of the application role and of the database.  Neither the lock server
# (which loads its state with SQL after a restart) nor the lockq tool and
# library (which wait, renew and release through SQL) call any of it; the
# same statements typed by the application role do, which shows the trap
# is live.  Then mallory forges a grant notification to a client waiter on
# its channel: the server, asked, says the waiter still waits.  (Role
# checks on release, renew, take-over and cancel: regress lockq_security.)
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
use LockqTest;

my $lockq = "$ENV{TESTDIR}/client/lockq";
require_tool(-x $lockq, "$lockq not built");

my $node = lockq_node('security');
$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE ROLE mallory LOGIN;
GRANT CREATE ON DATABASE postgres TO mallory;
});

# mallory's trap, created by mallory herself
$node->safe_psql('postgres', q{
SET ROLE mallory;
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE TABLE evil.calls (what text, who name, backend text);
GRANT INSERT ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.record(what text) RETURNS void
	LANGUAGE sql SET search_path = pg_catalog AS $$
	INSERT INTO evil.calls
	SELECT what, current_user,
		   (SELECT backend_type FROM pg_stat_activity WHERE pid = pg_backend_pid())
$$;
});
# Each shadow records its call, then does the real thing: operators
# (name, operator, left type, right type, result type) ...
my @shadow_sql;
for my $o ([ 'eq_oid', '=', 'oid', 'oid', 'boolean' ],
	[ 'eq_name', '=', 'name', 'name', 'boolean' ],
	[ 'eq_text', '=', 'text', 'text', 'boolean' ],
	[ 'eq_int8', '=', 'bigint', 'bigint', 'boolean' ],
	[ 'minus', '-', 'bigint', 'integer', 'bigint' ])
{
	my ($fn, $op, $l, $r, $res) = @$o;
	push @shadow_sql, qq{
CREATE FUNCTION evil.$fn($l, $r) RETURNS $res
	LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
	BEGIN PERFORM evil.record('$op($l,$r)'); RETURN \$1 $op \$2; END \$\$;
CREATE OPERATOR evil.$op (FUNCTION = evil.$fn, LEFTARG = $l, RIGHTARG = $r);};
}
# ... and lockq's functions (name, argument types, result type)
for my $f ([ 'lockq_try', 'text, text, interval', 'bigint' ],
	[ 'lockq_enqueue', 'text, text, interval, text, interval', 'bigint' ],
	[ 'lockq_heartbeat', 'text, text', 'bigint' ],
	[ 'lockq_renew', 'text, text, bigint, interval', 'boolean' ],
	[ 'lockq_release', 'text, text, bigint', 'boolean' ],
	[ 'lockq_cancel', 'text, text', 'boolean' ])
{
	my ($fn, $args, $res) = @$f;
	my $params = join(', ', map { "\$$_" } 1 .. scalar(split /, /, $args));
	push @shadow_sql, qq{
CREATE FUNCTION evil.$fn($args) RETURNS $res
	LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
	BEGIN PERFORM evil.record('$fn'); RETURN lockq.$fn($params); END \$\$;};
}
$node->safe_psql('postgres', join("\n", 'SET ROLE mallory;', @shadow_sql));
$node->safe_psql('postgres', q{
ALTER ROLE app SET search_path = evil, pg_catalog, public, lockq;
ALTER DATABASE postgres SET search_path = evil, pg_catalog, public, lockq;
});

# calls(cond) counts the trapped calls matching cond.
sub calls
{
	my ($cond) = @_;
	return $node->safe_psql('postgres',
		"SELECT pg_catalog.count(*) FROM evil.calls WHERE $cond");
}

# --- the trap is live -------------------------------------------------------
my $app = $node->connstr('postgres') . ' user=app';
$node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_catalog.pg_extension e
	   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
	  WHERE e.extname = 'lockq'},
	extra_params => [ '-U', 'app' ]);
cmp_ok(calls(q{who OPERATOR(pg_catalog.=) 'app' AND what OPERATOR(pg_catalog.=) '=(oid,oid)'}),
	'>', 0, 'the extension lookup typed by app under its search_path calls the planted =(oid,oid)');
$node->safe_psql('postgres', q{SELECT lockq_try('trap', 'app-owner', '1 min')},
	extra_params => [ '-U', 'app' ]);
is(calls(q{who OPERATOR(pg_catalog.=) 'app' AND what OPERATOR(pg_catalog.=) 'lockq_try'}),
	'1', 'an unqualified lockq_try typed by app calls the planted lockq_try');
$node->safe_psql('postgres', q{SELECT lockq_release('trap', 'app-owner', NULL)},
	extra_params => [ '-U', 'app' ]);
$node->safe_psql('postgres',
	q{SELECT greatest(last_value - (NOT is_called)::int, 0) FROM lockq.token_seq});
cmp_ok(calls(q{what OPERATOR(pg_catalog.=) '-(bigint,integer)'}), '>', 0,
	"the lock server's sequence query, typed under the database's search_path, calls the planted -(bigint,integer)");
$node->safe_psql('postgres', 'TRUNCATE evil.calls');

# --- the lock server: restart and reload under the hostile setting ----------
$node->safe_psql('postgres', q{SELECT lockq_try('before', 'held-over', '1 hour')});
$node->restart;
ok($node->poll_query_until('postgres',
		q{SELECT worker_pid IS NOT NULL FROM lockq_stats}),
	'the lock server runs after a restart');
is(scalar_query($node, q{SELECT owner FROM lockq_locks WHERE lock_id OPERATOR(pg_catalog.=) 'before'}),
	'held-over', 'it loaded the grant from before the restart');
my $t1 = scalar_query($node, q{SELECT lockq_try('after', 'o1', '1 min')});
ok($t1 =~ /^\d+$/, 'and grants new locks');
scalar_query($node, q{SELECT lockq_release('after', 'o1', NULL)});
is(calls(q{backend OPERATOR(pg_catalog.<>) 'client backend'}), '0',
	'the lock server called nothing of the planted schema');

# --- the lockq tool and liblockq as app --------------------------------------
# app holds "job" for 2 s as owner "first"; lockq run waits for it on the
# NOTIFY path, gets it, renews a 1.5 s lease (at a third of it) while the
# command runs, and releases it.
$node->safe_psql('postgres', q{SELECT lockq_try('job', 'first', '2 s')},
	extra_params => [ '-U', 'app' ]);
$node->safe_psql('postgres', 'TRUNCATE evil.calls');
my $flag = "$PostgreSQL::Test::Utils::tmp_check/201_search_path_attacks_ran";
my ($out, $err) = ('', '');
IPC::Run::run([ $lockq, 'run', '-d', $app, '--ttl', '1500ms', '--timeout', '60s',
		'job', '--', 'sh', '-c', "sleep 2 && touch $flag" ],
	'>', \$out, '2>', \$err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
is($? >> 8, 0, 'lockq run as app waited, ran its command and released') or diag($err);
ok(-e $flag, 'the command ran');
IPC::Run::run([ $lockq, 'status', '-d', $app, '--json' ], '>', \$out, '2>', \$err);
is($? >> 8, 0, 'lockq status as app works') or diag($err);
$node->safe_psql('postgres', q{SELECT lockq.lockq_try('rel', 'x', '1 min')},
	extra_params => [ '-U', 'app' ]);
IPC::Run::run([ $lockq, 'release', '-d', $app, 'rel', '--owner', 'x' ], '>', \$out, '2>', \$err);
is($? >> 8, 0, 'lockq release as app works') or diag($err);
is(scalar_query($node, 'SELECT count(*) FROM lockq_locks'), '1',
	'only the grant from before the restart is left');
ok(scalar_query($node, 'SELECT renewals > 0 FROM lockq_stats') eq 't',
	'the lease was renewed while the command ran');
is(calls(q{who OPERATOR(pg_catalog.=) 'app'}), '0',
	'lockq and liblockq called nothing of the planted schema')
  or diag($node->safe_psql('postgres', 'SELECT * FROM evil.calls'));

# --- a forged grant notification from another role ---------------------------
$node->safe_psql('postgres', q{
ALTER ROLE app RESET search_path;
ALTER DATABASE postgres RESET search_path;
SELECT lockq_try('N', 'holder', '1 hour');
});
my $w = $node->background_psql('postgres', extra_params => [ '-U', 'app' ]);
$w->query_safe('LISTEN lq_waiter');
is($w->query_safe(q{SELECT lockq_enqueue('N', 'waiter', '1 hour', 'lq_waiter', '1 hour') IS NULL}),
	't', 'app queues a client waiter listening on lq_waiter');
$node->safe_psql('postgres', q{NOTIFY lq_waiter, 'grant 4242 1 N waiter'},
	extra_params => [ '-U', 'mallory' ]);
my $seen = '';
my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
until ($seen =~ /payload "grant 4242/ || $timeout->is_expired)
{
	$seen .= $w->query_safe('SELECT 1');
}
like($seen, qr/payload "grant 4242 1 N waiter" received/,
	"mallory's forged grant reaches app's channel");
is($w->query_safe(q{SELECT lockq_heartbeat('N', 'waiter') IS NULL}), 't',
	'but the server, asked, says app still waits');
is(scalar_query($node, q{SELECT owner FROM lockq_locks WHERE lock_id = 'N'}), 'holder',
	'and the holder still holds the lock');
is($node->psql('postgres', q{SELECT lockq_cancel('N', 'waiter')},
		extra_params => [ '-U', 'mallory' ]), 3,
	'mallory cannot cancel the wait either');
$w->quit;

done_testing();

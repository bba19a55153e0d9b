# What pg_dump keeps of lockq: its configuration (role limits and
# namespace grants, set through lockq_set_role_limits and lockq_grant),
# restored into a new cluster whose roles have other OIDs, in one pass and
# in sections, and enforced there; not its locks.  And pg_restore --clean
# --create into the cluster whose lock server is connected to the
# database it drops (issue 21: limits and grants were not dumped, and
# DROP DATABASE failed while the lock server was connected).
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

# (the privileges granted on lockq's schema are dumped too)
my $roles = 'CREATE ROLE app1 LOGIN; CREATE ROLE app2 LOGIN;';
my $src = lockq_node('source');
$src->safe_psql('postgres', "$roles GRANT USAGE ON SCHEMA lockq TO app1, app2;");
$src->safe_psql('postgres', q{
	SELECT lockq_set_role_limits('app1', max_owner_locks => 2, max_waiters => 3);
	SELECT lockq_set_role_limits('app2', max_session_locks => 4);
	SELECT lockq_grant('jobs:', 'app1');
	SELECT lockq_grant('', 'app2');
	SELECT lockq_try('held-at-dump', 'o', '1 hour');
	CREATE ROLE gone;
	SELECT lockq_set_role_limits('gone', max_owner_locks => 7);
	SELECT lockq_grant('gone:', 'gone');
	DROP ROLE gone;});

# config(node): the configuration as the views show it, by role name
sub config
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT string_agg(format('%s %s/%s/%s', role, max_owner_locks, max_waiters,
								 max_session_locks), '; ' ORDER BY role)
		  FROM lockq_role_usage WHERE role IN ('app1', 'app2')
		UNION ALL
		SELECT string_agg(format('%L:%s', prefix, role), '; ' ORDER BY prefix, role)
		  FROM lockq_namespaces WHERE role IN ('app1', 'app2')});
}
my $want = config($src);
like($want, qr/app1 2\/3\/\d+; app2 \d+\/\d+\/4\n'':app2; 'jobs:':app1/, "the source's configuration: $want");

my $dump = $src->basedir . '/lockq.dump';
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('postgres') ], 'pg_dump');

# enforced(node, label): app1's limit and namespace hold where it was restored
sub enforced
{
	my ($node, $label) = @_;
	$node->append_conf('postgresql.conf', 'lockq.namespace_privileges = on');
	$node->reload;
	my $as1 = sub {
		$node->psql('postgres', "SET ROLE app1; $_[0]", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	};
	my ($rc, $out, $err) = $as1->("SELECT lockq_try('jobs:a', 'x'), lockq_try('jobs:b', 'x')");
	is($rc, 0, "$label: app1 takes two locks under its prefix") or diag($err);
	($rc, $out, $err) = $as1->("SELECT lockq_try('jobs:c', 'x')");
	like($err, qr/53400/, "$label: its third is refused: its limit of 2 came along");
	($rc, $out, $err) = $as1->("SELECT lockq_try('other:a', 'x')");
	like($err, qr/42501/, "$label: outside its prefix, refused");
	$node->safe_psql('postgres', "SELECT lockq_force_release('jobs:' || c) FROM unnest('{a,b}'::text[]) c");
	return;
}

# --- into a new cluster, whose roles have other OIDs ---------------------------
my $new = lockq_node('restored', no_extension => 1);
$new->safe_psql('postgres', 'CREATE ROLE filler1; CREATE ROLE filler2; ' . $roles);
isnt($new->safe_psql('postgres', "SELECT 'app1'::regrole::oid"),
	$src->safe_psql('postgres', "SELECT 'app1'::regrole::oid"), 'app1 has another OID there');
$new->command_ok([ 'pg_restore', '-d', $new->connstr('postgres'), $dump ], 'pg_restore');
ok(wait_for_worker($new), 'its lock server serves the restored extension');
is(config($new), $want, 'limits and namespace grants round-trip, by role name');
is(scalar_query($new, 'SELECT count(*) FROM lockq_locks'), '0', 'no lock is restored');
is(scalar_query($new, q{SELECT (SELECT count(*) FROM lockq.role_limits) || '/' ||
		(SELECT count(*) FROM lockq.namespaces)}), '2/2',
	'nothing of a role dropped before the dump comes back (its OID could name another role)');
enforced($new, 'restored');
$new->stop;

# --- in sections ---------------------------------------------------------------
my $sec = lockq_node('sectioned', no_extension => 1);
$sec->safe_psql('postgres', $roles);
for my $section (qw(pre-data data post-data))
{
	$sec->command_ok([ 'pg_restore', "--section=$section", '-d', $sec->connstr('postgres'), $dump ],
		"section $section");
}
is(config($sec), $want, 'a sectioned restore round-trips them too');
enforced($sec, 'sectioned');
$sec->stop;

# --- pg_restore --clean --create where the lock server is connected -------------
my $offset = -s $src->logfile;
my $pid = worker_pid($src);
$src->command_ok(
	[ 'pg_restore', '--clean', '--create', '-d', $src->connstr('template1'), $dump ],
	'pg_restore --clean --create drops and makes again the database the lock server serves');
ok($src->log_contains('lockq lock server leaves database "postgres", which is being dropped', $offset),
	'the lock server left it for the drop');
ok(wait_for_worker($src, $pid), 'a new lock server serves the new database');
is(config($src), $want, 'with the configuration restored');
my $t = scalar_query($src, "SELECT lockq_try('after-restore', 'o', '1 minute')");
ok($t > 0, 'and grants locks');

done_testing();

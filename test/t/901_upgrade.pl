# An upgrade from lockq 1.0, as a user makes it: CREATE EXTENSION lockq
# VERSION '1.0' running the 1.0 library, owner locks taken and client-side
# waiters queued; then the new library installed, a restart and ALTER
# EXTENSION lockq UPDATE.  The locks, the waiters in their order, the token
# sequence and the clock carry over; every function and view is then in the
# schema lockq, as in a new installation.  Before the update, the new
# liblockq and lockq refuse the old extension and say what to do.
#
# The 1.0 library is the old code itself: the newest commit of main's
# history whose lockq.control says 1.0 (test/old-version.sh), built with
# PGXS.  make test makes that archive before it copies the tree without
# .git (tmp_old/); from a checkout this test makes it.  A test cannot write
# PostgreSQL's directories, so it runs the cluster from a private copy of
# the installation (binaries copied: they find their share and lib
# directories relative to their own location; everything else linked) and
# installs the old, then the new, lockq into it.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Basename;
use File::Copy;
use File::Path qw(mkpath rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $OLD = '1.0';
my $lockq = "$ENV{TESTDIR}/client/lockq";
my $tmp = PostgreSQL::Test::Utils::tempdir();

# old_source() returns the archive of lockq $OLD, or undef and why not.
sub old_source
{
	my $made = "$ENV{TESTDIR}/tmp_old/lockq-$OLD.tar";
	return ($made) if -f $made;
	my ($out, $err) = ('', '');
	IPC::Run::run([ "$ENV{TESTDIR}/test/old-version.sh", $OLD, "$tmp/src" ],
		'>', \$out, '2>', \$err);
	return ("$tmp/src/lockq-$OLD.tar") if $? == 0;
	chomp $err;
	return (undef, $err || "test/old-version.sh failed");
}

my ($archive, $why) = old_source();
require_tool(defined $archive, "the source of lockq $OLD from git history: $why");
require_tool(-x $lockq, "$lockq not built");

# --- lockq 1.0, built from its own source ---------------------------------
sub pg_dir
{
	my ($what) = @_;
	my $dir = `pg_config --$what`;
	die "pg_config --$what failed" if $? != 0;
	chomp $dir;
	return $dir;
}
my ($bindir, $pkglibdir, $sharedir) = map { pg_dir($_) } qw(bindir pkglibdir sharedir);

my $old = "$tmp/lockq-$OLD";
mkpath($old);
system('tar', '-xf', $archive, '-C', $old) == 0 or die "cannot unpack $archive";
ok( PostgreSQL::Test::Utils::run_log(
		[ 'make', '-C', $old, '-s', "PG_CONFIG=$bindir/pg_config", 'lockq.so' ]),
	"lockq $OLD builds from its source");

# --- a private copy of the PostgreSQL installation ------------------------
my $inst = "$tmp/pg";
mkpath("$inst$bindir");
system('cp', '-a', "$bindir/.", "$inst$bindir/") == 0 or die "cannot copy $bindir";
for my $dir ($pkglibdir, $sharedir)
{
	mkpath(dirname("$inst$dir"));
	system('cp', '-rs', $dir, "$inst$dir") == 0 or die "cannot link $dir";
}
my $inst_lib = "$inst$pkglibdir";
my $inst_ext = "$inst$sharedir/extension";
is(`$inst$bindir/pg_config --sharedir`, "$inst$sharedir\n",
	'the copied installation finds its own share directory');

# install_lockq(so, control, sql...) replaces the copy's lockq by these.
sub install_lockq
{
	my ($so, $control, @sql) = @_;
	unlink("$inst_lib/lockq.so", glob("$inst_ext/lockq.control $inst_ext/lockq--*.sql"));
	rmtree([ glob("$inst_lib/bitcode/lockq*") ]);
	for my $f ([ $so, $inst_lib ], [ $control, $inst_ext ], map { [ $_, $inst_ext ] } @sql)
	{
		copy($f->[0], $f->[1]) or die "cannot copy $f->[0] to $f->[1]: $!";
	}
	chmod(0755, "$inst_lib/lockq.so");
	return;
}
install_lockq("$old/lockq.so", "$old/lockq.control", glob("$old/sql/lockq--*.sql"));

die "$bindir is not a bin directory" unless basename($bindir) eq 'bin';
my $node = lockq_node('upgrade',
	new => { install_path => dirname("$inst$bindir") },
	no_extension => 1);
my $connstr = $node->connstr('postgres');

# --- under 1.0: owner locks and client-side waiters ------------------------
$node->safe_psql('postgres', "CREATE EXTENSION lockq VERSION '$OLD'");
wait_for_worker($node);
is(scalar_query($node, "SELECT extversion FROM pg_extension WHERE extname = 'lockq'"),
	$OLD, "extension $OLD installed");
is(scalar_query($node, "SELECT pronamespace::regnamespace FROM pg_proc WHERE proname = 'lockq_get'"),
	'public', "$OLD keeps its functions in the schema it was created in");

# some grants come and go first: the sequence is past the held tokens
for my $i (1 .. 3)
{
	scalar_query($node, "SELECT lockq_release('upg:x', 'passing', lockq_try('upg:x', 'passing'))");
}
my $tok_a = scalar_query($node, "SELECT lockq_try('upg:a', 'owner-a', '1 hour')");
my $tok_b = scalar_query($node, "SELECT lockq_get('upg:b', 'owner-b', '1 hour')");
ok($tok_a > 0 && $tok_b > $tok_a, "owner locks taken (tokens $tok_a, $tok_b)");
# (lockq.token_seq runs ahead of the tokens issued while the server runs)
my $max_token = $tok_b;
for my $w (qw(w1 w2 w3))
{
	is(scalar_query($node,
			"SELECT lockq_enqueue('upg:a', '$w', '1 hour', 'chan_$w', '1 hour') IS NULL"),
		't', "client-side waiter $w queued");
}
my $clock = scalar_query($node, 'SELECT lockq_now()');
my $locks_sql = q{SELECT string_agg(lock_id || ' ' || owner || ' ' || token, ', ' ORDER BY lock_id) FROM %s};
my $waiters_sql = q{SELECT string_agg(owner || ' ' || position || ' ' || kind, ', ' ORDER BY position) FROM %s WHERE lock_id = 'upg:a'};
my $locks = scalar_query($node, sprintf($locks_sql, 'lockq_locks'));
is($locks, "upg:a owner-a $tok_a, upg:b owner-b $tok_b", 'the locks under 1.0');
is(scalar_query($node, sprintf($waiters_sql, 'lockq_waiters')),
	'w1 1 client, w2 2 client, w3 3 client', 'the queue under 1.0');

# --- the new client refuses the old extension -------------------------------
# lockq(args...) runs the new CLI and returns (exit status, stdout, stderr).
sub lockq
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $lockq, @_ ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}
my $too_old = qr/lockq extension 1\.0 is installed; this client needs 1\.1 or later: run ALTER EXTENSION lockq UPDATE/;
my ($rc, $out, $err) = lockq('status', '-d', $connstr);
is($rc, 69, 'lockq status against 1.0: connection error (69)');
like($err, $too_old, 'and says the extension is too old and how to update it');
($rc, $out, $err) = lockq('run', '-d', $connstr, 'upg:c', '--', 'true');
is($rc, 69, 'lockq run (liblockq) against 1.0: connection error (69)');
like($err, $too_old, 'and liblockq says why');

# --- the new library, a restart, ALTER EXTENSION UPDATE ----------------------
$node->stop;
install_lockq("$pkglibdir/lockq.so", "$sharedir/extension/lockq.control",
	glob("$sharedir/extension/lockq--*.sql"));
$node->start;

my ($ret, $stdout, $stderr) = $node->psql('postgres', "SELECT lockq_try('upg:c', 'early')");
like($stderr, qr/ALTER EXTENSION lockq UPDATE/,
	'before the update, a call with the new library says to run ALTER EXTENSION lockq UPDATE');

$node->safe_psql('postgres', 'ALTER EXTENSION lockq UPDATE');
my $new = scalar_query($node, "SELECT default_version FROM pg_available_extensions WHERE name = 'lockq'");
is(scalar_query($node, "SELECT extversion FROM pg_extension WHERE extname = 'lockq'"),
	$new, "ALTER EXTENSION lockq UPDATE: $OLD -> $new");
wait_for_worker($node);

is(scalar_query($node, sprintf($locks_sql, 'lockq.lockq_locks')), $locks,
	'the locks carried over: holders and tokens');
is(scalar_query($node, sprintf($waiters_sql, 'lockq.lockq_waiters')),
	'w1 1 client, w2 2 client, w3 3 client', 'the waiters carried over, in their order');
is(scalar_query($node, "SELECT lockq.lockq_holds('upg:b', $tok_b)"), 't',
	"owner-b's grant still holds");
cmp_ok(scalar_query($node, 'SELECT lockq.lockq_now()'), '>', $clock, 'the clock went on');

# --- everything in schema lockq, as in a new installation ---------------------
is(scalar_query($node, q{
	SELECT count(*) FROM pg_depend d
	  LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
	  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lockq')
	   AND coalesce(p.pronamespace, c.relnamespace) <> 'lockq'::regnamespace}),
	'0', 'every function, view, table and sequence of lockq is in the schema lockq');
is(scalar_query($node, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'lockq%' AND pronamespace = 'public'::regnamespace"),
	'0', 'none is left in public');

# The objects of the updated extension against a new installation's (in a
# database of its own: the lock server serves only postgres, which does not
# matter to the catalogs).
my $objects_sql = q{
	SELECT string_agg(o, E'\n' ORDER BY o) FROM (
	SELECT 'function ' || p.oid::regprocedure || ' returns ' || pg_get_function_result(p.oid)
		   || ' ' || p.provolatile::text || p.proparallel::text || p.proisstrict::text || p.prosecdef::text
		   || ' ' || coalesce(p.proconfig::text, '') || ' ' || coalesce(p.proacl::text, '')
		   || ' ' || coalesce(obj_description(p.oid, 'pg_proc'), '') AS o
	  FROM pg_proc p WHERE p.pronamespace = 'lockq'::regnamespace
	UNION ALL
	SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.relacl::text, '')
		   || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '')
		   || ' ' || CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) ELSE '' END
	  FROM pg_class c WHERE c.relnamespace = 'lockq'::regnamespace
	UNION ALL
	SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' '
		   || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
		   || ' ' || coalesce(a.attcollation::regcollation::text, '')
		   || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
	  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE c.relnamespace = 'lockq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'constraint ' || r.conrelid::regclass || ' ' || pg_get_constraintdef(r.oid)
	  FROM pg_constraint r WHERE r.connamespace = 'lockq'::regnamespace
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
	 WHERE c.relnamespace = 'lockq'::regnamespace
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid)
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = 'lockq'::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT 'schema ' || n.nspname || ' ' || coalesce(n.nspacl::text, '')
	  FROM pg_namespace n WHERE n.nspname = 'lockq') s};
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION lockq');
my $updated = $node->safe_psql('postgres', $objects_sql);
my $fresh = $node->safe_psql('fresh', $objects_sql);
like($fresh, qr/^function lockq_get\(.*^relation lockq_locks v/ms,
	'(the comparison lists functions and views)');
ok($updated eq $fresh, "the updated extension's objects are a new installation's")
  or diag(diff_lines($fresh, $updated));

# diff_lines(a, b): the lines only in a (-) and only in b (+).
sub diff_lines
{
	my ($a, $b) = @_;
	my %in_a = map { $_ => 1 } split /\n/, $a;
	my %in_b = map { $_ => 1 } split /\n/, $b;
	return join("\n",
		(map { "- $_" } grep { !$in_b{$_} } split /\n/, $a),
		(map { "+ $_" } grep { !$in_a{$_} } split /\n/, $b));
}

# --- the hand-offs: in order, with new tokens ------------------------------
is(scalar_query($node, "SELECT lockq.lockq_release('upg:a', 'owner-a', $tok_a)"), 't',
	'owner-a releases');
cmp_ok(scalar_query($node, 'SELECT last_value FROM lockq.token_seq'), '>=', $max_token,
	'the token sequence carried over');
my $last = $max_token;
for my $w (qw(w1 w2 w3))
{
	$node->poll_query_until('postgres',
		"SELECT lockq.lockq_heartbeat('upg:a', '$w') IS NOT NULL")
	  or die "$w is not granted";
	my $t = scalar_query($node,
		"SELECT token FROM lockq.lockq_locks WHERE lock_id = 'upg:a' AND owner = '$w'");
	cmp_ok($t, '>', $last, "$w granted next, with a token above every earlier one");
	is(scalar_query($node, "SELECT lockq.lockq_release('upg:a', '$w', $t)"), 't',
		"$w releases");
	$last = $t;
}

# --- the new client now works ----------------------------------------------
($rc, $out, $err) = lockq('status', '-d', $connstr, 'upg:b');
is($rc, 0, 'lockq status works after the update') or diag($err);
like($out, qr/owner-b/, 'and shows the carried-over holder');
($rc, $out, $err) = lockq('run', '-d', $connstr, 'upg:c', '--', 'true');
is($rc, 0, 'lockq run works after the update') or diag($err);

# --- and all of it survives a restart of the updated installation -----------
$node->restart;
wait_for_worker($node);
is(scalar_query($node, sprintf($locks_sql, 'lockq.lockq_locks')),
	"upg:b owner-b $tok_b", 'after a restart: the carried-over lock is still held');
cmp_ok(scalar_query($node, "SELECT lockq.lockq_try('upg:d', 'after', '1 minute')"), '>', $last,
	'and tokens still increase');

$node->stop;
done_testing();

# The Node.js client (client/node) against a real server: pg is installed
# with npm ci from client/node/package-lock.json into a copy of the module
# under this test's temporary directory, then its node:test suite
# (client/node/test) runs against a fresh node, and every test case
# becomes an assertion here.  Then the package as an application gets it:
# npm pack, installed into a fresh application next to the application's
# own pg (client/node/app/app.js runs against the node, with the debug
# log on), and tsc --strict checks an application of its TypeScript
# declarations (app/typed-app.ts).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Copy ();
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $node_version = `node --version 2>/dev/null` // '';
require_tool(
	$node_version =~ /^v(\d+)/ && $1 >= 18 && system('npm --version >/dev/null 2>&1') == 0
	  && system('tsc --version >/dev/null 2>&1') == 0,
	'Node.js 18 or later, npm and tsc (nodejs, npm, node-typescript)');

my ($dir, $npm_env, $npm_log) = node_client();
ok($dir, 'npm ci installs pg') or diag($npm_log);
my ($out, $err) = ('', '');

my $node = lockq_node('nodejs');
(my $host = $node->host) =~ s{/}{%2F}g;
my $dsn = sprintf('postgresql://%s:%d/postgres', $host, $node->port);

($out, $err) = ('', '');
IPC::Run::run([ 'node', '--test', '--test-reporter=tap', 'test/' ],
	'>', \$out, '2>', \$err,
	init => sub { $npm_env->(); $ENV{LOCKQ_TEST_DSN} = $dsn; },
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $rc = $? >> 8;

# every test case of the nested TAP output (suites are reported too)
my $n = 0;
while ($out =~ /^\s*(not ok|ok) \d+ - (.*)$/mg)
{
	ok($1 eq 'ok', "node: $2");
	$n++;
}
cmp_ok($n, '>=', 15, 'the suite ran');
like($out, qr/^# fail 0$/m, 'no test failed');
is($rc, 0, 'node --test exit status') or diag($out . $err);

# --- the package ----------------------------------------------------------------
my $tmp = PostgreSQL::Test::Utils::tempdir();
# npm(dir, args...): (exit status, stdout, stderr), with the suite's npm cache
sub npm_in
{
	my ($dir, @cmd) = @_;
	my ($o, $e) = ('', '');
	IPC::Run::run(\@cmd, '>', \$o, '2>', \$e,
		init => sub { $npm_env->(); chdir $dir or die "chdir $dir: $!"; },
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $o, $e);
}
my ($prc, $pout, $perr) = npm_in($dir, 'npm', 'pack', '--pack-destination', $tmp);
is($prc, 0, 'npm pack') or diag($pout . $perr);
my $tgz = "$tmp/lockq-" . JSON::PP->new->decode(slurp_file("$dir/package.json"))->{version} . '.tgz';
ok(-f $tgz, 'npm pack made lockq-<version>.tgz');
my @files = sort split /\n/, `tar -tzf $tgz`;
is_deeply(\@files, [ map { "package/$_" } qw(README.md lockq.d.ts lockq.js package.json) ],
	'the tarball holds the module, its types, its README and package.json');

my $app = "$tmp/app";
mkdir $app or die $!;
PostgreSQL::Test::Utils::append_to_file("$app/package.json",
	qq{{"name": "lockq-test-app", "version": "0.0.0", "private": true}\n});
File::Copy::copy("$dir/app/$_", "$app/$_") or die "copy $_: $!" for qw(app.js typed-app.ts);
my $pg_version = JSON::PP->new->decode(slurp_file("$dir/package.json"))->{devDependencies}{pg};
($prc, $pout, $perr) = npm_in($app, 'npm', 'install', '--no-audit', '--no-fund', '--ignore-scripts',
	'--prefer-offline', $tgz, "pg\@$pg_version");
is($prc, 0, 'a fresh application installs the tarball and its own pg') or diag($pout . $perr);
ok(!-e "$app/node_modules/lockq/node_modules/pg", 'lockq brings no pg of its own');

($prc, $pout, $perr) = npm_in($app, 'env', "LOCKQ_TEST_DSN=$dsn", 'NODE_DEBUG=lockq', 'node', 'app.js');
is($prc, 0, 'the application runs') or diag($pout . $perr);
like($pout, qr/^pool: acquired, extended, released\nclient: using ran with token bigint\nlost: signalled\napp done$/m,
	'pool and client sources, extend, remaining, using, a lost lease');
like($perr, qr/^LOCKQ \d+: the lease on "app:lost" \(token \d+\) was lost: a lost notice, confirmed by lockq_holds$/m,
	'NODE_DEBUG=lockq logs the lost lease and why');

($prc, $pout, $perr) = npm_in($app, 'tsc', '--strict', '--noEmit', '--target', 'es2020',
	'--lib', 'es2020,dom', '--module', 'commonjs', '--moduleResolution', 'node', 'typed-app.ts');
is($prc, 0, 'tsc --strict accepts an application of the declarations') or diag($pout . $perr);

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

# The Node.js client (client/node/lockq.js) against a real server: pg is
# installed with npm ci from client/node/package-lock.json into a copy of
# the module under this test's temporary directory, then its node:test
# suite (client/node/test) runs against a fresh node, and every test case
# becomes an assertion here.
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

my $node_version = `node --version 2>/dev/null` // '';
require_tool(
	$node_version =~ /^v(\d+)/ && $1 >= 18 && system('npm --version >/dev/null 2>&1') == 0,
	'Node.js 18 or later and npm (nodejs, npm)');

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

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

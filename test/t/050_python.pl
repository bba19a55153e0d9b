# The Python client (client/python/lockq) against a real server: its
# unittest suite (client/python/tests) runs with Debian's python3 and
# python3-psycopg / python3-psycopg-pool against a fresh node, and every
# test case becomes an assertion here.
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

my $python = '/usr/bin/python3';
require_tool(-x $python
	  && system("$python -c 'import psycopg, psycopg_pool' >/dev/null 2>&1") == 0,
	"$python with psycopg 3 and psycopg_pool (python3-psycopg, python3-psycopg-pool)");

my $node = lockq_node('python');
my $dir = "$ENV{TESTDIR}/client/python";

my ($out, $err) = ('', '');
# -P and the directory: the tree's root holds lockq.so, the server's module,
# which Python would otherwise import as "lockq".
IPC::Run::run([ $python, '-P', '-W', 'ignore::ResourceWarning', '-m', 'unittest', 'discover', '-v', '-s', "$dir/tests" ],
	'>', \$out, '2>', \$err,
	init => sub {
		chdir $dir or die "chdir $dir: $!";
		$ENV{LOCKQ_TEST_DSN} = $node->connstr('postgres');
		$ENV{PYTHONPATH} = "$dir:$dir/tests";
		$ENV{PYTHONDONTWRITEBYTECODE} = 1;
	},
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $rc = $? >> 8;

# unittest -v writes "test_x (module.Class.test_x) ... ok" (or FAIL, ERROR)
my $n = 0;
while ($err =~ /^(test\w+) \(([\w.]+)\)\s*(?:\n.*?)?\.\.\. (ok|FAIL|ERROR|skipped.*)$/mg)
{
	my ($test, $where, $result) = ($1, $2, $3);
	ok($result eq 'ok', "$where: $result");
	$n++;
}
cmp_ok($n, '>=', 28, 'the suite ran');
is($rc, 0, 'unittest exit status') or diag($err);

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

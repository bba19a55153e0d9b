# The Python client (client/python) as a user gets it: the wheel built
# from its pyproject.toml with Debian's python3-build and
# python3-setuptools (offline, no isolation), installed with
# python3-installer into a directory of its own; then its unittest suite
# (client/python/tests) runs with Debian's python3 and python3-psycopg /
# python3-psycopg-pool against the installed copy and a fresh node, and
# every test case becomes an assertion here; and mypy --strict checks an
# application that uses the typed API (tests/typed_app.py) against it.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Find;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $python = '/usr/bin/python3';
require_tool(-x $python
	  && system("$python -c 'import psycopg, psycopg_pool, build, installer' >/dev/null 2>&1") == 0
	  && system('mypy --version >/dev/null 2>&1') == 0,
	"$python with psycopg 3, psycopg_pool, build and installer, and mypy (python3-psycopg, python3-psycopg-pool, python3-build, python3-installer, mypy)");

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $src = "$ENV{TESTDIR}/client/python";
my $tests = "$src/tests";

# run(dir, command...): (exit status, stdout, stderr) of command run in dir
sub run_in
{
	my ($dir, @cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err,
		init => sub { chdir $dir or die "chdir $dir: $!"; $ENV{PYTHONDONTWRITEBYTECODE} = 1; },
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

# --- the package --------------------------------------------------------------
PostgreSQL::Test::RecursiveCopy::copypath($src, "$tmp/src");
my ($rc, $out, $err) = run_in("$tmp/src", $python, '-m', 'build', '--wheel', '--no-isolation');
is($rc, 0, 'python3 -m build --wheel') or diag($out . $err);
my ($wheel) = glob("$tmp/src/dist/lockq-*-py3-none-any.whl");
ok(defined $wheel, 'a pure-Python wheel was built');
($rc, $out, $err) = run_in($tmp, $python, '-m', 'installer', '--destdir', "$tmp/root", $wheel // '-');
is($rc, 0, 'python3 -m installer') or diag($out . $err);
my $site;
find(sub { $site = $File::Find::dir if $_ eq 'py.typed' && $File::Find::dir =~ m{/lockq$} }, "$tmp/root");
ok(defined $site, 'the installed package has py.typed');
$site =~ s{/lockq$}{} if defined $site;
$site //= "$tmp/root";

($rc, $out, $err) = run_in($tmp, 'env', "PYTHONPATH=$site", $python, '-P', '-c',
	'import lockq, lockq.aio; print(lockq.__file__)');
like($out, qr{^\Q$site\E/lockq/__init__\.py$}m, 'lockq is imported from the installed copy') or diag($err);

# --- its type hints -------------------------------------------------------------
my $ini = "$tmp/mypy.ini";
PostgreSQL::Test::Utils::append_to_file($ini,
	"[mypy]\nstrict = True\ncache_dir = $tmp/mypy-cache\n[mypy-lockq.*]\nignore_errors = True\n");
($rc, $out, $err) = run_in($tmp, 'env', "MYPYPATH=$site", 'mypy', '--config-file', $ini, "$tests/typed_app.py");
is($rc, 0, 'mypy --strict accepts an application of the typed API') or diag($out . $err);

my $node = lockq_node('python');

# -P: the tree's root holds lockq.so, the server's module, which Python
# would otherwise import as "lockq" from the current directory.
IPC::Run::run([ $python, '-P', '-W', 'ignore::ResourceWarning', '-m', 'unittest', 'discover', '-v', '-s', $tests ],
	'>', \$out, '2>', \$err,
	init => sub {
		chdir $tmp or die "chdir $tmp: $!";
		$ENV{LOCKQ_TEST_DSN} = $node->connstr('postgres');
		$ENV{PYTHONPATH} = "$site:$tests";
		$ENV{PYTHONDONTWRITEBYTECODE} = 1;
	},
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
$rc = $? >> 8;

# unittest -v writes "test_x (module.Class.test_x) ... ok" (or FAIL, ERROR)
my $n = 0;
while ($err =~ /^(test\w+) \(([\w.]+)\)\s*(?:\n.*?)?\.\.\. (ok|FAIL|ERROR|skipped.*)$/mg)
{
	my ($test, $where, $result) = ($1, $2, $3);
	ok($result eq 'ok', "$where: $result");
	$n++;
}
cmp_ok($n, '>=', 32, 'the suite ran');
is($rc, 0, 'unittest exit status') or diag($err);

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

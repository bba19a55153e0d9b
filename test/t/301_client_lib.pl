# liblockq against a real server: the C test program's scenarios
# (client/test/lockqc_test.c), each "ok"/"not ok" line relayed as an
# assertion, waiting in the backend (lockq_await) and, told not to, on
# NOTIFY; two scenarios where the server is stopped or restarted under a
# held lock; and the same scenarios under valgrind's memcheck.
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

my $prog = "$ENV{TESTDIR}/client/test/lockqc_test";
require_tool(-x $prog, "$prog not built");

my $node = lockq_node('clientlib');
my $connstr = $node->connstr('postgres');

# relay(name, output): every "ok - x" / "not ok - x" line becomes a test.
sub relay
{
	my ($name, $out) = @_;
	my $n = 0;
	for my $line (split /\n/, $out)
	{
		next unless $line =~ /^(ok|not ok) - (.*)$/;
		ok($1 eq 'ok', "$name: $2");
		$n++;
	}
	ok($n > 0, "$name: produced results");
}

sub run_scenario
{
	my ($scenario, @wrapper) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ @wrapper, $prog, $scenario, $connstr ],
		'>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $rc = $? >> 8;
	return ($rc, $out, $err);
}

my @scenarios = qw(basic fifo timeout cancel deadline threads handoff await lost_admin watchdog extend);
for my $scenario (@scenarios)
{
	my ($rc, $out, $err) = run_scenario($scenario);
	relay($scenario, $out);
	is($rc, 0, "$scenario: exit status") or diag($err);
}

# The same with the library told never to wait in the backend
# (lockq_await): every wait on NOTIFY and heartbeats, as with several waits
# on a connection, behind a pooler, or against extension 1.1.
{
	local $ENV{LOCKQC_NO_AWAIT} = '1';
	for my $scenario (@scenarios)
	{
		my ($rc, $out, $err) = run_scenario($scenario);
		relay("$scenario (NOTIFY)", $out);
		is($rc, 0, "$scenario (NOTIFY): exit status") or diag($err);
	}
}

# --- the server stops under a held lock: the callback fires ------------------
{
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ $prog, 'lost_stop', $connstr ],
		'<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$h->pump until $out =~ /READY/;
	$node->stop('immediate');
	$h->finish;
	relay('lost_stop', $out);
	is($? >> 8, 0, 'lost_stop: exit status') or diag($err);
	$node->start;
	$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
	$node->safe_psql('postgres', "SELECT lockq_force_release('S')");
}

# --- the server restarts: the library reconnects and carries on -------------
# (also with a multi-host conninfo whose first host is gone, as after a
# failover: libpq tries the hosts in turn and takes the read-write one)
my $multi = sprintf("host=%s/gone,%s port=%d,%d dbname=postgres target_session_attrs=read-write",
	$node->host, $node->host, $node->port, $node->port);
for my $ci ($connstr, $multi)
{
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ $prog, 'reconnect', $ci ],
		'<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$h->pump until $out =~ /READY/;
	$node->restart;
	$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
	$in .= "GO\n";
	$h->finish;
	my $name = $ci eq $multi ? 'reconnect (multi-host)' : 'reconnect';
	relay($name, $out);
	is($? >> 8, 0, "$name: exit status") or diag($err);
}

# --- the installed library: header, pkg-config, shared object -------------
SKIP:
{
	my $installed = system('pkg-config --exists lockq') == 0;
	fail('liblockq is installed under make test (pkg-config lockq)')
	  if !$installed && $ENV{LOCKQ_MAKE_TEST};
	skip 'liblockq is not installed (pkg-config lockq)', 3 unless $installed;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	open(my $fh, '>', "$dir/uses_lockq.c") or die $!;
	print $fh <<'C';
#include <stdio.h>
#include <lockq_client.h>
int main(int argc, char **argv)
{
	char *err = NULL;
	lockqc_conn *c = lockqc_connect(argv[1], &err);
	lockqc_handle *h;
	printf("version %s\n", lockqc_version());
	if (c == NULL) { fprintf(stderr, "%s", err); return 1; }
	if (lockqc_lock(c, "installed", NULL, &h) != LOCKQC_OK) return 2;
	printf("token %lld\n", (long long) lockqc_token(h));
	if (lockqc_unlock(h) != LOCKQC_OK) return 3;
	lockqc_disconnect(c);
	return 0;
}
C
	close $fh;
	my $flags = `pkg-config --cflags --libs lockq`;
	chomp $flags;
	is(system("cc -o $dir/uses_lockq $dir/uses_lockq.c $flags"), 0,
		'a program builds against the installed header and pkg-config file');
	my ($out, $err) = ('', '');
	IPC::Run::run([ "$dir/uses_lockq", $connstr ], '>', \$out, '2>', \$err);
	like($out, qr/^token \d+$/m, 'and runs against the installed shared library') or diag($err);
	my $control = PostgreSQL::Test::Utils::slurp_file("$ENV{TESTDIR}/lockq.control");
	my ($version) = $control =~ /^default_version\s*=\s*'([^']*)'/m;
	like($out, qr/^version \Q$version\E$/m, "lockqc_version() is lockq.control's version ($version)");
}

# --- memcheck ---------------------------------------------------------------
SKIP:
{
	my $have = system('valgrind --version >/dev/null 2>&1') == 0;
	fail('valgrind is installed under make test') if !$have && $ENV{LOCKQ_MAKE_TEST};
	skip 'valgrind not installed', 1 unless $have;
	for my $scenario (qw(basic fifo timeout cancel threads lost_admin extend))
	{
		my ($rc, $out, $err) = run_scenario($scenario, 'valgrind', '--quiet',
			'--error-exitcode=99', '--leak-check=full',
			'--errors-for-leak-kinds=definite,indirect',
			'--show-leak-kinds=definite,indirect');
		relay("valgrind $scenario", $out);
		is($rc, 0, "valgrind $scenario: no memory errors or leaks") or diag($err);
	}
}

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

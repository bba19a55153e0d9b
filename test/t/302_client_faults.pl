# liblockq when the network misbehaves (issue 10): the library's own
# backend stopped with SIGSTOP (calls keep their timeouts, unlock and
# disconnect return, a lease is renewed over a new connection); a TCP proxy
# that black-holes traffic as the first host of a multi-host conninfo (the
# lease and a queued wait come through over the second host); a proxy that
# loses replies (the grant and the wait the library never heard of are
# withdrawn after the reconnect); the API details (ttl 0 is an error,
# timeout 0 means do not wait, lockqc_sqlstate, application_name, the
# atomic cancel flag); a wait the server dropped is reported; and
# lockqc_disconnect racing with a waiting thread or called from the
# lost-lease callback, also under valgrind.
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
use LockqProxy;

my $prog = "$ENV{TESTDIR}/client/test/lockqc_test";
if (!-x $prog)
{
	die "$prog not built" if $ENV{LOCKQ_MAKE_TEST};
	plan skip_all => "$prog not built";
}

my $node = lockq_node('clientfaults', conf => "listen_addresses = '127.0.0.1'\n");
my $connstr = $node->connstr('postgres');
my $port = $node->port;

sub relay
{
	my ($name, $out) = @_;
	my $n = 0;
	for my $line (split /\n/, $out)
	{
		note "$name: $1" if $line =~ /^# (MEASURE .*)$/;
		next unless $line =~ /^(ok|not ok) - (.*)$/;
		ok($1 eq 'ok', "$name: $2");
		$n++;
	}
	ok($n > 0, "$name: produced results");
}

sub run_scenario
{
	my ($scenario, $ci, $extra, @wrapper) = @_;
	my ($out, $err) = ('', '');
	# a scenario that hangs is killed and fails, and the others still run
	my $h = IPC::Run::start([ @wrapper, $prog, $scenario, $ci, defined $extra ? ($extra) : () ],
		'>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $finished = eval { $h->finish; 1 };
	$h->kill_kill unless $finished;
	ok($finished, "$scenario: finished in time");
	relay($scenario . (@wrapper ? " ($wrapper[0])" : ''), $out);
	is($finished ? ($h->results)[0] : -1, 0, "$scenario: exit status") or diag($err);
}

for my $scenario (qw(api dropped disconnect_waiter disconnect_callback stall))
{
	run_scenario($scenario, $connstr);
}

# --- a system suspend (simulated: CLOCK_BOOTTIME jumps) ends a local lease ---
{
	my $shim = "$ENV{TESTDIR}/client/test/boottime_shim.so";
	die "$shim not built" unless -f $shim;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LQ_BOOT_OFFSET_FILE} = "$dir/boot_offset";
	run_scenario('boottime', $connstr);
}

# --- the first host vanishes without a reset --------------------------------
{
	my ($ppid, $pport) = start_proxy($port);
	my $direct = "host=127.0.0.1 port=$port dbname=postgres";
	local $ENV{LOCKQC_DIRECT} = $direct;
	run_scenario('proxy_failover',
		"host=127.0.0.1,127.0.0.1 port=$pport,$port dbname=postgres target_session_attrs=read-write connect_timeout=2",
		$ppid);
	stop_proxy($ppid);
}

# --- replies lost: what the server did is undone after the reconnect ---------
{
	my ($ppid, $pport) = start_proxy($port);
	local $ENV{LOCKQC_DIRECT} = "host=127.0.0.1 port=$port dbname=postgres";
	run_scenario('proxy_blackhole_wait', "host=127.0.0.1 port=$pport dbname=postgres", $ppid);
	stop_proxy($ppid);
}

{
	my ($ppid, $pport) = start_proxy($port);
	local $ENV{LOCKQC_DIRECT} = "host=127.0.0.1 port=$port dbname=postgres";
	run_scenario('proxy_lostreply', "host=127.0.0.1 port=$pport dbname=postgres connect_timeout=2",
		$ppid);
	stop_proxy($ppid);
}

# --- memcheck of the disconnect races -------------------------------------------
if (system('valgrind --version >/dev/null 2>&1') != 0)
{
	die 'valgrind is not installed' if $ENV{LOCKQ_MAKE_TEST};
}
else
{
	for my $scenario (qw(disconnect_waiter disconnect_callback api))
	{
		run_scenario($scenario, $connstr, undef, 'valgrind', '--quiet',
			'--error-exitcode=99', '--leak-check=full',
			'--errors-for-leak-kinds=definite,indirect',
			'--show-leak-kinds=definite,indirect');
	}
}

$node->poll_query_until('postgres', "SELECT holders || '/' || waiters = '0/0' FROM lockq_stats")
  or diag($node->safe_psql('postgres', 'SELECT * FROM lockq_locks'));
is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

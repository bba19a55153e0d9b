# One fault matrix for the clients (issue 22): Python (threads), Python
# (asyncio), Node.js and the lockq CLI (on liblockq), each driven by a
# small agent (client/python/tools/agent.py, client/node/tools/agent.js,
# test/cli-agent.pl) that holds a lock and does "protected work" as an
# application would: it reads the wall clock, then checks the lease, and
# counts the time as work only if the lease was held (under lockq run, the
# command is the work, and lockq stops it).  Every client meets every
# fault:
#
#   blackhole     the network to the server drops everything, no reset
#   stop_backend  the server backend of its connection is SIGSTOPped
#   stop_client   the client process itself is SIGSTOPped, then continued
#                 after the next holder was granted
#   wait_timeout  it waits with a 2 s timeout while the network drops
#                 everything
#
# and each row checks the same properties: (a) no protected work after the
# next holder (B, from SQL) was granted, with the margin; (b) a call ends
# within its documented bound (a 2 s timeout: within 1 s more; the CLI,
# which also closes its connection, 3 s); (c) nothing is left held or
# queued on the server afterwards.  040_client_faults and 041_cli_faults
# have more faults for the C library and the CLI.
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
use LockqTest;
use LockqProxy;

my $node = lockq_node('matrix', conf => "listen_addresses = '127.0.0.1'\n");
my $port = $node->port;

# the clients that can run here
my %clients;
my $python = '/usr/bin/python3';
if (-x $python && system("$python -c 'import psycopg' >/dev/null 2>&1") == 0)
{
	my $pydir = "$ENV{TESTDIR}/client/python";
	for my $mode (qw(sync asyncio))
	{
		$clients{"python-$mode"} = {
			cmd => sub { [ $python, '-P', "$pydir/tools/agent.py", $mode,
				"host=127.0.0.1 port=$_[0] dbname=postgres application_name=$_[1]" ] },
			init => sub { $ENV{PYTHONPATH} = $pydir },
			timeout_error => 'LockTimeout',
			slack => 1000 };
	}
}
else
{
	die 'python3 with psycopg is not installed' if $ENV{LOCKQ_MAKE_TEST};
}
my $node_version = `node --version 2>/dev/null` // '';
if ($node_version =~ /^v(\d+)/ && $1 >= 18 && system('npm --version >/dev/null 2>&1') == 0)
{
	my ($ndir, $npm_env, $npm_log) = node_client();
	ok($ndir, 'npm ci installs pg') or diag($npm_log);
	$clients{node} = {
		cmd => sub { [ 'node', 'tools/agent.js', "postgresql://127.0.0.1:$_[0]/postgres?application_name=$_[1]" ] },
		init => $npm_env,
		timeout_error => 'LockTimeoutError',
		slack => 1000 } if $ndir;
}
else
{
	die 'Node.js is not installed' if $ENV{LOCKQ_MAKE_TEST};
}

my $lockq = "$ENV{TESTDIR}/client/lockq";
if (-x $lockq)
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	$clients{cli} = {
		cmd => sub { [ $^X, "$ENV{TESTDIR}/test/cli-agent.pl", $lockq, $_[0], $_[1], $dir ] },
		init => sub { },
		timeout_error => 'timeout',
		slack => 3000 };
}
else
{
	die "$lockq not built" if $ENV{LOCKQ_MAKE_TEST};
}

# start_agent(client, port, application_name): the agent, connected to
# 127.0.0.1:port, with its pipes
sub start_agent
{
	my ($client, $to, $app) = @_;
	my $c = $clients{$client};
	my $a = { in => '', out => '', err => '' };
	my $cmd = $c->{cmd}->($to, $app);
	$a->{h} = IPC::Run::start($cmd, '<', \$a->{in}, '>', \$a->{out}, '2>', \$a->{err},
		init => $c->{init}, IPC::Run::timeout(120));
	return $a;
}

sub tell_agent
{
	my ($a, $line) = @_;
	$a->{in} .= "$line\n";
	$a->{h}->pump_nb;
}

# expect(agent, regex, seconds): the captures of the first line matching
sub expect
{
	my ($a, $re, $secs) = @_;
	my $end = time() + $secs;
	while (time() < $end)
	{
		$a->{h}->pump_nb;
		return [ $1, $2, $3 ] if $a->{out} =~ $re;
		select(undef, undef, undef, 0.01);
	}
	diag("agent said: $a->{out}$a->{err}");
	return undef;
}

sub end_agent
{
	my ($a) = @_;
	tell_agent($a, 'quit');
	eval { $a->{h}->finish; 1 } or $a->{h}->kill_kill;
}

# b_takes(lock): B waits for the lock from SQL; returns when it was granted
# (lockq's acquired, in ns since the epoch)
sub b_takes
{
	my ($lock) = @_;
	scalar_query($node, "SELECT lockq_get('$lock', 'B', '1 minute', timeout => '60 s')");
	return scalar_query($node,
		"SELECT (extract(epoch FROM acquired) * 1000000)::bigint * 1000 FROM lockq_locks WHERE lock_id = '$lock'");
}

sub nothing_left
{
	my ($row) = @_;
	ok($node->poll_query_until('postgres',
			"SELECT holders = 0 AND waiters = 0 FROM lockq_stats"),
		"$row: (c) nothing left held or queued");
}

for my $client (sort keys %clients)
{
	for my $fault (qw(blackhole stop_backend stop_client))
	{
		my $row = "$client, $fault";
		my $lock = "M-$client-$fault";
		(my $app = "agent_$client" . "_$fault") =~ s/-/_/g;
		my ($ppid, $pport) = $fault eq 'blackhole' ? start_proxy($port) : ();
		my $a = start_agent($client, $ppid ? $pport : $port, $app);
		tell_agent($a, "acquire $lock 3000 -1 3000");
		my $acq = expect($a, qr/^acquired (\d+) (\d+)$/m, 30);
		ok($acq, "$row: A holds (ttl 3 s)");
		my $apid = $acq ? $acq->[1] : 0;
		my $backend = scalar_query($node,
			"SELECT pid FROM pg_stat_activity WHERE application_name = '$app'");
		if ($fault eq 'blackhole')
		{
			kill 'USR1', $ppid;
		}
		elsif ($fault eq 'stop_backend')
		{
			kill 'STOP', $backend;
		}
		else
		{
			kill 'STOP', $apid;
		}
		my $b_ns = b_takes($lock);
		kill 'CONT', $apid if $fault eq 'stop_client';
		my $stopped = expect($a, qr/^stopped (\d+)$/m, 30);
		ok($stopped && $stopped->[0] < $b_ns,
			"$row: (a) A's protected work stopped before B was granted");
		note sprintf('%s: A last worked %.1f ms before B was granted', $row, ($b_ns - $stopped->[0]) / 1e6)
		  if $stopped;
		kill 'CONT', $backend if $fault eq 'stop_backend';
		end_agent($a);
		stop_proxy($ppid) if $ppid;
		scalar_query($node, "SELECT lockq_release('$lock', 'B')");
		nothing_left($row);
	}

	# (b) a wait with a timeout while the network drops everything
	{
		my $row = "$client, wait_timeout";
		my $lock = "M-$client-wait";
		(my $app = "agent_$client" . "_wait") =~ s/-/_/g;
		scalar_query($node, "SELECT lockq_try('$lock', 'holder', '1 hour')");
		my ($ppid, $pport) = start_proxy($port);
		my $a = start_agent($client, $pport, $app);
		tell_agent($a, "acquire $lock-warm 3000 -1 3000");
		expect($a, qr/^acquired (\d+) (\d+)$/m, 30);
		tell_agent($a, 'release');
		expect($a, qr/^released/m, 30);
		$a->{out} = '';
		# queued, then the network drops everything
		tell_agent($a, "acquire $lock 3000 2000 3000");
		wait_for_waiters($node, $lock, 1);
		kill 'USR1', $ppid;
		my $failed = expect($a, qr/^failed (\w+) (\d+)$/m, 30);
		my $slack = $clients{$client}{slack};
		is($failed && $failed->[0], $clients{$client}{timeout_error}, "$row: the wait times out");
		ok($failed && $failed->[1] < 2000 + $slack + 500,
			"$row: (b) within the timeout (2 s) and ${slack} ms")
		  and note sprintf('%s: returned after %d ms', $row, $failed->[1]);
		end_agent($a);
		stop_proxy($ppid);
		scalar_query($node, "SELECT lockq_release('$lock', 'holder')");
		nothing_left($row);
	}
}

ok(scalar(keys %clients) >= 1, 'the matrix ran for ' . join(', ', sort keys %clients));
$node->stop;
done_testing();

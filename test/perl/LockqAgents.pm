# test/perl/LockqAgents.pm
#
# The clients' agents for the fault matrix (309_client_matrix) and the
# failover rows (310_client_failover): one small program per client that
# holds locks as an application does and answers line commands (see
# client/python/tools/agent.py):
#
#   c               client/test/lockqc_agent (liblockq)
#   python-sync     client/python/tools/agent.py sync
#   python-asyncio  client/python/tools/agent.py asyncio
#   node            client/node/tools/agent.js
#   go              client/go/tools/agent (built in go_client's GOPATH)
#   cli             test/cli-agent.pl (lockq run; the command is the work)
#
# agent_clients() returns the clients that can run here (under make test,
# every one must); start_agent(client, dsn, url, pooled) starts one, with
# dsn a libpq conninfo (a multi-host one too) and url the URI that Node's
# pg takes; pooled: the language clients use a pool (psycopg_pool, pg.Pool)
# rather than one connection.  agent_says(agent, regex, seconds) returns
# the captures of its first output line that matches; cli_last_work(lock)
# the last line the CLI agent's command for lock wrote.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

package LockqAgents;

use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils ();
use Test::More;
use Time::HiRes qw(time);
use LockqTest;

use Exporter 'import';
our @EXPORT = qw(agent_clients start_agent tell_agent agent_says end_agent cli_last_work
  cli_wait_work);

my %clients;

# agent_clients(): the clients, by name; each has cmd (a sub of dsn, url,
# pooled giving the command), init (for IPC::Run), timeout_error (the name
# of the error a timed-out wait reports), slack (how far past its timeout a
# wait may return, ms), blocks (the "blocked" fault applies: an event loop
# or the GIL) and, for the CLI, dir (where its command writes its work).
sub agent_clients
{
	return %clients if %clients;
	my $cagent = "$ENV{TESTDIR}/client/test/lockqc_agent";
	if (-x $cagent)
	{
		$clients{c} = {
			cmd => sub { [ $cagent, $_[0] ] },
			init => sub { },
			timeout_error => 'timeout',
			slack => 1000 };
	}
	else
	{
		die "$cagent not built" if $ENV{LOCKQ_MAKE_TEST};
	}
	my $python = '/usr/bin/python3';
	if (-x $python && system("$python -c 'import psycopg, psycopg_pool' >/dev/null 2>&1") == 0)
	{
		my $pydir = "$ENV{TESTDIR}/client/python";
		for my $mode (qw(sync asyncio))
		{
			$clients{"python-$mode"} = {
				cmd => sub { [ $python, '-P', "$pydir/tools/agent.py", $mode, $_[0], ($_[2] ? 'pool' : ()) ] },
				init => sub { $ENV{PYTHONPATH} = $pydir },
				timeout_error => 'LockTimeout',
				blocks => 1,
				slack => 1000 };
		}
	}
	else
	{
		die 'python3 with psycopg and psycopg_pool is not installed' if $ENV{LOCKQ_MAKE_TEST};
	}
	my $node_version = `node --version 2>/dev/null` // '';
	if ($node_version =~ /^v(\d+)/ && $1 >= 18 && system('npm --version >/dev/null 2>&1') == 0)
	{
		my ($ndir, $npm_env, $npm_log) = node_client();
		ok($ndir, 'npm ci installs pg') or diag($npm_log);
		$clients{node} = {
			cmd => sub { [ 'node', 'tools/agent.js', $_[1], ($_[2] ? 'pool' : ()) ] },
			init => $npm_env,
			timeout_error => 'LockTimeoutError',
			blocks => 1,
			slack => 1000 } if $ndir;
	}
	else
	{
		die 'Node.js is not installed' if $ENV{LOCKQ_MAKE_TEST};
	}
	my $gopath = go_client();
	if ($gopath)
	{
		my $bin = "$gopath/bin/lockq-agent";
		my ($rc, $out) = go_run('build', '-o', $bin, 'lockq/tools/agent');
		is($rc, 0, 'the Go agent builds') or diag($out);
		$clients{go} = {
			cmd => sub { [ $bin, $_[0], ($_[2] ? 'pool' : ()) ] },
			init => sub { },
			timeout_error => 'DeadlineExceeded',
			slack => 1000 } if $rc == 0;
	}
	else
	{
		die 'go and pgx v4 are not installed' if $ENV{LOCKQ_MAKE_TEST};
	}
	my $lockq = "$ENV{TESTDIR}/client/lockq";
	if (-x $lockq)
	{
		my $dir = PostgreSQL::Test::Utils::tempdir();
		$clients{cli} = {
			dir => $dir,
			cmd => sub { [ $^X, "$ENV{TESTDIR}/test/cli-agent.pl", $lockq, $_[0], $dir ] },
			init => sub { },
			timeout_error => 'timeout',
			slack => 3000 };
	}
	else
	{
		die "$lockq not built" if $ENV{LOCKQ_MAKE_TEST};
	}
	return %clients;
}

# start_agent(client, dsn, url, pooled): the agent, with its pipes
sub start_agent
{
	my ($client, $dsn, $url, $pooled) = @_;
	my $c = $clients{$client};
	my $a = { in => '', out => '', err => '' };
	$a->{h} = IPC::Run::start($c->{cmd}->($dsn, $url, $pooled),
		'<', \$a->{in}, '>', \$a->{out}, '2>', \$a->{err},
		init => $c->{init}, IPC::Run::timeout(180));
	return $a;
}

sub tell_agent
{
	my ($a, $line) = @_;
	$a->{in} .= "$line\n";
	$a->{h}->pump_nb;
}

# agent_says(agent, regex, seconds[, quiet]): the captures of the first line
# matching; undef after seconds (and, unless quiet, what it said, as diag)
sub agent_says
{
	my ($a, $re, $secs, $quiet) = @_;
	my $end = time() + $secs;
	while (time() < $end)
	{
		$a->{h}->pump_nb;
		return [ $1, $2, $3 ] if $a->{out} =~ $re;
		select(undef, undef, undef, 0.01);
	}
	diag("agent said: $a->{out}$a->{err}") unless $quiet;
	return undef;
}

# cli_last_work(lock): the wall-clock ns of the last work the CLI agent's
# command did under lock (its file's last line), 0 if none
sub cli_last_work
{
	my ($lock) = @_;
	open(my $f, '<', "$clients{cli}{dir}/$lock.work") or return 0;
	my @l = <$f>;
	close $f;
	chomp(my $last = $l[-1] // '0');
	return $last;
}

# cli_wait_work(lock): polls until the CLI agent's command has done work
# under lock (it reports "acquired" before its first line); false if not
# within the default timeout
sub cli_wait_work
{
	my ($lock) = @_;
	return poll_until(sub { cli_last_work($lock) > 0 });
}

sub end_agent
{
	my ($a) = @_;
	eval { tell_agent($a, 'quit'); 1 };
	eval { $a->{h}->finish; 1 } or $a->{h}->kill_kill;
}

1;

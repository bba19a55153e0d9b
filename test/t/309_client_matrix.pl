# One fault matrix for the clients (issue 22): the C library, Python
# (threads), Python (asyncio), Node.js, Go and the lockq CLI, each driven
# by a small agent (client/test/lockqc_agent.c, client/python/tools/agent.py,
# client/node/tools/agent.js, client/go/tools/agent, test/cli-agent.pl)
# that holds a lock and does
# "protected work" as an application would: it reads the wall clock, then
# checks the lease, and counts the time as work only if the lease was held
# (under lockq run, the command is the work, and lockq stops it).  Every
# client meets every fault it can meet:
#
#   blackhole     the network to the server drops everything, no reset
#                 (LockqProxy)
#   noreply       requests reach the server, every answer is dropped (the
#                 renewals extend the lease there, unknown to the client)
#   cut           the next answer is cut off with a reset (the connection
#                 breaks in the middle of a renewal's reply)
#   delay         everything arrives a second late, each way: a renewal's
#                 answer comes 2 s after it was sent, under a 3 s lease (a
#                 client that counted its lease from the answer, not from
#                 the request, would work past the server's lease)
#   stop_server   the lock server (the background worker) is SIGSTOPped
#                 until A reports its lease gone (for lockq run: lockq has
#                 stopped its command and exited), which must be within
#                 10 s
#   stop_backend  the server backends of its connections are SIGSTOPped
#   stop_client   the client process itself is SIGSTOPped, then continued
#                 after the next holder was granted
#   pooled_stop   stop_client with the client behind pgbouncer in
#                 transaction mode (no NOTIFY reaches it)
#   blocked       the process's event loop (asyncio, Node) or, for Python
#                 threads, every thread (the GIL held) blocked for 5 s
#                 under a 3 s lease; the C library, Go and the CLI renew
#                 from threads, goroutines (preempted) and processes of
#                 their own, and stop_client is their case
#   kill9         kill -9 of the client process (for the CLI: lockq, whose
#                 command must die with it)
#   wait_timeout  it waits with a 2 s timeout while the network drops
#                 everything
#   cancel        a wait cancelled at a sweep of moments: while the lock is
#                 free (the enqueue in flight), busy (the wait and its
#                 heartbeats) and being handed over (racing the grant)
#
# and each row checks the same properties: (a) no protected work after the
# next holder (B, from SQL) was granted, with the margin; (b) a call ends
# within its documented bound (a 2 s timeout or a cancel: within 1 s more;
# the CLI, which also closes its connection, 3 s); (c) nothing is left held
# or queued on the server afterwards, and no connection of a client that
# is gone.  302_client_faults and 306_cli_faults have more faults for the C
# library and the CLI; 310_client_failover has switchover and failover.
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
use LockqAgents;

my $node = lockq_node('matrix', conf => "listen_addresses = '127.0.0.1'\n");
my $port = $node->port;
require_tool(-x '/usr/sbin/pgbouncer', 'pgbouncer not installed');
my $bouncer = start_pgbouncer($node);

my %clients = agent_clients();

# agent(client, port, application_name): an agent connected to
# 127.0.0.1:port
sub agent
{
	my ($client, $to, $app) = @_;
	return start_agent($client, "host=127.0.0.1 port=$to dbname=postgres application_name=$app",
		"postgresql://127.0.0.1:$to/postgres?application_name=$app");
}

# b_takes(lock, agent, row): B waits for the lock from SQL, queued right
# after the fault; returns when it was granted (lockq's acquired, in ns
# since the epoch).  A client that reconnects (the C library, the CLI, a
# pool) may keep its lease through a new connection, and then renews it:
# once the lease on the server was renewed after the fault, A is told to
# release, and B comes after that.
sub b_takes
{
	my ($lock, $a, $row) = @_;
	my $fault = scalar_query($node, 'SELECT clock_timestamp()');
	my $b = start_waiter($node, 'B', "SELECT 'b=' || lockq_get('$lock', 'B', '1 minute', timeout => '60 s');");
	$node->poll_query_until('postgres', qq{
		SELECT owner = 'B' OR expires > '$fault'::timestamptz + ttl
		  FROM lockq_locks WHERE lock_id = '$lock'})
	  or die "$row: neither was B granted nor A's lease renewed";
	if (scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = '$lock'") ne 'B')
	{
		note "$row: the lease was renewed on the server after the fault; A is told to release";
		tell_agent($a, 'release');
	}
	is(waiter_result($b, qr/b=(\d+)/) ? 'granted' : 'not granted', 'granted', "$row: B is granted");
	end_session($b);
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

# the proxy's signal for each network fault (LockqProxy)
my %proxy_signal = (blackhole => 'USR1', noreply => 'USR2', cut => 'WINCH', delay => 'PROF');

# no_process(pattern): true once no process's command line matches
sub no_process
{
	my ($pattern) = @_;
	my $end = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $end)
	{
		system('pgrep', '-f', '--', $pattern) == 0 or return 1;
		select(undef, undef, undef, 0.05);
	}
	return 0;
}

for my $client (sort keys %clients)
{
	my $c = $clients{$client};
	for my $fault (qw(blackhole noreply cut delay stop_backend stop_server stop_client pooled_stop blocked kill9))
	{
		next if $fault eq 'blocked' && !$c->{blocks};
		my $row = "$client, $fault";
		my $lock = "M-$client-$fault";
		(my $app = "agent_$client" . "_$fault") =~ s/-/_/g;
		my ($ppid, $pport) = $proxy_signal{$fault} ? start_proxy($port) : ();
		my $to = $ppid ? $pport : $fault eq 'pooled_stop' ? $bouncer->port : $port;
		my $a = agent($client, $to, $app);
		tell_agent($a, "acquire $lock 3000 -1 3000");
		my $acq = agent_says($a, qr/^acquired (\d+) (\d+)$/m, 30);
		ok($acq, "$row: A holds (ttl 3 s)");
		my $apid = $acq ? $acq->[1] : 0;
		# the fault must meet the command at work, for (a) to mean anything
		ok(cli_wait_work($lock), "$row: A's command works under the lease") if $client eq 'cli';
		# every backend of the client: one connection, or (Go) its pool's
		# and its listener's
		my @backends = $fault eq 'stop_backend' ? split(/\n/, scalar_query($node,
			"SELECT pid FROM pg_stat_activity WHERE application_name = '$app'")) : ();
		if ($ppid)
		{
			kill $proxy_signal{$fault}, $ppid;
		}
		elsif ($fault eq 'stop_backend')
		{
			kill 'STOP', @backends;
		}
		elsif ($fault eq 'stop_server')
		{
			# nothing is renewed, ended or granted meanwhile: A's lease ends
			# by its local deadline (or the client's renewals do not need
			# the lock server, and it goes on holding)
			my $wpid = worker_pid($node, $lock);
			kill 'STOP', $wpid;
			my $t = time();
			my $ended = agent_says($a, qr/^(?:stopped|released)/m, 10);
			ok($ended, "$row: (b) A reports its lease gone while the lock server is stopped")
			  and note sprintf('%s: %.1f s after the stop', $row, time() - $t);
			kill 'CONT', $wpid;
		}
		elsif ($fault eq 'blocked')
		{
			tell_agent($a, 'block 5000');
		}
		else
		{
			kill $fault eq 'kill9' ? 'KILL' : 'STOP', $apid;
		}
		my $b_ns = b_takes($lock, $a, $row);
		kill 'CONT', $apid if $fault =~ /stop_client|pooled_stop/;
		if ($client eq 'cli')
		{
			# lockq stopped its command, or released after it, or is gone
			# (kill -9); either way the command must be gone by now
			agent_says($a, qr/^(?:stopped|released)/m, 30) unless $fault eq 'kill9';
			my $file = "$c->{dir}/$lock.work";
			ok(no_process("\Q$file\E"), "$row: the command is gone");
			my $last = cli_last_work($lock);
			ok($last > 0 && $last < $b_ns, "$row: (a) A's protected work stopped before B was granted");
			note sprintf('%s: A last worked %.1f ms before B was granted', $row, ($b_ns - $last) / 1e6);
		}
		elsif ($fault eq 'kill9')
		{
			# the process and its work are gone; so must its connection be
			ok($node->poll_query_until('postgres',
					"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = '$app'"),
				"$row: (c) the killed client's connection is gone");
		}
		else
		{
			my $stopped = agent_says($a, qr/^stopped (\d+)$/m, 30);
			ok($stopped && $stopped->[0] < $b_ns,
				"$row: (a) A's protected work stopped before B was granted");
			note sprintf('%s: A last worked %.1f ms before B was granted', $row, ($b_ns - $stopped->[0]) / 1e6)
			  if $stopped;
		}
		kill 'CONT', @backends if @backends;
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
		my $a = agent($client, $pport, $app);
		tell_agent($a, "acquire $lock-warm 3000 -1 3000");
		agent_says($a, qr/^acquired (\d+) (\d+)$/m, 30);
		tell_agent($a, 'release');
		agent_says($a, qr/^released/m, 30);
		$a->{out} = '';
		# queued, then the network drops everything
		tell_agent($a, "acquire $lock 3000 2000 3000");
		wait_for_waiters($node, $lock, 1);
		kill 'USR1', $ppid;
		my $failed = agent_says($a, qr/^failed (\w+) (\d+)$/m, 30);
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

	# cancellation at every moment of a wait: the lock free (the cancel
	# races the enqueue and its grant), busy (the wait, its 300 ms
	# heartbeats) and handed over (H's 200 ms lease ends by itself: the
	# cancel races the grant the lock server sends)
	{
		my $row = "$client, cancel";
		my $lock = "M-$client-cancel";
		(my $app = "agent_$client" . "_cancel") =~ s/-/_/g;
		my $a = agent($client, $port, $app);
		my $slack = $c->{slack};
		my (@wrong, @late, @left, @dead, %seen);
		my @cases = ((map { [ 'free', $_ ] } 0, 1, 2, 5, 20),
			(map { [ 'busy', $_ ] } 0, 1, 3, 10, 30, 100, 350, 700),
			(map { [ 'handover', $_ ] } 150, 190, 200, 205, 210, 220, 240, 300));
		for my $case (@cases)
		{
			my ($state, $delay) = @$case;
			my $what = "$state at $delay ms";
			scalar_query($node, "SELECT lockq_try('$lock', 'H', '1 hour')") if $state eq 'busy';
			scalar_query($node, "SELECT lockq_try('$lock', 'H', '200 ms')") if $state eq 'handover';
			$a->{out} = '';
			tell_agent($a, "cancel $lock 3000 $delay 300");
			my $r = agent_says($a, qr/^cancel_done (\S+) (\d+)$/m, 30);
			my ($outcome, $ms) = $r ? @$r : ('none', 1e9);
			$seen{"$state $outcome"}++;
			# the CLI gets ^C before it has set its handlers (and connected)
			# at the smallest delays: it dies of it, with nothing queued
			my $ok = $outcome eq 'cancelled' || ($state ne 'busy' && $outcome eq 'acquired')
			  || ($client eq 'cli' && $outcome eq 'exitsignal2');
			push @wrong, "$what: $outcome" unless $ok;
			push @late, "$what: $ms ms" if $ms > $delay + $slack + ($outcome eq 'acquired' ? 1000 : 0);
			scalar_query($node, "SELECT lockq_release('$lock', 'H')") if $state eq 'busy';
			push @left, $what unless $node->poll_query_until('postgres',
				"SELECT holders = 0 AND waiters = 0 FROM lockq_stats");
			$a->{out} = '';
			tell_agent($a, 'ping');
			my $p = agent_says($a, qr/^pong (\S+)$/m, 30);
			push @dead, "$what: " . ($p ? $p->[0] : 'no answer') unless $p && $p->[0] eq 'ok';
		}
		is(join('; ', @wrong), '', "$row: a busy lock's wait is cancelled, a free or handed-over one is cancelled or taken");
		is(join('; ', @late), '', "$row: (b) the cancel returns within ${slack} ms (and a grant that came first is released within 1 s more)");
		is(join('; ', @left), '', "$row: (c) nothing left held or queued after any of " . scalar(@cases) . ' cancels');
		is(join('; ', @dead), '', "$row: the connection works after every cancel");
		note "$row: " . join(', ', map { "$_: $seen{$_}" } sort keys %seen);
		end_agent($a);
	}
}

ok(scalar(keys %clients) >= 1, 'the matrix ran for ' . join(', ', sort keys %clients));
$node->stop;
done_testing();

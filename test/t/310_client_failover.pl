# The fault matrix's switchover and failover rows (issue 22): every client
# (the C library, the CLI, Python threads and asyncio, Node, Go) holds a lock
# and waits for another while its primary is replaced by a synchronous
# standby, once with a fast shutdown (a switchover: the sessions end with
# 57P01) and once with an immediate one (a failover: the connections just
# end).  The C library, the CLI, Python and Go (pgx) reach the primary
# through a multi-host conninfo (target_session_attrs=read-write); Node's pg has no
# multi-host connection strings, so Node goes through a proxy that follows
# the primary, as HAProxy does with Patroni's health checks.  The language
# clients use pools (psycopg_pool, pg.Pool, pgxpool), which is how an application
# survives a lost connection: a lock client cannot reconnect a connection
# that is the application's.
#
# Each client checks the same properties as in 309_client_matrix:
# (a) holder: the lease of 20 s outlives the switch, the release goes out
#     to the new primary, and B, queued there, is granted only after A's
#     protected work stopped, within 2 s of A's release after a switchover
#     (not at the end of A's lease: a release lost on a stale connection).
#     After a failover the server delays the lock until every lease that
#     may have been answered before its flush and lost has ended (doc/operations.md,
#     "Durability and crashes": A's renewals are such leases), so there B
#     comes within 2 s of the later of A's release and that delay's end as
#     the new primary has it (lockq.unsettled.delay_until);
# (b) waiter: a wait queued behind H on the old primary is granted on the
#     new one within 3 s of H's release there (well inside its 10 s
#     heartbeat interval, which is how long a wait the client lost track
#     of would block the lock);
# (c) nothing is left held or queued, and no connection of an agent that
#     has quit.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;
use LockqProxy;
use LockqAgents;

my %clients = agent_clients();
my $conf = "listen_addresses = '127.0.0.1'\n";

# epoch_ns(node, sql): a timestamptz query as ns since the epoch
sub epoch_ns
{
	my ($node, $sql) = @_;
	return scalar_query($node, "SELECT (extract(epoch FROM ($sql)) * 1000000)::bigint * 1000");
}

for my $switch (qw(switchover failover))
{
	# a primary and its synchronous standby
	my $primary = lockq_node("primary_$switch", init => { allows_streaming => 1 }, conf => $conf);
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new("standby_$switch");
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->append_conf('postgresql.conf', "primary_conninfo = '"
		  . $primary->connstr . " application_name=standby'\n");
	$standby->start;
	$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'standby'\n");
	$primary->reload;
	ok( $primary->poll_query_until('postgres',
			"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'"),
		"$switch: the standby is synchronous");

	my $route = PostgreSQL::Test::Utils::tempdir() . '/route';
	PostgreSQL::Test::Utils::append_to_file($route, $primary->port . "\n");
	my ($ppid, $pport) = start_proxy($primary->port, $route);

	# per client: A holds, W waits behind H
	my %agents;
	for my $client (sort keys %clients)
	{
		(my $tag = "${switch}_$client") =~ s/-/_/g;
		for my $role (qw(A W))
		{
			my $app = "${role}_$tag";
			my $dsn = sprintf('host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres '
				  . 'target_session_attrs=read-write application_name=%s',
				$primary->port, $standby->port, $app);
			$agents{$client}{$role} = start_agent($client, $dsn,
				"postgresql://127.0.0.1:$pport/postgres?application_name=$app", 1);
		}
		my ($a, $w) = @{ $agents{$client} }{qw(A W)};
		tell_agent($a, "acquire hold-$tag 20000 -1 10000");
		ok(agent_says($a, qr/^acquired (\d+) (\d+)$/m, 60), "$switch, $client: A holds (ttl 20 s)");
		scalar_query($primary, "SELECT lockq_try('wait-$tag', 'H', '1 hour')");
		tell_agent($w, "acquire wait-$tag 20000 -1 10000");
		ok(wait_for_waiters($primary, "wait-$tag", 1), "$switch, $client: W waits behind H");
	}

	# the switch
	$primary->stop($switch eq 'switchover' ? 'fast' : 'immediate');
	$standby->promote;
	ok($standby->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats'),
		"$switch: the lock server runs on the new primary");
	unlink $route;
	PostgreSQL::Test::Utils::append_to_file($route, $standby->port . "\n");

	for my $client (sort keys %clients)
	{
		(my $tag = "${switch}_$client") =~ s/-/_/g;
		my $row = "$switch, $client";
		my ($a, $w) = @{ $agents{$client} }{qw(A W)};

		# (a) B queues on the new primary; A releases
		my $b = start_waiter($standby, "B_$tag",
			"SELECT 'b_granted=' || (lockq_get('hold-$tag', 'B', '1 minute', timeout => '60 s') > 0);");
		ok(wait_for_waiters($standby, "hold-$tag", 1), "$row: B waits on the new primary");
		# the crash delay the new primary has for A's lock (s from now)
		my $t_delay = time();
		my $delay = scalar_query($standby, "SELECT coalesce(max(greatest(0, delay_until - lockq_now())), 0) / 1e6"
			  . " FROM lockq.unsettled WHERE lock_id = 'hold-$tag'");
		$a->{out} = '';
		tell_agent($a, 'release');
		my $rel = agent_says($a, qr/^released (\d) (\d+)$/m, 30);
		my $released_at = time();
		is($rel && $rel->[0], 1, "$row: A's release, sent after the switch, is confirmed");
		is(waiter_result($b, qr/b_granted=(\w+)/), 'true', "$row: B is granted");
		my $b_at = time();
		my $due = $released_at;
		$due = $t_delay + $delay if $t_delay + $delay > $due;
		ok($b_at < $due + 2, "$row: (a) B within 2 s of A's release (or of the lock's crash delay), not at its lease's end")
		  and note sprintf('%s: B granted %.0f ms after A%s release was confirmed (crash delay left: %.1f s)',
			$row, ($b_at - $released_at) * 1000, "'s", $delay);
		my $b_ns = epoch_ns($standby, "SELECT acquired FROM lockq_locks WHERE lock_id = 'hold-$tag'");
		my $last;
		if ($client eq 'cli')
		{
			$last = cli_last_work("hold-$tag");
		}
		else
		{
			my $st = agent_says($a, qr/^stopped (\d+)$/m, 30);
			$last = $st ? $st->[0] : 1e30;
		}
		ok($last > 0 && $last < $b_ns, "$row: (a) A's protected work stopped before B was granted");
		end_session($b);
		scalar_query($standby, "SELECT lockq_release('hold-$tag', 'B')");

		# (b) W's wait carried over: H's release on the new primary grants it
		my $t = time();
		scalar_query($standby, "SELECT lockq_release('wait-$tag', 'H')");
		my $got = agent_says($w, qr/^(?:acquired (\d+)|failed (\w+))/m, 30);
		my $w_wait = time() - $t;
		ok($got && defined $got->[0] && $w_wait < 3,
			"$row: (b) W is granted on the new primary within 3 s of H's release")
		  and note sprintf('%s: W granted %.0f ms after H released', $row, $w_wait * 1000);
		$w->{out} = '';
		tell_agent($w, 'release');
		ok(agent_says($w, qr/^released 1/m, 30), "$row: W releases");

		end_agent($_) for ($a, $w);
		ok( $standby->poll_query_until('postgres',
				"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE '%$tag' "
				  . "UNION ALL SELECT count(*) = 0 FROM lockq_waiters WHERE lock_id LIKE '%$tag' "
				  . "UNION ALL SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE '%$tag'",
				"t\nt\nt"),
			"$row: (c) nothing left held or queued, and no connection of the agents");
	}
	stop_proxy($ppid);
	$standby->stop;
}

done_testing();

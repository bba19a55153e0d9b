# lockq under Patroni, as users run it (Debian 12: Patroni 3.0 and etcd
# 3.4).  The test starts its own etcd and two Patroni nodes managing a
# primary and a synchronous standby with lockq preloaded (the settings and
# the post_bootstrap script of doc/operations.md, "High availability with
# Patroni", taken from that document as written), then runs four clients
# through three faults:
#
#   1. `patronictl switchover` (a clean stop of the primary);
#   2. kill -9 of the primary's postmaster: with primary_start_timeout 0
#      Patroni fails over to the synchronous standby instead of restarting
#      the crashed primary in place;
#   3. Patroni itself killed with SIGKILL on the primary: after the leader
#      key's ttl the standby is promoted while the old primary stays up and
#      read-write (split brain); its lock server then waits for a
#      synchronous standby that is gone.  There, a lockq_get with
#      timeout => '3 s' must still raise 55P03 at its timeout (not hang),
#      the server log must say why (the lock server waits for the flush),
#      and a call under statement_timeout must end near its
#      statement_timeout.  Then Patroni is started again and rejoins the
#      old primary as a standby (pg_rewind).
#
# The clients connect with a libpq multi-host conninfo
# (target_session_attrs=read-write), take leased locks (explicit owners,
# ttl 3 s) on two busy locks and do fenced writes: in one transaction, a
# row (lock, token, client, time) is inserted only if lockq_holds(lock,
# token) is true.  Every grant a client receives is logged with the port of
# the server that gave it and the server's time.  At the end, on the final
# primary:
#   - per lock, the tokens of the fenced rows never decrease in insert
#     (serial id) order, and no row was written with a token after a
#     higher token of its lock had been handed out: no two holders;
#   - every fenced row's token was granted to that client for that lock,
#     and no token was ever handed out for two different grants, whichever
#     server gave it (tokens are never reissued);
#   - after each fault, every token the new primary gives out is above
#     every token given out before the fault, and above every token the
#     old primary gave out until it rejoined;
#   - a client-side waiter queued behind a held lock before each fault is
#     served after it, once the holder releases (switchover, split brain)
#     or once its lease has run out (the kill -9);
#   - the clients made progress after every fault;
#   - the Python client (threads and asyncio, a pool on the multi-host
#     conninfo) holds through the switchover and its release goes out to
#     the new primary at once, and its wait queued before it is granted
#     there when the holder releases (see also 310_client_failover);
#   - no fenced write of a grant that the old primary answered after the
#     standby's promotion survives.  (Patroni, started again there,
#     reloads it without synchronous_standby_names before it stops it:
#     the waits end and the old primary answers for a moment; how many of
#     its grants overlapped a lease of the new primary is reported.)
# The time from each fault until a free lock can be taken again (and, for
# the kill -9, until the held lock is served) is reported (diag).
#
# Waits are polls of Patroni's REST API or of the servers; every process
# the test starts (etcd, Patroni, PostgreSQL, the clients) is ended when it
# ends, also when it dies.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use List::Util qw(max min);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;
use LockqAgents;

for my $tool ('patroni', 'patronictl', 'etcd')
{
	require_tool(-x "/usr/bin/$tool",
		"$tool not installed (apt-get install patroni etcd-server etcd-client python3-etcd)");
}
require_tool(system('/usr/bin/python3', '-c', 'import etcd') == 0,
	'python3-etcd not installed (Patroni finds no configuration store without it)');

my $timeout = $PostgreSQL::Test::Utils::timeout_default;
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $psql = "$bindir/psql";
my $user = getpwuid($<);
my $dir = "$PostgreSQL::Test::Utils::tmp_check/patroni";
mkdir $dir;
my $http = HTTP::Tiny->new(timeout => 2);

# Every process the test starts, so that the END block can end it.
my ($etcd, %patroni, @clients);
my @nodes;

END
{
	local $?;
	if (-d $dir && open(my $stop, '>', "$dir/stop"))
	{
		close $stop;
	}
	for my $h (@clients, values %patroni)
	{
		next unless $h && $h->pumpable;
		kill 'KILL', $_->{PID} for @{ $h->{KIDS} };
		eval { $h->finish };
	}
	# PostgreSQL outlives a killed Patroni
	for my $node (@nodes)
	{
		my $pidfile = $node->data_dir . '/postmaster.pid';
		next unless -f $pidfile;
		my ($pid) = split /\n/, slurp_file($pidfile);
		next unless $pid && $pid =~ /^\d+$/ && -r "/proc/$pid/cmdline";
		# (a stale file's pid may belong to someone else by now)
		kill 'KILL', $pid
		  if index(slurp_file("/proc/$pid/cmdline"), $node->data_dir) >= 0;
	}
	if ($etcd && $etcd->pumpable)
	{
		kill 'KILL', $_->{PID} for @{ $etcd->{KIDS} };
		eval { $etcd->finish };
	}
}

# A test stopped by a signal ends its processes too.
$SIG{$_} = sub { diag("stopped by a signal"); exit 1 } for qw(INT TERM HUP);

# poll(sub, limit): calls sub every 0.1 s until it returns true, at most
# limit seconds (default: the default timeout); returns its last value.
sub poll
{
	my ($sub, $limit) = @_;
	my $deadline = time() + ($limit // $timeout);
	while (1)
	{
		my $v = eval { $sub->() };
		return $v if $v;
		return $v if time() > $deadline;
		select(undef, undef, undef, 0.1);
	}
}

# --- etcd ----------------------------------------------------------------------
my $etcd_port = PostgreSQL::Test::Cluster::get_free_port();
my $peer_port = PostgreSQL::Test::Cluster::get_free_port();
$etcd = IPC::Run::start(
	[
		'/usr/bin/etcd', '--name', 'etcd036',
		'--data-dir', "$dir/etcd",
		'--listen-client-urls', "http://127.0.0.1:$etcd_port",
		'--advertise-client-urls', "http://127.0.0.1:$etcd_port",
		'--listen-peer-urls', "http://127.0.0.1:$peer_port",
		'--initial-advertise-peer-urls', "http://127.0.0.1:$peer_port",
		'--initial-cluster', "etcd036=http://127.0.0.1:$peer_port",
		'--initial-cluster-state', 'new'
	],
	'<', '/dev/null', '>', "$dir/etcd.log", '2>&1');
ok(poll(sub { $http->get("http://127.0.0.1:$etcd_port/health")->{content} =~ /"health":"true"/ }),
	'etcd runs') or BAIL_OUT('etcd did not start: ' . slurp_file("$dir/etcd.log"));

# --- two Patroni nodes -----------------------------------------------------------
# Short timings: the leader key lives 10 s, Patroni's loop runs every second.
# The settings and the post_bootstrap script are doc/operations.md's, as
# written there ("High availability with Patroni"); the test adds its short
# timings and its paths.
my $ops = slurp_file("$ENV{TESTDIR}/doc/operations.md");
my ($doc_yaml) = $ops =~ /```yaml\n(bootstrap:\n.*?)```/s
  or die "doc/operations.md has no bootstrap block";
my ($doc_script) = $ops =~ m{```sh\n#!/bin/sh\n(# /etc/patroni/lockq-post-bootstrap.*?)```}s
  or die "doc/operations.md has no post_bootstrap script";
my $post_bootstrap = "$dir/post_bootstrap.sh";
open my $fh, '>', $post_bootstrap or die;
print $fh "#!/bin/sh\nPATH=\"$bindir:\$PATH\"\n$doc_script";
close $fh;
chmod 0755, $post_bootstrap;
my $bootstrap = $doc_yaml;
$bootstrap =~ s{^  post_bootstrap: \S+$}{  post_bootstrap: $post_bootstrap}m
  or die "no post_bootstrap in the document's block";
$bootstrap =~ s{^  dcs:\n}{  dcs:\n    ttl: 10\n    loop_wait: 1\n    retry_timeout: 4\n}m
  or die "no dcs in the document's block";
$bootstrap =~ s{^      parameters:\n}{      parameters:\n        search_path: '"\$user", public, lockq'\n}m
  or die "no parameters in the document's block";
$bootstrap .= "  initdb:\n    - encoding: UTF8\n    - no-sync\n";

my %rest;
# the suite's second configuration, when asked for (make check-tap-servers
# leaves this test out for its length)
my $servers = lock_servers() > 1
  ? "    lockq.lock_servers: '" . lock_servers() . "'\n" : '';
for my $name ('node1', 'node2')
{
	my $node = PostgreSQL::Test::Cluster->new($name);
	push @nodes, $node;
	$rest{$name} = PostgreSQL::Test::Cluster::get_free_port();
	my $port = $node->port;
	my $host = $node->host;
	my $base = $node->basedir;
	my $data = $node->data_dir;
	open my $y, '>', "$dir/$name.yml" or die;
	print $y qq{scope: lockq036
name: $name
restapi:
  listen: 127.0.0.1:$rest{$name}
  connect_address: 127.0.0.1:$rest{$name}
etcd3:
  hosts: 127.0.0.1:$etcd_port
${bootstrap}postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $data
  bin_dir: $bindir
  pgpass: $base/pgpass
  authentication:
    superuser:
      username: $user
    replication:
      username: $user
    rewind:
      username: $user
  basebackup:
    - checkpoint: fast
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: '$host'
    fsync: 'off'
    logging_collector: 'on'
    log_directory: '$base/log'
    log_filename: postgresql.log
    log_line_prefix: '%m [%p] %b '
${servers}};
	close $y;
}
my %node = (node1 => $nodes[0], node2 => $nodes[1]);
my %name_of_port = map { $_->port => $_->name } @nodes;

sub start_patroni
{
	my ($name) = @_;
	$patroni{$name} = IPC::Run::start([ '/usr/bin/patroni', "$dir/$name.yml" ],
		'<', '/dev/null', '>>', "$dir/$name.patroni.log", '2>&1');
	return;
}

sub server_log
{
	my ($name) = @_;
	my $f = $node{$name}->basedir . '/log/postgresql.log';
	return -f $f ? slurp_file($f) : '';
}

# cluster(): Patroni's view, name => role/state, from any node that answers
sub cluster
{
	for my $name (sort keys %patroni)
	{
		next unless $patroni{$name}->pumpable;
		my $res = $http->get("http://127.0.0.1:$rest{$name}/cluster");
		next unless $res->{success};
		my $c = decode_json($res->{content});
		return { map { $_->{name} => "$_->{role}/$_->{state}" } @{ $c->{members} } };
	}
	return {};
}

# healthy(leader, sync): Patroni shows leader as the leader and sync as its
# synchronous standby, the leader streams to sync synchronously and its
# lock server answers
sub healthy
{
	my ($leader, $sync) = @_;
	my $c = cluster();
	return 0 unless ($c->{$leader} // '') eq 'leader/running'
	  && ($c->{$sync} // '') =~ m{^sync_standby/(running|streaming)$};
	my ($rc, $out) = $node{$leader}->psql('postgres', qq{
		SELECT (SELECT sync_state FROM pg_stat_replication WHERE application_name = '$sync')
		       || ':' || (SELECT worker_pid IS NOT NULL FROM lockq_stats)});
	return $rc == 0 && $out eq 'sync:true';
}

start_patroni('node1');
ok( poll(sub { (cluster()->{node1} // '') eq 'leader/running' }),
	'Patroni bootstraps node1 as the primary')
  or BAIL_OUT('no primary: ' . slurp_file("$dir/node1.patroni.log"));
start_patroni('node2');
ok(poll(sub { healthy('node1', 'node2') }),
	'node2 joins as the synchronous standby; lockq (made by post_bootstrap) runs on node1')
  or BAIL_OUT('no synchronous standby: ' . slurp_file("$dir/node2.patroni.log"));
is($node{node1}->safe_psql('postgres', 'SHOW lockq.database'), 'postgres',
	'lockq.database comes from bootstrap.dcs');
ok( $node{node1}->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'lockq lock server'},
		lock_servers()),
	lock_servers() . ' lock server(s) run');

$node{node1}->safe_psql('postgres', q{
CREATE TABLE fenced (id bigserial PRIMARY KEY, lock_id text NOT NULL,
	token bigint NOT NULL, client text NOT NULL, at timestamptz NOT NULL);
});

# --- clients ---------------------------------------------------------------------
my $multi = sprintf(
	'host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres target_session_attrs=read-write connect_timeout=2',
	$nodes[0]->port, $nodes[1]->port);
open $fh, '>', "$dir/client.sql" or die;
print $fh q{
SET statement_timeout = '8s';
SELECT lockq_get(:'lock', :'me', '3 s', '5 s') AS tok \gset
SELECT format('GRANT %s %s %s %s %s', :'lock', :tok, :'me', inet_server_port(),
	extract(epoch FROM clock_timestamp()));
SELECT FROM pg_sleep(random() * 0.2);
BEGIN;
INSERT INTO fenced (lock_id, token, client, at)
	SELECT :'lock', :tok, :'me', clock_timestamp() WHERE lockq_holds(:'lock', :tok);
COMMIT;
SELECT FROM pg_sleep(random() * 0.2);
BEGIN;
INSERT INTO fenced (lock_id, token, client, at)
	SELECT :'lock', :tok, :'me', clock_timestamp() WHERE lockq_holds(:'lock', :tok);
COMMIT;
SELECT lockq_release(:'lock', :'me', :tok);
};
close $fh;
# one critical section per psql run: a lost connection only ends that run
open $fh, '>', "$dir/client.sh" or die;
print $fh qq{#!/bin/bash
me=\$1
locks=(L1 L2)
# (and stops when the test is gone)
while [ ! -e "$dir/stop" ] && kill -0 \$PPID 2>/dev/null; do
	lock=\${locks[RANDOM % 2]}
	"$psql" -X -qAt -v ON_ERROR_STOP=1 -v lock=\$lock -v me=\$me \\
		-d "$multi" -f "$dir/client.sql" || sleep 0.2
done
};
close $fh;
chmod 0755, "$dir/client.sh";
for my $i (1 .. 4)
{
	push @clients, IPC::Run::start([ "$dir/client.sh", "c$i" ],
		'<', '/dev/null', '>', "$dir/client$i.log", '2>&1');
}

# grants(): every grant the clients logged so far, with the test's own
# probes: { lock, token, client, port, at }
my @probes;
sub grants
{
	my @g = @probes;
	for my $i (1 .. 4)
	{
		my $f = "$dir/client$i.log";
		next unless -f $f;
		for (split /\n/, slurp_file($f))
		{
			next unless /^GRANT (\S+) (\d+) (\S+) (\d+) ([\d.]+)$/;
			push @g, { lock => $1, token => $2, client => $3, port => $4, at => $5 };
		}
	}
	return @g;
}

# rows(node): the fenced rows, in id order
sub rows
{
	my ($node) = @_;
	my $out = $node->safe_psql('postgres',
		q{SELECT id, lock_id, token, client, extract(epoch FROM at) FROM fenced ORDER BY id});
	return map { my @f = split /\|/; { id => $f[0], lock => $f[1], token => $f[2], client => $f[3], at => $f[4] } }
	  grep { length } split /\n/, $out;
}

# progress(node, n): n more fenced rows appear on node
sub progress
{
	my ($node, $n) = @_;
	my $base = $node->safe_psql('postgres', 'SELECT count(*) FROM fenced');
	return poll(sub {
		$node->safe_psql('postgres', 'SELECT count(*) FROM fenced') >= $base + $n;
	});
}

ok(progress($node{node1}, 10), 'the clients write fenced rows');

# free_lock(conninfo, label): polls until a free lock is granted through
# conninfo; returns the time it was granted (the probe counts as a grant)
my $probe_no = 0;
sub free_lock
{
	my ($conninfo) = @_;
	return poll(sub {
		$probe_no++;
		my ($out, $err) = ('', '');
		IPC::Run::run([ $psql, '-X', '-qAt', '-d', $conninfo, '-c',
			"SET statement_timeout = '2s'; SELECT format('%s %s %s', lockq_try('free$probe_no', 'probe', '5 s'), inet_server_port(), extract(epoch FROM clock_timestamp()))" ],
			'<', '/dev/null', '>', \$out, '2>', \$err, IPC::Run::timeout(10));
		return undef unless $out =~ /^(\d+) (\d+) ([\d.]+)$/m;
		push @probes, { lock => "free$probe_no", token => $1, client => 'probe', port => $2, at => $3 };
		return $3;
	});
}

# A holder and a client-side waiter queued behind it before a fault; the
# waiter's queue entry must have reached the standby.
sub queue_waiter
{
	my ($k, $primary, $standby, $ttl) = @_;
	my $n = $node{$primary};
	my $tok = $n->safe_psql('postgres', "SELECT lockq_get('W$k', 'holder$k', '$ttl')");
	is($n->safe_psql('postgres',
			"SELECT lockq_enqueue('W$k', 'waiter$k', '30 s', NULL, '60 s') IS NULL"),
		't', "fault $k: waiter$k queues behind holder$k");
	# (the insert position: the enqueue's commit is asynchronous, and may
	# not be written yet, so the write position can still be before it)
	my $lsn = $n->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	ok($n->poll_query_until('postgres',
			"SELECT replay_lsn >= '$lsn' FROM pg_stat_replication WHERE application_name = '$standby'"),
		"fault $k: the standby has the queue");
	push @probes, { lock => "W$k", token => $tok, client => "holder$k",
		port => $n->port, at => time() };
	return ($tok, $n->safe_psql('postgres', "SELECT expires FROM lockq_locks WHERE lock_id = 'W$k'"));
}

# waiter_served(k, node): polls until waiter k is granted on node; returns
# its token
sub waiter_served
{
	my ($k, $n) = @_;
	my $tok;
	poll(sub {
		$tok = $n->safe_psql('postgres', "SELECT lockq_heartbeat('W$k', 'waiter$k')");
		return $tok ne '';
	});
	push @probes, { lock => "W$k", token => $tok, client => "waiter$k",
		port => $n->port, at => time() } if $tok ne '';
	return $tok;
}

# Each fault: name, old primary, new primary, time it began, time the old
# primary rejoined as a standby.
my @faults;
my $promoted;    # when the split brain's new primary was seen promoted
my %report;

# --- 1. switchover -------------------------------------------------------------------
{
	my $k = 1;
	my ($tok) = queue_waiter($k, 'node1', 'node2', '30 s');
	# The Python client, as an application runs it (a pool on the
	# multi-host conninfo): A holds a 20 s lease, W waits behind H.
	my %py;
	my %agents = agent_clients();
	for my $mode (qw(sync asyncio))
	{
		next unless $agents{"python-$mode"};
		my $tag = "py_$mode";
		$py{$mode}{$_} = start_agent("python-$mode", "$multi application_name=${_}_$tag", undef, 1)
		  for qw(A W);
		tell_agent($py{$mode}{A}, "acquire P-hold-$tag 20000 -1 10000");
		ok(agent_says($py{$mode}{A}, qr/^acquired (\d+)/m, 60), "python $mode: A holds (ttl 20 s)");
		$node{node1}->safe_psql('postgres', "SELECT lockq_try('P-wait-$tag', 'H', '1 hour')");
		tell_agent($py{$mode}{W}, "acquire P-wait-$tag 20000 -1 10000");
		ok(wait_for_waiters($node{node1}, "P-wait-$tag", 1), "python $mode: W waits behind H");
	}
	my $t0 = time();
	my ($out, $err) = ('', '');
	IPC::Run::run([ '/usr/bin/patronictl', '-c', "$dir/node1.yml", 'switchover',
		'--leader', 'node1', '--candidate', 'node2', '--force' ],
		'<', '/dev/null', '>', \$out, '2>', \$err, IPC::Run::timeout($timeout));
	like($out, qr/Successfully switched over to "node2"/, 'patronictl switchover to node2')
	  or diag("$out $err");
	my $free = free_lock($multi) // 'inf';
	$report{switchover} = $free - $t0;
	ok($free ne 'inf', sprintf('after the switchover a free lock is taken through the multi-host conninfo (%.1f s)', $free - $t0));
	is($node{node2}->safe_psql('postgres', "SELECT lockq_holds('W$k', $tok)"), 't',
		'the held lock is still held on the new primary');
	is($node{node2}->safe_psql('postgres', "SELECT lockq_release('W$k', 'holder$k', $tok)"), 't',
		'and its holder releases it there');
	my $served = waiter_served($k, $node{node2});
	like($served, qr/^\d+$/, 'the waiter queued across the switchover is served');
	# The Python client (issue 22, item 13): its release goes out to the
	# new primary, so B, queued there, is granted at once (not at the end
	# of A's lease); its wait carried over and is granted at H's release
	# (not held up for its heartbeat interval).
	for my $mode (sort keys %py)
	{
		my ($a, $w) = @{ $py{$mode} }{qw(A W)};
		my $tag = "py_$mode";
		my $b = start_waiter($node{node2}, "B_$tag",
			"SELECT 'b=' || lockq_get('P-hold-$tag', 'B', '1 minute', timeout => '60 s');");
		ok(wait_for_waiters($node{node2}, "P-hold-$tag", 1), "python $mode: B waits on node2");
		tell_agent($a, 'release');
		my $rel = agent_says($a, qr/^released (\d)/m, 30);
		my $t_rel = time();
		is($rel && $rel->[0], 1, "python $mode: A's release after the switchover is confirmed");
		like(waiter_result($b, qr/b=(\d+)/), qr/^\d+$/, "python $mode: B is granted");
		my $b_wait = time() - $t_rel;
		ok($b_wait < 2, sprintf('python %s: within 2 s of the release (%.0f ms)', $mode, $b_wait * 1000));
		end_session($b);
		my $t_h = time();
		$node{node2}->safe_psql('postgres', "SELECT lockq_release('P-wait-$tag', 'H')");
		ok(agent_says($w, qr/^acquired (\d+)/m, 30), "python $mode: W's wait is granted on node2");
		my $w_wait = time() - $t_h;
		ok($w_wait < 3, sprintf("python %s: within 3 s of H's release (%.0f ms)", $mode, $w_wait * 1000));
		tell_agent($w, 'release');
		ok(agent_says($w, qr/^released 1/m, 30), "python $mode: W releases");
		end_agent($_) for ($a, $w);
		$node{node2}->safe_psql('postgres', "SELECT lockq_release('P-hold-$tag', 'B')");
		ok($node{node2}->poll_query_until('postgres',
				"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'P-%-$tag'"),
			"python $mode: nothing left held");
	}
	ok(poll(sub { healthy('node2', 'node1') }), 'node1 is the synchronous standby of node2');
	push @faults, { name => 'switchover', old => 'node1', new => 'node2', at => $t0,
		rejoined => time(), waiter => $served };
	ok(progress($node{node2}, 10), 'the clients write fenced rows on node2');
}

# --- 2. kill -9 of the primary's postmaster: a failover --------------------------
{
	my $k = 2;
	my ($tok, $expires) = queue_waiter($k, 'node2', 'node1', '6 s');
	my ($pid) = split /\n/, slurp_file($node{node2}->data_dir . '/postmaster.pid');
	my $t0 = time();
	ok(kill('KILL', $pid), "kill -9 of node2's postmaster");
	my $free = free_lock($multi) // 'inf';
	$report{'kill -9'} = $free - $t0;
	ok($free ne 'inf', sprintf('after the failover a free lock is taken through the multi-host conninfo (%.1f s)', $free - $t0));
	is((cluster()->{node1} // ''), 'leader/running', 'Patroni failed over to node1 (not a restart in place)');
	my $served = waiter_served($k, $node{node1});
	like($served, qr/^\d+$/,
		'the waiter queued across the failover is served once the holder\'s lease has run out');
	$report{'kill -9, held lock'} = time() - $t0;
	is($node{node1}->safe_psql('postgres',
			"SELECT acquired >= '$expires' FROM lockq_locks WHERE lock_id = 'W$k' AND owner = 'waiter$k'"),
		't', 'not before the end of that lease');
	is($node{node1}->safe_psql('postgres', "SELECT lockq_holds('W$k', $tok)"), 'f',
		'the holder\'s grant has ended');
	ok(poll(sub { healthy('node1', 'node2') }), 'node2 is rewound and is the synchronous standby of node1');
	push @faults, { name => 'kill -9', old => 'node2', new => 'node1', at => $t0,
		rejoined => time(), waiter => $served };
	ok(progress($node{node1}, 10), 'the clients write fenced rows on node1');
}

# --- 3. Patroni killed on the primary: split brain -----------------------------------
{
	my $k = 3;
	my $old = $node{node1};
	my $new = $node{node2};
	# (a lease that outlasts the leader key's ttl and the checks on the old
	# primary on a loaded machine: the holder releases it at the end)
	my ($tok) = queue_waiter($k, 'node1', 'node2', '120 s');
	my $t0 = time();
	kill 'KILL', $_->{PID} for @{ $patroni{node1}{KIDS} };
	$patroni{node1}->finish;
	ok(poll(sub { $new->safe_psql('postgres', 'SELECT NOT pg_is_in_recovery()') eq 't' }),
		'the standby is promoted after the leader key has expired');
	$promoted = time();
	is($old->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f',
		'while the old primary still runs read-write (split brain)');
	my $free = free_lock('host=127.0.0.1 port=' . $new->port . ' dbname=postgres') // 'inf';
	$report{'Patroni killed'} = $free - $t0;
	ok($free ne 'inf', sprintf('a free lock is taken on the new primary (%.1f s after Patroni was killed)', $free - $t0));

	# On the old primary the lock server waits for the standby that is gone.
	my $log_before = length server_log('node1');
	my $t1 = time();
	my ($rc, $out, $err) = $old->psql('postgres',
		"SELECT lockq_get('sb-free', 'sb', '5 s', '3 s')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	my $took = time() - $t1;
	like($err, qr/ERROR:  55P03/, 'on the old primary lockq_get(..., timeout => 3 s) raises 55P03')
	  or diag($err);
	ok($took >= 2.9 && $took < 4, sprintf('at its timeout (%.2f s)', $took));
	like($err, qr/for its last batch to be flushed to WAL and to the synchronous standbys/,
		'its detail says the lock server waits for the flush');
	ok( poll(sub {
			substr(server_log('node1'), $log_before) =~
			  /lockq wait for lock "sb-free" ended at its limit without an answer from the lock server.*\n.*DETAIL:.*for its last batch to be flushed to WAL and to the synchronous standbys/;
		}),
		'the old primary logs why');
	is($old->safe_psql('postgres',
			q{SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'lockq lock server'
			   AND application_name = '} . server_name($old, 'sb-free') . q{'}),
		'SyncRep', 'its lock server waits for synchronous replication');
	$t1 = time();
	($rc, $out, $err) = $old->psql('postgres',
		"SET statement_timeout = '2s'; SELECT lockq_try('sb-free2', 'sb', '5 s')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	$took = time() - $t1;
	like($err, qr/ERROR:  57014/, 'a lockq_try under statement_timeout = 2 s is cancelled there');
	ok($took >= 1.9 && $took < 2.8, sprintf('near its statement_timeout (%.2f s)', $took));
	note 'the old primary meanwhile: ' . $old->safe_psql('postgres', q{
		SELECT string_agg(format('%s %s/%s %s %ss: %s', pid, wait_event_type, wait_event, state,
			round(extract(epoch FROM now() - query_start)::numeric, 1), left(query, 60)), E'\n')
		  FROM pg_stat_activity WHERE backend_type IN ('client backend', 'lockq lock server')
		   AND pid <> pg_backend_pid()});

	is($new->safe_psql('postgres', "SELECT lockq_release('W$k', 'holder$k', $tok)"), 't',
		'the holder releases the held lock on the new primary');
	my $served = waiter_served($k, $new);
	like($served, qr/^\d+$/, 'the waiter queued across the split brain is served');

	start_patroni('node1');
	ok(poll(sub { healthy('node2', 'node1') }),
		'Patroni, started again, makes the old primary the synchronous standby of node2');
	push @faults, { name => 'Patroni killed', old => 'node1', new => 'node2', at => $t0,
		rejoined => time(), waiter => $served };
	ok(progress($new, 10), 'the clients write fenced rows on node2');
}

# --- stop the clients -------------------------------------------------------------------
open $fh, '>', "$dir/stop" or die;
close $fh;
for my $c (@clients)
{
	$c->finish;
}
@clients = ();

# --- checks ------------------------------------------------------------------------------
my $final = $node{node2};
my @rows = rows($final);
my @grants = grants();
note sprintf('%d grants logged, %d fenced rows', scalar @grants, scalar @rows);
cmp_ok(scalar @rows, '>=', 40, 'fenced rows were written');

# violations(rows, grants): the fenced rows whose token decreased in insert
# order, that were written after a later grant of their lock, and that carry
# a token not granted to their client for their lock; the tokens handed out
# for two grants
sub violations
{
	my ($rows, $grants) = @_;
	my (%v, %last, %by_lock, %grant_of);
	$v{$_} = [] for qw(decreasing superseded unknown reissued);
	for my $r (@$rows)
	{
		push @{ $v{decreasing} }, "$r->{id}:$r->{lock}:$r->{token}<$last{$r->{lock}}"
		  if defined $last{ $r->{lock} } && $r->{token} < $last{ $r->{lock} };
		$last{ $r->{lock} } = $r->{token};
	}
	push @{ $by_lock{ $_->{lock} } }, $_ for @$grants;
	for my $r (@$rows)
	{
		push @{ $v{superseded} }, "$r->{lock}:$r->{token}\@$r->{at} after $_->{token}\@$_->{at}"
		  for grep { $_->{token} > $r->{token} && $_->{at} < $r->{at} } @{ $by_lock{ $r->{lock} } };
	}
	for my $g (@$grants)
	{
		my $id = "$g->{lock}/$g->{client}";
		push @{ $v{reissued} }, "$g->{token}: $grant_of{$g->{token}} and $id"
		  if defined $grant_of{ $g->{token} } && $grant_of{ $g->{token} } ne $id;
		$grant_of{ $g->{token} } //= $id;
	}
	push @{ $v{unknown} }, map { "$_->{lock}:$_->{token}:$_->{client}" }
	  grep { ($grant_of{ $_->{token} } // '') ne "$_->{lock}/$_->{client}" } @$rows;
	return \%v;
}

# The checker finds a planted row: the first grant of L1, written (by
# another client) after everything else.
{
	my ($first) = grep { $_->{lock} eq 'L1' && $_->{client} =~ /^c/ } @grants;
	my $other = $first->{client} eq 'c1' ? 'c2' : 'c1';
	my $v = violations([ @rows, { id => 1e9, lock => 'L1', token => $first->{token},
		client => $other, at => time() + 1 } ], \@grants);
	ok(@{ $v->{decreasing} } && @{ $v->{superseded} } && @{ $v->{unknown} },
		'the checks below find a row planted with an old token of another client');
	$v = violations(\@rows, [ @grants, { %$first, client => $other } ]);
	ok(@{ $v->{reissued} }, 'and a token planted as granted twice');
}

my $v = violations(\@rows, \@grants);
is("@{ $v->{decreasing} }", '', 'per lock, the tokens of the fenced rows never decrease in insert order');
is("@{ $v->{superseded} }", '', 'no fenced row was written after a later grant of its lock');
is("@{ $v->{reissued} }", '', 'no token was handed out for two grants');
is("@{ $v->{unknown} }", '', 'every fenced row carries a token granted to its client for its lock');

# after each fault, the new primary's tokens are above everything before
for my $f (@faults)
{
	my $old_port = $node{ $f->{old} }->port;
	my $new_port = $node{ $f->{new} }->port;
	my @before = map { $_->{token} } grep {
		$_->{at} < $f->{at} || ($_->{port} == $old_port && $_->{at} < $f->{rejoined})
	} @grants;
	my %before = map { $_ => 1 } @before;
	# (a grant the owner held already comes back with its token)
	my @after = grep { !$before{$_} } map { $_->{token} }
	  grep { $_->{port} == $new_port && $_->{at} > $f->{at} } @grants;
	ok(@after > 0, "$f->{name}: the new primary handed out tokens afterwards");
	cmp_ok(min(@after), '>', max(@before),
		"$f->{name}: each of them is above every token handed out before (and by the old primary until it rejoined)");
	cmp_ok($f->{waiter}, '>', max(@before),
		"$f->{name}: so is the token of the waiter served after it");
	my $n = grep { $_->{at} > $f->{at} && $_->{client} =~ /^c\d$/ } @grants;
	ok($n > 0, "$f->{name}: the clients were granted locks afterwards ($n)");
}

# What the old primary answered after the standby's promotion (Patroni,
# started again there, reloads it without synchronous_standby_names before
# it stops it, which releases the waits for a moment): those grants exist
# only on the old timeline, and so do their fenced writes.
{
	my $old_port = $node{node1}->port;
	my $split = $faults[2];
	my @sb = grep { $_->{port} == $old_port && $_->{at} > $promoted && $_->{at} < $split->{rejoined} } @grants;
	my %sb = map { $_->{token} => 1 } @sb;
	my $overlap = 0;
	for my $g (@sb)
	{
		$overlap++ if grep {
			$_->{lock} eq $g->{lock} && $_->{port} != $old_port && abs($_->{at} - $g->{at}) < 3
		} @grants;
	}
	diag sprintf('split brain: the old primary answered %d grants after the promotion was seen, '
		  . '%d of them within a lease (3 s) of a grant of the same lock by the new primary', scalar @sb, $overlap);
	is(join(' ', map { "$_->{lock}:$_->{token}" } grep { $sb{ $_->{token} } } @rows), '',
		'no fenced write of a grant the old primary answered after the promotion survives');
}

for my $what (sort keys %report)
{
	next unless defined $report{$what};
	diag sprintf('%s: a free lock was taken again %.1f s after the fault', $what, $report{$what})
	  unless $what =~ /held lock/;
	diag sprintf('%s: the held lock (6 s lease, not renewed) went to its waiter %.1f s after the fault',
		$what, $report{$what})
	  if $what =~ /held lock/;
}

# --- the end ----------------------------------------------------------------------------
for my $name (sort keys %patroni)
{
	next unless $patroni{$name}->pumpable;
	kill 'TERM', $_->{PID} for @{ $patroni{$name}{KIDS} };
	$patroni{$name}->finish;
}
for my $node (@nodes)
{
	ok(!-f $node->data_dir . '/postmaster.pid', $node->name . ': Patroni stopped PostgreSQL');
}
kill 'TERM', $_->{PID} for @{ $etcd->{KIDS} };
$etcd->finish;
done_testing();

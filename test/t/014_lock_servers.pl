# Two lock servers (lockq.lock_servers = 2), each serving the locks whose ids
# hash to it: both run; locks of both partitions are granted, queue in arrival
# order and hand on; tokens increase strictly over all grants of both; a
# session that ends holding grants in both loses them all; lock server 1
# terminated restarts with its partition's grants and queue while lock server
# 0 serves on, and so does lock server 0 while lock server 1 is stalled (a
# fault point armed for it alone), also new sessions in the place of sessions
# that ended meanwhile, the end of a session, and DISCARD ALL in one, that
# used none of lock server 1's locks, while the end of one that only released
# a grant of lock server 1 by itself goes there after the release; a session
# that used no lock server frees its slot itself; a stale entry in lock server
# 1's ring leaves a request that went to lock server 0 alone; a clean restart
# and a crash keep the durable grants of both, and tokens afterwards are above
# every token before; a stream of first-time locks in one partition uses that
# lock server's wide marker, and a crash then delays every lock; grants kept
# without a row on both lock servers never outgrow the shared table that
# records them.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $node = lockq_node('servers',
	conf => "lockq.lock_servers = 2\nlockq.session_locks_per_backend = 1\n"
	  . "lockq.max_session_locks_per_role = 1000000\n");

ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'two lock servers run');

# Lock ids of each partition: the bucket (hash_bytes, which hashtext is, of
# the id modulo 4096) modulo the number of lock servers.
my %part;
for my $row (split /\n/, $node->safe_psql('postgres', q{
	SELECT id, ((hashtext(id)::bigint & 4294967295) % 4096) % 2
	  FROM (SELECT 'L' || i AS id FROM generate_series(1, 40) i) s}))
{
	my ($id, $p) = split /\|/, $row;
	push @{ $part{$p} }, $id;
}
ok(@{ $part{0} // [] } >= 12 && @{ $part{1} // [] } >= 11, 'ids of both partitions');
my ($a0, $b0, $c0, $d0) = @{ $part{0} };
my ($a1, $b1, $c1, $d1) = @{ $part{1} };
# PostgreSQL's MaxBackends: the request slots are twice as many
my $max_backends = $node->safe_psql('postgres',
	"SELECT current_setting('max_connections')::int
	      + current_setting('autovacuum_max_workers')::int + 1
	      + current_setting('max_worker_processes')::int
	      + current_setting('max_wal_senders')::int");

# --- grants and hand-offs in both partitions, tokens over both ------------------
my @tokens;
for my $round (1 .. 5)
{
	for my $id ($a0, $a1)
	{
		my $t = scalar_query($node, "SELECT lockq_try('$id', 'o$round', '1 hour')");
		push @tokens, $t;
		is(scalar_query($node, "SELECT lockq_release('$id', 'o$round', $t)"), 't',
			"$id granted and released (round $round)");
	}
}
my @sorted = sort { $a <=> $b } @tokens;
is("@tokens", "@sorted", 'tokens increase strictly over grants alternating between the partitions');
my %seen;
ok(!(grep { $seen{$_}++ } @tokens), 'no token twice');

my @w;
my $h0 = scalar_query($node, "SELECT lockq_try('$b0', 'holder', '1 hour')");
my $h1 = scalar_query($node, "SELECT lockq_try('$b1', 'holder', '1 hour')");
for my $n (1 .. 3)
{
	for my $id ($b0, $b1)
	{
		push @w, [ $id, "w$n",
			start_waiter($node, "$id-w$n",
				"SELECT 'granted:' || lockq_get('$id', 'w$n', '1 hour');") ];
		ok(wait_for_waiters($node, $id, $n), "w$n queued for $id");
	}
}
is(queue_of($node, $b0), 'w1 w2 w3', "the queue of $b0 is in arrival order");
is(queue_of($node, $b1), 'w1 w2 w3', "the queue of $b1 is in arrival order");

# lockq_lock_servers shows each lock server with its partition's gauges, and
# lockq_stats adds them up
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s/%s/%s/%s', s.server,
				s.pid = a.pid, s.holders, s.waiters, s.longest_queue), ' '
			ORDER BY s.server)
	  FROM lockq_lock_servers s
	  JOIN pg_stat_activity a
		ON a.application_name = 'lockq lock server'
			|| CASE WHEN s.server > 0 THEN ' ' || s.server ELSE '' END}),
	'0:t/1/3/3 1:t/1/3/3',
	'lockq_lock_servers: each pid, and each partition one holder and three waiters');
is($node->safe_psql('postgres', q{
	SELECT (SELECT sum(holders) FROM lockq_lock_servers) = holders
		   AND (SELECT sum(waiters) FROM lockq_lock_servers) = waiters
		   AND (SELECT pid FROM lockq_lock_servers WHERE server = 0) = worker_pid
	  FROM lockq_stats}),
	't', 'lockq_stats adds the lock servers up; its worker_pid is lock server 0\'s');

# --- lock server 1 restarts; lock server 0 serves on -----------------------------
is($node->safe_psql('postgres',
		"SELECT string_agg(application_name, ', ' ORDER BY application_name)
		   FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'lockq lock server, lockq lock server 1', 'pg_stat_activity names each');
my $s1 = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'lockq lock server 1'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($s1)");
my $t0 = scalar_query($node, "SELECT lockq_try('$c0', 'during', '1 hour')");
ok($t0 > 0, 'lock server 0 grants while lock server 1 restarts');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity
		  WHERE backend_type = 'lockq lock server' AND pid <> $s1"),
	'lock server 1 came back');
is(scalar_query($node, "SELECT token FROM lockq_locks WHERE lock_id = '$b1'"), $h1,
	"the grant of $b1 survived lock server 1's restart");
is(queue_of($node, $b1), 'w1 w2 w3', "and so did its queue");
my $t1 = scalar_query($node, "SELECT lockq_try('$c1', 'after', '1 hour')");
ok($t1 > $t0, 'lock server 1 grants again, above the tokens of lock server 0');

# the queues drain in order, each hand-off with a higher token
for my $id ($b0, $b1)
{
	my $prev = $id eq $b0 ? $h0 : $h1;
	is(scalar_query($node, "SELECT lockq_release('$id', 'holder', $prev)"), 't',
		"$id released by its holder");
	for my $n (1 .. 3)
	{
		my ($w) = grep { $_->[0] eq $id && $_->[1] eq "w$n" } @w;
		my $t = waiter_result($w->[2], qr/granted:(\d+)/);
		ok(defined $t && $t > $prev, "w$n of $id granted, with a higher token");
		$prev = $t // $prev;
		is(scalar_query($node, "SELECT lockq_release('$id', 'w$n', $prev)"), 't',
			"w$n of $id released");
	}
}
end_session($_->[2]) for @w;

# --- lock server 1 stalled: lock server 0 serves on ------------------------------
# (a fault point armed for lock server 1 only: lockq_fault_arm's server).
fault_functions($node);
my $s0 = $node->background_psql('postgres');
$s0->query_safe("SELECT lockq_now()");
# A leased grant of lock server 1 that another session releases while it
# stalls.  Its lock's first release made it unsettled with a fence_ttl that
# covers the grant, so its holder may release it without lock server 1.
my $q1 = $part{1}[10];
$s0->query_safe("SELECT lockq_release('$q1', 'qr', lockq_try('$q1', 'qr', '1 minute'))");
my $t_q1 = $s0->query_safe("SELECT lockq_try('$q1', 'qr', '1 minute')");
$node->safe_psql('postgres', "SELECT lockq_fault_arm('batch-start', 'wait', server => 1)");
my $stalled = start_waiter($node, 'stalled',
	"SELECT 'got:' || lockq_try('$a1', 'st', '1 minute');");
ok(fault_fired($node, 'batch-start'), 'lock server 1 is stalled at the start of a batch');
my $t_free = $s0->query_safe("SELECT lockq_try('$a0', 'free', '1 minute')");
ok($t_free > 0, 'lock server 0 grants meanwhile');
is($s0->query_safe("SELECT lockq_release('$a0', 'free', $t_free)"), 't', 'and releases');
is($s0->query_safe("SELECT hits FROM lockq_faults() WHERE name = 'batch-start'"), '1',
	'lock server 0 never hit the point armed for lock server 1');

# A session that ends meanwhile keeps its request slot until lock server 1
# has applied its end too.  New sessions in its place (PostgreSQL gives each
# the lowest free BackendId, the one it had) take a spare slot, and lock
# server 0 serves them at once; so does it each of them after it ended.
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT pg_backend_pid(); SELECT lockq_get('$a1', 'gone', '1 minute', timeout => '200 ms')");
	like($err, qr/could not obtain lock/, 'a session\'s wait for a lock of lock server 1 ends at its limit');
	ok($out =~ /^(\d+)$/ && wait_for_exit($1), 'and the session ends');
	for my $i (1 .. 3)
	{
		($rc, $out, $err) = $node->psql('postgres',
			"SET statement_timeout = '10s'; SELECT pg_backend_pid(); "
			  . "SELECT lockq_release('$a0', 'new$i', lockq_try('$a0', 'new$i', '1 minute'))");
		my ($pid, $ok) = split /\n/, $out // '';
		is($ok, 't', "new session $i takes and releases a lock of lock server 0 at once")
		  or diag($err);
		ok(defined $pid && wait_for_exit($pid), "and ends");
	}
}

# DISCARD ALL (a session pooler's reset) asks only the lock servers that may
# hold a session-bound grant of the session: with lock server 1 stalled, it
# ends a session's locks of lock server 0 at once, also after leased locks
# (which it leaves alone), and after none at all.
{
	my ($x0, $y0, $z0) = @{ $part{0} }[5 .. 7];
	my $conn = $node->connstr('postgres') . " options='-c statement_timeout=10s'";
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT lockq_try('$x0') > 0, lockq_try('$y0') > 0;
		SELECT lockq_get('$z0') > 0;
		SELECT count(*) FROM lockq_locks WHERE lock_id IN ('$x0', '$y0', '$z0');
		DISCARD ALL;
		SELECT count(*) FROM lockq_locks WHERE lock_id IN ('$x0', '$y0', '$z0');
		SELECT lockq_try('$x0', 'leased', '1 minute') > 0;
		DISCARD ALL;
		SELECT count(*) FROM lockq_locks WHERE lock_id = '$x0' AND owner = 'leased';
		SELECT lockq_release('$x0', 'leased');
		DISCARD ALL;
		SELECT 'done'}, connstr => $conn);
	is($out, "t|t\nt\n3\n0\nt\n1\nt\ndone",
		'DISCARD ALL does not wait for a stalled lock server whose locks the session never took')
	  or diag("rc $rc: $err");
}

# A session's end goes only to the lock servers that may hold anything of
# it: one that used only lock server 0's locks ends without an entry in
# lock server 1's ring, and its session-bound lock ends at once.
my $queued = "SELECT queued_requests FROM lockq_lock_servers WHERE server = 1";
{
	my ($w0, $v0) = @{ $part{0} }[9, 10];
	my $before = $s0->query_safe($queued);
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT pg_backend_pid();
		SELECT lockq_try('$w0') > 0;
		SELECT lockq_release('$v0', 'x', lockq_try('$v0', 'x', '1 minute'));
		SELECT lockq_holds('$w0', (SELECT token FROM lockq_locks WHERE lock_id = '$w0'))},
		connstr => $node->connstr('postgres') . " options='-c statement_timeout=10s'");
	my ($pid, @ok) = split /\n/, $out // '';
	is("@ok", 't t t', 'a session takes, releases and holds locks of lock server 0 only')
	  or diag($err);
	ok(defined $pid && wait_for_exit($pid), 'and ends');
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = '$w0'"),
		'lock server 0 ends its session-bound lock');
	is($s0->query_safe($queued), $before, 'lock server 1 is not told (its ring got nothing)');
}

# A session whose one use of lock server 1 is a quick release (of a leased
# grant that another session took) ends there too: its release waits in its
# slot for lock server 1, so its end goes to lock server 1 after it and the
# slot stays the session's until lock server 1 has applied both.
{
	my $before = $s0->query_safe($queued);
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT pg_backend_pid();
		SELECT lockq_release('$q1', 'qr', $t_q1);
		SELECT lockq_holds('$q1', $t_q1)},
		connstr => $node->connstr('postgres') . " options='-c statement_timeout=10s'");
	my ($pid, @ok) = split /\n/, $out // '';
	is("@ok", 't f', 'a session releases a leased lock of the stalled lock server 1 by itself')
	  or diag($err);
	ok(defined $pid && wait_for_exit($pid), 'and ends');
	is($s0->query_safe($queued), $before + 2, 'lock server 1\'s ring holds its release and its end');
}
$node->safe_psql('postgres',
	"SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
my $t_st = waiter_result($stalled, qr/got:(\d+)/);
ok(defined $t_st && $t_st > $t_free, 'the request stalled in lock server 1 is granted once it goes on');
is($s0->query_safe("SELECT lockq_release('$a1', 'st', $t_st)"), 't', 'and released');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = '$q1'"),
	'lock server 1 has applied the quick release made while it stalled');
$stalled->quit;
$s0->quit;

# --- a stale ring entry leaves lock server 0's request alone ---------------------
# A request that a lock server answers from the slots in flight (here lock
# server 1's careful steps after a failed batch) keeps its entry in that
# lock server's ring, and a later batch drains it.  By then the session may
# have sent its next request to lock server 0: that request is lock server
# 0's alone.  (Lock server 1 used to mark it taken and skip it; lock server
# 0 then never applied it, and the session waited for ever.)
my ($sa1, $sb1, $sc1) = @{ $part{1} }[7 .. 9];
my $sa0 = $part{0}[11];
# polls until n processes (default 1) wait at the fault point name
my $fault_waits = sub {
	my ($name, $n) = @_;
	$n //= 1;
	return $node->poll_query_until('postgres',
		"SELECT coalesce((SELECT waiting = $n FROM lockq_faults() WHERE name = '$name'), false)");
};
my $waits_in_lockq = sub {
	my ($app) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$app'
		    AND wait_event_type = 'Extension' AND state = 'active'");
};
$node->safe_psql('postgres', q{
	SELECT lockq_fault_arm('batch-start', 'error', server => 1);
	SELECT lockq_fault_arm('recover-start', 'wait', server => 1)});
my $rt = start_waiter($node, 'stale-t', "SELECT 'got-t:' || lockq_try('$sa1', 't', '1 minute');");
ok($fault_waits->('recover-start'),
	'lock server 1 failed a batch and waits before it rebuilds its state');
my $ru = start_waiter($node, 'stale-u', "SELECT 'got-u:' || lockq_try('$sb1', 'u', '1 minute');");
ok($waits_in_lockq->('stale-u'), 'a request for lock server 1 waits in its ring');
my $rs = start_waiter($node, 'stale-s', "SELECT 'got-s1:' || lockq_get('$sc1', 's', '1 minute');");
ok($waits_in_lockq->('stale-s'), 'and then another session\'s');
$node->safe_psql('postgres', q{
	SELECT lockq_fault_arm('batch-apply', 'wait', server => 1);
	SELECT lockq_fault_arm('batch-start', 'wait', server => 0);
	SELECT lockq_fault_wakeup('recover-start')});
ok(defined waiter_result($rt, qr/got-t:(\d+)/) && defined waiter_result($ru, qr/got-u:(\d+)/),
	'lock server 1 answers the requests one at a time');
my $g1 = waiter_result($rs, qr/got-s1:(\d+)/);
ok(defined $g1, 'also the last, while its entry stays in the ring');
ok($fault_waits->('batch-apply'),
	'lock server 1 drains its ring and stalls after the first entry, before the last');
$rs->{stdin} .=
  "SELECT 'got-s2:' || lockq_get('$sa0', 's', '1 minute', timeout => '20 s');\n";
$rs->{run}->pump_nb();
ok($waits_in_lockq->('stale-s'), 'the session sends its next request, to lock server 0');
ok($fault_waits->('batch-start'), 'which stalls at the start of a batch');
$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('batch-apply')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'lockq lock server 1'
		    AND query = 'lockq: waiting for requests'"),
	'lock server 1 finishes its batch, the stale entry in it');
$node->safe_psql('postgres',
	"SELECT lockq_fault_disarm(); SELECT lockq_fault_wakeup('batch-start')");
my $g0 = waiter_result($rs, qr/(got-s2:\d+|ERROR:.*)/);
like($g0 // 'no answer', qr/^got-s2:\d+$/, 'lock server 0 applies the request and grants the lock');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(lock_id || '=' || owner, ' ' ORDER BY lock_id) FROM lockq_locks
	 WHERE lock_id IN ('$sa1', '$sb1', '$sc1', '$sa0')}),
	join(' ', sort("$sa1=t", "$sb1=u", "$sc1=s", "$sa0=s")), 'each of the four locks held once, by its owner');
$_->quit for ($rt, $ru, $rs);
$node->safe_psql('postgres', qq{
	SELECT lockq_release(lock_id, owner) FROM lockq_locks
	 WHERE lock_id IN ('$sa1', '$sb1', '$sc1', '$sa0')});

# --- a session that no lock server knows frees its slot itself -------------------
# A session that took a slot but sent no lock server anything (here its
# only call is refused by lockq.namespace_privileges, after it took the
# slot) frees the slot itself when it ends: with both lock servers
# stalled, more such sessions than there are slots come and go.
{
	my $nslots = 2 * $max_backends;
	$node->safe_psql('postgres', q{
		CREATE ROLE lq_nobody LOGIN;
		ALTER ROLE lq_nobody SET statement_timeout = '10s';
		ALTER SYSTEM SET lockq.namespace_privileges = on;
		SELECT pg_reload_conf()});
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('batch-start', 'wait', times => 2)");
	my @held = map { start_waiter($node, "held$_", "SELECT 'got:' || lockq_try('$part{$_}[6]', 'h', '1 minute');") } (0, 1);
	ok($fault_waits->('batch-start', 2), 'both lock servers stalled at the start of a batch');
	my $n = $nslots + 10;
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT lockq.lockq_try('forbidden');\n\\c\n" x $n,
		extra_params => [ '-U', 'lq_nobody' ], on_error_stop => 0);
	my $refused = () = $err =~ /permission denied for lock "forbidden"/g;
	is($refused, $n, "$n sessions that only took a slot come and go ($nslots slots)")
	  or diag(substr($err, -400));
	$node->safe_psql('postgres',
		"SELECT lockq_fault_disarm('batch-start'); SELECT lockq_fault_wakeup('batch-start')");
	for my $k (0, 1)
	{
		my $t = waiter_result($held[$k], qr/got:(\d+)/);
		ok(defined $t && scalar_query($node, "SELECT lockq_release('$part{$k}[6]', 'h', $t)") eq 't',
			"lock server $k goes on");
		$held[$k]->quit;
	}
	$node->safe_psql('postgres', q{
		ALTER SYSTEM RESET lockq.namespace_privileges;
		SELECT pg_reload_conf()});
	$node->safe_psql('postgres', 'DROP ROLE lq_nobody');
}

# --- DISCARD ALL in a session holding grants in both partitions ------------------
# (it asks each lock server whose lock the session took since its last
# DISCARD ALL: the second time only lock server 1)
{
	my ($x0, $x1) = ($part{0}[8], $part{1}[5]);
	is($node->safe_psql('postgres', qq{
		SELECT lockq_try('$x0') > 0 AND lockq_try('$x1') > 0;
		DISCARD ALL;
		SELECT count(*) FROM lockq_locks WHERE lock_id IN ('$x0', '$x1');
		SELECT lockq_try('$x1') > 0;
		DISCARD ALL;
		SELECT count(*) FROM lockq_locks WHERE lock_id IN ('$x0', '$x1')}),
		"t\n0\nt\n0", 'DISCARD ALL ends the session-bound grants of both lock servers, each time');
}

# --- a session that ends holding grants in both partitions -----------------------
my $s = start_waiter($node, 'both',
	"SELECT lockq_try('$a0') > 0 AND lockq_try('$a1') > 0 AS held;");
is(waiter_result($s, qr/^(t)$/m), 't', 'one session holds a session-bound lock in each partition');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id IN ('$a0', '$a1')"),
	'2', 'both are shown');
end_session($s);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id IN ('$a0', '$a1')"),
	'its end released both');
ok(scalar_query($node, "SELECT lockq_try('$a0', 'next', '1 hour')") > 0 &&
	scalar_query($node, "SELECT lockq_try('$a1', 'next', '1 hour')") > 0,
	'and both locks are free for others');

# --- the room for session-bound grants is one for both lock servers -----------
# (lockq.session_locks_per_backend = 1: as many as there are backends)
my $room = $max_backends;
my $sess = $node->background_psql('postgres');
is($sess->query_safe(
		"SELECT count(lockq_try('room' || i)) FROM generate_series(1, $room) i"),
	$room, "$room session-bound locks fit, over both partitions");
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT lockq_try('$part{0}[4]'), lockq_try('$part{1}[4]')");
like($err, qr/ERROR:  out of shared memory for session-bound locks/,
	'one more is refused, whichever lock server it goes to');
$sess->quit;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM lockq_locks WHERE lock_id LIKE 'room%'"),
	'they end with their session');

# --- a clean restart, then a crash: durable grants of both partitions stay ------
my $high = scalar_query($node, 'SELECT max(token) FROM lockq_locks');
my $held = $node->safe_psql('postgres',
	"SELECT string_agg(lock_id || '=' || token, ' ' ORDER BY lock_id) FROM lockq_locks");
$node->restart;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'both lock servers run after a restart');
is($node->safe_psql('postgres',
		"SELECT string_agg(lock_id || '=' || token, ' ' ORDER BY lock_id) FROM lockq_locks"),
	$held, 'the grants of both partitions survived a clean restart');
ok($node->poll_query_until('postgres',
		'SELECT holders = (SELECT count(*) FROM lockq_locks) FROM lockq_stats'),
	'each grant is loaded by one lock server (the gauges add up to the grants)');
my $ta = scalar_query($node, "SELECT lockq_try('$b0', 'x', '1 hour')");
my $tb = scalar_query($node, "SELECT lockq_try('$b1', 'x', '1 hour')");
ok($ta > $high && $tb > $ta, 'tokens after the restart are above every one before');
$held = $node->safe_psql('postgres',
	"SELECT string_agg(lock_id || '=' || token, ' ' ORDER BY lock_id) FROM lockq_locks");

crash_restart($node);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'both lock servers run after a crash');
ok($node->poll_query_until('postgres', 'SELECT lockq_now() > 0'), 'lockq serves');
is($node->safe_psql('postgres',
		"SELECT string_agg(lock_id || '=' || token, ' ' ORDER BY lock_id) FROM lockq_locks"),
	$held, 'the durable grants of both partitions survived a crash');
ok($node->poll_query_until('postgres',
		'SELECT holders = (SELECT count(*) FROM lockq_locks) FROM lockq_stats'),
	'each grant is loaded by one lock server, after the crash too');
my $tc = scalar_query($node, "SELECT lockq_try('$d0', 'y', '1 hour')");
my $td = scalar_query($node, "SELECT lockq_try('$d1', 'y', '1 hour')");
ok($tc > $tb && $td > $tc, 'tokens after the crash are above every one before')
  or diag("before: $ta $tb, after: $tc $td");

# --- the shared table of grants kept without a row -------------------------------
# Grants on unsettled locks are kept without their lockq.owners row (for
# lockq.grant_row_delay, an hour here); the shared table of quickly
# releasable grants (lockq_leases.c) is then their only record, so a lock
# server offers it only its share: two lock servers with many such grants
# each fill no more than the table holds, and every grant stays visible to
# lockq_holds and lockq_locks (with a share each of the whole table, the
# grants past its size had no record at all).
$node->safe_psql('postgres',
	"ALTER SYSTEM SET lockq.max_unsettled_rate = 0; ALTER SYSTEM SET lockq.grant_row_delay = '1h'; "
	  . 'SELECT pg_reload_conf()');
ok($node->poll_query_until('postgres', 'SHOW lockq.grant_row_delay', '1h'),
	'every lock unsettled, grants kept without a row for an hour');
is(scalar_query($node, q{
	WITH ids AS MATERIALIZED (SELECT 'rowless:' || i AS id FROM generate_series(1, 1200) i),
		 granted AS MATERIALIZED (SELECT id, lockq_try(id, 'r', '30 seconds') AS t FROM ids)
	SELECT format('%s %s', count(*), count(*) FILTER (WHERE lockq_holds(id, t)))
	  FROM granted WHERE t IS NOT NULL}),
	'1200 1200',
	'1,200 grants over both partitions: each holds');
is(scalar_query($node, q{SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'rowless:%'}),
	'1200', 'and each is shown');
cmp_ok(scalar_query($node,
		q{SELECT count(*) FROM lockq.lockq_rowless_grants() WHERE lock_id LIKE 'rowless:%'}),
	'>', 0, 'some of them without a row');
cmp_ok(scalar_query($node,
		q{SELECT count(*) FROM lockq.owners WHERE lock_id LIKE 'rowless:%'}),
	'>', 0, 'and the others with theirs, past the shares of the table');
is(scalar_query($node, q{
	SELECT count(*) FROM generate_series(1, 1200) i
	 WHERE lockq_release('rowless:' || i, 'r')}), '1200', 'all released');
$node->safe_psql('postgres',
	'ALTER SYSTEM RESET lockq.max_unsettled_rate; ALTER SYSTEM RESET lockq.grant_row_delay; '
	  . 'SELECT pg_reload_conf()');
ok($node->poll_query_until('postgres', 'SHOW lockq.grant_row_delay', '100ms'), 'settings back');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM lockq.unsettled'),
	'and the wide markers settle');

# --- a stream of first-time locks in partition 1: its wide marker ----------------
# Above lockq.max_unsettled_rate lock server 1 makes every lock of its
# partition unsettled at once, by its own wide marker's row (an id longer
# than any lock id).  A crash then delays every lock, lock server 0's too:
# the start merges every wide marker into lock server 0's ('').
$node->safe_psql('postgres',
	'ALTER SYSTEM SET lockq.max_unsettled_rate = 20; SELECT pg_reload_conf()');
ok($node->poll_query_until('postgres', 'SHOW lockq.max_unsettled_rate', '20'),
	'lockq.max_unsettled_rate = 20');
cmp_ok(scalar_query($node, q{
	WITH ids AS MATERIALIZED (
		SELECT id FROM (SELECT 'job:' || i AS id FROM generate_series(1, 4000) i) s
		 WHERE ((hashtext(id)::bigint & 4294967295) % 4096) % 2 = 1)
	SELECT count(*) FROM ids WHERE lockq_release(id, 'w', lockq_try(id, 'w', '3 seconds'))}),
	'>', 1500, 'a stream of first-time locks of partition 1 is granted and released');
is(scalar_query($node,
		'SELECT count(*) FROM lockq.unsettled WHERE octet_length(lock_id) > 255'),
	'1', "lock server 1's wide marker is there");
is(scalar_query($node, q{SELECT count(*) FROM lockq.unsettled WHERE lock_id = ''}),
	'0', "lock server 0 has none (its partition had no stream)");
my $lsn = scalar_query($node, 'SELECT pg_current_wal_insert_lsn()');
ok($node->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn"),
	'flushed');
my $log_at = -s $node->logfile;
crash_restart($node);
ok($node->poll_query_until('postgres', 'SELECT lockq_now() > 0'), 'lockq serves after the crash');
ok($node->log_contains('lockq delays every lock until every lease that may have been lost has ended',
		$log_at), 'the start says every lock is delayed');
is(scalar_query($node, "SELECT lockq_try('$part{0}[4]', 'c') IS NULL"), 't',
	"a lock of partition 0 never used is delayed too");
is(scalar_query($node,
		q{SELECT count(*) FROM lockq.unsettled WHERE octet_length(lock_id) > 255 OR lock_id = ''}),
	'1', "the wide markers were merged into lock server 0's");
ok($node->poll_query_until('postgres',
		"SELECT lockq_try('$part{0}[4]', 'c', '1 minute') IS NOT NULL"),
	'and granted once the delay is over');

$node->stop;
done_testing();

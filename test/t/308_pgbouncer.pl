# lockq behind a real pgbouncer in transaction pooling mode, with two server
# connections shared by many clients.
#
# Two clients of pgbouncer take turns keeping one server connection inside
# an open transaction, so that every other statement must go to the other
# one: that makes the routing deterministic.  With it the test shows
#
# * pg_advisory_lock breaking: a lock taken by one client is "held" by
#   another client routed to the same server connection, the taker's own
#   unlock on the other connection fails, and the lock outlives the client;
# * lockq with an explicit owner working across server connections: one
#   client's try, renew, fenced write and release each on another backend;
# * session-bound lockq locks (owner NULL) belonging to the server
#   connection, not to the client, and ending with it;
# * behind a session pooler, DISCARD ALL (pgbouncer's end of a client
#   session) releasing advisory locks and session-bound lockq locks alike,
#   so that the next client does not inherit them;
# * a blocking lockq_get holding a server connection for its whole wait:
#   others proceed while the pool has room; when waiters fill the pool, the
#   holder cannot release until a waiter gives up; a client that dies while
#   waiting leaves no queue entry;
# * client-side waiters (lockq_enqueue, lockq_heartbeat, no LISTEN) holding
#   no server connection, granted in FIFO order together with a lockq_get
#   waiter;
# * 8 clients with explicit owners contending through the pool (try, get,
#   enqueue and heartbeat, renew, fenced write, release) with no lost update,
#   each client served by both server connections;
# * the lockq CLI waiting and working through the pooler (its NOTIFY is
#   lost: it learns of the grant from a heartbeat; and its empty search_path
#   stays on the server connection, which is why doc/poolers.md says liblockq wants
#   a direct connection or a session pooler).
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

my $pgbouncer_bin = '/usr/sbin/pgbouncer';
require_tool(-x $pgbouncer_bin, 'pgbouncer not installed');
my $lockq_cli = "$ENV{TESTDIR}/client/lockq";
my $timeout = $PostgreSQL::Test::Utils::timeout_default;
my $t_start = time();

my $node = lockq_node('pooled');
$node->safe_psql(
	'postgres', q{
CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL);
INSERT INTO counter VALUES (1, 0);
CREATE TABLE writes (client int, token bigint, value int, pid int);
CREATE TABLE fenced (lock_id text, owner text, token bigint, pid int);
});

# --- pgbouncer ----------------------------------------------------------------
# A Cluster object that is never initialised stands for pgbouncer's address
# (same socket directory as the node, pgbouncer's port): its psql,
# background_psql and poll_query_until connect through pgbouncer.
my ($bouncer, $bouncer_run) = start_pgbouncer($node, pool_size => 2, databases =>
	  "; the same database behind a session pool\n"
	  . 'session = host=' . $node->host . ' port=' . $node->port . " dbname=postgres pool_mode=session\n");
pass('pgbouncer accepts connections');
my ($host, $nport, $port, $dir) = ($node->host, $node->port, $bouncer->port, $bouncer->basedir);

# admin(command) runs a command on pgbouncer's admin console and returns
# its rows as hashes.
sub admin
{
	my ($cmd) = @_;
	my ($out, $err) = ('', '');
	$bouncer->psql('pgbouncer', $cmd, stdout => \$out, stderr => \$err,
		on_error_die => 1, extra_params => [ '-P', 'tuples_only=off', '-P', 'footer=off' ]);
	my ($head, @lines) = split /\n/, $out;
	return () unless defined $head;
	my @cols = split /\|/, $head, -1;
	my @rows;
	for my $line (@lines)
	{
		my %row;
		@row{@cols} = split /\|/, $line, -1;
		push @rows, \%row;
	}
	return @rows;
}

sub pool
{
	my ($db) = @_;
	my ($row) = grep { $_->{database} eq $db } admin('SHOW POOLS');
	return $row;
}

my %config = map { $_->{key} => $_->{value} } admin('SHOW CONFIG');
is($config{pool_mode}, 'transaction', 'pgbouncer pools by transaction');
is($config{default_pool_size}, '2', 'with two server connections per pool');

# --- clients -------------------------------------------------------------------
# client(db) is a psql session connected to pgbouncer.
sub client
{
	my ($db) = @_;
	my $c = $bouncer->background_psql($db // 'postgres', on_error_stop => 0);
	$c->set_query_timer_restart;
	return $c;
}

# sql(client, query) runs query and returns its output split on '|' (one
# row expected); the query must not write to stderr.
sub sql
{
	my ($c, $query) = @_;
	$c->{stderr} = '';
	my $out = $c->query($query);
	die "query failed: $query: $c->{stderr}" if $c->{stderr} ne '';
	return split /\|/, $out, -1;
}

# sql_err(client, query) runs query and returns (output, stderr).
sub sql_err
{
	my ($c, $query) = @_;
	$c->{stderr} = '';
	my $out = $c->query($query);
	(my $err = $c->{stderr}) =~ s/\s+$//;
	return ($out, $err);
}

# send_async(client, query) sends query and returns at once;
# poll_async(client) returns undef until it has completed, then
# [stdout, stderr]; wait_async(client) waits for that.
sub send_async
{
	my ($c, $query) = @_;
	$c->{lq_n}++;
	$c->{stdout} = '';
	$c->{stderr} = '';
	$c->{timeout}->start;
	$c->{stdin} .= "$query\n;\n\\echo '<done $c->{lq_n}>'\n\\warn '<done $c->{lq_n}>'\n";
	$c->{run}->pump_nb;
	return;
}

sub poll_async
{
	my ($c) = @_;
	my $m = "<done $c->{lq_n}>\n";
	$c->{run}->pump_nb;
	return undef
	  unless index($c->{stdout}, $m) >= 0 && index($c->{stderr}, $m) >= 0;
	my ($out, $err) = ($c->{stdout}, $c->{stderr});
	s/\Q$m\E// for ($out, $err);
	s/\s+$// for ($out, $err);
	return [ $out, $err ];
}

sub wait_async
{
	my ($c) = @_;
	my $r;
	until ($r = poll_async($c))
	{
		die 'timed out' if $c->{timeout}->is_expired;
		$c->{run}->pump;
	}
	return @$r;
}

# Routing.  pin(client) opens a transaction in client and returns the pid
# of the server connection pgbouncer gave it; that connection stays with
# the client until unpin.  The two pinners always hold the same server
# connection each ($pid_x for $pin_x, $pid_y for $pin_y); route_to(pid)
# leaves exactly that one free, so that every other client's statement runs
# on it, and returns what the pinner that let go of it was sent.
sub pin
{
	my ($c) = @_;
	my ($pid) = sql($c, "BEGIN; SELECT pg_backend_pid();");
	$c->{lq_pinned} = 1;
	return $pid;
}

sub unpin
{
	my ($c) = @_;
	my $out = join '|', sql($c, 'COMMIT');
	$c->{lq_pinned} = 0;
	return $out;
}

my ($pin_x, $pin_y, $pid_x, $pid_y);

sub start_router
{
	($pin_x, $pin_y) = (client(), client());
	$pid_x = pin($pin_x);
	$pid_y = pin($pin_y);
	die "one server connection for two open transactions" if $pid_x == $pid_y;
	return;
}

sub route_to
{
	my ($pid) = @_;
	my ($hold, $free, $held) =
	  $pid == $pid_y ? ($pin_x, $pin_y, $pid_x) : ($pin_y, $pin_x, $pid_y);
	if (!$hold->{lq_pinned})
	{
		my $got = pin($hold);
		die "pinned $got instead of $held" unless $got == $held;
	}
	return $free->{lq_pinned} ? unpin($free) : '';
}

sub stop_router
{
	for my $c ($pin_x, $pin_y)
	{
		unpin($c) if $c->{lq_pinned};
		$c->quit;
	}
	return;
}

start_router();
my %servers = map { $_->{remote_pid} => 1 } grep { $_->{database} eq 'postgres' } admin('SHOW SERVERS');
is_deeply(\%servers, { $pid_x => 1, $pid_y => 1 },
	'two clients in open transactions use both server connections of the pool');

# --- pg_advisory_lock breaks behind a transaction pooler ------------------------
my $ca = client();
my $cb = client();
route_to($pid_y);
my ($pid, $res) = sql($ca, 'SELECT pg_backend_pid(), pg_advisory_lock(42)');
is($pid, $pid_y, 'advisory: client A takes pg_advisory_lock(42) on server connection Y');
($pid, $res) = sql($cb, 'SELECT pg_backend_pid(), pg_try_advisory_lock(42)');
is("$pid $res", "$pid_y t",
	'advisory: client B, routed to Y too, "gets" the lock that A holds');
route_to($pid_x);
my ($out, $err) = sql_err($ca, 'SELECT pg_backend_pid(), pg_advisory_unlock(42)');
is($out, "$pid_x|f", "advisory: A's unlock, routed to X, returns false");
like($err, qr/WARNING:  you don't own a lock of type ExclusiveLock/, 'advisory: with a warning');
$ca->quit;
is( $node->safe_psql('postgres',
		"SELECT string_agg(DISTINCT pid::text, ',') FROM pg_locks WHERE locktype = 'advisory' AND objid = 42 AND granted"),
	$pid_y,
	'advisory: after A disconnected, the lock is still held by server connection Y');
route_to($pid_y);
sql($cb, 'SELECT pg_advisory_unlock_all()');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	'0', 'advisory: cleaned up');

# --- explicit owner: one client across both server connections ---------------
# Client A's calls alternate between Y and X; B shares Y with A.
$ca = client();
my %pids_a;
($pid, my $tok) = sql($ca, "SELECT pg_backend_pid(), lockq_try('E', 'client-a', '1 min')");
$pids_a{$pid}++;
ok($tok > 0, 'owner: A takes lock E on Y');
($pid, $res) = sql($cb, "SELECT pg_backend_pid(), lockq_try('E', 'client-b') IS NULL");
is("$pid $res", "$pid_y t", 'owner: B on the same server connection does not get it');
($pid, $res) = sql($cb, "SELECT pg_backend_pid(), lockq_release('E', 'client-b')");
is($res, 'f', 'owner: nor can B release it');
route_to($pid_x);
($pid, $res) = sql($ca, "SELECT pg_backend_pid(), lockq_renew('E', 'client-a', $tok)");
$pids_a{$pid}++;
is("$pid $res", "$pid_x t", 'owner: A renews from X');
($pid, $res) = sql($ca,
	"BEGIN; INSERT INTO fenced SELECT 'E', 'client-a', $tok, pg_backend_pid() WHERE lockq_holds('E', $tok); SELECT pg_backend_pid(), count(*) FROM fenced WHERE token = $tok; COMMIT;"
);
$pids_a{$pid}++;
is("$pid $res", "$pid_x 1", 'owner: A writes fenced by lockq_holds in a transaction on X');
route_to($pid_y);
($pid, $res) = sql($ca, "SELECT pg_backend_pid(), lockq_holds('E', $tok)");
$pids_a{$pid}++;
is("$pid $res", "$pid_y t", 'owner: lockq_holds on Y agrees');
route_to($pid_x);
($pid, $res) = sql($ca, "SELECT pg_backend_pid(), lockq_release('E', 'client-a', $tok)");
$pids_a{$pid}++;
is("$pid $res", "$pid_x t", 'owner: A releases from X');
is(scalar(keys %pids_a), 2, 'owner: one client, two backends: ' . join(', ', map { "$_ x$pids_a{$_}" } sort keys %pids_a));
($pid, $res) = sql($cb, "SELECT pg_backend_pid(), lockq_try('E', 'client-b') > $tok");
is("$pid $res", "$pid_x t", 'owner: now B gets it, with a later token');
sql($cb, "SELECT lockq_release('E', 'client-b')");

# --- LISTEN does not work through a transaction pooler ------------------------
# L listens and queues with a channel on Y; when the grant comes, Y is inside
# another client's transaction, and that client gets the notification.
my $l = client();
route_to($pid_y);
scalar_query($node, "SELECT lockq_try('N', 'holder', '1 min')");
sql($l, 'LISTEN lq_l');
($pid, $res) = sql($l, "SELECT pg_backend_pid(), lockq_enqueue('N', 'l', '1 min', 'lq_l', '1 min') IS NULL");
is("$pid $res", "$pid_y t", 'listen: client L listens and queues with a channel, on Y');
route_to($pid_x);
scalar_query($node, "SELECT lockq_release('N', 'holder')");
ok(wait_for_holder($node, 'N', 'l'), 'listen: L is granted');
my $stranger = route_to($pid_y);
like($stranger, qr/Asynchronous notification "lq_l" with payload "grant \d+ 1 N l" received from server process/,
	"listen: the grant notification went to the client whose transaction was on Y");
unlike(join('|', sql($l, 'SELECT 1')), qr/Asynchronous notification/, 'listen: L never sees it');
($pid, $tok) = sql($l, "SELECT pg_backend_pid(), lockq_heartbeat('N', 'l')");
ok($tok > 0, 'listen: L learns of the grant from lockq_heartbeat');
sql($l, "SELECT lockq_release('N', 'l', $tok)");
$l->quit;

# --- session-bound locks belong to the server connection ----------------------
route_to($pid_y);
($pid, $tok, my $sowner) = sql($ca, "SELECT pg_backend_pid(), lockq_try('S'), lockq_session_owner()");
is($pid, $pid_y, 'session-bound: A takes S (owner NULL) on Y');
is( $node->safe_psql('postgres', "SELECT owner || ' ' || session_pid FROM lockq_locks WHERE lock_id = 'S'"),
	"$sowner $pid_y",
	"session-bound: its owner is Y's session ($sowner), not A's");
($pid, $res) = sql($cb, "SELECT pg_backend_pid(), lockq_try('S')");
is("$pid $res", "$pid_y $tok",
	"session-bound: B, routed to Y, gets the same grant (re-entrant: it is Y's lock)");
route_to($pid_x);
($pid, $res) = sql($ca, "SELECT pg_backend_pid(), lockq_release('S')");
is("$pid $res", "$pid_x f", 'session-bound: A, routed to X, cannot release it');
($pid, $res) = sql($ca, "SELECT pg_backend_pid(), lockq_try('S') IS NULL");
is("$pid $res", "$pid_x t", 'session-bound: nor take it again');
$ca->quit;
$cb->quit;
is($node->safe_psql('postgres', "SELECT session_pid FROM lockq_locks WHERE lock_id = 'S'"),
	$pid_y, 'session-bound: the lock outlives both clients');
my $session_releases = scalar_query($node, 'SELECT session_releases FROM lockq_stats');
route_to($pid_y);    # Y idle, so that RECONNECT closes it at once
admin('RECONNECT postgres');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid_y"),
	'session-bound: pgbouncer closes server connection Y (RECONNECT)');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM lockq_locks WHERE lock_id = 'S'"),
	'session-bound: and the lock ends with it');
cmp_ok(scalar_query($node, 'SELECT session_releases FROM lockq_stats'), '>', $session_releases,
	'session-bound: counted as a session release');
stop_router();

# --- behind a session pooler: DISCARD ALL ---------------------------------------
$ca = client('session');
($pid, $tok) = sql($ca, "SELECT pg_backend_pid(), lockq_try('D'), pg_advisory_lock(43)");
ok($tok > 0, 'session pool: A takes D (owner NULL) and advisory lock 43');
$ca->quit;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' AND objid = 43"),
	"session pool: A's disconnect: pgbouncer's DISCARD ALL releases the advisory lock");
ok(poll_until(sub { pool('session')->{sv_idle} == 1 && pool('session')->{sv_active} == 0 }),
	'session pool: and puts the server connection back in the pool');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'D'"), '0',
	"session pool: DISCARD ALL ends A's session-bound lock too");
$cb = client('session');
my ($pid_b) = sql($cb, 'SELECT pg_backend_pid()');
is($pid_b, $pid, 'session pool: client B gets the same server connection');
($pid, $res) = sql($cb, "SELECT pg_backend_pid(), lockq_try('D')");
ok($res > $tok, "session pool: B does not inherit A's session-bound lock (a new grant, a new token)");
note "session pool: B's lockq_try('D') returned $res, A's token was $tok";
sql($cb, "SELECT lockq_release('D')");
$cb->quit;
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'D'"), '0',
	'session pool: cleaned up');

# --- a blocking lockq_get holds a server connection ---------------------------
my $h = client();
(undef, my $htok) = sql($h, "SELECT pg_backend_pid(), lockq_try('G', 'h', '1 min')");
my $w1 = client();
send_async($w1, "SELECT pg_backend_pid(), lockq_get('G', 'w1', '1 min', '1 min')");
ok(wait_for_waiters($node, 'G', 1), 'get: w1 waits in lockq_get');
my $w1_pid = scalar_query($node, "SELECT session_pid FROM lockq_waiters WHERE owner = 'w1'");
is(pool('postgres')->{sv_active}, 1, 'get: it holds a server connection while it waits');
my $o = client();
my %pids_o;
for my $i (1 .. 5)
{
	($pid, $res) = sql($o, "SELECT pg_backend_pid(), $i");
	$pids_o{$pid}++;
}
is(join(',', values %pids_o), '5', 'get: another client still runs its statements');
ok(!exists $pids_o{$w1_pid}, "get: on the other server connection");
my $w2 = client();
send_async($w2, "SELECT pg_backend_pid(), lockq_get('G', 'w2', '1 min', '3 s')");
ok(wait_for_waiters($node, 'G', 2), 'get: w2 waits too, with a 3 s timeout');
is(pool('postgres')->{sv_active}, 2, 'get: the two waiters hold both server connections');
my $w2_since = scalar_query($node, "SELECT waiting_since FROM lockq_waiters WHERE owner = 'w2'");
send_async($h, "SELECT pg_backend_pid(), lockq_release('G', 'h', $htok)");
ok(poll_until(sub { pool('postgres')->{cl_waiting} == 1 }),
	"get: the holder's release waits in pgbouncer for a server connection");
is(scalar_query($node, "SELECT owner FROM lockq_locks WHERE lock_id = 'G'"), 'h',
	'get: meanwhile the holder still holds the lock');
($out, $err) = wait_async($w2);
like($err, qr/ERROR:  could not obtain lock "G" within the timeout/, 'get: w2 times out');
($out, $err) = wait_async($h);
like($out, qr/\|t$/, 'get: then the release goes through');
($out, $err) = wait_async($w1);
($pid, my $w1tok) = split /\|/, $out;
is($pid, $w1_pid, 'get: and w1 is granted');
# (w2's timeout is counted from its call, a little before it was queued)
my $starved = scalar_query($node,
	"SELECT round(extract(epoch FROM acquired - '$w2_since'::timestamptz), 3) FROM lockq_locks WHERE lock_id = 'G'");
cmp_ok($starved, '>=', 2.5, "get: not before w2 gave up ($starved s after w2 queued): pool starvation");

# a client that dies while it waits in lockq_get: pgbouncer closes its
# server connection, the backend notices and leaves the queue
my $w3 = client();
send_async($w3, "SELECT pg_backend_pid(), lockq_get('G', 'w3', '1 min', '1 min')");
ok(wait_for_waiters($node, 'G', 1), 'get: w3 waits');
my $w3_pid = scalar_query($node, "SELECT session_pid FROM lockq_waiters WHERE owner = 'w3'");
$w3->{run}->kill_kill;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $w3_pid"),
	"get: w3's client dies, pgbouncer closes the server connection it waited on");
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'G'"), '0',
	'get: and w3 left the queue');
sql($o, "SELECT lockq_release('G', 'w1', $w1tok)");
$_->quit for ($h, $w1, $w2, $o);

# --- client-side waiters hold no server connection; FIFO ---------------------
# f1..f8 queue one after the other behind a holder: f4 blocks in lockq_get,
# the others queue with lockq_enqueue (no LISTEN: notifications do not
# reach a client behind a transaction pooler) and poll lockq_heartbeat.
my @f = map { client() } 0 .. 8;
(undef, $htok) = sql($f[0], "SELECT pg_backend_pid(), lockq_try('Q', 'f0', '1 min')");
for my $i (1 .. 8)
{
	if ($i == 4)
	{
		send_async($f[$i], "SELECT lockq_get('Q', 'f4', '1 min', '1 min')");
		ok(wait_for_waiters($node, 'Q', $i), 'fifo: f4 waits in lockq_get');
		next;
	}
	(undef, $res) = sql($f[$i],
		"SELECT pg_backend_pid(), lockq_enqueue('Q', 'f$i', '1 min', NULL, '1 min') IS NULL");
	is($res, 't', "fifo: f$i queued with lockq_enqueue");
}
is(scalar_query($node, "SELECT string_agg(owner, ' ' ORDER BY position) FROM lockq_waiters WHERE lock_id = 'Q'"),
	join(' ', map { "f$_" } 1 .. 8), 'fifo: the queue is in arrival order');
is(pool('postgres')->{sv_active}, 1, 'fifo: only the lockq_get waiter holds a server connection');
sql($f[0], "SELECT lockq_release('Q', 'f0', $htok)");
my $prev = $htok;
for my $i (1 .. 8)
{
	ok(wait_for_holder($node, 'Q', "f$i"), "fifo: f$i is granted");
	if ($i == 4)
	{
		($tok, $err) = wait_async($f[4]);
		is($err, '', 'fifo: f4 returns from lockq_get');
	}
	else
	{
		# every waiter asks; only f$i is told it holds the lock
		my @told;
		for my $j (reverse $i .. 8)
		{
			next if $j == 4;
			(undef, my $t) = sql($f[$j], "SELECT pg_backend_pid(), lockq_heartbeat('Q', 'f$j')");
			push @told, "f$j" if $t ne '';
			$tok = $t if $j == $i;
		}
		is("@told", "f$i", "fifo: of the waiting clients' heartbeats, only f${i}'s returns a token");
	}
	($pid, $res) = sql($f[$i],
		"BEGIN; INSERT INTO fenced SELECT 'Q', 'f$i', $tok, pg_backend_pid() WHERE lockq_holds('Q', $tok); SELECT pg_backend_pid(), count(*) FROM fenced WHERE token = $tok; COMMIT;");
	is($res, 1, "fifo: f$i writes, fenced");
	cmp_ok($tok, '>', $prev, "fifo: with a later token than the one before");
	$prev = $tok;
	sql($f[$i], "SELECT lockq_release('Q', 'f$i', $tok)");
}
is(scalar_query($node, "SELECT string_agg(owner, ' ' ORDER BY token) FROM fenced WHERE lock_id = 'Q'"),
	join(' ', map { "f$_" } 1 .. 8), 'fifo: the fenced writes are in arrival order');
$_->quit for @f;

# --- 8 clients contend through the pool ----------------------------------------
# Each client, with its own owner, runs $rounds critical sections, one
# statement (one pooled transaction) at a time: lockq_try; if that fails,
# client 1 waits in lockq_get (it holds a server connection meanwhile, so
# only one client does that) and the others queue with lockq_enqueue and
# poll lockq_heartbeat every 10 ms; then it reads the counter, renews, writes
# counter + 1 fenced by lockq_holds in a transaction, and releases.  The
# read and the write are separate transactions: two holders at once would
# lose an update.
my $rounds = 20;
my $nclients = 8;
my @cl = map {
	{
		i => $_,
		owner => "c$_",
		s => client(),
		round => 0,
		state => 'try',
		busy => 0,
		next_at => 0,
		pids => {},
		how => {}
	}
} 1 .. $nclients;

sub stress_query
{
	my ($c) = @_;
	# (the token and the value are only used in the states that have them)
	my ($o, $t, $v) = ($c->{owner}, $c->{tok} // 0, $c->{value} // 0);
	my %q = (
		try => "SELECT pg_backend_pid(), lockq_try('ctr', '$o', '30 s')",
		get => "SELECT pg_backend_pid(), lockq_get('ctr', '$o', '30 s', '1 min')",
		enqueue => "SELECT pg_backend_pid(), lockq_enqueue('ctr', '$o', '30 s', NULL, '10 s')",
		poll => "SELECT pg_backend_pid(), lockq_heartbeat('ctr', '$o')",
		read => "SELECT pg_backend_pid(), value FROM counter WHERE id = 1",
		renew => "SELECT pg_backend_pid(), lockq_renew('ctr', '$o', $t)",
		write => "BEGIN;\nSELECT pg_backend_pid(), lockq_holds('ctr', $t);\n"
		  . "WITH w AS (UPDATE counter SET value = $v + 1 WHERE id = 1 AND lockq_holds('ctr', $t) RETURNING value)\n"
		  . "INSERT INTO writes SELECT $c->{i}, $t, value, pg_backend_pid() FROM w;\nCOMMIT;",
		release => "SELECT pg_backend_pid(), lockq_release('ctr', '$o', $t)");
	return $q{ $c->{state} };
}

# stress_step(client, result) checks a result and moves to the next state;
# returns an error message or undef.
sub stress_step
{
	my ($c, $out, $err) = @_;
	return "$c->{owner} $c->{state}: $err" if $err ne '';
	my ($pid, $val) = split /\|/, $out, -1;
	return "$c->{owner} $c->{state}: unexpected output '$out'" unless defined $val && $pid =~ /^\d+$/;
	$c->{pids}{$pid}++;
	my $st = $c->{state};
	if ($st eq 'try' || $st eq 'get' || $st eq 'enqueue' || $st eq 'poll')
	{
		if ($val ne '')
		{
			$c->{tok} = $val;
			$c->{how}{$st}++;
			$c->{state} = 'read';
		}
		elsif ($st eq 'get')
		{
			return "$c->{owner}: lockq_get returned NULL";
		}
		else
		{
			$c->{state} = $st eq 'try' ? ($c->{i} == 1 ? 'get' : 'enqueue') : 'poll';
			$c->{next_at} = time() + 0.01 if $c->{state} eq 'poll';
		}
	}
	elsif ($st eq 'read')
	{
		$c->{value} = $val;
		$c->{state} = 'renew';
	}
	else
	{
		return "$c->{owner} $st returned '$val'" unless $val eq 't';
		$c->{state} = { renew => 'write', write => 'release', release => 'try' }->{$st};
		$c->{round}++ if $st eq 'release';
	}
	return undef;
}

my $stress_start = time();
my @errors;
my $left = $nclients;
while ($left > 0 && !@errors && time() - $stress_start < $timeout)
{
	my $progress = 0;
	for my $c (@cl)
	{
		next if $c->{round} == $rounds;
		if ($c->{busy})
		{
			my $r = poll_async($c->{s});
			next unless $r;
			$progress = 1;
			$c->{busy} = 0;
			my $e = stress_step($c, @$r);
			push @errors, $e if defined $e;
			$left-- if $c->{round} == $rounds;
		}
		elsif (time() >= $c->{next_at})
		{
			send_async($c->{s}, stress_query($c));
			$c->{busy} = 1;
			$progress = 1;
		}
	}
	# nothing to do for now: wait for output
	select(undef, undef, undef, 0.002) unless $progress;
}
my $stress_time = time() - $stress_start;
is_deeply(\@errors, [], "stress: $nclients clients x $rounds rounds, every call answered as expected");
is($left, 0, sprintf('stress: all done (%.1f s)', $stress_time));
my $total = $nclients * $rounds;
my ($count, $distinct, $max, $counter) = split /\|/,
  scalar_query($node, 'SELECT count(*), count(DISTINCT value), max(value), (SELECT value FROM counter) FROM writes');
is("$count $distinct $max $counter", "$total $total $total $total",
	"stress: $total fenced writes, each saw a different counter value: no lost update");
is( scalar_query($node,
		'SELECT count(*) FROM (SELECT token, lag(token) OVER (ORDER BY value) AS prev FROM writes) s WHERE token <= prev'),
	'0', 'stress: tokens increase with the counter');
my %all_pids;
for my $c (@cl)
{
	my @p = sort keys %{ $c->{pids} };
	$all_pids{$_} = 1 for @p;
	cmp_ok(scalar(@p), '>', 1,
		"stress: $c->{owner}'s statements ran on " . scalar(@p) . ' backends: '
		  . join(', ', map { "$_ x$c->{pids}{$_}" } @p));
	note "stress: $c->{owner} acquired by " . join(', ', map { "$_ $c->{how}{$_}" } sort keys %{ $c->{how} });
	$c->{s}->quit;
}
is(scalar(keys %all_pids), 2, 'stress: all ' . $nclients . ' clients shared the 2 server connections');
my %how;
for my $c (@cl) { $how{$_} += $c->{how}{$_} for keys %{ $c->{how} }; }
cmp_ok(($how{poll} // 0) + ($how{enqueue} // 0), '>', 0,
	'stress: some clients waited in the queue (contention)');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'ctr'")
	  . scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'ctr'"),
	'00', 'stress: nothing left held or queued');

# --- the lockq CLI through the pooler ------------------------------------------
# lockq run waits for a lock through pgbouncer (its LISTEN is on some server
# connection: it learns of the grant from its heartbeats), runs the command
# and releases; but it sets search_path for the session, and the session is
# the pooled server connection.
SKIP:
{
	fail("$lockq_cli is built under make test") if !-x $lockq_cli && $ENV{LOCKQ_MAKE_TEST};
	skip "$lockq_cli not built", 5 unless -x $lockq_cli;
	start_router();
	route_to($pid_x);
	my $c = client();
	my ($sp_before) = sql($c, "SELECT current_setting('search_path')");
	scalar_query($node, "SELECT lockq_try('cli', 'holder', '1 min')");
	my ($cli_out, $cli_err) = ('', '');
	my $cli = IPC::Run::start(
		[ $lockq_cli, 'run', '-d', "host=$host port=$port dbname=postgres", '--timeout', '1m', 'cli',
		  '--', 'sh', '-c', 'echo token=$LOCKQ_TOKEN' ],
		'>', \$cli_out, '2>', \$cli_err, IPC::Run::timeout($timeout));
	ok(wait_for_waiters($node, 'cli', 1), 'cli: lockq run through pgbouncer waits');
	my $released = time();
	scalar_query($node, "SELECT lockq_release('cli', 'holder')");
	$cli->finish;
	is($? >> 8, 0, sprintf('cli: it gets the lock and runs the command (%.1f s after the release)', time() - $released));
	like($cli_out, qr/^token=\d+$/m, 'cli: with the token');
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'cli'"), '0',
		'cli: and releases the lock');
	my ($sp_after, $pid_after) = sql($c, "SELECT current_setting('search_path'), pg_backend_pid()");
	is($pid_after, $pid_x, 'cli: another client on the server connection lockq run used');
	# liblockq empties search_path for its session on connect (everything it
	# runs is qualified anyway); through a transaction pooler that setting
	# stays on the server connection: doc/poolers.md says to give liblockq a direct
	# connection or a session pooler.
	note("search_path on that server connection before: '$sp_before', after: '$sp_after'");
	$c->quit;
	stop_router();
	admin('RECONNECT postgres');
}

# --- the Python client through the pooler: hand-offs as fast as direct ----------
# A wait alone on its connection waits in its backend (lockq_await), woken
# by its grant: a transaction pooler passes no NOTIFY on, so a wait on
# NOTIFY would learn of its grant only at its next heartbeat.  The
# hand-off's p99 through pgbouncer is within 50 ms of the direct one's
# (issue 22, item 15).
SKIP:
{
	my $python = '/usr/bin/python3';
	skip 'python3 with psycopg and psycopg_pool is not installed', 6
	  unless -x $python && system("$python -c 'import psycopg, psycopg_pool' >/dev/null 2>&1") == 0;
	my $pydir = "$ENV{TESTDIR}/client/python";
	my ($out, $err) = ('', '');
	IPC::Run::run([ $python, '-P', "$pydir/tools/handoff.py", $node->connstr('postgres'),
			'direct=' . $node->connstr('postgres'), "pgbouncer=host=$host port=$port dbname=postgres" ],
		'>', \$out, '2>', \$err,
		init => sub { $ENV{PYTHONPATH} = $pydir; },
		IPC::Run::timeout($timeout));
	is($? >> 8, 0, 'python hand-offs: the script ran') or diag($err);
	my %p99;
	for my $line (split /\n/, $out)
	{
		note "python hand-off (ms; p50 p99 max): $line";
		$p99{"$1 $2"} = $3 if $line =~ /^(\w+) ([\w-]+) [\d.]+ ([\d.]+) [\d.]+$/;
	}
	for my $mode (qw(sync asyncio sync-pool asyncio-pool))
	{
		ok(defined $p99{"pgbouncer $mode"} && defined $p99{"direct $mode"}
			  && $p99{"pgbouncer $mode"} < $p99{"direct $mode"} + 50,
			"python $mode: hand-off p99 through pgbouncer within 50 ms of direct");
	}
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id LIKE 'handoff-%'"), '0',
		'python hand-offs: nothing left held');
}

# --- the Node client through the pooler: the same ---------------------------------
SKIP:
{
	my $node_version = `node --version 2>/dev/null` // '';
	skip 'Node.js 18 or later and npm are not installed', 3
	  unless $node_version =~ /^v(\d+)/ && $1 >= 18 && system('npm --version >/dev/null 2>&1') == 0;
	my ($ndir, $npm_env, $npm_log) = node_client();
	ok($ndir, 'node hand-offs: npm ci installs pg') or diag($npm_log);
	skip 'npm ci failed', 2 unless $ndir;
	(my $sock = $host) =~ s{/}{%2F}g;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'node', 'tools/handoff.js', sprintf('postgresql://%s:%d/postgres', $sock, $nport),
			sprintf('direct=postgresql://%s:%d/postgres', $sock, $nport),
			sprintf('pgbouncer=postgresql://%s:%d/postgres', $sock, $port) ],
		'>', \$out, '2>', \$err, init => $npm_env, IPC::Run::timeout($timeout));
	my %p99;
	for my $line (split /\n/, $out)
	{
		note "node hand-off (ms; p50 p99 max): $line";
		$p99{"$1 $2"} = $3 if $line =~ /^(\w+) (node[\w-]*) [\d.]+ ([\d.]+) [\d.]+$/;
	}
	for my $mode (qw(node node-pool))
	{
		ok(defined $p99{"pgbouncer $mode"} && defined $p99{"direct $mode"}
			  && $p99{"pgbouncer $mode"} < $p99{"direct $mode"} + 50,
			"$mode: hand-off p99 through pgbouncer within 50 ms of direct") or diag($err);
	}
}

# --- shutdown ------------------------------------------------------------------
$bouncer->psql('pgbouncer', 'SHUTDOWN');
ok(poll_until(sub { !-e "$dir/pgbouncer.pid" }),
	'pgbouncer shuts down (SHUTDOWN on the admin console) and removes its pid file');
ok($bouncer_run->finish, 'and exits with status 0');
$node->stop;
note sprintf('run time %.1f s', time() - $t_start);
done_testing();

# lockq at scale.
#
# 1. 10,000 client-side waiters on one lock over 4 connections (plain libpq
#    and the documented protocol: LISTEN, lockq_enqueue with a channel and a
#    heartbeat interval, lockq_heartbeat on the NOTIFY, release), driven by
#    client/test/lockqc_scale: the server's queue holds them in enqueue
#    order, and the lock passes down the whole queue in exactly that order,
#    each waiter granted once, woken by its own NOTIFY; then nothing is left
#    queued or held.  lockq.max_waiters (set to 10,000 here) refuses one more
#    waiter of either kind while the queue is full (53000), and only waiters.
#    The same through
#    liblockq: 10,000 threads sharing 4 connections.
# 2. 100,000 locks held at once with owners (one statement): distinct,
#    increasing tokens, all in lockq_locks, fencing right on a sample; all
#    released; twice, so that the lock server's private memory is seen to
#    stay bounded (per lock) and to be reused (no growth in the second round).
# 3. NOTIFY queue pressure: a listener that sits in an open transaction holds
#    the queue's tail back.  With the queue partly filled, grants by
#    lockq_try, lockq_get and to client waiters (by NOTIFY) go on.  With it
#    more than half full (4 GB: only with PG_TEST_EXTRA=lockq_notify_full),
#    lockq stops sending NOTIFYs (and says so in the log) but keeps
#    granting: client waiters, over plain libpq and through liblockq, learn
#    of their grants from their heartbeats.  When the listener goes,
#    notifications come back.
#
# Timings and memory are reported with note(); the bounds asserted are
# generous (a shared 2-core machine) but would catch work per hand-off that
# grows with the queue, or memory that grows per grant.
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

my $prog = "$ENV{TESTDIR}/client/test/lockqc_scale";
require_tool(-x $prog, "$prog not built");

my $N = 10_000;          # waiters on one lock
my $NLIB = 10_000;       # liblockq threads (see the note at part 1b)
my $NHELD = 100_000;     # locks held at once

# log_statement = all would log each of the driver's 30,000 statements.
my $node = lockq_node('scale',
	conf => "lockq.max_waiters = $N\nlog_statement = none\n");
my $connstr = $node->connstr('postgres');
my $t_start = time();

# stats() returns lockq_stats as a hash.
sub stats
{
	my $row = $node->safe_psql('postgres',
		'SELECT grants, handoffs, enqueues, dropped_waiters, batch_errors, holders, waiters FROM lockq_stats');
	my %s;
	@s{qw(grants handoffs enqueues dropped batch_errors holders waiters)} = split /\|/, $row;
	return \%s;
}

# mem(pid) returns the memory lines of /proc/pid/status, in kB.
sub mem
{
	my ($pid) = @_;
	my %m;
	open my $fh, '<', "/proc/$pid/status" or die "/proc/$pid/status: $!";
	while (<$fh>)
	{
		$m{$1} = $2 if /^(VmRSS|VmHWM|RssAnon|RssShmem):\s+(\d+) kB/;
	}
	close $fh;
	return \%m;
}

# driver(mode, lock, n, nconn, heartbeat_ms) starts lockqc_scale; the ttl
# is 30 s, under lockq.max_grace.
sub driver
{
	my ($mode, $lock, $n, $nconn, $hb) = @_;
	my %d = (in => '', out => '', err => '');
	$d{h} = IPC::Run::start(
		[ $prog, $mode, $connstr, $lock, $n, $nconn, $hb, 30000 ],
		'<', \$d{in}, '>', \$d{out}, '2>', \$d{err},
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return \%d;
}

# drive_until(driver, regex) pumps until the driver's output matches (or it
# reports an error, exits or times out); true when it matched.
sub drive_until
{
	my ($d, $re) = @_;
	while ($d->{out} !~ $re && $d->{out} !~ /^ERROR /m)
	{
		last unless $d->{h}->pumpable;
		$d->{h}->pump;
	}
	return $d->{out} =~ $re;
}

# finish(driver, name) waits for the driver's exit; returns the DONE figures:
# waiters done, microseconds from the first grant to the last release, and
# (pq) heartbeat rounds and grant notifications received.
sub finish
{
	my ($d, $name) = @_;
	my $ok = drive_until($d, qr/^DONE /m);
	$d->{h}->finish;
	ok($ok && $? == 0, "$name: the driver finished") or diag("$d->{out}\n$d->{err}");
	my ($n, $us, $sweeps, $notices) = $d->{out} =~ /^DONE (\d+) (\d+) (\d+) (\d+)$/m;
	return ($n // 0, $us // 0, $sweeps // -1, $notices // -1);
}

# queue_order(lock) is the server's queue of lock, by position.
sub queue_order
{
	my ($lock) = @_;
	return [ split /,/,
		$node->safe_psql('postgres',
			"SELECT string_agg(owner, ',' ORDER BY position) FROM lockq_waiters WHERE lock_id = '$lock'") ];
}

# check_grants(name, driver output, expected owners in order, min token)
# checks that every expected owner was granted exactly once, in that order,
# with strictly increasing tokens above min token.  Returns the times of
# the grants (microseconds from the first).
sub check_grants
{
	my ($name, $out, $expect, $min_token) = @_;
	my @g = $out =~ /^GRANT (\S+) (\d+) (\d+)$/mg;
	my (@owners, @tokens, @times);
	while (my ($o, $t, $us) = splice(@g, 0, 3))
	{
		push @owners, $o;
		push @tokens, $t;
		push @times, $us;
	}
	my %seen;
	$seen{$_}++ for @owners;
	is(scalar(@owners), scalar(@$expect), "$name: " . scalar(@$expect) . ' grants');
	is(scalar(grep { $seen{$_} == 1 } @$expect), scalar(@$expect),
		"$name: every waiter was granted exactly once");
	my $first_bad;
	for my $i (0 .. $#$expect)
	{
		if (!defined $owners[$i] || $owners[$i] ne $expect->[$i])
		{
			$first_bad = $i;
			last;
		}
	}
	ok(!defined $first_bad, "$name: granted in queue order")
	  or diag("grant " . ($first_bad + 1) . " went to " . ($owners[$first_bad] // 'nobody')
		  . ", expected $expect->[$first_bad]");
	my $increasing = @tokens && $tokens[0] > $min_token;
	for my $i (1 .. $#tokens)
	{
		$increasing = 0 unless $tokens[$i] > $tokens[ $i - 1 ];
	}
	ok($increasing, "$name: tokens strictly increase, above the previous holder's ($min_token)");
	return \@times;
}

# nothing_left(name, lock) checks that the lock has no holder, no waiter
# and no row in lockq.queue or lockq.owners.
sub nothing_left
{
	my ($name, $lock) = @_;
	is($node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM lockq_waiters WHERE lock_id = '$lock') || '/' ||
			        (SELECT count(*) FROM lockq_locks WHERE lock_id = '$lock') || '/' ||
			        (SELECT count(*) FROM lockq.queue WHERE lock_id = '$lock') || '/' ||
			        (SELECT count(*) FROM lockq.owners WHERE lock_id = '$lock')"),
		'0/0/0/0', "$name: nothing left in lockq_waiters, lockq_locks, lockq.queue, lockq.owners");
}

my $worker = worker_pid($node);
my $mem0 = mem($worker);

# --- 1a. 10,000 client waiters over 4 connections -----------------------------
my $blocker = scalar_query($node, "SELECT lockq_try('Q', 'blocker', '10 min')");
my $s0 = stats();
# heartbeat interval 300 s: the driver would heartbeat every 100 s, so in
# this run every grant is learnt from its NOTIFY
my $d = driver('pq', 'Q', $N, 4, 300_000);
ok(drive_until($d, qr/^ENQUEUED /m), "$N waiters queued") or diag("$d->{out}\n$d->{err}");
my ($enq_ms) = $d->{out} =~ /^ENQUEUED \d+ (\d+)/m;
my $mem_q = mem($worker);
note sprintf('enqueue of %d client waiters: %.2f s (%.0f/s); lock server RssAnon %d -> %d kB',
	$N, $enq_ms / 1000, $N / (($enq_ms || 1) / 1000), $mem0->{RssAnon}, $mem_q->{RssAnon});

my @expect = map { sprintf('w%05d', $_) } 1 .. $N;
is_deeply(queue_order('Q'), \@expect, 'lockq_waiters: the queue is in enqueue order');
is($node->safe_psql('postgres',
		"SELECT count(*) || ' ' || count(DISTINCT ts) || ' ' || count(*) FILTER (WHERE kind = 'client')
		   FROM lockq_waiters WHERE lock_id = 'Q'"),
	"$N $N $N", 'all are client waiters, each with its own ts (queue order key)');
is($node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE prev >= ts) || ' ' || count(*)
		   FROM (SELECT ts, lag(ts) OVER (ORDER BY substr(owner, 2)::int) AS prev
		           FROM lockq_waiters WHERE lock_id = 'Q') s"),
	"0 $N", 'ts strictly increases in enqueue order');
is($node->safe_psql('postgres',
		"SELECT count(*) || ' ' || count(*) FILTER (WHERE heartbeat = 300000000
		          AND channel = 'lqscale_' || (substr(owner, 2)::int - 1) % 4)
		   FROM lockq.queue WHERE lock_id = 'Q'"),
	"$N $N", "lockq.queue: $N rows, each with its connection's channel and its 300 s heartbeat");
is(stats()->{waiters}, $N, "lockq_stats: $N waiters");

# The queue is at lockq.max_waiters: one more waiter is refused, of either
# kind; what does not queue still works; a waiter already queued keeps its
# place when it enqueues again.
scalar_query($node, "SELECT lockq_try('Q2', 'holder2', '1 min')");
my @sqlstates;
for my $case ([ "lockq_enqueue('Q', 'one-more', '30 s', NULL, '300 s')", 'a client waiter' ],
	[ "lockq_get('Q2', 'one-more-backend', timeout => '5 s')", 'a lockq_get that would queue' ])
{
	my (undef, undef, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT $case->[0]");
	like($err, qr/ERROR:  53\d\d\d: too many lockq waiters/,
		"$case->[1] beyond lockq.max_waiters ($N) is refused (insufficient resources)");
	push @sqlstates, $err =~ /ERROR:  (\d{5}):/;
}
is("@sqlstates", '53000 53000', 'with SQLSTATE 53000 (insufficient_resources), as doc/sql.md documents');
is(stats()->{waiters}, $N, 'the queue did not grow');
is(scalar_query($node, "SELECT lockq_try('Q', 'not-queued') IS NULL"), 't',
	'a lockq_try of the busy lock answers NULL (it never queues)');
ok(scalar_query($node, "SELECT lockq_get('Q3', 'free', timeout => '5 s')") > 0,
	'a lockq_get of a free lock is granted (it does not queue)');
ok(scalar_query($node, "SELECT lockq_enqueue('Q4', 'free', '30 s', NULL, '300 s')") > 0,
	'so is a lockq_enqueue of a free lock');
is(scalar_query($node, "SELECT lockq_enqueue('Q', 'w00005', '30 s', 'lqscale_0', '300 s') IS NULL"),
	't', 'a queued waiter that enqueues again keeps its place (a heartbeat)');
scalar_query($node,
	"SELECT lockq_release('Q2', 'holder2'), lockq_release('Q3', 'free'), lockq_release('Q4', 'free')");
is_deeply(queue_order('Q'), \@expect, 'the queue is unchanged');

# Drain: the blocker releases; every waiter confirms and releases in turn.
my $t1 = time();
is(scalar_query($node, "SELECT lockq_release('Q', 'blocker')"), 't', 'the blocker releases');
my ($n, $us, $sweeps, $notices) = finish($d, 'drain');
my $wall = time() - $t1;
my $times = check_grants('drain', $d->{out}, \@expect, $blocker);
is($notices, $N, 'each waiter was told of its grant by one NOTIFY on its connection');
my $rate = $us ? ($N - 1) / ($us / 1e6) : 0;
note sprintf('drain of %d waiters: %.2f s (driver: %.2f s from first grant to last release, %.0f hand-offs/s)',
	$N, $wall, $us / 1e6, $rate);
cmp_ok($rate, '>', 100, 'more than 100 hand-offs/s (2,000/s on 2 idle cores, 500/s on busy ones)');
# A hand-off must not cost more with a long queue behind it: the first
# 2,000 hand-offs (10,000 to 8,000 queued) against the last 2,000.
my ($early, $late) = (0, 0);
if (@$times == $N)
{
	$early = 2000 / (($times->[2000] - $times->[0]) / 1e6 || 1e-6);
	$late = 2000 / (($times->[ $N - 1 ] - $times->[ $N - 2001 ]) / 1e6 || 1e-6);
}
note sprintf('hand-offs/s with 10,000 queued: %.0f; with 2,000: %.0f', $early, $late);
cmp_ok($early, '>', $late / 5, 'a long queue does not slow hand-offs down (within a factor of 5)');
nothing_left('drain', 'Q');
my $s1 = stats();
is($s1->{handoffs} - $s0->{handoffs}, $N, "lockq_stats: $N more hand-offs");
is($s1->{dropped} - $s0->{dropped}, 0, 'no waiter was dropped');
is("$s1->{holders}/$s1->{waiters}/$s1->{batch_errors}", '0/0/0', 'nothing held or queued; no batch errors');
ok(scalar_query($node, "SELECT lockq_enqueue('Q', 'after', '30 s', NULL, '300 s')") > 0,
	'below lockq.max_waiters again, the lock is free');
scalar_query($node, "SELECT lockq_release('Q', 'after')");
my $mem1 = mem($worker);
note sprintf('lock server after part 1: RssAnon %d kB, VmRSS %d kB, VmHWM %d kB',
	$mem1->{RssAnon}, $mem1->{VmRSS}, $mem1->{VmHWM});

# --- 1b. the same through liblockq: 10,000 threads on 4 connections ---------
# (Each waiting thread has its own condition variable.  When they shared one
# per connection, broadcast at every grant, a hand-off cost grew with the
# number of waiting threads: 3,000 threads on 4 connections took 20 s to
# drain; now 10,000 take about 10 s on 2 cores.)
$blocker = scalar_query($node, "SELECT lockq_try('L', 'blocker', '10 min')");
$d = driver('lib', 'L', $NLIB, 4, 300_000);
ok(drive_until($d, qr/^STARTED /m), "$NLIB threads started");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = $NLIB FROM lockq_waiters WHERE lock_id = 'L' AND kind = 'client'"),
	"all $NLIB are queued");
my $order = queue_order('L');
is(scalar(@$order), $NLIB, 'the server queue, as the threads happened to reach it');
$t1 = time();
scalar_query($node, "SELECT lockq_release('L', 'blocker')");
($n, $us) = finish($d, 'liblockq');
check_grants('liblockq', $d->{out}, $order, $blocker);
note sprintf('liblockq: %d threads on 4 connections drained in %.2f s (%.0f hand-offs/s)',
	$NLIB, time() - $t1, $us ? ($NLIB - 1) / ($us / 1e6) : 0);
nothing_left('liblockq', 'L');

# --- 2. 100,000 locks held at once ---------------------------------------------
my $mem2 = mem($worker);
my $max_token = scalar_query($node, "SELECT lockq_try('T', 'x'), lockq_release('T', 'x')");
($max_token) = split /\|/, $max_token;
for my $round (1, 2)
{
	my $t0 = time();
	$node->safe_psql('postgres',
		"CREATE TABLE held AS
		   SELECT g, lockq_try('k' || g, 'o' || g, '10 min') AS token
		     FROM generate_series(1, $NHELD) g");
	my $take = time() - $t0;
	my $m = mem($worker);
	note sprintf('round %d: %d locks taken in %.2f s (%.0f/s); lock server RssAnon %d kB (+%d), VmRSS %d kB',
		$round, $NHELD, $take, $NHELD / $take, $m->{RssAnon},
		$m->{RssAnon} - $mem2->{RssAnon}, $m->{VmRSS});
	is($node->safe_psql('postgres',
			"SELECT count(token) || ' ' || count(DISTINCT token) || ' ' || (min(token) > $max_token)::int
			   FROM held"),
		"$NHELD $NHELD 1", "round $round: $NHELD grants, distinct tokens above every earlier one");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM (SELECT token <= lag(token) OVER (ORDER BY g) AS bad FROM held) s WHERE bad"),
		'0', "round $round: tokens increase in the order the locks were taken");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM lockq_locks l JOIN held h
			     ON l.lock_id = 'k' || h.g AND l.owner = 'o' || h.g AND l.token = h.token
			  WHERE l.session_pid IS NULL AND l.expires - l.acquired = '10 min'")
		  . ' ' . $node->safe_psql('postgres', 'SELECT count(*) FROM lockq_locks'),
		"$NHELD $NHELD", "round $round: lockq_locks shows exactly these $NHELD grants");
	is(stats()->{holders}, $NHELD, "round $round: lockq_stats: $NHELD holders");
	is($node->safe_psql('postgres',
			"SELECT count(*) || ' ' || count(*) FILTER (WHERE lockq_holds('k' || g, token))
			        || ' ' || count(*) FILTER (WHERE lockq_holds('k' || g, token + 1))
			        || ' ' || count(lockq_try('k' || g, 'someone-else'))
			   FROM held WHERE g % 997 = 0"),
		'100 100 0 0',
		"round $round: on a sample of 100, lockq_holds is true for the token, false for another lock's; lockq_try by another owner gets nothing");
	like(scalar_query($node, "SELECT lockq_try('session-lock'), lockq_release('session-lock')"),
		qr/^\d+\|t$/, "round $round: a session-bound lock (in shared memory) is still granted");
	if ($round == 1)
	{
		cmp_ok($m->{RssAnon} - $mem2->{RssAnon}, '<', 256 * 1024,
			"the lock server's private memory grows by less than 256 MB for $NHELD locks (2.6 kB each)");
	}
	$mem1 = $m if $round == 1;
	if ($round == 2)
	{
		cmp_ok($m->{RssAnon} - $mem1->{RssAnon}, '<', 16 * 1024,
			'round 2: less than 16 MB more than in round 1 (the memory of released locks is reused)');
	}

	$t0 = time();
	is($node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE lockq_release('k' || g, 'o' || g, token)) FROM held"),
		$NHELD, "round $round: all $NHELD released");
	note sprintf('round %d: released in %.2f s', $round, time() - $t0);
	is($node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM lockq_locks) || ' ' || (SELECT count(*) FROM lockq.owners)
			        || ' ' || (SELECT count(*) FILTER (WHERE lockq_holds('k' || g, token)) FROM held WHERE g % 997 = 0)"),
		'0 0 0', "round $round: lockq_locks and lockq.owners are empty; the tokens fence nothing");
	is(stats()->{holders}, 0, "round $round: no holders");
	$max_token = $node->safe_psql('postgres', 'SELECT max(token) FROM held');
	$node->safe_psql('postgres', 'DROP TABLE held');
}
$mem2 = mem($worker);
note sprintf('lock server after part 2: RssAnon %d kB, VmRSS %d kB, VmHWM %d kB',
	$mem2->{RssAnon}, $mem2->{VmRSS}, $mem2->{VmHWM});

# --- 3. NOTIFY queue pressure ---------------------------------------------------
my $usage = sub { $node->safe_psql('postgres', 'SELECT pg_notification_queue_usage()') };
is($usage->(), '0', 'the NOTIFY queue is empty');

# A listener that reads (it is idle): new listeners start from its place
# instead of reading the whole backlog.  And one that never does: it sits in
# a transaction, so the queue's tail cannot pass it.
my $reader = $node->background_psql('postgres');
$reader->query_safe('LISTEN lqscale_reader');
my $stall = $node->background_psql('postgres');
$stall->query_safe('LISTEN lqscale_stall');
$stall->query_safe('BEGIN');
$stall->query_safe('SELECT 1');

# 3a. about 100 MB of notifications
$node->safe_psql('postgres',
	"SELECT count(pg_notify('lqscale_fill', g || repeat('x', 7980))) FROM generate_series(1, 12500) g");
my $u1 = $usage->();
cmp_ok($u1, '>', 0.01, "the queue is held back by the stalled listener ($u1 used)");

ok(scalar_query($node, "SELECT lockq_try('P1', 'a', '1 min')") > 0, 'under pressure: lockq_try grants');
ok(scalar_query($node, "SELECT lockq_get('P2', 'b', '1 min', '10 s')") > 0, 'lockq_get grants');
scalar_query($node, "SELECT lockq_try('P3', 'holder', '1 min')");
my $bw = start_waiter($node, 'bw', "SELECT 'tok=' || lockq_get('P3', 'bw', '1 min', '60 s');");
ok(wait_for_waiters($node, 'P3', 1), 'a backend waiter queues');
scalar_query($node, "SELECT lockq_release('P3', 'holder')");
ok(waiter_result($bw, qr/tok=(\d+)/), 'and is granted on the release');
$bw->quit;
scalar_query($node, "SELECT lockq_release('P1', 'a'), lockq_release('P2', 'b'), lockq_release('P3', 'bw')");

$blocker = scalar_query($node, "SELECT lockq_try('PQ', 'blocker', '10 min')");
$d = driver('pq', 'PQ', 200, 2, 300_000);
ok(drive_until($d, qr/^ENQUEUED /m), '200 client waiters queued');
scalar_query($node, "SELECT lockq_release('PQ', 'blocker')");
(undef, undef, undef, $notices) = finish($d, 'pressure');
check_grants('pressure', $d->{out}, [ map { sprintf('w%05d', $_) } 1 .. 200 ], $blocker);
is($notices, 200, 'pressure: each was told of its grant by NOTIFY');
cmp_ok($usage->(), '>=', $u1, 'the queue was held back all along');

# 3b. more than half full: lockq sends no NOTIFYs, and keeps granting.
# That takes 4 GB of notifications: about 25 s on an idle 2-core machine
# (80 s on a busy one), and 4 GB of disk until the listener goes.  So, as
# PostgreSQL does with its resource-intensive tests, it runs only when
# PG_TEST_EXTRA names it.
my ($avail_kb) = (`df -Pk '${\ $node->data_dir}'` =~ /\n\S+\s+\d+\s+\d+\s+(\d+)/);
SKIP:
{
	skip 'NOTIFY queue more than half full: set PG_TEST_EXTRA=lockq_notify_full to run it', 19
	  unless ($ENV{PG_TEST_EXTRA} // '') =~ /\blockq_notify_full\b/;
	skip 'less than 10 GB free for the NOTIFY queue', 19
	  unless defined $avail_kb && $avail_kb > 10 * 1024 * 1024;
	my $t0 = time();
	$node->safe_psql('postgres', q{
		DO $$
		DECLARE p text := repeat('x', 7980);
		BEGIN
			WHILE pg_notification_queue_usage() <= 0.505 LOOP
				PERFORM pg_notify('lqscale_fill', g || p) FROM generate_series(1, 12500) g;
				COMMIT;
			END LOOP;
		END $$});
	my $u2 = $usage->();
	note sprintf('NOTIFY queue filled to %.3f in %.1f s', $u2, time() - $t0);
	cmp_ok($u2, '>', 0.5, 'the NOTIFY queue is more than half full');
	my $log_offset = -s $node->logfile;
	my $s2 = stats();

	ok(scalar_query($node, "SELECT lockq_try('P1', 'a', '1 min')") > 0, 'half full: lockq_try grants');
	ok(scalar_query($node, "SELECT lockq_get('P2', 'b', '1 min', '10 s')") > 0, 'lockq_get grants');
	scalar_query($node, "SELECT lockq_release('P1', 'a'), lockq_release('P2', 'b')");

	# client waiters over plain libpq that heartbeat every 3 s / 3
	$blocker = scalar_query($node, "SELECT lockq_try('PH', 'blocker', '10 min')");
	$d = driver('pq', 'PH', 50, 2, 3000);
	ok(drive_until($d, qr/^ENQUEUED /m), '50 client waiters queued');
	scalar_query($node, "SELECT lockq_release('PH', 'blocker')");
	my (undef, undef, $sw, $nt) = finish($d, 'half full');
	check_grants('half full', $d->{out}, [ map { sprintf('w%05d', $_) } 1 .. 50 ], $blocker);
	is($nt, 0, 'half full: no grant NOTIFY came');
	cmp_ok($sw, '>=', 1, "half full: the grants were learnt from heartbeats ($sw rounds)");

	# and through liblockq (a heartbeat every 2 s / 3)
	$blocker = scalar_query($node, "SELECT lockq_try('PL', 'blocker', '10 min')");
	$d = driver('lib', 'PL', 10, 2, 2000);
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 10 FROM lockq_waiters WHERE lock_id = 'PL'"),
		'10 liblockq waiters queued');
	$order = queue_order('PL');
	scalar_query($node, "SELECT lockq_release('PL', 'blocker')");
	finish($d, 'half full, liblockq');
	check_grants('half full, liblockq', $d->{out}, $order, $blocker);

	ok($node->log_contains(
			qr/WARNING:  lockq is not sending notifications: the NOTIFY queue is 5\d% full/,
			$log_offset),
		'the lock server logged that it sends no notifications');
	my $s3 = stats();
	is("$s3->{batch_errors} $s3->{dropped}", "$s2->{batch_errors} $s2->{dropped}",
		'no batch failed and no waiter was dropped');
}

# 3c. the stalled listener goes: the queue empties, notifications come back
$stall->quit;
ok($node->poll_query_until('postgres', 'SELECT pg_notification_queue_usage() < 0.01'),
	'with the stalled listener gone the queue drains');
$blocker = scalar_query($node, "SELECT lockq_try('PR', 'blocker', '10 min')");
$d = driver('pq', 'PR', 50, 2, 300_000);
ok(drive_until($d, qr/^ENQUEUED /m), '50 client waiters queued');
scalar_query($node, "SELECT lockq_release('PR', 'blocker')");
(undef, undef, undef, $notices) = finish($d, 'relieved');
check_grants('relieved', $d->{out}, [ map { sprintf('w%05d', $_) } 1 .. 50 ], $blocker);
is($notices, 50, 'relieved: notifications are sent again');
$reader->quit;

my $s9 = stats();
is("$s9->{holders}/$s9->{waiters}/$s9->{batch_errors}", '0/0/0', 'the end: nothing held or queued; no batch errors');
note sprintf('total run time %.1f s', time() - $t_start);
$node->stop;
done_testing();

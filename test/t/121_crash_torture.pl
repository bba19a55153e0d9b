# The randomized crash test (issue 9).  Eight clients of four kinds
# (client/test/lockq_torture.c: SQL with explicit owners, session-bound,
# client-side waiters, liblockq) run random get/try/renew/release/holds/
# fenced writes on three locks and record everything they were told, with
# their own CLOCK_MONOTONIC times.  Meanwhile this test is the nemesis: it
# picks seeded random faults from the table below (kill -9 of the
# postmaster and restart, pg_ctl restart, termination of the lock server or
# of a client backend, maintenance commands on lockq's tables (VACUUM FULL,
# CLUSTER, REINDEX ...), pg_dump under load, a change of
# lockq.max_unsettled_rate, and, in a build with fault
# injection, injection points), and after each waits until the clients
# have made progress again.  At the end the last dump is restored into a
# new cluster, whose tokens must be above every token of the run.
# Then test/torture/check_history.pl checks the whole history for I1-I4
# (test/torture/README.md has the rules); its self-test of hand-written
# histories, good and bad, runs first.
#
#   LOCKQ_TORTURE_SECONDS   how long the clients run (default 40)
#   LOCKQ_TORTURE_SEED      the seed (default random; printed)
#   make torture SECONDS=600 SEED=n   a long run of this test
#
# The histories, the nemesis log and the checker's report stay in
# tmp_check/torture_SEED/.
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
use Digest::MD5 qw(md5);
use List::Util;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
use LockqTest;

# --- the faults --------------------------------------------------------------
# kind => weight.  'point' picks a row of @POINTS.
my %FAULTS = (
	crash => 4,          # kill -9 of the postmaster, then start
	restart => 1,        # pg_ctl restart (fast)
	term_server => 2,    # pg_terminate_backend of the lock server
	term_client => 3,    # pg_terminate_backend of a random client backend
	point => 4,          # an injection point from @POINTS
	maint => 3,          # a maintenance command on lockq's tables (@MAINT)
	dump => 1,           # pg_dump of the database (restored at the end)
	scope => 2,);        # lockq.max_unsettled_rate set to 0 (every lock
	                     # unsettled at once, by the wide marker), 200 or -1

# Maintenance commands a DBA may run on lockq's tables at any moment; the
# rewrites make the lock server load its state anew before it writes.
my @MAINT = (
	'VACUUM FULL lockq.owners', 'VACUUM FULL lockq.queue', 'VACUUM FULL lockq.unsettled',
	'CLUSTER lockq.owners USING owners_pkey', 'REINDEX TABLE lockq.owners',
	'REINDEX TABLE CONCURRENTLY lockq.queue', 'VACUUM (ANALYZE) lockq.owners',
	'VACUUM FULL');

# Injection points (the test build, -DLOCKQ_FAULT_INJECTION, with
# test/sql/lockq_fault.sql; src/lockq_worker.c names them).  then:
#   fire   arm it (after a random number of hits) and wait until it fired
#   crash  arm 'wait', wait until the lock server is parked there, kill -9
#   wake   arm 'wait', wait until it is parked and clients wait for it, wake
#   guc    set lockq.fault_points (recovery path: shared memory is new after
#          a crash), crash, wait until it fired, reset it
my @POINTS = (
	# name                    action   arg  then
	[ 'batch-before-commit',  'error', 0,   'fire' ],
	[ 'batch-before-commit',  'fatal', 0,   'fire' ],
	[ 'batch-before-commit',  'panic', 0,   'fire' ],
	[ 'batch-after-commit',   'error', 0,   'fire' ],
	[ 'batch-after-commit',   'fatal', 0,   'fire' ],
	[ 'batch-after-commit',   'wait',  0,   'crash' ],
	[ 'batch-after-commit',   'wait',  0,   'wake' ],
	[ 'batch-after-commit',   'panic', 0,   'fire' ],
	[ 'batch-after-publish',  'fatal', 0,   'fire' ],
	[ 'batch-start',          'wait',  0,   'wake' ],
	[ 'batch-apply',          'error', 0,   'fire' ],
	[ 'batch-apply',          'fatal', 0,   'fire' ],
	[ 'commit-durable-wait',  'sleep', 300, 'fire' ],
	[ 'commit-durable-wait',  'wait',  0,   'crash' ],
	[ 'commit-durable-wait',  'fatal', 0,   'fire' ],
	[ 'recover-start',        'error', 0,   'guc' ],
	[ 'recover-after-owners', 'fatal', 0,   'guc' ],
	[ 'recover-after-queue',  'error', 0,   'guc' ],);

my $prog = "$ENV{TESTDIR}/client/test/lockq_torture";
my $checker = "$ENV{TESTDIR}/test/torture/check_history.pl";
my $selftest = "$ENV{TESTDIR}/test/torture/selftest";

# Under make test a missing tool is a failure, not a skip.
if (!-x $prog)
{
	if ($ENV{LOCKQ_MAKE_TEST})
	{
		fail("$prog is built");
		done_testing();
		exit;
	}
	plan skip_all => "$prog not built";
}

my $seconds = $ENV{LOCKQ_TORTURE_SECONDS} || 40;
my $seed = ($ENV{LOCKQ_TORTURE_SEED} // "") =~ /^(\d+)$/ ? $1 : int(rand(2**31));
diag("torture seed $seed, $seconds s (LOCKQ_TORTURE_SEED=$seed LOCKQ_TORTURE_SECONDS=$seconds)");

# rnd(n): the nemesis' choices, a number in [0, n) from the seed and a
# counter (Perl's rand after srand repeats itself visibly with this few
# draws between choices).
my $draws = 0;

sub rnd
{
	my ($n) = @_;
	my ($x) = unpack('N', md5("$seed/" . $draws++));
	return int($x / 4294967296 * $n);
}

# --- the checker can fail -------------------------------------------------------
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $^X, $checker, '--selftest', $selftest ], '>', \$out, '2>', \$err);
	my $rc = $? >> 8;
	my $n = 0;
	for my $line (split /\n/, $out)
	{
		if ($line =~ /^(ok|not ok) - (.*)$/)
		{
			ok($1 eq 'ok', "checker self-test: $2");
			$n++;
		}
		elsif ($line =~ /\S/)
		{
			diag($line);
		}
	}
	cmp_ok($n, '>=', 20, 'the checker self-test ran its cases');
	is($rc, 0, 'the checker self-test passed') or diag($err);
}

# --- the node ---------------------------------------------------------------------
# A short max_grace keeps the grace period after each crash short; a long
# wal_writer_delay leaves unflushed batches (releases, queueing, short
# leases) in WAL buffers for longer, where a crash loses them.  The run
# starts with every lock unsettled at once (the wide marker) and the
# nemesis changes that ('scope').
my $node = lockq_node('torture', conf => q{
lockq.max_grace = '2s'
lockq.max_unsettled_rate = 0
restart_after_crash = on
max_connections = 60
wal_writer_delay = '1s'
});
my $conn = $node->connstr('postgres');
my $dir = "$PostgreSQL::Test::Utils::tmp_check/torture_$seed";
mkdir $dir;
my $nemfile = "$dir/nemesis.tsv";
open(my $nem, '>', $nemfile) or die "cannot write $nemfile: $!";
$nem->autoflush(1);
print $nem "# t0_ns\tt1_ns\tkind\tdetail (seed $seed)\n";

$node->safe_psql('postgres', q{
CREATE TABLE torture_counter (lock_id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
	last_token bigint);
INSERT INTO torture_counter (lock_id) VALUES ('L0'), ('L1'), ('L2');
});

# The fault injection functions, if this build has them.
my $have_points = 0;
{
	my $sql = "$ENV{TESTDIR}/test/sql/lockq_fault.sql";
	if (-e $sql)
	{
		my ($ret, $out, $err) = $node->psql('postgres', undef,
			extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $sql ]);
		note("test/sql/lockq_fault.sql: $err") if $ret;
	}
	my ($ret, $out) = $node->psql('postgres',
		q{SELECT to_regproc('lockq_fault_arm') IS NOT NULL AND count(*) >= 0 FROM lockq_faults()});
	$have_points = ($ret == 0 && $out eq 't');
	# make test builds the test build: there, no points is a failure
	if ($ENV{LOCKQ_MAKE_TEST})
	{
		ok($have_points, 'this build has the injection points (FAULT_INJECTION=1)');
	}
	else
	{
		note($have_points
			? 'injection points available'
			: 'no injection points in this build: those faults are skipped');
	}
}

sub mono_ns
{
	return int(clock_gettime(CLOCK_MONOTONIC) * 1e9);
}

# counter() is the number of fenced writes committed so far.
sub counter
{
	return $node->safe_psql('postgres', 'SELECT coalesce(sum(n), 0) FROM torture_counter');
}

# progress(base, n, what): wait (up to 60 s) until n more fenced writes
# than base have been committed.
sub progress
{
	my ($base, $n, $what) = @_;
	local $PostgreSQL::Test::Utils::timeout_default = 60;
	return ok($node->poll_query_until('postgres',
			"SELECT coalesce(sum(n), 0) >= $base + $n FROM torture_counter"),
		"clients make progress $what");
}

sub sql_ok
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	return ($ret == 0, $out, $err);
}

# wait_point(name, column): poll until lockq_faults() shows column > 0 for
# name (up to 20 s).
sub wait_point
{
	my ($name, $col) = @_;
	local $PostgreSQL::Test::Utils::timeout_default = 20;
	return $node->poll_query_until('postgres',
		"SELECT coalesce(sum($col), 0) > 0 FROM lockq_faults() WHERE name = '$name'");
}

# inject(kind) applies one fault and returns its description, or undef
# when that kind cannot be done here.
my $last_dump;
my $ndumps = 0;

sub inject
{
	my ($kind) = @_;
	if ($kind eq 'crash')
	{
		my $pid = $node->{_pid};
		crash_restart($node);
		return "kill -9 of the postmaster ($pid), restart";
	}
	if ($kind eq 'restart')
	{
		$node->restart;
		return 'pg_ctl restart (fast)';
	}
	if ($kind eq 'term_server')
	{
		my $w = worker_pid($node);
		return undef unless $w;
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($w)");
		local $PostgreSQL::Test::Utils::timeout_default = 30;
		$node->poll_query_until('postgres',
			"SELECT worker_pid IS NOT NULL AND worker_pid <> $w FROM lockq_stats")
		  or diag("the lock server did not come back after pg_terminate_backend($w)");
		return "pg_terminate_backend of the lock server ($w)";
	}
	if ($kind eq 'term_client')
	{
		my @c = split /\n/, $node->safe_psql('postgres', q{
			SELECT pid || ' ' || application_name FROM pg_stat_activity
			 WHERE application_name LIKE 'torture_w%' ORDER BY application_name, pid});
		return undef unless @c;
		my ($pid, $app) = split / /, $c[ rnd(scalar @c) ];
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
		return "pg_terminate_backend of client $app ($pid)";
	}
	if ($kind eq 'maint')
	{
		my $cmd = $MAINT[ rnd(scalar @MAINT) ];
		my ($okay, $out, $err) = sql_ok($cmd);
		if (!$okay)
		{
			# (a crash a moment ago: the server may still be starting)
			note("$cmd: $err");
			return undef;
		}
		return $cmd;
	}
	if ($kind eq 'scope')
	{
		my $rate = (0, 200, -1)[ rnd(3) ];
		my ($okay, $out, $err) = sql_ok("ALTER SYSTEM SET lockq.max_unsettled_rate = $rate");
		if (!$okay)
		{
			note("lockq.max_unsettled_rate: $err");
			return undef;
		}
		sql_ok('SELECT pg_reload_conf()');
		return "lockq.max_unsettled_rate = $rate";
	}
	if ($kind eq 'dump')
	{
		my $file = "$dir/dump." . ++$ndumps;
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'pg_dump', '-Fc', '-f', $file, '-d', $conn ], '>', \$out, '2>', \$err);
		if ($? != 0)
		{
			note("pg_dump: $err");
			return undef;
		}
		$last_dump = $file;
		return "pg_dump to $file";
	}
	if ($kind eq 'point')
	{
		return undef unless $have_points;
		my ($name, $action, $arg, $then) = @{ $POINTS[ rnd(scalar @POINTS) ] };
		my $skip = rnd(20);
		if ($then eq 'guc')
		{
			my ($okay, $out, $err) =
			  sql_ok("ALTER SYSTEM SET lockq.fault_points = '$name:$action'");
			if (!$okay)
			{
				note("lockq.fault_points: $err");
				return undef;
			}
			crash_restart($node);
			wait_point($name, 'fired')
			  or note("$name:$action (recovery path) did not show as fired");
			$node->safe_psql('postgres', 'ALTER SYSTEM RESET lockq.fault_points');
			$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
			return "$name:$action on the recovery path (lockq.fault_points), crash";
		}
		my $a = $then eq 'fire' ? $action : 'wait';
		my ($okay, $out, $err) =
		  sql_ok("SELECT lockq_fault_arm('$name', '$a', $arg, $skip, 1)");
		if (!$okay)
		{
			note("lockq_fault_arm('$name', '$a'): $err");
			return undef;
		}
		if ($then eq 'fire' && $a eq 'panic')
		{
			# a panic restarts the whole server (the same postmaster: its
			# start time stays), and the new shared memory has no record of
			# the point: wait until the point is gone
			local $PostgreSQL::Test::Utils::timeout_default = 20;
			if (!$node->poll_query_until('postgres',
					"SELECT NOT EXISTS (SELECT FROM lockq_faults() WHERE name = '$name')"))
			{
				note("$name:panic did not fire; disarmed");
				sql_ok("SELECT lockq_fault_disarm('$name')");
			}
			return "$name:panic (after $skip hits), crash restart";
		}
		if ($then eq 'fire')
		{
			if (!wait_point($name, 'fired'))
			{
				note("$name:$a did not fire; disarmed");
				sql_ok("SELECT lockq_fault_disarm('$name')");
			}
			return "$name:$a (after $skip hits)";
		}
		if (!wait_point($name, 'hits'))
		{
			sql_ok("SELECT lockq_fault_disarm('$name')");
			note("$name: the lock server never got there; disarmed");
			return "$name:wait (never reached)";
		}
		if ($then eq 'crash')
		{
			crash_restart($node);
			return "$name:wait, then kill -9 of the postmaster";
		}
		# let clients pile up behind the parked lock server, then wake it
		{
			local $PostgreSQL::Test::Utils::timeout_default = 20;
			$node->poll_query_until('postgres', q{
				SELECT count(*) > 0 FROM pg_stat_activity
				 WHERE application_name LIKE 'torture_w%' AND wait_event_type = 'Extension'});
		}
		sql_ok("SELECT lockq_fault_wakeup('$name')");
		sql_ok("SELECT lockq_fault_disarm('$name')");
		return "$name:wait, then woken up";
	}
	die "unknown fault $kind";
}

sub pick_fault
{
	my $total = 0;
	$total += $FAULTS{$_} for sort keys %FAULTS;
	my $r = rnd($total);
	for my $k (sort keys %FAULTS)
	{
		return $k if ($r -= $FAULTS{$k}) < 0;
	}
	return 'crash';
}

# --- the run ------------------------------------------------------------------------
my ($wout, $werr) = ('', '');
my $start = mono_ns();
my $work = IPC::Run::start(
	[ $prog, '-s', $seed, '-d', $seconds, '-w', 8, '-l', 3, '-o', $dir, $conn ],
	'>', \$wout, '2>', \$werr,
	IPC::Run::timeout($seconds + 180));
END
{
	eval { $work->kill_kill(grace => 5) if $work && $work->pumpable; };
}

progress(0, 10, 'at the start');
my (%done, $crashes);
# the last fault leaves the clients 15 s to show progress (in a short run,
# the last 40 %): a crash restart takes seconds and delays the held locks
# by their leases, and up to 17 fenced writes are asked for (a fault at
# 33.7 s of 40, 6 s before the end then, saw 14 before the workload ended)
my $stop_at = $start + List::Util::max($seconds - 15, $seconds * 0.6) * 1e9;
while (mono_ns() < $stop_at)
{
	my $kind = pick_fault();
	# at least one maintenance command and one crash, whatever the seed (a
	# run had 10 faults and none was maintenance: 16% of seeds do that)
	$kind = 'maint'
	  if !$done{maint} && mono_ns() > $start + $seconds * 0.25e9;
	$kind = 'crash'
	  if !$crashes && mono_ns() > $start + $seconds * 0.5e9;
	my $base = counter();
	my $t0 = mono_ns();
	my $what = inject($kind);
	my $t1 = mono_ns();
	next unless defined $what;
	$done{$kind}++;
	$crashes++ if $kind eq 'crash' || $what =~ /kill -9/;
	print $nem "$t0\t$t1\t$kind\t$what\n";
	note(sprintf('%.1f s: %s', ($t0 - $start) / 1e9, $what));
	# between faults the clients must make progress again (a random amount)
	last unless progress($base, 3 + rnd(15), "after $what");
}

$work->finish;
my $wrc = $? >> 8;
is($wrc, 0, 'the workload ended normally') or diag($werr);
note($_) for grep { /^#/ } split /\n/, $wout;

# what the fenced-write counters ended at
for my $row (split /\n/, $node->safe_psql('postgres',
		'SELECT lock_id, n FROM torture_counter ORDER BY lock_id'))
{
	my ($lock, $n) = split /\|/, $row;
	my $t = mono_ns();
	print $nem "$t\t$t\tfinal\t$lock $n\n";
}
close $nem;

# nothing is left once the clients are gone and the last leases ran out
{
	local $PostgreSQL::Test::Utils::timeout_default = 60;
	ok($node->poll_query_until('postgres',
			'SELECT count(*) = 0 FROM lockq_waiters'),
		'no queue entry is left');
	ok($node->poll_query_until('postgres',
			'SELECT count(*) = 0 FROM lockq_locks'),
		'no grant is left once the last leases ran out');
}

# --- the check ------------------------------------------------------------------------
my @hist = sort glob("$dir/w*.tsv");
my ($cout, $cerr) = ('', '');
IPC::Run::run([ $^X, $checker, '--nemesis', $nemfile, '--context', 1, @hist ],
	'>', \$cout, '2>', \$cerr);
my $crc = $? >> 8;
open(my $rf, '>', "$dir/check.txt") or die;
print $rf $cout, $cerr;
close $rf;

my %stats = $cout =~ /^STATS (.*)$/m ? map { split /=/, $_, 2 } split / /, $1 : ();
my ($summary) = $cout =~ /^SUMMARY (.*)$/m;
note("checker: " . ($summary // '?'));
note("checker: STATS " . join(' ', map { "$_=$stats{$_}" } sort keys %stats));
note("faults: " . join(', ', map { "$_ $done{$_}" } sort keys %done));

# the run did real work: it cannot pass vacuously
cmp_ok($stats{grants} // 0, '>=', 20, 'at least 20 grants were made');
cmp_ok($stats{fwrites} // 0, '>=', 10, 'at least 10 fenced writes committed');
cmp_ok($stats{windows} // 0, '>=', 10, 'at least 10 grants with a lease their holder could count on');
my $nfaults = 0;
$nfaults += $_ for values %done;
cmp_ok($nfaults, '>=', 3, 'at least 3 faults were injected');
cmp_ok($crashes // 0, '>=', 1, 'at least one crash');
cmp_ok($done{maint} // 0, '>=', 1, 'at least one maintenance command ran under load');

# The last dump, taken under load, restored into a new cluster: its tokens
# and clock continue above everything the run issued (its token ceiling is
# from the moment of the dump).  Once the run's clock has passed its token
# ceiling, no token of the run is above the clock.
SKIP:
{
	skip 'no pg_dump succeeded during this run', 2 unless $last_dump;
	my $ceiling = $node->safe_psql('postgres', 'SELECT last_value FROM lockq.token_seq');
	ok($node->poll_query_until('postgres', "SELECT lockq_now() > $ceiling"),
		'the clock passed every token of the run');
	my $restored = lockq_node('torture_restored', no_extension => 1);
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pg_restore', '-d', $restored->connstr('postgres'), $last_dump ],
		'>', \$out, '2>', \$err);
	my $t = $restored->safe_psql('postgres', "SELECT lockq_try('after-restore', 'o', '1 minute')");
	cmp_ok($t, '>', $ceiling, "a token in a restore of the last dump ($last_dump) is above every token of the run")
	  or diag($err);
	$restored->stop;
}

if (!ok($crc == 0, 'the history satisfies I1-I4 (fence, exclusion, no reissue, FIFO)'))
{
	my @lines = split /\n/, $cout . $cerr;
	my @head = grep { !/^      / && !/^    calls on / } @lines;    # without the context
	diag(join("\n", @head[ 0 .. ($#head > 120 ? 120 : $#head) ]));
	diag("seed $seed; histories, nemesis log and the full report (with context) in $dir");
	diag("replay: make torture SECONDS=$seconds SEED=$seed");
	diag("check again: perl test/torture/check_history.pl --nemesis $nemfile --context 2 $dir/w*.tsv");
}

$node->stop;
done_testing();

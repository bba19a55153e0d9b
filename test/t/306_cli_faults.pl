# lockq run as a cluster-wide flock(1) under faults (issue 10): the command
# runs in a process group of its own and the whole group is stopped (none
# of it outlives the lock); kill -9 of lockq takes the command's group
# with it; when renewals fail (a proxy black-holes the connection) the
# command is dead before the lease can end, so the next holder never runs
# beside it; one Ctrl-C reaches the command once; a nested run with the
# same owner does not release the outer grant; exit codes and messages;
# flock's switches; lockq force-release; lockq status's exit code.
# Issue 22: a stopped lockq (SIGSTOP, Ctrl-Z) leaves no command running
# past its lease; a nested run neither shortens nor ends the outer lease;
# a final release that finds its grant ended keeps the command's status;
# --foreground stops the command's children and hands the terminal on;
# a password in -d is hidden from /proc/PID/cmdline.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;
use LockqProxy;

my $lockq = "$ENV{TESTDIR}/client/lockq";
if (!-x $lockq)
{
	die "$lockq not built" if $ENV{LOCKQ_MAKE_TEST};
	plan skip_all => "$lockq not built";
}

my $node = lockq_node('clifaults', conf => "listen_addresses = '127.0.0.1'\n");
my $conn = $node->connstr('postgres');
my $port = $node->port;
my $dir = PostgreSQL::Test::Utils::tempdir();
my $timeout = $PostgreSQL::Test::Utils::timeout_default;

sub lockq
{
	return lockq_within(60, @_);
}

# lockq_within(seconds, args...): as lockq, but a lockq that hangs is
# killed after that long (exit status 'hung'), so that one defect does not
# stop the other checks.
sub lockq_within
{
	my ($secs, @args) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ $lockq, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($secs));
	return (finish_within($h), $out, $err);
}

# finish_within(harness): its exit status, or 'hung' if its timer ran out
sub finish_within
{
	my ($h) = @_;
	my $ok = eval { $h->finish; 1 };
	if (!$ok)
	{
		$h->kill_kill;
		return 'hung';
	}
	return ($h->results)[0];
}

sub start_lockq
{
	my ($outref, $errref, @args) = @_;
	return IPC::Run::start([ $lockq, @args ], '>', $outref, '2>', $errref,
		IPC::Run::timeout($timeout));
}

sub start_lockq_within
{
	my ($secs, $outref, $errref, @args) = @_;
	return IPC::Run::start([ $lockq, @args ], '>', $outref, '2>', $errref,
		IPC::Run::timeout($secs));
}

# gone(pids...): none of these processes exists any more
sub gone
{
	return !grep { kill(0, $_) } @_;
}

# wait_gone(secs, pids...): polls (10 ms) until they are gone; false on timeout
sub wait_gone
{
	my ($secs, @pids) = @_;
	my $end = time() + $secs;
	while (time() < $end)
	{
		return 1 if gone(@pids);
		select(undef, undef, undef, 0.01);
	}
	return 0;
}

# pid_in(file): the pid a process wrote there (polls until it is there)
sub pid_in
{
	my ($file) = @_;
	my $end = time() + $timeout;
	select(undef, undef, undef, 0.01) until (-s $file || time() > $end);
	my $pid = -s $file ? slurp_file($file) : 0;
	chomp $pid;
	return $pid;
}

# --- 1. the whole process group is stopped on a lost lease ------------------
{
	my ($o, $e) = ('', '');
	my $log = "$dir/pg1.log";
	my $h = start_lockq_within(60, \$o, \$e, 'run', '-d', $conn, '--grace', '500ms', 'K1', '--',
		'sh', '-c', "echo pgid \$\$; (exec sh -c 'echo \$\$ > $dir/sub1.pid; while :; do date >> $log; sleep .2; done') >/dev/null; :");
	$h->pump until $o =~ /pgid (\d+)/;
	my $pgid = $1;
	my $sub = pid_in("$dir/sub1.pid");
	ok(!gone($sub) && getpgrp(0) != $pgid && kill(0, -$pgid),
		'the command runs, with its subshell, in a process group of its own');
	scalar_query($node, "SELECT lockq_force_release('K1')");
	is(finish_within($h), 76, 'lease lost: 76');
	ok(gone($pgid, $sub), 'when lockq exits, the command and its subshell are gone')
	  or kill('KILL', $sub);
}

# ... and what a command leaves running in its group when it exits is
# stopped before the lock is released
{
	my ($rc, $out, $err) = lockq('run', '-d', $conn, '--grace', '500ms', 'K1b', '--',
		'sh', '-c', "(exec sh -c 'trap \"\" TERM; echo \$\$ > $dir/sub1b.pid; while :; do sleep .1; done') >/dev/null & while [ ! -s $dir/sub1b.pid ]; do sleep .01; done; exit 0");
	my $sub = -s "$dir/sub1b.pid" ? pid_in("$dir/sub1b.pid") : 0;
	is($rc, 0, 'a command that leaves a background job: its own exit status');
	ok($sub && gone($sub), 'the job (which ignores SIGTERM) was killed before lockq exited')
	  or kill('KILL', $sub);
	like($err, qr/left processes in its group/, 'lockq says so');
}

# --- 2. kill -9 of lockq: the command's group dies with it ---------------------
{
	my ($o, $e) = ('', '');
	my $h = start_lockq_within(30, \$o, \$e, 'run', '-d', $conn, 'K2', '--',
		'sh', '-c', "echo pid \$\$; exec >/dev/null; (exec sh -c 'echo \$\$ > $dir/sub2.pid; while :; do sleep .1; done') & while :; do sleep .1; done");
	$h->pump until $o =~ /pid (\d+)/;
	my $cmd = $1;
	my $sub = pid_in("$dir/sub2.pid");
	my $lockq_pid = $h->{KIDS}[0]{PID};
	ok($sub && !gone($cmd, $sub), 'the command and its background job run');
	kill 'KILL', $lockq_pid;
	finish_within($h);
	ok(wait_gone(20, $cmd, $sub), 'after kill -9 of lockq, the command and its background job are gone')
	  or kill('KILL', $cmd, $sub);
	scalar_query($node, "SELECT lockq_force_release('K2')");
}

# --- 3. renewals fail: dead before the lease can end --------------------------
{
	my ($ppid, $pport) = start_proxy($port);
	my $via_proxy = "host=127.0.0.1 port=$pport dbname=postgres connect_timeout=2";
	my $alog = "$dir/a.log";
	my ($ao, $ae, $bo, $be) = ('', '', '', '');
	# A ignores SIGTERM: only the SIGKILL at deadline - margin stops it
	# (the default margin for a 3 s ttl: 300 ms)
	my $a = start_lockq_within(40, \$ao, \$ae, 'run', '-d', $via_proxy, '--ttl', '3s', '--grace', '500ms',
		'K3', '--',
		'sh', '-c', "trap '' TERM; echo running; while :; do echo A \$(date +%s%N) >> $alog; sleep .02; done");
	eval { $a->pump until $ao =~ /running/; 1 } or diag("A: $ae");
	my $t_hole = time();
	kill 'USR1', $ppid;		# the connection goes silent, no reset
	# B waits directly; it gets the lock once the server ends A's lease
	my $b = start_lockq(\$bo, \$be, 'run', '-d', $conn, 'K3', '--',
		'sh', '-c', 'echo B $(date +%s%N)');
	$b->finish;
	is(finish_within($a), 76, 'A: renewals failed: 76');
	like($ae, qr/could not be renewed.*stopping the command/, 'A: lockq says why');
	is(($b->results)[0], 0, 'B ran');
	my ($b_start) = $bo =~ /^B (\d+)$/m;
	my @a_times = map { /^A (\d+)$/ ? $1 : () } split /\n/, slurp_file($alog);
	my $a_last = $a_times[-1];
	ok($a_last < $b_start, 'A\'s command wrote its last line before B\'s command started');
	note sprintf('A last wrote %.0f ms before B started; A stopped %.1f s after the network went silent',
		($b_start - $a_last) / 1e6, $a_last / 1e9 - $t_hole);
	stop_proxy($ppid);
}

# --- 4. one Ctrl-C reaches the command once -----------------------------------
# The command records the sender of every SIGINT it gets (siginfo): the
# terminal's signal goes to lockq's process group, and must reach the
# command only through lockq, once.
{
	my $log = "$dir/int.log";
	my ($o, $e) = ('', '');
	my $cmd = 'use POSIX; open(my $f, ">>", $ARGV[0]) or die; $f->autoflush(1);'
	  . ' POSIX::sigaction(SIGINT, POSIX::SigAction->new(sub { print $f "int from $_[1]{pid}\n" },'
	  . ' POSIX::SigSet->new, SA_SIGINFO)) or die; $| = 1; print "ready\n"; sleep 1 while 1';
	# lockq leads a process group, as in a shell
	my $h = IPC::Run::start([ 'perl', '-e', 'setpgrp(0, 0); exec @ARGV', $lockq,
			'run', '-d', $conn, 'K4', '--', 'perl', '-e', $cmd, $log ],
		'>', \$o, '2>', \$e, IPC::Run::timeout($timeout));
	$h->pump until $o =~ /ready/;
	my $lockq_pid = $h->{KIDS}[0]{PID};
	kill 'INT', -$lockq_pid;		# what the terminal does on Ctrl-C
	my $end = time() + $timeout;
	select(undef, undef, undef, 0.01) until (-s $log || time() > $end);
	kill 'TERM', $lockq_pid;
	is(finish_within($h), 143, 'then SIGTERM passed on: 128 + 15');
	my @ints = split /\n/, slurp_file($log);
	is(scalar(@ints), 1, 'one Ctrl-C: the command got SIGINT once');
	is(join(',', @ints), "int from $lockq_pid", 'from lockq (not straight from the terminal as well)');
}

# --- 5. a nested run with the same owner does not release the outer grant -------
# nor shorten its lease: the inner asks a 2 s ttl inside an outer 30 s one
# and runs for 1 s (its renewals would set the lease to now + 2 s), and the
# outer still holds 3 s after the inner ended
{
	my ($rc, $out, $err) = lockq('run', '-d', $conn, 'K5', '--', 'sh', '-c',
		"$lockq run -d '$conn' --owner \"\$LOCKQ_OWNER\" --ttl 2s K5 -- sh -c 'echo inner \$LOCKQ_TOKEN; sleep 1' && sleep 3 && $lockq status -d '$conn' K5 && echo outer \$LOCKQ_TOKEN");
	is($rc, 0, 'outer run: 0 (its command was not stopped)') or diag($err);
	like($out, qr/K5: held by .*outer \d+/s, 'after the inner run (ttl 2 s) ended, the outer still held the lock 3 s later');
	my ($inner) = $out =~ /^inner (\d+)$/m;
	my ($outer) = $out =~ /^outer (\d+)$/m;
	is($inner, $outer, 'with one token');
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'K5'"), '0',
		'released when the outer run ended');

	# a nested run whose enclosing grant has ended runs nothing
	my ($o, $e) = ('', '');
	IPC::Run::run([ 'env', 'LOCKQ_LOCK=K5', 'LOCKQ_OWNER=gone', 'LOCKQ_TOKEN=12345',
			$lockq, 'run', '-d', $conn, '--owner', 'gone', 'K5', '--', 'echo', 'ran' ],
		'>', \$o, '2>', \$e, IPC::Run::timeout(60));
	is($? >> 8, 76, 'a nested run of an ended grant: 76');
	is($o, '', 'its command did not run');
	like($e, qr/the enclosing run's grant of "K5" \(token 12345\) has ended/, 'said');
}

# --- 6. exit codes and messages -----------------------------------------------
{
	my ($rc, $out, $err) = lockq('run', '-d', $conn, '--ttl', '48h', 'K6', '--', 'true');
	is($rc, 64, 'a ttl above lockq.max_ttl: usage error 64') or diag($err);
	($rc, $out, $err) = lockq('run', '-d', $conn, '--owner', 'session:1', 'K6', '--', 'true');
	is($rc, 64, 'a session: owner: 64');
	($rc, $out, $err) = lockq('run', '-d', $conn, '--ttl', '1s', '--margin', '600ms', 'K6', '--', 'true');
	is($rc, 64, '--margin above half the ttl: 64');
	like($err, qr/at most half the --ttl/, 'with a message');
	($rc, $out, $err) = lockq('run', '-d', $conn, '--ttl', '2s', '--grace', '1s', 'K6', '--', 'true');
	is($rc, 0, 'a grace longer than fits before the deadline is accepted (shortened when renewals fail)');

	scalar_query($node, "SELECT lockq_try('K6', 'someone', '1 hour')");
	my ($o, $e) = ('', '');
	my $h = start_lockq(\$o, \$e, 'run', '-d', $conn, 'K6', '--', 'true');
	ok(wait_for_waiters($node, 'K6', 1), 'waiting');
	$h->signal('TERM');
	$h->finish;
	is(($h->results)[0], 143, 'SIGTERM while waiting: 143');
	scalar_query($node, "SELECT lockq_release('K6', 'someone')");

	$node->safe_psql('postgres', 'CREATE DATABASE noext');
	($rc, $out, $err) = lockq('run', '-d', $node->connstr('noext'), 'K6', '--', 'true');
	is($rc, 69, 'no extension: 69');
	is($err, "lockq: the lockq extension is not installed in database \"noext\"\n",
		'said as it is, with a newline, not as a connection failure');
	$node->safe_psql('noext', 'CREATE EXTENSION lockq');
	($rc, $out, $err) = lockq('status', '-d', $node->connstr('noext'));
	is($rc, 69, 'status in a database that is not lockq.database: 69');
	like($err, qr/runs in database "postgres".*not in "noext"/, 'and says where it runs');

	# the final release is not confirmed: said, not silent
	my ($ppid, $pport) = start_proxy($port);
	($rc, $out, $err) = lockq_within(60, 'run', '-d', "host=127.0.0.1 port=$pport dbname=postgres", 'K6', '--',
		'sh', '-c', "kill -USR1 $ppid; exit 0");
	is($rc, 0, 'unconfirmed final release: the command\'s status');
	like($err, qr/did not confirm the release of lock "K6"/, 'with a message');
	stop_proxy($ppid);
	scalar_query($node, "SELECT lockq_force_release('K6')");
}

# --- 7. flock(1)'s switches, force-release, status ------------------------------
{
	scalar_query($node, "SELECT lockq_try('K7', 'someone', '1 hour')");
	my ($rc, $out, $err) = lockq('run', '-d', $conn, '-n', 'K7', '--', 'true');
	is($rc, 75, '-n on a held lock: 75');
	($rc, $out, $err) = lockq('run', '-d', $conn, '--nonblock', '-E', '3', 'K7', '--', 'true');
	is($rc, 3, '--nonblock -E 3: 3');
	my $t0 = time();
	($rc, $out, $err) = lockq('run', '-d', $conn, '-w', '0.3', '--conflict-exit-code', '9', 'K7', '--', 'true');
	is($rc, 9, '-w 0.3 -E 9 on a held lock: 9');
	cmp_ok(time() - $t0, '>=', 0.3, 'after waiting');
	($rc, $out, $err) = lockq('status', '-d', $conn, 'K7');
	is($rc, 0, 'status of a held lock: 0');
	($rc, $out, $err) = lockq('force-release', '-d', $conn, 'K7');
	is($rc, 0, 'force-release: 0');
	($rc, $out, $err) = lockq('force-release', '-d', $conn, 'K7');
	is($rc, 1, 'force-release of a free lock: 1');
	($rc, $out, $err) = lockq('status', '-d', $conn, 'K7');
	is($rc, 1, 'status of a free lock: 1');
	is($out, "K7: free\n", 'and says so');
	($rc, $out, $err) = lockq('run', '-d', $conn, '-v', '-c', 'echo "c:$LOCKQ_LOCK"', 'K7');
	is($rc, 0, '-c runs a shell command');
	like($out, qr/^c:K7$/m, 'with the environment');
	like($err, qr/acquired "K7" \(token \d+\).*released "K7"/s, '-v says what happens');
	($rc, $out, $err) = lockq('run', '-d', $conn, 'K7', '-c', 'exit 4');
	is($rc, 4, 'flock order: LOCK -c COMMAND');
	($rc, $out, $err) = lockq('run', '-d', $conn, '--timeout', '1s', '--no-wait', 'K7', '--', 'true');
	is($rc, 64, 'the long options still work (and still conflict)');
}

# proc_state(pid): the state letter of /proc/PID/stat ('' once gone)
sub proc_state
{
	my ($pid) = @_;
	open(my $f, '<', "/proc/$pid/stat") or return '';
	my $l = <$f> // '';
	close $f;
	return $l =~ /^\d+ \(.*\) (\S)/s ? $1 : '';
}

# wait_state(pid, letters, secs): polls (10 ms) until its state is one of them
sub wait_state
{
	my ($pid, $want, $secs) = @_;
	my $end = time() + $secs;
	while (time() < $end)
	{
		return 1 if proc_state($pid) =~ /^[$want]$/;
		select(undef, undef, undef, 0.01);
	}
	return 0;
}

# --- 8. lockq stopped (SIGSTOP, or Ctrl-Z): its command ends with the lease ----
# Nothing renews while lockq is stopped; the guardian, which is not
# stopped, kills the group at deadline - margin.  A's command ignores
# SIGTERM; ttl 3 s, margin 300 ms.
for my $how (qw(STOP TSTP))
{
	my $alog = "$dir/stop-$how.log";
	my ($ao, $ae, $bo, $be) = ('', '', '', '');
	# lockq leads a process group, as in a shell
	my $a = IPC::Run::start([ 'perl', '-e', 'setpgrp(0, 0); exec @ARGV', $lockq,
			'run', '-d', $conn, '--ttl', '3s', "K8$how", '--', 'sh', '-c',
			"trap '' TERM; echo A \$(date +%s%N) >> $alog; echo pid \$\$; while :; do echo A \$(date +%s%N) >> $alog; sleep .02; done" ],
		'>', \$ao, '2>', \$ae, IPC::Run::timeout(60));
	$a->pump until $ao =~ /pid (\d+)/;
	my $cmd = $1;
	my $lockq_pid = $a->{KIDS}[0]{PID};
	if ($how eq 'STOP')
	{
		kill 'STOP', $lockq_pid;
	}
	else
	{
		kill 'TSTP', -$lockq_pid;	# Ctrl-Z: the terminal signals lockq's group
	}
	ok(wait_state($lockq_pid, 'T', 10), "$how: lockq is stopped");
	ok(wait_state($cmd, 'T', 10), 'Ctrl-Z: and so is its command') if $how eq 'TSTP';
	my $b = start_lockq(\$bo, \$be, 'run', '-d', $conn, "K8$how", '--',
		'sh', '-c', "echo B \$(date +%s%N); cat /proc/$cmd/stat 2>/dev/null; echo");
	$b->finish;
	is(($b->results)[0], 0, "$how: B ran once A's lease ended");
	my ($b_start) = $bo =~ /^B (\d+)$/m;
	my ($a_state) = $bo =~ /^\d+ \(.*\) (\S)/m;
	ok(!defined $a_state || $a_state eq 'Z', "$how: A's command was dead when B's started")
	  or diag("state $a_state");
	is(proc_state($lockq_pid), 'T', "$how: (lockq was still stopped)");
	my @a_times = map { /^A (\d+)$/ ? $1 : () } split /\n/, slurp_file($alog);
	ok($a_times[-1] < $b_start, "$how: A's command wrote its last line before B's command started");
	note sprintf('%s: A last wrote %.0f ms before B started', $how, ($b_start - $a_times[-1]) / 1e6);
	kill 'CONT', $lockq_pid;
	is(finish_within($a), 76, "$how: continued, lockq exits 76");
	like($ae, qr/ran out while lockq could not renew it/, "$how: and says why");
}

# ... and Ctrl-Z then fg within the lease: the command stops and goes on
{
	my ($o, $e) = ('', '');
	my $h = IPC::Run::start([ 'perl', '-e', 'setpgrp(0, 0); exec @ARGV', $lockq,
			'run', '-d', $conn, 'K8fg', '--', 'sh', '-c',
			'echo pid $$; read x; echo got $x' ],
		'<', \my $in, '>', \$o, '2>', \$e, IPC::Run::timeout(60));
	$h->pump until $o =~ /pid (\d+)/;
	my $cmd = $1;
	my $lockq_pid = $h->{KIDS}[0]{PID};
	kill 'TSTP', -$lockq_pid;
	ok(wait_state($lockq_pid, 'T', 10) && wait_state($cmd, 'T', 10),
		'Ctrl-Z stops lockq and its command');
	kill 'CONT', -$lockq_pid;	# fg
	ok(wait_state($cmd, 'SR', 10), 'fg: the command goes on');
	$in = "on\n";
	is(finish_within($h), 0, 'and ends as it would have');
	like($o, qr/^got on$/m, 'its work done');
}

# --- 9. a cut in the reply to the final release --------------------------------
# The release was applied; its repeat after the reconnect finds the grant
# gone.  The command was never stopped: its own status, and a word on stderr.
{
	my ($ppid, $pport) = start_proxy($port);
	my ($rc, $out, $err) = lockq_within(60, 'run', '-d', "host=127.0.0.1 port=$pport dbname=postgres",
		'K9', '--', 'sh', '-c', "kill -WINCH $ppid; sleep .2; exit 3");
	is($rc, 3, 'the final release\'s reply cut: the command\'s status, not 76') or diag($err);
	like($err, qr/the release of "K9" found its grant already ended/, 'what the release found is said');
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'K9'"), '0',
		'the release was applied');
	stop_proxy($ppid);
}

# --- 10. --foreground: the command's children are stopped with it ------------------
for my $fault (qw(lost kill9))
{
	my ($o, $e) = ('', '');
	my $h = start_lockq_within(30, \$o, \$e, 'run', '-d', $conn, '--foreground', '--grace', '500ms',
		"K10$fault", '--', 'sh', '-c',
		"echo pid \$\$; (exec sh -c 'echo \$\$ > $dir/sub10$fault.pid; while :; do sleep .1; done') >/dev/null & wait");
	$h->pump until $o =~ /pid (\d+)/;
	my $cmd = $1;
	my $sub = pid_in("$dir/sub10$fault.pid");
	if ($fault eq 'lost')
	{
		scalar_query($node, "SELECT lockq_force_release('K10$fault')");
		is(finish_within($h), 76, '--foreground, lease lost: 76');
		ok(wait_gone(20, $cmd, $sub), '--foreground, lease lost: the command and its child are gone')
		  or kill('KILL', $cmd, $sub);
	}
	else
	{
		kill 'KILL', $h->{KIDS}[0]{PID};
		finish_within($h);
		ok(wait_gone(20, $cmd, $sub), '--foreground, kill -9 of lockq: the command and its child are gone')
		  or kill('KILL', $cmd, $sub);
		scalar_query($node, "SELECT lockq_force_release('K10$fault')");
	}
}

# ... and on a terminal, the command reads it, and Ctrl-Z there stops the job
SKIP:
{
	skip 'IO::Pty is not installed', 5 unless eval { require IO::Pty; 1 };
	my $pty = IO::Pty->new;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		$pty->make_slave_controlling_terminal;
		my $slave = $pty->slave;
		close $pty;
		open(STDIN, '<&', $slave) or die;
		open(STDOUT, '>&', $slave) or die;
		open(STDERR, '>&', $slave) or die;
		exec($lockq, 'run', '-d', $conn, '--foreground', 'K10tty', '--', 'sh', '-c',
			'echo "pid $$"; read x; echo "got-$x"; read y; echo "got-$y"')
		  or POSIX::_exit(127);
	}
	$pty->close_slave;
	my $seen = '';
	my $expect = sub {
		my ($re) = @_;
		my $end = time() + $timeout;
		while ($seen !~ $re && time() < $end)
		{
			my $rin = '';
			vec($rin, fileno($pty), 1) = 1;
			next unless select(my $rout = $rin, undef, undef, 0.1);
			my $n = sysread($pty, my $buf, 4096);
			last unless $n;
			$seen .= $buf;
		}
		return $seen =~ $re;
	};
	ok($expect->(qr/pid (\d+)/), 'on a terminal, the command starts');
	my ($cmd) = $seen =~ /pid (\d+)/;
	syswrite($pty, "hello\n");
	ok($expect->(qr/got-hello/), 'and reads the terminal');
	syswrite($pty, "\x1a");		# ^Z
	ok(wait_state($cmd, 'T', 10) && wait_state($pid, 'T', 10),
		'^Z on the terminal stops the command, then lockq (the job)');
	kill 'CONT', $pid;			# fg
	syswrite($pty, "bye\n");
	ok($expect->(qr/got-bye/), 'continued, the command has the terminal again');
	waitpid($pid, 0);
	is($? >> 8, 0, 'and lockq ends with its status');
}

# --- 11. a password in -d is not shown to other users ---------------------------
{
	my ($o, $e) = ('', '');
	my $h = start_lockq_within(30, \$o, \$e, 'run', '-d', "$conn password=s3cr3t-pw", 'K11', '--',
		'sh', '-c', 'echo running; exec sleep 30');
	$h->pump until $o =~ /running/;
	my $lockq_pid = $h->{KIDS}[0]{PID};
	my @pids = ($lockq_pid);
	for my $stat (glob('/proc/[0-9]*/stat'))
	{
		my $l = eval { slurp_file($stat) } // next;
		push @pids, $1 if $l =~ /^(\d+) \(.*\) \S (\d+)/s && $2 == $lockq_pid;
	}
	my $cmdlines = join("\n", map { my $c = eval { slurp_file("/proc/$_/cmdline") } // ''; $c =~ tr/\0/ /; $c } @pids);
	cmp_ok(scalar(@pids), '>=', 3, 'lockq, its guardian and the command run');
	unlike($cmdlines, qr/s3cr3t/, 'the password is in none of their command lines');
	like($cmdlines, qr/lockq run -d x+ K11/, 'lockq\'s shows where it was hidden');
	$h->signal('TERM');
	finish_within($h);
}

# --- 12. --timeout when the server stops answering ---------------------------------
# lockq's backend is stopped while it waits: lockq gives up at the timeout,
# and exits within the documented slack (1 s to withdraw the wait, 2 s to
# close the connection), with 75.
{
	scalar_query($node, "SELECT lockq_try('K12', 'someone', '1 hour')");
	my ($o, $e) = ('', '');
	my $t0 = time();
	my $h = start_lockq_within(60, \$o, \$e, 'run', '-d', $conn, '--timeout', '3s', 'K12', '--', 'true');
	ok(wait_for_waiters($node, 'K12', 1), 'lockq waits');
	my $backend = scalar_query($node,
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
		   AND pid <> pg_backend_pid() AND query ~ 'lockq_(enqueue|await|heartbeat)'});
	kill 'STOP', $backend;
	my $rc = finish_within($h);
	my $took = time() - $t0;
	kill 'CONT', $backend;
	is($rc, 75, '--timeout 3s, its backend stopped: 75');
	cmp_ok($took, '<', 3 + 3 + 0.5, 'within the timeout and its slack of 3 s');
	note sprintf('--timeout 3s with a stopped backend: exited after %.2f s', $took);
	ok($node->poll_query_until('postgres', 'SELECT waiters = 0 FROM lockq_stats'),
		'the wait it could not withdraw is dropped by the server (missed heartbeats)');
	scalar_query($node, "SELECT lockq_release('K12', 'someone')");
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $backend});
}

is(scalar_query($node, "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

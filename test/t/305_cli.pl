# The lockq command-line tool: lockq run never lets two commands overlap,
# passes the exit status and the lock's environment on, keeps the lease
# alive, stops the command when the lease is lost, leaves nothing queued
# when interrupted; lockq status and lockq release; the exit codes.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;

my $lockq = "$ENV{TESTDIR}/client/lockq";
require_tool(-x $lockq, "$lockq not built");

my $node = lockq_node('cli');
my $conn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir();

# lockq(args...) runs the tool and returns (exit status, stdout, stderr).
sub lockq
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $lockq, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

sub start_lockq
{
	my ($outref, $errref, @args) = @_;
	return IPC::Run::start([ $lockq, @args ], '>', $outref, '2>', $errref,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
}

# --- usage and help ------------------------------------------------------
my ($rc, $out, $err) = lockq('--help');
is($rc, 0, '--help exits 0');
like($out, qr/Exit status:.*76.*lease was lost/s, '--help documents the exit codes');
($rc, $out, $err) = lockq('run', '-d', $conn, 'L');
is($rc, 64, 'run without a command: usage error (64)');
($rc, $out, $err) = lockq('run', '-d', $conn, '--ttl', '10parsecs', 'L', '--', 'true');
is($rc, 64, 'bad duration: usage error');
like($err, qr/invalid duration for --ttl/, 'with a message');
($rc, $out, $err) = lockq('run', '-d', $conn, '--timeout', '1s', '--no-wait', 'L', '--', 'true');
is($rc, 64, '--timeout with --no-wait: usage error');
($rc, $out, $err) = lockq('frobnicate');
is($rc, 64, 'unknown command: usage error');
($rc, $out, $err) = lockq('run', '-d', 'host=/nonexistent/dir', 'L', '--', 'true');
is($rc, 69, 'no server: connection error (69)');

# --- environment and exit status -------------------------------------------
($rc, $out, $err) = lockq('run', '-d', $conn, 'env-lock', '--',
	'sh', '-c', 'echo "$LOCKQ_LOCK|$LOCKQ_TOKEN|$LOCKQ_OWNER"; exit 3');
is($rc, 3, "the command's exit status is passed on");
like($out, qr/^env-lock\|\d+\|[^|]+:\d+:\d+:[0-9a-f]{16}$/m,
	'LOCKQ_LOCK, LOCKQ_TOKEN and LOCKQ_OWNER are set');
is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'env-lock'"),
	'0', 'released after the command exits');
($rc, $out, $err) = lockq('run', '-d', $conn, '--owner', 'ci-job-7', 'L', '--',
	'sh', '-c', 'echo "$LOCKQ_OWNER"; kill -TERM $$');
is($rc, 128 + 15, 'a command killed by a signal gives 128 + the signal');
like($out, qr/^ci-job-7$/m, '--owner sets the owner');

# --- two lockq run processes never overlap ----------------------------------
my $log = "$dir/overlap.log";
my @procs;
for my $i (1 .. 4)
{
	my ($o, $e) = ('', '');
	push @procs, [ start_lockq(\$o, \$e, 'run', '-d', $conn, 'mutex', '--',
		'sh', '-c', "echo start $i \$(date +%s%N) >> $log; sleep 0.3; echo end $i \$(date +%s%N) >> $log") ];
}
$_->[0]->finish for @procs;
is(scalar(grep { ($_->[0]->results)[0] == 0 } @procs), 4, 'four lockq run processes all succeeded');
my @events = map { [ split / / ] } split /\n/, slurp_file($log);
is(scalar(@events), 8, 'each command ran once');
my ($inside, $overlap, $prev_end) = (0, 0, 0);
for my $ev (sort { $a->[2] <=> $b->[2] } @events)
{
	if ($ev->[0] eq 'start')
	{
		$overlap++ if $inside;
		$inside = 1;
	}
	else
	{
		$inside = 0;
	}
}
is($overlap, 0, 'no two commands ever ran at the same time (timestamps from the commands)');

# --- a long command keeps its lease -------------------------------------------
my $t0 = time();
($rc, $out, $err) = lockq('run', '-d', $conn, '--ttl', '1s', 'long', '--', 'sleep', '3');
is($rc, 0, 'a 3 s command under a 1 s lease finishes normally (the lease is renewed)');
cmp_ok(time() - $t0, '>=', 3, 'it really ran for 3 s');

# --- not acquired: --no-wait and --timeout --------------------------------------
scalar_query($node, "SELECT lockq_try('busy', 'someone', '1 hour')");
($rc, $out, $err) = lockq('run', '-d', $conn, '--no-wait', 'busy', '--', 'true');
is($rc, 75, '--no-wait on a held lock: 75');
like($err, qr/not acquired/, 'with a message');
($rc, $out, $err) = lockq('run', '-d', $conn, '--timeout', '300ms', 'busy', '--', 'true');
is($rc, 75, '--timeout on a held lock: 75');
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'busy'"), '0',
	'nothing left in the queue');

# --- Ctrl-C while waiting ---------------------------------------------------
{
	my ($o, $e) = ('', '');
	my $h = start_lockq(\$o, \$e, 'run', '-d', $conn, 'busy', '--', 'echo', 'should-not-run');
	ok(wait_for_waiters($node, 'busy', 1), 'lockq run waits in the queue');
	$h->signal('INT');
	$h->finish;
	is(($h->results)[0], 130, 'Ctrl-C while waiting: 130');
	unlike($o, qr/should-not-run/, 'the command did not run');
	is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE lock_id = 'busy'"), '0',
		'and nothing is left in the queue');
}

# --- status and release -------------------------------------------------------
{
	my @w;
	for my $n (1 .. 2)
	{
		my ($o, $e) = ('', '');
		push @w, [ start_lockq(\$o, \$e, 'run', '-d', $conn, '--owner', "waiter-$n", 'busy', '--', 'true') ];
		ok(wait_for_waiters($node, 'busy', $n), "waiter-$n queued");
	}
	($rc, $out, $err) = lockq('status', '-d', $conn, 'busy');
	is($rc, 0, 'status exits 0');
	like($out, qr/^busy: held by someone, token \d+, lease ends in [\d.]+s\n  1\. waiter-1 \(client, waiting [\d.]+s\)\n  2\. waiter-2 \(client, waiting [\d.]+s\)\n$/,
		'status shows the holder and the ordered queue');
	($rc, $out, $err) = lockq('status', '-d', $conn, '--json');
	my $st = decode_json($out);
	my ($busy) = grep { $_->{lock_id} eq 'busy' } @$st;
	is($busy->{holder}{owner}, 'someone', 'status --json: holder');
	is(join(',', map { "$_->{position}:$_->{owner}" } @{ $busy->{waiters} }),
		'1:waiter-1,2:waiter-2', 'status --json: the queue in order');

	($rc, $out, $err) = lockq('release', '-d', $conn, 'busy', '--owner', 'someone', '--token', '999999');
	is($rc, 1, 'release with the wrong token: 1');
	($rc, $out, $err) = lockq('release', '-d', $conn, 'busy', '--owner', 'nobody');
	is($rc, 1, 'release by a non-owner: 1');
	($rc, $out, $err) = lockq('release', '-d', $conn, 'busy', '--owner', 'someone');
	is($rc, 0, 'release by the owner: 0');
	$_->[0]->finish for @w;
	is(join(',', map { ($_->[0]->results)[0] } @w), '0,0', 'both queued commands then ran');
	($rc, $out, $err) = lockq('release', '-d', $conn, 'busy');
	is($rc, 64, 'release without --owner: usage error');
	($rc, $out, $err) = lockq('status', '-d', $conn, 'busy');
	is($out, "busy: free\n", 'status of a free lock says so');

	# another role's lock id and owner with terminal control sequences (a
	# title change, a line erase, a C1 CSI): shown escaped, never raw
	my $evil_id = "x\e]0;pwned\a\r" . "fake: free";
	my $evil_owner = "o\e[2K\xc2\x9b31m";
	my $tok = $node->safe_psql('postgres',
		"SELECT lockq_try(\$\$$evil_id\$\$, \$\$$evil_owner\$\$, '1 minute')");
	($rc, $out, $err) = lockq('status', '-d', $conn);
	unlike($out, qr/[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]/, 'status prints no control character');
	like($out, qr/^x\\x1b\]0;pwned\\x07\\x0dfake: free: held by o\\x1b\[2K\\xc2\\x9b31m, token $tok/m,
		'it shows them escaped');
	$node->safe_psql('postgres', "SELECT lockq_force_release(\$\$$evil_id\$\$)");
}

# --- the lease is lost: the command is stopped -----------------------------
for my $case ('terminates', 'ignores SIGTERM')
{
	my $trap = $case eq 'terminates' ? 'trap "echo got-term; exit 0" TERM' : 'trap "" TERM';
	my ($o, $e) = ('', '');
	my $h = start_lockq(\$o, \$e, 'run', '-d', $conn, '--grace', '500ms', 'doomed', '--',
		'sh', '-c', "$trap; echo running; while true; do sleep 0.1; done");
	$h->pump until $o =~ /running/;
	scalar_query($node, "SELECT lockq_force_release('doomed')");
	$h->finish;
	is(($h->results)[0], 76, "lease lost, command $case: 76");
	like($e, qr/lease on "doomed" lost; stopping the command/, "$case: lockq says why");
	if ($case eq 'terminates')
	{
		like($o, qr/got-term/, 'the command got SIGTERM');
	}
	else
	{
		unlike($o, qr/got-term/, 'the command ignored SIGTERM and was killed after the grace period');
	}
}

is(scalar_query($node, "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

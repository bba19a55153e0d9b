# The system clock is set back (and forward) under a running server and
# across restarts and a crash, with libfaketime.  lockq_now() and tokens
# keep increasing, and leases neither end early nor hang.  The clock starts
# at the wall clock (or above its last ceiling) the first time in a boot of
# the machine; after that it runs on with real time across restarts and
# crashes, whatever the wall clock does (CLOCK_BOOTTIME plus an offset kept
# in the state file), so a lease keeps exactly the time it had left.
#
# CLOCK_MONOTONIC and CLOCK_BOOTTIME are left real
# (FAKETIME_DONT_FAKE_MONOTONIC): setting the system clock does not move
# them on a real machine either.  A small shim
# (test/faketime_select.c) is preloaded before libfaketime so that the lock
# server, which the postmaster forks from a signal handler, sees the faked
# clock too; the test checks that it does.
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

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
require_tool(-e $libfaketime, "libfaketime not installed");

my $shim = "$PostgreSQL::Test::Utils::tmp_check/faketime_select.so";
system('cc', '-shared', '-fPIC', '-O2', '-o', $shim, 'test/faketime_select.c') == 0
  or BAIL_OUT('could not build test/faketime_select.c');

my $rc = "$PostgreSQL::Test::Utils::tmp_check/faketime_110.rc";
sub set_clock
{
	my ($offset) = @_;
	open(my $fh, '>', $rc) or die "could not write $rc: $!";
	print $fh "$offset\n";
	close $fh;
}
set_clock('+0');
$ENV{LD_PRELOAD} = "$shim $libfaketime";
$ENV{FAKETIME_TIMESTAMP_FILE} = $rc;
$ENV{FAKETIME_NO_CACHE} = '1';
$ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';

my $node = lockq_node('clock');

# server wall clock minus the real one, in seconds
sub wall_offset
{
	my $server = scalar_query($node, 'SELECT extract(epoch FROM clock_timestamp())');
	return $server - time();
}
sub now_us { return scalar_query($node, 'SELECT lockq_now()'); }
sub clock_lead
{
	# lockq_now() minus the server's wall clock, in seconds
	return scalar_query($node,
		'SELECT (lockq_now() - extract(epoch FROM clock_timestamp()) * 1000000) / 1000000');
}
sub remaining
{
	my ($lock) = @_;
	return scalar_query($node,
		"SELECT ((extract(epoch FROM expires) * 1000000)::bigint - lockq_now()) / 1000000.0 FROM lockq_locks WHERE lock_id = '$lock'"
	);
}

cmp_ok(abs(wall_offset()), '<', 5, 'faketime loaded, clock not moved yet');

# The lock server must see the same faked clock as the backends: move the
# clock ahead and restart; the clock starts at the (faked) wall clock.
set_clock('+600');
$node->restart;
$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
cmp_ok(abs(scalar_query($node, 'SELECT lockq_now() / 1000000') - time() - 600), '<', 30,
	'the lock server sees the faked clock (lockq_now() started 10 minutes ahead)');
set_clock('+600');
cmp_ok(abs(clock_lead()), '<', 5, 'lockq_now() tracks the wall clock');

my $durable = scalar_query($node, "SELECT lockq_try('durable', 'svc', '1 hour')");
my $max_token = $durable;
my $last_now = now_us();

# --- set back under the running server ------------------------------------
my $short = scalar_query($node, "SELECT lockq_try('short', 'h', '3 seconds')");
$max_token = $short;
my $w = start_waiter($node, 'short-waiter',
	"SELECT 'granted:' || lockq_get('short', 'next', '1 minute');");
ok(wait_for_waiters($node, 'short', 1), 'a waiter queues behind a 3 s lease');
set_clock('-3000');
cmp_ok(wall_offset(), '<', -2900, 'the server wall clock went back an hour and more');
my $n = now_us();
ok($n > $last_now, 'lockq_now() did not go back');
cmp_ok($n - $last_now, '<', 60_000_000, 'and did not jump either');
$last_now = $n;
is(scalar_query($node, "SELECT lockq_holds('short', $short)"), 't',
	'the 3 s lease did not end early');
like(waiter_result($w, qr/(granted:\d+)/), qr/granted/,
	'the lease ended on time and passed on (it did not last an hour longer)');
my $lag_ms = scalar_query($node,
	"SELECT round(extract(epoch FROM now() - acquired) * 1000) FROM lockq_locks WHERE lock_id = 'short'");
$w->quit;
my $t = scalar_query($node, "SELECT lockq_try('t1', 'o')");
ok($t > $max_token, 'tokens keep increasing after the clock went back');
$max_token = $t;

# --- restart with the clock an hour behind ----------------------------------
my $rem = remaining('durable');
$last_now = now_us();
$node->restart;
$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
cmp_ok(wall_offset(), '<', -2900, 'restarted with the wall clock an hour behind');
ok(now_us() > $last_now, 'lockq_now() continues above its last value');
cmp_ok(clock_lead(), '>', 3500, 'so it runs ahead of the wall clock now');
# a lease short enough to be returned before its flush (lockq.max_grace):
# its lock becomes unsettled, so the crash below leaves that lock delayed
$t = scalar_query($node, "SELECT lockq_try('t2', 'o', '5 seconds')");
ok($t > $max_token, 'tokens keep increasing');
$max_token = $t;
my $t2 = $t;
is(scalar_query($node, "SELECT lockq_holds('durable', $durable)"), 't',
	'the durable grant is still current');
cmp_ok(remaining('durable'), '>', $rem - 10, 'and its lease did not shrink');

# --- crash and restart with the clock two hours behind --------------------
set_clock('-7200');
$last_now = now_us();
crash_restart($node);
$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
cmp_ok(wall_offset(), '<', -7100, 'after a crash, the wall clock is two hours behind');
ok(now_us() > $last_now, 'lockq_now() still continues above its last value');
my $grace_left = scalar_query($node,
	'SELECT extract(epoch FROM grace_until) - lockq_now() / 1000000.0 FROM lockq_stats');
note "delay left after the crash: ${grace_left}s";
cmp_ok($grace_left, '>', 0, 'the crash left the lock of the 5 s lease delayed');
cmp_ok($grace_left, '<', 5 + 2 + 5 + 1,
	'bounded by the lease, its slack and the clock reserve, whatever the wall clock did');
is(scalar_query($node, "SELECT lockq_holds('t2', $t2)"), 't',
	'the 5 s lease granted before the crash is still current');
is(scalar_query($node, "SELECT lockq_try('t2', 'other') IS NULL"), 't',
	'nothing is granted on the lock of the 5 s lease during its delay');
$t = scalar_query($node, "SELECT lockq_try('t3a', 'o')");
ok($t > $max_token, 'but any other lock is granted at once');
$max_token = $t;
ok($node->poll_query_until('postgres', 'SELECT grace_until IS NULL FROM lockq_stats'),
	'the delay ends');
is(scalar_query($node, "SELECT lockq_holds('t2', $t2)"), 'f',
	'and with it the 5 s lease');
$t = scalar_query($node, "SELECT lockq_try('t3', 'o')");
ok($t > $max_token, 'tokens keep increasing after the crash');
$max_token = $t;
is(scalar_query($node, "SELECT lockq_holds('durable', $durable)"), 't',
	'the durable grant survived the crash');

# --- restart with the clock an hour ahead -----------------------------------
set_clock('+3600');
$rem = remaining('durable');
$last_now = now_us();
$node->restart;
$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
cmp_ok(wall_offset(), '>', 3500, 'restarted with the wall clock an hour ahead');
cmp_ok(abs(now_us() - $last_now) / 1e6, '<', 30,
	'lockq_now() runs on with real time: it did not jump with the wall clock');
is(scalar_query($node, "SELECT lockq_holds('durable', $durable)"), 't',
	'the forward jump did not end the lease');
cmp_ok(remaining('durable'), '>', $rem - 10, 'the lease keeps the time it had left');
$t = scalar_query($node, "SELECT lockq_try('t4', 'o')");
ok($t > $max_token, 'tokens keep increasing');

# --- and back to the real time: lockq_now never goes back ------------------
set_clock('+0');
$last_now = now_us();
$node->restart;
$node->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats');
ok(now_us() > $last_now, 'back on the real clock, lockq_now() still continues above its last value');

$node->stop;
done_testing();

# A failover to a synchronous streaming standby: the standby serves no
# locks while it is one; once promoted, its lock server starts with every
# durable grant (explicit owner) the old primary had returned, same tokens,
# current for lockq_holds; session-bound grants are gone with their
# sessions; every token it issues is above every token the old primary
# issued (released ones included), and lockq_now() continues above every
# value the old primary read, from the replicated ceiling, not from its own
# wall clock (the old primary ran 10 minutes ahead, under libfaketime); a
# lease of at most lockq.max_grace that was returned before its flush may
# be lost, so its lock (only it) is delayed until that lease has ended,
# while fencing, releases and queueing go on; the time the old primary was
# down is not known to the new one, so a held lock also waits as long as
# its holder may count on its lease, unless the holder releases or renews
# it, and every other lock is available at once.  A liblockq client with a
# multi-host conninfo keeps a 20 s lease through the failover (renewed
# against the new primary, same token) and reports a 3 s lease that ran
# out meanwhile through its callback (client/test/lockqc_test.c,
# failover_hold).
#
# Then what a synchronous standby is for: an asynchronous standby that was
# behind is promoted too.  A grant it had not received is lost (another
# owner gets the lock); tokens are not issued again, as they follow the
# clock, which the promoted standby does not take back.
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
use LockqTest;

my $prog = "$ENV{TESTDIR}/client/test/lockqc_test";
require_tool(-x $prog, "$prog not built");

# The old primary's wall clock runs 10 minutes ahead (libfaketime, as in
# 110_clock_jumps; CLOCK_MONOTONIC stays real), so that the new primary's clock
# can only continue above the old one from the replicated ceiling.
my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
my $faked = -e $libfaketime;
my %fake_env;
if ($faked)
{
	my $shim = "$PostgreSQL::Test::Utils::tmp_check/faketime_select_117.so";
	system('cc', '-shared', '-fPIC', '-O2', '-o', $shim, 'test/faketime_select.c') == 0
	  or BAIL_OUT('could not build test/faketime_select.c');
	%fake_env = (
		LD_PRELOAD => "$shim $libfaketime",
		FAKETIME => '+600',
		FAKETIME_DONT_FAKE_MONOTONIC => '1');
}
else
{
	note 'libfaketime not installed: the old primary runs on the real clock';
}

# lockq.max_grace = 8: the library's 20 s lease and the 1 hour grants are
# flushed (to the synchronous standby) before they are returned; leases of
# at most 8 s need not be, and their locks are delayed after the failover.
my $primary;
{
	local @ENV{ keys %fake_env } = values %fake_env;
	$primary = lockq_node('primary',
		init => { allows_streaming => 1 },
		conf => "lockq.max_grace = 8\n");
}
if ($faked)
{
	cmp_ok(scalar_query($primary, 'SELECT extract(epoch FROM clock_timestamp())') - time(),
		'>', 500, "the old primary's clock runs 10 minutes ahead");
	cmp_ok(scalar_query($primary, 'SELECT lockq_now() / 1000000') - time(),
		'>', 500, 'so does lockq_now(): the lock server sees the faked clock');
}
$primary->backup('b');

my %standby;
for my $name ('standby1', 'standby2')
{
	my $s = PostgreSQL::Test::Cluster->new($name);
	$s->init_from_backup($primary, 'b', has_streaming => 1);
	$s->append_conf('postgresql.conf',
		"primary_conninfo = '" . $primary->connstr . " application_name=$name'\n");
	$s->start;
	$standby{$name} = $s;
}
my ($standby, $async) = @standby{ 'standby1', 'standby2' };

$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'standby1'\n");
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT string_agg(application_name || '=' || sync_state, ',' ORDER BY application_name) FROM pg_stat_replication",
		'standby1=sync,standby2=async'),
	'standby1 is a synchronous standby, standby2 an asynchronous one');

# --- grants on the primary ---------------------------------------------------
my %tok;
$tok{A} = scalar_query($primary, "SELECT lockq_get('A', 'svc-a', '1 hour')");
$tok{B} = scalar_query($primary, "SELECT lockq_try('B', 'svc-b', '1 hour')");
$tok{C} = scalar_query($primary, "SELECT lockq_try('C', 'svc-c', '10 minutes')");
$tok{R} = scalar_query($primary, "SELECT lockq_try('R', 'svc-r', '1 hour')");
is(scalar_query($primary, "SELECT lockq_release('R', 'svc-r', $tok{R})"), 't',
	'a grant is taken and released');
my $sess = $primary->background_psql('postgres');
$tok{S} = $sess->query_safe("SELECT lockq_try('S')");
ok($tok{S} > 0, 'a session-bound lock is held');
is( scalar_query($primary,
		"SELECT lockq_enqueue('A', 'waiting-client', '1 hour', NULL, '1 hour') IS NULL"),
	't', 'a client-side waiter queues for A');
$tok{D} = scalar_query($primary, "SELECT lockq_try('D', 'svc-d', '1 hour')");
ok($tok{D} > $tok{S}, 'tokens increase');

# --- the standbys serve no locks ----------------------------------------------
$primary->wait_for_catchup($_) for ($standby, $async);
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'0', 'no lock server runs on the standby');
for my $call ("lockq_try('X', 'o')", "lockq_get('X', 'o')", 'lockq_now()')
{
	my ($ret, $out, $err) = $standby->psql('postgres', "SELECT $call");
	like($err, qr/ERROR:  lockq is not available during recovery/, "$call fails on the standby");
}
my $durable_list = sub {
	my ($node, @locks) = @_;
	my $in = join(',', map { "'$_'" } @locks);
	return $node->safe_psql('postgres',
		"SELECT string_agg(lock_id || '=' || owner || ':' || token, ' ' ORDER BY lock_id) FROM lockq_locks WHERE lock_id IN ($in)"
	);
};
is( $durable_list->($standby, qw(A B C D R S)),
	"A=svc-a:$tok{A} B=svc-b:$tok{B} C=svc-c:$tok{C} D=svc-d:$tok{D}",
	'the standby shows the durable grants (not the released one, not the session-bound one)');

# The asynchronous standby falls behind here: it stops receiving WAL.
my $async_clock = scalar_query($async, 'SELECT last_value FROM lockq.clock_seq');
my $async_ceiling = scalar_query($async, 'SELECT last_value FROM lockq.token_seq');
$async->stop;

# --- more tokens: past the durable token ceiling ------------------------------
my $ceiling_before = scalar_query($primary, 'SELECT last_value FROM lockq.token_seq');
create_churn($primary);
ok($primary->poll_query_until('postgres', "SELECT churn(200) > $ceiling_before"),
	"tokens went past the durable ceiling there was ($ceiling_before): it was raised");
$tok{churn} = scalar_query($primary, 'SELECT churn(1)');
$tok{late} = scalar_query($primary, "SELECT lockq_try('late', 'svc-late', '1 hour')");

# --- a library client holds two leases -----------------------------------------
my $multi = sprintf(
	'host=%s,%s port=%d,%d dbname=postgres target_session_attrs=read-write',
	$primary->host, $standby->host, $primary->port, $standby->port);
my ($in, $out, $err) = ('', '', '');
my $client = IPC::Run::start([ $prog, 'failover_hold', $multi ],
	'<', \$in, '>', \$out, '2>', \$err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
$client->pump until $out =~ /READY (\d+) (\d+)/ || !$client->pumpable;
($tok{FH}, $tok{FL}) = ($out =~ /READY (\d+) (\d+)/) or BAIL_OUT("failover_hold: $out $err");

# The clock must get ahead of the ceiling the asynchronous standby has.
$primary->poll_query_until('postgres',
	"SELECT lockq_now() > greatest($async_clock, $async_ceiling) + 2000000")
  or die 'the clock does not move';

# A short lease right before the end: its lock becomes unsettled.
$tok{short} = scalar_query($primary, "SELECT lockq_try('short', 'svc-short', '8 seconds')");
my $max_old = 0;
for (values %tok) { $max_old = $_ if $_ > $max_old; }
my $last_now = scalar_query($primary, 'SELECT lockq_now()');

# --- the primary fails -----------------------------------------------------------
$primary->stop('immediate');
end_session($sess);

# FL's lease (3 s) runs out before the standby is promoted.
$client->pump until $out =~ /LOST FL/ || !$client->pumpable;
like($out, qr/LOST FL/, 'the client reports its 3 s lease lost while there is no primary');

ok( $standby->poll_query_until('postgres',
		'SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()'),
	'the standby replayed everything it received');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'0', 'without its primary, the standby still runs no lock server');
cmp_ok(scalar_query($standby, 'SELECT last_value FROM lockq.token_seq'), '>=', $max_old,
	"the standby's durable token ceiling covers every token the old primary issued ($max_old)");
cmp_ok(scalar_query($standby, 'SELECT last_value FROM lockq.clock_seq'), '>=', $last_now,
	"and its clock ceiling every lockq_now() it read");

# --- promotion -------------------------------------------------------------------
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats'),
	'the lock server starts on the promoted standby');

# Right away, inside the delay of the short lease's lock.
my $short_delay = scalar_query($standby,
	q{SELECT (extract(epoch FROM now()) * 1000000)::bigint});
my $now = scalar_query($standby, 'SELECT lockq_now()');
my $delays = scalar_query($standby,
	q{SELECT string_agg(lock_id, ',' ORDER BY lock_id) FROM lockq.unsettled WHERE delay_until > 0});
is($delays, 'FL,short',
	'only the locks of the 8 s and the 3 s leases are delayed for leases that may be lost');
my $delay_until = scalar_query($standby,
	q{SELECT delay_until FROM lockq.unsettled WHERE lock_id = 'short'});
my $delay_left = ($delay_until - $now) / 1e6;
note "delay of the short lease's lock left: ${delay_left}s";
cmp_ok($delay_left, '>', 2, 'it covers the 8 s lease returned right before the failover');
cmp_ok($delay_left, '<=', 8 + 2 + 5 + 0.5,
	'and is no longer than lockq.max_grace + 2 s + the 5 s clock reserve');
like(slurp_file($standby->logfile), qr/the time the server was down is not known/,
	'the new primary logs that it cannot know how long the old one was down');
# (FH's holder, the library client, may have renewed it already, which
# lifts its lock's wait; FL's 3 s lease may still have been running when
# the old primary stopped, and then its lock waits too, briefly)
like(scalar_query($standby,
		q{SELECT string_agg(lock_id, ',' ORDER BY lock_id) FROM lockq.unsettled WHERE hold_until > 0}),
	qr/^A,B,C,D,(FH,)?(FL,)?late,short$/,
	'every held lock waits as long as its holder may count on it');

ok($now > $last_now, 'lockq_now() on the new primary is above every value read on the old one');
if ($faked)
{
	cmp_ok($now - $last_now, '<', 60_000_000,
		"it continues from the replicated ceiling, not from the new primary's wall clock (10 minutes behind)"
	);
}

is( $durable_list->($standby, qw(A B C D R S late FH)),
	"A=svc-a:$tok{A} B=svc-b:$tok{B} C=svc-c:$tok{C} D=svc-d:$tok{D} FH="
	  . $standby->safe_psql('postgres', "SELECT owner FROM lockq_locks WHERE lock_id = 'FH'")
	  . ":$tok{FH} late=svc-late:$tok{late}",
	'every durable grant is still held, same owners and tokens; the session-bound one is gone');
is( scalar_query($standby,
		"SELECT lockq_holds('A', $tok{A}) AND lockq_holds('late', $tok{late}) AND lockq_holds('FH', $tok{FH})"),
	't', 'lockq_holds is true for them');
is(scalar_query($standby, "SELECT lockq_holds('S', $tok{S})"), 'f',
	'and false for the session-bound grant');
is(scalar_query($standby, "SELECT lockq_holds('R', $tok{R})"), 'f', 'and for the released one');
is(scalar_query($standby, "SELECT lockq_holds('short', $tok{short})"), 't',
	'the 8 s lease survived the failover: it was flushed with its lock made unsettled');
is( $standby->safe_psql('postgres',
		"SELECT string_agg(owner || ':' || kind, ' ' ORDER BY position) FROM lockq_waiters WHERE lock_id = 'A'"
	),
	'waiting-client:client',
	'the client-side waiter kept its place');

my @new;
push @new, scalar_query($standby, "SELECT lockq_try('fresh', 'o')");
like($new[-1], qr/^\d+$/, 'a lock nobody held is granted at once');
push @new, scalar_query($standby, "SELECT lockq_try('S', 'o')");
like($new[-1], qr/^\d+$/, 'so is the lock the session-bound grant had');
is(scalar_query($standby, "SELECT lockq_release('B', 'svc-b', $tok{B})"), 't',
	'a durable grant is released');
push @new, scalar_query($standby, "SELECT lockq_try('B', 'o')");
like($new[-1], qr/^\d+$/, 'and its lock is granted again at once: its holder let go');
is(scalar_query($standby, "SELECT lockq_try('short', 'o') IS NULL"), 't',
	'the lock of the 8 s lease is not granted during its delay');
my $waiter = start_waiter($standby, 'after-delay',
	"SELECT 'granted:' || lockq_get('short', 'after-delay', '1 hour');");
ok(wait_for_waiters($standby, 'short', 1), 'lockq_get queues for it');
cmp_ok(scalar_query($standby, 'SELECT lockq_now()'), '<', $delay_until,
	'all of that happened within its delay');

# --- the library client ---------------------------------------------------------------
$in .= "GO\n";
$client->finish;
relay('failover_hold', $out);
is($? >> 8, 0, 'failover_hold: exit status') or diag($err);

# --- after the delay ------------------------------------------------------------------
my $granted = waiter_result($waiter, qr/granted:(\d+)/);
ok(defined $granted, 'the waiter is granted when the delay ends');
cmp_ok(scalar_query($standby, 'SELECT lockq_now()'), '>=', $delay_until, 'not before it');
push @new, $granted;
push @new, scalar_query($standby, "SELECT lockq_heartbeat('A', 'waiting-client')")
  if scalar_query($standby, "SELECT lockq_release('A', 'svc-a', $tok{A})") eq 't';
is(scalar(grep { defined $_ && $_ =~ /^\d+$/ } @new), 5,
	'lockq_try succeeds on free locks, and A passes to its client-side waiter once released');
my $min_new = (sort { $a <=> $b } @new)[0];
cmp_ok($min_new, '>', $max_old,
	"every token the new primary issues is above every token the old one issued ($max_old)");
$waiter->quit;

# --- an asynchronous standby that was behind --------------------------------------
# standby2 stopped receiving WAL before the old primary's last grants.  It
# is promoted as well, on its own (the old primary is gone): what a
# synchronous standby prevents.
$async->start;
cmp_ok(scalar_query($async, 'SELECT last_value FROM lockq.token_seq'), '<', $max_old,
	'its durable token ceiling is below tokens the old primary issued');
$async->promote;
ok($async->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats'),
	'the lagging asynchronous standby is promoted');
my $async_now = scalar_query($async, 'SELECT lockq_now()');
is($durable_list->($async, 'A', 'late'), "A=svc-a:$tok{A}",
	'it has the grants it had received, but the later grant of "late" is lost');
my $intruder = scalar_query($async, "SELECT lockq_try('late', 'intruder', '1 hour')");
ok($intruder =~ /^\d+$/,
	'another owner gets "late", which the old primary had granted to svc-late for an hour');
ok($intruder =~ /^\d+$/ && $intruder > $max_old,
	"but with token $intruder, above every token the old primary issued (up to $max_old), though its ceiling was behind");
# (lockq_now() does not go back here: both servers run on one machine, and
# the promoted one continues the clock from the state file of the old one,
# which its base backup copied, with the machine's CLOCK_BOOTTIME; on
# another machine it would start from the ceiling it had received.)

$standby->stop;
$async->stop;
done_testing();

# relay(name, output): every "ok - x" / "not ok - x" line becomes a test.
sub relay
{
	my ($name, $text) = @_;
	my $n = 0;
	for my $line (split /\n/, $text)
	{
		next unless $line =~ /^(ok|not ok) - (.*)$/;
		ok($1 eq 'ok', "$name: $2");
		$n++;
	}
	ok($n > 0, "$name: produced results");
	return;
}

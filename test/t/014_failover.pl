# A failover to a synchronous streaming standby: the standby serves no
# locks while it is one; once promoted, its lock server starts with every
# durable grant (explicit owner) the old primary had returned, same tokens,
# current for lockq_holds; session-bound grants are gone with their
# sessions; every token it issues is above every token the old primary
# issued (released ones included), and lockq_now() continues above every
# value the old primary read, from the replicated ceiling, not from its own
# wall clock (the old primary ran 10 minutes ahead, under libfaketime); a
# lease of at most lockq.max_grace that was returned before its flush may
# be lost, so nothing is granted until the grace period ends, while
# fencing, releases and queueing go on.  A liblockq client with a
# multi-host conninfo keeps a 20 s lease through the failover (renewed
# against the new primary, same token) and reports a 3 s lease that ran
# out meanwhile through its callback (client/test/lockqc_test.c,
# failover_hold).
#
# Then what a synchronous standby is for: an asynchronous standby that was
# behind is promoted too.  A grant it had not received is lost (another
# owner gets the lock), a token the old primary issued is issued again, and
# lockq_now() goes back (the old primary's clock was ahead of the standby's).
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
# 006_clock; CLOCK_MONOTONIC stays real), so that the new primary's clock
# can only continue above the old one from the replicated ceiling.
my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
my $faked = -e $libfaketime;
my %fake_env;
if ($faked)
{
	my $shim = "$PostgreSQL::Test::Utils::tmp_check/faketime_select_014.so";
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
# at most 8 s are not, and make a grace period after the failover.
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
$async->stop;

# --- more tokens: past the durable token ceiling ------------------------------
my $ceiling_before = scalar_query($primary, 'SELECT last_value FROM lockq.token_seq');
$primary->safe_psql(
	'postgres', q{
CREATE FUNCTION churn(n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
	top bigint := 0;
BEGIN
	FOR i IN 1 .. n LOOP
		t := lockq_try('churn');
		IF t IS NULL OR NOT lockq_release('churn', NULL, t) THEN
			RAISE EXCEPTION 'churn: round % failed', i;
		END IF;
		top := greatest(top, t);
	END LOOP;
	RETURN top;
END $$;
});
$tok{churn} = scalar_query($primary, 'SELECT churn(4200)');
cmp_ok($tok{churn}, '>', $ceiling_before,
	"tokens went past the durable ceiling there was ($ceiling_before): it was raised");
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
$primary->poll_query_until('postgres', "SELECT lockq_now() > $async_clock + 2000000")
  or die 'the clock does not move';

# A short lease right before the end: returned before its flush (unless
# it raised the lease horizon).
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

# Right away, inside the grace period.
my $grace_until = scalar_query($standby,
	'SELECT (extract(epoch FROM grace_until) * 1000000)::bigint FROM lockq_stats');
my $now = scalar_query($standby, 'SELECT lockq_now()');
ok($grace_until ne '', 'a grace period: leases up to lockq.max_grace were out unflushed');
my $grace_left = ($grace_until - $now) / 1e6;
note "grace period left: ${grace_left}s";
cmp_ok($grace_left, '>', 2, 'it covers the 8 s lease returned right before the failover');
cmp_ok($grace_left, '<=', 8 + 2 + 5 + 0.5,
	'and is no longer than lockq.max_grace + 2 s + the 5 s clock reserve');
like(slurp_file($standby->logfile), qr/lockq grants nothing for [0-9.]+ s after a crash or a promotion/,
	'the grace period is logged');

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
	't', 'lockq_holds is true for them during the grace period');
is(scalar_query($standby, "SELECT lockq_holds('S', $tok{S})"), 'f',
	'and false for the session-bound grant');
is(scalar_query($standby, "SELECT lockq_holds('R', $tok{R})"), 'f', 'and for the released one');
my $short = scalar_query($standby,
	"SELECT token || ' ' || (extract(epoch FROM expires) * 1000000)::bigint FROM lockq_locks WHERE lock_id = 'short'"
);
if ($short ne '')
{
	my ($t, $expires) = split / /, $short;
	is($t, $tok{short}, 'the 8 s lease survived the failover, same token');
	cmp_ok($expires, '>=', $grace_until, 'and ends no earlier than the grace period');
}
else
{
	note 'the 8 s lease returned before its flush did not survive the failover';
}
is( $standby->safe_psql('postgres',
		"SELECT string_agg(owner || ':' || kind, ' ' ORDER BY position) FROM lockq_waiters WHERE lock_id = 'A'"
	),
	'waiting-client:client',
	'the client-side waiter kept its place');

is(scalar_query($standby, "SELECT lockq_try('fresh', 'o') IS NULL"), 't',
	'lockq_try of a lock nobody held gets nothing during the grace period');
is(scalar_query($standby, "SELECT lockq_try('S', 'o') IS NULL"), 't',
	'nor does the lock the session-bound grant had');
is(scalar_query($standby, "SELECT lockq_release('B', 'svc-b', $tok{B})"), 't',
	'a durable grant is released during the grace period');
is(scalar_query($standby, "SELECT lockq_try('B', 'o') IS NULL"), 't',
	'and its lock is not granted again during it');
my $waiter = start_waiter($standby, 'after-grace',
	"SELECT 'granted:' || lockq_get('S', 'after-grace', '1 hour');");
ok(wait_for_waiters($standby, 'S', 1), 'lockq_get queues during the grace period');
cmp_ok(scalar_query($standby, 'SELECT lockq_now()'), '<', $grace_until,
	'all of that happened within the grace period');

# --- the library client ---------------------------------------------------------------
$in .= "GO\n";
$client->finish;
relay('failover_hold', $out);
is($? >> 8, 0, 'failover_hold: exit status') or diag($err);

# --- after the grace period ----------------------------------------------------------
ok($standby->poll_query_until('postgres', 'SELECT grace_until IS NULL FROM lockq_stats'),
	'the grace period ends');
cmp_ok(scalar_query($standby, 'SELECT lockq_now()'), '>=', $grace_until, 'not before grace_until');
my @new;
my $granted = waiter_result($waiter, qr/granted:(\d+)/);
ok(defined $granted, 'the waiter is granted when it ends');
push @new, $granted;
push @new, scalar_query($standby, "SELECT lockq_try('fresh', 'o')");
push @new, scalar_query($standby, "SELECT lockq_try('B', 'o')");
push @new, scalar_query($standby, "SELECT lockq_heartbeat('A', 'waiting-client')")
  if scalar_query($standby, "SELECT lockq_release('A', 'svc-a', $tok{A})") eq 't';
is(scalar(grep { defined $_ && $_ =~ /^\d+$/ } @new), 4,
	'lockq_try succeeds on free locks, and the client-side waiter of A is granted');
my $min_new = (sort { $a <=> $b } @new)[0];
cmp_ok($min_new, '>', $max_old,
	"every token the new primary issues is above every token the old one issued ($max_old)");
$waiter->quit;

# --- an asynchronous standby that was behind --------------------------------------
# standby2 stopped receiving WAL before the old primary's last grants.  It
# is promoted as well, on its own (the old primary is gone): what a
# synchronous standby prevents.
$async->start;
$async->promote;
ok($async->poll_query_until('postgres', 'SELECT worker_pid IS NOT NULL FROM lockq_stats'),
	'the lagging asynchronous standby is promoted');
my $async_now = scalar_query($async, 'SELECT lockq_now()');
is($durable_list->($async, 'A', 'late'), "A=svc-a:$tok{A}",
	'it has the grants it had received, but the later grant of "late" is lost');
$async->poll_query_until('postgres', 'SELECT grace_until IS NULL FROM lockq_stats');
my $intruder = scalar_query($async, "SELECT lockq_try('late', 'intruder', '1 hour')");
ok($intruder =~ /^\d+$/,
	'another owner gets "late", which the old primary had granted to svc-late for an hour');
ok($intruder =~ /^\d+$/ && $intruder <= $max_old,
	"with token $intruder, one the old primary had already issued (it issued every token up to $max_old)");
if ($faked)
{
	ok($async_now < $last_now, 'and lockq_now() went back');
}

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

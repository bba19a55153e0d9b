# lockq's query file (contrib/prometheus/lockq.yaml) in the real
# prometheus-postgres-exporter (Debian's), scraped over HTTP:
#
# * the exporter, connected as a role with no privileges, serves every
#   lockq series;
# * known traffic (5 grants: 2 locks of the role app, one holder and two
#   lockq_get waiters that each wait at least 0.5 s) shows in the
#   counters: grants, hand-offs, releases, enqueues exact; the wait and
#   hold times within bounds and equal to lockq_stats; the queue gauges and
#   the high-water mark while the waiters queue; the age of the oldest
#   grant and of the oldest waiter (0 when there is none); per-role usage
#   as gauges labelled by role, zeros for a login role that is idle;
# * per namespace: holders and waiters under a granted prefix (zeros
#   while idle) and under an id's part up to its colon (there while in
#   use); failed tries;
# * lockq_stats_reset, called by a member of lockq_admin, zeroes the
#   counters, starts the high-water mark from the queue there is, and
#   moves stats_reset; counting starts again from there;
# * the Grafana dashboard (contrib/grafana/lockq.json) queries only
#   series the exporter serves;
# * the exporter is stopped at the end (and if the test dies).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use HTTP::Tiny;
use JSON::PP;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use LockqTest;

my $exporter_bin = '/usr/bin/prometheus-postgres-exporter';
require_tool(-x $exporter_bin,
	'prometheus-postgres-exporter not installed (apt-get install prometheus-postgres-exporter)');
my $timeout = $PostgreSQL::Test::Utils::timeout_default;

my $node = lockq_node('prom');
my $superuser = scalar_query($node, 'SELECT current_user');
$node->safe_psql(
	'postgres', q{
CREATE ROLE monitor LOGIN;
CREATE ROLE app LOGIN;
CREATE ROLE ops LOGIN IN ROLE lockq_admin;
SELECT lockq.lockq_set_role_limits('app', max_owner_locks => 10);
SELECT lockq.lockq_grant('jobs:', 'app');
});

# --- the exporter ------------------------------------------------------------
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $log = $node->basedir . '/exporter.log';
my $exporter;
{
	local $ENV{DATA_SOURCE_NAME} = sprintf(
		'host=%s port=%d user=monitor dbname=postgres sslmode=disable',
		$node->host, $node->port);
	$exporter = IPC::Run::start(
		[
			$exporter_bin, "--web.listen-address=127.0.0.1:$port",
			"--extend.query-path=$ENV{TESTDIR}/contrib/prometheus/lockq.yaml",
			'--disable-default-metrics', '--disable-settings-metrics',
			'--no-collector.database', '--no-collector.bgwriter'
		],
		'<', '/dev/null', '>', $log, '2>&1');
}

# If the test dies, do not leave the exporter behind.
END
{
	local $?;
	if ($exporter && $exporter->pumpable)
	{
		kill 'TERM', $exporter->{KIDS}[0]{PID};
		$exporter->finish;
	}
}

my $http = HTTP::Tiny->new(timeout => 10);

# scrape() fetches /metrics and returns its lockq series as a hash:
# name => value, with the role, namespace or lock_server label kept as
# name{label}.
sub scrape
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	return undef unless $res->{success};
	my %m;
	for my $line (split /\n/, $res->{content})
	{
		next unless $line =~ /^(lockq_\w+)(\{[^}]*\})?\s+(\S+)$/;
		my ($name, $labels, $value) = ($1, $2 // '', $3);
		$name .= "{$1}" if $labels =~ /\b(?:role|namespace|lock_server)="([^"]*)"/;
		$m{$name} = $value;
	}
	return \%m;
}

# scrape_until(check) scrapes until check(metrics) is true; returns the
# last scrape (undef if none answered) after the default timeout.
sub scrape_until
{
	my ($check) = @_;
	my $deadline = time() + $timeout;
	my $m;
	while (1)
	{
		$m = scrape();
		return $m if $m && $check->($m);
		last if time() > $deadline;
		select(undef, undef, undef, 0.1);
	}
	return $m;
}

my $m = scrape_until(sub { defined $_[0]{lockq_grants_total} });
ok($m && defined $m->{lockq_grants_total}, 'the exporter serves the lockq series')
  or diag(slurp_file($log));

# every metric of the query file is there, as its type
my $types = $http->get("http://127.0.0.1:$port/metrics")->{content};
my %type = $types =~ /^# TYPE (lockq_\w+) (\w+)$/mg;
my @counters = map { "lockq_${_}_total" }
  qw(grants handoffs releases expiries timeouts cancels session_releases
  dropped_waiters renewals enqueues forced_releases deferred_handoffs requests
  batches sync_commits worker_starts batch_errors failed_tries wait_seconds hold_seconds);
my @gauges = map { "lockq_$_" }
  qw(max_queue_length longest_queue holders waiters delayed_locks
  state_memory_bytes worker_running stats_reset_seconds oldest_holder_seconds
  oldest_waiter_seconds role_owner_locks
  role_max_owner_locks role_waiters role_max_waiters role_session_locks
  role_max_session_locks namespace_holders namespace_waiters
  lock_server_running lock_server_holders lock_server_waiters
  lock_server_queued_requests lock_server_state_memory_bytes
  lock_server_flush_wait_seconds);
is(join(',', map { $type{$_} // 'missing' } @counters),
	join(',', map { 'counter' } @counters), 'the counters are counters');
is(join(',', map { $type{$_} // 'missing' } @gauges),
	join(',', map { 'gauge' } @gauges), 'the gauges are gauges');

# the dashboard's queries name only what the exporter serves
my $dash = JSON::PP->new->decode(slurp_file("$ENV{TESTDIR}/contrib/grafana/lockq.json"));
my @exprs = map { map { $_->{expr} } @{ $_->{targets} } } @{ $dash->{panels} };
my %used = map { $_ => 1 } map { /\b(lockq_\w+)/g } @exprs;
cmp_ok(scalar(keys %used), '>=', 20, 'the dashboard uses the lockq series (' . scalar(keys %used) . ')');
is(join(' ', grep { !exists $type{$_} } sort keys %used), '',
	'every series the dashboard queries is served');

is($m->{lockq_grants_total}, 0, 'no grant yet');
is($m->{lockq_oldest_holder_seconds}, 0, 'no oldest holder');
is($m->{lockq_worker_running}, 1, 'the lock server runs');
is($m->{'lockq_lock_server_running{0}'}, 1, 'per lock server: lock server 0 runs');
is($m->{'lockq_lock_server_flush_wait_seconds{0}'}, 0, 'and waits for no flush');
is($m->{lockq_worker_starts_total}, 1, 'it started once');
cmp_ok($m->{lockq_state_memory_bytes}, '>', 0, 'its state holds memory');
is($m->{lockq_delayed_locks}, 0, 'no lock is delayed');
my $started = $m->{lockq_stats_reset_seconds};
cmp_ok(abs($started - scalar_query($node,
	'SELECT extract(epoch FROM pg_postmaster_start_time())')), '<', 5,
	'stats_reset is the server start');
is($m->{'lockq_role_max_owner_locks{app}'}, 10,
	'per-role: the limit set for app');
is($m->{'lockq_role_owner_locks{app}'}, 0, 'app holds nothing yet');
is($m->{'lockq_role_owner_locks{monitor}'} . '/' . $m->{'lockq_role_waiters{monitor}'}, '0/0',
	'an idle login role has its series (zeros)');
is($m->{'lockq_namespace_holders{jobs:}'} . '/' . $m->{'lockq_namespace_waiters{jobs:}'}, '0/0',
	'so has an idle granted namespace');

# --- known traffic -----------------------------------------------------------
my $t0 = time();
$node->safe_psql('postgres',
	"SET ROLE app; SELECT lockq.lockq_try('r$_', 'app-$_', '5 min')")
  for 1 .. 2;
scalar_query($node, "SELECT lockq_try('hot', 'h', '5 min')");
my @w = map {
	start_waiter($node, "w$_",
		"SELECT 'granted:' || lockq_get('hot', 'w$_', '5 min');")
} 1 .. 2;
ok(wait_for_waiters($node, 'hot', 2), 'two waiters queue behind the holder');

$m = scrape_until(sub { $_[0]{lockq_longest_queue} == 2 });
is($m->{lockq_longest_queue}, 2, 'longest queue now: 2');
is($m->{lockq_max_queue_length}, 2, 'longest since the reset: 2');
is($m->{lockq_waiters}, 2, 'waiters: 2');
is($m->{lockq_holders}, 3, 'holders: 3');
is($m->{'lockq_lock_server_holders{0}'} . '/' . $m->{'lockq_lock_server_waiters{0}'}, '3/2',
	'per lock server: the one lock server has them all');
is($m->{lockq_enqueues_total}, 2, 'enqueues: 2');
is($m->{'lockq_role_owner_locks{app}'}, 2, 'per-role: app holds 2 locks');
is($m->{"lockq_role_waiters{$superuser}"}, 2,
	"per-role: $superuser has 2 waiters");

# each waiter waits at least 0.5 s: then the holder releases, and each
# holder in turn
ok($node->poll_query_until('postgres',
		"SELECT lockq_now() - max(ts) >= 500000 FROM lockq_waiters WHERE lock_id = 'hot'"),
	'the waiters have waited 0.5 s');
$m = scrape();
cmp_ok($m->{lockq_oldest_waiter_seconds}, '>=', 0.5, 'the oldest waiter has waited 0.5 s');
cmp_ok($m->{lockq_oldest_waiter_seconds}, '<=', time() - $t0, '... and no longer than the test ran');
cmp_ok($m->{lockq_oldest_holder_seconds}, '>=', $m->{lockq_oldest_waiter_seconds},
	'the oldest grant is older than the waiters behind it');
cmp_ok($m->{lockq_oldest_holder_seconds}, '<=', time() - $t0, '... and no older than the test\'s traffic');
scalar_query($node, "SELECT lockq_release('hot', 'h')");
for my $i (1 .. 2)
{
	ok(defined waiter_result($w[ $i - 1 ], qr/(granted:\d+)/), "w$i is granted");
	scalar_query($node, "SELECT lockq_release('hot', 'w$i')");
	$w[ $i - 1 ]->quit;
}
$node->safe_psql('postgres',
	"SET ROLE app; SELECT lockq.lockq_release('r$_', 'app-$_')")
  for 1 .. 2;
my $elapsed = time() - $t0;

$m = scrape_until(sub { $_[0]{lockq_holders} == 0 && $_[0]{lockq_releases_total} == 5 });
is($m->{lockq_grants_total}, 5, 'grants: 5');
is($m->{lockq_handoffs_total}, 2, 'hand-offs (the grants that waited): 2');
is($m->{lockq_releases_total}, 5, 'releases: 5');
is($m->{lockq_expiries_total}, 0, 'expiries: 0');
is($m->{lockq_enqueues_total}, 2, 'enqueues: 2');
is($m->{lockq_longest_queue}, 0, 'no queue now');
is($m->{lockq_max_queue_length}, 2, 'the longest was 2');
is($m->{lockq_holders} . '/' . $m->{lockq_waiters}, '0/0', 'nothing held or queued');
is($m->{lockq_oldest_holder_seconds} . '/' . $m->{lockq_oldest_waiter_seconds}, '0/0',
	'so the oldest holder and waiter are 0');
is($m->{'lockq_role_owner_locks{app}'}, 0, 'per-role: app holds nothing');
my $wait = $m->{lockq_wait_seconds_total};
my $hold = $m->{lockq_hold_seconds_total};
note sprintf('traffic took %.2f s; wait %.3f s, hold %.3f s', $elapsed, $wait, $hold);
cmp_ok($wait, '>=', 1.0, 'wait time: at least 2 x 0.5 s');
cmp_ok($wait, '<=', 2 * $elapsed, 'and no more than the two waiters were there');
# h held for the waits, r1 and r2 across them
cmp_ok($hold, '>=', 1.5, 'hold time: at least 3 x 0.5 s');
cmp_ok($hold, '<=', 5 * $elapsed, 'and no more than 5 grants lasted');
is(sprintf('%.6f %.6f', $wait, $hold),
	scalar_query($node,
		"SELECT to_char(wait_time / 1000, 'FM0.000000') || ' ' || to_char(hold_time / 1000, 'FM0.000000') FROM lockq_stats"
	),
	'wait and hold seconds are lockq_stats.wait_time and hold_time');

# --- lockq_stats_reset -------------------------------------------------------
# with one waiter queued (q held by h2): the high-water mark starts at 1
scalar_query($node, "SELECT lockq_try('q', 'h2', '5 min')");
my $w3 = start_waiter($node, 'w3', "SELECT 'granted:' || lockq_get('q', 'w3', '5 min');");
ok(wait_for_waiters($node, 'q', 1), 'a waiter queues for q');
my $before = scalar_query($node, 'SELECT extract(epoch FROM now())');
$node->safe_psql('postgres', 'SET ROLE ops; SELECT lockq.lockq_stats_reset()');
$m = scrape_until(sub { $_[0]{lockq_grants_total} == 0 });
is( join(',',
		map { $m->{"lockq_${_}_total"} }
		  qw(grants handoffs releases enqueues wait_seconds hold_seconds requests)),
	'0,0,0,0,0,0,0',
	'a lockq_admin member reset the counters');
is($m->{lockq_max_queue_length}, 1, 'the high-water mark starts from the queue there is');
is($m->{lockq_longest_queue}, 1, 'the gauges stay');
is($m->{lockq_holders}, 1, 'holders stay');
cmp_ok($m->{lockq_stats_reset_seconds}, '>=', $before - 0.001, 'stats_reset is the reset');
cmp_ok($m->{lockq_stats_reset_seconds}, '>', $started, 'and later than the start');

scalar_query($node, "SELECT lockq_release('q', 'h2')");
ok(defined waiter_result($w3, qr/(granted:\d+)/), 'w3 is granted');
scalar_query($node, "SELECT lockq_release('q', 'w3')");
$w3->quit;
$m = scrape_until(sub { $_[0]{lockq_releases_total} == 2 });
is( join(',',
		map { $m->{"lockq_${_}_total"} } qw(grants handoffs releases)),
	'1,1,2', 'counting starts again from the reset');
cmp_ok($m->{lockq_wait_seconds_total}, '>', 0, 'w3 waited');

# --- namespaces and failed tries -----------------------------------------------
scalar_query($node, "SELECT lockq_try('jobs:$_', 'j$_', '5 min')") for 1 .. 2;
scalar_query($node, "SELECT lockq_try('reports:nightly', 'rep', '5 min')");
is(scalar_query($node, "SELECT lockq_try('jobs:1', 'other', '5 min') IS NULL"), 't',
	'a try of a taken lock fails');
$m = scrape_until(sub { ($_[0]{'lockq_namespace_holders{reports:}'} // 0) == 1 });
is($m->{'lockq_namespace_holders{jobs:}'}, 2, 'the granted namespace jobs: holds 2');
is($m->{'lockq_namespace_holders{reports:}'}, 1, 'the namespace reports: (up to the colon) holds 1');
is($m->{lockq_failed_tries_total}, 1, 'one failed try');
scalar_query($node, "SELECT lockq_release('jobs:$_', 'j$_')") for 1 .. 2;
scalar_query($node, "SELECT lockq_release('reports:nightly', 'rep')");
$m = scrape_until(sub { $_[0]{lockq_holders} == 0 });
is($m->{'lockq_namespace_holders{jobs:}'}, 0, 'jobs: is idle and still there');
ok(!defined $m->{'lockq_namespace_holders{reports:}'}, 'reports: went with its last lock');

# --- stop --------------------------------------------------------------------
my $pid = $exporter->{KIDS}[0]{PID};
kill 'TERM', $pid;
$exporter->finish;
ok(!kill(0, $pid), 'the exporter is gone');
ok(!defined scrape(), 'nothing answers on its port any more');
$exporter = undef;

$node->stop;
done_testing();

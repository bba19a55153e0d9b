# Where lockq refuses to work, it says why: without shared_preload_libraries,
# and on a hot standby.  The lock server runs only on a primary; after a
# promotion it starts, with the grants that were replicated.
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

# --- not preloaded -----------------------------------------------------------
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION lockq');
for my $call ("lockq_try('x')", "lockq_get('x')", 'lockq_now()', "lockq_holds('x', 1)",
	'lockq_stats()')
{
	my ($ret, $out, $err) = $plain->psql('postgres', "SELECT lockq.$call");
	like($err, qr/ERROR:  lockq must be loaded via "shared_preload_libraries"/,
		"$call fails without preloading");
	like($err, qr/HINT:  Add lockq to "shared_preload_libraries"/, "$call gives a hint");
}
is($plain->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_locks'), '0',
	'the views still work (and are empty)');
is($plain->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_waiters'), '0',
	'lockq_waiters too');
$plain->stop;

# --- primary and hot standby -------------------------------------------------
my $primary = lockq_node('primary', init => { allows_streaming => 1 });
my $t = scalar_query($primary, "SELECT lockq_try('replicated', 'svc', '1 hour')");
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
my $t2 = scalar_query($primary, "SELECT lockq_try('later', 'svc', '1 hour')");
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'0', 'no lock server on the standby');
for my $call ("lockq_try('x')", "lockq_release('replicated', 'svc')", 'lockq_now()',
	"lockq_holds('replicated', $t)")
{
	my ($ret, $out, $err) = $standby->psql('postgres', "SELECT $call");
	like($err, qr/ERROR:  lockq is not available during recovery/, "$call fails on the standby");
	like($err, qr/HINT:  Connect to the primary server\./, "$call hints at the primary");
}
is($standby->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_waiters'), '0',
	'lockq_waiters works on the standby (client-side waiters replicate; there are none)');
is($standby->safe_psql('postgres', "SELECT string_agg(lock_id, ',' ORDER BY lock_id) FROM lockq_locks"),
	'later,replicated', 'the standby shows the replicated grants');

# --- promotion -----------------------------------------------------------------
$primary->stop('immediate');
$standby->promote;
ok($standby->poll_query_until('postgres',
		"SELECT count(*) = " . lock_servers() . " FROM pg_stat_activity WHERE backend_type = 'lockq lock server'"),
	'the lock server starts on the promoted standby (each of them)');
is(scalar_query($standby, "SELECT lockq_holds('replicated', $t)"), 't',
	'a grant replicated before the failover is still current');
ok(scalar_query($standby, "SELECT lockq_try('new', 'svc')") > $t2,
	'new tokens are above the replicated ones');

$standby->stop;
done_testing();

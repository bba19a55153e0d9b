# Maintenance commands on lockq's tables at the moments that matter: with
# grants held, client-side waiters queued, a fence open and a batch in
# flight.  Rewrites (VACUUM FULL, CLUSTER, SET TABLESPACE) move every row,
# and the lock server must load its state anew instead of writing at the old
# addresses (issue 21: releasing A deleted B's row, and A went to a second
# fenced holder).  VACUUM, ANALYZE and REINDEX (CONCURRENTLY) keep the rows;
# TRUNCATE, column changes, renames, triggers, rules and policies are
# refused.  After everything, a restart loads a consistent state.
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

my $node = lockq_node('maint');
fault_functions($node);

# one_row_per_lock: the table holds at most one grant of any lock.
sub one_row_per_lock
{
	my ($label) = @_;
	is(scalar_query($node,
			"SELECT count(*) FROM (SELECT lock_id FROM lockq.owners GROUP BY lock_id HAVING count(*) > 1) d"),
		'0', "$label: no lock has two grants in lockq.owners");
	return;
}

# rows_move(table): so that a rewrite moves rows onto
# each other's old places: the table is compacted (no rows), a first row is
# written and ended, and the rows written after it move down by one: the
# second row's new place is the third row's old one.
sub rows_move
{
	my ($table) = @_;
	$node->safe_psql('postgres', "VACUUM FULL lockq.$table");
	is(scalar_query($node, "SELECT count(*) FROM lockq.$table"), '0', "lockq.$table is empty");
	return;
}

# rewrite_with_grants(command, label): A and B held; the command rewrites
# lockq.owners, moving B to A's old place; releasing A must leave B alone,
# A's fence ends, and A's next holder gets a larger token.
sub rewrite_with_grants
{
	my ($command, $label) = @_;
	my ($a, $b) = ("A-$label", "B-$label");
	rows_move('owners');
	my $tp = scalar_query($node, "SELECT lockq_try('P-$label', 'op', '1 hour')");
	my $ta = scalar_query($node, "SELECT lockq_try('$a', 'oa', '1 hour')");
	my $tb = scalar_query($node, "SELECT lockq_try('$b', 'ob', '1 hour')");
	scalar_query($node, "SELECT lockq_release('P-$label', 'op', $tp)");
	my $file = scalar_query($node, "SELECT pg_relation_filenode('lockq.owners')");
	$node->safe_psql('postgres', $command);
	isnt(scalar_query($node, "SELECT pg_relation_filenode('lockq.owners')"),
		$file, "$label: lockq.owners has a new file");
	is(scalar_query($node, "SELECT lockq_release('$a', 'oa', $ta)"), 't',
		"$label: A released after the rewrite");
	is(scalar_query($node, "SELECT lockq_holds('$a', $ta)"), 'f',
		"$label: A's fence ends with its release (I1)");
	is(scalar_query($node, "SELECT lockq_holds('$b', $tb)"), 't',
		"$label: B is still held (its row was not touched)");
	is(scalar_query($node, "SELECT count(*) FROM lockq.owners WHERE lock_id = '$b' AND token = $tb"),
		'1', "$label: B's row is there");
	my $ta2 = scalar_query($node, "SELECT lockq_try('$a', 'oc', '1 hour')");
	cmp_ok($ta2, '>', $tb, "$label: A's next holder has a larger token");
	is(scalar_query($node, "SELECT lockq_renew('$b', 'ob', $tb, '1 hour')"), 't',
		"$label: B's holder renews");
	one_row_per_lock($label);
	scalar_query($node, "SELECT lockq_release('$a', 'oc', $ta2)");
	scalar_query($node, "SELECT lockq_release('$b', 'ob', $tb)");
	return;
}

rewrite_with_grants('VACUUM FULL lockq.owners', 'vacuum-full');
rewrite_with_grants('CLUSTER lockq.owners USING owners_pkey', 'cluster');
$node->safe_psql('postgres', 'ALTER TABLE lockq.owners SET WITHOUT CLUSTER');
rewrite_with_grants('VACUUM FULL', 'vacuum-full-database');

# Client-side waiters: VACUUM FULL lockq.queue, then w1 withdraws; w2 keeps
# its row and its place, and is granted (I4); w1 is not.
{
	my $th = scalar_query($node, "SELECT lockq_try('Q', 'holder', '1 hour')");
	rows_move('queue');
	for my $w (qw(w0 w1 w2 w3))
	{
		is(scalar_query($node, "SELECT lockq_enqueue('Q', '$w', '1 hour', NULL, '1 hour') IS NULL"),
			't', "$w queued");
	}
	scalar_query($node, "SELECT lockq_cancel('Q', 'w0')");
	$node->safe_psql('postgres', 'VACUUM FULL lockq.queue');
	is(scalar_query($node, "SELECT lockq_cancel('Q', 'w1')"), 't', 'w1 withdraws after the rewrite');
	is(queue_of($node, 'Q'), 'w2 w3', 'w2 and w3 keep their places');
	is(scalar_query($node, "SELECT count(*) FROM lockq.queue WHERE lock_id = 'Q'"), '2',
		'their rows are there, w1\'s is gone');
	scalar_query($node, "SELECT lockq_release('Q', 'holder', $th)");
	my $t2 = scalar_query($node, "SELECT lockq_heartbeat('Q', 'w2')");
	cmp_ok($t2, '>', $th, 'w2 is granted next');
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT lockq_heartbeat('Q', 'w1')");
	like($err, qr/neither waits for nor holds|not waiting|does not wait/i, 'w1 is not waiting any more');
	is(scalar_query($node, "SELECT lockq_heartbeat('Q', 'w3') IS NULL"), 't', 'w3 still waits');
	scalar_query($node, "SELECT lockq_release('Q', 'w2', $t2)");
	my $t3 = scalar_query($node, "SELECT lockq_heartbeat('Q', 'w3')");
	cmp_ok($t3, '>', $t2, 'then w3');
	scalar_query($node, "SELECT lockq_release('Q', 'w3', $t3)");
}

# A fence open when VACUUM FULL is issued: the rewrite waits for the fenced
# transaction, the lock server does nothing with the tables meanwhile, and
# after it the fence's grant ends and passes on correctly.
{
	my $ta = scalar_query($node, "SELECT lockq_try('F', 'fa', '1 hour')");
	my $tb = scalar_query($node, "SELECT lockq_try('G', 'fb', '1 hour')");
	my $fence = $node->background_psql('postgres');
	$fence->query_safe("BEGIN");
	is($fence->query_safe("SELECT lockq_holds('F', $ta)"), 't', 'fence taken on F');
	my $vac = start_waiter($node, 'vacuum-full', "VACUUM FULL lockq.owners; SELECT 'vacuumed';");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'vacuum-full' AND wait_event_type = 'Lock'"),
		'VACUUM FULL waits for the fenced transaction');
	$fence->query_safe("COMMIT");
	like(waiter_result($vac, qr/(vacuumed)/), qr/vacuumed/, 'VACUUM FULL done after the fence');
	$vac->quit;
	$fence->quit;
	is(scalar_query($node, "SELECT lockq_release('F', 'fa', $ta)"), 't', 'F released');
	is(scalar_query($node, "SELECT lockq_holds('G', $tb)"), 't', 'G untouched');
	one_row_per_lock('fence');
	scalar_query($node, "SELECT lockq_release('G', 'fb', $tb)");
}

# A batch in flight: the lock server has begun a batch (held at batch-start,
# before it locks its tables) when VACUUM FULL rewrites lockq.owners; the
# batch must see the new file and reload before it writes.
{
	rows_move('owners');
	my $tp = scalar_query($node, "SELECT lockq_try('P', 'hp', '1 hour')");
	my $ta = scalar_query($node, "SELECT lockq_try('H', 'ha', '1 hour')");
	my $tb = scalar_query($node, "SELECT lockq_try('I', 'hb', '1 hour')");
	scalar_query($node, "SELECT lockq_release('P', 'hp', $tp)");
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('batch-start', 'wait')");
	my $rel = start_waiter($node, 'inflight-release',
		"SELECT 'released:' || lockq_release('H', 'ha', $ta);");
	ok(fault_fired($node, 'batch-start'), 'a batch is in flight');
	$node->safe_psql('postgres', 'VACUUM FULL lockq.owners');
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('batch-start')");
	$node->safe_psql('postgres', "SELECT lockq_fault_wakeup('batch-start')");
	like(waiter_result($rel, qr/(released:\w+|ERROR:.*)/), qr/released:t/,
		'the release in flight is applied after the reload');
	$rel->quit;
	is(scalar_query($node, "SELECT lockq_holds('H', $ta)"), 'f', 'H ended');
	is(scalar_query($node, "SELECT lockq_holds('I', $tb)"), 't', 'I untouched');
	ok($node->log_contains("lockq's tables were rewritten, reloading the lock state"),
		'the log says the state was reloaded');
	one_row_per_lock('in flight');
	scalar_query($node, "SELECT lockq_release('I', 'hb', $tb)");
}

# Commands that keep the rows where they are.
for my $cmd ('VACUUM lockq.owners', 'VACUUM (ANALYZE) lockq.queue', 'ANALYZE lockq.unsettled',
	'REINDEX TABLE lockq.owners', 'REINDEX TABLE CONCURRENTLY lockq.owners',
	'REINDEX TABLE CONCURRENTLY lockq.queue',
	"ALTER TABLE lockq.owners SET (autovacuum_vacuum_scale_factor = 0.01)",
	'VACUUM FULL lockq.unsettled')
{
	my $ta = scalar_query($node, "SELECT lockq_try('K', 'ka', '1 hour')");
	my $tb = scalar_query($node, "SELECT lockq_try('L', 'kb', '1 hour')");
	$node->safe_psql('postgres', $cmd);
	is(scalar_query($node, "SELECT lockq_release('K', 'ka', $ta)"), 't', "$cmd: release");
	is(scalar_query($node, "SELECT lockq_holds('L', $tb)"), 't', "$cmd: the other grant stays");
	scalar_query($node, "SELECT lockq_release('L', 'kb', $tb)");
}

# Refused, with a hint at the safe way, and nothing changes.
my $tz = scalar_query($node, "SELECT lockq_try('Z', 'zo', '1 hour')");
for my $case (
	[ 'TRUNCATE lockq.owners', qr/TRUNCATE is not allowed on table "lockq.owners"/ ],
	[ 'TRUNCATE lockq.queue, lockq.unsettled', qr/TRUNCATE is not allowed on table "lockq.queue"/ ],
	[ 'ALTER TABLE lockq.owners ADD COLUMN note text', qr/this ALTER TABLE is not allowed on table "lockq.owners"/ ],
	[ 'ALTER TABLE lockq.queue SET UNLOGGED', qr/this ALTER TABLE is not allowed on table "lockq.queue"/ ],
	[ 'ALTER TABLE lockq.owners RENAME TO owners2', qr/renaming is not allowed/ ],
	[ "CREATE FUNCTION public.t() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';"
		  . ' CREATE TRIGGER t AFTER INSERT ON lockq.owners FOR EACH ROW EXECUTE FUNCTION public.t()',
		qr/a trigger is not allowed on table "lockq.owners"/ ],
	[ 'CREATE RULE r AS ON INSERT TO lockq.queue DO ALSO NOTHING', qr/a rule is not allowed/ ],
	[ 'CREATE POLICY p ON lockq.owners USING (true)', qr/a row security policy is not allowed/ ])
{
	my ($sql, $re) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres', "BEGIN; $sql; COMMIT;");
	like($err, $re, "refused: $sql");
	like($err, qr/HINT:/, "with a hint: $sql");
}
is(scalar_query($node, "SELECT lockq_holds('Z', $tz)"), 't', 'the refused commands changed nothing');

# After all of it, a restart loads one consistent state.
$node->restart;
ok(wait_for_worker($node), 'the lock server is back after a restart');
is(scalar_query($node, "SELECT lockq_holds('Z', $tz)"), 't', 'Z is still held after the restart');
my $tn = scalar_query($node, "SELECT lockq_try('new', 'n', '1 hour')");
cmp_ok($tn, '>', $tz, 'calls work after the restart, tokens above');
one_row_per_lock('restart');

done_testing();

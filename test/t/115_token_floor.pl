# Tokens are never issued again when durable state goes back to an earlier
# moment without the lock server being told: a dump restored into a new
# cluster (in one pass, and in sections with lockq calls in between), and a
# base backup recovered to a point in time before thousands of later
# grants.  The sequences and the state file such a restore brings back hold
# the token ceiling of that earlier moment (issue 21: tokens restarted at
# 4098 after 5002 had been issued, and at 1 during a sectioned restore);
# each start of the lock server moves tokens up to the clock, which does
# not go back with them.  lockq_now()
# continues above too.  (The promotion of a standby that was behind:
# 117_failover.)
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

my $src = lockq_node('source', init => { allows_streaming => 1, has_archiving => 1 });
create_churn($src);

# A base backup, then grants, a restore point and a dump; then thousands of
# grants more, which the restores below do not know of.
$src->backup('base');
my $before_rp = scalar_query($src, 'SELECT churn(500)');
$src->safe_psql('postgres', "SELECT pg_create_restore_point('rp')");
$src->safe_psql('postgres', 'SELECT pg_switch_wal()');
my $dump = $src->basedir . '/lockq.dump';
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('postgres') ],
	'pg_dump of the source database');
my $ceiling_in_dump = scalar_query($src, 'SELECT last_value FROM lockq.token_seq');
my $max_src = scalar_query($src, 'SELECT churn(5000)');
cmp_ok($max_src, '>', $before_rp, "the source issued tokens up to $max_src");
my $now_src = scalar_query($src, 'SELECT lockq_now()');
$src->safe_psql('postgres', 'SELECT pg_switch_wal()');
$src->stop;

# restored_is_above(node, label): the restored database's first grants are
# above every token the source issued, and its clock above the source's.
sub restored_is_above
{
	my ($node, $label) = @_;
	my $t = scalar_query($node, "SELECT lockq_try('after-$label', 'x', '1 minute')");
	cmp_ok($t, '>', $max_src, "$label: the first token ($t) is above every token the source issued");
	cmp_ok(scalar_query($node, 'SELECT lockq_now()'), '>', $now_src,
		"$label: lockq_now() is above the source's");
	return $t;
}

# --- pg_dump, pg_restore into a new cluster ----------------------------------------
my $new = lockq_node('restored', no_extension => 1);
$new->command_ok([ 'pg_restore', '-d', $new->connstr('postgres'), $dump ],
	'pg_restore into a new cluster');
ok(wait_for_worker($new), 'the lock server serves the restored extension');
cmp_ok(scalar_query($new, 'SELECT last_value FROM lockq.token_seq'), '<=', $ceiling_in_dump,
	'the restored token ceiling is that of the dump, below what the source issued since');
restored_is_above($new, 'dump');
$new->stop;

# --- a sectioned restore, with lockq calls between the sections ------------------
my $sec = lockq_node('sectioned', no_extension => 1);
$sec->command_ok([ 'pg_restore', '--section=pre-data', '-d', $sec->connstr('postgres'), $dump ],
	'pre-data section restored');
ok(wait_for_worker($sec), 'the lock server serves the extension made by pre-data');
my $t_pre = restored_is_above($sec, 'pre-data');
$sec->command_ok([ 'pg_restore', '--section=data', '-d', $sec->connstr('postgres'), $dump ],
	'data section restored (it sets the sequences back)');
$sec->command_ok([ 'pg_restore', '--section=post-data', '-d', $sec->connstr('postgres'), $dump ],
	'post-data section restored');
my $t_post = scalar_query($sec, "SELECT lockq_try('after-data', 'x', '1 minute')");
cmp_ok($t_post, '>', $t_pre, 'after the data section, tokens still increase');
$sec->restart;
cmp_ok(scalar_query($sec, "SELECT lockq_try('after-restart', 'x', '1 minute')"), '>', $t_post,
	'and after a restart');
$sec->stop;

# --- point-in-time recovery to before 5,000 grants -----------------------------
my $pitr = PostgreSQL::Test::Cluster->new('pitr');
$pitr->init_from_backup($src, 'base', has_restoring => 1);
$pitr->append_conf('postgresql.conf', qq{
recovery_target_name = 'rp'
recovery_target_action = 'promote'
});
$pitr->start;
ok($pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'recovered to the restore point and promoted');
ok(wait_for_worker($pitr), 'its lock server runs');
is(scalar_query($pitr, "SELECT count(*) FROM lockq.owners"), '0',
	'it holds no grant of the lost history');
restored_is_above($pitr, 'pitr');
$pitr->stop;

done_testing();

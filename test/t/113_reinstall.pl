# Tokens are never issued again and lockq_now() never goes back (I3), even
# when the extension is dropped and created again and the server then
# restarts or crashes, in any order: the floors live outside the extension
# (the state file lockq.state) and CREATE EXTENSION copies them into the
# new sequences, so that they also replicate.
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

my $node = lockq_node('reinstall');
my $max_token = 0;
my $max_now = 0;

# take(n, tag) issues n tokens and returns the last
sub take
{
	my ($n, $tag) = @_;
	my $t = 0;
	for my $i (1 .. $n)
	{
		$t = scalar_query($node, "SELECT lockq_try('$tag-$i', 'o', '1 hour')");
	}
	return $t;
}

sub check_after
{
	my ($what) = @_;
	wait_for_worker($node);
	my $t = scalar_query($node, "SELECT lockq_try('after-$what', 'o', '1 hour')");
	ok($t > $max_token, "$what: the first token after ($t) is above every earlier one ($max_token)");
	my $now = scalar_query($node, 'SELECT lockq_now()');
	ok($now > $max_now, "$what: lockq_now() did not go back");
	$max_token = $t;
	$max_now = $now;
	return;
}

for my $stop (qw(fast immediate crash))
{
	$max_token = take(5, "before-$stop");
	$max_now = scalar_query($node, 'SELECT lockq_now()');
	$node->safe_psql('postgres', 'DROP EXTENSION lockq');
	$node->safe_psql('postgres', 'CREATE EXTENSION lockq');
	cmp_ok(scalar_query($node, 'SELECT last_value FROM lockq.token_seq'), '>=', $max_token,
		"$stop: the new installation's token sequence starts above every token issued");
	cmp_ok(scalar_query($node, 'SELECT last_value FROM lockq.clock_seq'), '>=', $max_now,
		"$stop: so does its clock sequence");
	if ($stop eq 'crash')
	{
		crash_restart($node);
	}
	else
	{
		$node->stop($stop);
		$node->start;
	}
	check_after("DROP/CREATE EXTENSION then $stop");
}

# dropped, restarted without the extension, created again, restarted
$max_token = take(3, 'gap');
$max_now = scalar_query($node, 'SELECT lockq_now()');
$node->safe_psql('postgres', 'DROP EXTENSION lockq');
crash_restart($node);
$node->safe_psql('postgres', 'CREATE EXTENSION lockq');
$node->restart;
check_after('DROP, crash, CREATE, restart');

ok(!$node->log_contains('could not open relation with OID'),
	'stopping never wrote to a dropped installation');
$node->stop;
done_testing();

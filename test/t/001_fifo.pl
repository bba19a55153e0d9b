# Strict FIFO: waiters are granted in arrival order, whatever kind they are
# (a backend blocked in lockq_get or a client-side waiter), and lockq_try
# never barges in front of a queued waiter.
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

my $node = lockq_node('fifo');

$node->safe_psql('postgres',
	'CREATE TABLE grant_log (seq serial PRIMARY KEY, who text, token bigint)');

# The holder.
my $holder_token =
  scalar_query($node, "SELECT lockq_try('F', 'holder', '1 hour')");
ok($holder_token > 0, 'holder has the lock');

# Seven waiters arrive one after the other: each waits until the queue shows
# it before the next one comes.  Each logs its grant, then releases, so the
# chain runs by itself once the holder lets go.
my @names = map { "w$_" } 1 .. 7;
my @sessions;
for my $i (0 .. $#names)
{
	my $w = $names[$i];
	push @sessions, start_waiter(
		$node, $w, qq{
SELECT lockq_get('F', '$w', '1 hour') AS tok \\gset
INSERT INTO grant_log (who, token) VALUES ('$w', :tok);
SELECT lockq_release('F', '$w', :tok) AS released \\gset
\\echo done-$w
});
	ok(wait_for_waiters($node, 'F', $i + 1), "$w is queued");
}

is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(owner || ':' || position || ':' || kind, ' ' ORDER BY position)
		   FROM lockq_waiters WHERE lock_id = 'F'"),
	join(' ', map { "$names[$_]:" . ($_ + 1) . ':backend' } 0 .. $#names),
	'lockq_waiters shows the queue in arrival order');

# Nobody barges in while the queue is non-empty.
is(scalar_query($node, "SELECT lockq_try('F', 'barger') IS NULL"),
	't', 'lockq_try by a newcomer returns NULL while waiters queue');
is(scalar_query($node, "SELECT count(*) FROM lockq_waiters WHERE owner = 'barger'"),
	'0', 'and does not queue');

# Release: the chain runs through all seven.
is(scalar_query($node, "SELECT lockq_release('F', 'holder', $holder_token)"),
	't', 'holder releases');
for my $i (0 .. $#names)
{
	ok(defined waiter_result($sessions[$i], qr/(done-$names[$i])/),
		"$names[$i] got the lock and released it");
}

is( $node->safe_psql('postgres',
		'SELECT string_agg(who, \' \' ORDER BY seq) FROM grant_log'),
	join(' ', @names),
	'grant order equals arrival order');
is( $node->safe_psql(
		'postgres',
		'SELECT bool_and(token > prev) FROM (SELECT token, lag(token, 1, 0::bigint) OVER (ORDER BY seq) AS prev FROM grant_log) s'
	),
	't',
	'tokens strictly increase in grant order');
ok( $node->safe_psql('postgres', 'SELECT min(token) FROM grant_log') >
	  $holder_token,
	'every token is above the holder\'s');
$_->quit for @sessions;

# Mixed queue: backend waiters and client-side waiters share one FIFO.
$node->safe_psql('postgres', 'TRUNCATE grant_log');
my $h2 = scalar_query($node, "SELECT lockq_try('M', 'holder', '1 hour')");
my @order = ('b1', 'c1', 'b2', 'c2', 'b3');
my %sess;
for my $i (0 .. $#order)
{
	my $who = $order[$i];
	if ($who =~ /^b/)
	{
		$sess{$who} = start_waiter(
			$node, $who, qq{
SELECT lockq_get('M', '$who', '1 hour') AS tok \\gset
INSERT INTO grant_log (who, token) VALUES ('$who', :tok);
\\echo granted-$who
});
	}
	else
	{
		is( scalar_query(
				$node,
				"SELECT lockq_enqueue('M', '$who', '1 hour', NULL, '1 hour') IS NULL"
			),
			't',
			"client waiter $who queued");
	}
	ok(wait_for_waiters($node, 'M', $i + 1), "$who is in the queue");
}
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(owner || ':' || kind, ' ' ORDER BY position) FROM lockq_waiters WHERE lock_id = 'M'"
	),
	'b1:backend c1:client b2:backend c2:client b3:backend',
	'one queue for both kinds, in arrival order');

# Hand the lock down the queue; each holder releases once it is seen.
my $prev_owner = 'holder';
for my $who (@order)
{
	is(scalar_query($node, "SELECT lockq_release('M', '$prev_owner')"),
		't', "$prev_owner releases");
	ok(wait_for_holder($node, 'M', $who), "$who holds the lock next");
	if ($who =~ /^c/)
	{
		ok(scalar_query($node, "SELECT lockq_heartbeat('M', '$who')") > $h2,
			"client waiter $who picks up its token");
		$node->safe_psql('postgres',
			"INSERT INTO grant_log (who, token) SELECT '$who', token FROM lockq_locks WHERE lock_id = 'M'"
		);
	}
	else
	{
		ok(defined waiter_result($sess{$who}, qr/(granted-$who)/),
			"backend waiter $who returned from lockq_get");
	}
	$prev_owner = $who;
}
is(scalar_query($node, "SELECT lockq_release('M', '$prev_owner')"),
	't', 'last holder releases');
is($node->safe_psql('postgres', "SELECT string_agg(who, ' ' ORDER BY seq) FROM grant_log"),
	join(' ', @order), 'mixed grant order equals arrival order');
$_->quit for values %sess;

is(scalar_query($node, 'SELECT holders || \'/\' || waiters FROM lockq_stats'),
	'0/0', 'nothing left held or queued');

$node->stop;
done_testing();

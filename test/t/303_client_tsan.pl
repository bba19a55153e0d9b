# liblockq under ThreadSanitizer: the scenarios of client/test/lockqc_test.c
# that use threads (the cancel flag set by another thread, many threads on
# one connection, disconnect racing with a waiter or called from the
# lost-lease callback, a stalled backend) built with -fsanitize=thread
# (client/test/tsan/lockqc_test, "make check-tsan"): every check passes and
# ThreadSanitizer reports nothing.
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

my $prog = "$ENV{TESTDIR}/client/test/tsan/lockqc_test";
if (!-x $prog)
{
	die "$prog not built (make -C client tsan)" if $ENV{LOCKQ_MAKE_TEST};
	plan skip_all => "$prog not built (make -C client tsan)";
}

my $node = lockq_node('clienttsan');
my $connstr = $node->connstr('postgres');

for my $scenario (qw(basic cancel threads handoff lost_admin api dropped
	disconnect_waiter disconnect_callback stall extend))
{
	my ($out, $err) = ('', '');
	local $ENV{TSAN_OPTIONS} = 'halt_on_error=0 exitcode=66 second_deadlock_stack=1';
	IPC::Run::run([ $prog, $scenario, $connstr ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $rc = $? >> 8;
	my @bad = grep { /^not ok/ } split /\n/, $out;
	my $n = () = $out =~ /^ok/mg;
	ok($n > 0 && !@bad, "tsan $scenario: $n checks passed") or diag($out);
	unlike($err, qr/WARNING: ThreadSanitizer/, "tsan $scenario: no ThreadSanitizer report")
	  or diag($err);
	is($rc, 0, "tsan $scenario: exit status") or diag($err);
}

$node->poll_query_until('postgres', "SELECT holders || '/' || waiters = '0/0' FROM lockq_stats");
is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

# A grant whose answer reaches liblockq after the lease it set would have
# ended (counted, as liblockq counts, from when the request was sent): the
# library must neither hand out that grant nor wait forever for it (issue
# 22, item 5: lockqc_lock never returned, and lockq run without -w hung on
# a free lock).  It asks again: the owner's enqueue returns the same token
# with a fresh lease, or queues anew if the lease ended on the server.
# The server's answer is held back with the fault point call-after-submit
# (the backend sleeps before it waits for its answer).
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
use Time::HiRes qw(time);
use LockqTest;

my $lockq = "$ENV{TESTDIR}/client/lockq";
require_tool(-x $lockq, "$lockq not built");

my $node = lockq_node('late');
fault_functions($node);
my $conn = $node->connstr('postgres');

# run_late(label, args): lockq run with a 1 s lease while the first answer
# comes 1.5 s late; it must run the command, under a lease, and return.
sub run_late
{
	my ($label, @args) = @_;
	$node->safe_psql('postgres', "SELECT lockq_fault_arm('call-after-submit', 'sleep', 1500, 0, 1)");
	my ($out, $err) = ('', '');
	my $t0 = time;
	my $ok = eval {
		IPC::Run::run([ $lockq, 'run', '-d', $conn, '--ttl', '1s', @args, "late-$label", '--',
				'sh', '-c', 'echo ran:$LOCKQ_TOKEN' ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(30));
		1;
	};
	my $took = time - $t0;
	ok($ok, "$label: lockq run returns (${took}s)") or diag("stderr: $err");
	like($out, qr/^ran:\d+$/m, "$label: the command ran, with its token");
	cmp_ok($took, '<', 10, "$label: without waiting for anything that never comes");
	ok(fault_fired($node, 'call-after-submit'), "$label: the first answer was late");
	is(scalar_query($node, "SELECT count(*) FROM lockq_locks WHERE lock_id = 'late-$label'"), '0',
		"$label: nothing is left held");
	$node->safe_psql('postgres', "SELECT lockq_fault_disarm('call-after-submit')");
	return;
}

run_late('wait');
run_late('timeout', '--timeout', '20s');

done_testing();

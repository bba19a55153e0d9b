# The Go module (client/go, package lockq, pgx v4) and the example that
# uses it (examples/go), built offline in GOPATH mode against Debian's
# golang-github-jackc-pgx-v4-dev, as a Debian -dev package of the module
# would be used: both are copied into a GOPATH of their own (go_client).
# go vet (the module's agent for 309 and 310 too), then
# the module's own tests (go test) against a fresh node, then the example:
# a fenced counter under four goroutines, a short lease kept by renewals,
# a lost lease when an administrator takes the lock, and a timeout that
# leaves nothing queued.
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

my $gopath = go_client();
require_tool($gopath, 'go and pgx v4 (golang-go, golang-github-jackc-pgx-v4-dev)');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $bin = "$tmp/lockq-example";
for my $cmd ([ 'vet', 'lockq', 'lockq/tools/agent', 'lockq-example' ], [ 'build', '-o', $bin, 'lockq-example' ])
{
	my ($rc, $out) = go_run(@$cmd);
	is($rc, 0, "go $cmd->[0]: the module, its fault-matrix agent and the example") or diag($out);
}
my ($out, $err) = ('', '');
IPC::Run::run([ 'gofmt', '-l', "$gopath/src/lockq", "$gopath/src/lockq-example" ], '>', \$out, '2>', \$err);
is($? >> 8, 0, 'gofmt runs') or diag($err);
is($out, '', 'gofmt has nothing to change');
my $rc;

# over TCP, as applications connect: a terminated backend's connection
# then fails with the server's 57P01 when next used (over a Unix socket,
# with a broken pipe)
my $node = lockq_node('golang', conf => "listen_addresses = '127.0.0.1'\n");
my $dsn = 'host=127.0.0.1 port=' . $node->port . ' dbname=postgres';

{
	local $ENV{LOCKQ_TEST_DSN} = $dsn;
	($rc, $out) = go_run('test', '-count=1', '-v', 'lockq');
	is($rc, 0, 'go test lockq against the node') or diag($out);
	for my $t (qw(TestFencedCounter TestRenewExtendRemaining TestLostLease TestTryTimeoutForget TestListenerReconnects
		  TestPoolBackendsTerminated))
	{
		like($out, qr/^--- PASS: $t /m, "$t ran and passed");
	}
}

# example(args...) runs it to the end: (exit status, output)
sub example
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $bin, '-dsn', $dsn, @_ ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out . $err);
}

($rc, $out) = example('-workers', 4, '-iterations', 25);
is($rc, 0, 'fenced counter: exit status');
like($out, qr/^counter 100 \(expected 100\)$/m, 'fenced counter: no lost update');

($rc, $out) = example('-hold', '4s', '-ttl', '1500ms');
is($rc, 0, 'a 1.5 s lease held for 4 s: exit status');
like($out, qr/still held after the hold: true/, 'renewals kept it');

# an administrator takes the lock from under a holder
{
	my ($in, $hout, $herr) = ('', '', '');
	my $h = IPC::Run::start([ $bin, '-dsn', $dsn, '-hold', '60s' ],
		'<', \$in, '>', \$hout, '2>', \$herr,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$h->pump until $hout =~ /holding/;
	is($node->safe_psql('postgres', "SELECT lockq_force_release('lockq-example')"),
		't', 'an administrator forces the lock free');
	$h->finish;
	is($? >> 8, 76, 'the holder reports the lost lease (exit 76)') or diag($hout . $herr);
	like($hout, qr/still held after the hold: false\nlease lost/, 'at once, not after its hold');
}

$node->safe_psql('postgres', "SELECT lockq_try('lockq-example', 'other', '1 hour')");
($rc, $out) = example('-timeout', '500ms');
is($rc, 75, 'a held lock: not granted within the timeout (exit 75)') or diag($out);
is($node->safe_psql('postgres', 'SELECT count(*) FROM lockq_waiters'), '0',
	'the timed-out wait left the queue');
$node->safe_psql('postgres', "SELECT lockq_release('lockq-example', 'other')");

is($node->safe_psql('postgres', "SELECT holders || '/' || waiters FROM lockq_stats"),
	'0/0', 'nothing left held or queued');
$node->stop;
done_testing();

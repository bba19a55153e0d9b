# The Go example (examples/go, pgx v4) built offline against Debian's
# golang-github-jackc-pgx-v4-dev (GOPATH mode, /usr/share/gocode) and run
# against a fresh node: a fenced counter under four goroutines, a short
# lease kept by renewals, a lost lease when an administrator takes the
# lock, and a timeout that leaves nothing queued.
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

my $gocode = '/usr/share/gocode';
require_tool(system('go version >/dev/null 2>&1') == 0
	  && -d "$gocode/src/github.com/jackc/pgx/v4/pgxpool",
	'go and pgx v4 (golang-go, golang-github-jackc-pgx-v4-dev)');

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $bin = "$tmp/lockq-example";
# offline: Debian's sources only; the build cache persists where it can
my $cache = ($ENV{HOME} && -w $ENV{HOME}) ? "$ENV{HOME}/.cache/go-build" : "$tmp/go-build";
my $go_env = sub {
	chdir "$ENV{TESTDIR}/examples/go" or die $!;
	@ENV{qw(GO111MODULE GOPATH GOCACHE GOPROXY GOFLAGS)} =
	  ('off', $gocode, $cache, 'off', '');
};
for my $cmd ([ 'go', 'vet', 'main.go' ], [ 'go', 'build', '-o', $bin, 'main.go' ])
{
	my ($out, $err) = ('', '');
	IPC::Run::run($cmd, '>', \$out, '2>', \$err, init => $go_env,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	is($? >> 8, 0, "@$cmd[0..1] examples/go") or diag($out . $err);
}

my $node = lockq_node('golang');
my $dsn = $node->connstr('postgres');

# example(args...) runs it to the end: (exit status, output)
sub example
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $bin, '-dsn', $dsn, @_ ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out . $err);
}

my ($rc, $out) = example('-workers', 4, '-iterations', 25);
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

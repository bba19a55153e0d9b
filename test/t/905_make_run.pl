# make run (test/demo.sh), with the lockq installed already
# (LOCKQ_DEMO_NO_BUILD=1) in a directory of its own.  Checked:
#  * it starts a cluster, shows FIFO grants with increasing tokens and a
#    lease passing to a waiter, and leaves the cluster running;
#  * a second run stops that cluster and starts a new one;
#  * pointed at a directory it did not make (another cluster's), it
#    refuses before it touches anything: that cluster keeps running and
#    its directory keeps its files (fails if make run stops or removes
#    what it did not start).
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

my $top = $ENV{TESTDIR};
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $dir = PostgreSQL::Test::Utils::tempdir . '/demo';

# demo(dir): runs make run's script; returns (exit status, stdout, stderr).
sub demo
{
	my ($d) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PG_CONFIG} = "$bindir/pg_config";
	local $ENV{LOCKQ_DEMO_NO_BUILD} = 1;
	local $ENV{LOCKQ_DEMO_DIR} = $d;
	local $ENV{LOCKQ_DEMO_PORT} = PostgreSQL::Test::Cluster::get_free_port();
	IPC::Run::run([ "$top/test/demo.sh" ], '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	note "stderr: $err" if $err ne '';
	return ($? >> 8, $out, $err);
}

# postmaster(data): the pid in data/postmaster.pid, or undef.
sub postmaster
{
	my ($data) = @_;
	open(my $fh, '<', "$data/postmaster.pid") or return undef;
	my $pid = <$fh>;
	close($fh);
	chomp $pid;
	return $pid;
}

my ($rc, $out) = demo($dir);
is($rc, 0, 'make run succeeds');
like($out, qr/OK: granted in arrival order, tokens strictly increasing/,
	'it shows FIFO grants with increasing tokens');
like($out, qr/standby-worker got the lock \d+ ms later/,
	'and a lease passing to a waiter');
my $first = postmaster("$dir/data");
ok(defined $first && kill(0, $first), 'its cluster is left running');
ok(-e "$dir/.lockq-demo", 'its directory is marked as made by make run');

($rc, $out) = demo($dir);
is($rc, 0, 'a second make run succeeds');
ok(!kill(0, $first), 'it stopped the first demo cluster');
my $second = postmaster("$dir/data");
ok(defined $second && $second != $first && kill(0, $second),
	'and left a new one running');
system("$bindir/pg_ctl", '-D', "$dir/data", '-m', 'fast', '-w', 'stop') == 0
  or die 'cannot stop the demo cluster';

# a cluster make run did not start, in the directory it is told to use
my $node = PostgreSQL::Test::Cluster->new('foreign');
$node->init;
$node->start;
my $foreign = $node->basedir;
my $err;
($rc, $out, $err) = demo($foreign);
isnt($rc, 0, 'make run pointed at a directory it did not make fails');
like($err, qr/was not made by make run; leaving it alone/, 'and says why');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'that cluster still runs');
ok(-e $node->data_dir . '/PG_VERSION' && !-e "$foreign/.lockq-demo",
	'and its directory is as it was');

$node->stop;
done_testing();

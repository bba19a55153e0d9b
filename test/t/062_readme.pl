# README's psql session ("A session in psql") against a fresh cluster with
# lockq preloaded: every statement answers what README shows (tokens,
# leases, the timeout error, the fenced write).  The session is read from
# README.md itself, so README and this test cannot drift apart.  make
# test-deb runs the same session against the installed Debian packages
# (test/readme-session.pl).
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
use LockqReadme;

my @steps = readme_session("$ENV{TESTDIR}/README.md");
cmp_ok(scalar(@steps), '>=', 8, 'README has a psql session');

# README's session creates the extension itself
my $node = lockq_node('readme', no_extension => 1);
my @psql = ('psql', '-d', $node->connstr('postgres'));
my %tokens;
for my $step (@steps)
{
	my ($ok, $out) = run_step(\@psql, $step, \%tokens);
	my ($first) = split /\n/, $step->{sql};
	ok($ok, "README: $first")
	  or diag("psql printed:\n$out\nREADME shows:\n" . join("\n", @{ $step->{out} }));
}

$node->stop;
done_testing();

# The documents' examples against a fresh cluster with lockq preloaded.
#
# README's psql session ("A session in psql"): every statement answers what
# README shows (tokens, leases, the timeout error, the fenced write).  The
# session is read from README.md itself, so README and this test cannot
# drift apart.  make test-deb runs the same session against the installed
# Debian packages (test/readme-session.pl).
#
# Every ```sql block of README.md, doc/ (doc/design/ too) and the clients'
# READMEs: run by psql as written, with ON_ERROR_STOP, as a superuser in
# lockq.database, after a setup that makes the tables and roles the
# examples name (account, report; the roles reporting and ops).  The other
# blocks are fragments of programs (C, Python, JavaScript, Go), shell
# commands that need what only other tests have (the exporter: TAP
# 904_prometheus; Patroni: 119_patroni) or output.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Find;
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

# the sql blocks of every document
my @docs = ("$ENV{TESTDIR}/README.md", glob("$ENV{TESTDIR}/client/*/README.md"));
find(sub { push @docs, $File::Find::name if /\.md$/ }, "$ENV{TESTDIR}/doc")
  if -d "$ENV{TESTDIR}/doc";
my @blocks;
for my $doc (sort @docs)
{
	open my $fh, '<', $doc or die "$doc: $!";
	my ($block, $at);
	while (my $line = <$fh>)
	{
		if (defined $block)
		{
			if ($line =~ /^```\s*$/)
			{
				push @blocks, { doc => $doc =~ s{^\Q$ENV{TESTDIR}\E/}{}r, line => $at, sql => $block };
				undef $block;
			}
			else
			{
				$block .= $line;
			}
		}
		elsif ($line =~ /^```sql\s*$/)
		{
			($block, $at) = ('', $.);
		}
	}
	close $fh;
}
cmp_ok(scalar(@blocks), '>=', 2, 'the documents have sql examples');

$node->safe_psql('postgres', q{
	CREATE TABLE IF NOT EXISTS report (day date, host text);
	CREATE TABLE account (id int PRIMARY KEY, balance numeric);
	INSERT INTO account VALUES (42, 100);
	CREATE ROLE reporting;
	CREATE ROLE ops;
});
for my $b (@blocks)
{
	my ($ret, $out, $err) = $node->psql('postgres', $b->{sql},
		extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
	is($ret, 0, "$b->{doc}:$b->{line}: the sql block runs") or diag("$b->{sql}\n$err");
}
is($node->safe_psql('postgres', 'SELECT balance FROM account WHERE id = 42'), '90',
	'doc/sql.md: the fenced write was made while the lease was held');
is($node->safe_psql('postgres', 'SELECT count(*) FROM lockq.lockq_locks'), '0',
	'the examples leave nothing held');

$node->stop;
done_testing();

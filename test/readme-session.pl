#!/usr/bin/perl
#
# test/readme-session.pl README PSQL [ARG...] -- runs README's psql session
# ("A session in psql") with the command PSQL ARG... (say psql -h DIR -p
# PORT -U postgres -d postgres), against a fresh cluster with lockq
# preloaded and the extension not yet created, and checks that psql
# answers what README shows.  Prints each step; exits 1 if any differs.
# make test-deb runs it against the installed packages (TAP 903_doc_examples does
# the same against the test build).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/perl";
use LockqReadme;

die "usage: $0 README PSQL [ARG...]\n" unless @ARGV >= 2;
my ($readme, @psql) = @ARGV;

my @steps = readme_session($readme);
die "no psql session found in $readme\n" unless @steps;
my $failed = 0;
my %tokens;
for my $step (@steps)
{
	my ($ok, $out) = run_step(\@psql, $step, \%tokens);
	print "=# $step->{sql}\n$out";
	next if $ok;
	print "*** README shows:\n", map { "$_\n" } @{ $step->{out} };
	$failed++;
}
printf "%d of %d statements of README's session %s\n", scalar(@steps) - $failed,
  scalar(@steps), $failed ? "answered as shown" : "answered as shown: ok";
exit($failed ? 1 : 0);

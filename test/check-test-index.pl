#!/usr/bin/perl
#
# test/check-test-index.pl -- every test and fault point is in test/README.md.
#
#	test/check-test-index.pl [DIR]
#
# test/README.md is the index of lockq's tests: what each one checks and
# which claim it would catch broken.  This check fails, naming what is
# missing, when a TAP test (test/t/NNN_name.pl), an isolation spec
# (test/specs/name.spec), a regress test (sql/lockq_name.sql, not an
# install or upgrade script) or a fault-injection point (LQ_FAULT("name")
# in src/) is not named there in backquotes.  Run by make test (make
# check-test-index).
#
# Portions Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
#
# IDENTIFICATION
#		test/check-test-index.pl
#
use strict;
use warnings;

my $dir = shift // '.';
chdir $dir or die "check-test-index: cannot enter $dir: $!\n";

open my $fh, '<', 'test/README.md' or die "check-test-index: test/README.md: $!\n";
my $index = do { local $/; <$fh> };
close $fh;
my %named = map { $_ => 1 } ($index =~ /`([^`\s]+)`/g);

my @missing;
for my $f (sort glob('test/t/*.pl'))
{
	my ($name) = $f =~ m{test/t/(\w+)\.pl$} or next;
	push @missing, "TAP test $name ($f)" unless $named{$name};
}
for my $f (sort glob('test/specs/*.spec'))
{
	my ($name) = $f =~ m{test/specs/(\w+)\.spec$} or next;
	push @missing, "isolation spec $name ($f)" unless $named{$name};
}
for my $f (sort glob('sql/lockq_*.sql'))
{
	my ($name) = $f =~ m{sql/(\w+)\.sql$} or next;
	push @missing, "regress test $name ($f)" unless $named{$name};
}
my %points;
for my $f (sort glob('src/*.c'))
{
	open my $src, '<', $f or die "check-test-index: $f: $!\n";
	while (my $line = <$src>)
	{
		next if $line =~ m{^\s*(/?\*)};	# comments name the macro
		$points{$1} //= $f while $line =~ /\bLQ_FAULT\("([\w-]+)"\)/g;
	}
	close $src;
}
die "check-test-index: no fault points found in src/\n" unless %points;
for my $p (sort keys %points)
{
	push @missing, "fault point $p ($points{$p})" unless $named{$p};
}

if (@missing)
{
	print STDERR "check-test-index: not in test/README.md:\n";
	print STDERR "  $_\n" for @missing;
	exit 1;
}
my @n = map { scalar(my @f = glob($_)) } ('test/t/*.pl', 'test/specs/*.spec', 'sql/lockq_*.sql');
printf "check-test-index: %d TAP tests, %d specs, %d regress tests, %d fault points, all in test/README.md\n",
  @n, scalar(keys %points);
exit 0;

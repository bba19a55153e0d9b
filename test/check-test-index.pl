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
# in src/) is not named there in backquotes.  TAP tests are numbered by
# area (issue 25): the hundreds digit of NNN is the area, and each test
# must also be a row of the table under its area's heading in the TAP
# section ("### 1xx: ..."); two tests may not share a number.  Run by make
# test (make check-test-index).
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

# The TAP section's rows, by the area of the heading they are under.
my (%area_of, %areas, $area);
for my $line (split /\n/, $index)
{
	if ($line =~ /^##\s/ && $line !~ /^###/)
	{
		$area = undef;
	}
	elsif ($line =~ /^###\s+(\d)xx\b/)
	{
		$area = $1;
		$areas{$1} = 1;
	}
	elsif (defined $area && $line =~ /^\|\s*`(\d{3}_\w+)`\s*\|/)
	{
		$area_of{$1} = $area;
	}
}

my @missing;
my @misplaced;
my %number;
for my $f (sort glob('test/t/*.pl'))
{
	my ($name) = $f =~ m{test/t/(\w+)\.pl$} or next;
	push @missing, "TAP test $name ($f)" unless $named{$name};
	my ($num) = $name =~ /^(\d{3})_[a-z0-9_]+$/;
	if (!defined $num)
	{
		push @misplaced, "TAP test $f is not named NNN_name.pl (NNN: area and number)";
		next;
	}
	push @{ $number{$num} }, $f;
	my $want = substr($num, 0, 1);
	if (!$areas{$want})
	{
		push @misplaced, "TAP test $name: no heading \"### ${want}xx: ...\" for its area in the TAP section";
	}
	elsif (!defined $area_of{$name})
	{
		push @misplaced, "TAP test $name: no row under \"### ${want}xx\" in the TAP section";
	}
	elsif ($area_of{$name} ne $want)
	{
		push @misplaced, "TAP test $name: listed under \"### $area_of{$name}xx\", its number says ${want}xx";
	}
}
for my $num (sort keys %number)
{
	push @misplaced, "TAP tests share the number $num: @{ $number{$num} }"
	  if @{ $number{$num} } > 1;
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

if (@missing || @misplaced)
{
	if (@missing)
	{
		print STDERR "check-test-index: not in test/README.md:\n";
		print STDERR "  $_\n" for @missing;
	}
	if (@misplaced)
	{
		print STDERR "check-test-index: TAP tests and their areas (test/README.md, TAP):\n";
		print STDERR "  $_\n" for @misplaced;
	}
	exit 1;
}
my @n = map { scalar(my @f = glob($_)) } ('test/t/*.pl', 'test/specs/*.spec', 'sql/lockq_*.sql');
printf "check-test-index: %d TAP tests (each under its area), %d specs, %d regress tests, %d fault points, all in test/README.md\n",
  @n, scalar(keys %points);
exit 0;

#!/usr/bin/perl
#
# test/check-modules.pl -- lockq's modules depend on each other in one
# direction only.
#
#	test/check-modules.pl [DIR]
#
# A module is a file src/lockq*.c with its header src/lockq*.h (lockq.h,
# the shared vocabulary, belongs to no module).  Module A depends on B when
# A's .c or .h includes B's header, or when A's object file uses a function
# or variable that B's object file defines (nm).  The check fails, naming
# the modules, when these dependencies form a cycle: a module's calls must
# never lead back to it (DESIGN.md, "The modules").  Run after a build, by
# make test (make check-modules).
#
# Portions Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
#
# IDENTIFICATION
#		test/check-modules.pl
#
use strict;
use warnings;

my $dir = shift // '.';
chdir $dir or die "check-modules: cannot enter $dir: $!\n";

my @modules = map { m{src/(lockq\w*)\.c$} ? $1 : () } glob('src/lockq*.c');
my %is_module = map { $_ => 1 } @modules;
my %deps;    # module -> { module -> what }

sub add_dep
{
	my ($from, $to, $why) = @_;
	return if $from eq $to || !$is_module{$to};
	$deps{$from}{$to} //= $why;
	return;
}

# includes
for my $m (@modules)
{
	# lockq.h is the shared vocabulary, not the header of lockq.c
	for my $file ("src/$m.c", $m eq 'lockq' ? () : ("src/$m.h"))
	{
		next unless -e $file;
		open my $fh, '<', $file or die "check-modules: $file: $!\n";
		while (<$fh>)
		{
			add_dep($m, $1, "includes $1.h")
			  if /^\s*#\s*include\s+"(lockq\w*)\.h"/ && $1 ne 'lockq';
		}
		close $fh;
	}
}

# symbols
my %defined_in;
my %undefined;
for my $m (@modules)
{
	my $obj = "src/$m.o";
	die "check-modules: $obj is missing (build first)\n" unless -e $obj;
	for (`nm -g $obj`)
	{
		if (/^\s+U\s+(\S+)/)
		{
			push @{ $undefined{$m} }, $1;
		}
		elsif (/^[0-9a-f]+\s+[A-Z]\s+(\S+)/)
		{
			$defined_in{$1} = $m;
		}
	}
	die "check-modules: nm failed on $obj\n" if $?;
}
for my $m (@modules)
{
	for my $sym (@{ $undefined{$m} // [] })
	{
		my $d = $defined_in{$sym};
		add_dep($m, $d, "uses $sym") if defined $d;
	}
}

# cycles: Tarjan's strongly connected components
my ($index, @stack, %on, %idx, %low, @cycles) = (0);

sub strong
{
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on{$v} = 1;
	for my $w (sort keys %{ $deps{$v} // {} })
	{
		if (!defined $idx{$w})
		{
			strong($w);
			$low{$v} = $low{$w} if $low{$w} < $low{$v};
		}
		elsif ($on{$w})
		{
			$low{$v} = $idx{$w} if $idx{$w} < $low{$v};
		}
	}
	if ($low{$v} == $idx{$v})
	{
		my @scc;
		my $w;
		do
		{
			$w = pop @stack;
			delete $on{$w};
			push @scc, $w;
		} while ($w ne $v);
		push @cycles, [ sort @scc ] if @scc > 1;
	}
	return;
}
strong($_) for grep { !defined $idx{$_} } sort @modules;

if (@cycles)
{
	for my $c (@cycles)
	{
		my %in = map { $_ => 1 } @$c;
		print STDERR "check-modules: these modules depend on each other in a cycle: @$c\n";
		for my $a (@$c)
		{
			for my $b (sort keys %{ $deps{$a} })
			{
				print STDERR "  $a -> $b ($deps{$a}{$b})\n" if $in{$b};
			}
		}
	}
	exit 1;
}
my $edges = 0;
$edges += keys %{ $deps{$_} // {} } for @modules;
print "check-modules: " . scalar(@modules) . " modules, $edges dependencies, no cycle\n";
exit 0;

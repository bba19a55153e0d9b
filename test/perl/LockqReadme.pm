# test/perl/LockqReadme.pm
#
# The psql session of README.md ("A session in psql"), as steps that can be
# run: each statement (the lines after "=# ", with the indented lines that
# continue it) and the lines README shows psql answering.  Used by TAP
# 903_doc_examples (make test, against the test build) and by
# test/readme-session.pl (make test-deb, against the installed packages).
# Needs nothing outside Perl's core.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

package LockqReadme;

use strict;
use warnings;

use IPC::Open3;

use Exporter 'import';
our @EXPORT = qw(readme_session run_step);

# readme_session(path) returns the steps of the session, in order: hashes
# with sql (the statement) and out (README's lines of psql's answer).
sub readme_session
{
	my ($path) = @_;
	my ($in_section, $in_block) = (0, 0);
	my @steps;

	open(my $fh, '<', $path) or die "cannot open $path: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		if ($line =~ /^## /)
		{
			$in_section = $line eq '## A session in psql';
			next;
		}
		next unless $in_section;
		if ($line =~ /^```/)
		{
			last if $in_block;
			$in_block = 1;
			next;
		}
		next unless $in_block;
		if ($line =~ /^=# (.*)$/)
		{
			push @steps, { sql => $1, out => [] };
		}
		elsif (@steps && $line =~ /^   \S/ && $steps[-1]{sql} !~ /;\s*(--.*)?$/)
		{
			$steps[-1]{sql} .= "\n$line";
		}
		elsif (@steps)
		{
			push @{ $steps[-1]{out} }, $line;
		}
	}
	close $fh;
	return @steps;
}

# _lines(text) are the non-blank lines of text, without trailing blanks.
sub _lines
{
	my ($text) = @_;
	return grep { $_ ne '' } map { s/\s+$//r } split /\n/, $text;
}

# run_step(psql, step, tokens) runs the step's statement with the command
# psql (an array: the program and its connection arguments) in psql's
# default format, without row-count footers.  Returns (ok, what psql
# printed, on stdout and stderr).  A step for which README shows no answer
# only has to succeed; otherwise psql's non-blank lines must be README's,
# trailing blanks aside.  Tokens start at the clock, so README's
# are examples: tokens (a hash, kept across the steps of a session) maps
# each of README's tokens (a number of 13 digits or more) to the one this
# run got where README shows it, and README's token is replaced by it in
# later statements and answers.
sub run_step
{
	my ($psql, $step, $tokens) = @_;
	$tokens //= {};
	my $sql = _map_tokens($step->{sql}, $tokens);
	my $out = '';
	my $pid = open3(my $in, my $fh, undef, @$psql, '-X', '-P', 'footer=off', '-c',
		$sql);
	close $in;
	{
		local $/;
		$out = <$fh> // '';
	}
	waitpid($pid, 0);
	my $status = $? >> 8;
	my @want = _lines(_map_tokens(join("\n", @{ $step->{out} }), $tokens));
	my @got = _lines($out);
	my @want_tokens = map { /(\d{13,})/g } @want;
	my @got_tokens = map { /(\d{13,})/g } @got;
	if (@want_tokens && @want_tokens == @got_tokens)
	{
		my %new = %$tokens;
		@new{@want_tokens} = @got_tokens;
		@want = _lines(_map_tokens(join("\n", @{ $step->{out} }), \%new));
		%$tokens = %new if join("\n", @want) eq join("\n", @got);
	}
	my $ok = @want
	  ? join("\n", @want) eq join("\n", @got)
	  : $status == 0;
	return ($ok, $out);
}

# _map_tokens(text, tokens) replaces README's tokens in text by this run's.
sub _map_tokens
{
	my ($text, $tokens) = @_;
	$text =~ s/(\d{13,})/$tokens->{$1} \/\/ $1/ge;
	return $text;
}

1;

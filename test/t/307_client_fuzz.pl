# The input parsers of liblockq and of the lockq CLI under libFuzzer
# (client/fuzz/): durations (lockqc_parse_duration), the lock server's
# NOTIFY payloads (lockqc_parse_notice), what lockqc_connect does with a
# connection string, and the CLI's command lines.  Each target is built
# with clang, AddressSanitizer and UndefinedBehaviorSanitizer, replayed
# over its seed corpus (which keeps the inputs of the bugs found so far,
# such as a NOTIFY token of INT64_MAX that was rejected) and fuzzed for
# 10 seconds.  A crash, a leak, undefined behaviour, a hang or a failed
# property check (the targets compare with reference parsers and abort)
# makes the run exit non-zero and leave an artifact: every run must exit
# with 0, leave none, and have actually run inputs.  No PostgreSQL server
# is involved.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $fuzzdir = "$ENV{TESTDIR}/client/fuzz";
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $build = "$tmp/build";
my $seconds = 10;
my @targets = qw(fuzz_duration fuzz_notify fuzz_conninfo fuzz_cli);

# The makes below are ours, not part of the make that runs this test.
delete @ENV{qw(MAKEFLAGS MFLAGS MAKELEVEL)};

# run_cmd(timeout, command...) returns (exit status, stdout, stderr); the
# status is -1 when the command could not be run or timed out.
sub run_cmd
{
	my ($timeout, @cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	return (-1, $out, $err . ($@ // '')) unless $ok;
	return ($? >> 8, $out, $err);
}

# the last lines of a fuzzer's report, for diagnostics
sub tail_lines
{
	my ($text, $n) = @_;
	my @lines = split /\n/, $text;
	splice(@lines, 0, @lines - $n) if @lines > $n;
	return join("\n", @lines);
}

# --- is libFuzzer there? -------------------------------------------------------
PostgreSQL::Test::Utils::append_to_file("$tmp/probe.c",
	"int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n"
	  . "int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n");
my ($rc, $out, $err) = run_cmd(300, 'clang', '-fsanitize=fuzzer,address,undefined',
	'-o', "$tmp/probe", "$tmp/probe.c");
require_tool($rc == 0, 'clang with libFuzzer is not available (Debian packages clang and '
	  . "libclang-rt-dev): $err");

# --- build ---------------------------------------------------------------------
($rc, $out, $err) = run_cmd(900, 'make', '-s', '-C', $fuzzdir, "BUILD=$build", 'all');
unless (is($rc, 0, 'the fuzz targets build'))
{
	diag(tail_lines($err, 40));
	done_testing();
	exit;
}

for my $t (@targets)
{
	# --- the seed corpus, input by input -------------------------------------------
	my @seeds = glob("$fuzzdir/corpus/$t/*");
	cmp_ok(scalar(@seeds), '>=', 10, "$t has a seed corpus");
	($rc, $out, $err) = run_cmd(300, 'make', '-s', '-C', $fuzzdir, "BUILD=$build", "check-$t");
	is($rc, 0, "$t: every seed passes") or diag(tail_lines($err, 40));
	my $executed = () = $err =~ m{^Executed corpus/\Q$t\E/}mg;
	is($executed, scalar(@seeds), "$t: all seeds were run");

	# --- fuzzing -------------------------------------------------------------------
	($rc, $out, $err) = run_cmd(300, 'make', '-s', '-C', $fuzzdir, "BUILD=$build",
		"FUZZ_SECONDS=$seconds", "run-$t");
	is($rc, 0, "$t: $seconds s of fuzzing end with status 0") or diag(tail_lines($err, 60));
	my @artifacts = glob("$build/artifacts/$t/*");
	is_deeply(\@artifacts, [], "$t: no crash, leak or timeout artifact");
	my ($runs) = $err =~ /^stat::number_of_executed_units:\s*(\d+)/m;
	my ($rate) = $err =~ /^stat::average_exec_per_sec:\s*(\d+)/m;
	ok(defined $runs && $runs >= 1000,
		"$t: inputs were fuzzed (" . ($runs // 'none') . ' runs, ' . ($rate // '?') . '/s)');
}

done_testing();

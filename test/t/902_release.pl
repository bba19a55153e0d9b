# What a release carries: one version everywhere (lockq.control's
# default_version in the install script's name, META.json for PGXN,
# CHANGELOG.md, lockq --version, lockq.pc, the Node package), META.json
# valid JSON with what PGXN's meta-spec 1.0.0 requires, and the license:
# LICENSE and a license line in every source file.  No server needed.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Find;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use LockqTest;

my $top = $ENV{TESTDIR};
my $lockq = "$top/client/lockq";
require_tool(-x $lockq, "$lockq not built");

my ($version) =
  slurp_file("$top/lockq.control") =~ /^default_version\s*=\s*'([^']*)'/m;
ok(defined $version, "lockq.control has a default_version ($version)");
ok(-f "$top/sql/lockq--$version.sql", "its install script exists");
# PGXN and npm want three numbers
my $semver = $version =~ /^\d+\.\d+$/ ? "$version.0" : $version;

# --- META.json ------------------------------------------------------------
my $meta = eval { JSON::PP->new->decode(slurp_file("$top/META.json")) };
ok($meta, 'META.json is valid JSON') or diag($@);
$meta //= {};
is($meta->{'meta-spec'}{version}, '1.0.0', 'META.json follows meta-spec 1.0.0');
for my $key (qw(name abstract version maintainer license provides))
{
	ok(defined $meta->{$key}, "META.json has $key");
}
is($meta->{name}, 'lockq', 'META.json: name');
is($meta->{version}, $semver, 'META.json: the distribution version is lockq.control\'s');
is($meta->{license}, 'postgresql', 'META.json: the PostgreSQL License');
my $ext = $meta->{provides}{lockq} // {};
is($ext->{version}, $semver, 'META.json: the extension version is lockq.control\'s');
ok(defined $ext->{file} && -f "$top/$ext->{file}", "META.json: provides names a file that exists");
like($meta->{prereqs}{runtime}{requires}{PostgreSQL} // '', qr/15\.0\.0/,
	'META.json: requires PostgreSQL 15');

# --- the other places the version appears -----------------------------------
my $changelog = slurp_file("$top/CHANGELOG.md");
# every version an install or upgrade script names
my %versions = map { $_ => 1 }
  map { /lockq--(.*)\.sql$/ ? split(/--/, $1) : () } glob("$top/sql/lockq--*.sql");
for my $v (sort keys %versions)
{
	like($changelog, qr/^## \Q$v\E$/m, "CHANGELOG.md has a section for $v");
}
my ($out, $err) = ('', '');
IPC::Run::run([ $lockq, '--version' ], '>', \$out, '2>', \$err);
is($?, 0, 'lockq --version exits 0');
is($out, "lockq $version\n", 'lockq --version prints the version');
like(slurp_file("$top/client/lockq.pc"), qr/^Version: \Q$version\E$/m, 'lockq.pc has it');

# the man page names every option of lockq --help, and renders cleanly
IPC::Run::run([ $lockq, '--help' ], '>', \$out, '2>', \$err);
my %opts = map { $_ => 1 } ($out =~ /(--[a-z][a-z-]+)/g);
my $man = slurp_file("$top/client/lockq.1");
my @missing = grep { my $o = $_; $o =~ s/-/\\-/g; $man !~ /\Q$o\E\b/ } sort keys %opts;
cmp_ok(scalar(keys %opts), '>', 10, 'lockq --help names its options');
is(join(' ', @missing), '', 'lockq.1 names every option of lockq --help');
SKIP:
{
	skip 'no groff', 1 unless system('groff -v >/dev/null 2>&1') == 0;
	my $warn = '';
	IPC::Run::run([ 'groff', '-man', '-Tutf8', '-ww', '-z', "$top/client/lockq.1" ], '2>', \$warn);
	is($warn, '', 'groff renders lockq.1 without a warning');
}
my $node_pkg = JSON::PP->new->decode(slurp_file("$top/client/node/package.json"));
is($node_pkg->{version}, $semver, 'so does the Node package');
is($node_pkg->{license}, 'PostgreSQL', 'under the PostgreSQL License');
like(slurp_file("$top/client/python/pyproject.toml"), qr/^version = "\Q$semver\E"$/m,
	'so does the Python package');
like(slurp_file("$top/client/node/package-lock.json"), qr/^  "version": "\Q$semver\E",$/m,
	'and the Node lock file');
like(slurp_file("$top/examples/go/go.mod"), qr/^\s*lockq v\Q$semver\E$/m,
	'the Go example requires the Go module of this version');

# --- the license ------------------------------------------------------------
like(slurp_file("$top/LICENSE"), qr/^PostgreSQL License\n\nCopyright \(c\) \d{4}, lockq developers/,
	'LICENSE is the PostgreSQL License');
my @unlicensed;
my $checked = 0;
find(
	{
		wanted => sub {
			if (-d $_)
			{
				# what builds, tests and packaging make, and what others wrote
				$File::Find::prune = 1
				  if /^(tmp_check|tmp_check_iso|tmp_old|results|output_iso|node_modules|__pycache__|build|build-deb|\.git)$/
				  || ($File::Find::dir eq "$top/debian" && !/^(tests|source)$/);
				return;
			}
			return unless /\.(c|h|sql|pl|pm|sh|py|js|ts|go|spec|mk|conf|yaml|toml)$/ || $_ eq 'Makefile' || $_ eq 'rules';
			$checked++;
			push @unlicensed, $File::Find::name
			  unless slurp_file($_) =~ /released under the PostgreSQL License/;
		},
	},
	$top);
cmp_ok($checked, '>', 100, "source files found ($checked)");
is(join("\n", @unlicensed), '', 'every source file carries the license line');

done_testing();

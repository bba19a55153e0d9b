#!/usr/bin/env bash
#
# test/old-version.sh VERSION DIR -- the source of an earlier lockq release,
# from git history, for the upgrade test (test/t/901_upgrade.pl).
#
# The release is the newest commit on the first-parent line of HEAD (main's
# own history, not a merged branch's) whose lockq.control says
# default_version = 'VERSION'.  Writes DIR/lockq-VERSION.tar (git archive
# of that commit) and DIR/lockq-VERSION.commit (its id).  Fails with a
# message, and writes nothing, when the tree is not a git checkout, when the
# clone is shallow (its history is cut: run git fetch --unshallow), or when
# no such commit exists.
#
# make test runs it before it copies the tree without .git for the test
# user; 901_upgrade runs it itself when it finds neither that output nor
# more than a checkout.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 VERSION DIR" >&2; exit 2; }
version=$1
dir=$2
cd "$(dirname "$0")/.."

die() { echo "$0: $*" >&2; exit 1; }

git rev-parse --git-dir >/dev/null 2>&1 ||
	die "$(pwd) is not a git checkout: lockq $version is built from git history (clone the repository)"
[ "$(git rev-parse --is-shallow-repository)" = false ] ||
	die "$(pwd) is a shallow clone: lockq $version is built from git history (run git fetch --unshallow)"

# control_version COMMIT: default_version of lockq.control at COMMIT
control_version() {
	git show "$1:lockq.control" 2>/dev/null |
		sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p"
}

# Walk the commits that changed lockq.control, newest first: when one of
# them has VERSION, the newest commit with it is the one just before the
# next newer change (or HEAD, if none).
newer=
commit=
for c in $(git rev-list --first-parent HEAD -- lockq.control); do
	if [ "$(control_version "$c")" = "$version" ]; then
		if [ -n "$newer" ]; then
			commit=$(git rev-parse "$newer^1")
		else
			commit=$(git rev-parse HEAD)
		fi
		break
	fi
	newer=$c
done
[ -n "$commit" ] || die "no commit of HEAD's history has default_version = '$version' in lockq.control"

mkdir -p "$dir"
git archive --format=tar -o "$dir/lockq-$version.tar.part" "$commit"
mv "$dir/lockq-$version.tar.part" "$dir/lockq-$version.tar"
echo "$commit" >"$dir/lockq-$version.commit"
echo "lockq $version is commit $(git log -1 --format='%h %s' "$commit")"

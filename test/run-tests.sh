#!/usr/bin/env bash
#
# test/run-tests.sh -- build lockq and run every test (make test).
#
# As root on a fresh Debian 12 machine it installs what is missing, builds
# and installs lockq, then runs the regress, isolation and TAP suites as the
# unprivileged user "lockqtest" (PostgreSQL refuses to run as root) in a
# copy of the tree.  As another user it assumes the packages are there and
# that it may write to PostgreSQL's extension directories (or has sudo).
#
# LOCKQ_TEST_SUITES limits the run: any of "modules regress isolation tap
# servers" (servers: the TAP tests that run again with two lock servers), or
# "torture" (make torture: the randomized crash test alone, for
# LOCKQ_TORTURE_SECONDS with LOCKQ_TORTURE_SEED).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

. "$here/test/setup-debian.sh"
TESTUSER=${LOCKQ_TEST_USER:-lockqtest}
SUITES=${LOCKQ_TEST_SUITES:-modules regress isolation tap servers}
log() { lq_log "$@"; }

show_failures() {
	local dir=$1
	for f in "$dir"/regression.diffs "$dir"/output_iso/regression.diffs; do
		[ -s "$f" ] && { log "$f"; cat "$f"; }
	done
	for f in "$dir"/tmp_check/log/regress_log_* ; do
		[ -f "$f" ] && grep -q "not ok\|Dubious\|died" "$f" 2>/dev/null \
			&& { log "$f (tail)"; tail -n 80 "$f"; }
	done
	return 0
}

# The tests run against the test build, with fault-injection points, and
# a test whose tools are missing fails instead of skipping (LOCKQ_MAKE_TEST).
export LOCKQ_MAKE_TEST=1
lq_install_packages
# (liblockq and the CLI too: 301_client_lib builds against the installed ones)
LQ_FAULT_INJECTION=1 LQ_INSTALL_CLIENT=1 \
	LQ_CFLAGS="-Wall -Wmissing-prototypes -Wno-unused-parameter -Werror" lq_build_install

# lq_old_versions DIR: the source of every version an upgrade script starts
# from (sql/lockq--A--B.sql), from git history, into DIR for 901_upgrade,
# which runs in a copy without .git.  Without that history (not a clone, a
# shallow clone) the test fails and says why.
lq_old_versions() {
	local f v
	for f in sql/lockq--*--*.sql; do
		v=${f#sql/lockq--}
		v=${v%%--*}
		./test/old-version.sh "$v" "$1" ||
			log "901_upgrade will fail: it needs lockq $v from git history (above)"
	done
}

targets=()
for s in $SUITES; do
	case $s in
		modules) targets+=(check-modules check-test-index) ;;
		regress) targets+=(check-regress) ;;
		isolation) targets+=(check-isolation) ;;
		tap) targets+=(check-tap) ;;
		servers) targets+=(check-tap-servers) ;;
		torture) targets+=(check-torture) ;;
		*) echo "unknown suite $s" >&2; exit 2 ;;
	esac
done

if [ "$(id -u)" -eq 0 ]; then
	lq_ensure_user "$TESTUSER"
	work=$(mktemp -d /tmp/lockq-test.XXXXXX)
	rsync -a --exclude .git "$here/" "$work/"
	lq_old_versions "$work/tmp_old"
	chown -R "$TESTUSER": "$work"
	log "running ${SUITES} as $TESTUSER in $work"
	if ! runuser -u "$TESTUSER" -- env LOCKQ_MAKE_TEST=1 \
		LOCKQ_TORTURE_SECONDS="${LOCKQ_TORTURE_SECONDS:-}" LOCKQ_TORTURE_SEED="${LOCKQ_TORTURE_SEED:-}" \
		make -C "$work" PG_CONFIG="$PG_CONFIG" FAULT_INJECTION=1 "${targets[@]}"; then
		show_failures "$work"
		log "FAILED (work tree kept in $work)"
		exit 1
	fi
	rm -rf "$work"
else
	log "running ${SUITES}"
	if ! make PG_CONFIG="$PG_CONFIG" FAULT_INJECTION=1 "${targets[@]}"; then
		show_failures "$here"
		log "FAILED"
		exit 1
	fi
fi
log "all tests passed"

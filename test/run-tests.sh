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
# LOCKQ_TEST_SUITES limits the run: any of "regress isolation tap".

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
PACKAGES="postgresql-15 postgresql-server-dev-15 libpq-dev build-essential
          libipc-run-perl faketime pgbouncer rsync"
TESTUSER=${LOCKQ_TEST_USER:-lockqtest}
SUITES=${LOCKQ_TEST_SUITES:-regress isolation tap}

log() { printf '\n=== %s\n' "$*"; }

install_packages() {
	local missing=()
	for p in $PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
			|| missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" >/dev/null
	fi
}

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

if [ "$(id -u)" -eq 0 ]; then
	install_packages
fi

log "building lockq"
make -s PG_CONFIG="$PG_CONFIG" PG_CFLAGS="-Wall -Wmissing-prototypes -Wno-unused-parameter -Werror"
if [ -w "$($PG_CONFIG --pkglibdir)" ]; then
	make -s PG_CONFIG="$PG_CONFIG" install
else
	sudo make -s PG_CONFIG="$PG_CONFIG" install
fi

targets=()
for s in $SUITES; do
	case $s in
		regress) targets+=(check-regress) ;;
		isolation) targets+=(check-isolation) ;;
		tap) targets+=(check-tap) ;;
		*) echo "unknown suite $s" >&2; exit 2 ;;
	esac
done

if [ "$(id -u)" -eq 0 ]; then
	id "$TESTUSER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TESTUSER"
	work=$(mktemp -d /tmp/lockq-test.XXXXXX)
	rsync -a --exclude .git "$here/" "$work/"
	chown -R "$TESTUSER": "$work"
	log "running ${SUITES} as $TESTUSER in $work"
	if ! runuser -u "$TESTUSER" -- make -C "$work" PG_CONFIG="$PG_CONFIG" "${targets[@]}"; then
		show_failures "$work"
		log "FAILED (work tree kept in $work)"
		exit 1
	fi
	rm -rf "$work"
else
	log "running ${SUITES}"
	if ! make PG_CONFIG="$PG_CONFIG" "${targets[@]}"; then
		show_failures "$here"
		log "FAILED"
		exit 1
	fi
fi
log "all tests passed"

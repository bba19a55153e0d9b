#!/usr/bin/env bash
#
# bench/run-bench.sh -- make bench: lockq against pg_advisory_lock.
#
# Builds and installs lockq, starts a temporary cluster with lockq preloaded
# and default settings (except max_connections = 300, for 256 clients), as
# an unprivileged user, runs bench/lockq_bench, and prints a Markdown
# report with the machine's facts.  The report is also written to
# bench/last-run.md, the medians to bench/last-run.dat, and gnuplot draws
# those (bench/plot.gp) into bench/last-run.svg.  Extra arguments go to
# lockq_bench (--quick, --only ...).
#
# make bench PG_CONFIG=/path/to/pg_config runs against another PostgreSQL 15
# installation than Debian's (lockq is installed into it).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. "$here/test/setup-debian.sh"

BENCHUSER=${LOCKQ_BENCH_USER:-lockqtest}
DIR=$(mktemp -d /tmp/lockq-bench.XXXXXX)
PORT=${LOCKQ_BENCH_PORT:-5498}
ARGS=("$@")
# gnuplot draws the results; any package that provides it will do
LQ_COMMAND_PACKAGES="$LQ_COMMAND_PACKAGES gnuplot:gnuplot-nox"

lq_install_packages
lq_build_install
make -s -C bench PG_CONFIG="$PG_CONFIG"

if [ "$(id -u)" -eq 0 ]; then
	lq_ensure_user "$BENCHUSER"
	chown "$BENCHUSER": "$DIR"
	as_user() { runuser -u "$BENCHUSER" -- "$@"; }
else
	as_user() { "$@"; }
fi

cleanup() {
	as_user "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT

lq_log "starting a temporary cluster in $DIR"
lq_start_cluster "$DIR" "$DIR/data" "$PORT" "max_connections = 300
search_path = '\"\$user\", public, lockq'"
as_user "$PGBIN/psql" -X -q -h "$DIR" -p "$PORT" -U postgres -d postgres \
	-c "CREATE EXTENSION lockq"

# The WAL's disk, once: what one chain of flushes can do at most (the
# durable scenario's physical limit).
fsync_line=$(cd "$DIR" && as_user "$PGBIN/pg_test_fsync" -s 1 -f "$DIR/fsync.test" 2>/dev/null \
	| awk '/^ *fdatasync/ {print $2, $4; exit}')
read -r fsync_ops fsync_us <<<"$fsync_line"
fsync="$fsync_ops ops/s, $fsync_us usecs/op"
report=$here/bench/last-run.md
when=$(date -u '+%Y-%m-%d %H:%M UTC')
command="make bench${ARGS[*]:+ ARGS=\"${ARGS[*]}\"}"
version=$(git -C "$here" describe --always --dirty 2>/dev/null || echo '?')
{
	echo "## Benchmark run $when"
	echo
	echo "* command: \`$command\`"
	echo "* machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/^Mem:/ {print $2}') GiB memory"
	echo "* fsync: fdatasync $fsync (pg_test_fsync)"
	echo "* server: $("$PGBIN/postgres" --version), lockq $version, default settings, max_connections = 300 (the durable scenario: lockq.synchronous_grants = on)"
	echo
	as_user "$here/bench/lockq_bench" --data "$DIR/last-run.dat" --pgbench "$PGBIN/pgbench" \
		${fsync_us:+--fsync-us "$fsync_us"} "${ARGS[@]}" \
		"host=$DIR port=$PORT user=postgres dbname=postgres"
} | tee "$report"
lq_log "report written to $report"

# The plot (lockq_bench writes no data for --profile).
if [ -s "$DIR/last-run.dat" ]; then
	cp "$DIR/last-run.dat" "$here/bench/last-run.dat"
	command -v gnuplot >/dev/null ||
		{ echo "no gnuplot (apt-get install gnuplot-nox): no plot" >&2; exit 1; }
	gnuplot -e "data='$here/bench/last-run.dat'; svg='$here/bench/last-run.svg'; caption='${command//\'/} on $when, lockq $version, $(nproc) cores'" \
		"$here/bench/plot.gp"
	lq_log "plot written to $here/bench/last-run.svg"
fi

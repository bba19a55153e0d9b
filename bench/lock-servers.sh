#!/bin/bash
#
# bench/lock-servers.sh -- lockq_bench at several lockq.lock_servers in one
# run, from the bundle of ../shared/devbench (unpacked in /tmp/lqdev), for a
# machine with more cores and little time (issue 23, step 4 of
# doc/design/scaling.md: pick lockq.lock_servers' default from the cores).
#
#   LOCK_SERVERS="1 2 4 8" OUT=/some/dir bash bench/lock-servers.sh [lockq_bench args]
#
# For each N it makes a throw-away cluster (default settings,
# max_connections = 600, lockq.lock_servers = N), runs lockq_bench with the
# given arguments, and leaves the report in $OUT/lock-servers-N.md, its
# stderr and the server log's tail beside it, and the machine in
# $OUT/machine.txt.  As root, the server runs as nobody (the bundle's
# asuser), since PostgreSQL refuses to run as root.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -u
bundle=${LQDEV:-/tmp/lqdev}
pgbin=$bundle/usr/lib/postgresql/15/bin
out=${OUT:-/tmp/lqout}
counts=${LOCK_SERVERS:-1 2 4 8}
mkdir -p "$out"
[ -x "$pgbin/postgres" ] || { echo "no bundle in $bundle (../shared/devbench/README.md)" >&2; exit 2; }

{
	echo "cores: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo
	free -g | head -2
	uname -r
} > "$out/machine.txt"

as_server=()
[ "$(id -u)" = 0 ] && as_server=("$bundle/bin/asuser" 65534 65534)
dir=/tmp/lqservers
export TZ=GMT PGTZ=GMT HOME=$dir

status=0
for n in $counts; do
	rm -rf "$dir"; mkdir -p "$dir"; chmod 777 "$dir"
	"${as_server[@]}" "$pgbin/initdb" -D "$dir/data" -U postgres --locale=C -E UTF8 \
		--auth=trust > "$out/initdb-$n.log" 2>&1 || { tail "$out/initdb-$n.log"; exit 1; }
	cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5498
max_connections = 600
shared_preload_libraries = 'lockq'
lockq.database = 'postgres'
lockq.lock_servers = $n
search_path = '"\$user", public, lockq'
jit = off
timezone = 'GMT'
log_timezone = 'GMT'
CONF
	if ! "${as_server[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start > /dev/null; then
		tail -20 "$dir/server.log"; exit 1
	fi
	"${as_server[@]}" "$pgbin/psql" -X -q -h "$dir" -p 5498 -U postgres -d postgres \
		-c 'CREATE EXTENSION lockq' || exit 1
	started=$(date +%s)
	"${as_server[@]}" "$bundle/bin/lockq_bench" --pgbench "$pgbin/pgbench" "$@" \
		"host=$dir port=5498 user=postgres dbname=postgres" \
		> "$out/lock-servers-$n.md" 2> "$out/lock-servers-$n.err"
	rc=$?
	[ $rc -eq 0 ] || status=$rc
	echo "lockq.lock_servers = $n: lockq_bench exit $rc, $(( $(date +%s) - started )) s; report: $out/lock-servers-$n.md"
	"${as_server[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop > /dev/null
	tail -c 20000 "$dir/server.log" > "$out/server-$n.log.tail"
done
exit $status

#!/usr/bin/env bash
#
# test/setup-debian.sh -- shared set-up for make test and make run.
#
# Sourced, not run.  Provides:
#   lq_install_packages [PACKAGE...]
#                         as root: apt-get install whatever is missing of
#                         PACKAGEs (default: what make test and make run
#                         need, LQ_PACKAGES)
#   lq_build_install      build lockq and install it into PostgreSQL 15
#                         (LQ_FAULT_INJECTION=1: the test build;
#                         LQ_INSTALL_CLIENT=1: liblockq and the CLI too,
#                         into /usr/local)
#   lq_ensure_user NAME   as root: create an unprivileged user if missing
#   lq_start_cluster DIR DATA PORT [CONF]
#                         initdb and start a throw-away cluster (with as_user)
# and the variables PG_CONFIG (as given in the environment, else Debian's
# PostgreSQL 15) and PGBIN (its bindir).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# (set again by lq_install_packages: on a fresh machine pg_config comes then)
PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || dirname "$PG_CONFIG")
LQ_PACKAGES="postgresql-15 postgresql-server-dev-15 libpq-dev libkrb5-dev
             build-essential libipc-run-perl faketime pgbouncer rsync valgrind
             clang libclang-rt-dev python3 python3-psycopg python3-psycopg-pool
             python3-build python3-installer mypy
             nodejs node-typescript golang-go golang-github-jackc-pgx-v4-dev
             prometheus-postgres-exporter patroni etcd-server etcd-client
             python3-etcd"
# Packages whose system service the tests must not find running (they run
# their own exporter, etcd and Patroni, on ports of their own): package:service
LQ_SERVICES_OFF="prometheus-postgres-exporter:prometheus-postgres-exporter
                 etcd-server:etcd patroni:patroni"
# Packages wanted only for a command that is missing: a Node.js from
# elsewhere (NodeSource's nodejs) brings its own npm and conflicts with
# Debian's.
LQ_COMMAND_PACKAGES="npm:npm"

lq_log() { printf '\n=== %s\n' "$*"; }

lq_install_packages() {
	local missing=() p
	[ "$(id -u)" -eq 0 ] || return 0
	if [ $# -eq 0 ]; then
		set -- $LQ_PACKAGES
		for p in $LQ_COMMAND_PACKAGES; do
			command -v "${p%%:*}" >/dev/null || missing+=("${p#*:}")
		done
	fi
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
			|| missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		lq_log "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" >/dev/null
		# the tests run the exporter, etcd and Patroni themselves: do not
		# leave the services their packages start (and enable) running
		local ps
		for ps in $LQ_SERVICES_OFF; do
			[[ " ${missing[*]} " == *" ${ps%%:*} "* ]] || continue
			if [ -d /run/systemd/system ]; then
				systemctl disable --now "${ps#*:}" >/dev/null 2>&1 || true
			elif [ -x "/etc/init.d/${ps#*:}" ]; then
				# only what the service started (its pidfile): the init
				# scripts' stop would end every process of that program,
				# a test's own etcd included
				start-stop-daemon --stop --quiet --remove-pidfile \
					--pidfile "/run/${ps#*:}.pid" >/dev/null 2>&1 || true
				update-rc.d "${ps#*:}" disable >/dev/null 2>&1 || true
			fi
		done
	fi
	PGBIN=$("$PG_CONFIG" --bindir)
}

lq_build_install() {
	lq_log "building lockq"
	local fi=FAULT_INJECTION=${LQ_FAULT_INJECTION:-0}
	local targets=(install)
	[ "${LQ_INSTALL_CLIENT:-0}" != 1 ] || targets+=(install-client)
	make -s PG_CONFIG="$PG_CONFIG" "$fi" ${LQ_CFLAGS:+PG_CFLAGS="$LQ_CFLAGS"}
	if [ -w "$($PG_CONFIG --pkglibdir)" ]; then
		make -s PG_CONFIG="$PG_CONFIG" "$fi" "${targets[@]}"
	else
		sudo make -s PG_CONFIG="$PG_CONFIG" "$fi" "${targets[@]}"
	fi
}

lq_ensure_user() {
	id "$1" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$1"
}

# lq_start_cluster DIR DATA PORT [CONF] creates a cluster in DATA with the
# caller's as_user (PostgreSQL refuses to run as root), lockq preloaded,
# reachable only through a socket in DIR on PORT, CONF (lines) appended to
# its settings, and starts it with its log in DIR/server.log.
lq_start_cluster() {
	local dir=$1 data=$2 port=$3 conf=${4:-}
	as_user "$PGBIN/initdb" -D "$data" -U postgres -A trust --no-sync >/dev/null
	cat >>"$data/postgresql.conf" <<EOC

# throw-away lockq cluster
listen_addresses = ''
port = $port
unix_socket_directories = '$dir'
shared_preload_libraries = 'lockq'
$conf
EOC
	as_user "$PGBIN/pg_ctl" -D "$data" -l "$dir/server.log" -w start >/dev/null
}

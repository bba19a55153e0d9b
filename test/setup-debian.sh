#!/usr/bin/env bash
#
# test/setup-debian.sh -- shared set-up for make test and make run.
#
# Sourced, not run.  Provides:
#   lq_install_packages   as root: apt-get install whatever is missing
#   lq_build_install      build lockq and install it into PostgreSQL 15
#   lq_ensure_user NAME   as root: create an unprivileged user if missing
# and the variables PGBIN and PG_CONFIG.

PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
LQ_PACKAGES="postgresql-15 postgresql-server-dev-15 libpq-dev libkrb5-dev
             build-essential libipc-run-perl faketime pgbouncer rsync valgrind
             clang libclang-rt-dev"

lq_log() { printf '\n=== %s\n' "$*"; }

lq_install_packages() {
	local missing=() p
	[ "$(id -u)" -eq 0 ] || return 0
	for p in $LQ_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
			|| missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		lq_log "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" >/dev/null
	fi
}

lq_build_install() {
	lq_log "building lockq"
	make -s PG_CONFIG="$PG_CONFIG" ${LQ_CFLAGS:+PG_CFLAGS="$LQ_CFLAGS"}
	if [ -w "$($PG_CONFIG --pkglibdir)" ]; then
		make -s PG_CONFIG="$PG_CONFIG" install
	else
		sudo make -s PG_CONFIG="$PG_CONFIG" install
	fi
}

lq_ensure_user() {
	id "$1" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$1"
}

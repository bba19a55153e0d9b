#!/usr/bin/env bash
#
# test/deb.sh build|test -- make deb and make test-deb.
#
#   build  builds the Debian packages of debian/ (postgresql-15-lockq,
#          liblockq2, liblockq-dev, lockq-cli, python3-lockq) with
#          dpkg-buildpackage, debhelper, pg_buildext and pybuild, in a copy of the tree (without what
#          .gitignore lists) under DEB_DIR (default build-deb), where the
#          .deb files land.  As root it first installs what the build needs
#          (LQ_DEB_BUILD_PACKAGES) when missing; they stay installed.
#   test   as root: builds them, installs them on this machine (apt-get
#          install ./*.deb), then as the unprivileged user lockqtest
#          (PostgreSQL refuses root) starts a throw-away cluster of the
#          installed PostgreSQL 15 with the packaged extension preloaded,
#          runs README's psql session against it (test/readme-session.pl),
#          and uses the packaged CLI (and its man page), a program built
#          with liblockq-dev's pkg-config file against liblockq2, and the
#          packaged Python module; it checks that the exporter's query file
#          is among the extension's examples.  Afterwards, pass or fail, it
#          purges the packages and puts back the files they replaced (a
#          make install of lockq into the same PostgreSQL, say), so that
#          the machine is left as it was (LOCKQ_DEB_KEEP=1 keeps the
#          packages installed instead).  It refuses to run when one of the
#          packages is installed already.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

# The packages are built for, and install into, Debian's PostgreSQL 15,
# whatever PG_CONFIG the environment names.
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
. "$here/test/setup-debian.sh"
log() { lq_log "$@"; }

DEB_DIR=${DEB_DIR:-build-deb}
TESTUSER=${LOCKQ_TEST_USER:-lockqtest}
LQ_DEB_BUILD_PACKAGES="build-essential debhelper dpkg-dev postgresql-server-dev-all libpq-dev rsync
                       dh-python python3-all python3-setuptools pybuild-plugin-pyproject"
# what the test needs besides the packages and what they depend on
LQ_DEB_TEST_PACKAGES="postgresql-15 build-essential pkg-config man-db"
PACKAGES="postgresql-15-lockq liblockq2 liblockq-dev lockq-cli python3-lockq"

build() {
	lq_install_packages $LQ_DEB_BUILD_PACKAGES
	log "building the Debian packages in $DEB_DIR"
	rm -rf "$DEB_DIR"
	mkdir -p "$DEB_DIR/src"
	rsync -a --exclude=/.git --exclude="/$DEB_DIR" --filter=':- .gitignore' ./ "$DEB_DIR/src/"
	# Debian's tools and interpreters only (pybuild runs "python3.11" from
	# PATH: not a pyenv's or a virtualenv's)
	if ! (cd "$DEB_DIR/src" && env -u PG_CONFIG PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		dpkg-buildpackage -b -us -uc) >"$DEB_DIR/build.log" 2>&1; then
		tail -n 60 "$DEB_DIR/build.log"
		log "FAILED (the whole log: $DEB_DIR/build.log)"
		exit 1
	fi
	rm -rf "$DEB_DIR/src"
	ls -l "$DEB_DIR"/*.deb
}

# At exit: the cluster stopped, the packages purged (installed or not:
# apt-get ignores those that are not) and the files they replaced put back.
cleanup() {
	local rc=$? path
	if [ -n "${cluster_data:-}" ] && [ -f "$cluster_data/postmaster.pid" ]; then
		as_user "$PGBIN/pg_ctl" -D "$cluster_data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	[ -z "${cluster_dir:-}" ] || rm -rf "$cluster_dir"
	if [ "${LOCKQ_DEB_KEEP:-0}" != 1 ]; then
		log "purging $PACKAGES"
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $PACKAGES >/dev/null 2>&1 || true
		if [ -n "${saved:-}" ]; then
			if [ -s "$saved.list" ]; then
				log "putting back what the packages replaced"
				while read -r path; do
					mkdir -p "$(dirname "$path")"
					cp -a "$saved$path" "$path" && echo "  $path"
				done <"$saved.list"
				ldconfig
			fi
			rm -rf "$saved" "$saved.list"
		fi
	fi
	exit $rc
}

# save_replaced DEB... copies the files of the packages that exist on this
# machine but belong to no package (a make install, make install-client)
# into $saved, listing them in $saved.list: dpkg would overwrite them
# without a word, and purging the packages would remove them.
save_replaced() {
	local deb path
	saved=$(mktemp -d /tmp/lockq-deb-saved.XXXXXX)
	: >"$saved.list"
	for deb in "$@"; do
		# regular files and symbolic links: ./usr/... (and " -> target")
		dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print substr($6, 2) }'
	done | while read -r path; do
		if [ -e "$path" ] || [ -L "$path" ]; then
			dpkg -S "$path" >/dev/null 2>&1 && continue
			mkdir -p "$saved$(dirname "$path")"
			cp -a "$path" "$saved$path"
			echo "$path" >>"$saved.list"
		fi
	done
	if [ -s "$saved.list" ]; then
		log "files the packages replace, saved to be put back afterwards"
		sed 's/^/  /' "$saved.list"
	fi
}

test_packages() {
	local multiarch out c p debs version
	[ "$(id -u)" -eq 0 ] || { echo "make test-deb installs packages: run it as root" >&2; exit 2; }
	for p in $PACKAGES; do
		if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
			echo "$p is installed: make test-deb would replace it, then purge it" >&2
			exit 2
		fi
	done
	lq_install_packages $LQ_DEB_TEST_PACKAGES
	build
	debs=()
	for p in $PACKAGES; do
		debs+=("$(cd "$DEB_DIR" && pwd)/$(cd "$DEB_DIR" && ls "${p}"_*.deb)")
	done
	trap cleanup EXIT
	save_replaced "${debs[@]}"
	log "installing the packages"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
	for f in "$("$PG_CONFIG" --pkglibdir)/lockq.so" "$("$PG_CONFIG" --sharedir)/extension/lockq.control" \
		/usr/bin/lockq /usr/include/lockq_client.h /usr/share/man/man1/lockq.1.gz \
		/usr/share/doc/postgresql-15-lockq/examples/lockq.yaml \
		/usr/lib/python3/dist-packages/lockq/__init__.py /usr/lib/python3/dist-packages/lockq/py.typed; do
		dpkg -S "$f" >/dev/null || { echo "$f does not come from a package" >&2; exit 1; }
	done

	lq_ensure_user "$TESTUSER"
	as_user() { runuser -u "$TESTUSER" -- "$@"; }
	cluster_dir=$(mktemp -d /tmp/lockq-deb.XXXXXX)
	cluster_data=$cluster_dir/data
	mkdir -p "$cluster_dir/test/perl"
	cp README.md "$cluster_dir/"
	cp test/readme-session.pl "$cluster_dir/test/"
	cp test/perl/LockqReadme.pm "$cluster_dir/test/perl/"
	chown -R "$TESTUSER": "$cluster_dir"
	log "README's psql session against the installed packages, as $TESTUSER"
	lq_start_cluster "$cluster_dir" "$cluster_data" 5496 "lockq.database = 'postgres'"
	as_user perl "$cluster_dir/test/readme-session.pl" "$cluster_dir/README.md" \
		"$PGBIN/psql" -h "$cluster_dir" -p 5496 -U postgres -d postgres

	c="host=$cluster_dir port=5496 user=postgres dbname=postgres"
	log "the lockq CLI and liblockq from the packages"
	version=$(sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" lockq.control)
	out=$(as_user /usr/bin/lockq --version)
	[ "$out" = "lockq $version" ] ||
		{ echo "lockq --version says \"$out\"" >&2; exit 1; }
	echo "$out"
	out=$(as_user /usr/bin/lockq run -d "$c" deb:cli -- sh -c 'echo "lockq run: held with token $LOCKQ_TOKEN"')
	echo "$out"
	[[ $out =~ ^"lockq run: held with token "[1-9][0-9]*$ ]] ||
		{ echo "lockq run did not run the command under the lock" >&2; exit 1; }
	# only the system's pkg-config directories (not a make install-client)
	multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
	export PKG_CONFIG_LIBDIR=/usr/lib/$multiarch/pkgconfig:/usr/share/pkgconfig
	cat >"$cluster_dir/uses_lockq.c" <<'EOF'
#include <stdio.h>
#include <lockq_client.h>
int main(int argc, char **argv)
{
	char *err = NULL;
	lockqc_conn *c = lockqc_connect(argv[1], &err);
	lockqc_handle *h;
	if (c == NULL) { fprintf(stderr, "%s\n", err); return 1; }
	if (lockqc_lock(c, "deb:lib", NULL, &h) != LOCKQC_OK) return 2;
	printf("liblockq %s: held with token %lld\n", lockqc_version(), (long long) lockqc_token(h));
	if (lockqc_unlock(h) != LOCKQC_OK) return 3;
	lockqc_disconnect(c);
	return 0;
}
EOF
	out=$(pkg-config --modversion lockq)
	echo "pkg-config --modversion lockq: $out"
	[ "$out" = "$version" ] || { echo "lockq.pc has version $out, not $version" >&2; exit 1; }
	# Built as on a machine without a make install-client in /usr/local,
	# which the compiler and the linker search before /usr/include and
	# /usr/lib: /usr/include first (-isystem), and the library's directory
	# (which pkg-config leaves out by default, as a system directory).
	# shellcheck disable=SC2046
	cc -Wall -Werror -isystem /usr/include $(pkg-config --cflags lockq) \
		-o "$cluster_dir/uses_lockq" "$cluster_dir/uses_lockq.c" \
		$(PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 pkg-config --libs lockq)
	# (ldd may name it by /lib, a link to /usr/lib)
	out=$(ldd "$cluster_dir/uses_lockq" | sed -n 's/^[[:space:]]*liblockq\.so\.2 => \([^ ]*\) .*/\1/p')
	echo "uses_lockq loads $out"
	[ -n "$out" ] && [ "$(readlink -f "$out")" = "$(readlink -f "/usr/lib/$multiarch/liblockq.so.2")" ] &&
		dpkg -S "/usr/lib/$multiarch/liblockq.so.2" | grep -q '^liblockq2:' ||
		{ echo "uses_lockq does not load liblockq2's liblockq.so.2" >&2; exit 1; }
	out=$(as_user "$cluster_dir/uses_lockq" "$c")
	echo "$out"
	[[ $out =~ ^"liblockq $version: held with token "[1-9][0-9]*$ ]] ||
		{ echo "the program built with liblockq-dev did not take the lock" >&2; exit 1; }
	out=$(MANWIDTH=200 man lockq 2>/dev/null | sed -n '/^NAME/{n;p;q}' | tr -s ' ')
	echo "man lockq: $out"
	[[ $out =~ "lockq - run a command under a cluster-wide lock" ]] ||
		{ echo "man lockq does not show lockq(1)" >&2; exit 1; }

	log "the Python module from python3-lockq"
	# from a directory of its own: python3 -P would not look at it anyway
	out=$(cd "$cluster_dir" && as_user python3 -P -c '
import sys, psycopg, lockq
assert lockq.__file__ == "/usr/lib/python3/dist-packages/lockq/__init__.py", lockq.__file__
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    with lockq.lock(conn, "deb:python", ttl=10, timeout=10) as lease:
        held = conn.execute("SELECT lockq.lockq_holds(%s, %s)", ("deb:python", lease.token)).fetchone()[0]
        print("python3-lockq: held with token %d, lockq_holds %s" % (lease.token, held))
' "$c")
	echo "$out"
	[[ $out =~ ^"python3-lockq: held with token "[1-9][0-9]*", lockq_holds True"$ ]] ||
		{ echo "the packaged Python module did not take the lock" >&2; exit 1; }
	log "the packages work"
}

case ${1:-} in
	build) build ;;
	test) test_packages ;;
	*) echo "usage: $0 build|test" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
#
# test/demo.sh -- a throw-away cluster with lockq and a live demo (make run).
#
# As root on a fresh Debian 12 machine it installs what is missing, builds
# and installs lockq, then starts a PostgreSQL 15 cluster with lockq
# preloaded in /tmp/lockq-demo as the unprivileged user "lockqdemo"
# (PostgreSQL refuses to run as root).  As another user it runs the cluster
# as that user.  It then shows FIFO grants with fencing tokens and a lease
# expiring and passing to a waiter, and leaves the cluster running.  A
# second run stops and removes the previous demo cluster first, and only
# that: a directory it did not make (no .lockq-demo in it) it leaves
# alone, and stops before it builds anything.
#
# LOCKQ_DEMO_USER, LOCKQ_DEMO_DIR and LOCKQ_DEMO_PORT override the defaults;
# LOCKQ_DEMO_NO_BUILD=1 uses the lockq installed already (no packages, no
# build).
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

. "$here/test/setup-debian.sh"
DEMOUSER=${LOCKQ_DEMO_USER:-lockqdemo}
DIR=${LOCKQ_DEMO_DIR:-/tmp/lockq-demo}
PORT=${LOCKQ_DEMO_PORT:-5499}
DATA=$DIR/data
NCLIENTS=5
MARK=$DIR/.lockq-demo

# Never touch what an earlier make run did not make.
if [ -e "$DIR" ] && [ ! -e "$MARK" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
	echo "make run: $DIR was not made by make run; leaving it alone (set LOCKQ_DEMO_DIR to another directory)" >&2
	exit 1
fi

if [ "${LOCKQ_DEMO_NO_BUILD:-0}" != 1 ]; then
	lq_install_packages
	lq_build_install
fi

if [ "$(id -u)" -eq 0 ]; then
	lq_ensure_user "$DEMOUSER"
	as_user() { runuser -u "$DEMOUSER" -- "$@"; }
	prefix="su $DEMOUSER -c "
else
	DEMOUSER=$(id -un)
	as_user() { "$@"; }
	prefix=
fi

# Stop and remove the previous demo cluster, if any (checked above: made
# by make run).
if [ -e "$MARK" ] && [ -f "$DATA/postmaster.pid" ]; then
	lq_log "stopping the previous demo cluster in $DIR"
	as_user "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
fi
[ ! -e "$MARK" ] || rm -rf "$DIR"

# The first free port from PORT on (a socket file or a listener means busy).
port_busy() {
	[ -e "/tmp/.s.PGSQL.$1" ] || [ -e "/var/run/postgresql/.s.PGSQL.$1" ] \
		|| { command -v ss >/dev/null && ss -ltn 2>/dev/null | grep -q ":$1 "; }
}
while port_busy "$PORT"; do PORT=$((PORT + 1)); done

lq_log "starting a PostgreSQL 15 cluster as $DEMOUSER in $DIR (port $PORT)"
mkdir -p "$DIR"
echo "made by make run (test/demo.sh), $(date -u '+%F %T UTC'); the next make run removes it" >"$MARK"
chown "$DEMOUSER": "$DIR" 2>/dev/null || true
chmod 755 "$DIR"
lq_start_cluster "$DIR" "$DATA" "$PORT" "lockq.database = 'postgres'"

PSQL=("$PGBIN/psql" -h "$DIR" -p "$PORT" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1)
sql() { as_user "${PSQL[@]}" "$@"; }
val() { as_user "${PSQL[@]}" -At -c "$1"; }
# poll QUERY: wait (up to 30 s) until QUERY returns t.
poll() {
	local i
	for i in $(seq 300); do
		[ "$(val "$1")" = t ] && return 0
		sleep 0.1
	done
	echo "timed out waiting for: $1" >&2
	exit 1
}

sql <<'EOF'
CREATE EXTENSION lockq;
CREATE TABLE demo_log (seq serial, lock_id text, client text, token bigint,
					   granted_at timestamptz DEFAULT clock_timestamp());
EOF
poll "SELECT worker_pid IS NOT NULL FROM lockq.lockq_stats"
echo "lock server running, pid $(val 'SELECT worker_pid FROM lockq.lockq_stats')"

lq_log "1. FIFO: $NCLIENTS clients queue for lock 'demo' behind a holder"
tok=$(val "SELECT lockq.lockq_try('demo', 'holder', '30 s')")
echo "holder took 'demo' with token $tok"
pids=()
for i in $(seq "$NCLIENTS"); do
	sql >/dev/null <<EOF &
SELECT lockq.lockq_get('demo', 'client-$i', '30 s') AS tok \gset
INSERT INTO demo_log (lock_id, client, token) VALUES ('demo', 'client-$i', :tok);
SELECT pg_sleep(0.3);
SELECT lockq.lockq_release('demo', 'client-$i', :tok);
EOF
	pids+=($!)
	poll "SELECT count(*) = $i FROM lockq.lockq_waiters WHERE lock_id = 'demo'"
	echo "client-$i is waiting"
done
echo
echo "SELECT * FROM lockq.lockq_waiters:"
sql -c "SELECT lock_id, owner, position, waiting_since::time(3), kind, session_pid
		  FROM lockq.lockq_waiters"
echo "holder releases; each client holds the lock 0.3 s, then releases:"
val "SELECT lockq.lockq_release('demo', 'holder', $tok)" >/dev/null
for p in "${pids[@]}"; do wait "$p"; done
sql -c "SELECT seq, client, token, granted_at::time(3) AS granted_at
		  FROM demo_log WHERE lock_id = 'demo' ORDER BY seq"
sql -At <<'EOF'
SELECT CASE WHEN bool_and(client = 'client-' || seq) AND bool_and(token > prev)
			THEN 'OK: granted in arrival order, tokens strictly increasing'
			ELSE 'NOT FIFO!' END
  FROM (SELECT seq, client, token,
			   lag(token, 1, 0::bigint) OVER (ORDER BY seq) AS prev
		  FROM demo_log WHERE lock_id = 'demo') s;
EOF

lq_log "2. lease expiry: a holder with a 2 s lease dies, a waiter takes over"
tok=$(val "SELECT lockq.lockq_try('lease-demo', 'crashed-worker', '2 seconds')")
echo "crashed-worker took 'lease-demo' with token $tok and a 2 s lease, and never renews:"
sql -c "SELECT owner, token, acquired::time(3), expires::time(3), ttl
		  FROM lockq.lockq_locks WHERE lock_id = 'lease-demo'"
expires=$(val "SELECT expires FROM lockq.lockq_locks WHERE lock_id = 'lease-demo'")
sql >/dev/null <<'EOF' &
SELECT lockq.lockq_get('lease-demo', 'standby-worker', '30 seconds') AS tok \gset
INSERT INTO demo_log (lock_id, client, token) VALUES ('lease-demo', 'standby-worker', :tok);
EOF
standby=$!
poll "SELECT count(*) = 1 FROM lockq.lockq_waiters WHERE lock_id = 'lease-demo'"
echo "standby-worker is blocked in lockq.lockq_get at $(val 'SELECT clock_timestamp()::time(3)')" \
	"(lease ends at $(val "SELECT '$expires'::timestamptz::time(3)")) ..."
wait "$standby"
sql -c "SELECT l.owner, l.token, l.acquired::time(3), d.granted_at::time(3) AS got_it_at,
			   l.expires::time(3), (SELECT count(*) FROM lockq.lockq_waiters) AS waiters
		  FROM lockq.lockq_locks l JOIN demo_log d ON d.token = l.token
		 WHERE l.lock_id = 'lease-demo'"
val "SELECT format('the lease of token %s ended at %s; standby-worker got the lock %s ms later',
				  $tok, '$expires'::timestamptz::time(3),
				  round(extract(epoch FROM acquired - '$expires')::numeric * 1000))
		FROM lockq.lockq_locks WHERE lock_id = 'lease-demo'"
echo "lockq.lockq_holds('lease-demo', $tok) = $(val "SELECT lockq.lockq_holds('lease-demo', $tok)")"

lq_log "3. lockq.lockq_stats"
sql -x -c "SELECT grants, handoffs, releases, expiries, renewals, requests,
				  batches, holders, waiters, worker_pid FROM lockq.lockq_stats"

lq_log "the demo cluster is still running"
connect="${PSQL[*]:0:9}"
stop="$PGBIN/pg_ctl -D $DATA stop"
if [ -n "$prefix" ]; then
	connect="$prefix'$connect'"
	stop="$prefix'$stop'"
fi
cat <<EOF
connect:  $connect
stop:     $stop
log:      $DIR/server.log
(standby-worker still holds 'lease-demo' until its 30 s lease ends)
EOF

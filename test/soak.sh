#!/usr/bin/env bash
#
# test/soak.sh -- make soak: ten minutes of contention against one server.
#
# Builds and installs lockq (LOCKQ_SOAK_NO_BUILD=1 uses the installed one),
# starts a temporary cluster with lockq preloaded and default settings, as
# an unprivileged user, and runs three pgbench loads at once for
# SOAK_SECONDS (default 600) seconds (the scripts are in test/soak/):
#
#   durable  8 clients, fenced critical sections on 4 hot locks with
#            explicit owners (a row in lockq.owners per grant), renewals
#   session  4 clients, the same on 2 session-bound locks (owner NULL)
#   client   4 clients, lockq_try/lockq_release on 1000 random keys, and
#            client-side waits (enqueue, heartbeat, cancel) on the hot locks
#
# Every 30 s it prints a sample: critical sections per second, the size of
# lockq.owners and lockq.queue with their indexes, their dead tuples and
# autovacuum runs, lockq's shared memory, the lock server's memory.  At the
# end it checks, and exits 1 if any check fails:
#
#   * every pgbench run finished without an error;
#   * throughput: the median pgbench interval rate over the last minute is
#     at least 90% of the median over the first minute after a minute of
#     warm-up (for SOAK_SECONDS < 300: warm-up and windows of a quarter of
#     the run each), for the durable load and for all three together;
#   * table size: lockq.owners and lockq.queue (with indexes and TOAST)
#     stay within a fixed bound at every sample (see BOUNDS below), and
#     autovacuum processed both at least once every 2 minutes on average;
#   * shared memory: lockq's allocations in pg_shmem_allocations, and the
#     unallocated rest of the main segment, are the same at the end as
#     before the load;
#   * the lock server did not restart or fail a batch, and its private
#     memory (RssAnon) grew by at most RSS_GROWTH_KB after the warm-up;
#   * no lost update: every fenced counter equals the number of critical
#     sections that wrote it;
#   * after the load, lockq_locks and lockq_waiters drain to empty.
#
# The machine's load average is printed with every sample: the throughput
# check compares the end with the start of one run, so other work on the
# machine during the run can make it fail.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. "$here/test/setup-debian.sh"

SECS=${SOAK_SECONDS:-600}
SOAKUSER=${LOCKQ_SOAK_USER:-lockqtest}
PORT=${LOCKQ_SOAK_PORT:-5497}
SAMPLE_EVERY=30			# seconds between samples
PROGRESS=5				# pgbench -P interval
NHOT=4					# hot locks with explicit owners
NSESS=2					# hot session-bound locks
CLIENTS_D=8 CLIENTS_S=4 CLIENTS_W=4
DRAIN_TIMEOUT=60		# leases are 10 s, client waiter heartbeats 5 s

# BOUNDS.  Every grant with an explicit owner inserts a row into
# lockq.owners (and its primary key, on the ever-increasing token) and its
# release deletes it; renewals add row versions.  Every client-side waiter
# inserts a row into lockq.queue and deletes it.  Dead heap tuples of
# lockq.owners are pruned when lockq_holds reads their page, but their line
# pointers, the index entries and everything in lockq.queue stay until
# VACUUM, which autovacuum runs on each table about once a minute
# (autovacuum_naptime; the thresholds, 50 rows + 20% of a table of a few
# live rows, are always passed).  VACUUM makes that space reusable (index
# pages it empties once a later VACUUM finds them safe), so a table holds
# the versions of one or two autovacuum cycles: its size depends on the
# grant rate, not on the run time.  Measured on 2 shared cores at about
# 1000 grants/s: without autovacuum on these two tables, lockq.owners grew
# 2.3 MB and lockq.queue 3.1 MB per minute (9.3 and 12.5 MB after 4 min),
# with it they stayed at about 4 and 6 MB after 5 min.  16 MB is about 3
# times that, so it holds for rates up to about 3 times these, and a table
# that autovacuum does not keep up with passes it within 7 minutes at these
# rates.  Autovacuum must also have processed both tables at least once
# every 2 minutes on average (for runs of 2 minutes or more).
#
# The lock server's private memory (RssAnon, about 3.6 MB here; VmRSS also
# counts the shared buffers it has touched) holds its lock, waiter and
# deadline hashes, a few thousand entries here, and is reset per batch
# otherwise.  8 MB of growth after the warm-up would be a leak of about
# 8 bytes per request over a 10-minute run (about a million requests).
OWNERS_BOUND_KB=$((16 * 1024))
QUEUE_BOUND_KB=$((16 * 1024))
RSS_GROWTH_KB=$((8 * 1024))

if ! [[ $SECS =~ ^[0-9]+$ ]] || [ "$SECS" -lt 60 ]; then
	echo "SOAK_SECONDS must be a whole number of seconds, at least 60" >&2
	exit 2
fi
if [ "$SECS" -ge 300 ]; then
	WARMUP=60 WINDOW=60
else
	WARMUP=$((SECS / 4)) WINDOW=$((SECS / 4))
fi

lq_install_packages
if [ "${LOCKQ_SOAK_NO_BUILD:-}" != 1 ]; then
	lq_build_install
fi

DIR=$(mktemp -d /tmp/lockq-soak.XXXXXX)
if [ "$(id -u)" -eq 0 ]; then
	lq_ensure_user "$SOAKUSER"
	chown "$SOAKUSER": "$DIR"
	as_user() { runuser -u "$SOAKUSER" -- "$@"; }
else
	as_user() { "$@"; }
fi

pgbench_pids=()
cleanup() {
	local p
	for p in "${pgbench_pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	as_user "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT

psql_q() {
	as_user "$PGBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT" \
		-U postgres -d postgres "$@"
}

lq_log "starting a temporary cluster in $DIR"
lq_start_cluster "$DIR" "$DIR/data" "$PORT" "search_path = '\"\$user\", public, lockq'"

psql_q <<EOSQL
CREATE EXTENSION lockq;
-- One counter per hot lock, written only under that lock.
CREATE TABLE soak_counter (id text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO soak_counter
	SELECT 'soak/hot/' || i, 0 FROM generate_series(1, $NHOT) i
	UNION ALL
	SELECT 'soak/sess/' || i, 0 FROM generate_series(1, $NSESS) i;
-- Critical sections whose fenced write went through, per load (d durable,
-- w client-side waiter, s session-bound), pgbench client and lock.
CREATE TABLE soak_done (kind text, client int, id text, n bigint NOT NULL,
						PRIMARY KEY (kind, client, id));
INSERT INTO soak_done
	SELECT 'd', c, 'soak/hot/' || i, 0
	  FROM generate_series(0, $CLIENTS_D - 1) c, generate_series(1, $NHOT) i
	UNION ALL
	SELECT 'w', c, 'soak/hot/' || i, 0
	  FROM generate_series(0, $CLIENTS_W - 1) c, generate_series(1, $NHOT) i
	UNION ALL
	SELECT 's', c, 'soak/sess/' || i, 0
	  FROM generate_series(0, $CLIENTS_S - 1) c, generate_series(1, $NSESS) i;
EOSQL
cp test/soak/durable.sql test/soak/session.sql test/soak/client.sql "$DIR/"
chmod a+r "$DIR"/*.sql

# lockq's named shared memory and the free rest of the main segment: both
# are laid out at server start and must not change.
SHMEM_SQL="SELECT coalesce(name, '(free)') || ' ' || off || ' ' || size || ' ' || allocated_size
             FROM pg_shmem_allocations
            WHERE name LIKE '%lockq%' OR name IS NULL ORDER BY name"
psql_q -c "$SHMEM_SQL" >"$DIR/shmem.before"

# One sample: a tab-separated line in $DIR/samples.tsv.
SAMPLE_SQL="
SELECT concat_ws(E'\t',
	pg_total_relation_size('lockq.owners') / 1024,
	pg_total_relation_size('lockq.queue') / 1024,
	o.n_dead_tup, o.autovacuum_count, q.n_dead_tup, q.autovacuum_count,
	(SELECT sum(allocated_size)::bigint / 1024 FROM pg_shmem_allocations WHERE name LIKE '%lockq%'),
	(SELECT allocated_size / 1024 FROM pg_shmem_allocations WHERE name IS NULL),
	(SELECT pid FROM pg_stat_activity WHERE backend_type = 'lockq lock server'),
	s.worker_starts, s.batch_errors, s.grants, s.requests, s.holders, s.waiters,
	(SELECT sum(n) FROM soak_done WHERE kind = 'd'),
	(SELECT sum(n) FROM soak_done WHERE kind = 's'),
	(SELECT sum(n) FROM soak_done WHERE kind = 'w'))
  FROM lockq_stats s,
	   pg_stat_user_tables o, pg_stat_user_tables q
 WHERE o.relid = 'lockq.owners'::regclass AND q.relid = 'lockq.queue'::regclass"
# columns of samples.tsv
COLS="t owners_kb queue_kb owners_dead owners_av queue_dead queue_av shm_kb free_kb
      pid starts errors grants requests holders waiters done_d done_s done_w
      rss_kb anon_kb load1 wcpu ccpu"

now() { date +%s.%N; }
t0=$(now)
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# cpu_ticks WORKER_PID: the CPU time (clock ticks) of the lock server, and
# of the whole cluster (the postmaster with its reaped children, and its
# live children): a tab-separated pair.
cpu_ticks() {
	local pm p
	pm=$(head -n 1 "$DIR/data/postmaster.pid")
	{
		echo "pm $(cat "/proc/$pm/stat" 2>/dev/null)"
		for p in $(ps -o pid= --ppid "$pm"); do
			echo "ch $(cat "/proc/$p/stat" 2>/dev/null)"
		done
	} | awk -v w="$1" '
		{
			kind = $1; pid = $2; s = $0
			sub(/^.*\) /, "", s)		# fields from the state on
			if (split(s, f, " ") < 15) next
			c = f[12] + f[13]			# utime, stime
			if (kind == "pm") c += f[14] + f[15]	# cutime, cstime
			tot += c
			if (pid == w) wt = f[12] + f[13]
		}
		END { printf "%d\t%d", wt, tot }'
}

FMT='%7s %6s %6s %6s %6s %7s %7s %3s %7s %6s %3s %6s %6s %7s %7s %6s %6s %5s\n'
print_header() {
	printf "$FMT" t durable sess client grants owners owners '' queue queue '' \
		lockq free worker worker worker all load
	printf "$FMT" s cs/s cs/s cs/s /s kB dead av kB dead av 'shm kB' 'shm kB' \
		'RSS kB' 'anon kB' us/gr us/gr 1min
}

# One sample: a tab-separated line in $DIR/samples.tsv, and a line of the
# table with the rates since the previous sample.
sample() {
	local t row pid rss anon
	t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
	row=$(psql_q -c "$SAMPLE_SQL")
	pid=$(cut -f9 <<<"$row")
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
	anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$row" "${rss:-0}" "${anon:-0}" \
		"$(cut -d' ' -f1 /proc/loadavg)" "$(cpu_ticks "$pid")" >>"$DIR/samples.tsv"
	tail -n 2 "$DIR/samples.tsv" |
		awk -F'\t' -v n="$(wc -l <"$DIR/samples.tsv")" -v fmt="$FMT" -v tick="$TICK_US" '
		NR == 1 && n > 1 { split($0, p, "\t"); next }
		{
			dt = $1 - p[1]; dg = $13 - p[13]
			r = (n > 1 && dt > 0)
			g = (r && dg > 0)
			printf fmt, $1,
				r ? sprintf("%.0f", ($17 - p[17]) / dt) : "-",
				r ? sprintf("%.0f", ($18 - p[18]) / dt) : "-",
				r ? sprintf("%.0f", ($19 - p[19]) / dt) : "-",
				r ? sprintf("%.0f", dg / dt) : "-",
				$2, $4, $5, $3, $6, $7, $8, $9, $20, $21,
				g ? sprintf("%.0f", ($23 - p[23]) * tick / dg) : "-",
				g ? sprintf("%.0f", ($24 - p[24]) * tick / dg) : "-",
				$22
		}'
}

lq_log "soak: ${SECS}s of contention (warm-up ${WARMUP}s, windows ${WINDOW}s)"
print_header
sample

for load in durable:$CLIENTS_D session:$CLIENTS_S client:$CLIENTS_W; do
	name=${load%%:*} clients=${load#*:}
	as_user "$PGBIN/pgbench" -n -h "$DIR" -p "$PORT" -U postgres \
		-c "$clients" -j 2 -T "$SECS" -P "$PROGRESS" \
		-D nhot="$NHOT" -D nsess="$NSESS" -f "$DIR/$name.sql" postgres \
		>"$DIR/pgbench-$name.log" 2>&1 &
	pgbench_pids+=($!)
done

next=$SAMPLE_EVERY
while [ "$next" -lt "$SECS" ]; do
	sleep "$(awk -v a="$t0" -v b="$(now)" -v n="$next" \
		'BEGIN { d = a + n - b; printf "%.3f", (d > 0 ? d : 0) }')"
	sample
	next=$((next + SAMPLE_EVERY))
done
# the last sample just before the load stops
sleep "$(awk -v a="$t0" -v b="$(now)" -v n="$SECS" \
	'BEGIN { d = a + n - 1 - b; printf "%.3f", (d > 0 ? d : 0) }')"
sample

failures=()
fail() { failures+=("$*"); }

names=(durable session client)
for i in 0 1 2; do
	if ! wait "${pgbench_pids[$i]}"; then
		fail "pgbench ${names[$i]} failed (see its output below)"
	fi
done
pgbench_pids=()

# After the load: everything drains.  Clients cut off by the end of the run
# may leave a grant until its lease (10 s) ends, or a client-side wait until
# its heartbeat (5 s) is missed.
lq_log "load stopped; waiting for lockq_locks and lockq_waiters to drain"
drained=
deadline=$(($(date +%s) + DRAIN_TIMEOUT))
while [ "$(date +%s)" -le "$deadline" ]; do
	left=$(psql_q -c "SELECT (SELECT count(*) FROM lockq_locks) || ' ' || (SELECT count(*) FROM lockq_waiters)")
	if [ "$left" = "0 0" ]; then
		drained=1
		break
	fi
	sleep 0.5
done
sample

# --- the checks ---

for name in "${names[@]}"; do
	if grep -q "number of failed transactions: [1-9]" "$DIR/pgbench-$name.log" ||
		! grep -q "number of failed transactions: 0" "$DIR/pgbench-$name.log"; then
		fail "pgbench $name: failed transactions or no summary"
	fi
done

# Throughput: pgbench progress lines "progress: T s, R tps, ...".
progress() { sed -n 's/^progress: \([0-9.]*\) s, \([0-9.]*\) tps.*/\1 \2/p' "$DIR/pgbench-$1.log"; }
progress durable >"$DIR/tps.durable"
progress session >"$DIR/tps.session"
progress client >"$DIR/tps.client"
# all three, for the intervals that all three reported
awk '{ s[$1] += $2; c[$1]++ } END { for (t in s) if (c[t] == 3) print t, s[t] }' \
	"$DIR/tps.durable" "$DIR/tps.session" "$DIR/tps.client" | sort -n >"$DIR/tps.total"

# median tps of the intervals ending in (from, to]
median() {
	awk -v a="$2" -v b="$3" '$1 > a && $1 <= b { print $2 }' "$1" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) print "none"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
printf '%-8s %22s %22s %7s\n' load "first window tps" "last window tps" ratio
printf '%-8s %22s %22s %7s\n' '' "($WARMUP..$((WARMUP + WINDOW)) s)" "($((SECS - WINDOW))..$SECS s)" ''
for name in durable session client total; do
	first=$(median "$DIR/tps.$name" "$WARMUP" $((WARMUP + WINDOW)))
	last=$(median "$DIR/tps.$name" $((SECS - WINDOW)) "$SECS")
	if [ "$first" = none ] || [ "$last" = none ]; then
		fail "throughput $name: no pgbench progress in a window"
		continue
	fi
	ratio=$(awk -v f="$first" -v l="$last" 'BEGIN { printf "%.3f", (f > 0 ? l / f : 0) }')
	printf '%-8s %22.1f %22.1f %7s\n' "$name" "$first" "$last" "$ratio"
	case $name in
		durable|total)
			if awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 0 && l >= 0.9 * f) }'; then :; else
				fail "throughput $name: last-window median $last tps < 90% of first-window median $first tps"
			fi ;;
	esac
done

col() {			# col NAME: the column's number in samples.tsv
	local i=1 c
	for c in $COLS; do
		[ "$c" = "$1" ] && { echo "$i"; return; }
		i=$((i + 1))
	done
}
# value of column NAME in sample line N ("last", "load_end" = second to last)
val() {
	local line
	case $2 in
		last) line=$(tail -n 1 "$DIR/samples.tsv") ;;
		load_end) line=$(tail -n 2 "$DIR/samples.tsv" | head -n 1) ;;
		*) line=$(sed -n "${2}p" "$DIR/samples.tsv") ;;
	esac
	cut -f"$(col "$1")" <<<"$line"
}
colmax() { cut -f"$(col "$1")" "$DIR/samples.tsv" | sort -n | tail -n 1; }
nsamples=$(wc -l <"$DIR/samples.tsv")
# the first sample taken after the warm-up
warm=$(awk -F'\t' -v w="$WARMUP" '$1 >= w { print NR; exit }' "$DIR/samples.tsv")

owners_max=$(colmax owners_kb)
queue_max=$(colmax queue_kb)
[ "$owners_max" -le "$OWNERS_BOUND_KB" ] ||
	fail "lockq.owners reached $owners_max kB, more than the bound of $OWNERS_BOUND_KB kB"
[ "$queue_max" -le "$QUEUE_BOUND_KB" ] ||
	fail "lockq.queue reached $queue_max kB, more than the bound of $QUEUE_BOUND_KB kB"
# (autovacuum visits the database every autovacuum_naptime, 1 min)
if [ "$SECS" -ge 120 ]; then
	for tab in owners queue; do
		n=$(val ${tab}_av load_end)
		[ "$n" -ge $((SECS / 120)) ] ||
			fail "autovacuum processed lockq.$tab $n times during the load, less than once every 2 minutes"
	done
fi

psql_q -c "$SHMEM_SQL" >"$DIR/shmem.after"
if ! diff -u "$DIR/shmem.before" "$DIR/shmem.after" >"$DIR/shmem.diff"; then
	fail "shared memory changed (name offset size allocated_size): $(cat "$DIR/shmem.diff")"
fi

pids=$(cut -f"$(col pid)" "$DIR/samples.tsv" | sort -u | wc -l)
[ "$pids" -eq 1 ] || fail "the lock server's pid changed during the run"
[ "$(val starts 1)" = "$(val starts last)" ] || fail "the lock server restarted (worker_starts)"
[ "$(val errors last)" = 0 ] || fail "the lock server had $(val errors last) batch errors"
anon_warm=$(val anon_kb "$warm")
anon_end=$(val anon_kb load_end)
[ "$anon_warm" -gt 0 ] && [ "$anon_end" -gt 0 ] ||
	fail "could not read the lock server's RssAnon"
[ $((anon_end - anon_warm)) -le "$RSS_GROWTH_KB" ] ||
	fail "the lock server's RssAnon grew from $anon_warm kB to $anon_end kB, more than $RSS_GROWTH_KB kB"

# No lost update: each counter equals the fenced writes counted with it.
lost=$(psql_q -c "
SELECT string_agg(c.id || ': counter ' || c.value || ', critical sections ' || coalesce(d.n, 0), '; ')
  FROM soak_counter c
  LEFT JOIN (SELECT id, sum(n) AS n FROM soak_done GROUP BY id) d USING (id)
 WHERE c.value IS DISTINCT FROM d.n OR c.value = 0")
[ -z "$lost" ] || fail "fenced counters do not match the critical sections (or are 0): $lost"
for k in d s w; do
	n=$(psql_q -c "SELECT sum(n) FROM soak_done WHERE kind = '$k'")
	[ "$n" -gt 0 ] || fail "no critical section of kind $k went through"
done

if [ -z "$drained" ]; then
	fail "lockq_locks/lockq_waiters did not drain within ${DRAIN_TIMEOUT}s: $left"
fi
left=$(psql_q -c "SELECT (SELECT count(*) FROM lockq.owners) || ' ' || (SELECT count(*) FROM lockq.queue)
	|| ' ' || (SELECT count(*) FROM lockq_session_grants()) || ' ' || holders || ' ' || waiters FROM lockq_stats")
[ "$left" = "0 0 0 0 0" ] ||
	fail "after draining: owners rows, queue rows, session grants, holders, waiters = $left"

# CPU per grant in the first and the last window, from the samples: other
# work on the machine lowers the throughput, while a lock server slowed down
# by its tables would spend more CPU per grant.
w1=$(awk -F'\t' -v t="$((WARMUP + WINDOW))" '$1 >= t { print NR; exit }' "$DIR/samples.tsv")
w2=$(awk -F'\t' -v t="$((SECS - WINDOW))" '$1 <= t { n = NR } END { print n }' "$DIR/samples.tsv")
per_grant() {		# per_grant FROM TO: worker and cluster CPU us per grant
	sed -n "${1}p;${2}p" "$DIR/samples.tsv" | awk -F'\t' -v tick="$TICK_US" '
		NR == 1 { g = $13; w = $23; c = $24; next }
		{ if ($13 > g) printf "%.0f %.0f", ($23 - w) * tick / ($13 - g), ($24 - c) * tick / ($13 - g); else printf "- -" }'
}
read -r wfirst cfirst <<<"$(per_grant "$warm" "$w1")"
read -r wlast clast <<<"$(per_grant "$w2" $((nsamples - 1)))"

echo
echo "CPU per grant: lock server $wfirst us in the first window, $wlast us in the last; whole cluster $cfirst us, $clast us"
echo "samples: $nsamples; lockq.owners max $owners_max kB (bound $OWNERS_BOUND_KB), lockq.queue max $queue_max kB (bound $QUEUE_BOUND_KB)"
echo "lock server RssAnon $anon_warm kB after warm-up, $anon_end kB at the end (growth bound $RSS_GROWTH_KB kB); VmRSS $(val rss_kb "$warm") -> $(val rss_kb load_end) kB"
echo "critical sections: durable $(val done_d last), session $(val done_s last), client waiters $(val done_w last); grants $(val grants last), requests $(val requests last)"
echo "autovacuum runs on lockq.owners: $(val owners_av last), lockq.queue: $(val queue_av last)"
for name in "${names[@]}"; do
	echo "pgbench $name: $(grep -E '^(number of transactions actually processed|number of failed|tps =)' "$DIR/pgbench-$name.log" | tr '\n' ';')"
done

if [ ${#failures[@]} -gt 0 ]; then
	for name in "${names[@]}"; do
		lq_log "pgbench $name output (without progress lines)"
		grep -v '^progress:' "$DIR/pgbench-$name.log" | tail -n 30
	done
	lq_log "server log (tail)"
	tail -n 40 "$DIR/server.log"
	lq_log "SOAK FAILED"
	printf '  * %s\n' "${failures[@]}"
	exit 1
fi
lq_log "soak passed"

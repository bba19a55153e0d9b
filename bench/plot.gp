# bench/plot.gp -- draws a benchmark run: the table lockq_bench writes with
# --data (see write_data in bench/lockq_bench.c) as an SVG.  make bench
# runs it after the benchmark:
#
#   gnuplot -e "data='bench/last-run.dat'; svg='bench/last-run.svg'; caption='...'" bench/plot.gp
#
# One panel per scenario: ops/s against the number of clients (log scale),
# a line per system, medians of the run; the durable panels also show the
# physical limit of one chain of WAL flushes (1 / fdatasync).  The last
# panel is the distribution of the contended points' waits.  A scenario
# the run left out (--only) is an empty panel saying so.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

if (!exists("data")) data = 'bench/last-run.dat'
if (!exists("svg")) svg = 'bench/last-run.svg'
if (!exists("caption")) caption = ''

set terminal svg size 1100,1760 noenhanced font 'Helvetica,12' background rgb 'white'
set output svg

# the data file's rows: what they are (rate, wait, limit), the scenario,
# the system, the clients, then the values.  A row of another line gives
# NaN for x and y: it neither appears nor stretches the axes.
is_rate(sc, sy) = strcol(1) eq 'rate' && strcol(2) eq sc && strcol(3) eq sy
is_wait(sc, sy, n) = strcol(1) eq 'wait' && strcol(2) eq sc && strcol(3) eq sy && column(4) == n \
	&& column(6) >= 0.01

colour(sy) = sy eq 'advisory' ? '#7f7f7f' : sy eq 'session' ? '#1f77b4' : \
	sy eq 'leased' ? '#d62728' : sy eq 'liblockq' ? '#2ca02c' : \
	sy eq 'libnotify' ? '#8c564b' : '#9467bd'
label(sc, sy) = sy eq 'advisory' ? 'pg_advisory_lock' : \
	sy eq 'session' ? 'lockq session-bound' : \
	sy eq 'liblockq' ? 'liblockq' : \
	sy eq 'libnotify' ? 'liblockq, told to wait on NOTIFY' : \
	sy eq 'leased' ? (sc[1:7] eq 'durable' ? 'lockq leased, synchronous_grants' : 'lockq leased') : \
	sc eq 'durable' ? 'pgbench: UPDATE of one shared row' : 'pgbench: 2 UPDATEs of its own row'

# 1 / fdatasync, if the run measured it (NaN otherwise)
limit = NaN
stats data using (strcol(1) eq 'limit' ? (limit = column(5), 0) : 0) nooutput

# a panel for a scenario the run left out
empty = "unset logscale; unset tics; unset key; set xrange [0:1]; set yrange [0:1]; " . \
	"set label 1 'not measured in this run' at graph 0.5, 0.5 center; plot NaN notitle; " . \
	"unset label 1; set tics; set key; set autoscale"

array scen[7] = ['uncontended', 'contended', 'jobs', 'scaling', 'library', \
	'durable', 'durable_keys']
array systems[7] = ['advisory session leased', 'advisory session leased', \
	'advisory session leased', 'advisory leased', 'advisory liblockq libnotify', \
	'pgbench leased', 'pgbench leased']

array heading[7] = [ \
	'uncontended: a key of its own per client', \
	'contended: all clients on one lock', \
	'jobs: 100 keys, try + fenced UPDATE + release', \
	'scaling: leased on keys of their own (one server)', \
	'library: all clients on one lock through liblockq', \
	'durable, one lock: every grant flushed', \
	'durable, a key per client: grants and releases flushed']
array unit[7] = ['lock/unlock pairs per second', 'hand-offs per second', \
	'jobs run per second', 'grant/release pairs per second', \
	'hand-offs per second', 'hand-offs (UPDATEs) per second', \
	'pairs (2 UPDATEs) per second']

set multiplot layout 4,2 title 'lockq against pg_advisory_lock and pgbench' . \
	(caption eq '' ? '' : "\n" . caption)
set grid
set key top right box opaque
set xlabel 'clients'

do for [i = 1:7] {
	set title heading[i]
	set ylabel unit[i]
	found = 0
	stats data using ((strcol(1) eq 'rate' && strcol(2) eq scen[i]) ? (found = found + 1, 0) : 0) nooutput
	if (found == 0) {
		@empty
	} else {
		set logscale x 2
		set autoscale x
		set offsets graph 0.04, graph 0.04, graph 0.45, 0
		set yrange [0:*]
		list = systems[i]
		if (i >= 6 && limit == limit) {
			plot for [k = 1:words(list)] data \
					using (is_rate(scen[i], word(list, k)) ? $4 : NaN):5 \
					with linespoints lw 2 pt 7 ps 0.6 lc rgb colour(word(list, k)) \
					title label(scen[i], word(list, k)), \
				limit with lines dt 2 lw 1.5 lc rgb 'black' \
					title sprintf('1 / fdatasync (%.0f/s)', limit)
		} else {
			plot for [k = 1:words(list)] data \
					using (is_rate(scen[i], word(list, k)) ? $4 : NaN):5 \
					with linespoints lw 2 pt 7 ps 0.6 lc rgb colour(word(list, k)) \
					title label(scen[i], word(list, k))
		}
		set offsets 0, 0, 0, 0
	}
}

# the waits: contended at 64 (solid) and 256 (dashed) clients, liblockq
# at 64; from the shortest 1 % on (log scale)
set title 'waits, one lock: fraction of waits that took at most x'
set xlabel 'wait from asking to holding (ms)'
set ylabel 'fraction of waits'
found = 0
stats data using ((strcol(1) eq 'wait' && (strcol(2) eq 'contended' || \
	strcol(2) eq 'library')) ? (found = found + 1, 0) : 0) nooutput
if (found == 0) {
	@empty
} else {
	set logscale x 10
	set autoscale x
	set format x '%g'
	set yrange [0:1]
	set key top left box opaque
	set offsets graph 1.0, 0, 0, 0
	sql = 'advisory session leased'
	plot for [k = 1:3] data \
			using (is_wait('contended', word(sql, k), 64) ? $5 : NaN):6 \
			with lines lw 2 lc rgb colour(word(sql, k)) \
			title word(sql, k) . ', 64 clients', \
		for [k = 1:3] data \
			using (is_wait('contended', word(sql, k), 256) ? $5 : NaN):6 \
			with lines lw 2 dt 2 lc rgb colour(word(sql, k)) \
			title word(sql, k) . ', 256', \
		data using (is_wait('library', 'liblockq', 64) ? $5 : NaN):6 \
			with lines lw 2 lc rgb colour('liblockq') \
			title 'liblockq, 64 clients'
}
unset multiplot

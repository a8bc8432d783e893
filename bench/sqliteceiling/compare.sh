#!/bin/sh
# make bench: edgepipe's SQLite burn-down (storage/sqlite BenchmarkBurnDown)
# and its ceiling (bench/sqliteceiling BenchmarkCeiling), run alternately in
# one go so that both see the same machine, with the ratio and the load
# average of each round. A third rate is the ceiling with the guarantees
# the goal keeps added back (BenchmarkGuarantees/events+wall: status events
# and the terminal wall; the fence is in both): its ratio to the ceiling is
# what those guarantees cost by themselves. The test binaries are built
# first, so no build runs between measurements.
#
#   N=20000 ROUNDS=3 bench/sqliteceiling/compare.sh
#   BASELINE=/path/to/other/checkout bench/sqliteceiling/compare.sh
#
# BASELINE adds that checkout's burn-down as a third column (e.g. main, to
# see a branch's change in the same run).
set -eu
N=${N:-20000}
ROUNDS=${ROUNDS:-3}
GO=${GO:-go}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

(cd "$root" && $GO test -c -o "$tmp/edgepipe.test" ./storage/sqlite)
(cd "$root" && $GO test -c -o "$tmp/ceiling.test" ./bench/sqliteceiling)
if [ -n "${BASELINE:-}" ]; then
	(cd "$BASELINE" && $GO test -c -o "$tmp/baseline.test" ./storage/sqlite)
fi

# rate BINARY BENCH: the jobs/s the benchmark reports.
rate() {
	"$tmp/$1" -test.run '^$' -test.bench "$2" -test.benchtime "${N}x" |
		awk '{ for (i = 2; i <= NF; i++) if ($i == "jobs/s") r = $(i-1) } END { if (r == "") exit 1; print r }'
}

# The benchmarks by name, anchored so that each selects exactly one
# (-test.bench matches each level of a name; a benchmark added later must
# not join the measurement).
ceiling='^BenchmarkCeiling$'
guaranteed='^BenchmarkGuarantees$/^events\+wall$'

if [ -n "${BASELINE:-}" ]; then
	printf '%-5s  %12s  %12s  %12s  %12s  %8s  %8s  %8s  %s\n' round baseline edgepipe ceiling guaranteed base/ceil edge/ceil guar/ceil 'load 1/5/15 min (before round)'
else
	printf '%-5s  %12s  %12s  %12s  %8s  %8s  %s\n' round edgepipe ceiling guaranteed ratio guar/ceil 'load 1/5/15 min (before round)'
fi
r=1
while [ "$r" -le "$ROUNDS" ]; do
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	e=$(rate edgepipe.test BurnDown)
	c=$(rate ceiling.test "$ceiling")
	g=$(rate ceiling.test "$guaranteed")
	if [ -n "${BASELINE:-}" ]; then
		b=$(rate baseline.test BurnDown)
		awk -v r="$r" -v b="$b" -v e="$e" -v c="$c" -v g="$g" -v l="$load" 'BEGIN {
			printf "%-5s  %12.0f  %12.0f  %12.0f  %12.0f  %8.3f  %8.3f  %8.3f  %s\n", r, b, e, c, g, b/c, e/c, g/c, l }'
	else
		awk -v r="$r" -v e="$e" -v c="$c" -v g="$g" -v l="$load" 'BEGIN {
			printf "%-5s  %12.0f  %12.0f  %12.0f  %8.3f  %8.3f  %s\n", r, e, c, g, e/c, g/c, l }'
	fi
	r=$((r + 1))
done
echo "jobs/s over ${N} no-op jobs; load after: $(cut -d' ' -f1-3 /proc/loadavg)"

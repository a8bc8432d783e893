#!/usr/bin/env bash
# Runs the reference matrix: 3 runs each of workers 100 and 500, with the
# statement cache on (default) and off (mattn's default), 20k jobs.
# Each run also prints, on stderr, how many cores other processes used during
# its burn-down: these 2 cores are shared with other builds, so each run first
# waits (up to $WAIT_QUIET, default 60s) for a quiet second, and runs where the
# figure is still well above ~0.2 should be discarded.
set -euo pipefail
cd "$(dirname "$0")"
bin="${TMPDIR:-/tmp}/riverref"
go build -o "$bin" .
jobs="${JOBS:-20000}"
for cache in 64 0; do
	for workers in 100 500; do
		for run in 1 2 3; do
			echo "== stmt-cache=$cache workers=$workers run=$run"
			"$bin" -v -wait-quiet "${WAIT_QUIET:-60s}" -jobs "$jobs" -workers "$workers" -stmt-cache "$cache" 2> >(grep -o 'other processes used .*\|never went quiet' >&2)
		done
	done
done

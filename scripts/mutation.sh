#!/usr/bin/env bash
# Mutation testing (make mutation): runs gremlins on the packages whose tests
# guard the pipeline's contracts and prints the test efficacy of each,
# killed / (killed + lived). NOT COVERED mutants are reported apart: gremlins
# only tests mutants inside Go coverage blocks, and a `case` expression of a
# switch is never inside one, so those are mostly switch cases that the tests
# do run.
#
# It is slow by nature (one `go test` of the whole package per mutant) and is
# not part of `make test`. Measured on the 2-core machine: routing ~0.5 min;
# storage/sqlite (557 covered mutants) about 4.5 mutants a minute per
# worker, an hour with 2 workers. pipeline is CPU-bound: each of its 695
# covered mutants recompiles ten packages (pipeline, its test variant and
# every package of its tests that imports it) and links, about 12
# CPU-seconds, then runs ~200 tests, about 14 CPU-seconds: about 2.5 hours
# of a quiet machine with 2 workers, more under load (files can be run
# apart with MUTATION_ARGS="-E regexp" and the figures added up, at one
# commit). GOGC=400 (the default here) saves about a fifth of the compile.
#
# TIMED OUT mutants are scored outside efficacy by gremlins and can hide a
# survivor, so the tests bound every wait on the code under test (a mutant
# that blocks fails in seconds instead of hanging the package).
#
# Environment:
#   MUTATION_PKGS      packages, default "routing storage/sqlite pipeline"
#   MUTATION_WORKERS   gremlins workers, default 1 (each runs a full go test)
#   MUTATION_TIMEOUT   timeout coefficient over the measured test time, default 5
#   MUTATION_THRESHOLD fail when a package's efficacy is below this (default 85; 0 disables)
#   MUTATION_OUT       where the JSON and text reports go, default $TMPDIR/edgepipe-mutation
#   MUTATION_ARGS      extra gremlins flags, e.g. "-E execute\.go" to skip a file
#   GREMLINS           the gremlins binary; installed (v0.6.0) when absent
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS_VERSION=v0.6.0
bin_dir="${GOBIN:-$HOME/.cache/edgepipe-bin}"
GREMLINS="${GREMLINS:-$(command -v gremlins || echo "$bin_dir/gremlins")}"
if [ ! -x "$GREMLINS" ]; then
  echo "installing gremlins $GREMLINS_VERSION into $bin_dir" >&2
  GOBIN="$bin_dir" go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
  GREMLINS="$bin_dir/gremlins"
fi

pkgs="${MUTATION_PKGS:-routing storage/sqlite pipeline}"
workers="${MUTATION_WORKERS:-1}"
coef="${MUTATION_TIMEOUT:-5}"
threshold="${MUTATION_THRESHOLD:-85}"
out="${MUTATION_OUT:-${TMPDIR:-/tmp}/edgepipe-mutation}"
mkdir -p "$out"

# -count=1: gremlins times the coverage run and gives each mutant a multiple
# of it; a cached coverage run takes milliseconds and every mutant then
# "times out". -short: the billing-invariant test runs 12 jobs instead of 50,
# which keeps a pipeline mutant near 15 s instead of 40 s; each mutant still
# runs every test of its package. -parallel 8: the tests mostly wait
# (timers, polling, subprocesses), so running more of them at once halves
# a package's wall time (pipeline: 36 s -> 16 s) at the same CPU.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1 -short -parallel=8"
export CGO_ENABLED=1
export GOGC="${GOGC:-400}"

summary=()
failed=0
for pkg in $pkgs; do
  name="${pkg//\//-}"
  start=$(date +%s)
  echo "== $pkg: gremlins unleash (workers=$workers, timeout coefficient=$coef)" >&2
  # shellcheck disable=SC2086 # MUTATION_ARGS is a list of flags
  if ! "$GREMLINS" unleash --workers "$workers" --timeout-coefficient "$coef" \
      -o "$out/$name.json" ${MUTATION_ARGS:-} "./$pkg" >"$out/$name.txt" 2>&1; then
    echo "gremlins failed on $pkg; see $out/$name.txt" >&2
    tail -20 "$out/$name.txt" >&2
    failed=1
    summary+=("$(printf '%-16s gremlins failed' "$pkg")")
    continue
  fi
  secs=$(( $(date +%s) - start ))
  grep -E '^ *(LIVED|TIMED OUT|NOT VIABLE)' "$out/$name.txt" >&2 || true
  # "Killed: 91, Lived: 6, Not covered: 10" / "Timed out: 0, Not viable: 0, Skipped: 0"
  read -r killed lived notcov < <(sed -nE 's/^Killed: ([0-9]+), Lived: ([0-9]+), Not covered: ([0-9]+).*/\1 \2 \3/p' "$out/$name.txt")
  timedout=$(sed -nE 's/^Timed out: ([0-9]+),.*/\1/p' "$out/$name.txt")
  if [ -z "${killed:-}" ]; then
    echo "no summary in $out/$name.txt" >&2
    failed=1
    continue
  fi
  eff=$(awk -v k="$killed" -v l="$lived" 'BEGIN { if (k + l == 0) print "n/a"; else printf "%.2f", 100 * k / (k + l) }')
  line=$(printf '%-16s efficacy %6s%%  killed %4d  lived %3d  not covered %3d  timed out %3d  (%dm%02ds)' \
    "$pkg" "$eff" "$killed" "$lived" "$notcov" "${timedout:-0}" $((secs / 60)) $((secs % 60)))
  if [ "$eff" != "n/a" ] && [ "$threshold" != 0 ] && awk -v e="$eff" -v t="$threshold" 'BEGIN { exit !(e < t) }'; then
    line="$line  BELOW $threshold%"
    failed=1
  fi
  summary+=("$line")
  echo "$line" >&2
done

echo
echo "mutation testing (reports in $out):"
printf '  %s\n' "${summary[@]}"
exit "$failed"

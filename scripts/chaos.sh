#!/usr/bin/env bash
# Chaos suites (package chaos, build tag "chaos"): they run the real edgepipe
# binary as subprocesses, kill it, break its storage, and require
# `edgepipe check` to find zero violations afterwards.
#
#   scripts/chaos.sh          make chaos: crash matrix (every failpoint × v1,v2),
#                             200-job random SIGKILLs, storage faults (MinIO via
#                             the fault proxy, SQLite busy, disk full), then the
#                             2,000-job soak on its own so its figures are not
#                             disturbed by the other suites
#   scripts/chaos.sh --ci     CI on every run: the shortened crash matrix
#                             (every failpoint × v1,v2, crash@1, 2 jobs a case)
#                             on SQLite and again on Postgres, the multi-node
#                             test (Postgres, 1 API + 3 workers, 100 jobs, two
#                             worker SIGKILLs), the storage outage shortened to
#                             60 s, the wiped-spool kills, and the real-provider
#                             adapters end to end (TestProvider*: Workers AI and
#                             Replicate emulators, a dropped narration, a worker
#                             SIGKILLed after a Replicate create), and random
#                             SIGKILLs (60 jobs, -short) on SQLite and on
#                             Postgres
#
#   Both modes need PostgreSQL: EDGEPIPE_TEST_DATABASE_URL names the server
#   (.ci/run starts one); when it is unset this script starts a throwaway
#   cluster with scripts/postgres.sh and stops it at the end.
#
#   CHAOS_FULL=1              the full crash matrix (× crash@1,@3, 5 jobs a
#                             case), with or without --ci
#   CHAOS_SOAK_JOBS=N         soak size (default 2000)
#   CHAOS_RACE=1              build edgepipe with -race; any report fails
#   CHAOS_LOG_DIR=dir         keep every process log and data directory
#   CHAOS_PARALLEL=N          cases run at once (default 3)
#   CHAOS_STORE=sqlite|postgres  the job store of the suites run without an
#                             explicit one here (the script sets it per step)
#   CHAOS_OUTAGE=DUR          how long TestStorageOutage stops MinIO (default
#                             5m; 60s with --ci)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
export CGO_ENABLED=1

mode=all
case "${1:-}" in
  --ci) mode=ci ;;
  "") ;;
  *) echo "usage: scripts/chaos.sh [--ci]" >&2; exit 2 ;;
esac

./scripts/setup.sh
# MinIO for the storage suites (built once and cached, as .ci/run does).
export EDGEPIPE_MINIO_BIN="${EDGEPIPE_MINIO_BIN:-$HOME/.cache/edgepipe-bin/minio}"
if [ ! -x "$EDGEPIPE_MINIO_BIN" ]; then
  echo "== building MinIO server (cached in $(dirname "$EDGEPIPE_MINIO_BIN"))"
  mkdir -p "$(dirname "$EDGEPIPE_MINIO_BIN")"
  CGO_ENABLED=0 GOBIN="$(dirname "$EDGEPIPE_MINIO_BIN")" go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
fi

bin_dir=$(mktemp -d)
pg_dir=""
cleanup() {
  rm -rf "$bin_dir"
  if [ -n "$pg_dir" ]; then scripts/postgres.sh stop "$pg_dir"; fi
}
trap cleanup EXIT
if [ -z "${EDGEPIPE_TEST_DATABASE_URL:-}" ]; then
  echo "== starting a throwaway PostgreSQL (scripts/postgres.sh)"
  eval "$(scripts/postgres.sh start)"
  pg_dir="$EDGEPIPE_PG_DIR"
  unset EDGEPIPE_PG_DIR
fi
export EDGEPIPE_TEST_DATABASE_URL
race=()
[ -n "${CHAOS_RACE:-}" ] && race=(-race)
go build "${race[@]}" -o "$bin_dir/edgepipe" ./cmd/edgepipe
export CHAOS_BIN="$bin_dir/edgepipe"

parallel="${CHAOS_PARALLEL:-3}"
start=$(date +%s)

# go test -v, without the RUN/PAUSE/CONT noise of parallel subtests.
chaos_test() {
  go test -tags chaos -count=1 -v "$@" ./chaos/ 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT|NAME)'
  return "${PIPESTATUS[0]}"
}

rc=0
if [ "$mode" = ci ]; then
  echo "== chaos: crash matrix on SQLite ($([ -n "${CHAOS_FULL:-}" ] && echo full || echo shortened))"
  CHAOS_STORE=sqlite chaos_test -run '^TestCrashMatrix$' -parallel "$parallel" -timeout 40m || rc=1
  echo "== chaos: crash matrix on Postgres ($([ -n "${CHAOS_FULL:-}" ] && echo full || echo shortened)), a database per case"
  CHAOS_STORE=postgres chaos_test -run '^TestCrashMatrix$' -parallel "$parallel" -timeout 40m || rc=1
  echo "== chaos: multi-node on Postgres + MinIO (1 API + 3 workers, own empty data directories, 100 jobs, 2 worker SIGKILLs)"
  chaos_test -run '^TestMultiNode$' -timeout 25m || rc=1
  for store in sqlite postgres; do
    echo "== chaos: storage outage (${CHAOS_OUTAGE:-60s}) and wiped spool after kills, on $store"
    CHAOS_STORE=$store CHAOS_OUTAGE="${CHAOS_OUTAGE:-60s}" chaos_test -run '^(TestStorageOutage|TestWipedSpoolAfterKill)$' -parallel 2 -timeout 30m || rc=1
  done
  for store in sqlite postgres; do
    echo "== chaos: random SIGKILLs of the API and worker processes (60 jobs, -short) on $store"
    CHAOS_STORE=$store chaos_test -short -run '^TestRandomKills$' -timeout 30m || rc=1
  done
  echo "== chaos: real-provider adapters end to end (Workers AI and Replicate emulators), an unproven image key, and workers stopped right after they start (SQLite)"
  CHAOS_STORE=sqlite chaos_test -run '^(TestProvider|TestUnprovenImageKey|TestStopRightAfterStart)' -parallel 2 -timeout 10m || rc=1
else
  echo "== chaos: crash matrix, random kills, storage faults and outage, wiped spool, real-provider adapters (SQLite)"
  CHAOS_STORE=sqlite chaos_test -run '^(TestCrashMatrix|TestRandomKills|TestStorageFaults|TestStorageOutage|TestWipedSpoolAfterKill|TestSQLiteBusy|TestStoreBusyBeforePrepare|TestDiskFull|TestProvider.*|TestUnprovenImageKey|TestStopRightAfterStart)$' \
    -parallel "$parallel" -timeout 60m || rc=1
  echo "== chaos: crash matrix, random kills, storage outage and wiped spool on Postgres, then the multi-node test"
  CHAOS_STORE=postgres chaos_test -run '^(TestCrashMatrix|TestRandomKills|TestStorageOutage|TestWipedSpoolAfterKill)$' -parallel "$parallel" -timeout 60m || rc=1
  chaos_test -run '^TestMultiNode$' -timeout 25m || rc=1
  # The soak runs even when something above failed: its figures are part
  # of the report either way.
  echo "== chaos: soak"
  chaos_test -run '^TestSoak$' -timeout 90m || rc=1
fi
echo "== chaos finished in $(( $(date +%s) - start ))s: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc

// Package chaos is edgepipe's fault-injection harness: crash matrices, random
// SIGKILLs, storage faults and a soak run, all driving the real edgepipe
// binary as subprocesses and judging the result with `edgepipe check`.
//
// The suites live in test files behind the build tag "chaos" (they build the
// binary, start MinIO and run ffmpeg for minutes):
//
//	TestCrashMatrix            every failpoint × v1,v2: crash (SIGKILL) there,
//	                           restart on the same data, settle, sweep, check
//	TestRandomKills            200 jobs on two processes, SIGKILL at random
//	                           every 1.5–4.5 s, 10–20 kills
//	TestStorageFaults          MinIO behind Proxy: latency, resets mid-upload,
//	                           refusals, 503s, MinIO killed and restarted
//	TestSQLiteBusy             another writer holds the database lock, past
//	                           edgepipe's busy timeout
//	TestStoreBusyBeforePrepare the same, pinned to the start of an attempt
//	TestDiskFull               the data directory on a tmpfs filled to the
//	                           last byte (needs root; skips otherwise)
//	TestStorageOutage          MinIO SIGKILLed for CHAOS_OUTAGE (default 60 s)
//	                           under 20 jobs mid-run; only the infrastructure
//	                           retry budget carries them through
//	TestWipedSpoolAfterKill    a worker SIGKILLed holding a paid answer, its
//	                           spool wiped before each restart; the staged
//	                           copy is used, nothing is paid twice
//	TestSoak                   2,000 small jobs, 1 API + 3 worker processes
//	                           on one database, ~10% provider faults
//	TestMultiNode              Postgres + MinIO, 1 API + 3 worker processes
//	                           (v1 | v2 | v1,v2) each on its own empty data
//	                           directory, 100 jobs, two workers SIGKILLed and
//	                           replaced on new empty directories; versions per
//	                           attempt, the fake provider's own ledger, check
//	TestProvider*              the real-provider adapters end to end: the
//	                           README's first job on the Workers AI emulator
//	                           (and with video on the Replicate emulator):
//	                           succeeded, ffprobe, audit rows name the models;
//	                           a narration dropped after the request was read
//	                           is received once and parks the job in
//	                           needs_review; a worker SIGKILLed after a
//	                           Replicate create recovers the prediction id
//	                           from the database and never creates again
//	TestStopRightAfterStart    workers stopped (SIGTERM) the moment the
//	                           harness started them exit cleanly: the harness
//	                           waits for a worker's "running" line, as it
//	                           waits for serve's health check
//
// Run them with scripts/chaos.sh (make chaos), or directly:
//
//	go test -tags chaos -parallel 3 -timeout 90m ./chaos/
//	go test -tags chaos -run '^TestCrashMatrix$' -parallel 3 ./chaos/   # part of what CI runs
//
// CI (scripts/chaos.sh --ci) runs the shortened crash matrix, the storage
// outage, the wiped spool and TestRandomKills (-short: 60 jobs) once with
// CHAOS_STORE=sqlite and once with CHAOS_STORE=postgres, TestMultiNode,
// and on SQLite TestProvider*, TestUnprovenImageKey and
// TestStopRightAfterStart.
//
// Settings are CHAOS_* variables, never EDGEPIPE_* ones, because edgepipe
// refuses unknown EDGEPIPE_* names (and the harness strips every EDGEPIPE_*
// and WORKFLOW_* variable from the environment it hands to edgepipe):
//
//	CHAOS_FULL=1          full crash matrix: also crash@3, 5 jobs a case
//	                      instead of 2
//	CHAOS_BIN=path        use this edgepipe binary instead of building one
//	CHAOS_RACE=1          build the binary with -race; a race report fails
//	CHAOS_SOAK_JOBS=N     soak size (default 2000)
//	CHAOS_SOAK_TIMEOUT=d  soak bound (default 45m)
//	CHAOS_LOG_DIR=dir     keep every process log and data directory there
//	CHAOS_STORE=postgres  run every cluster on a fresh Postgres database of
//	                      the server EDGEPIPE_TEST_DATABASE_URL names
//	                      (scripts/postgres.sh); default sqlite. Tests that
//	                      break the SQLite file skip on Postgres; TestMultiNode
//	                      always runs on Postgres (it fails under CI without
//	                      a server, and skips elsewhere)
//
// What the package itself exports is Proxy, a TCP fault proxy that sits
// between edgepipe and its object store and injects latency, refused
// connections, resets in the middle of an upload and HTTP 5xx answers. It is
// ordinary code with hermetic tests, so it is built and tested by the
// default `go test ./...`.
package chaos

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/postgres"
	"edgepipe/storage/sqlite"
)

// benchStore is what bench api needs of a job store: the API's interface,
// a count to check against the 202s, and Close.
type benchStore interface {
	api.Store
	CountByStatus(ctx context.Context) (map[pipeline.Status]int, error)
	Close() error
}

var (
	_ benchStore = (*sqlite.Store)(nil)
	_ benchStore = (*postgres.Store)(nil)
)

// wrkScript is api/testdata/wrk-submit.lua, looked up next to the binary's
// source tree or given by --script.
func benchAPI(ctx context.Context, args []string) error {
	fs_ := newFlags("bench api", "[--duration 10s] [--connections 64] [--threads 2] [--script api/testdata/wrk-submit.lua]",
		"Durable submissions per second against a bare echo handler; see edgepipe bench --help.")
	dur := fs_.Duration("duration", 10*time.Second, "how long each wrk run lasts")
	conns := fs_.Int("connections", 64, "concurrent connections")
	threads := fs_.Int("threads", 2, "wrk threads")
	script := fs_.String("script", "api/testdata/wrk-submit.lua", "wrk Lua script that posts unique Idempotency-Keys")
	cpuprofile := fs_.String("cpuprofile", "", "write a CPU profile of the durable run to this file")
	memprofile := fs_.String("memprofile", "", "write an allocation profile (pprof allocs: everything allocated since start-up, sampled) after the durable run to this file")
	if err := fs_.Parse(args); err != nil {
		return err
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk not found: install the Debian package wrk (apt-get install wrk)")
	}
	if _, err := os.Stat(*script); err != nil {
		return fmt.Errorf("--script: %w", err)
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "edgepipe-bench-api-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, realURL, stopReal, err := benchAPIServer(ctx, dir, cfg.DatabaseURL())
	if err != nil {
		return err
	}
	defer st.Close()
	defer stopReal()
	before, err := storedJobs(ctx, st)
	if err != nil {
		return err
	}
	bareURL, stopBare, err := serveLoopback(ctx, api.BareHandler())
	if err != nil {
		return err
	}
	defer stopBare()

	w := wrkRun{threads: *threads, conns: *conns, dur: *dur, script: *script}
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	real, err := w.run(ctx, realURL)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	if err := writeAllocProfile(*memprofile); err != nil {
		return err
	}
	bare, err := w.run(ctx, bareURL)
	if err != nil {
		return err
	}
	fmt.Printf("job store: %s\n", cfg.DatabaseKind())
	return reportBenchAPI(ctx, st, before, real, bare, *conns)
}

// benchAPIToken is the bench tenant's token, handed to wrk's script.
const benchAPIToken = "bench-token-0123456789"

// openBenchStore opens the Postgres store of databaseURL when it is set
// (EDGEPIPE_DATABASE_URL; it may already hold jobs, so the check counts
// the difference), else a fresh SQLite file in dir.
func openBenchStore(ctx context.Context, dir, databaseURL string, log *slog.Logger) (benchStore, error) {
	if databaseURL != "" {
		return postgres.Open(ctx, postgres.Config{URL: databaseURL, Logger: log})
	}
	return sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "edgepipe.db"), Logger: log})
}

// storedJobs counts every job in the store.
func storedJobs(ctx context.Context, st benchStore) (int, error) {
	counts, err := st.CountByStatus(ctx)
	if err != nil {
		return 0, err
	}
	stored := 0
	for _, n := range counts {
		stored += n
	}
	return stored, nil
}

// benchAPIServer serves the real API on the bench store (see
// openBenchStore), on loopback. The caller closes the store after stopping
// the server.
func benchAPIServer(ctx context.Context, dir, databaseURL string) (benchStore, string, func(), error) {
	log := slog.New(slog.DiscardHandler)
	st, err := openBenchStore(ctx, dir, databaseURL, log)
	if err != nil {
		return nil, "", nil, err
	}
	fail := func(err error) (benchStore, string, func(), error) {
		st.Close()
		return nil, "", nil, err
	}
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		return fail(err)
	}
	router, err := routing.NewRouter(routing.Config{})
	if err != nil {
		return fail(err)
	}
	srv, err := api.New(api.Config{Store: st, Objects: objs, Router: router, Tokens: map[string]string{benchAPIToken: "bench"}, Logger: log})
	if err != nil {
		return fail(err)
	}
	url, stop, err := serveLoopback(ctx, srv.Handler())
	if err != nil {
		return fail(err)
	}
	return st, url, stop, nil
}

// wrkRun is one wrk configuration; run drives it against a URL.
type wrkRun struct {
	threads, conns int
	dur            time.Duration
	script         string
}

// wrkResult is what bench api reads from wrk's output.
type wrkResult struct {
	rps, accepted float64
	n202, non202  int
	p50, p99      string
}

func (w wrkRun) run(ctx context.Context, url string) (wrkResult, error) {
	cmd := exec.CommandContext(ctx, "wrk", "-t"+strconv.Itoa(w.threads), "-c"+strconv.Itoa(w.conns),
		"-d"+w.dur.String(), "--latency", "-s", w.script, url)
	cmd.Env = append(os.Environ(), "EDGEPIPE_TOKEN="+benchAPIToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	return parseWrk(string(out))
}

// parseWrk reads wrk's summary and the script's accepted_202 line.
func parseWrk(text string) (wrkResult, error) {
	var r wrkResult
	if m := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`).FindStringSubmatch(text); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := regexp.MustCompile(`accepted_202=(\d+) non_202=(\d+) accepted_per_sec=([0-9.]+)`).FindStringSubmatch(text); m != nil {
		r.n202, _ = strconv.Atoi(m[1])
		r.non202, _ = strconv.Atoi(m[2])
		r.accepted, _ = strconv.ParseFloat(m[3], 64)
	}
	if m := regexp.MustCompile(`(?m)^\s+50%\s+(\S+)`).FindStringSubmatch(text); m != nil {
		r.p50 = m[1]
	}
	if m := regexp.MustCompile(`(?m)^\s+99%\s+(\S+)`).FindStringSubmatch(text); m != nil {
		r.p99 = m[1]
	}
	if r.rps == 0 {
		return r, fmt.Errorf("could not read wrk's output: %s", text)
	}
	return r, nil
}

// reportBenchAPI prints both runs and checks that every 202 is a stored
// job and that every submission got one.
func reportBenchAPI(ctx context.Context, st benchStore, before int, real, bare wrkResult, conns int) error {
	after, err := storedJobs(ctx, st)
	if err != nil {
		return err
	}
	stored := after - before
	fmt.Printf("durable submissions: %8.0f /s  (202s: %d, other: %d)  p50 %s  p99 %s\n", real.accepted, real.n202, real.non202, real.p50, real.p99)
	fmt.Printf("bare echo handler:   %8.0f /s  p50 %s  p99 %s\n", bare.rps, bare.p50, bare.p99)
	fmt.Printf("durable / bare: %.1f%%   new jobs in the database: %d\n", 100*real.accepted/bare.rps, stored)
	// wrk stops counting at the deadline while up to one request per
	// connection is still in flight; those commit but go uncounted.
	if stored < real.n202 || stored > real.n202+conns {
		return fmt.Errorf("the database holds %d jobs but %d submissions were answered 202", stored, real.n202)
	}
	if real.non202 != 0 {
		return fmt.Errorf("%d submissions were not answered 202", real.non202)
	}
	return nil
}

func serveLoopback(ctx context.Context, h http.Handler) (string, func(), error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "bench server:", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		// The stop runs in a defer, perhaps after ctx ended: shut down anyway.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

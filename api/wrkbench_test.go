//go:build wrkbench

package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

// TestWrkDurableSubmissions measures durable submissions per second with wrk
// (64 connections, unique Idempotency-Key per request) against the real API
// on SQLite, and against BareHandler in the same run, then checks that every
// 202 is a committed job. The lead's `edgepipe bench api` does the same from
// the CLI; this is the in-tree way to run it:
//
//	go test -tags wrkbench -run TestWrk -v ./api   (EDGEPIPE_BENCH_DURATION=30s)
func TestWrkDurableSubmissions(t *testing.T) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk not installed (apt-get install wrk)")
	}
	dur := os.Getenv("EDGEPIPE_BENCH_DURATION")
	if dur == "" {
		dur = "10s"
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "bench.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	router, _ := routing.NewRouter(routing.Config{})
	token := "bench-token-0123456789"
	srv, err := New(Config{Store: st, Objects: objs, Router: router, Tokens: map[string]string{token: "bench"}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, h http.Handler) (float64, int, int) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: h}
		go hs.Serve(ln)
		defer hs.Close()
		cmd := exec.Command(wrk, "-t2", "-c64", "-d"+dur, "--latency", "-s", "testdata/wrk-submit.lua", "http://"+ln.Addr().String())
		cmd.Env = append(os.Environ(), "EDGEPIPE_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: wrk: %v\n%s", name, err, out)
		}
		t.Logf("%s:\n%s", name, out)
		m := regexp.MustCompile(`accepted_202=(\d+) non_202=(\d+) accepted_per_sec=([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no summary in wrk output")
		}
		acc, _ := strconv.Atoi(string(m[1]))
		non, _ := strconv.Atoi(string(m[2]))
		rate, _ := strconv.ParseFloat(string(m[3]), 64)
		return rate, acc, non
	}
	bare := 1.0
	if os.Getenv("EDGEPIPE_BENCH_SKIP_BARE") == "" {
		bare, _, _ = run("bare echo handler", BareHandler())
		time.Sleep(500 * time.Millisecond)
	}
	durable, accepted, non := run("edgepipe API (durable)", srv.Handler())
	counts, err := st.CountByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed := counts[pipeline.StatusPending]
	fmt.Printf("bare=%.0f/s durable=%.0f/s ratio=%.1f%% accepted=%d non_202=%d committed=%d\n",
		bare, durable, 100*durable/bare, accepted, non, committed)
	if non != 0 {
		t.Errorf("%d answers were not 202", non)
	}
	// wrk stops counting at the deadline while up to one request per
	// connection is still in flight; those may commit after it.
	if committed < accepted || committed > accepted+64 {
		t.Errorf("%d jobs committed for %d accepted submissions", committed, accepted)
	}
	if durable < 5000 || durable < bare/10 {
		t.Errorf("durable %.0f/s is below the target (≥ 5000/s and ≥ 10%% of bare %.0f/s)", durable, bare)
	}
}

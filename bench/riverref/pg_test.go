package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a Postgres worker process: the
// matrix re-executes os.Executable() with -child, which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunPGMatrix burns down a small queue on both sides with 1 and 2
// worker processes against a real Postgres (EDGEPIPE_TEST_DATABASE_URL,
// e.g. from scripts/postgres.sh) and checks the table. Without a server it
// skips, unless CI is set, where it fails.
// testDatabaseURL is the test server's URL; without one the test is
// skipped, or fails under CI.
func testDatabaseURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("EDGEPIPE_TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("EDGEPIPE_TEST_DATABASE_URL is not set (CI)")
		}
		t.Skip("EDGEPIPE_TEST_DATABASE_URL is not set")
	}
	return url
}

func TestRunPGMatrix(t *testing.T) {
	url := testDatabaseURL(t)
	cfg := &Config{Jobs: 300, Workers: 20, InsertBatch: 100, FetchCooldown: 2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond, Timeout: 45 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	var out bytes.Buffer
	pc := &PGConfig{AdminURL: url, Jobs: cfg.Jobs, Workers: cfg.Workers, Procs: []int{1, 2}, Runs: 1, Config: cfg, Analyze: true}
	if err := RunPGMatrix(ctx, pc, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[3], "| 1 | ") || !strings.HasPrefix(lines[4], "| 2 | ") {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, l := range lines[3:] {
		if strings.Contains(l, "| 0 |") || strings.Contains(l, "NaN") || strings.Contains(l, "Inf") {
			t.Errorf("a side measured nothing: %s", l)
		}
		// The server is on this machine (scripts/postgres.sh): its
		// backends' and the workers' CPU time can be read from /proc, and
		// claiming and settling 300 jobs costs each side more than
		// nothing (the database's in steps of one 10 ms tick over 300
		// jobs, the workers' in nanoseconds where schedstat has them).
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) != 6 {
			t.Fatalf("row %q: %d cells, want 6", l, len(cells))
		}
		for _, cell := range cells[4:] {
			for _, v := range strings.Split(cell, " / ") {
				if n, err := strconv.Atoi(v); err != nil || n <= 0 {
					t.Errorf("CPU time not measured (%q in %s)", v, l)
				}
			}
		}
	}
}

// With -work, a job waits that long on both sides: no side may complete
// jobs faster than its workers can wait (workers × processes / work), which
// a burn-down of no-op jobs would, by far; each must reach 40% of that
// (a side whose workers sat idle between jobs would not), and two
// processes must do more than one (a process claiming more than its idle
// workers can start would leave the other nothing).
func TestRunPGMatrixWork(t *testing.T) {
	url := testDatabaseURL(t)
	const workers, work = 5, 20 * time.Millisecond
	cfg := &Config{Jobs: 400, Workers: workers, InsertBatch: 100, FetchCooldown: 2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond, Timeout: 45 * time.Second, Work: work,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	var out bytes.Buffer
	pc := &PGConfig{AdminURL: url, Jobs: cfg.Jobs, Workers: cfg.Workers, Procs: []int{1, 2}, Runs: 1, Config: cfg}
	if err := RunPGMatrix(ctx, pc, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "jobs of 20ms each") {
		t.Fatalf("table:\n%s", out.String())
	}
	rates := map[string][]float64{}
	for i, procs := range pc.Procs {
		cells := strings.Split(strings.Trim(lines[3+i], "| "), " | ")
		ceiling := float64(workers*procs) / work.Seconds()
		for side, cell := range map[string]string{"edgepipe": cells[1], "river": cells[2]} {
			rate, err := strconv.ParseFloat(cell, 64)
			if err != nil || rate < 0.4*ceiling || rate > 1.05*ceiling {
				t.Errorf("%s, %d processes: %s jobs/s (%v), want %.0f-%.0f", side, procs, cell, err, 0.4*ceiling, 1.05*ceiling)
			}
			rates[side] = append(rates[side], rate)
		}
	}
	for side, r := range rates {
		if len(r) == 2 && r[1] < 1.25*r[0] {
			t.Errorf("%s: %.0f jobs/s with 2 processes against %.0f with 1", side, r[1], r[0])
		}
	}
}

func TestParseProcs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,2,4", []int{1, 2, 4}, true},
		{" 3 ", []int{3}, true},
		{"0", nil, false},
		{"1,x", nil, false},
		{"", nil, false},
	} {
		got, err := parseProcs(tc.in)
		if (err == nil) != tc.ok || (tc.ok && !equalInts(got, tc.want)) {
			t.Errorf("parseProcs(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median(nil) = %v", m)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

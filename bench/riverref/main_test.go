package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func testConfig(t *testing.T) *Config {
	t.Helper()
	return &Config{
		Jobs:              300,
		Workers:           20,
		DBPath:            filepath.Join(t.TempDir(), "river.sqlite3"),
		InsertBatch:       128, // several InsertMany calls, last one partial
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		StmtCache:         64,
		Timeout:           time.Minute,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func TestRunBurnsDownEveryJob(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name      string
		stmtCache int
		pollOnly  bool
	}{
		{"StmtCache", 64, false},
		{"NoStmtCache", 0, false},
		{"PollOnly", 64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.StmtCache, cfg.PollOnly = tc.stmtCache, tc.pollOnly

			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Observed != cfg.Jobs {
				t.Errorf("observed %d completions before stopping the clock, want %d", res.Observed, cfg.Jobs)
			}
			if res.Completed != cfg.Jobs {
				t.Errorf("completed = %d, want %d", res.Completed, cfg.Jobs)
			}
			if res.Insert <= 0 || res.BurnDown <= 0 {
				t.Errorf("durations not measured: insert=%s burn-down=%s", res.Insert, res.BurnDown)
			}
			if res.JournalMode != "wal" || res.Synchronous != 1 {
				t.Errorf("pragmas = %s/%d, want wal/1 (NORMAL)", res.JournalMode, res.Synchronous)
			}
		})
	}
}

func TestRunRefusesExistingDB(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	if err := os.WriteFile(cfg.DBPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Run on existing file: err = %v, want 'already exists'", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"Valid", func(*Config) {}, true},
		{"NoJobs", func(c *Config) { c.Jobs = 0 }, false},
		{"NoWorkers", func(c *Config) { c.Workers = 0 }, false},
		{"TooManyWorkers", func(c *Config) { c.Workers = 10_001 }, false},
		{"NoBatch", func(c *Config) { c.InsertBatch = 0 }, false},
		{"CooldownBelowRiverMin", func(c *Config) { c.FetchCooldown = time.Microsecond }, false},
		{"PollBelowRiverMin", func(c *Config) { c.FetchPollInterval = 0 }, false},
		{"NegativeStmtCache", func(c *Config) { c.StmtCache = -1 }, false},
		{"NoTimeout", func(c *Config) { c.Timeout = 0 }, false},
		{"NoLogger", func(c *Config) { c.Logger = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			tc.mutate(cfg)
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%t", err, tc.ok)
			}
		})
	}
}

// The issue compares these two lines by eye and by script, so their shape is
// part of the contract.
func TestPrintResultFormat(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	printResult(&buf, &Result{Jobs: 20000, Insert: 500 * time.Millisecond, BurnDown: 4 * time.Second})

	want := regexp.MustCompile(`^river insert: 20000 jobs in 0\.500s = 40000 jobs/s\n` +
		`river burn-down: 20000 jobs in 4\.000s = 5000 jobs/s\n$`)
	if !want.Match(buf.Bytes()) {
		t.Fatalf("output:\n%s", buf.String())
	}
}

func TestOthersCores(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	snap := func(at time.Duration, busy, own time.Duration) cpuSnapshot {
		return cpuSnapshot{at: t0.Add(at), busy: busy, ownUsed: own}
	}
	errX := os.ErrNotExist
	for _, tc := range []struct {
		name          string
		before, after cpuSnapshot
		errB, errA    error
		want          float64
	}{
		{"OthersUsedOneCore", snap(0, 0, 0), snap(2*time.Second, 3*time.Second, time.Second), nil, nil, 1},
		{"OnlyUs", snap(0, 5*time.Second, time.Second), snap(time.Second, 6*time.Second, 2*time.Second), nil, nil, 0},
		{"TickRoundingClampsAtZero", snap(0, 0, 0), snap(time.Second, 0, 10*time.Millisecond), nil, nil, 0},
		{"ZeroWall", snap(0, 0, 0), snap(0, time.Second, 0), nil, nil, -1},
		{"ErrBefore", snap(0, 0, 0), snap(time.Second, 0, 0), errX, nil, -1},
		{"ErrAfter", snap(0, 0, 0), snap(time.Second, 0, 0), nil, errX, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := othersCores(tc.before, tc.after, tc.errB, tc.errA); got != tc.want {
				t.Fatalf("othersCores = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTakeCPUSnapshot(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat on this OS; contention is reported as -1")
	}
	a, err := takeCPUSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3e7; i++ { // burn a little CPU so ownUsed must grow
		_ = i * i
	}
	b, err := takeCPUSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if b.busy < a.busy || b.ownUsed <= a.ownUsed {
		t.Fatalf("snapshots not monotonic: %+v then %+v", a, b)
	}
}

// TestProcTimes reads this process's own /proc/<pid>/stat: its parent is
// the one the kernel reports, and the CPU time it burns shows up.
func TestProcTimes(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, _, ppid, err := procTimes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", ppid, os.Getppid())
	}
	for after := before; after < before+5*clockTick; {
		for i := 0; i < 1e7; i++ {
			spin += i
		}
		if after, _, _, err = procTimes(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := procTimes(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

var spin int

// threadsCPU reads this process's own threads, and counts the CPU it
// spends in nanoseconds, where /proc/<pid>/stat moves in 10 ms steps: spin
// until it has grown by a millisecond (on a loaded machine the spin may
// wait for a core, so the deadline is wall time, not the measure).
func TestThreadsCPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	before, err := threadsCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var d time.Duration
	for deadline := time.Now().Add(20 * time.Second); d < time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("20 s of spinning counted as %v", d)
		}
		for x := 0; x < 100_000; x++ {
			_ = time.Now()
		}
		after, err := threadsCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after < before {
			t.Fatalf("CPU time went back: %v after %v", after, before)
		}
		d = after - before
	}
	if d%clockTick == 0 {
		t.Fatalf("counted %v, a whole number of 10 ms ticks: not the scheduler's nanoseconds", d)
	}
	if _, err := threadsCPU(-1); err == nil {
		t.Fatal("threadsCPU of no process: no error")
	}
}

package pipeline_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

// countingLedger counts sweeps (each starts with DropStaleClaims).
type countingLedger struct {
	*sqlite.Store
	sweeps atomic.Int32
}

func (l *countingLedger) DropStaleClaims(ctx context.Context, cutoffMS int64) ([]string, error) {
	l.sweeps.Add(1)
	return l.Store.DropStaleClaims(ctx, cutoffMS)
}

func newSweepFixture(t *testing.T) (*countingLedger, *fs.Store) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "db"), Clock: pipeline.NewManualClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "o")})
	if err != nil {
		t.Fatal(err)
	}
	return &countingLedger{Store: st}, objs
}

// The report counts every object looked at under edgepipe's prefixes, and
// nothing outside them.
func TestSweepReportScanned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	led, objs := newSweepFixture(t)
	for _, key := range []string{"units/v1/aa/a.png", "units/v1/bb/b.wav", "renders/v1/cc/c.mp4", "elsewhere/d.bin"} {
		if _, err := objs.Put(ctx, key, strings.NewReader("x"), pipeline.PutOptions{ContentType: "application/octet-stream", CreateOnly: true}); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: led, Objects: objs, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scanned != 3 || len(rep.Orphans) != 0 {
		t.Fatalf("report %+v, want 3 scanned and no orphan yet (all younger than the grace)", rep)
	}
}

// Start sweeps every Interval; the default interval (10 min) does not sweep
// at once, and Stop ends the loop either way.
func TestSweeperStartInterval(t *testing.T) {
	t.Parallel()
	t.Run("configured", func(t *testing.T) {
		t.Parallel()
		led, objs := newSweepFixture(t)
		sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: led, Objects: objs, Interval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for led.sweeps.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := sw.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := led.sweeps.Load(); n < 3 {
			t.Fatalf("%d sweeps in 10s with a 10ms interval", n)
		}
	})
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		led, objs := newSweepFixture(t)
		sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: led, Objects: objs})
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := sw.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := led.sweeps.Load(); n != 0 {
			t.Fatalf("%d sweeps within 100ms with the default 10 min interval", n)
		}
	})
}

// Stopping a sweeper that never started is a no-op, not a hang.
func TestSweeperStopBeforeStart(t *testing.T) {
	t.Parallel()
	led, objs := newSweepFixture(t)
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: led, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sw.Stop(context.Background()) }()
	if err := within(t, done, "Stop of an unstarted sweeper"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

func TestSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// The fs store stamps objects with the real time; the clock starts there.
	clock := pipeline.NewManualClock(time.Now())
	st := openStore(t, filepath.Join(dir, "db"), clock)
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "o")})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) pipeline.ObjectInfo {
		info, err := objs.Put(ctx, key, strings.NewReader("data "+key), pipeline.PutOptions{ContentType: "image/png", CreateOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	if _, _, err := st.CreateJob(ctx, pipeline.NewJob{ID: "v1-j", Tenant: "t", Operation: "o", IdempotencyKey: "k", RequestFingerprint: "f", Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	cs, _, _ := st.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: 3 * time.Hour})
	lease := cs[0].Lease
	// committed: kept
	info := put("units/v1/aa/committed.png")
	_ = st.ClaimObject(ctx, lease, "units/v1/aa/committed.png")
	if err := st.CommitAsset(ctx, lease, pipeline.Asset{Key: "units/v1/aa/committed.png", Kind: "image", SizeBytes: info.Size, SHA256: info.SHA256, ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	// claimed by the live attempt, upload done, asset row pending: kept
	put("units/v1/aa/inflight.png")
	_ = st.ClaimObject(ctx, lease, "units/v1/aa/inflight.png")
	// nobody's: deleted once old enough
	put("units/v1/aa/orphan.png")
	put("renders/v1/bb/orphan.mp4")
	// outside edgepipe's prefixes: never touched
	put("elsewhere/keep.bin")

	sweep := func(dry bool) pipeline.SweepReport {
		sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: st, Objects: objs, Grace: time.Hour, Clock: clock, DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sw.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := sweep(false); rep.Deleted != 0 {
		t.Fatalf("young objects deleted: %+v", rep)
	}
	clock.Advance(2 * time.Hour)
	if rep := sweep(true); rep.Deleted != 0 || len(rep.Orphans) != 2 {
		t.Fatalf("dry run: %+v", rep)
	}
	rep := sweep(false)
	slices.Sort(rep.Orphans)
	if rep.Deleted != 2 || strings.Join(rep.Orphans, ",") != "renders/v1/bb/orphan.mp4,units/v1/aa/orphan.png" {
		t.Fatalf("sweep: %+v", rep)
	}
	for key, want := range map[string]bool{
		"units/v1/aa/committed.png": true, "units/v1/aa/inflight.png": true, "units/v1/aa/orphan.png": false,
		"renders/v1/bb/orphan.mp4": false, "elsewhere/keep.bin": true,
	} {
		_, err := objs.Head(ctx, key)
		if (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", key, err == nil, want)
		}
	}
	// The attempt dies; its in-flight object becomes an orphan and goes too.
	clock.Advance(4 * time.Hour)
	rep = sweep(false)
	if rep.StaleClaims != 1 || rep.Deleted != 1 {
		t.Fatalf("after the attempt died: %+v", rep)
	}
}

// countingLedger counts sweeps (each starts with DropStaleClaims). With
// fail set it fails every sweep there; with held set it holds each sweep
// there until the sweep's context ends (both set before the sweeper
// starts).
type countingLedger struct {
	*sqlite.Store
	sweeps atomic.Int32
	fail   error
	held   chan struct{} // receives a value as each held sweep begins
}

func (l *countingLedger) DropStaleClaims(ctx context.Context, cutoffMS int64) ([]string, error) {
	l.sweeps.Add(1)
	if l.held != nil {
		l.held <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if l.fail != nil {
		return nil, l.fail
	}
	return l.Store.DropStaleClaims(ctx, cutoffMS)
}

func newSweepFixture(t *testing.T) (*countingLedger, *fs.Store) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, filepath.Join(dir, "db"), pipeline.NewManualClock(time.Now()))
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

// A sweep that fails in the background is logged as a warning with its
// error (nothing else would report it), but a sweep that Stop cut short
// is not a failure and is not logged.
func TestSweeperStartLogsFailedSweeps(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, led *countingLedger, objs *fs.Store, logs *bytes.Buffer) *pipeline.Sweeper {
		t.Helper()
		sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: led, Objects: objs, Interval: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return sw
	}
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		led, objs := newSweepFixture(t)
		led.fail = errors.New("ledger unreachable")
		var logs bytes.Buffer
		sw := start(t, led, objs, &logs)
		deadline := time.Now().Add(10 * time.Second)
		for led.sweeps.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := sw.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := led.sweeps.Load(); n < 2 {
			t.Fatalf("%d sweeps in 10s with a 5ms interval", n)
		}
		if !strings.Contains(logs.String(), "sweep failed") || !strings.Contains(logs.String(), "ledger unreachable") {
			t.Errorf("%d sweeps failed; log:\n%s", led.sweeps.Load(), logs.String())
		}
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		led, objs := newSweepFixture(t)
		led.held = make(chan struct{}, 1)
		var logs bytes.Buffer
		sw := start(t, led, objs, &logs)
		within(t, led.held, "the first sweep")
		if err := sw.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if logs.Len() != 0 {
			t.Errorf("a sweep cut short by Stop was logged:\n%s", logs.String())
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

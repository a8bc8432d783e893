package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// A zero setting takes its default; a setting the caller chose is kept.
func TestEngineConfigDefaults(t *testing.T) {
	t.Parallel()
	var c EngineConfig
	c.setDefaults()
	if d := DefaultRetryPolicy(); c.Retry.Base != d.Base || c.Retry.Cap != d.Cap || c.Retry.MaxAttempts != d.MaxAttempts || c.Clock == nil || c.Logger == nil || c.Metrics == nil {
		t.Fatalf("zero config: %+v", c)
	}
	for _, tc := range []struct {
		name string
		got  any
		want any
	}{
		{"unit concurrency", c.UnitConcurrency, 4},
		{"clip concurrency", c.ClipConcurrency, min(runtime.GOMAXPROCS(0), 64)},
		{"temp dir", c.TempDir, os.TempDir()},
		{"video poll interval", c.VideoPollInterval, 100 * time.Millisecond},
		{"video timeout", c.VideoTimeout, 10 * time.Minute},
		{"spool patience", c.SpoolPatience, 30 * time.Second},
		{"rate slot TTL", c.RateLimits.SlotTTL, DefaultRateSlotTTL},
		{"rate poll", c.RateLimits.Poll, DefaultRatePoll},
	} {
		if tc.got != tc.want {
			t.Errorf("default %s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	log := slog.New(slog.DiscardHandler)
	set := EngineConfig{
		Retry:           RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 2},
		Clock:           NewManualClock(time.Unix(0, 0)),
		Logger:          log,
		Metrics:         nopMetrics{},
		UnitConcurrency: 9, ClipConcurrency: 5, TempDir: "/x", VideoPollInterval: 7 * time.Millisecond, VideoTimeout: 3 * time.Second, SpoolPatience: time.Second,
		RateLimits: RateLimits{SlotTTL: time.Hour, Poll: time.Millisecond},
	}
	c = set
	c.setDefaults()
	if c.Retry.MaxAttempts != 2 || c.Retry.Base != time.Second || c.Clock != set.Clock || c.Logger != log || c.UnitConcurrency != 9 || c.ClipConcurrency != 5 || c.TempDir != "/x" ||
		c.VideoPollInterval != 7*time.Millisecond || c.VideoTimeout != 3*time.Second || c.SpoolPatience != time.Second ||
		c.RateLimits.SlotTTL != time.Hour || c.RateLimits.Poll != time.Millisecond {
		t.Fatalf("explicit settings changed by defaults: %+v", c)
	}
}

// localErr: apply and finalize cannot pay, so a failure there without a
// class is retried; anything already classified, a fence, a cancellation
// or a deadline passes through untouched.
func TestLocalErr(t *testing.T) {
	t.Parallel()
	ce := &ClassifiedError{Class: ClassPermanent, Code: "x"}
	fe := &FenceError{JobID: "j", AttemptID: "a", Op: "o"}
	for _, err := range []error{ce, fe, ErrCanceled, context.Canceled, context.DeadlineExceeded, fmt.Errorf("wrapped: %w", ce)} {
		if got := localErr(err); got != err { //nolint:errorlint // identity: localErr must return err itself
			t.Errorf("localErr(%v) = %v, want it unchanged", err, got)
		}
	}
	if got := localErr(nil); got != nil {
		t.Errorf("localErr(nil) = %v", got)
	}
	plain := errors.New("write clip: no space left on device")
	var got *ClassifiedError
	if !errors.As(localErr(plain), &got) || got.Class != ClassTransient || got.Code != "render_failed" || !errors.Is(got, plain) {
		t.Fatalf("localErr(plain) = %#v, want transient render_failed wrapping it", localErr(plain))
	}
}

// readAnswer takes an answer of exactly the limit whole and refuses one
// byte more (a provider streaming without end must not exhaust memory).
func TestReadAnswerLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size, limit int
		ok          bool
	}{{0, 8, true}, {7, 8, true}, {8, 8, true}, {9, 8, false}, {100, 8, false}} {
		in := strings.Repeat("x", tc.size)
		b, err := readAnswer(io.NopCloser(strings.NewReader(in)), tc.limit)
		if tc.ok && (err != nil || string(b) != in) {
			t.Errorf("size %d limit %d: %d bytes, %v; want all of it", tc.size, tc.limit, len(b), err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "larger than 8 bytes")) {
			t.Errorf("size %d limit %d: %d bytes, %v; want refused", tc.size, tc.limit, len(b), err)
		}
	}
	broken := io.NopCloser(io.MultiReader(strings.NewReader("par"), iotest.ErrReader(errors.New("connection reset"))))
	if _, err := readAnswer(broken, 8); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("broken answer: %v", err)
	}
}

// The spool write backs off 100 ms, doubling, capped at 2 s.
func TestSpoolBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for n, w := range want {
		if got := spoolBackoff(n); got != w {
			t.Errorf("spoolBackoff(%d) = %s, want %s", n, got, w)
		}
	}
	if got := spoolBackoff(1000); got != 2*time.Second {
		t.Errorf("spoolBackoff(1000) = %s, want 2s (no overflow)", got)
	}
}

// A zero worker setting takes its default; a chosen one is kept.
func TestWorkerConfigDefaults(t *testing.T) {
	t.Parallel()
	var c WorkerConfig
	c.setDefaults()
	if c.Concurrency != 2 || c.LeaseFor != 30*time.Second || c.Poll != 200*time.Millisecond || c.PruneEvery != 10*time.Minute ||
		c.FlushEvery != 10*time.Second || c.Clock == nil || c.Logger == nil {
		t.Fatalf("zero config: %+v", c)
	}
	set := WorkerConfig{Concurrency: 7, LeaseFor: 9 * time.Second, Poll: time.Second, PruneEvery: time.Hour, FlushEvery: time.Minute,
		Clock: NewManualClock(time.Unix(0, 0)), Logger: slog.New(slog.DiscardHandler)}
	c = set
	c.setDefaults()
	if c.Concurrency != 7 || c.LeaseFor != 9*time.Second || c.Poll != time.Second || c.PruneEvery != time.Hour || c.FlushEvery != time.Minute || c.Clock != set.Clock || c.Logger != set.Logger {
		t.Fatalf("explicit settings changed by defaults: %+v", c)
	}
}

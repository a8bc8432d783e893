package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
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
		{"temp dir", c.TempDir, os.TempDir()},
		{"video poll interval", c.VideoPollInterval, 100 * time.Millisecond},
		{"video timeout", c.VideoTimeout, 10 * time.Minute},
		{"spool patience", c.SpoolPatience, 30 * time.Second},
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
		UnitConcurrency: 9, TempDir: "/x", VideoPollInterval: 7 * time.Millisecond, VideoTimeout: 3 * time.Second, SpoolPatience: time.Second,
	}
	c = set
	c.setDefaults()
	if c.Retry.MaxAttempts != 2 || c.Retry.Base != time.Second || c.Clock != set.Clock || c.Logger != log || c.UnitConcurrency != 9 || c.TempDir != "/x" ||
		c.VideoPollInterval != 7*time.Millisecond || c.VideoTimeout != 3*time.Second || c.SpoolPatience != time.Second {
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
		if got := localErr(err); got != err {
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

package pipeline

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOutcomeEventDetail(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 12, 2, 9, 0, 0, 0, time.FixedZone("KST", 9*3600))
	got := Outcome{Status: StatusRetryWait, ErrorCode: "s3_down", Reason: "r", Infra: true, NextRunAt: next}.EventDetail(nil)
	want := map[string]any{"error_code": "s3_down", "reason": "r", "waiting_for": "infrastructure", "next_run_at": next.UTC()}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("detail = %v, want %v", got, want)
	}
	if loc := got["next_run_at"].(time.Time).Location(); loc != time.UTC {
		t.Errorf("next_run_at in %v, want UTC", loc)
	}
	kept := Outcome{Status: StatusSucceeded}.EventDetail(map[string]any{"render": "k"})
	if !reflect.DeepEqual(kept, map[string]any{"render": "k"}) {
		t.Errorf("a bare outcome changed the caller's detail: %v", kept)
	}
	if d := (Outcome{}).EventDetail(nil); d == nil || len(d) != 0 {
		t.Errorf("empty outcome detail = %v, want an empty map", d)
	}
}

func TestDeadLetterCheckOpen(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0)
	if err := (DeadLetter{ID: 1}).CheckOpen(); err != nil {
		t.Errorf("open dead letter: %v", err)
	}
	for name, d := range map[string]DeadLetter{
		"redriven":  {ID: 7, RedrivenAt: at},
		"discarded": {ID: 7, DiscardedAt: at},
	} {
		err := d.CheckOpen()
		if !errors.Is(err, ErrInvalidTransition) || !strings.Contains(err.Error(), "already "+name) {
			t.Errorf("%s: err = %v, want ErrInvalidTransition saying already %s", name, err, name)
		}
	}

}

func TestSettleRefused(t *testing.T) {
	t.Parallel()
	var fe *FenceError
	if err := SettleRefused("j1", StatusRunning, "att-1"); !errors.As(err, &fe) || fe.JobID != "j1" || fe.AttemptID != "att-1" || fe.Op != "finish" {
		t.Errorf("attempt: err = %#v, want a FenceError for j1/att-1", err)
	}
	err := SettleRefused("j1", StatusNeedsReview, "")
	if !errors.Is(err, ErrInvalidTransition) || errors.As(err, &fe) || !strings.Contains(err.Error(), "no longer needs_review") {
		t.Errorf("operator: err = %v, want ErrInvalidTransition naming the status", err)
	}
}

// A discard needs a reason of at most MaxOperatorReason bytes.
func TestCheckDiscardReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason string
		ok     bool
	}{{"", false}, {"dup", true}, {strings.Repeat("x", MaxOperatorReason), true}, {strings.Repeat("x", MaxOperatorReason+1), false}} {
		err := CheckDiscardReason(tc.reason)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidInput)) {
			t.Errorf("CheckDiscardReason(%d bytes) = %v, want ok=%v", len(tc.reason), err, tc.ok)
		}
	}
}

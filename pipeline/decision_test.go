package pipeline

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The helpers below are what every job store settles with; the drivers'
// conformance suite (storage/storetest) checks them through the databases,
// these check them directly.

func TestDecisionOutcome(t *testing.T) {
	t.Parallel()
	review := Job{Status: StatusNeedsReview, LastErrorClass: ClassAmbiguous, LastErrorCode: "timeout"}
	for _, tc := range []struct {
		name             string
		job              Job
		d                ReviewDecision
		operator, reason string
		want             Outcome
		wantEvent        map[string]any
		wantErr          error
	}{
		{name: "retry", job: review, d: DecisionRetry, operator: "alice",
			want: Outcome{Status: StatusPending}, wantEvent: map[string]any{"decision": DecisionRetry, "operator": "alice"}},
		{name: "retry with reason", job: review, d: DecisionRetry, operator: "alice", reason: "provider confirmed no charge",
			want:      Outcome{Status: StatusPending},
			wantEvent: map[string]any{"decision": DecisionRetry, "operator": "alice", "reason": "provider confirmed no charge"}},
		{name: "fail keeps the class and code", job: review, d: DecisionFail, operator: "bob", reason: "charged twice",
			want:      Outcome{Status: StatusFailed, ErrorClass: ClassAmbiguous, ErrorCode: "timeout", ErrorMessage: "failed by operator bob: charged twice"},
			wantEvent: map[string]any{"decision": DecisionFail, "operator": "bob", "reason": "charged twice"}},
		{name: "fail without operator or reason", job: review, d: DecisionFail,
			want:      Outcome{Status: StatusFailed, ErrorClass: ClassAmbiguous, ErrorCode: "timeout", ErrorMessage: "failed by operator"},
			wantEvent: map[string]any{"decision": DecisionFail, "operator": ""}},
		{name: "unknown decision", job: review, d: "maybe", wantErr: ErrInvalidInput},
		{name: "overlong reason", job: review, d: DecisionRetry, reason: strings.Repeat("x", MaxOperatorReason+1), wantErr: ErrInvalidInput},
		{name: "not in review", job: Job{Status: StatusRunning}, d: DecisionRetry, wantErr: ErrInvalidTransition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, ev, err := DecisionOutcome(tc.job, tc.d, tc.operator, tc.reason)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o != tc.want {
				t.Errorf("outcome = %+v, want %+v", o, tc.want)
			}
			if !reflect.DeepEqual(ev, tc.wantEvent) {
				t.Errorf("event = %v, want %v", ev, tc.wantEvent)
			}
		})
	}
	if err := CheckDecisionReason(strings.Repeat("x", MaxOperatorReason)); err != nil {
		t.Errorf("a reason of exactly MaxOperatorReason bytes: %v", err)
	}
}

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

func TestUnboundVersionOutcome(t *testing.T) {
	t.Parallel()
	o := UnboundVersionOutcome()
	want := Outcome{Status: StatusDeadLettered, Reason: ReasonUnboundVersion, RequiresAction: true,
		ErrorClass: ClassPermanent, ErrorCode: ReasonUnboundVersion, ErrorMessage: DeadLetterMessage(ReasonUnboundVersion)}
	if o != want {
		t.Errorf("outcome = %+v, want %+v", o, want)
	}
	if got := UnboundVersionDetail("v3", []string{"v1", "v2"}); got != "no live process binds v3 (live: v1,v2)" {
		t.Errorf("detail = %q", got)
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

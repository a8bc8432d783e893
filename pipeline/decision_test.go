package pipeline

import (
	"errors"
	"reflect"
	"strings"
	"testing"
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
		// The decision is checked before the job's status: a bad request is
		// bad input whatever the job's state.
		{name: "unknown decision on a running job", job: Job{Status: StatusRunning}, d: "maybe", wantErr: ErrInvalidInput},
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
	// Refusing a job that is not in review names the transition the
	// decision would have made.
	for d, to := range map[ReviewDecision]Status{DecisionRetry: StatusPending, DecisionFail: StatusFailed} {
		_, _, err := DecisionOutcome(Job{Status: StatusSucceeded}, d, "op", "")
		var te *TransitionError
		if !errors.As(err, &te) || te.From != StatusSucceeded || te.To != to {
			t.Errorf("%s on a succeeded job: %#v, want a TransitionError succeeded→%s", d, err, to)
		}
	}
	if err := CheckDecisionReason(strings.Repeat("x", MaxOperatorReason)); err != nil {
		t.Errorf("a reason of exactly MaxOperatorReason bytes: %v", err)
	}
}

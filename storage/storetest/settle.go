package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// The rules every store settles with live in pipeline (Outcome.EventDetail,
// UnboundVersionOutcome, DeadLetter.CheckOpen, CheckDiscardReason); these
// tests hold each driver to them through the database, so a driver that
// wrote its own version of a rule would fail here.

// A settle's status event records the outcome's error code, that the job
// waits for infrastructure, and when it runs next (in UTC).
func testSettleEventDetail(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-infra"))
	c := fetchOne(t, s, "render-v1", "w")
	next := clock.Now().Add(90 * time.Second).In(time.FixedZone("KST", 9*3600))
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: next,
		ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", Infra: true}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = 'v1-infra' AND kind = 'status' AND to_status = 'retry_wait'
		AND detail_json ->> 'error_code' = 'object_store_error' AND detail_json ->> 'waiting_for' = 'infrastructure'
		AND detail_json ->> 'next_run_at' = ?`, next.UTC().Format(time.RFC3339Nano)); n != 1 {
		t.Fatalf("%d retry_wait events with the error code, waiting_for and a UTC next_run_at, want 1", n)
	}
}

// A job whose version no live process binds is settled dead-lettered and
// asking for an operator, with the reason's class, code and message, and
// its dead letter names the version and the live ones.
func testUnboundVersionSettle(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	nj := newJob("v2-lost")
	nj.Version, nj.Queue = "v2", "render-v2"
	mustCreate(t, s, nj)
	clock.Advance(time.Hour)
	if n, err := s.DeadLetterUnserved(ctx, &pipeline.DeadLetterUnservedParams{Live: []string{"v1", "v3"}, IdleSince: clock.Now()}); err != nil || n != 1 {
		t.Fatalf("moved %d, %v; want 1", n, err)
	}
	j, err := s.GetJob(ctx, "v2-lost")
	if err != nil {
		t.Fatal(err)
	}
	want := pipeline.UnboundVersionOutcome()
	if j.Status != want.Status || !j.RequiresAction || j.LastErrorClass != want.ErrorClass || j.LastErrorCode != want.ErrorCode || j.LastErrorMessage != want.ErrorMessage {
		t.Fatalf("job %s requires_action=%v error %s/%s %q; want %+v", j.Status, j.RequiresAction, j.LastErrorClass, j.LastErrorCode, j.LastErrorMessage, want)
	}
	if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = 'v2-lost' AND kind = 'status' AND to_status = 'dead_lettered'
		AND detail_json ->> 'reason' = 'unbound_version' AND detail_json ->> 'error_code' = 'unbound_version'`); n != 1 {
		t.Fatalf("%d dead_lettered events with the reason, want 1", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM dead_letters WHERE job_id = 'v2-lost' AND reason = 'unbound_version' AND detail = ?`,
		pipeline.UnboundVersionDetail("v2", []string{"v1", "v3"})); n != 1 {
		t.Fatalf("%d dead letters with the version's detail, want 1", n)
	}
}

// A discard's reason is bounded, and settling a dead letter twice is refused
// with an error that says how it was settled.
func testDeadLetterSettleRefusals(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	deadLettered(t, s, 2)
	open, err := s.ListDeadLetters(ctx, false, 0, 0)
	if err != nil || len(open) != 2 {
		t.Fatalf("open: %+v, %v", open, err)
	}
	discarded, redriven := open[0], open[1]
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: discarded.ID, Operator: "alice", Reason: strings.Repeat("x", pipeline.MaxOperatorReason+1)}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("overlong discard reason: %v", err)
	}
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: discarded.ID, Operator: "alice", Reason: strings.Repeat("x", pipeline.MaxOperatorReason)}); err != nil {
		t.Fatalf("discard reason of exactly the bound: %v", err)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: redriven.ID, Queue: "render-v2", Operator: "bob"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		try  func() error
		says string
	}{
		{"discard a discarded one", func() error {
			_, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: discarded.ID, Operator: "bob", Reason: "x"})
			return err
		}, "already discarded"},
		{"redrive a discarded one", func() error {
			_, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: discarded.ID, Queue: "render-v2", Operator: "bob"})
			return err
		}, "already discarded"},
		{"discard a redriven one", func() error {
			_, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: redriven.ID, Operator: "bob", Reason: "x"})
			return err
		}, "already redriven"},
		{"redrive a redriven one", func() error {
			_, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: redriven.ID, Queue: "render-v2", Operator: "bob"})
			return err
		}, "already redriven"},
	} {
		if err := tc.try(); !errors.Is(err, pipeline.ErrInvalidTransition) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrInvalidTransition saying %q", tc.name, err, tc.says)
		}
	}
}

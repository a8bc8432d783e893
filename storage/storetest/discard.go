package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// toReview creates job id and moves it to needs_review, as an attempt whose
// provider call had an unknown outcome would.
func toReview(t *testing.T, s *env, id string) {
	t.Helper()
	mustCreate(t, s, newJob(id))
	c := fetchOne(t, s, "render-v1", "w")
	if err := s.Finish(context.Background(), c.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_ambiguous",
		ErrorMessage: "a provider call may have been billed without an answer; an operator must decide"}); err != nil {
		t.Fatal(err)
	}
}

// A decision is recorded on the job (what, who, why, when) and in its
// event; a failed job's message names the operator and the reason instead
// of still asking for a decision.
func testDecisionRecorded(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	tests := []struct {
		id, reason string
		d          pipeline.ReviewDecision
		wantStatus pipeline.Status
		wantMsg    string
	}{
		{"v1-fail", "billed twice, refunded", pipeline.DecisionFail, pipeline.StatusFailed, "failed by operator alice: billed twice, refunded"},
		{"v1-failbare", "", pipeline.DecisionFail, pipeline.StatusFailed, "failed by operator alice"},
		{"v1-retry", "provider confirmed no charge", pipeline.DecisionRetry, pipeline.StatusPending, ""},
	}
	for _, tt := range tests {
		toReview(t, s, tt.id)
		if j, _ := s.GetJob(ctx, tt.id); j.Decision.Kind != "" || !j.Decision.At.IsZero() {
			t.Fatalf("%s: decision before any: %+v", tt.id, j.Decision)
		}
		clock.Advance(time.Minute)
		j, err := s.Decide(ctx, &pipeline.DecideParams{JobID: tt.id, Decision: tt.d, Operator: "alice", Reason: tt.reason})
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != tt.wantStatus || j.RequiresAction || j.LastErrorMessage != tt.wantMsg || strings.Contains(j.LastErrorMessage, "must decide") {
			t.Errorf("%s: status %s requires_action %v message %q", tt.id, j.Status, j.RequiresAction, j.LastErrorMessage)
		}
		want := pipeline.JobDecision{Kind: tt.d, Operator: "alice", Reason: tt.reason, At: clock.Now()}
		if got, _ := s.GetJob(ctx, tt.id); got.Decision != want {
			t.Errorf("%s: decision %+v, want %+v", tt.id, got.Decision, want)
		}
		evs, err := s.Events(ctx, tt.id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs {
			if e.Kind != pipeline.EventDecision {
				continue
			}
			var d map[string]string
			_ = json.Unmarshal(e.Detail, &d)
			found = d["operator"] == "alice" && d["decision"] == string(tt.d) && d["reason"] == tt.reason
		}
		if !found {
			t.Errorf("%s: no decision event with operator and reason in %+v", tt.id, evs)
		}
	}
	if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: "v1-x", Decision: pipeline.DecisionFail, Operator: "alice", Reason: strings.Repeat("x", maxDecisionReason+1)}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("overlong reason: %v", err)
	}
}

// Discard settles a dead letter: the job stays dead_lettered and stops
// asking for a human, an event audits who and why, the dead letter leaves
// the open list and the counts, and it can be neither discarded again nor
// redriven.
func testDiscardDeadLetter(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	deadLettered(t, s, 2)
	open, _ := s.ListDeadLetters(ctx, false, 0, 0)
	if len(open) != 2 || open[0].Tenant != "acme" || open[0].Version != "v2" {
		t.Fatalf("open: %+v", open)
	}
	d := open[0]
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: d.ID, Operator: "alice", Reason: ""}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("discard without a reason: %v", err)
	}
	clock.Advance(time.Minute)
	got, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: d.ID, Operator: "alice", Reason: "customer withdrew the order"})
	if err != nil {
		t.Fatal(err)
	}
	if !got.DiscardedAt.Equal(clock.Now()) || got.DiscardedBy != "alice" || got.DiscardReason != "customer withdrew the order" || !got.Settled() {
		t.Fatalf("discarded: %+v", got)
	}
	j, _ := s.GetJob(ctx, d.JobID)
	if j.Status != pipeline.StatusDeadLettered || j.RequiresAction {
		t.Fatalf("job after discard: %s requires_action=%v", j.Status, j.RequiresAction)
	}
	if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = ? AND kind = 'dead_letter_discarded'
		AND detail_json ->> 'operator' = 'alice' AND detail_json ->> 'reason' = 'customer withdrew the order'`, d.JobID); n != 1 {
		t.Fatalf("%d discard events", n)
	}
	if open, _ := s.ListDeadLetters(ctx, false, 0, 0); len(open) != 1 || open[0].ID == d.ID {
		t.Fatalf("open after discard: %+v", open)
	}
	if all, _ := s.ListDeadLetters(ctx, true, 0, 0); len(all) != 2 {
		t.Fatalf("all after discard: %+v", all)
	}
	if c, _ := s.CountDeadLetters(ctx); c[pipeline.ReasonUnboundVersion] != 1 {
		t.Fatalf("count after discard: %v", c)
	}
	if l, _, _ := s.ListJobs(ctx, pipeline.ListFilter{AllTenants: true, RequiresAction: true}); len(l) != 1 || l[0].ID == d.JobID {
		t.Fatalf("jobs needing action after discard: %+v", l)
	}
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: d.ID, Operator: "bob", Reason: "again"}); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("second discard: %v", err)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: d.ID, Queue: "render-v2", Operator: "bob"}); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("redrive of a discarded dead letter: %v", err)
	}
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: 999, Operator: "bob", Reason: "x"}); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// The database itself refuses to unsettle a dead letter.
	if _, err := s.write.ExecContext(ctx, `UPDATE dead_letters SET discarded_at = NULL WHERE id = ?`, d.ID); err == nil {
		t.Fatal("a discarded dead letter was reopened")
	}
	// A redriven one cannot be discarded.
	other := open[1]
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: other.ID, Queue: "render-v2", Operator: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: other.ID, Operator: "bob", Reason: "x"}); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("discard of a redriven dead letter: %v", err)
	}
}

// FindDeadLetters selects open dead letters by reason, version, tenant and
// age, oldest first, and says when more match than the limit.
func testFindDeadLetters(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	add := func(id, tenant, version, reason string) {
		nj := newJob(id)
		nj.Tenant, nj.Version, nj.Queue = tenant, version, ""
		nj.DeadLetterReason, nj.DeadLetterQueue = reason, "render-"+version
		mustCreate(t, s, nj)
		clock.Advance(time.Hour)
	}
	add("v2-a", "acme", "v2", pipeline.ReasonUnboundVersion)
	add("v3-b", "globex", "v3", pipeline.ReasonUnboundVersion)
	add("v2-c", "globex", "v2", pipeline.ReasonPoison)
	add("v2-d", "acme", "v2", pipeline.ReasonUnboundVersion)
	ids := func(dls []pipeline.DeadLetter) string {
		var out []string
		for _, d := range dls {
			out = append(out, d.JobID)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name  string
		f     pipeline.DeadLetterFilter
		limit int
		want  string
		more  bool
	}{
		{"all", pipeline.DeadLetterFilter{}, 0, "v2-a,v3-b,v2-c,v2-d", false},
		{"reason", pipeline.DeadLetterFilter{Reason: pipeline.ReasonPoison}, 0, "v2-c", false},
		{"version", pipeline.DeadLetterFilter{Version: "v2"}, 0, "v2-a,v2-c,v2-d", false},
		{"tenant", pipeline.DeadLetterFilter{Tenant: "globex"}, 0, "v3-b,v2-c", false},
		{"age", pipeline.DeadLetterFilter{OlderThan: t0.Add(90 * time.Minute)}, 0, "v2-a,v3-b", false},
		{"combined", pipeline.DeadLetterFilter{Tenant: "acme", Version: "v2", Reason: pipeline.ReasonUnboundVersion}, 0, "v2-a,v2-d", false},
		{"limit", pipeline.DeadLetterFilter{Version: "v2"}, 2, "v2-a,v2-c", true},
		{"limit exactly the matches", pipeline.DeadLetterFilter{Version: "v2"}, 3, "v2-a,v2-c,v2-d", false},
		{"none", pipeline.DeadLetterFilter{Tenant: "initech"}, 0, "", false},
	}
	for _, tt := range tests {
		got, more, err := s.FindDeadLetters(ctx, tt.f, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != tt.want || more != tt.more {
			t.Errorf("%s: got %s more=%v, want %s more=%v", tt.name, ids(got), more, tt.want, tt.more)
		}
	}
	// Settled dead letters are not found.
	all, _, _ := s.FindDeadLetters(ctx, pipeline.DeadLetterFilter{}, 0)
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: all[0].ID, Operator: "op", Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.FindDeadLetters(ctx, pipeline.DeadLetterFilter{Tenant: "acme"}, 0); ids(got) != "v2-d" {
		t.Errorf("after discard: %s", ids(got))
	}
}

// Retention deletes dead letters settled before the cutoff, never open
// ones, never jobs or events.
func testPurgeSettledDeadLetters(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	deadLettered(t, s, 4)
	dls, _ := s.ListDeadLetters(ctx, false, 0, 0) // newest first
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: dls[0].ID, Operator: "op", Reason: "old discard"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[1].ID, Queue: "render-v2", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(40 * 24 * time.Hour)
	if _, err := s.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: dls[2].ID, Operator: "op", Reason: "recent discard"}); err != nil {
		t.Fatal(err)
	}
	events := countRows(t, s, `SELECT count(*) FROM job_events`)
	n, err := s.PurgeSettledDeadLetters(ctx, clock.Now().Add(-30*24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	left, _ := s.ListDeadLetters(ctx, true, 0, 0)
	if len(left) != 2 || left[0].ID != dls[2].ID || left[1].ID != dls[3].ID {
		t.Fatalf("left: %+v", left)
	}
	if got := countRows(t, s, `SELECT count(*) FROM jobs`); got != 4 {
		t.Fatalf("%d jobs left", got)
	}
	if got := countRows(t, s, `SELECT count(*) FROM job_events`); got != events {
		t.Fatalf("events %d → %d", events, got)
	}
	if n, err := s.PurgeSettledDeadLetters(ctx, clock.Now().Add(-30*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second purge %d, %v", n, err)
	}
}

// A dead-letter search returns at most its limit: 1 to 500, anything else
// means the default of 100.
func testFindDeadLettersLimitBounds(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	deadLettered(t, s, 101)
	for _, tc := range []struct {
		limit, want int
		more        bool
	}{{500, 101, false}, {101, 101, false}, {100, 100, true}, {0, 100, true}, {-1, 100, true}, {501, 100, true}} {
		got, more, err := s.FindDeadLetters(ctx, pipeline.DeadLetterFilter{}, tc.limit)
		if err != nil || len(got) != tc.want || more != tc.more {
			t.Errorf("limit %d: %d dead letters, more=%v, %v; want %d, more=%v", tc.limit, len(got), more, err, tc.want, tc.more)
		}
	}
}

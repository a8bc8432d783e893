package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// TestDecisionReasonIsRecorded: a decision's reason reaches the server,
// which records it with the operator; the job's owner sees the decision.
func TestDecisionReasonIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	acme := s.client(t, tokAcme)
	j := mustSubmit(t, acme, "k", board(1))
	s.toReview(t, s.claim(t))
	got, err := s.client(t, tokAdmin).Decide(ctx, pipeline.JobKey("acme", j.ID), DecisionFail, "billed twice by the provider, refunded")
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision == nil || got.Decision.Decision != pipeline.DecisionFail || got.Decision.Operator != "admin" ||
		got.Decision.Reason != "billed twice by the provider, refunded" || !got.Decision.At.Equal(t0) {
		t.Fatalf("decision %+v", got.Decision)
	}
	own, err := acme.Get(ctx, j.ID)
	if err != nil || own.Decision == nil || *own.Decision != *got.Decision || own.Status != pipeline.StatusFailed ||
		own.Error == nil || own.Error.Message != "failed by operator admin: billed twice by the provider, refunded" {
		t.Fatalf("owner's view %+v %+v %v", own.Decision, own.Error, err)
	}
}

// TestDiscardAndBulkAgainstTheAPI: discard one dead letter by id (a reason
// is required, and it is settled once), then redrive and discard by filter.
func TestDiscardAndBulkAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t) // binds v1 and v2: v3 jobs are dead-lettered
	for _, tc := range []struct{ tok, key, id string }{{tokAcme, "a", "v3-a"}, {tokGlobex, "b", "v3-b"}, {tokAcme, "c", "v3-c"}} {
		b := board(1)
		b["instance_id"] = tc.id
		if j := mustSubmit(t, s.client(t, tc.tok), tc.key, b); j.Status != pipeline.StatusDeadLettered {
			t.Fatalf("%s: %s", tc.id, j.Status)
		}
	}
	adm := s.client(t, tokAdmin)
	l, err := adm.DeadLetters(ctx, DeadLetterOptions{})
	if err != nil || len(l.DeadLetters) != 3 {
		t.Fatalf("%+v %v", l, err)
	}
	first := l.DeadLetters[2] // newest first: v3-a
	if _, err := adm.DiscardDeadLetter(ctx, first.ID, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("discard without a reason: %v", err)
	}
	d, err := adm.DiscardDeadLetter(ctx, first.ID, "customer withdrew the order")
	if err != nil || d.InstanceID != "v3-a" || d.DiscardedAt == nil || d.DiscardReason != "customer withdrew the order" || d.DiscardedBy != "admin" {
		t.Fatalf("discard: %+v %v", d, err)
	}
	_, err = adm.DiscardDeadLetter(ctx, first.ID, "again")
	if !errors.Is(err, ErrDeadLetterSettled) || !errors.Is(err, ErrConflict) {
		t.Fatalf("second discard: %v", err)
	}
	if _, err := adm.DiscardDeadLetter(ctx, 999, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}

	if _, err := adm.RedriveDeadLetters(ctx, DeadLetterFilter{}, BulkOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty filter: %v", err)
	}
	r, err := adm.RedriveDeadLetters(ctx, DeadLetterFilter{Reason: "unbound_version"}, BulkOptions{})
	if err != nil || r.Action != "redrive" || r.Matched != 2 || r.Done != 0 || r.Skipped != 2 || r.Items[0].Code != "version_unbound" {
		t.Fatalf("redrive of unbound: %+v %v", r, err)
	}
	r, err = adm.DiscardDeadLetters(ctx, DeadLetterFilter{Version: "v3", Tenant: "globex"}, "v3 was never released", BulkOptions{DryRun: true})
	if err != nil || !r.DryRun || r.Matched != 1 || r.Items[0].InstanceID != "v3-b" || r.Items[0].Outcome != "would_discard" {
		t.Fatalf("dry run: %+v %v", r, err)
	}
	r, err = adm.DiscardDeadLetters(ctx, DeadLetterFilter{Version: "v3", OlderThan: "0s"}, "v3 was never released", BulkOptions{Limit: 1})
	if err != nil || r.Matched != 1 || r.Done != 1 || !r.More || r.Items[0].InstanceID != "v3-b" || r.Items[0].Outcome != "discarded" {
		t.Fatalf("discard by filter: %+v %v", r, err)
	}
	if l, err := adm.DeadLetters(ctx, DeadLetterOptions{}); err != nil || len(l.DeadLetters) != 1 || l.DeadLetters[0].InstanceID != "v3-c" {
		t.Fatalf("open after: %+v %v", l, err)
	}
	req := s.requests("/v1/admin/dead-letters/discard")
	if len(req) != 2 || req[1].Header.Get("Content-Type") != "application/json" {
		t.Fatalf("requests %v", req)
	}
	if _, err := adm.DiscardDeadLetters(ctx, DeadLetterFilter{Tenant: "acme"}, "", BulkOptions{}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "reason") {
		t.Fatalf("bulk discard without a reason: %v", err)
	}
}

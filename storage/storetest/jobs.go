package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// CreateJobs stores every job of the batch with its input (none means {}),
// and a batch with one invalid or refused job stores nothing.
func testCreateJobsBatch(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	withInput := newJob("v1-b0")
	withInput.Input = json.RawMessage(`{"title":"kept"}`)
	noInput := newJob("v1-b1")
	noInput.Input = nil
	if err := s.CreateJobs(ctx, []pipeline.NewJob{withInput, noInput}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"v1-b0": `{"title":"kept"}`, "v1-b1": `{}`} {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatalf("%s after CreateJobs: %v", id, err)
		}
		if string(j.Input) != want || j.Status != pipeline.StatusPending {
			t.Errorf("%s: input %s status %s, want %s pending", id, j.Input, j.Status, want)
		}
	}
	bad := newJob("v1-b3")
	bad.Tenant = ""
	if err := s.CreateJobs(ctx, []pipeline.NewJob{newJob("v1-b2"), bad}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("batch with an invalid job: %v, want ErrInvalidInput", err)
	}
	if _, err := s.GetJob(ctx, "v1-b2"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("valid job of a refused batch: %v, want ErrNotFound", err)
	}
	// A job a unique index refuses (its key used with another request)
	// refuses the batch too: nothing of it is stored.
	reused := newJob("v1-b0")
	reused.ID, reused.InstanceID, reused.RequestFingerprint = "v1-b5", "v1-b5", "fp-other"
	if err := s.CreateJobs(ctx, []pipeline.NewJob{newJob("v1-b4"), reused}); !errors.Is(err, pipeline.ErrIdempotencyReused) {
		t.Fatalf("batch with a reused key: %v, want ErrIdempotencyReused", err)
	}
	for _, id := range []string{"v1-b4", "v1-b5"} {
		if _, err := s.GetJob(ctx, id); !errors.Is(err, pipeline.ErrNotFound) {
			t.Errorf("%s of a batch refused for a reused key: %v, want ErrNotFound", id, err)
		}
	}
	// A job whose instance id is taken refuses the batch, even when a later
	// job of the batch, the same request under a free instance id, takes
	// its key: that row did not exist at its turn, so it is no replay.
	taken := newJob("v1-b6")
	taken.InstanceID = "v1-b0"
	free := newJob("v1-b6")
	free.ID, free.InstanceID = "v1-b7", "v1-b7"
	if err := s.CreateJobs(ctx, []pipeline.NewJob{taken, free}); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("batch with a taken instance id: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.GetJob(ctx, "v1-b7"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("v1-b7 of a batch refused for a taken instance id: %v, want ErrNotFound", err)
	}
}

// CreateJob keeps the submitted input, and stores {} for none.
func testCreateJobInput(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	a := newJob("v1-in")
	a.Input = json.RawMessage(`{"title":"mine"}`)
	b := newJob("v1-none")
	b.Input = nil
	for _, nj := range []pipeline.NewJob{a, b} {
		mustCreate(t, s, nj)
	}
	for id, want := range map[string]string{"v1-in": `{"title":"mine"}`, "v1-none": `{}`} {
		j, err := s.GetJob(ctx, id)
		if err != nil || string(j.Input) != want {
			t.Errorf("%s: input %s, %v; want %s", id, j.Input, err, want)
		}
	}
}

// CreateJob keeps the submission's traceparent on the job, as every read
// returns it (the created job, GetJob, the claim an attempt starts from),
// for a queued and a dead-lettered job alike; none stays empty.
func testCreateJobTraceParent(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name, id, traceParent string
		deadLettered          bool
	}{
		{"queued", "v1-tp", tp, false},
		{"none", "v1-notp", "", false},
		{"dead-lettered", "v1-tpdl", tp, true},
	}
	for _, tt := range tests {
		nj := newJob(tt.id)
		nj.TraceParent = tt.traceParent
		if tt.deadLettered {
			nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
		}
		created := mustCreate(t, s, nj)
		got, err := s.GetJob(ctx, tt.id)
		if err != nil {
			t.Fatalf("%s: get: %v", tt.name, err)
		}
		if created.TraceParent != tt.traceParent || got.TraceParent != tt.traceParent {
			t.Errorf("%s: created %q, stored %q; want %q", tt.name, created.TraceParent, got.TraceParent, tt.traceParent)
		}
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w1", Max: 2, LeaseFor: time.Minute})
	if err != nil || len(cs) != 2 {
		t.Fatalf("fetch: %d claims, %v; want 2", len(cs), err)
	}
	for _, c := range cs {
		if want := map[string]string{"v1-tp": tp}[c.Job.ID]; c.Job.TraceParent != want {
			t.Errorf("claimed %s with traceparent %q, want %q", c.Job.ID, c.Job.TraceParent, want)
		}
	}
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Issue 11, finding 2: a cleanup whose delete failed (or whose process
// died) wedged its key for the sweeper's grace (1 h): every ClaimObject
// answered ErrClaimConflict. Now the next writer takes the cleanup over —
// but only once the owner's lease is dead and StaleDeleteAfter has passed,
// so a delete still in flight can never remove what the new writer puts.
func testClaimTakesOverDeadCleanup(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	const key = "units/v1/aa/wedge.png"
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-b"))
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Hour})
	if err != nil || len(cs) != 2 {
		t.Fatalf("fetch: %v", err)
	}
	a, b := cs[0].Lease, cs[1].Lease
	if err := s.ClaimObject(ctx, a, key); err != nil {
		t.Fatal(err)
	}
	if del, err := s.AbandonClaim(ctx, a.AttemptID, key); err != nil || !del {
		t.Fatalf("A abandon: %v %v", del, err)
	}
	// A's delete failed; A's attempt ends (its lease is released).
	if err := s.Finish(ctx, a, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: clock.Now().Add(time.Hour),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", Infra: true}); err != nil {
		t.Fatal(err)
	}
	// Too fresh: A's delete may still be in flight.
	if err := s.ClaimObject(ctx, b, key); !errors.Is(err, pipeline.ErrClaimConflict) {
		t.Fatalf("B right after A's failed delete: %v, want ErrClaimConflict", err)
	}
	clock.Advance(pipeline.StaleDeleteAfter + time.Second)
	if _, err := s.Heartbeat(ctx, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimObject(ctx, b, key); !errors.Is(err, pipeline.ErrClaimTakenOver) {
		t.Fatalf("B after StaleDeleteAfter: %v, want ErrClaimTakenOver", err)
	}
	// B now owns the cleanup, in A's place.
	if n := countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ? AND state = 'deleting' AND attempt_id = ?`, key, b.AttemptID); n != 1 {
		t.Fatalf("%d deleting claims of B, want 1", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ?`, key); n != 1 {
		t.Fatalf("%d claims on the key, want only B's", n)
	}
	// While B (live) deletes, nobody else gets the key.
	mustCreate(t, s, newJob("v1-c"))
	cc, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Hour})
	if len(cc) != 1 {
		t.Fatal("fetch c")
	}
	clock.Advance(pipeline.StaleDeleteAfter + time.Second)
	if _, err := s.Heartbeat(ctx, cc[0].Lease, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimObject(ctx, cc[0].Lease, key); !errors.Is(err, pipeline.ErrClaimConflict) {
		t.Fatalf("C while B (live) deletes: %v, want ErrClaimConflict", err)
	}
	if err := s.FinishAbandon(ctx, b.AttemptID, key); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimObject(ctx, b, key); err != nil {
		t.Fatalf("B after finishing the cleanup: %v", err)
	}
}

// A sweeper run that died mid-delete is taken over the same way.
func testClaimTakesOverDeadSweep(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	const key = "units/v1/bb/swept.png"
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	if ok, err := s.ClaimForSweep(ctx, "sweeper-dead", key); err != nil || !ok {
		t.Fatalf("sweep claim: %v %v", ok, err)
	}
	mustCreate(t, s, newJob("v1-a"))
	clock.Advance(pipeline.StaleDeleteAfter + time.Second)
	cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err := s.ClaimObject(ctx, cs[0].Lease, key); !errors.Is(err, pipeline.ErrClaimTakenOver) {
		t.Fatalf("claim after a dead sweep: %v, want ErrClaimTakenOver", err)
	}
}

// A release (a worker stopping gives the job back) keeps the current run of
// infrastructure failures: restarts during an outage cannot stretch the
// infrastructure window. A redrive starts it afresh.
func testReleaseKeepsInfraRun(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-infra"))
	cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err := s.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: clock.Now().Add(time.Second),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", Infra: true}); err != nil {
		t.Fatal(err)
	}
	since := clock.Now()
	clock.Advance(time.Minute)
	cs, _, _ = s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if len(cs) != 1 {
		t.Fatal("fetch")
	}
	if err := s.Release(ctx, cs[0].Lease); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, "v1-infra")
	if err != nil || !j.InfraSince.Equal(since) || j.InfraFailures != 1 {
		t.Fatalf("after a release: infra_since %v failures %d (%v); want %v and 1", j.InfraSince, j.InfraFailures, err, since)
	}
	cs, _, _ = s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err := s.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: clock.Now().Add(time.Second),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_rate_limited"}); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.GetJob(ctx, "v1-infra"); !j.InfraSince.IsZero() || j.InfraFailures != 1 {
		t.Fatalf("after a failure of the job's own: infra_since %v failures %d; want the run ended, the count kept", j.InfraSince, j.InfraFailures)
	}
}

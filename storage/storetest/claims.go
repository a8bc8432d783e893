package storetest

import (
	"context"
	"encoding/json"
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

// A claim carries what an attempt reads of its job (pipeline.Claimed lists
// it) exactly as the job reads afterwards: on a first claim, on a claim
// after an infrastructure retry (input frozen, cancel requested, the infra
// run started), and on a takeover of an expired lease.
func testClaimCarriesWhatAttemptsRead(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	nj := newJob("v1-reads")
	nj.WebhookURL = "https://hooks.example.test/reads"
	nj.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	mustCreate(t, s, nj)
	check := func(step string, c pipeline.Claimed) {
		t.Helper()
		j, err := s.GetJob(ctx, c.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		g := c.Job
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"ID", g.ID, j.ID}, {"InstanceID", g.InstanceID, j.InstanceID}, {"Tenant", g.Tenant, j.Tenant},
			{"Operation", g.Operation, j.Operation}, {"Version", g.Version, j.Version}, {"Queue", g.Queue, j.Queue},
			{"Status", g.Status, j.Status}, {"AttemptID", g.AttemptID, j.AttemptID}, {"Attempts", g.Attempts, j.Attempts},
			{"LeaseOwner", g.LeaseOwner, j.LeaseOwner}, {"Input", string(g.Input), string(j.Input)},
			{"FrozenInput", string(g.FrozenInput), string(j.FrozenInput)}, {"InfraFailures", g.InfraFailures, j.InfraFailures},
			{"WebhookURL", g.WebhookURL, j.WebhookURL}, {"TraceParent", g.TraceParent, j.TraceParent},
			{"lease attempt id", c.Lease.AttemptID, j.AttemptID}, {"lease attempt", c.Lease.Attempt, j.Attempts},
		} {
			if f.got != f.want {
				t.Errorf("%s: claimed %s %v, stored %v", step, f.name, f.got, f.want)
			}
		}
		for _, f := range []struct {
			name      string
			got, want time.Time
		}{
			{"LeaseExpiresAt", g.LeaseExpiresAt, j.LeaseExpiresAt}, {"UpdatedAt", g.UpdatedAt, j.UpdatedAt},
			{"StatusChangedAt", g.StatusChangedAt, j.StatusChangedAt}, {"CreatedAt", g.CreatedAt, j.CreatedAt},
			{"InfraSince", g.InfraSince, j.InfraSince}, {"CancelRequestedAt", g.CancelRequestedAt, j.CancelRequestedAt},
			{"lease expiry", c.Lease.ExpiresAt, j.LeaseExpiresAt},
		} {
			if !f.got.Equal(f.want) {
				t.Errorf("%s: claimed %s %v, stored %v", step, f.name, f.got, f.want)
			}
		}
	}
	first := fetchOne(t, s, "render-v1", "w1")
	check("first claim", first)
	if _, err := s.FreezeInput(ctx, first.Lease, json.RawMessage(`{"frozen":true}`), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestCancel(ctx, "", "v1-reads"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := s.Finish(ctx, first.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: clock.Now().Add(time.Minute),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", Infra: true}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	second := fetchOne(t, s, "render-v1", "w2")
	check("after an infrastructure retry", second)
	if second.Job.InfraFailures != 1 || second.Job.InfraSince.IsZero() || second.Job.CancelRequestedAt.IsZero() || len(second.Job.FrozenInput) == 0 {
		t.Fatalf("fixture: the second claim's job is not what it should be: %+v", second.Job)
	}
	clock.Advance(2 * time.Minute) // the lease (one minute) expired
	check("takeover of an expired lease", fetchOne(t, s, "render-v1", "w3"))
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// A lease that expired with nobody taking the job over is as dead as one
// that was taken over: every write of the attempt is refused. (The sweeper
// relies on this: it treats a claim with an expired lease as dead.)
func testExpiredLeaseWithoutTakeoverIsFenced(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-x"))
	a := fetchOne(t, s, "render-v1", "w")
	if err := s.PlanUnits(ctx, a.Lease, []pipeline.Unit{{JobID: "v1-x", Scene: 0, Kind: "image", UnitKey: "u"}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(61 * time.Second) // expired; no Fetch takes it over
	before := snapshot(t, s)
	writes := map[string]func() error{
		"finish":  func() error { return s.Finish(ctx, a.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}) },
		"release": func() error { return s.Release(ctx, a.Lease) },
		"heartbeat": func() error {
			_, err := s.Heartbeat(ctx, a.Lease, time.Minute)
			return err
		},
		"intent": func() error {
			_, err := s.RecordIntent(ctx, a.Lease, pipeline.ProviderCall{Op: pipeline.OpSpeech, Provider: "p", Contract: pipeline.ContractSync})
			return err
		},
		"update unit": func() error {
			return s.UpdateUnit(ctx, a.Lease, 0, pipeline.UnitUpdate{Status: pipeline.UnitGenerated})
		},
		"plan units": func() error {
			return s.PlanUnits(ctx, a.Lease, []pipeline.Unit{{JobID: "v1-x", Scene: 1, Kind: "image", UnitKey: "v"}})
		},
		"claim object": func() error { return s.ClaimObject(ctx, a.Lease, "units/v1/aa/x.png") },
		"commit asset": func() error { return s.CommitAsset(ctx, a.Lease, assetFor("units/v1/aa/x.png")) },
		"stage":        func() error { return s.StageFinished(ctx, a.Lease, "execute", 1, nil) },
	}
	for name, w := range writes {
		var fe *pipeline.FenceError
		if err := w(); !errors.As(err, &fe) {
			t.Errorf("%s with an expired lease: %v, want a FenceError", name, err)
		}
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("writes with an expired lease changed the database")
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM provider_calls`: 0, `SELECT count(*) FROM object_claims`: 0,
		`SELECT count(*) FROM assets`: 0, `SELECT count(*) FROM units WHERE status <> 'planned'`: 0,
		`SELECT count(*) FROM units`: 1,
	} {
		if n := countRows(t, s, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
}

// A message that becomes visible while its job's lease is still live (a
// duplicate wake-up, a clock edge) must not hand the job to a second worker.
func testFetchDefersLiveLease(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-l"))
	a := fetchOne(t, s, "render-v1", "w")
	requireDeferral(t, s, "a live lease")
	// and it reappears exactly when the lease runs out
	clock.Set(a.Lease.ExpiresAt.Add(-time.Millisecond))
	if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 10, LeaseFor: time.Minute}); len(cs) != 0 {
		t.Fatal("claimed before the lease expired")
	}
	clock.Set(a.Lease.ExpiresAt)
	requireVisible(t, s, 1, "once the lease ran out")
	if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 10, LeaseFor: time.Minute}); len(cs) != 1 {
		t.Fatal("not claimable once the lease expired")
	}
}

// A message that becomes visible while its job backs off (retry_wait, next
// run still ahead) is hidden again until the next run, and the job is
// claimed then, not before.
func testFetchDefersRetryWait(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-r"))
	a := fetchOne(t, s, "render-v1", "w")
	next := clock.Now().Add(time.Hour)
	if err := s.Finish(ctx, a.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: next,
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_timeout"}); err != nil {
		t.Fatal(err)
	}
	requireDeferral(t, s, "a backing-off job")
	clock.Set(next.Add(-time.Millisecond))
	requireVisible(t, s, 0, "just before the next run")
	clock.Set(next)
	requireVisible(t, s, 1, "at the next run")
	if c := fetchOne(t, s, "render-v1", "w2"); c.Lease.Attempt != 2 {
		t.Fatalf("claimed at the next run as attempt %d, want 2", c.Lease.Attempt)
	}
}

// requireDeferral makes render-v1's one message visible now and requires
// the next Fetch to claim nothing and defer it (of is what it waits for):
// the deferral moves the message itself (not only counts it), hidden
// again, not read by every Fetch until the job is due.
func requireDeferral(t *testing.T, s *env, of string) {
	t.Helper()
	if err := s.ExecForTest(context.Background(), `UPDATE queue_messages SET visible_at = 0`); err != nil {
		t.Fatal(err)
	}
	cs, st, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 10, LeaseFor: time.Minute})
	if err != nil || len(cs) != 0 || st.Deferred != 1 {
		t.Fatalf("fetch during %s: %d claimed, %+v, %v", of, len(cs), st, err)
	}
	requireVisible(t, s, 0, "after the deferral of "+of)
}

// requireVisible fails unless render-v1 holds exactly one message and want
// of them are visible now.
func requireVisible(t *testing.T, s *env, want int, when string) {
	t.Helper()
	total, visible, err := s.QueueDepth(context.Background(), "render-v1")
	if err != nil || total != 1 || visible != want {
		t.Fatalf("%s: %d messages, %d visible (%v); want 1, %d visible", when, total, visible, err, want)
	}
}

// A claim counts the delivery on, and hides, the claimed job's own
// message, and a settle deletes it, on both claim paths (without and with
// a tenant limit). The jobs' keys are not their instance ids, as in
// service (pipeline.JobKey): a statement that found the message by another
// of the job's names would pass with test ids that are both.
func testClaimFindsMessageByJobKey(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	var leases []pipeline.Lease
	for _, p := range []struct {
		instance string
		limit    int
	}{{"v1-plain", 0}, {"v1-triaged", 5}} {
		nj := newJob(pipeline.JobKey("acme", p.instance))
		nj.InstanceID = p.instance
		mustCreate(t, s, nj)
		cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 10, LeaseFor: time.Minute,
			TenantMaxRunning: p.limit})
		if err != nil || len(cs) != 1 || cs[0].Job.ID != nj.ID {
			t.Fatalf("%s: claimed %+v, %v", p.instance, cs, err)
		}
		if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id = ? AND delivery_count = 1 AND visible_at > ?`,
			nj.ID, clock.Now().UnixMilli()); n != 1 {
			t.Errorf("%s: the claimed job's message was not counted and hidden", p.instance)
		}
		leases = append(leases, cs[0].Lease)
	}
	for _, l := range leases {
		if err := s.Finish(ctx, l, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 0 {
		t.Fatalf("%d messages left after both jobs settled", n)
	}
}

// Duplicate wake-ups for one job merge into one message, so no batch can
// claim the same job twice.
func testDuplicateMessagesMerge(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-d"))
	for range 3 {
		if err := s.Enqueue(ctx, "render-v1", "v1-d", 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 1 {
		t.Fatalf("%d messages for one job", n)
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 10, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claimed %d times: %v", len(cs), err)
	}
}

// An attempt's lease outlives nothing of its job's status: once the job
// left running under that attempt (to needs_review, or given back by
// Release), a late Finish of the same attempt — one call or in a batch,
// an outcome a driver settles in bulk (failed, canceled) or one by one
// (retry_wait) — is fenced and changes nothing. The attempt id is not
// cleared when a job leaves running, and needs_review → failed and
// pending → canceled are moves the status wall allows, so it is the
// settle's fence that refuses them: its status check, and the lease check
// (a job that leaves running has its lease cleared).
func testLateFinishAfterJobLeftRunning(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		clock := pipeline.NewManualClock(t0)
		s := h.open(t, clock)
		mustCreate(t, s, newJob("v1-review"))
		mustCreate(t, s, newJob("v1-back"))
		review := fetchOne(t, s, "render-v1", "w")
		back := fetchOne(t, s, "render-v1", "w")
		if err := s.Finish(ctx, review.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, back.Lease); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s)
		for _, late := range []struct {
			lease pipeline.Lease
			to    pipeline.Status
		}{{review.Lease, pipeline.StatusFailed}, {back.Lease, pipeline.StatusCanceled}, {review.Lease, pipeline.StatusRetryWait}} {
			o := pipeline.Outcome{Status: late.to}
			if late.to == pipeline.StatusRetryWait {
				o.NextRunAt, o.ErrorClass, o.ErrorCode = clock.Now().Add(time.Minute), pipeline.ClassTransient, "provider_timeout"
			}
			if err := finishBy(ctx, s, batch, late.lease, o); !errors.Is(err, pipeline.ErrLeaseLost) {
				t.Errorf("batch %v: a late finish of %s to %s: %v, want ErrLeaseLost", batch, late.lease.JobID, late.to, err)
			}
		}
		if after := snapshot(t, s); after != before {
			t.Errorf("batch %v: late finishes changed the database", batch)
		}
	}
}

// The settle's lease check has the claim's edge: an attempt may finish up
// to the last millisecond of its lease, and not at its expiry, when
// another worker may already claim the job (testFetchDefersLiveLease).
// Each outcome in one call and in a batch: a success takes a driver's
// bulk settle, a retry (which reschedules the job's message) takes the
// single-job settle on Postgres.
func testFinishAtLeaseEdge(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []struct {
		batch bool
		to    pipeline.Status
	}{{false, pipeline.StatusSucceeded}, {true, pipeline.StatusSucceeded}, {false, pipeline.StatusRetryWait}, {true, pipeline.StatusRetryWait}} {
		clock := pipeline.NewManualClock(t0)
		s := h.open(t, clock)
		finish := func(l pipeline.Lease) error {
			o := pipeline.Outcome{Status: mode.to}
			if mode.to == pipeline.StatusRetryWait {
				o.NextRunAt, o.ErrorClass, o.ErrorCode = clock.Now().Add(time.Minute), pipeline.ClassTransient, "provider_timeout"
			}
			return finishBy(ctx, s, mode.batch, l, o)
		}
		mustCreate(t, s, newJob("v1-edge-live"))
		mustCreate(t, s, newJob("v1-edge-gone"))
		live := fetchOne(t, s, "render-v1", "w")
		gone := fetchOne(t, s, "render-v1", "w")
		clock.Set(live.Lease.ExpiresAt.Add(-time.Millisecond))
		if err := finish(live.Lease); err != nil {
			t.Errorf("%+v: finish a millisecond before the lease expires: %v", mode, err)
		}
		clock.Set(gone.Lease.ExpiresAt)
		if err := finish(gone.Lease); !errors.Is(err, pipeline.ErrLeaseLost) {
			t.Errorf("%+v: finish at the lease's expiry: %v, want ErrLeaseLost", mode, err)
		}
		for id, want := range map[string]pipeline.Status{"v1-edge-live": mode.to, "v1-edge-gone": pipeline.StatusRunning} {
			if j, err := s.GetJob(ctx, id); err != nil || j.Status != want {
				t.Errorf("%+v: %s is %s (%v), want %s", mode, id, j.Status, err, want)
			}
		}
	}
}

// finishBy ends the attempt holding l with o through Finish, or with batch
// through FinishMany as a batch of one, and returns that attempt's error.
func finishBy(ctx context.Context, s *env, batch bool, l pipeline.Lease, o pipeline.Outcome) error {
	if !batch {
		return s.Finish(ctx, l, o)
	}
	errs, err := s.FinishMany(ctx, []pipeline.Finished{{Lease: l, Outcome: o}})
	if err != nil {
		return err
	}
	return errs[0]
}

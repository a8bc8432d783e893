package storetest

import (
	"context"
	"edgepipe/pipeline"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func testFinishManyIsolatesFencedAttempts(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-b"))
	cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if len(cs) != 2 {
		t.Fatal(len(cs))
	}
	stale := cs[1].Lease
	stale.AttemptID = "att_bogus"
	errs, err := s.FinishMany(ctx, []pipeline.Finished{
		{Lease: cs[0].Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}},
		{Lease: stale, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}},
	})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], pipeline.ErrLeaseLost) {
		t.Fatalf("errs %v err %v", errs, err)
	}
	if statusOf(t, s, "v1-a") != pipeline.StatusSucceeded || statusOf(t, s, "v1-b") != pipeline.StatusRunning {
		t.Fatal("batch results not independent")
	}
}

// FinishMany settles a batch mixing outcomes that take the bulk path
// (succeeded, failed) and ones that do not (retry_wait): every job ends as
// told, each status event carries its error code, if any, and a settled
// job with a webhook gets its delivery.
func testFinishManyMixedBatch(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	ids := []string{"v1-m0", "v1-m1", "v1-m2", "v1-m3"}
	for _, id := range ids {
		nj := newJob(id)
		if id != "v1-m0" {
			nj.WebhookURL = "https://hooks.example.test/" + id
		}
		mustCreate(t, s, nj)
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: len(ids), LeaseFor: time.Minute})
	if err != nil || len(cs) != len(ids) {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	outcomes := map[string]pipeline.Outcome{
		"v1-m0": {Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(time.Minute), ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_rate_limited"},
		"v1-m1": {Status: pipeline.StatusSucceeded, ResultKey: "renders/v1/aa/m1.mp4"},
		"v1-m2": {Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_prompt", ErrorMessage: "refused"},
		"v1-m3": {Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(2 * time.Minute), ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_timeout"},
	}
	var fs []pipeline.Finished
	for _, c := range cs {
		fs = append(fs, pipeline.Finished{Lease: c.Lease, Outcome: outcomes[c.Job.ID]})
	}
	errs, err := s.FinishMany(ctx, fs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("FinishMany item %d (%s): %v", i, fs[i].Lease.JobID, e)
		}
	}
	for id, o := range outcomes {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != o.Status || j.LastErrorCode != o.ErrorCode || j.ResultKey != o.ResultKey {
			t.Errorf("%s: status %s code %q result %q; want %s %q %q", id, j.Status, j.LastErrorCode, j.ResultKey, o.Status, o.ErrorCode, o.ResultKey)
		}
		ev, d := lastStatusEvent(t, s, id)
		if ev.ToStatus != o.Status {
			t.Errorf("%s: last event to %s, want %s", id, ev.ToStatus, o.Status)
		}
		code, has := d["error_code"]
		if (o.ErrorCode != "") != has || (has && code != o.ErrorCode) {
			t.Errorf("%s: event detail %v, want error_code %q", id, d, o.ErrorCode)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 2 {
		t.Errorf("%d messages left, want the two retry_wait jobs'", n)
	}
	// Only a settled job with a webhook gets a delivery (v1-m3 only waits).
	if n := countRows(t, s, `SELECT count(*) FROM webhook_outbox`); n != 2 {
		t.Errorf("%d webhook deliveries, want 2", n)
	}
	for _, id := range []string{"v1-m1", "v1-m2"} {
		if n := countRows(t, s, `SELECT count(*) FROM webhook_outbox WHERE job_id = ? AND url = ?`, id, "https://hooks.example.test/"+id); n != 1 {
			t.Errorf("no webhook delivery for the settled %s", id)
		}
	}
}

// FinishMany writes for every outcome exactly what Finish writes for it:
// the same job row (status, error, result, the count and start of
// infrastructure failures, whether it needs an operator) and the same
// status event detail (error code, reason, waiting for infrastructure,
// next run). Outcomes the bulk statement cannot express in full (an
// infrastructure failure, a reason, a next run time) must not lose those
// fields on the way, in a mixed batch or in a batch of one (the path of a
// batch whose outcomes all settle the job); and what Finish writes is what
// the outcome says (both could lose the same field).
func testFinishManySettlesLikeFinish(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	outcomes := []pipeline.Outcome{
		{Status: pipeline.StatusSucceeded, ResultKey: "renders/v1/aa/same.mp4"},
		{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_prompt", ErrorMessage: "refused"},
		{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", ErrorMessage: "store down", Infra: true},
		{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "budget_exhausted", Reason: "infra_budget_exhausted"},
		{Status: pipeline.StatusNeedsReview, ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_ambiguous", RequiresAction: true, Reason: "ambiguous_call"},
		{Status: pipeline.StatusCanceled, ErrorCode: "canceled"},
		// A next run time on a settled status is nothing the engine
		// sends; whatever Finish makes of it, FinishMany makes the same.
		{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_prompt", NextRunAt: t0.Add(time.Hour)},
		{Status: pipeline.StatusRetryWait, ErrorClass: pipeline.ClassTransient, ErrorCode: "local_disk_error", Infra: true, NextRunAt: t0.Add(time.Minute)},
	}
	leases := createFetched(t, s, "v1-", []string{"one", "many", "solo"}, len(outcomes))
	clock.Advance(time.Second)
	var many []pipeline.Finished
	for i, o := range outcomes {
		if err := s.Finish(ctx, leases[fmt.Sprintf("v1-one%d", i)], o); err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
		many = append(many, pipeline.Finished{Lease: leases[fmt.Sprintf("v1-many%d", i)], Outcome: o})
	}
	errs, err := s.FinishMany(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	soloErrs := make([]error, len(outcomes))
	for i, o := range outcomes {
		es, err := s.FinishMany(ctx, []pipeline.Finished{{Lease: leases[fmt.Sprintf("v1-solo%d", i)], Outcome: o}})
		if err != nil {
			t.Fatal(err)
		}
		soloErrs[i] = es[0]
	}
	read := func(id string) settled { return readSettled(t, s, id) }
	for i, o := range outcomes {
		if errs[i] != nil {
			t.Errorf("FinishMany item %d (%s): %v", i, o.Status, errs[i])
			continue
		}
		one, got := read(fmt.Sprintf("v1-one%d", i)), read(fmt.Sprintf("v1-many%d", i))
		if !reflect.DeepEqual(one, got) {
			t.Errorf("outcome %d (%s, infra %v, reason %q):\nFinish     wrote %+v\nFinishMany wrote %+v", i, o.Status, o.Infra, o.Reason, one, got)
		}
		if soloErrs[i] != nil {
			t.Errorf("FinishMany of item %d (%s) alone: %v", i, o.Status, soloErrs[i])
		} else if solo := read(fmt.Sprintf("v1-solo%d", i)); !reflect.DeepEqual(one, solo) {
			t.Errorf("outcome %d (%s, infra %v, reason %q):\nFinish               wrote %+v\nFinishMany (alone) wrote %+v", i, o.Status, o.Infra, o.Reason, one, solo)
		}
		checkSettledAsSaid(t, i, o, one, t0.Add(time.Second))
	}
}

// settled is what a settle records of a job, attempt ids and job ids aside.
type settled struct {
	Status                     pipeline.Status
	Class                      pipeline.ErrorClass
	Code, Message, Result      string
	RequiresAction             bool
	InfraFailures              int
	InfraSince, NextRun, Lease time.Time
	Owner                      string
	Detail                     map[string]any
}

func readSettled(t *testing.T, s *env, id string) settled {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	_, d := lastStatusEvent(t, s, id)
	delete(d, "attempt")
	return settled{j.Status, j.LastErrorClass, j.LastErrorCode, j.LastErrorMessage, j.ResultKey, j.RequiresAction,
		j.InfraFailures, j.InfraSince.UTC(), j.NextRunAt.UTC(), j.LeaseExpiresAt.UTC(), j.LeaseOwner, d}
}

// checkSettledAsSaid checks that got, what outcome i (o) settled at at,
// is what the outcome says: its event detail, and an infrastructure run
// counted and started if it was one.
func checkSettledAsSaid(t *testing.T, i int, o pipeline.Outcome, got settled, at time.Time) {
	t.Helper()
	want := map[string]any{}
	if b, err := json.Marshal(o.EventDetail(nil)); err != nil || json.Unmarshal(b, &want) != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Detail, want) {
		t.Errorf("outcome %d (%s): Finish wrote event detail %v, want %v", i, o.Status, got.Detail, want)
	}
	wantInfra, wantSince := 0, time.Time{}
	if o.Infra {
		wantInfra, wantSince = 1, at.UTC()
	}
	if got.InfraFailures != wantInfra || !got.InfraSince.Equal(wantSince) {
		t.Errorf("outcome %d (%s, infra %v): Finish wrote infra failures %d since %v, want %d since %v",
			i, o.Status, o.Infra, got.InfraFailures, got.InfraSince, wantInfra, wantSince)
	}
}

// createFetched creates a job named prefix+side+index for every side and
// index below n, claims them all, and returns their leases by job id.
func createFetched(t *testing.T, s *env, prefix string, sides []string, n int) map[string]pipeline.Lease {
	t.Helper()
	for i := range n {
		for _, side := range sides {
			mustCreate(t, s, newJob(fmt.Sprintf("%s%s%d", prefix, side, i)))
		}
	}
	return fetchLeases(t, s, n*len(sides))
}

// fetchLeases claims n jobs of render-v1, all there are, and returns their
// leases by job id.
func fetchLeases(t *testing.T, s *env, n int) map[string]pipeline.Lease {
	t.Helper()
	cs, _, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: n, LeaseFor: time.Minute})
	if err != nil || len(cs) != n {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	leases := map[string]pipeline.Lease{}
	for _, c := range cs {
		leases[c.Job.ID] = c.Lease
	}
	return leases
}

// An attempt that settles a job ends its run of infrastructure failures
// (infra_since cleared, the count kept), through FinishMany's bulk path as
// through Finish: jobs that waited for infrastructure once, then succeed,
// fail or are canceled.
func testFinishManyEndsInfraRun(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	outcomes := []pipeline.Outcome{
		{Status: pipeline.StatusSucceeded, ResultKey: "renders/v1/aa/infra.mp4"},
		{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_prompt"},
		{Status: pipeline.StatusCanceled, ErrorCode: "canceled"},
	}
	leases := createFetched(t, s, "v1-irun-", []string{"one", "many"}, len(outcomes))
	for _, l := range leases {
		if err := s.Finish(ctx, l, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(time.Minute),
			ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", Infra: true}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	leases = fetchLeases(t, s, 2*len(outcomes))
	var many []pipeline.Finished
	for i, o := range outcomes {
		if err := s.Finish(ctx, leases[fmt.Sprintf("v1-irun-one%d", i)], o); err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
		many = append(many, pipeline.Finished{Lease: leases[fmt.Sprintf("v1-irun-many%d", i)], Outcome: o})
	}
	errs, err := s.FinishMany(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outcomes {
		if errs[i] != nil {
			t.Fatalf("FinishMany item %d (%s): %v", i, o.Status, errs[i])
		}
		for _, side := range []string{"one", "many"} {
			j, err := s.GetJob(ctx, fmt.Sprintf("v1-irun-%s%d", side, i))
			if err != nil {
				t.Fatal(err)
			}
			if j.Status != o.Status || j.InfraFailures != 1 || !j.InfraSince.IsZero() {
				t.Errorf("%s %d: status %s, %d infra failures since %v; want %s, 1 and the run ended (zero)",
					side, i, j.Status, j.InfraFailures, j.InfraSince, o.Status)
			}
		}
	}
}

package sqlite

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// lastStatusEvent returns the detail of a job's latest status event.
func lastStatusEvent(t *testing.T, s *Store, id string) (pipeline.Event, map[string]any) {
	t.Helper()
	evs, err := s.Events(context.Background(), id, 0, 0)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events of %s: %d, %v", id, len(evs), err)
	}
	last := evs[len(evs)-1]
	var d map[string]any
	if err := json.Unmarshal(last.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return last, d
}

// FinishMany settles a batch mixing outcomes that take the bulk path
// (succeeded, failed) and ones that do not (retry_wait): every job ends as
// told, each status event carries its error code, if any, and a settled
// job with a webhook gets its delivery.
func TestFinishManyMixedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
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
	var fs []Finished
	for _, c := range cs {
		fs = append(fs, Finished{Lease: c.Lease, Outcome: outcomes[c.Job.ID]})
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

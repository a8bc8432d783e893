package sqlite

// Tests written from surviving mutants of `make mutation` (gremlins): each
// pins a behaviour that a mutated comparison changed without any other test
// noticing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// deadLettered creates n jobs stored directly as dead letters, ids v2-dl000….
func deadLettered(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		nj := newJob(fmt.Sprintf("v2-dl%03d", i))
		nj.Version, nj.Queue = "v2", ""
		nj.DeadLetterReason, nj.DeadLetterQueue, nj.DeadLetterDetail = pipeline.ReasonUnboundVersion, "render-v2", "v2 is not bound"
		mustCreate(t, s, nj)
	}
}

// The page size is clamped to 1..500, 100 when out of range; a caller's
// limit inside the range is honoured exactly.
func TestListDeadLettersLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	deadLettered(t, s, 3)
	tests := []struct {
		limit, want int
	}{
		{-1, 3}, {0, 3}, {1, 1}, {2, 2}, {3, 3}, {500, 3}, {501, 3},
	}
	for _, tt := range tests {
		dls, err := s.ListDeadLetters(ctx, false, 0, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != tt.want {
			t.Errorf("ListDeadLetters(limit=%d) returned %d, want %d", tt.limit, len(dls), tt.want)
		}
	}
	// Newest first, and afterID continues below the last one seen.
	first, err := s.ListDeadLetters(ctx, false, 0, 2)
	if err != nil || len(first) != 2 || first[0].ID <= first[1].ID {
		t.Fatalf("first page %+v, %v", first, err)
	}
	rest, err := s.ListDeadLetters(ctx, false, first[1].ID, 2)
	if err != nil || len(rest) != 1 || rest[0].ID >= first[1].ID {
		t.Fatalf("second page %+v, %v", rest, err)
	}
}

// A limit above 500 is not honoured: the page falls back to 100 rows.
func TestListDeadLettersLimitCeiling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	deadLettered(t, s, 101)
	for _, tt := range []struct{ limit, want int }{{500, 101}, {501, 100}, {0, 100}, {101, 101}} {
		dls, err := s.ListDeadLetters(ctx, false, 0, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != tt.want {
			t.Errorf("ListDeadLetters(limit=%d) returned %d, want %d", tt.limit, len(dls), tt.want)
		}
	}
}

// If the dead-letter row cannot be written, the settlement that needed it
// is rolled back: no job is dead-lettered without its dead letter.
func TestDeadLetterInsertFailureRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-refused"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.ExecForTest(ctx, `CREATE TRIGGER refuse_dead_letters BEFORE INSERT ON dead_letters
		BEGIN SELECT RAISE(ABORT, 'dead letters refused'); END`); err != nil {
		t.Fatal(err)
	}
	err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted})
	if err == nil {
		t.Fatal("Finish succeeded although the dead letter could not be written")
	}
	if st := statusOf(t, s, "v1-refused"); st != pipeline.StatusRunning {
		t.Fatalf("job is %s after the failed settlement, want running", st)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id = 'v1-refused'`); n != 1 {
		t.Fatalf("%d messages for the job, want its message kept", n)
	}
}

// StageFinished records the stage and units done on the job, with an event
// carrying both.
func TestStageFinishedRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-st"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.StageFinished(ctx, c.Lease, pipeline.StageExecute, 2, map[string]any{"reused": 1}); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, "v1-st")
	if err != nil {
		t.Fatal(err)
	}
	if j.Stage != pipeline.StageExecute || j.UnitsDone != 2 {
		t.Fatalf("job stage %q units done %d, want execute, 2", j.Stage, j.UnitsDone)
	}
	evs, err := s.Events(ctx, "v1-st", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var detail map[string]any
	for _, e := range evs {
		if e.Kind == pipeline.EventStageFinished {
			if err := json.Unmarshal(e.Detail, &detail); err != nil {
				t.Fatal(err)
			}
		}
	}
	if detail["stage"] != pipeline.StageExecute || detail["units_done"] != float64(2) || detail["reused"] != float64(1) {
		t.Fatalf("stage_finished detail %v", detail)
	}
}

// Fetch refuses a batch size or lease that is not positive, and an empty owner.
func TestFetchArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-args"))
	for _, tt := range []struct {
		owner string
		max   int
		lease time.Duration
	}{
		{"w", 0, time.Minute}, {"w", -1, time.Minute}, {"w", 1, 0}, {"w", 1, -time.Second}, {"", 1, time.Minute},
	} {
		cs, _, err := s.Fetch(ctx, "render-v1", tt.owner, tt.max, tt.lease)
		if !errors.Is(err, pipeline.ErrInvalidInput) || len(cs) != 0 {
			t.Errorf("Fetch(owner=%q, max=%d, lease=%s) = %d claimed, %v; want ErrInvalidInput", tt.owner, tt.max, tt.lease, len(cs), err)
		}
	}
	// The smallest valid arguments claim the job.
	cs, _, err := s.Fetch(ctx, "render-v1", "w", 1, time.Millisecond)
	if err != nil || len(cs) != 1 {
		t.Fatalf("Fetch(max=1, lease=1ms) = %d claimed, %v", len(cs), err)
	}
}

// An event's detail is stored as given; no detail is stored as {}.
func TestAppendEventDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-ev"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.AppendEvent(ctx, c.Lease, pipeline.EventUnitGenerated, map[string]any{"scene": 2, "name": "image"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, c.Lease, pipeline.EventStageStarted, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "v1-ev", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs {
		if e.AttemptID == c.Lease.AttemptID && e.FromStatus == "" {
			got[e.Kind] = string(e.Detail)
		}
	}
	var detail map[string]any
	if err := json.Unmarshal([]byte(got[pipeline.EventUnitGenerated]), &detail); err != nil {
		t.Fatalf("unit_generated detail %q: %v", got[pipeline.EventUnitGenerated], err)
	}
	if detail["scene"] != float64(2) || detail["name"] != "image" {
		t.Errorf("unit_generated detail = %v, want scene 2, name image", detail)
	}
	if got[pipeline.EventStageStarted] != "{}" {
		t.Errorf("stage_started detail = %q, want {}", got[pipeline.EventStageStarted])
	}
}

// A message enqueued with a delay becomes visible only once the delay has
// passed.
func TestEnqueueDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := openTest(t, "", clock)
	deadLettered(t, s, 1) // a job with no message of its own
	if err := s.Enqueue(ctx, "render-v2", "v2-dl000", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance        time.Duration
		total, visible int
	}{
		{0, 1, 0}, {59 * time.Second, 1, 0}, {time.Second, 1, 1},
	} {
		clock.Advance(step.advance)
		total, visible, err := s.QueueDepth(ctx, "render-v2")
		if err != nil || total != step.total || visible != step.visible {
			t.Fatalf("at %s: depth %d/%d visible, %v; want %d/%d", clock.Now().Sub(t0), visible, total, err, step.visible, step.total)
		}
	}
}

// Finishing an attempt that gave up records one dead letter with the
// outcome's reason and the job's queue, and the status event says why.
func TestFinishDeadLetteredRecordsReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-gaveup"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted,
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_timeout", RequiresAction: true}); err != nil {
		t.Fatal(err)
	}
	dls, err := s.ListDeadLetters(ctx, false, 0, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v; want one", dls, err)
	}
	if d := dls[0]; d.JobID != "v1-gaveup" || d.Reason != pipeline.ReasonRetriesExhausted || d.Queue != "render-v1" || d.Detail != "provider_timeout" {
		t.Fatalf("dead letter %+v", d)
	}
	evs, err := s.Events(ctx, "v1-gaveup", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	var detail map[string]any
	if err := json.Unmarshal(last.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if last.ToStatus != pipeline.StatusDeadLettered || detail["reason"] != pipeline.ReasonRetriesExhausted || detail["error_code"] != "provider_timeout" {
		t.Fatalf("last event %s→%s detail %v", last.FromStatus, last.ToStatus, detail)
	}
	if _, ok := detail["next_run_at"]; ok {
		t.Errorf("dead_lettered event carries next_run_at: %v", detail)
	}
}

// A retry_wait event carries when the job runs next and no reason.
func TestFinishRetryWaitEventDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-later"))
	c := fetchOne(t, s, "render-v1", "w1")
	next := t0.Add(90 * time.Second)
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: next,
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_rate_limited"}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "v1-later", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	var detail map[string]any
	if err := json.Unmarshal(last.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if detail["next_run_at"] != next.Format(time.RFC3339) || detail["error_code"] != "provider_rate_limited" {
		t.Fatalf("retry_wait event detail %v", detail)
	}
	if _, ok := detail["reason"]; ok {
		t.Errorf("retry_wait event carries a reason: %v", detail)
	}
	if dls, _ := s.ListDeadLetters(ctx, true, 0, 10); len(dls) != 0 {
		t.Errorf("retry_wait wrote dead letters: %+v", dls)
	}
}

// A released job's message keeps its delivery count (a release is not an
// ack), so a job that is never finished still ends as poison after
// MaxDeliveries (3 here). (A finished attempt restarts the count:
// TestRetryWaitReschedulesMessage.)
func TestReleaseKeepsDeliveryCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-rel"))
	for want := 1; want <= 3; want++ {
		c := fetchOne(t, s, "render-v1", "w1")
		if c.Deliveries != want {
			t.Fatalf("fetch %d: delivery count %d", want, c.Deliveries)
		}
		if err := s.Release(ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	cs, stats, err := s.Fetch(ctx, "render-v1", "w1", 1, time.Minute)
	if err != nil || len(cs) != 0 || stats.DeadLettered != 1 {
		t.Fatalf("fourth delivery: %d claimed, %+v, %v; want it dead-lettered as poison", len(cs), stats, err)
	}
	if st := statusOf(t, s, "v1-rel"); st != pipeline.StatusDeadLettered {
		t.Fatalf("job is %s, want dead_lettered", st)
	}
}

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

// A dead_lettered outcome without an error code or message gets the reason
// as its code and a readable message; given ones are kept.
func TestFinishDeadLetteredDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-bare"))
	mustCreate(t, s, newJob("v1-full"))
	cs, _, err := s.Fetch(ctx, "render-v1", "w", 2, time.Minute)
	if err != nil || len(cs) != 2 {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	byID := map[string]pipeline.Lease{cs[0].Job.ID: cs[0].Lease, cs[1].Job.ID: cs[1].Lease}
	if err := s.Finish(ctx, byID["v1-bare"], pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, byID["v1-full"], pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted,
		ErrorCode: "provider_timeout", ErrorMessage: "the provider kept timing out"}); err != nil {
		t.Fatal(err)
	}
	bare, _ := s.GetJob(ctx, "v1-bare")
	if bare.LastErrorCode != pipeline.ReasonRetriesExhausted || bare.LastErrorMessage == "" {
		t.Errorf("bare dead letter: code %q message %q; want the reason and a default message", bare.LastErrorCode, bare.LastErrorMessage)
	}
	full, _ := s.GetJob(ctx, "v1-full")
	if full.LastErrorCode != "provider_timeout" || full.LastErrorMessage != "the provider kept timing out" {
		t.Errorf("full dead letter: code %q message %q; want them kept", full.LastErrorCode, full.LastErrorMessage)
	}
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
	cs, _, err := s.Fetch(ctx, "render-v1", "w", len(ids), time.Minute)
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

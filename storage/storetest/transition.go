package storetest

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Finishing an attempt that gave up records one dead letter with the
// outcome's reason and the job's queue, and the status event says why.
func testFinishDeadLetteredRecordsReason(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
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

// A dead_lettered outcome without an error code or message gets the reason
// as its code and a readable message; given ones are kept.
func testFinishDeadLetteredDefaults(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-bare"))
	mustCreate(t, s, newJob("v1-full"))
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
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

// A retry_wait event carries when the job runs next and no reason.
func testFinishRetryWaitEventDetail(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
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

// lastStatusEvent returns the detail of a job's latest status event.
func lastStatusEvent(t *testing.T, s *env, id string) (pipeline.Event, map[string]any) {
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

// A released job's message keeps its delivery count (a release is not an
// ack), so a job that is never finished still ends as poison after
// MaxDeliveries (3 here). (A finished attempt restarts the count:
// TestRetryWaitReschedulesMessage.)
func testReleaseKeepsDeliveryCount(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
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
	cs, stats, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w1", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 0 || stats.DeadLettered != 1 {
		t.Fatalf("fourth delivery: %d claimed, %+v, %v; want it dead-lettered as poison", len(cs), stats, err)
	}
	if st := statusOf(t, s, "v1-rel"); st != pipeline.StatusDeadLettered {
		t.Fatalf("job is %s, want dead_lettered", st)
	}
}

// An operator's retry waives the calls whose outcome was unknown and the
// answered image/speech calls whose artifact the unit does not hold (they
// would otherwise stop every later attempt); an answered call whose result
// is stored, and a video submission (polled, never repaid), stay. Failing
// the job leaves the audit trail as it was.
func testDecideWaivesUnknownCallsOnlyOnRetry(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	type call struct {
		scene  int
		op     string
		status string
	}
	calls := []call{
		{0, pipeline.OpSpeech, pipeline.CallAmbiguous}, // unknown outcome
		{0, pipeline.OpImage, pipeline.CallSucceeded},  // stored on the unit
		{1, pipeline.OpSpeech, pipeline.CallSucceeded}, // answered, never stored
		{1, pipeline.OpVideoSubmit, pipeline.CallSucceeded},
		{1, pipeline.OpImage, pipeline.CallFailed}, // a refusal: never billed
	}
	for _, tt := range []struct {
		id   string
		d    pipeline.ReviewDecision
		want []string // statuses afterwards, in the order of calls
	}{
		{"v1-waive", pipeline.DecisionRetry, []string{pipeline.CallWaived, pipeline.CallSucceeded, pipeline.CallWaived, pipeline.CallSucceeded, pipeline.CallFailed}},
		{"v1-nowaive", pipeline.DecisionFail, []string{pipeline.CallAmbiguous, pipeline.CallSucceeded, pipeline.CallSucceeded, pipeline.CallSucceeded, pipeline.CallFailed}},
	} {
		nj := newJob(tt.id)
		nj.Queue = "review-" + tt.id // its own queue: the other job is fetched nowhere else
		mustCreate(t, s, nj)
		c := fetchOne(t, s, nj.Queue, "w")
		if err := s.PlanUnits(ctx, c.Lease, []pipeline.Unit{{JobID: tt.id, Scene: 0, Kind: "image", UnitKey: "a"}, {JobID: tt.id, Scene: 1, Kind: "video", UnitKey: "b"}}); err != nil {
			t.Fatal(err)
		}
		key := "units/v1/ab/" + tt.id + ".png"
		if err := s.ClaimObject(ctx, c.Lease, key); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitAsset(ctx, c.Lease, pipeline.Asset{Key: key, Kind: "image", SizeBytes: 1, SHA256: strings.Repeat("a", 64), ContentType: "image/png"}); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateUnit(ctx, c.Lease, 0, pipeline.UnitUpdate{Artifacts: map[string]string{pipeline.ArtifactImage: key}}); err != nil {
			t.Fatal(err)
		}
		// The video unit failed after its submission was accepted: a retry
		// plans it afresh (the failed prediction is not polled again).
		if err := s.UpdateUnit(ctx, c.Lease, 1, pipeline.UnitUpdate{Status: pipeline.UnitFailed, ExternalJobID: "pred-" + tt.id}); err != nil {
			t.Fatal(err)
		}
		for _, cl := range calls {
			id, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: cl.scene, Op: cl.op, Provider: "fake", Contract: pipeline.ContractSync})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: id, Status: cl.status, HTTPStatus: 0, ErrorCode: "", ExternalID: ""}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
			ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: tt.id, Decision: tt.d, Operator: "op"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ProviderCalls(ctx, tt.id, pipeline.AllScenes, "")
		if err != nil || len(got) != len(calls) {
			t.Fatalf("%s: calls %+v, %v", tt.id, got, err)
		}
		waived := 0
		for i, cl := range got {
			if cl.Status != tt.want[i] {
				t.Errorf("%s after %s: call %d (scene %d %s) is %s, want %s", tt.id, tt.d, i, cl.Scene, cl.Op, cl.Status, tt.want[i])
			}
			if cl.Status != pipeline.CallWaived {
				continue
			}
			// Each waived call has its audit event: which call, scene and
			// operation, and who agreed to pay again.
			waived++
			if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = ? AND kind = 'call_waived'
				AND CAST(detail_json ->> 'call_id' AS TEXT) = ? AND CAST(detail_json ->> 'scene' AS TEXT) = ? AND detail_json ->> 'op' = ? AND detail_json ->> 'operator' = 'op'`,
				tt.id, strconv.FormatInt(cl.ID, 10), strconv.Itoa(cl.Scene), cl.Op); n != 1 {
				t.Errorf("%s: %d call_waived events for call %d (scene %d %s), want 1", tt.id, n, cl.ID, cl.Scene, cl.Op)
			}
		}
		if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = ? AND kind = 'call_waived'`, tt.id); n != waived {
			t.Errorf("%s: %d call_waived events, want %d", tt.id, n, waived)
		}
		units, err := s.Units(ctx, tt.id)
		if err != nil || len(units) != 2 {
			t.Fatalf("%s: units %+v, %v", tt.id, units, err)
		}
		wantVideo, wantExt := pipeline.UnitPlanned, ""
		if tt.d == pipeline.DecisionFail {
			wantVideo, wantExt = pipeline.UnitFailed, "pred-"+tt.id
		}
		if u := units[1]; u.Status != wantVideo || u.ExternalJobID != wantExt {
			t.Errorf("%s after %s: video unit %s %q, want %s %q", tt.id, tt.d, u.Status, u.ExternalJobID, wantVideo, wantExt)
		}
	}
}

// If the dead-letter row cannot be written, the settlement that needed it
// is rolled back: no job is dead-lettered without its dead letter.
func testDeadLetterInsertFailureRollsBack(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-refused"))
	c := fetchOne(t, s, "render-v1", "w1")
	h.RefuseInserts(t, s.db, "dead_letters")
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

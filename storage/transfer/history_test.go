package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/check"
	"edgepipe/pipeline"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
	"edgepipe/storage/transfer"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// The stores of both drivers are what import and export take.
var (
	_ transfer.Source = (*sqlite.Store)(nil)
	_ transfer.Target = (*sqlite.Store)(nil)
)

// history is a store with real history and the object store its assets
// live in.
type history struct {
	store   *sqlite.Store
	objects *fs.Store
	clock   *pipeline.ManualClock
	path    string
	// cursor is an SSE cursor (an event id) of the redriven job, and next
	// the id of the event after it.
	cursorJob    string
	cursor, next int64
}

// buildHistory makes, through the store's own methods, jobs in every state
// a migration meets: succeeded with units, paid calls, assets and a
// webhook; failed; needs_review; failed by an operator's decision;
// dead-lettered, redriven and succeeded; dead-lettered at submission and
// discarded; pending in the queue; and a delivered and a failing webhook.
func buildHistory(t *testing.T) *history {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clock := pipeline.NewManualClock(t0)
	path := filepath.Join(dir, "edgepipe.db")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: path, Clock: clock, MaxDeliveries: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	h := &history{store: st, objects: objs, clock: clock, path: path}

	create := func(id, version, hook string) {
		t.Helper()
		nj := pipeline.NewJob{ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "key-" + id,
			RequestFingerprint: "fp-" + id, Input: json.RawMessage(`{"title":"<t> & \"q\"","scenes":[{"n":"é"}]}`),
			Version: version, Queue: "render-" + version, WebhookURL: hook}
		if _, created, err := st.CreateJob(ctx, nj); err != nil || !created {
			t.Fatalf("create %s: %v %v", id, created, err)
		}
	}
	create("v1-ok", "v1", "https://hooks.example/ok")
	create("v2-fail", "v2", "https://hooks.example/fail")
	create("v1-review", "v1", "")
	create("v2-decided", "v2", "")
	create("v1-dead", "v1", "")
	create("v1-waiting", "v1", "")
	if _, _, err := st.CreateJob(ctx, pipeline.NewJob{ID: "v9-unbound", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "key-v9", RequestFingerprint: "fp-v9", Input: json.RawMessage(`{}`), Version: "v9",
		DeadLetterReason: "unbound_version", DeadLetterDetail: "no process binds v9", DeadLetterQueue: "render-v9"}); err != nil {
		t.Fatal(err)
	}

	h.succeed(t, "v1-ok", "v1")
	h.settle(t, "v2-fail", "v2", pipeline.Outcome{Status: pipeline.StatusFailed, ErrorClass: pipeline.ErrorClass("permanent"), ErrorCode: "bad_prompt", ErrorMessage: "the prompt was refused"})
	h.settle(t, "v1-review", "v1", pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorCode: "ambiguous_billing"})
	h.settle(t, "v2-decided", "v2", pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorCode: "ambiguous_billing"})
	if _, err := st.Decide(ctx, &pipeline.DecideParams{JobID: "v2-decided", Decision: pipeline.DecisionFail, Operator: "ops@acme", Reason: "the provider billed; do not pay again"}); err != nil {
		t.Fatal(err)
	}
	h.settle(t, "v1-dead", "v1", pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: "retries_exhausted", ErrorCode: "timeout"})

	// The SSE cursor: the last event of v1-dead before its redrive.
	evs, err := st.Events(ctx, "v1-dead", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	h.cursorJob, h.cursor = "v1-dead", evs[len(evs)-1].ID
	dls, err := st.ListDeadLetters(ctx, false, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range dls {
		switch dl.JobID {
		case "v1-dead":
			if _, err := st.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dl.ID, Queue: "render-v1", Operator: "ops@acme"}); err != nil {
				t.Fatal(err)
			}
		case "v9-unbound":
			if _, err := st.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: dl.ID, Operator: "ops@acme", Reason: "v9 was never released"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	evs, err = st.Events(ctx, "v1-dead", h.cursor, 1)
	if err != nil || len(evs) != 1 {
		t.Fatalf("the event after the cursor: %v %v", evs, err)
	}
	h.next = evs[0].ID
	h.succeed(t, "v1-dead", "v1")

	// Webhooks: one delivered, one failed once and due again.
	clock.Advance(time.Second)
	ds, err := st.ClaimWebhooks(ctx, 10, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claimed %d webhooks: %v", len(ds), err)
	}
	if err := st.MarkWebhookDelivered(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkWebhookFailed(ctx, ds[1], "connection refused", clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A job whose queue message waits, and a process's bindings.
	create("v2-queued", "v2", "")
	// A job keyed by its internal key, the tenant's id beside it: another
	// tenant may hold the same instance id.
	for _, tenant := range []string{"acme", "globex"} {
		key := pipeline.JobKey(tenant, "v1-shared")
		if _, created, err := st.CreateJob(ctx, pipeline.NewJob{ID: key, InstanceID: "v1-shared", Tenant: tenant,
			Operation: "render_video", IdempotencyKey: "key-shared", RequestFingerprint: "fp-shared",
			Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1"}); err != nil || !created {
			t.Fatalf("create %s: %v %v", key, created, err)
		}
	}
	if err := st.AnnounceBindings(ctx, &pipeline.AnnounceBindingsParams{ProcessID: "proc-1", Role: "worker", Versions: []string{"v1", "v2"}}); err != nil {
		t.Fatal(err)
	}
	// Two probes' proofs of one model: the history moves, not only the latest.
	for _, v := range []pipeline.ProofVerdict{pipeline.ProofNotIdempotent, pipeline.ProofIdempotent} {
		if _, err := st.RecordProof(ctx, &pipeline.RecordProofParams{Proof: pipeline.Proof{Provider: "fake", Op: "image", Model: "m1", Endpoint: "in-process",
			Verdict: v, Calls: 2, Detail: "same sha256, one charge", ProvedAt: clock.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// attempt claims the job on its version's queue and runs its prepare stage.
func (h *history) attempt(t *testing.T, id, version string) pipeline.Lease {
	t.Helper()
	ctx := context.Background()
	h.clock.Advance(time.Second)
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-" + version, Owner: "worker-1", Max: 10, LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var lease pipeline.Lease
	for _, c := range cs {
		if c.Job.ID == id {
			lease = c.Lease
		} else if err := h.store.Release(ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	if lease.AttemptID == "" {
		t.Fatalf("could not claim %s", id)
	}
	if err := h.store.AppendEvent(ctx, lease, pipeline.EventStageStarted, map[string]string{"stage": "prepare", "workflow": version}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.FreezeInput(ctx, lease, json.RawMessage(`{"frozen":true}`), 1); err != nil {
		t.Fatal(err)
	}
	if err := h.store.StageFinished(ctx, lease, "prepare", 0, nil); err != nil {
		t.Fatal(err)
	}
	return lease
}

func (h *history) settle(t *testing.T, id, version string, o pipeline.Outcome) {
	t.Helper()
	lease := h.attempt(t, id, version)
	if o.Status == pipeline.StatusFailed {
		// An object claimed and never written: the claim stays behind.
		if err := h.store.ClaimObject(context.Background(), lease, "units/"+id+"/0/image.png"); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.store.Finish(context.Background(), lease, o); err != nil {
		t.Fatalf("finish %s: %v", id, err)
	}
}

// succeed runs one image unit (a paid call, its object and asset) and a
// render, and settles the job succeeded.
func (h *history) succeed(t *testing.T, id, version string) {
	t.Helper()
	ctx := context.Background()
	lease := h.attempt(t, id, version)
	if err := h.store.PlanUnits(ctx, lease, []pipeline.Unit{{JobID: id, Scene: 0, Kind: "image", UnitKey: "uk-" + id, Status: pipeline.UnitPlanned}}); err != nil {
		t.Fatal(err)
	}
	callID, err := h.store.RecordIntent(ctx, lease, pipeline.ProviderCall{Scene: 0, Op: "image", Provider: "fake", Model: "m1", Contract: pipeline.ContractFailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.FinishCall(ctx, &pipeline.FinishCallParams{ID: callID, Status: pipeline.CallSucceeded, HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
	img := "units/" + id + "/0/image.png"
	h.write(t, lease, img, "image", "image/png", "png bytes of "+id)
	if err := h.store.UpdateUnit(ctx, lease, 0, pipeline.UnitUpdate{Status: pipeline.UnitGenerated, Artifacts: map[string]string{"image": img}}); err != nil {
		t.Fatal(err)
	}
	render := "renders/" + id + "/out.mp4"
	h.write(t, lease, render, "render", "video/mp4", "mp4 bytes of "+id)
	if err := h.store.StageFinished(ctx, lease, "finalize", 1, map[string]any{"result": render}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Finish(ctx, lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: render}); err != nil {
		t.Fatal(err)
	}
}

// write is the object protocol: claim, put, asset.
func (h *history) write(t *testing.T, lease pipeline.Lease, key, kind, ctype, body string) {
	t.Helper()
	ctx := context.Background()
	if err := h.store.ClaimObject(ctx, lease, key); err != nil {
		t.Fatal(err)
	}
	info, err := h.objects.Put(ctx, key, strings.NewReader(body), pipeline.PutOptions{ContentType: ctype, CreateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.CommitAsset(ctx, lease, pipeline.Asset{Key: key, Kind: kind, SizeBytes: info.Size, SHA256: info.SHA256, ContentType: ctype}); err != nil {
		t.Fatal(err)
	}
}

// mustCheck runs edgepipe check's logic on a store and wants it clean.
func mustCheck(t *testing.T, st check.Store, objs pipeline.ObjectStore, clock pipeline.Clock, what string) check.Report {
	t.Helper()
	rep, err := check.Run(context.Background(), check.Config{Store: st, Objects: objs, Clock: clock})
	if err != nil {
		t.Fatalf("check %s: %v", what, err)
	}
	if !rep.Clean() {
		t.Fatalf("check %s: %+v", what, rep.Violations)
	}
	if rep.Jobs == 0 || rep.Assets == 0 || rep.Events == 0 {
		t.Fatalf("check %s saw nothing: %+v", what, rep)
	}
	return rep
}

// exportOf exports a store and returns the file.
func exportOf(t *testing.T, src transfer.Source) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := transfer.Export(context.Background(), src, &buf, t0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

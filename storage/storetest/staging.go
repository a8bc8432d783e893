package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// stagedAsset is a staged answer's asset for key.
func stagedAsset(key string) pipeline.Asset {
	return pipeline.Asset{Key: key, Kind: pipeline.KindStaged, SizeBytes: 5, SHA256: strings.Repeat("b", 64), ContentType: "image/png"}
}

// A paid answer is staged under its call's key, found by its job, released
// only with a 'deleting' claim until its object is gone, and listed for
// release only once the job is final (docs/design.md §6).
func testStagedAnswers(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-s"))
	c := fetchOne(t, s, "render-v1", "w")
	callID, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: 0, Op: pipeline.OpImage, Provider: "fake", Contract: pipeline.ContractSync})
	if err != nil {
		t.Fatal(err)
	}
	key := pipeline.StagingKey("acme", "v1-s", 0, pipeline.OpImage, callID)
	// Before its asset row exists, the staged object of a job that can
	// still resume counts as referenced (the next attempt adopts it).
	if ref, err := s.KeyReferenced(ctx, key); err != nil || !ref {
		t.Fatalf("staged key of a live job without its row: referenced=%v err=%v", ref, err)
	}
	if err := s.SetCallStaged(ctx, &pipeline.SetCallStagedParams{CallID: callID, Key: key}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("pointing a call at a key without an asset row: %v", err)
	}
	if err := s.ClaimObject(ctx, c.Lease, key); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitAsset(ctx, c.Lease, stagedAsset(key)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCallStaged(ctx, &pipeline.SetCallStagedParams{CallID: callID, Key: key}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCallStaged(ctx, &pipeline.SetCallStagedParams{CallID: callID + 99, Key: key}); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("unknown call: %v", err)
	}
	if err := s.SetCallStaged(ctx, &pipeline.SetCallStagedParams{CallID: 0, Key: key}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("call id 0: %v, want ErrInvalidInput", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM provider_calls WHERE id = ? AND staged_key = ?`, callID, key); n != 1 {
		t.Fatalf("call row not pointed at its staged answer (%d)", n)
	}
	got, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: "v1-s"})
	if err != nil || len(got) != 1 || got[0].Key != key || got[0].Kind != pipeline.KindStaged {
		t.Fatalf("staged answers of the job: %+v, %v", got, err)
	}
	if _, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("staged answers of no job: %v", err)
	}
	if final, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{FinalJobsOnly: true}); err != nil || len(final) != 0 {
		t.Fatalf("a running job's answers listed as final: %+v, %v", final, err)
	}
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "renders/x.mp4"}); err != nil {
		t.Fatal(err)
	}
	final, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{FinalJobsOnly: true})
	if err != nil || len(final) != 1 || final[0].Key != key {
		t.Fatalf("final job's staged answers: %+v, %v", final, err)
	}
	// Release: the row goes, a 'deleting' claim guards the key until the
	// object is deleted.
	rel, err := s.ReleaseStaged(ctx, &pipeline.ReleaseStagedParams{Key: key, Owner: "sweep-1"})
	if err != nil || !rel {
		t.Fatalf("release: %v %v", rel, err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM assets WHERE object_key = ?`, key); n != 0 {
		t.Fatal("the staged asset row survived its release")
	}
	if n := countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ? AND attempt_id = 'sweep-1' AND state = 'deleting'`, key); n != 1 {
		t.Fatal("no deleting claim guards the released key")
	}
	if ref, err := s.KeyReferenced(ctx, key); err != nil || !ref {
		t.Fatalf("a key being deleted must count as referenced: %v %v", ref, err)
	}
	if rel, err := s.ReleaseStaged(ctx, &pipeline.ReleaseStagedParams{Key: key, Owner: "sweep-2"}); err != nil || rel {
		t.Fatalf("second release: %v %v", rel, err)
	}
	if err := s.FinishAbandon(ctx, "sweep-1", key); err != nil {
		t.Fatal(err)
	}
	if ref, err := s.KeyReferenced(ctx, key); err != nil || ref {
		t.Fatalf("released key of a final job still referenced: %v %v", ref, err)
	}
	// The call keeps its staged_key as history.
	calls, err := s.ProviderCalls(ctx, "v1-s", pipeline.AllScenes, "")
	if err != nil || len(calls) != 1 || calls[0].StagedKey != key {
		t.Fatalf("calls after release: %+v %v", calls, err)
	}
}

// CommitStaged records an answer staged outside an attempt (a worker's
// spool flushed later), and is refused once the job is over for good.
func testCommitStaged(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-c"))
	c := fetchOne(t, s, "render-v1", "w")
	callID, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: 1, Op: pipeline.OpSpeech, Provider: "fake", Contract: pipeline.ContractSync})
	if err != nil {
		t.Fatal(err)
	}
	key := pipeline.StagingKey("acme", "v1-c", 1, pipeline.OpSpeech, callID)
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: 0, Asset: stagedAsset(key)}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("call id 0: %v, want ErrInvalidInput", err)
	}
	bad := stagedAsset(key)
	bad.Kind = "image"
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: callID, Asset: bad}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("non-staged kind: %v", err)
	}
	// The attempt died; the job waits for a retry. A worker flushes its spool.
	clock.Advance(2 * time.Minute)
	a := stagedAsset(key)
	a.CreatedByAttempt = "spool"
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: callID, Asset: a}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM provider_calls WHERE id = ? AND staged_key = ?`, callID, key); n != 1 {
		t.Fatal("the first CommitStaged did not point the call at its answer")
	}
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: callID, Asset: a}); err != nil {
		t.Fatalf("a retried commit of the same content: %v", err)
	}
	other := a
	other.SHA256 = strings.Repeat("c", 64)
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: callID, Asset: other}); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("other content under the same key: %v", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM assets a JOIN provider_calls c ON c.staged_key = a.object_key
		WHERE c.id = ? AND a.kind = 'staged' AND a.job_id = 'v1-c'`, callID); n != 1 {
		t.Fatal("CommitStaged did not write the asset row and the call's pointer together")
	}
	// Once the job is canceled for good, nothing may be staged for it.
	if _, err := s.RequestCancel(ctx, "", "v1-c"); err != nil {
		t.Fatal(err)
	}
	d := fetchOne(t, s, "render-v1", "w2")
	if err := s.Finish(ctx, d.Lease, pipeline.Outcome{Status: pipeline.StatusCanceled}); err != nil {
		t.Fatal(err)
	}
	late := stagedAsset(key + "0")
	if err := s.CommitStaged(ctx, &pipeline.CommitStagedParams{CallID: callID, Asset: late}); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("staging for a final job: %v", err)
	}
}

// StagedAnswers returns at most p.Limit answers, in key order.
func testStagedAnswersLimit(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-lim"))
	c := fetchOne(t, s, "render-v1", "w")
	var keys []string
	for scene := range 2 {
		id, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: scene, Op: pipeline.OpImage, Provider: "fake", Contract: pipeline.ContractSync})
		if err != nil {
			t.Fatal(err)
		}
		key := pipeline.StagingKey("acme", "v1-lim", scene, pipeline.OpImage, id)
		if err := s.ClaimObject(ctx, c.Lease, key); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitAsset(ctx, c.Lease, stagedAsset(key)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	slices.Sort(keys)
	all, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: "v1-lim"})
	if err != nil || len(all) != 2 || all[0].Key != keys[0] || all[1].Key != keys[1] {
		t.Fatalf("all: %+v, %v; want %v", all, err, keys)
	}
	one, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: "v1-lim", Limit: 1})
	if err != nil || len(one) != 1 || one[0].Key != keys[0] {
		t.Fatalf("limit 1: %+v, %v; want %s", one, err, keys[0])
	}
}

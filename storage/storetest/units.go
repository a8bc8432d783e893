package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Units are planned once, read back in scene order, and updated by merging:
// status and external id change only when given, artifacts accumulate and
// must name an existing asset.
func testUnitLedger(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-u"))
	c := fetchOne(t, s, "render-v1", "w1")
	plan := []pipeline.Unit{
		{JobID: "v1-u", Scene: 1, Kind: "video", UnitKey: "k1"},
		{JobID: "v1-u", Scene: 0, Kind: "image", UnitKey: "k0"},
	}
	if err := s.PlanUnits(ctx, c.Lease, plan); err != nil {
		t.Fatal(err)
	}
	if err := s.PlanUnits(ctx, c.Lease, []pipeline.Unit{{JobID: "v1-other", Scene: 0, Kind: "image", UnitKey: "x"}}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("planning another job's unit: %v, want ErrInvalidInput", err)
	}
	units, err := s.Units(ctx, "v1-u")
	if err != nil || len(units) != 2 {
		t.Fatalf("units %+v, %v", units, err)
	}
	if u := units[0]; u.Scene != 0 || u.Kind != "image" || u.UnitKey != "k0" || u.Status != pipeline.UnitPlanned || len(u.Artifacts) != 0 || u.Artifacts == nil {
		t.Fatalf("unit 0 %+v", u)
	}
	if u := units[1]; u.Scene != 1 || u.Kind != "video" || u.UnitKey != "k1" || !u.UpdatedAt.Equal(t0) {
		t.Fatalf("unit 1 %+v", u)
	}

	// Only an artifact with an asset row may be recorded.
	const key = "units/v1/ab/u0.png"
	err = s.UpdateUnit(ctx, c.Lease, 0, pipeline.UnitUpdate{Artifacts: map[string]string{"image": key}})
	if !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("artifact without an asset: %v, want ErrInvalidInput", err)
	}
	if err := s.ClaimObject(ctx, c.Lease, key); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitAsset(ctx, c.Lease, pipeline.Asset{Key: key, Kind: "image", SizeBytes: 1, SHA256: strings.Repeat("d", 64), ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := s.UpdateUnit(ctx, c.Lease, 0, pipeline.UnitUpdate{Artifacts: map[string]string{"image": key}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateUnit(ctx, c.Lease, 1, pipeline.UnitUpdate{Status: pipeline.UnitSubmitted, ExternalJobID: "ext-1"}); err != nil {
		t.Fatal(err)
	}
	// An update with nothing set keeps everything.
	if err := s.UpdateUnit(ctx, c.Lease, 1, pipeline.UnitUpdate{}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateUnit(ctx, c.Lease, 0, pipeline.UnitUpdate{Status: pipeline.UnitGenerated}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateUnit(ctx, c.Lease, 7, pipeline.UnitUpdate{Status: pipeline.UnitGenerated}); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("update of a unit that was never planned: %v, want ErrNotFound", err)
	}
	units, err = s.Units(ctx, "v1-u")
	if err != nil || len(units) != 2 {
		t.Fatalf("units %+v, %v", units, err)
	}
	if u := units[0]; u.Status != pipeline.UnitGenerated || u.Artifacts["image"] != key || len(u.Artifacts) != 1 || !u.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("unit 0 after updates %+v", u)
	}
	if u := units[1]; u.Status != pipeline.UnitSubmitted || u.ExternalJobID != "ext-1" || len(u.Artifacts) != 0 {
		t.Fatalf("unit 1 after updates %+v", u)
	}
	// Planning again (a later attempt) changes nothing.
	if err := s.PlanUnits(ctx, c.Lease, plan); err != nil {
		t.Fatal(err)
	}
	again, _ := s.Units(ctx, "v1-u")
	if again[0].Status != pipeline.UnitGenerated || again[1].ExternalJobID != "ext-1" {
		t.Fatalf("planning again changed the units: %+v", again)
	}
}

// The audit trail: an intent is written before the call and finished once;
// ProviderCalls filters by scene and operation; CountBilledCalls counts what
// may have been paid for.
func testProviderCallAuditTrail(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-pc"))
	c := fetchOne(t, s, "render-v1", "w1")
	record := func(scene int, op string) int64 {
		t.Helper()
		id, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: scene, Op: op, Provider: "fake",
			Contract: pipeline.ContractIdempotentVerified, IdempotencyKey: "ep-" + op})
		if err != nil || id <= 0 {
			t.Fatalf("RecordIntent(%d, %s) = %d, %v", scene, op, id, err)
		}
		return id
	}
	img0 := record(0, pipeline.OpImage)
	sp0 := record(0, pipeline.OpSpeech)
	img1 := record(1, pipeline.OpImage)
	if img0 == sp0 || sp0 == img1 {
		t.Fatalf("ids %d %d %d are not distinct", img0, sp0, img1)
	}
	clock.Advance(time.Second)
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: img0, Status: pipeline.CallSucceeded, HTTPStatus: 200, ErrorCode: "", ExternalID: "ext-img0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: sp0, Status: pipeline.CallFailed, HTTPStatus: 429, ErrorCode: "provider_rate_limited", ExternalID: ""}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: img0, Status: pipeline.CallAmbiguous, HTTPStatus: 0, ErrorCode: "x", ExternalID: ""}); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("finishing a call twice: %v, want ErrInvalidTransition", err)
	}
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: img1, Status: pipeline.CallIntent, HTTPStatus: 0, ErrorCode: "", ExternalID: ""}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("finishing as intent: %v, want ErrInvalidInput", err)
	}

	all, err := s.ProviderCalls(ctx, "v1-pc", pipeline.AllScenes, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("all calls %+v, %v", all, err)
	}
	got := all[0]
	if got.ID != img0 || got.JobID != "v1-pc" || got.Scene != 0 || got.Op != pipeline.OpImage || got.Provider != "fake" ||
		got.Contract != pipeline.ContractIdempotentVerified || got.IdempotencyKey != "ep-image" || got.AttemptID != c.Lease.AttemptID ||
		got.Status != pipeline.CallSucceeded || got.ExternalJobID != "ext-img0" || got.HTTPStatus != 200 ||
		!got.IntendedAt.Equal(t0) || !got.FinishedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("first call %+v", got)
	}
	if all[1].Status != pipeline.CallFailed || all[1].ErrorCode != "provider_rate_limited" || all[1].HTTPStatus != 429 {
		t.Fatalf("second call %+v", all[1])
	}
	if all[2].Status != pipeline.CallIntent || !all[2].FinishedAt.IsZero() {
		t.Fatalf("open intent %+v", all[2])
	}
	if cs, _ := s.ProviderCalls(ctx, "v1-pc", 0, ""); len(cs) != 2 {
		t.Errorf("scene 0 has %d calls, want 2", len(cs))
	}
	if cs, _ := s.ProviderCalls(ctx, "v1-pc", pipeline.AllScenes, pipeline.OpImage); len(cs) != 2 {
		t.Errorf("%d image calls, want 2", len(cs))
	}
	if cs, _ := s.ProviderCalls(ctx, "v1-pc", 1, pipeline.OpSpeech); len(cs) != 0 {
		t.Errorf("scene 1 speech: %d calls, want 0", len(cs))
	}
	billed, err := s.CountBilledCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The succeeded image and the still-open image intent may have been
	// billed; the refused speech call was not.
	if billed[pipeline.OpImage] != 2 || billed[pipeline.OpSpeech] != 0 {
		t.Fatalf("billed %v, want image 2, speech 0", billed)
	}
}

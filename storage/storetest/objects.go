package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func assetFor(key string) pipeline.Asset {
	return pipeline.Asset{Key: key, Kind: "image", SizeBytes: 3, SHA256: strings.Repeat("a", 64), ContentType: "image/png"}
}

// The cleanup-vs-new-claim race of docs/design.md §7, interleaved step by step.
func testAbandonVersusNewClaimInterleavings(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	const key = "units/v1/aa/k.png"

	t.Run("cleanup first blocks the new claim until the delete is done", func(t *testing.T) {
		t.Parallel()
		s := h.open(t, pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
		a, b := cs[0].Lease, cs[1].Lease
		if err := s.ClaimObject(ctx, a, key); err != nil {
			t.Fatal(err)
		}
		// A's upload failed after the object appeared; A decides to delete.
		del, err := s.AbandonClaim(ctx, a.AttemptID, key)
		if err != nil || !del {
			t.Fatalf("A abandon: del=%v err=%v", del, err)
		}
		// B wants the same key right now: refused while A deletes.
		if err := s.ClaimObject(ctx, b, key); !errors.Is(err, pipeline.ErrClaimConflict) {
			t.Fatalf("B claimed a key being deleted: %v", err)
		}
		// A's delete is done.
		if err := s.FinishAbandon(ctx, a.AttemptID, key); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimObject(ctx, b, key); err != nil {
			t.Fatalf("B after the delete: %v", err)
		}
		if err := s.CommitAsset(ctx, b, assetFor(key)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("new claim first keeps the object", func(t *testing.T) {
		t.Parallel()
		s := h.open(t, pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
		a, b := cs[0].Lease, cs[1].Lease
		if err := s.ClaimObject(ctx, a, key); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimObject(ctx, b, key); err != nil {
			t.Fatal(err)
		}
		del, err := s.AbandonClaim(ctx, a.AttemptID, key)
		if err != nil || del {
			t.Fatalf("A would delete an object B has claimed: del=%v err=%v", del, err)
		}
		if n := countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ?`, key); n != 1 {
			t.Fatalf("%d claims left, want B's only", n)
		}
	})

	t.Run("an asset row keeps the object", func(t *testing.T) {
		t.Parallel()
		s := h.open(t, pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
		a, b := cs[0].Lease, cs[1].Lease
		_ = s.ClaimObject(ctx, a, key)
		_ = s.ClaimObject(ctx, b, key)
		if err := s.CommitAsset(ctx, b, assetFor(key)); err != nil {
			t.Fatal(err)
		}
		if del, err := s.AbandonClaim(ctx, a.AttemptID, key); err != nil || del {
			t.Fatalf("A would delete a committed object: del=%v err=%v", del, err)
		}
	})

	t.Run("a zombie cannot commit", func(t *testing.T) {
		t.Parallel()
		clock := pipeline.NewManualClock(t0)
		s := h.open(t, clock)
		mustCreate(t, s, newJob("v1-a"))
		a := fetchOne(t, s, "render-v1", "w")
		if err := s.ClaimObject(ctx, a.Lease, key); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		fetchOne(t, s, "render-v1", "w2")
		var fe *pipeline.FenceError
		if err := s.CommitAsset(ctx, a.Lease, assetFor(key)); !errors.As(err, &fe) {
			t.Fatalf("zombie commit: %v", err)
		}
		if err := s.ClaimObject(ctx, a.Lease, "units/v1/aa/other.png"); !errors.As(err, &fe) {
			t.Fatalf("zombie claim: %v", err)
		}
		if _, err := s.GetAsset(ctx, key); !errors.Is(err, pipeline.ErrNotFound) {
			t.Fatalf("zombie left an asset: %v", err)
		}
	})
}

func testClaimForSweep(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	a := fetchOne(t, s, "render-v1", "w")
	_ = s.ClaimObject(ctx, a.Lease, "units/v1/aa/live.png")
	if ok, err := s.ClaimForSweep(ctx, "sw", "units/v1/aa/live.png"); err != nil || ok {
		t.Fatalf("sweeper took a live claim's key: %v %v", ok, err)
	}
	ok, err := s.ClaimForSweep(ctx, "sw", "units/v1/aa/orphan.png")
	if err != nil || !ok {
		t.Fatalf("orphan: %v %v", ok, err)
	}
	if err := s.ClaimObject(ctx, a.Lease, "units/v1/aa/orphan.png"); !errors.Is(err, pipeline.ErrClaimConflict) {
		t.Fatalf("claimed a key the sweeper is deleting: %v", err)
	}
	if err := s.FinishAbandon(ctx, "sw", "units/v1/aa/orphan.png"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimObject(ctx, a.Lease, "units/v1/aa/orphan.png"); err != nil {
		t.Fatal(err)
	}
	// After the attempt dies, its claims become stale and are dropped.
	clock.Advance(2 * time.Hour)
	keys, err := s.DropStaleClaims(ctx, clock.Now().Add(-time.Hour).UnixMilli())
	if err != nil || len(keys) != 2 {
		t.Fatalf("stale claims %v %v", keys, err)
	}
	if ref, _ := s.KeyReferenced(ctx, "units/v1/aa/live.png"); ref {
		t.Fatal("a dead attempt's claim still counts as live")
	}
}

// CommitAsset writes the asset row with every field and drops the claim;
// committing the same content again from another attempt is accepted, other
// content is refused.
func testCommitAssetRecordsAndReleases(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-b"))
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if err != nil || len(cs) != 2 {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	a, b := cs[0].Lease, cs[1].Lease
	const key = "units/v1/ab/commit.png"
	want := pipeline.Asset{Key: key, Kind: "image", SizeBytes: 3, SHA256: strings.Repeat("b", 64), ContentType: "image/png", DurationMS: 1200}

	if _, err := s.GetAsset(ctx, key); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("GetAsset before commit: %v, want ErrNotFound", err)
	}
	for _, l := range []pipeline.Lease{a, b} {
		if err := s.ClaimObject(ctx, l, key); err != nil {
			t.Fatal(err)
		}
	}
	if n := claimsOn(t, s, key); n != 2 {
		t.Fatalf("%d claims, want 2", n)
	}
	clock.Advance(time.Second)
	if err := s.CommitAsset(ctx, a, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAsset(ctx, key)
	if err != nil {
		t.Fatalf("GetAsset after commit: %v", err)
	}
	want.JobID, want.CreatedByAttempt, want.CreatedAt = a.JobID, a.AttemptID, t0.Add(time.Second)
	if got != want {
		t.Fatalf("asset row %+v, want %+v", got, want)
	}
	if n := claimsOn(t, s, key); n != 1 {
		t.Fatalf("%d claims after A's commit, want only B's", n)
	}
	// A has nothing left to abandon: its claim went with the commit.
	if del, err := s.AbandonClaim(ctx, a.AttemptID, key); err != nil || del {
		t.Fatalf("abandon after commit: del=%v err=%v", del, err)
	}

	// B finished the same bytes: a retried or concurrent commit succeeds.
	other := want
	other.SHA256 = strings.Repeat("c", 64)
	if err := s.CommitAsset(ctx, b, other); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("commit of other content: %v, want ErrAlreadyExists", err)
	}
	longer := want
	longer.SizeBytes = 4
	if err := s.CommitAsset(ctx, b, longer); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("commit of same hash, other size: %v, want ErrAlreadyExists", err)
	}
	if err := s.CommitAsset(ctx, b, want); err != nil {
		t.Fatalf("commit of the same content: %v", err)
	}
	if n := claimsOn(t, s, key); n != 0 {
		t.Fatalf("%d claims left after both commits", n)
	}
	// Without a claim there is nothing to commit.
	if err := s.CommitAsset(ctx, b, want); !errors.Is(err, pipeline.ErrInvalidTransition) {
		t.Fatalf("commit without a claim: %v, want ErrInvalidTransition", err)
	}
}

// Asset fields are checked before anything is written; an empty object is
// a valid asset.
func testCommitAssetValidation(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-v"))
	c := fetchOne(t, s, "render-v1", "w")
	const emptySHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	tests := []struct {
		name string
		a    pipeline.Asset
		ok   bool
	}{
		{"empty object", pipeline.Asset{Key: "units/v1/e3/empty.wav", Kind: "speech", SizeBytes: 0, SHA256: emptySHA, ContentType: "audio/wav"}, true},
		{"negative size", pipeline.Asset{Key: "units/v1/e3/neg.wav", Kind: "speech", SizeBytes: -1, SHA256: emptySHA, ContentType: "audio/wav"}, false},
		{"short hash", pipeline.Asset{Key: "units/v1/e3/short.wav", Kind: "speech", SizeBytes: 1, SHA256: emptySHA[:63], ContentType: "audio/wav"}, false},
		{"no key", pipeline.Asset{Kind: "speech", SizeBytes: 1, SHA256: emptySHA, ContentType: "audio/wav"}, false},
		{"no content type", pipeline.Asset{Key: "units/v1/e3/nct.wav", Kind: "speech", SizeBytes: 1, SHA256: emptySHA}, false},
	}
	for _, tt := range tests {
		if tt.a.Key != "" {
			if err := s.ClaimObject(ctx, c.Lease, tt.a.Key); err != nil {
				t.Fatal(err)
			}
		}
		err := s.CommitAsset(ctx, c.Lease, tt.a)
		if tt.ok != (err == nil) {
			t.Errorf("%s: CommitAsset = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if !tt.ok && !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: error %v does not wrap ErrInvalidInput", tt.name, err)
		}
		if _, gerr := s.GetAsset(ctx, tt.a.Key); tt.ok != (gerr == nil) {
			t.Errorf("%s: GetAsset after commit = %v, want ok=%v", tt.name, gerr, tt.ok)
		}
	}
}

package sqlite

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

// The cleanup-vs-new-claim race of DESIGN §7, interleaved step by step.
func TestAbandonVersusNewClaimInterleavings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "units/v1/aa/k.png"

	t.Run("cleanup first blocks the new claim until the delete is done", func(t *testing.T) {
		t.Parallel()
		s := openTest(t, "", pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, "render-v1", "w", 2, time.Minute)
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
		s := openTest(t, "", pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, "render-v1", "w", 2, time.Minute)
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
		s := openTest(t, "", pipeline.NewManualClock(t0))
		mustCreate(t, s, newJob("v1-a"))
		mustCreate(t, s, newJob("v1-b"))
		cs, _, _ := s.Fetch(ctx, "render-v1", "w", 2, time.Minute)
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
		s := openTest(t, "", clock)
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

func TestClaimForSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := openTest(t, "", clock)
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

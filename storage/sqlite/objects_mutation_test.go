package sqlite

// The write protocol (DESIGN §7) as the database records it, pinned where
// gremlins found a mutated check that no other test noticed.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func claimsOn(t *testing.T, s *Store, key string) int {
	t.Helper()
	return countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ?`, key)
}

// CommitAsset writes the asset row with every field and drops the claim;
// committing the same content again from another attempt is accepted, other
// content is refused.
func TestCommitAssetRecordsAndReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := openTest(t, "", clock)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-b"))
	cs, _, err := s.Fetch(ctx, "render-v1", "w", 2, time.Minute)
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
func TestCommitAssetValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
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

// FreezeInput stores the first input it is given and returns it, then keeps
// returning that one: a retry can never see another storyboard.
func TestFreezeInputOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-f"))
	c := fetchOne(t, s, "render-v1", "w")
	first := json.RawMessage(`{"title":"first","scenes":3}`)
	got, err := s.FreezeInput(ctx, c.Lease, first, 3)
	if err != nil || string(got) != string(first) {
		t.Fatalf("first FreezeInput = %s, %v; want %s", got, err, first)
	}
	got, err = s.FreezeInput(ctx, c.Lease, json.RawMessage(`{"title":"second"}`), 9)
	if err != nil || string(got) != string(first) {
		t.Fatalf("second FreezeInput = %s, %v; want the first input %s", got, err, first)
	}
	j, err := s.GetJob(ctx, "v1-f")
	if err != nil {
		t.Fatal(err)
	}
	if string(j.FrozenInput) != string(first) || j.UnitsTotal != 3 {
		t.Fatalf("job frozen input %s, units total %d; want %s, 3", j.FrozenInput, j.UnitsTotal, first)
	}
}

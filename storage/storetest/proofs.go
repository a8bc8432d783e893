package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Proofs of idempotency (pipeline.ProofStore): append-only, the latest of a
// (provider, op, model, endpoint) is the one recorded last (the greatest
// id, whatever its date), and a listing shows each key's latest, the last
// recorded first.

// proofEndpoint is the endpoint of the suite's proofs.
const proofEndpoint = "https://api.example/v1"

// proof is a valid proof of (provider, op, model) at proofEndpoint dated at.
func proof(provider, op, model string, v pipeline.ProofVerdict, at time.Time) pipeline.Proof {
	return pipeline.Proof{Provider: provider, Op: op, Model: model, Endpoint: proofEndpoint, Verdict: v, Calls: 3,
		Detail: "sha256 a=b, one charge", ProvedAt: at}
}

// record stores pr and returns it as the store should give it back: with
// its id, dated to the millisecond in UTC.
func record(t *testing.T, s pipeline.ProofStore, pr pipeline.Proof) pipeline.Proof {
	t.Helper()
	id, err := s.RecordProof(context.Background(), &pipeline.RecordProofParams{Proof: pr})
	if err != nil || id <= 0 {
		t.Fatalf("record %+v: id %d, %v", pr, id, err)
	}
	pr.ID, pr.ProvedAt = id, pr.ProvedAt.Truncate(time.Millisecond).UTC()
	return pr
}

func latest(t *testing.T, s pipeline.ProofStore, provider, op, model string) (pipeline.Proof, error) {
	t.Helper()
	return s.LatestProof(context.Background(), &pipeline.LatestProofParams{Provider: provider, Op: op, Model: model, Endpoint: proofEndpoint})
}

// sameProof fails unless got is want field by field (ProvedAt as an
// instant and in UTC).
func sameProof(t *testing.T, what string, got, want pipeline.Proof) {
	t.Helper()
	g, w := got, want
	g.ProvedAt, w.ProvedAt = time.Time{}, time.Time{}
	if g != w || !got.ProvedAt.Equal(want.ProvedAt) || got.ProvedAt.Location() != time.UTC {
		t.Fatalf("%s: got %+v, want %+v (in UTC)", what, got, want)
	}
}

// proofRows counts provider_proofs through the second connection.
func proofRows(t *testing.T, s *env) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM provider_proofs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A recorded proof comes back whole: every field, its id, and its date to
// the millisecond in UTC (a probe's clock may carry nanoseconds and a zone);
// the row holds that date as unix milliseconds.
func testProofRoundTrip(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	at := time.Date(2026, 11, 30, 9, 15, 42, 123_456_789, time.FixedZone("CET", 3600))
	want := pipeline.Proof{Provider: "replicate", Op: pipeline.OpVideoSubmit, Model: "wan-2.1", Endpoint: proofEndpoint, Verdict: pipeline.ProofNotIdempotent,
		Calls: 0, Detail: strings.Repeat("d", pipeline.MaxProofDetail), ProvedAt: at}
	want = record(t, s, want)
	if !want.ProvedAt.Equal(time.UnixMilli(at.UnixMilli())) {
		t.Fatalf("fixture: %s", want.ProvedAt)
	}
	got, err := latest(t, s, want.Provider, want.Op, want.Model)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ProvedAt.Equal(want.ProvedAt) || got.ProvedAt.Location() != time.UTC {
		t.Fatalf("proved at %s (%s), want %s in UTC", got.ProvedAt, got.ProvedAt.Location(), want.ProvedAt)
	}
	sameProof(t, "round trip", got, want)
	var provider, op, model, endpoint, verdict, detail string
	var calls, provedAt int64
	if err := s.db.QueryRow(ctx, `SELECT provider, op, model, endpoint, verdict, calls, detail, proved_at FROM provider_proofs WHERE id = ?`, want.ID).
		Scan(&provider, &op, &model, &endpoint, &verdict, &calls, &detail, &provedAt); err != nil {
		t.Fatal(err)
	}
	if provider != want.Provider || op != want.Op || model != want.Model || endpoint != want.Endpoint || verdict != string(want.Verdict) ||
		calls != 0 || detail != want.Detail || provedAt != at.UnixMilli() {
		t.Fatalf("stored row %q %q %q %q %d %d-byte detail at %d, want %+v at %d", provider, op, model, verdict, calls, len(detail), provedAt, want, at.UnixMilli())
	}
}

// The latest proof is the one recorded last, whatever the dates the
// probing hosts' clocks gave them: a newer verdict from a host whose clock
// is behind still wins, and a proof dated in the future is replaced by the
// next one. Another provider, operation, model or endpoint is never it; a
// key without a proof is ErrNotFound. Every proof is kept.
func testLatestProof(t *testing.T, h *Harness) {
	t.Parallel()
	s := h.open(t, nil)
	const p, op, m = "workers-ai", pipeline.OpImage, "flux-1"
	if _, err := latest(t, s, p, op, m); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("latest of an empty store: %v, want ErrNotFound", err)
	}
	record(t, s, proof(p, op, m, pipeline.ProofIdempotent, t0.Add(time.Hour)))
	behind := record(t, s, proof(p, op, m, pipeline.ProofNotIdempotent, t0)) // written later, dated earlier
	got, err := latest(t, s, p, op, m)
	if err != nil {
		t.Fatal(err)
	}
	sameProof(t, "a proof written after another, dated earlier", got, behind)

	// A proof from the future does not hide the next one.
	record(t, s, proof(p, op, m, pipeline.ProofIdempotent, t0.Add(365*24*time.Hour)))
	tie := record(t, s, proof(p, op, m, pipeline.ProofNotIdempotent, t0.Add(time.Hour)))
	got, err = latest(t, s, p, op, m)
	if err != nil {
		t.Fatal(err)
	}
	sameProof(t, "a proof written after one dated a year ahead", got, tie)

	// Newer proofs of neighbouring keys are not this key's.
	for _, k := range [][3]string{{"replicate", op, m}, {p, pipeline.OpSpeech, m}, {p, op, "flux-2"}, {p + "x", op, m}} {
		record(t, s, proof(k[0], k[1], k[2], pipeline.ProofIdempotent, t0.Add(2*time.Hour)))
	}
	elsewhere := proof(p, op, m, pipeline.ProofIdempotent, t0.Add(2*time.Hour))
	elsewhere.Endpoint = "http://127.0.0.1:8081"
	elsewhere = record(t, s, elsewhere)
	got, err = latest(t, s, p, op, m)
	if err != nil {
		t.Fatal(err)
	}
	sameProof(t, "with newer proofs of other keys", got, tie)
	other, err := latest(t, s, p, op, "flux-2")
	if err != nil || other.Model != "flux-2" || !other.ProvedAt.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("latest of flux-2: %+v, %v", other, err)
	}
	for _, k := range [][3]string{{p, op, "flux-3"}, {p, pipeline.OpVideoSubmit, m}, {"fal", op, m}} {
		if _, err := latest(t, s, k[0], k[1], k[2]); !errors.Is(err, pipeline.ErrNotFound) {
			t.Errorf("latest of %v: %v, want ErrNotFound", k, err)
		}
	}
	if got, err := s.LatestProof(context.Background(), &pipeline.LatestProofParams{Provider: p, Op: op, Model: m, Endpoint: elsewhere.Endpoint}); err != nil {
		t.Fatal(err)
	} else {
		sameProof(t, "the proof of another endpoint", got, elsewhere)
	}
	if n := proofRows(t, s); n != 9 {
		t.Fatalf("%d proof rows, want all 9 (proofs are history)", n)
	}
	for _, bad := range []*pipeline.LatestProofParams{nil, {Op: op, Model: m, Endpoint: proofEndpoint}, {Provider: p, Model: m, Endpoint: proofEndpoint},
		{Provider: p, Op: op, Endpoint: proofEndpoint}, {Provider: p, Op: op, Model: m}} {
		if _, err := s.LatestProof(context.Background(), bad); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("latest of %+v: %v, want ErrInvalidInput", bad, err)
		}
	}
}

// An invalid proof is refused with ErrInvalidInput and writes nothing.
func testRecordProofRefusesInvalid(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	ok := proof("workers-ai", pipeline.OpImage, "flux-1", pipeline.ProofIdempotent, t0)
	bad := map[string]func(*pipeline.Proof){
		"no provider":     func(p *pipeline.Proof) { p.Provider = "" },
		"no op":           func(p *pipeline.Proof) { p.Op = "" },
		"no model":        func(p *pipeline.Proof) { p.Model = "" },
		"no endpoint":     func(p *pipeline.Proof) { p.Endpoint = "" },
		"no verdict":      func(p *pipeline.Proof) { p.Verdict = "" },
		"unknown verdict": func(p *pipeline.Proof) { p.Verdict = "maybe" },
		"negative calls":  func(p *pipeline.Proof) { p.Calls = -1 },
		"long detail":     func(p *pipeline.Proof) { p.Detail = strings.Repeat("x", pipeline.MaxProofDetail+1) },
		"no date":         func(p *pipeline.Proof) { p.ProvedAt = time.Time{} },
	}
	for name, breakIt := range bad {
		pr := ok
		breakIt(&pr)
		if id, err := s.RecordProof(ctx, &pipeline.RecordProofParams{Proof: pr}); !errors.Is(err, pipeline.ErrInvalidInput) || id != 0 {
			t.Errorf("%s: id %d, %v; want ErrInvalidInput", name, id, err)
		}
	}
	if _, err := s.RecordProof(ctx, nil); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("no params: %v, want ErrInvalidInput", err)
	}
	if n := proofRows(t, s); n != 0 {
		t.Fatalf("%d proof rows after refusals, want 0", n)
	}
	if _, err := latest(t, s, ok.Provider, ok.Op, ok.Model); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("latest after refusals: %v, want ErrNotFound", err)
	}
	record(t, s, ok)
	if n := proofRows(t, s); n != 1 {
		t.Fatalf("%d proof rows after a valid proof, want 1", n)
	}
}

// ListProofs shows the latest proof of each key once, the last recorded
// first, at most Limit.
func testListProofs(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	if got, err := s.ListProofs(ctx, &pipeline.ListProofsParams{}); err != nil || len(got) != 0 {
		t.Fatalf("list of an empty store: %+v, %v", got, err)
	}
	const p = "workers-ai"
	// a: its latest written after a proof dated later.
	record(t, s, proof(p, pipeline.OpImage, "flux-1", pipeline.ProofIdempotent, t0.Add(3*time.Hour)))
	a := record(t, s, proof(p, pipeline.OpImage, "flux-1", pipeline.ProofNotIdempotent, t0.Add(4*time.Minute)))
	// b: dated latest of all, but recorded before c, d and e.
	record(t, s, proof(p, pipeline.OpSpeech, "melo", pipeline.ProofIdempotent, t0))
	b := record(t, s, proof(p, pipeline.OpSpeech, "melo", pipeline.ProofNotIdempotent, t0.Add(5*time.Hour)))
	c := record(t, s, proof("replicate", pipeline.OpImage, "flux-1", pipeline.ProofIdempotent, t0.Add(3*time.Hour)))
	// d: the same provider, operation and model as a, at another endpoint.
	dp := proof(p, pipeline.OpImage, "flux-1", pipeline.ProofIdempotent, t0.Add(3*time.Hour))
	dp.Endpoint = "in-process"
	d := record(t, s, dp)
	// e: dated earliest, recorded last.
	e := record(t, s, proof(p, pipeline.OpVideoSubmit, "wan", pipeline.ProofIdempotent, t0.Add(-time.Hour)))
	want := []pipeline.Proof{e, d, c, b, a}
	for _, tt := range []struct{ limit, n int }{{0, 5}, {5, 5}, {pipeline.MaxProofListLimit, 5}, {4, 4}, {1, 1}} {
		got, err := s.ListProofs(ctx, &pipeline.ListProofsParams{Limit: tt.limit})
		if err != nil {
			t.Fatalf("limit %d: %v", tt.limit, err)
		}
		if len(got) != tt.n {
			t.Fatalf("limit %d: %d proofs %+v, want %d", tt.limit, len(got), got, tt.n)
		}
		for i := range got {
			sameProof(t, fmt.Sprintf("limit %d, proof %d", tt.limit, i), got[i], want[i])
		}
	}
	for _, bad := range []*pipeline.ListProofsParams{nil, {Limit: -1}, {Limit: pipeline.MaxProofListLimit + 1}} {
		if got, err := s.ListProofs(ctx, bad); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("list with %+v: %d proofs, %v; want ErrInvalidInput", bad, len(got), err)
		}
	}
}

// Limit 0 is DefaultProofListLimit, not everything: with one key more than
// that, the default leaves the oldest out and the ceiling shows it.
func testListProofsDefaultLimit(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	n := pipeline.DefaultProofListLimit + 1
	for i := range n {
		record(t, s, proof("p", pipeline.OpImage, fmt.Sprintf("m%03d", i), pipeline.ProofIdempotent, t0.Add(time.Duration(i)*time.Second)))
	}
	for _, tt := range []struct{ limit, want int }{{0, pipeline.DefaultProofListLimit}, {pipeline.MaxProofListLimit, n}} {
		got, err := s.ListProofs(ctx, &pipeline.ListProofsParams{Limit: tt.limit})
		if err != nil || len(got) != tt.want {
			t.Fatalf("limit %d: %d proofs, %v; want %d", tt.limit, len(got), err, tt.want)
		}
		if got[0].Model != fmt.Sprintf("m%03d", n-1) || got[len(got)-1].Model != fmt.Sprintf("m%03d", n-tt.want) {
			t.Fatalf("limit %d: from %s to %s, want the newest %d", tt.limit, got[0].Model, got[len(got)-1].Model, tt.want)
		}
	}
}

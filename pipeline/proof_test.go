package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func TestEffectiveContract(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const age = time.Hour
	ok := pipeline.Proof{Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(-age + time.Nanosecond)}
	for _, tc := range []struct {
		name     string
		declared pipeline.Contract
		proof    pipeline.Proof
		found    bool
		want     pipeline.Contract
		why      string
	}{
		{"sync stays sync", pipeline.ContractSync, pipeline.Proof{}, false, pipeline.ContractSync, "declared"},
		{"async needs no proof", pipeline.ContractAsyncPollable, pipeline.Proof{}, false, pipeline.ContractAsyncPollable, "declared"},
		{"fail_closed is not raised by a proof", pipeline.ContractFailClosed, ok, true, pipeline.ContractFailClosed, "declared"},
		{"fresh proof", pipeline.ContractIdempotentVerified, ok, true, pipeline.ContractIdempotentVerified, "proven"},
		{"no proof", pipeline.ContractIdempotentVerified, pipeline.Proof{}, false, pipeline.ProofFallback, "no proof"},
		{"a found zero proof is no proof", pipeline.ContractIdempotentVerified, pipeline.Proof{}, true, pipeline.ProofFallback, "says"},
		{"exactly max age", pipeline.ContractIdempotentVerified,
			pipeline.Proof{Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(-age)}, true, pipeline.ProofFallback, "older"},
		{"dated now", pipeline.ContractIdempotentVerified,
			pipeline.Proof{Verdict: pipeline.ProofIdempotent, ProvedAt: now}, true, pipeline.ContractIdempotentVerified, "proven"},
		{"from the future", pipeline.ContractIdempotentVerified,
			pipeline.Proof{Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(time.Second)}, true, pipeline.ProofFallback, "future"},
		{"failed proof", pipeline.ContractIdempotentVerified,
			pipeline.Proof{Verdict: pipeline.ProofNotIdempotent, ProvedAt: now}, true, pipeline.ProofFallback, "not_idempotent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, why := pipeline.EffectiveContract(tc.declared, tc.proof, tc.found, now, age)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("EffectiveContract = %s (%q); want %s (%q)", got, why, tc.want, tc.why)
			}
		})
	}
	if pipeline.ProofFallback != pipeline.ContractSync {
		t.Fatalf("an unproven key falls back to %s; sync is the contract that never retries an ambiguous call", pipeline.ProofFallback)
	}
}

func TestProofCheck(t *testing.T) {
	t.Parallel()
	good := pipeline.Proof{Provider: "http", Op: pipeline.OpImage, Model: "m", Endpoint: "https://p.example/v1", Verdict: pipeline.ProofIdempotent, Calls: 2,
		Detail: "same bytes", ProvedAt: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*pipeline.Proof){
		"no provider":   func(p *pipeline.Proof) { p.Provider = "" },
		"no op":         func(p *pipeline.Proof) { p.Op = "" },
		"no model":      func(p *pipeline.Proof) { p.Model = "" },
		"no endpoint":   func(p *pipeline.Proof) { p.Endpoint = "" },
		"long endpoint": func(p *pipeline.Proof) { p.Endpoint = strings.Repeat("e", pipeline.MaxProofEndpoint+1) },
		"bad verdict":   func(p *pipeline.Proof) { p.Verdict = "maybe" },
		"no verdict":    func(p *pipeline.Proof) { p.Verdict = "" },
		"negative":      func(p *pipeline.Proof) { p.Calls = -1 },
		"long detail":   func(p *pipeline.Proof) { p.Detail = strings.Repeat("x", pipeline.MaxProofDetail+1) },
		"undated proof": func(p *pipeline.Proof) { p.ProvedAt = time.Time{} },
	} {
		p := good
		mut(&p)
		if err := p.Check(); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: Check() = %v; want ErrInvalidInput", name, err)
		}
	}
	p := good
	p.Detail, p.Verdict = strings.Repeat("x", pipeline.MaxProofDetail), pipeline.ProofNotIdempotent
	if err := p.Check(); err != nil {
		t.Errorf("a detail of exactly MaxProofDetail bytes: %v", err)
	}
}

// endpointNamed names its endpoint per operation (as provider.Routed does).
type endpointNamed struct {
	pipeline.Providers
	byOp map[string]string
}

func (e endpointNamed) Endpoint(op string) string { return e.byOp[op] }

func TestProviderEndpoint(t *testing.T) {
	t.Parallel()
	p := endpointNamed{byOp: map[string]string{pipeline.OpImage: "https://img.example/v1"}}
	for op, want := range map[string]string{pipeline.OpImage: "https://img.example/v1", pipeline.OpSpeech: pipeline.UnnamedEndpoint} {
		if got := pipeline.ProviderEndpoint(p, op); got != want {
			t.Errorf("ProviderEndpoint(%s) = %q, want %q", op, got, want)
		}
	}
	if got := pipeline.ProviderEndpoint(struct{ pipeline.Providers }{}, pipeline.OpImage); got != pipeline.UnnamedEndpoint {
		t.Errorf("a provider naming no endpoint: %q", got)
	}
}

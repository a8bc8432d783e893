package pipeline

import (
	"context"
	"fmt"
	"time"
)

// A declared idempotent_verified contract is a claim about a provider that
// only the provider can confirm: the seeds' first lesson was that an
// idempotency key must be proven by sending the same request twice, not
// read in the provider's documentation. `edgepipe provider probe` sends
// that pair and records a Proof; an operation runs under
// idempotent_verified only while the latest proof of its (provider,
// operation, model) says so and is younger than the configured age.
// Without one it runs under ProofFallback, its safe contract.

// ProofVerdict is what a probe found.
type ProofVerdict string

const (
	// ProofIdempotent: the same request sent twice under one key gave the
	// same answer and, where the provider reports usage, one charge.
	ProofIdempotent ProofVerdict = "idempotent"
	// ProofNotIdempotent: the answers differed or the provider billed
	// both; the key is not honoured.
	ProofNotIdempotent ProofVerdict = "not_idempotent"
)

// ProbeUnitPrefix starts the unit id of every request a probe sends: the
// provider bills them to no job, so edgepipe check leaves them out of its
// comparison with the provider's ledger (the proof records what they cost).
const ProbeUnitPrefix = "probe/"

// DefaultProofMaxAge is how long a proof is trusted (30 days): providers
// change their servers, and a proof that old is re-run.
const DefaultProofMaxAge = 30 * 24 * time.Hour

// ProofFallback is the contract an idempotent_verified operation runs under
// without a fresh proof: an ambiguous failure stops for a human instead of
// being retried on the strength of a key nobody checked.
const ProofFallback = ContractSync

// MaxProofDetail bounds a proof's detail text.
const MaxProofDetail = 1000

// MaxProofEndpoint bounds a proof's endpoint.
const MaxProofEndpoint = 500

// Proof is one dated probe of a (provider, operation, model) at one
// endpoint.
type Proof struct {
	ID       int64
	Provider string
	Op       string
	Model    string
	// Endpoint is where the probe sent its requests (ProviderEndpoint):
	// a proof of one server says nothing about another behind the same
	// provider name (a staging URL, a gateway).
	Endpoint string
	Verdict  ProofVerdict
	// Calls is how many billable requests the probe sent.
	Calls int
	// Detail says what was compared (hashes, ids, usage).
	Detail   string
	ProvedAt time.Time
}

// Check validates a proof before it is recorded.
func (p Proof) Check() error {
	switch {
	case p.Provider == "" || p.Op == "" || p.Model == "" || p.Endpoint == "":
		return fmt.Errorf("%w: a proof names its provider, operation, model and endpoint", ErrInvalidInput)
	case len(p.Endpoint) > MaxProofEndpoint:
		return fmt.Errorf("%w: proof endpoint is %d bytes, at most %d", ErrInvalidInput, len(p.Endpoint), MaxProofEndpoint)
	case p.Verdict != ProofIdempotent && p.Verdict != ProofNotIdempotent:
		return fmt.Errorf("%w: proof verdict %q", ErrInvalidInput, p.Verdict)
	case p.Calls < 0:
		return fmt.Errorf("%w: proof calls %d", ErrInvalidInput, p.Calls)
	case len(p.Detail) > MaxProofDetail:
		return fmt.Errorf("%w: proof detail is %d bytes, at most %d", ErrInvalidInput, len(p.Detail), MaxProofDetail)
	case p.ProvedAt.IsZero():
		return fmt.Errorf("%w: a proof has a date", ErrInvalidInput)
	}
	return nil
}

// Fresh reports whether p proves idempotency at now under maxAge. A proof
// dated in the future (a skewed clock) is not trusted either.
func (p Proof) Fresh(now time.Time, maxAge time.Duration) bool {
	age := now.Sub(p.ProvedAt)
	return p.Verdict == ProofIdempotent && age >= 0 && age < maxAge
}

// EffectiveContract is the contract an operation runs under: declared,
// except that idempotent_verified needs latest (found) to be a fresh proof;
// otherwise ProofFallback. why says which, for logs and the ops page.
func EffectiveContract(declared Contract, latest Proof, found bool, now time.Time, maxAge time.Duration) (c Contract, why string) {
	if declared != ContractIdempotentVerified {
		return declared, "declared"
	}
	switch {
	case !found:
		return ProofFallback, "no proof: run `edgepipe provider probe`"
	case latest.Verdict != ProofIdempotent:
		return ProofFallback, fmt.Sprintf("latest proof (%s) says %s", latest.ProvedAt.UTC().Format(time.RFC3339), latest.Verdict)
	case !latest.Fresh(now, maxAge):
		return ProofFallback, fmt.Sprintf("proof of %s is older than %s or from the future", latest.ProvedAt.UTC().Format(time.RFC3339), maxAge)
	}
	return declared, "proven " + latest.ProvedAt.UTC().Format(time.RFC3339)
}

// RecordProofParams records a probe's proof.
type RecordProofParams struct {
	Proof Proof
}

// LatestProofParams names the (provider, operation, model, endpoint)
// whose latest proof is wanted. The latest is the one recorded last (the
// greatest id): the order the job store saw the probes in, not the dates
// their hosts' clocks gave them, so a newer verdict always wins and a proof
// dated in the future by a skewed clock is replaced by the next probe.
type LatestProofParams struct {
	Provider, Op, Model, Endpoint string
}

// ListProofsParams lists the latest proof of every (provider, operation,
// model, endpoint), the last recorded first, at most Limit of them (DefaultProofListLimit
// when 0).
type ListProofsParams struct {
	Limit int
}

// DefaultProofListLimit is ListProofsParams.Limit's default.
const DefaultProofListLimit = 100

// MaxProofListLimit bounds ListProofsParams.Limit, the ceiling the other
// listings (jobs, dead letters) keep. Unlike those, a limit outside
// [0, MaxProofListLimit] is refused rather than clamped: the proofs are
// read by an operator's command, which should say its flag is wrong
// instead of quietly answering something else.
const MaxProofListLimit = 500

// Validate reports parameters no store can act on: the proof's Check, and
// no parameters at all.
func (p *RecordProofParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: record proof needs parameters", ErrInvalidInput)
	}
	return p.Proof.Check()
}

// Validate reports a (provider, operation, model) with a part missing:
// no proof can name it, so it is a caller's mistake, not ErrNotFound.
func (p *LatestProofParams) Validate() error {
	if p == nil || p.Provider == "" || p.Op == "" || p.Model == "" || p.Endpoint == "" {
		return fmt.Errorf("%w: the latest proof is of a provider, operation, model and endpoint", ErrInvalidInput)
	}
	return nil
}

// EffectiveLimit is how many proofs ListProofs returns at most: Limit, or
// DefaultProofListLimit when it is 0. No parameters, a negative limit or
// one above MaxProofListLimit are ErrInvalidInput. Both drivers call it,
// so the rule is written once.
func (p *ListProofsParams) EffectiveLimit() (int, error) {
	switch {
	case p == nil:
		return 0, fmt.Errorf("%w: list proofs needs parameters", ErrInvalidInput)
	case p.Limit < 0 || p.Limit > MaxProofListLimit:
		return 0, fmt.Errorf("%w: proof list limit %d, want 0 (default %d) to %d", ErrInvalidInput, p.Limit, DefaultProofListLimit, MaxProofListLimit)
	case p.Limit == 0:
		return DefaultProofListLimit, nil
	}
	return p.Limit, nil
}

// ProofReader is what the engine needs of the proofs: the latest one of
// an operation.
type ProofReader interface {
	LatestProof(ctx context.Context, p *LatestProofParams) (Proof, error)
}

// TrustDeclared is a ProofReader under which every declared contract
// holds: each lookup answers a proof dated now. It is for embedders and
// tests whose providers are proven some other way; edgepipe's processes
// read the job store's proofs.
type TrustDeclared struct {
	Clock Clock
}

// LatestProof implements ProofReader.
func (t TrustDeclared) LatestProof(_ context.Context, p *LatestProofParams) (Proof, error) {
	var c Clock = SystemClock{}
	if t.Clock != nil {
		c = t.Clock
	}
	return Proof{Provider: p.Provider, Op: p.Op, Model: p.Model, Endpoint: p.Endpoint, Verdict: ProofIdempotent,
		Detail: "trusted as declared (pipeline.TrustDeclared)", ProvedAt: c.Now()}, nil
}

// ProofStore keeps the probes' proofs (both job-store drivers implement
// it). LatestProof answers ErrNotFound when there is none.
type ProofStore interface {
	RecordProof(ctx context.Context, p *RecordProofParams) (int64, error)
	LatestProof(ctx context.Context, p *LatestProofParams) (Proof, error)
	ListProofs(ctx context.Context, p *ListProofsParams) ([]Proof, error)
}

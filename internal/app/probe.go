package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

// ProbeTarget is the provider a probe would call, built with this
// configuration.
type ProbeTarget struct {
	// Kind is the EDGEPIPE_PROVIDER value; Provider the name in proofs,
	// intent rows and object keys.
	Kind, Provider, Op, Model string
	// Endpoint is where the requests go (pipeline.ProviderEndpoint): the
	// proof is of that server only.
	Endpoint string
	Contract pipeline.Contract
	p        pipeline.Providers
}

// ProbeTarget builds the provider of kind ("" = the kind this
// configuration routes op to) as the workers would, and checks that op can
// be probed on it. It calls nothing billable (the fake kind without
// EDGEPIPE_PROVIDER_URL starts the in-process fake). An unknown operation
// or kind, or an operation whose declared contract is not
// idempotent_verified (provider.ErrNothingToProve), wraps
// pipeline.ErrInvalidInput.
func (a *App) ProbeTarget(ctx context.Context, op, kind string) (ProbeTarget, error) {
	if !slices.Contains(provider.RoutedOps, op) {
		return ProbeTarget{}, fmt.Errorf("%w: unknown operation %q (one of %s)", pipeline.ErrInvalidInput, op, strings.Join(provider.RoutedOps, ", "))
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	if kind == "" {
		routing, err := a.Cfg.ProviderRouting.Routing()
		if err != nil {
			return ProbeTarget{}, err
		}
		kind = routing[op]
	} else if !slices.Contains(provider.Kinds, kind) {
		return ProbeTarget{}, fmt.Errorf("%w: unknown provider kind %q (one of %s)", pipeline.ErrInvalidInput, kind, strings.Join(provider.Kinds, ", "))
	}
	p, err := a.buildProvider(ctx, kind)
	if err != nil {
		return ProbeTarget{}, err
	}
	t := ProbeTarget{Kind: kind, Provider: pipeline.ProviderName(p, op), Op: op, Model: p.Model(op),
		Endpoint: pipeline.ProviderEndpoint(p, op), Contract: p.Contract(op), p: p}
	if err := provider.Probeable(p, op); err != nil {
		return t, err
	}
	return t, nil
}

// Probe runs t's probe (provider.ProbeCalls billable requests) and records
// the proof in store, returning it with its id. A probe whose calls
// failed records nothing. When recording fails the proof is returned
// with the error: the calls were made and their verdict is worth showing.
func (a *App) Probe(ctx context.Context, t ProbeTarget, store pipeline.ProofStore, cfg provider.ProbeConfig) (pipeline.Proof, error) {
	if t.p == nil {
		return pipeline.Proof{}, fmt.Errorf("%w: a probe target comes from App.ProbeTarget", pipeline.ErrInvalidInput)
	}
	proof, err := provider.Probe(ctx, t.p, t.Op, cfg)
	if err != nil {
		return pipeline.Proof{}, err
	}
	a.Log.Info("provider probed", "provider", proof.Provider, "op", proof.Op, "model", proof.Model, "endpoint", proof.Endpoint,
		"verdict", proof.Verdict, "detail", proof.Detail)
	id, err := store.RecordProof(ctx, &pipeline.RecordProofParams{Proof: proof})
	if err != nil {
		return proof, fmt.Errorf("recording the proof of %s on %s: %w", proof.Op, proof.Provider, err)
	}
	proof.ID = id
	return proof, nil
}

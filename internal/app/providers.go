package app

import (
	"cmp"
	"context"
	"errors"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
	"edgepipe/provider/replicate"
	"edgepipe/provider/workersai"
)

// providers builds the configured providers (EDGEPIPE_PROVIDER and its
// per-operation overrides). The fake kind is the HTTP client of package
// provider, pointed at EDGEPIPE_PROVIDER_URL or, when that is unset, at
// in-process fake providers started on loopback. When every operation uses
// one provider it is returned as is (object keys stay those of that
// provider); otherwise a provider.Routed sends each operation to its own.
func (a *App) providers(ctx context.Context) (pipeline.Providers, error) {
	routing, err := a.Cfg.ProviderRouting.Routing()
	if err != nil {
		return nil, err
	}
	built := map[string]pipeline.Providers{}
	for _, kind := range routing.Kinds() {
		if built[kind], err = a.buildProvider(ctx, kind); err != nil {
			return nil, err
		}
	}
	img, sp, vid := built[routing[pipeline.OpImage]], built[routing[pipeline.OpSpeech]], built[routing[pipeline.OpVideoSubmit]]
	for _, op := range provider.RoutedOps {
		p := built[routing[op]]
		if c := p.Contract(op); c == pipeline.ContractFailClosed {
			a.Log.Warn("this operation's provider has no contract for it: scenes that need it stop in needs_review",
				"op", op, "provider", p.Name(), "hint", "route it elsewhere with EDGEPIPE_PROVIDER_"+opEnvSuffix(op))
		}
		a.logContract(ctx, p, op)
	}
	if len(built) == 1 {
		return img, nil
	}
	return provider.NewRouted(img, sp, vid)
}

// logContract says which contract op runs under at start-up. An operation
// declared idempotent_verified without a fresh proof is warned about: its
// ambiguous failures will stop for a human until someone probes it. The
// engine looks the proof up again before every call, so this is only news.
func (a *App) logContract(ctx context.Context, p pipeline.Providers, op string) {
	declared := p.Contract(op)
	effective, why := declared, "declared"
	endpoint := pipeline.ProviderEndpoint(p, op)
	if declared == pipeline.ContractIdempotentVerified && a.Store != nil {
		latest, err := a.Store.LatestProof(ctx, &pipeline.LatestProofParams{Provider: pipeline.ProviderName(p, op), Op: op,
			Model: p.Model(op), Endpoint: endpoint})
		switch {
		case err != nil && !errors.Is(err, pipeline.ErrNotFound):
			effective, why = pipeline.ProofFallback, "proofs unreadable at start-up ("+err.Error()+"); the engine reads them again before every call"
		default:
			effective, why = pipeline.EffectiveContract(declared, latest, err == nil, time.Now(), cmp.Or(a.Cfg.ProofMaxAge, pipeline.DefaultProofMaxAge))
		}
	}
	if effective != declared {
		a.Log.Warn("this operation's idempotency key is not proven: it runs as "+string(effective)+" (an ambiguous failure stops for a human)",
			"op", op, "provider", pipeline.ProviderName(p, op), "model", p.Model(op), "endpoint", endpoint, "why", why,
			"hint", "edgepipe provider probe "+op+" --yes")
	}
	a.Log.Info("provider", "op", op, "provider", p.Name(), "model", p.Model(op), "endpoint", endpoint, "contract", effective, "declared", declared, "why", why)
}

func opEnvSuffix(op string) string {
	switch op {
	case pipeline.OpImage:
		return "IMAGE"
	case pipeline.OpSpeech:
		return "SPEECH"
	}
	return "VIDEO"
}

// InProcessEndpoint is the endpoint (pipeline.ProviderEndpoint) of the
// fake providers a process starts itself: their port changes at every
// start, and every process's own fake is the same code.
const InProcessEndpoint = "in-process"

func (a *App) buildProvider(ctx context.Context, kind string) (pipeline.Providers, error) {
	return a.buildProviderStarting(ctx, kind, true)
}

// routedOperations describes what each operation is routed to, for the
// operations page, without starting anything: with start false the fake
// kind without EDGEPIPE_PROVIDER_URL is a client of an in-process fake
// that is never started (nothing is called; only names, models, contracts
// and endpoints are read).
func (a *App) routedOperations(ctx context.Context) ([]api.RoutedOperation, error) {
	routing, err := a.Cfg.ProviderRouting.Routing()
	if err != nil {
		return nil, err
	}
	var out []api.RoutedOperation
	for _, op := range provider.RoutedOps {
		p, err := a.buildProviderStarting(ctx, routing[op], false)
		if err != nil {
			return nil, err
		}
		out = append(out, api.RoutedOperation{Op: op, Kind: routing[op], Provider: pipeline.ProviderName(p, op), Model: p.Model(op),
			Endpoint: pipeline.ProviderEndpoint(p, op), Declared: p.Contract(op)})
		if c, ok := p.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	return out, nil
}

func (a *App) buildProviderStarting(ctx context.Context, kind string, start bool) (pipeline.Providers, error) {
	pc, err := a.Cfg.ProviderSettings()
	if err != nil {
		return nil, err
	}
	switch kind {
	case provider.KindWorkersAI:
		c := a.Cfg.WorkersAI
		c.Timeout, c.Logger = pc.Timeout, a.Log
		return workersai.New(c)
	case provider.KindReplicate:
		c := a.Cfg.Replicate
		c.Timeout, c.Logger = pc.Timeout, a.Log
		return replicate.New(c)
	}
	if a.Cfg.ProviderURL == "" && !start {
		pc = provider.Config{BaseURL: "http://" + InProcessEndpoint + ".invalid", Timeout: pc.Timeout, Endpoint: InProcessEndpoint}
	} else if a.Cfg.ProviderURL == "" {
		fc, err := a.Cfg.FakeSettings()
		if err != nil {
			return nil, err
		}
		fc.Logger = a.Log
		srv, err := fake.New(fc)
		if err != nil {
			return nil, err
		}
		base, err := srv.Start(ctx, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		a.fake = srv
		a.Log.Info("fake providers started in-process", "url", base)
		pc = provider.Config{BaseURL: base, Timeout: pc.Timeout, Endpoint: InProcessEndpoint}
	}
	pc.Logger = a.Log
	return provider.New(pc)
}

// ContractLine is one row of `edgepipe provider contracts`.
type ContractLine struct {
	// Kind is the EDGEPIPE_PROVIDER value; Provider is the name in intent
	// rows and object keys (the fake kind's client is named "http").
	Kind     string
	Provider string
	Op       string
	Model    string
	Contract pipeline.Contract
	// Routed is true when this configuration sends Op to Provider.
	Routed bool
	Why    string
}

// Contracts lists the declared contract of every (provider, operation,
// model) with the models this configuration would use, marking the rows the
// routing selects. It needs no credentials and starts nothing.
func Contracts(getenv func(string) string) ([]ContractLine, error) {
	routing, err := providerRoutingSettings(getenv).Routing()
	if err != nil {
		return nil, err
	}
	type described struct {
		kind, name string
		rows       []provider.ContractRow
		models     map[string]string
	}
	wr, wm := workersai.Describe(workersAISettings(getenv))
	rr, rm := replicate.Describe(replicateSettings(getenv))
	all := []described{
		{provider.KindFake, provider.DefaultName, provider.ContractTable(), provider.DefaultModels},
		{provider.KindWorkersAI, workersai.Name, wr, wm},
		{provider.KindReplicate, replicate.Name, rr, rm},
	}
	var out []ContractLine
	for _, d := range all {
		for _, r := range d.rows {
			model := d.models[r.Op]
			if model == "" {
				model = "-"
			}
			out = append(out, ContractLine{Kind: d.kind, Provider: d.name, Op: r.Op, Model: model, Contract: r.Contract,
				Routed: r.Op != provider.OpOther && routing[r.Op] == d.kind, Why: r.Why})
		}
	}
	return out, nil
}

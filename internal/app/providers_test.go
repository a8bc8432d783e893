package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/replicate"
	"edgepipe/provider/workersai"
)

func appFor(t *testing.T, env map[string]string) *App {
	t.Helper()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := FromEnv(func(k string) string { return env[k] }, environ)
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	a := &App{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		if a.fake != nil {
			_ = a.fake.Close()
		}
	})
	return a
}

func TestProvidersFromRouting(t *testing.T) {
	t.Parallel()
	creds := map[string]string{
		"EDGEPIPE_CF_ACCOUNT_ID": "acc1", "EDGEPIPE_CF_API_TOKEN": "cf-secret",
		"EDGEPIPE_REPLICATE_API_TOKEN": "r8_secret", "EDGEPIPE_PROVIDER_URL": "http://127.0.0.1:1",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range creds {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	ctx := context.Background()

	p, err := appFor(t, with("EDGEPIPE_PROVIDER", "workers-ai")).providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*workersai.Adapter); !ok {
		t.Errorf("one provider for every op: got %T, want the adapter itself", p)
	}

	p, err = appFor(t, with("EDGEPIPE_PROVIDER", "workers-ai", "EDGEPIPE_PROVIDER_VIDEO", "replicate",
		"EDGEPIPE_REPLICATE_MODEL_VIDEO", "wan-video/wan-2.1-t2v-480p")).providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := p.(*provider.Routed)
	if !ok {
		t.Fatalf("mixed routing: got %T", p)
	}
	if _, ok := r.For(pipeline.OpVideoSubmit).(*replicate.Adapter); !ok {
		t.Errorf("video goes to %T", r.For(pipeline.OpVideoSubmit))
	}
	if r.Name() != "image=workers-ai,speech=workers-ai,video=replicate" || r.Model(pipeline.OpVideoSubmit) != "wan-video/wan-2.1-t2v-480p" ||
		r.Contract(pipeline.OpVideoSubmit) != pipeline.ContractAsyncPollable || r.Contract(pipeline.OpImage) != pipeline.ContractSync {
		t.Errorf("routed: %s %s %s", r.Name(), r.Model(pipeline.OpVideoSubmit), r.Contract(pipeline.OpVideoSubmit))
	}

	p, err = appFor(t, with("EDGEPIPE_PROVIDER_VIDEO", "replicate")).providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "image=http,speech=http,video=replicate" || p.Contract(pipeline.OpImage) != pipeline.ContractIdempotentVerified {
		t.Errorf("fake + replicate: %s %s", p.Name(), p.Contract(pipeline.OpImage))
	}

	for _, env := range []map[string]string{
		{"EDGEPIPE_PROVIDER": "workers-ai"},                                                     // no credentials
		{"EDGEPIPE_PROVIDER_VIDEO": "replicate", "EDGEPIPE_PROVIDER_URL": "http://127.0.0.1:1"}, // no token
		with("EDGEPIPE_PROVIDER", "nope"),
		with("EDGEPIPE_PROVIDER_TIMEOUT", "-1s", "EDGEPIPE_PROVIDER", "replicate"),
	} {
		_, err := appFor(t, env).providers(ctx)
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%v: err = %v, want ErrInvalidInput", env, err)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%v: error carries a secret: %v", env, err)
		}
	}
}

func TestContracts(t *testing.T) {
	t.Parallel()
	env := map[string]string{"EDGEPIPE_PROVIDER": "workers-ai", "EDGEPIPE_PROVIDER_VIDEO": "replicate", "EDGEPIPE_CF_MODEL_SPEECH": "@cf/x/tts"}
	lines, err := Contracts(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	routed := map[string]string{}
	seen := map[string]ContractLine{}
	for _, l := range lines {
		seen[l.Kind+" "+l.Op] = l
		if l.Routed {
			routed[l.Op] += l.Kind
		}
	}
	if routed[pipeline.OpImage] != "workers-ai" || routed[pipeline.OpSpeech] != "workers-ai" || routed[pipeline.OpVideoSubmit] != "replicate" || len(routed) != 3 {
		t.Errorf("routed rows: %v", routed)
	}
	if l := seen["workers-ai speech"]; l.Model != "@cf/x/tts" || l.Contract != pipeline.ContractSync {
		t.Errorf("workers-ai speech row %+v", l)
	}
	if l := seen["fake image"]; l.Provider != "http" || l.Contract != pipeline.ContractIdempotentVerified {
		t.Errorf("fake image row %+v", l)
	}
	if l := seen["replicate speech"]; l.Contract != pipeline.ContractFailClosed || l.Model != "-" {
		t.Errorf("replicate speech without a model %+v", l)
	}
	if len(lines) != 12 {
		t.Errorf("%d lines, want 4 per provider", len(lines))
	}
}

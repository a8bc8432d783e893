package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/webhook"
)

// testConfig reads a configuration from env (plus the data directory) the
// way `edgepipe serve` does.
// createQueuedJob submits a job with id straight to the store, on queue.
func createQueuedJob(t *testing.T, st JobStore, id, queue string) {
	t.Helper()
	nj := pipeline.NewJob{ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "k-" + id,
		RequestFingerprint: "fp", Input: []byte(`{}`), Version: "v1", Queue: queue}
	if _, _, err := st.CreateJob(context.Background(), nj); err != nil {
		t.Fatal(err)
	}
}

func testConfig(t *testing.T, dir string, env map[string]string) Config {
	t.Helper()
	all := map[string]string{"EDGEPIPE_DATA_DIR": dir, "EDGEPIPE_ADDR": "127.0.0.1:0"}
	for k, v := range env {
		all[k] = v
	}
	var environ []string
	for k, v := range all {
		environ = append(environ, k+"="+v)
	}
	cfg, err := FromEnv(func(k string) string { return all[k] }, environ)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// openBuilt opens the deployment cfg describes and builds its parts as
// `edgepipe serve` does (withAPI, workers), closing both when the test ends.
func openBuilt(t *testing.T, cfg Config, withAPI bool, workers int) (*App, *Parts) {
	t.Helper()
	ctx := context.Background()
	a, err := Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	p, err := a.Build(ctx, withAPI, false, workers)
	if err != nil {
		t.Fatal(err)
	}
	if p.Listener != nil {
		t.Cleanup(func() { p.Listener.Close() })
	}
	return a, p
}

// receiver records the signed webhooks it gets.
type receiver struct {
	mu   sync.Mutex
	got  []delivery
	srv  *httptest.Server
	seen chan struct{}
}

type delivery struct {
	sig  string
	body []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{seen: make(chan struct{}, 16)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{req.Header.Get(webhook.SignatureHeader), b})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		r.seen <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// start opens the deployment in dir, builds its webhook dispatcher like
// `edgepipe serve`, has one job end with a webhook to rcv and returns that
// webhook and everything the process logged.
func start(t *testing.T, dir string, env map[string]string, rcv *receiver, n int) (delivery, string) {
	t.Helper()
	ctx := context.Background()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := Open(ctx, testConfig(t, dir, env), log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	parts, err := a.Build(ctx, false, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := "v1-hook-" + string(rune('a'+n))
	if _, _, err := a.Store.CreateJob(ctx, pipeline.NewJob{ID: id, Tenant: "acme", Operation: pipeline.OperationRenderVideo,
		IdempotencyKey: id, RequestFingerprint: id, Input: []byte(`{}`), Version: "v1", Queue: "render-v1",
		WebhookURL: rcv.srv.URL + "/hook"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.RequestCancel(ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
	if _, err := parts.Dispatcher.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rcv.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("no webhook delivered; logs:\n%s", logs.String())
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return rcv.got[len(rcv.got)-1], logs.String()
}

// Without EDGEPIPE_WEBHOOK_SECRET the generated secret is kept in the data
// directory (0600), so webhooks signed after a restart verify with the
// secret the receiver already has; it never appears in the logs.
func TestWebhookSecretSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rcv := newReceiver(t)
	env := map[string]string{"EDGEPIPE_ALLOW_PRIVATE_WEBHOOKS": "true"}

	first, logs1 := start(t, dir, env, rcv, 0)
	path := filepath.Join(dir, WebhookSecretFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("secret not persisted: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(raw))
	if len(secret) < 32 {
		t.Fatalf("secret %d characters long", len(secret))
	}
	if err := webhook.Verify([]byte(secret), first.sig, first.body, time.Now(), 0); err != nil {
		t.Fatalf("first start's webhook does not verify with the persisted secret: %v", err)
	}

	second, logs2 := start(t, dir, env, rcv, 1)
	if err := webhook.Verify([]byte(secret), second.sig, second.body, time.Now(), 0); err != nil {
		t.Fatalf("after a restart the webhook does not verify with the secret the receiver has: %v", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(raw) {
		t.Fatal("the restart rewrote the secret file")
	}
	for i, logs := range []string{logs1, logs2} {
		if strings.Contains(logs, secret) {
			t.Fatalf("start %d logged the webhook secret:\n%s", i+1, logs)
		}
		// The capture did see the secret being handled, so its absence
		// means something.
		if !strings.Contains(logs, path) {
			t.Fatalf("start %d does not say where the secret is kept:\n%s", i+1, logs)
		}
	}
}

// A configured secret is used as is and nothing is written.
func TestWebhookSecretFromEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rcv := newReceiver(t)
	const secret = "configured-secret-0123456789abcdef"
	d, logs := start(t, dir, map[string]string{"EDGEPIPE_ALLOW_PRIVATE_WEBHOOKS": "true", "EDGEPIPE_WEBHOOK_SECRET": secret}, rcv, 0)
	if err := webhook.Verify([]byte(secret), d.sig, d.body, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, WebhookSecretFile)); !os.IsNotExist(err) {
		t.Fatalf("a secret file was written although one is configured: %v", err)
	}
	if strings.Contains(logs, secret) {
		t.Fatal("the configured secret was logged")
	}
}

// A secret file others can read is restricted to its owner; a truncated one
// is an error, not a silently new secret.
func TestWebhookSecretFileChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, WebhookSecretFile)
	if err := os.WriteFile(path, []byte("edp_abcdefghijklmnopqrstuvwxyz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := &App{Cfg: testConfig(t, dir, nil), Log: slog.New(slog.DiscardHandler)}
	s, err := a.webhookSecret()
	if err != nil || s != "edp_abcdefghijklmnopqrstuvwxyz" {
		t.Fatalf("%q %v", s, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.webhookSecret(); err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("truncated secret: %v", err)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openLogging opens an App on a new data directory with env, logging into
// the returned buffer, and a fake-kind provider client (nothing listens at
// its address: the tests only read its names and contracts).
func openLogging(t *testing.T, env map[string]string) (*App, *bytes.Buffer, *provider.HTTP) {
	t.Helper()
	logs := &bytes.Buffer{}
	a, err := Open(t.Context(), testConfig(t, t.TempDir(), env), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	prov, err := provider.New(provider.Config{BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return a, logs, prov
}

// The engine's limiter is the job store with the configured limits; a slot
// outlives twice the provider timeout; a limit naming a provider that does
// not serve its operation here is logged. No limits: no limiter at all.
func TestRateLimitsWiring(t *testing.T) {
	t.Parallel()
	a, logs, prov := openLogging(t, map[string]string{EnvRateLimits: "http:image=60/min:4,workers-ai:speech=5/s", "EDGEPIPE_PROVIDER_TIMEOUT": "10m"})
	r := a.rateLimits(prov)
	if r.Store != a.Store || len(r.Limits) != 2 || r.SlotTTL != 20*time.Minute {
		t.Fatalf("limiter %+v", r)
	}
	if !strings.Contains(logs.String(), "provider=workers-ai op=speech served_by=http") || strings.Contains(logs.String(), "op=image") {
		t.Fatalf("log %q: want a warning for workers-ai:speech only", logs.String())
	}
	none := &App{Cfg: testConfig(t, t.TempDir(), nil), Log: discard(), Store: a.Store}
	if r := none.rateLimits(prov); r.Store != nil || r.Limits != nil {
		t.Fatalf("no limits configured: %+v", r)
	}
}

// failingStart is a service that cannot start.
type failingStart struct{}

func (failingStart) Start(context.Context) error { return errors.New("cannot start") }
func (failingStart) Stop(context.Context) error  { return nil }

// A service that fails to start stops Run before the API serves: the
// error comes back and the listener is closed, so nothing is left
// answering on the address.
func TestRunStartFailureLeavesNothingServing(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 1)
	p := &Parts{Hints: failingStart{}, Listener: l, HTTP: &http.Server{
		Handler:           http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served <- struct{}{} }),
		ReadHeaderTimeout: time.Second,
	}}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background(), slog.New(slog.DiscardHandler), time.Second) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cannot start") {
			t.Fatalf("Run = %v, want the start error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept running after a service failed to start")
	}
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the API's address still accepts connections after a failed start")
	}
	select {
	case <-served:
		t.Fatal("a request was served")
	default:
	}
}

// Start-up says under which contract each operation runs: the fake image
// key is declared idempotent_verified but counts only with a fresh proof
// in the job store (EDGEPIPE_PROOF_MAX_AGE).
func TestLogContractNeedsAFreshProof(t *testing.T) {
	t.Parallel()
	a, logs, prov := openLogging(t, map[string]string{EnvProofMaxAge: "2h"})
	logged := func() string {
		logs.Reset()
		a.logContract(t.Context(), prov, pipeline.OpImage)
		return logs.String()
	}
	record := func(age time.Duration) {
		p := pipeline.Proof{Provider: prov.Name(), Op: pipeline.OpImage, Model: prov.Model(pipeline.OpImage), Endpoint: prov.Endpoint(pipeline.OpImage),
			Verdict: pipeline.ProofIdempotent, Calls: 2, ProvedAt: time.Now().Add(-age)}
		if _, err := a.Store.RecordProof(t.Context(), &pipeline.RecordProofParams{Proof: p}); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		name  string
		setup func()
		want  []string
	}{
		{"no proof", func() {}, []string{"level=WARN", "is not proven", "contract=sync", "declared=idempotent_verified", "provider probe image --yes"}},
		{"a proof older than EDGEPIPE_PROOF_MAX_AGE", func() { record(3 * time.Hour) }, []string{"level=WARN", "contract=sync", "older than 2h0m0s"}},
		{"a fresh proof", func() { record(time.Minute) }, []string{"contract=idempotent_verified", "proven"}},
	} {
		step.setup()
		got := logged()
		for _, w := range step.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: log %q lacks %q", step.name, got, w)
			}
		}
		if step.name == "a fresh proof" && strings.Contains(got, "WARN") {
			t.Errorf("%s: warned %q", step.name, got)
		}
	}
}

// The engine reads its proofs from the job store, trusted for
// EDGEPIPE_PROOF_MAX_AGE: without them every idempotency key would run
// unproven (or, with a forgotten age, be trusted for the default).
func TestEngineConfigReadsProofsFromTheJobStore(t *testing.T) {
	t.Parallel()
	a, _, prov := openLogging(t, map[string]string{EnvProofMaxAge: "36h", "EDGEPIPE_UNIT_CONCURRENCY": "3", "EDGEPIPE_CLIP_CONCURRENCY": "5"})
	ec := a.engineConfig(prov, nil, nil)
	if ec.Proofs != pipeline.ProofReader(a.Store) || ec.ProofMaxAge != 36*time.Hour || ec.Store != pipeline.Store(a.Store) ||
		ec.Providers != pipeline.Providers(prov) || ec.UnitConcurrency != 3 || ec.ClipConcurrency != 5 {
		t.Fatalf("engine config: proofs %T, proof age %s, store %T, providers %T, unit concurrency %d, clip concurrency %d",
			ec.Proofs, ec.ProofMaxAge, ec.Store, ec.Providers, ec.UnitConcurrency, ec.ClipConcurrency)
	}
}

// The operations page is told how each operation is routed without
// starting anything: the fake kind without EDGEPIPE_PROVIDER_URL is the
// in-process endpoint (the one its workers' proofs are recorded under).
func TestRoutedOperations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env      map[string]string
		endpoint string
	}{
		{nil, InProcessEndpoint},
		{map[string]string{"EDGEPIPE_PROVIDER_URL": "http://fake.example:9000/api"}, "http://fake.example:9000/api"},
	} {
		a, _, _ := openLogging(t, tc.env)
		ops, err := a.routedOperations(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(ops) != 3 || a.FakeProviders() != nil {
			t.Fatalf("%v: %+v (fake started: %v)", tc.env, ops, a.FakeProviders() != nil)
		}
		img := ops[0]
		if img.Op != pipeline.OpImage || img.Kind != "fake" || img.Provider != "http" || img.Endpoint != tc.endpoint ||
			img.Declared != pipeline.ContractIdempotentVerified || ops[1].Declared != pipeline.ContractSync {
			t.Errorf("%v: %+v", tc.env, ops)
		}
	}
}

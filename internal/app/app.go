package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/failpoint"
	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
	"edgepipe/render"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/s3"
	"edgepipe/webhook"
)

// App is an opened deployment: stores, router and (when started) the
// long-running parts.
type App struct {
	Cfg     Config
	Log     *slog.Logger
	Store   JobStore
	Objects pipeline.ObjectStore
	Router  *routing.Router
	Metrics *api.Metrics

	fake    *fake.Server
	tracing tracing
}

// Open opens the database and object store and builds the router. It starts
// nothing.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	a := &App{Cfg: cfg, Log: log, Metrics: api.NewMetrics()}
	var err error
	if a.Router, err = routing.NewRouter(cfg.Routing); err != nil {
		return nil, err
	}
	for _, w := range cfg.Routing.Warnings() {
		log.Warn("ROLLOUT POINTS AT AN UNBOUND VERSION: " + w)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("EDGEPIPE_DATA_DIR: %w", err)
	}
	if a.Store, err = openJobStore(ctx, cfg, log); err != nil {
		return nil, err
	}
	if a.Objects, err = openObjects(ctx, cfg, log); err != nil {
		a.Store.Close()
		return nil, err
	}
	if a.tracing, err = openTracing(ctx, cfg.Tracing); err != nil {
		a.Store.Close()
		return nil, err
	}
	if cfg.Tracing.Enabled {
		log.Info("tracing on", "protocol", cfg.Tracing.Protocol, "service", cfg.Tracing.ServiceName)
	}
	return a, nil
}

// tracingShutdownTimeout bounds the flush of the spans still buffered when
// the process stops.
const tracingShutdownTimeout = 5 * time.Second

// Close releases the stores and the in-process fake providers, and flushes
// and stops the TracerProvider. It runs when the caller's context may be
// over (a stopping process), so the flush has a context of its own, bounded
// by tracingShutdownTimeout.
//
//nolint:contextcheck // the caller's context is usually done by now; see above
func (a *App) Close() error {
	var errs []error
	if a.tracing.shutdown != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := a.tracing.shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tracing: %w", err))
		}
	}
	if a.fake != nil {
		errs = append(errs, a.fake.Close())
	}
	errs = append(errs, a.Store.Close())
	return errors.Join(errs...)
}

// OpenObjects opens only the configured object store.
func OpenObjects(ctx context.Context, cfg Config, log *slog.Logger) (pipeline.ObjectStore, error) {
	return openObjects(ctx, cfg, log)
}

func openObjects(ctx context.Context, cfg Config, log *slog.Logger) (pipeline.ObjectStore, error) {
	if cfg.Store == "fs" {
		return fs.New(ctx, fs.Config{Root: cfg.ObjectsDir, Logger: log})
	}
	sc, err := cfg.S3Settings(log)
	if err != nil {
		return nil, err
	}
	return s3.New(ctx, sc)
}

// Parts are the long-running components a command starts.
type Parts struct {
	// Hints wakes the worker when the job store announces a new message
	// (Postgres: LISTEN/NOTIFY; SQLite: the commits of this process).
	Hints      pipeline.Starter
	Worker     *pipeline.Worker
	Sweeper    *pipeline.Sweeper
	Dispatcher *webhook.Dispatcher
	// Presence announces this process's bindings (with workers).
	Presence *pipeline.Presence
	API      *api.Server
	HTTP     *http.Server
	Listener net.Listener
}

// services are the parts with the Start/Stop lifecycle, in start order.
func (p *Parts) services() []pipeline.Starter {
	var out []pipeline.Starter
	if p.Presence != nil {
		out = append(out, p.Presence)
	}
	if p.Hints != nil {
		out = append(out, p.Hints)
	}
	if p.Worker != nil {
		out = append(out, p.Worker)
	}
	if p.Sweeper != nil {
		out = append(out, p.Sweeper)
	}
	if p.Dispatcher != nil {
		out = append(out, p.Dispatcher)
	}
	return out
}

// FakeProviders is the in-process fake, when one runs.
func (a *App) FakeProviders() *fake.Server { return a.fake }

// Queues are the queues of the versions this deployment binds.
func (a *App) Queues() []string {
	var qs []string
	for _, v := range a.Cfg.Routing.Bindings.Versions() {
		if _, ok := pipeline.Workflows[v]; ok {
			qs = append(qs, routing.QueueName(v))
		}
	}
	return qs
}

// Build creates the parts a command needs: withAPI adds the HTTP server,
// workers > 0 adds the worker, and serve-style processes add the sweeper and
// webhook dispatcher.
func (a *App) Build(ctx context.Context, withAPI, withSweeper bool, workers int) (*Parts, error) {
	p := &Parts{}
	fps, err := failpoint.Parse(a.Cfg.Failpoints, a.Log)
	if err != nil {
		return nil, err
	}
	if workers > 0 {
		if err := a.buildWorker(ctx, p, fps, withAPI, workers); err != nil {
			return nil, err
		}
	}
	if withSweeper {
		if err := a.buildSweeper(p, fps); err != nil {
			return nil, err
		}
	}
	if withAPI {
		if err := a.buildAPI(ctx, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// buildWorker makes the engine, the worker that runs it and the presence
// that announces which versions this process binds.
func (a *App) buildWorker(ctx context.Context, p *Parts, fps *failpoint.Set, withAPI bool, workers int) error {
	if err := checkBindings(a.Cfg); err != nil {
		return err
	}
	prov, err := a.providers(ctx)
	if err != nil {
		return err
	}
	rc := a.Cfg.Render
	rc.Logger, rc.TracerProvider = a.Log, a.tracing.provider
	// Check ffmpeg now: a missing binary is a start-up error naming
	// the package, not a failure of the first job.
	base, err := render.New(ctx, rc)
	if err != nil {
		return err
	}
	engine, err := pipeline.NewEngine(a.engineConfig(prov, render.Factory(base), fps.Func()))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	owner := host + ":" + strconv.Itoa(os.Getpid())
	hints, wake, err := wakeHints(a.Cfg, a.Store, a.Queues(), a.Log)
	if err != nil {
		return err
	}
	if hints != nil {
		p.Hints = hints
	}
	p.Worker, err = pipeline.NewWorker(pipeline.WorkerConfig{
		Store: a.Store, Engine: engine, Queues: a.Queues(), Owner: owner,
		Concurrency: workers, LeaseFor: a.Cfg.LeaseFor, Poll: a.Cfg.WorkerPoll, TenantMaxRunning: a.Cfg.TenantMaxRunning,
		Logger: a.Log, Failpoint: fps.Func(), Wake: wake,
	})
	if err != nil {
		return err
	}
	role := "worker"
	if withAPI {
		role = "serve"
	}
	var bound []string
	for _, v := range a.Cfg.Routing.Bindings.Versions() {
		if _, ok := pipeline.Workflows[v]; ok {
			bound = append(bound, v)
		}
	}
	if p.Presence, err = pipeline.NewPresence(pipeline.PresenceConfig{Store: a.Store, ProcessID: owner + ":" + randomID(),
		Role: role, Versions: bound, Logger: a.Log}); err != nil {
		return err
	}
	return nil
}

// engineConfig is the engine of this configuration: the job store keeps
// its proofs (an unproven idempotency key runs as sync) and its shared rate
// limits.
func (a *App) engineConfig(prov pipeline.Providers, renderers pipeline.RendererFactory, fp pipeline.Failpoint) pipeline.EngineConfig {
	return pipeline.EngineConfig{
		Store: a.Store, Objects: a.Objects, Providers: prov, Renderers: renderers,
		Retry: pipeline.RetryPolicy{Base: a.Cfg.RetryBase, Cap: a.Cfg.RetryCap, MaxAttempts: a.Cfg.RetryMax,
			InfraWindow: a.Cfg.InfraWindow, InfraCap: a.Cfg.InfraCap},
		UnitConcurrency: a.Cfg.UnitConcurrency, ClipConcurrency: a.Cfg.ClipConcurrency,
		Logger: a.Log, TempDir: os.TempDir(), SpoolDir: filepath.Join(a.Cfg.DataDir, "spool"), Failpoint: fp, Metrics: a.Metrics,
		RateLimits: a.rateLimits(prov), Proofs: a.Store, ProofMaxAge: a.Cfg.ProofMaxAge,
		TracerProvider: a.tracing.provider,
	}
}

// rateLimits is the engine's shared limiter (EDGEPIPE_RATE_LIMITS) on the
// job store. A limit naming a provider that does not serve its operation
// here is kept (another process may route it there) but logged, since a
// misspelt name would otherwise limit nothing without a word. A slot lives
// twice the provider timeout, at least pipeline.DefaultRateSlotTTL.
func (a *App) rateLimits(prov pipeline.Providers) pipeline.RateLimits {
	if len(a.Cfg.RateLimits) == 0 {
		return pipeline.RateLimits{}
	}
	for _, l := range a.Cfg.RateLimits {
		if served := pipeline.ProviderName(prov, l.Op); served != l.Provider {
			a.Log.Warn("rate limit names a provider this process does not use for the operation", "setting", EnvRateLimits,
				"provider", l.Provider, "op", l.Op, "served_by", served)
		}
	}
	ttl := pipeline.DefaultRateSlotTTL
	if pc, err := a.Cfg.ProviderSettings(); err == nil {
		ttl = max(ttl, 2*cmp.Or(pc.Timeout, provider.DefaultTimeout))
	}
	return pipeline.RateLimits{Store: a.Store, Limits: a.Cfg.RateLimits, SlotTTL: ttl}
}

// buildSweeper makes the sweeper and the webhook dispatcher.
func (a *App) buildSweeper(p *Parts, fps *failpoint.Set) error {
	var err error
	p.Sweeper, err = pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: a.Store, Objects: a.Objects,
		Grace: a.Cfg.SweepGrace, Interval: a.Cfg.SweepInterval, Logger: a.Log,
		DeadLetters: a.Store, DeadLetterRetention: a.Cfg.SweeperRetention()})
	if err != nil {
		return err
	}
	secret := a.Cfg.WebhookSecret
	if secret == "" {
		if a.Cfg.DatabaseURL() != "" {
			return fmt.Errorf("EDGEPIPE_WEBHOOK_SECRET: %w", ErrLocalOnlyState)
		}
		if secret, err = a.webhookSecret(); err != nil {
			return err
		}
	}
	p.Dispatcher, err = webhook.New(webhook.Config{Store: a.Store, Secret: []byte(secret), AllowPrivate: a.Cfg.AllowPrivate,
		Logger: a.Log, Metrics: a.Metrics, Failpoint: fps.Func()})
	if err != nil {
		return err
	}
	return nil
}

// buildAPI makes the HTTP API, its server and its listener.
func (a *App) buildAPI(ctx context.Context, p *Parts) error {
	ops, err := a.routedOperations(ctx)
	if err != nil {
		return err
	}
	p.API, err = api.New(api.Config{Store: a.Store, Objects: a.Objects, Router: a.Router, Presence: a.Store, Tokens: a.Cfg.Tokens,
		AdminToken: a.Cfg.AdminToken, AllowPrivateWebhooks: a.Cfg.AllowPrivate, Logger: a.Log, Metrics: a.Metrics,
		SSEMaxAge: a.Cfg.SSEMaxAge, ProofMaxAge: a.Cfg.ProofMaxAge, Operations: ops, TracerProvider: a.tracing.provider})
	if err != nil {
		return err
	}
	if p.HTTP, err = api.NewHTTPServer(p.API.Handler(), a.Cfg.HTTP); err != nil {
		return err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", a.Cfg.Addr)
	if err != nil {
		return fmt.Errorf("EDGEPIPE_ADDR: %w", err)
	}
	p.Listener = api.LimitListener(l, a.Cfg.HTTP)
	// Event streams would otherwise hold a graceful shutdown open.
	p.HTTP.RegisterOnShutdown(p.API.CloseStreams)
	return nil
}

// WebhookSecretFile is where a deployment without EDGEPIPE_WEBHOOK_SECRET
// keeps the secret it signs webhooks with, inside the data directory.
const WebhookSecretFile = "webhook-secret"

// webhookSecret returns the persisted webhook signing secret, creating it
// (0600) on first start. It must survive restarts, or receivers could not
// verify webhooks after one; it is never logged, only where it is kept.
// Processes sharing the data directory race to link it into place, so all
// of them sign with the same secret.
func (a *App) webhookSecret() (string, error) {
	path := filepath.Join(a.Cfg.DataDir, WebhookSecretFile)
	for range 2 {
		if b, err := os.ReadFile(path); err == nil {
			secret := strings.TrimSpace(string(b))
			if len(secret) < api.MinTokenLen {
				return "", fmt.Errorf("%s: the webhook secret is shorter than %d characters; delete the file to make a new one or set EDGEPIPE_WEBHOOK_SECRET", path, api.MinTokenLen)
			}
			if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
				if err := os.Chmod(path, 0o600); err != nil {
					return "", fmt.Errorf("%s: readable by others and cannot be restricted: %w", path, err)
				}
				a.Log.Warn("webhook secret file was readable by others; restricted it to its owner", "path", path)
			}
			a.Log.Info("webhooks are signed with the secret kept in the data directory", "path", path)
			return secret, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("webhook secret: %w", err)
		}
		secret, err := api.GenerateToken()
		if err != nil {
			return "", err
		}
		// Written whole to a private temporary file, then linked into
		// place: the link fails if the file exists, and nobody ever reads
		// a half-written secret.
		tmp, err := os.CreateTemp(a.Cfg.DataDir, WebhookSecretFile+".*.tmp")
		if err != nil {
			return "", fmt.Errorf("webhook secret: %w", err)
		}
		_, werr := tmp.WriteString(secret + "\n")
		err = errors.Join(werr, tmp.Chmod(0o600), tmp.Sync(), tmp.Close())
		if err == nil {
			err = os.Link(tmp.Name(), path)
		}
		os.Remove(tmp.Name())
		if errors.Is(err, os.ErrExist) {
			continue // another process made it first: use theirs
		}
		if err != nil {
			return "", fmt.Errorf("webhook secret: %w", err)
		}
		a.Log.Info("EDGEPIPE_WEBHOOK_SECRET is not set; webhooks are signed with a secret generated now and kept for later starts", "path", path)
		return secret, nil
	}
	return "", fmt.Errorf("webhook secret: %s keeps appearing and disappearing", path)
}

// Run starts every part, blocks until ctx ends, then stops them in order:
// stop accepting requests, stop claiming, let in-flight jobs finish until the
// grace period ends (then release them), stop the sweeper and dispatcher.
func (p *Parts) Run(ctx context.Context, log *slog.Logger, grace time.Duration) error {
	bg := context.WithoutCancel(ctx)
	// The services start before the API serves, so a start-up failure
	// leaves nothing running: StartAll stops what it started, and the
	// listener the API would have served is closed.
	if err := pipeline.StartAll(bg, p.services()...); err != nil {
		if p.Listener != nil {
			_ = p.Listener.Close()
		}
		return err
	}
	errc := make(chan error, 1)
	if p.HTTP != nil {
		go func() {
			if err := p.HTTP.Serve(p.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(bg, grace)
	defer cancel()
	var errs []error
	if p.HTTP != nil {
		errs = append(errs, ignoreClosed(p.HTTP.Shutdown(sctx)))
	}
	// The worker first (stop claiming, let in-flight jobs finish within
	// the grace period), then the rest; the bindings are withdrawn last.
	svcs := p.services()
	slices.Reverse(svcs)
	if p.Worker != nil {
		if err := p.Worker.Stop(sctx); err != nil {
			log.Warn("worker stop", "err", err)
		}
	}
	for _, svc := range svcs {
		if svc != pipeline.Starter(p.Worker) {
			errs = append(errs, svc.Stop(sctx))
		}
	}
	return errors.Join(append(errs, runErr)...)
}

// randomID distinguishes two processes with the same host and pid (a
// container restarted with pid 1).
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

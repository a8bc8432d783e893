package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"sync"

	"edgepipe/internal/jobstore"
	"edgepipe/pipeline"
	"edgepipe/storage/postgres"
	"edgepipe/storage/sqlite"
	"edgepipe/storage/transfer"
)

// JobStore is the job store a deployment runs on: every interface its
// consumers own. storage/sqlite (the embedded default) and storage/postgres
// (EDGEPIPE_DATABASE_URL) implement it.
type JobStore interface {
	jobstore.Consumers
	transfer.Source
	transfer.Target
	SchemaVersion(ctx context.Context) (int, error)
	Close() error
}

var (
	_ JobStore = (*sqlite.Store)(nil)
	_ JobStore = (*postgres.Store)(nil)
)

// DatabaseURL is EDGEPIPE_DATABASE_URL: a Postgres job store shared by
// every process, or "" for the embedded SQLite file under the data
// directory.
func (c Config) DatabaseURL() string { return c.getenv("EDGEPIPE_DATABASE_URL") }

// DatabaseKind names the configured job store for logs: "postgres" or
// "sqlite".
func (c Config) DatabaseKind() string {
	if c.DatabaseURL() != "" {
		return "postgres"
	}
	return "sqlite"
}

// checkDatabaseURL refuses a URL that is not postgres:// or postgresql://,
// naming the setting but never echoing the value (it may hold a password).
func checkDatabaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return fmt.Errorf("EDGEPIPE_DATABASE_URL: must be a postgres://user:password@host:port/database URL (or empty for the embedded SQLite file)")
	}
	return nil
}

// openJobStore opens the configured job store, applying pending
// migrations.
func openJobStore(ctx context.Context, cfg Config, log *slog.Logger) (JobStore, error) {
	if u := cfg.DatabaseURL(); u != "" {
		return postgres.Open(ctx, postgres.Config{URL: u, Logger: log})
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("EDGEPIPE_DATA_DIR: %w", err)
	}
	return sqlite.Open(ctx, sqlite.Config{Path: cfg.DBPath(), Logger: log})
}

// Migrate brings the configured job store's schema up to date (both
// drivers migrate on open; applying twice changes nothing) and returns its
// version.
func Migrate(ctx context.Context, cfg Config, log *slog.Logger) (int, error) {
	st, err := openJobStore(ctx, cfg, log)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	return st.SchemaVersion(ctx)
}

// wakeHints returns the service that turns the job store's commit-time
// announcements about the queues a worker consumes into hints on the
// returned channel (pipeline.WorkerConfig.Wake): on Postgres a listener of
// the store's NOTIFY, on SQLite a listener of the store itself (the API and
// the workers of one process share it; workers in another process poll).
// The hint is only an early poll: a full channel already holds one.
func wakeHints(cfg Config, store JobStore, queues []string, log *slog.Logger) (pipeline.Starter, <-chan struct{}, error) {
	wake := make(chan struct{}, 1)
	hint := func(queue string) {
		if !slices.Contains(queues, queue) {
			return
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if u := cfg.DatabaseURL(); u != "" {
		l, err := postgres.NewListener(postgres.ListenerConfig{URL: u, Logger: log, Wake: hint})
		if err != nil {
			return nil, nil, err
		}
		return l, wake, nil
	}
	ls, ok := store.(storeListener)
	if !ok {
		return nil, nil, nil
	}
	return &storeHints{store: ls, wake: hint}, wake, nil
}

// storeListener is a job store that announces its own commits in this
// process (storage/sqlite).
type storeListener interface {
	Listen(wake func(queue string)) (stop func())
}

var _ storeListener = (*sqlite.Store)(nil)

// storeHints listens to the store from Start to Stop.
type storeHints struct {
	store storeListener
	wake  func(queue string)
	mu    sync.Mutex
	stop  func()
}

func (h *storeHints) Start(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		h.stop = h.store.Listen(h.wake)
	}
	return nil
}

func (h *storeHints) Stop(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	return nil
}

// ErrLocalOnlyState is what a process sharing a Postgres job store refuses
// to start with: a setting that would otherwise be generated into this
// machine's data directory, where another machine cannot read it.
var ErrLocalOnlyState = errors.New("must be set when EDGEPIPE_DATABASE_URL is: processes sharing a database may run on other machines, and a value generated into one data directory would differ on each")

// CheckShared refuses the settings a serve process (API, sweeper, webhook
// dispatcher) would otherwise keep only in its data directory when the job
// store is shared: tenant tokens (development mode mints one per data
// directory, so a second API process would reject the first one's clients)
// and the webhook signing secret (each dispatcher would sign with its own,
// and receivers could not verify half the deliveries).
func (c Config) CheckShared() error {
	if c.DatabaseURL() == "" {
		return nil
	}
	if len(c.Tokens) == 0 {
		return fmt.Errorf("EDGEPIPE_TOKENS: %w", ErrLocalOnlyState)
	}
	if c.WebhookSecret == "" {
		return fmt.Errorf("EDGEPIPE_WEBHOOK_SECRET: %w", ErrLocalOnlyState)
	}
	return nil
}

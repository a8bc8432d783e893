package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/internal/app"
)

func init() {
	register("serve", "run the API, workers, sweeper and webhook dispatcher (fake providers unless EDGEPIPE_PROVIDER_URL)",
		func(ctx context.Context, args []string) error { return osEnv().serve(ctx, args) })
	register("worker", "run workers only (scale-out; shares the job store: the SQLite file, or EDGEPIPE_DATABASE_URL)", workerCmd)
}

const serveHelp = `
Runs everything in one process: the HTTP API on EDGEPIPE_ADDR (default
127.0.0.1:8080), EDGEPIPE_WORKERS workers (default 2; 0 runs the API alone),
the sweeper and the webhook dispatcher. Without EDGEPIPE_PROVIDER_URL the fake
providers run in-process on a loopback port. Without EDGEPIPE_TOKENS the
server only listens on loopback and prints a development token (also written
to $EDGEPIPE_DATA_DIR/dev-token, which the client commands read).`

func (e *cliEnv) serve(ctx context.Context, args []string) error {
	fs := newFlags("serve", "[--grace 30s]", serveHelp)
	fs.SetOutput(e.stderr)
	grace := fs.Duration("grace", 30*time.Second, "how long in-flight jobs may finish at shutdown before they are released")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig()
	if err != nil {
		return err
	}
	// Refuse a bad configuration before anything is written: the
	// development token files below, the database and objects in Open.
	if err := cfg.Check(cfg.Workers); err != nil {
		return err
	}
	if err := cfg.CheckShared(); err != nil {
		return err
	}
	if len(cfg.Tokens) == 0 {
		if err := devMode(&cfg, e.stderr); err != nil {
			return err
		}
	}
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	parts, err := a.Build(ctx, true, true, cfg.Workers)
	if err != nil {
		return err
	}
	// Start-up dead-letters nothing: a job queued for a version this
	// process does not bind may be another live process's work (a rolling
	// upgrade has exactly this shape). Unbound versions are dead-lettered
	// when a job is routed at submission against the bindings of every
	// live process (docs/design.md §4).
	log.Info("edgepipe serving", "addr", parts.Listener.Addr().String(), "workers", cfg.Workers,
		"queues", strings.Join(a.Queues(), ","), "store", cfg.Store, "database", cfg.DatabaseKind(), "v2_rollout_percent", cfg.Routing.RolloutPercent)
	return parts.Run(ctx, log, *grace)
}

func workerCmd(ctx context.Context, args []string) error {
	fs := newFlags("worker", "[--grace 30s]", `
Runs EDGEPIPE_WORKERS workers (default 2) against the database in
EDGEPIPE_DATA_DIR, without the API. Start several on one database file to
scale out; each consumes the queues of the versions in EDGEPIPE_BINDINGS.`)
	grace := fs.Duration("grace", 30*time.Second, "how long in-flight jobs may finish at shutdown before they are released")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	if cfg.Workers == 0 {
		return fmt.Errorf("EDGEPIPE_WORKERS: a worker process needs at least 1 worker")
	}
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	parts, err := a.Build(ctx, false, false, cfg.Workers)
	if err != nil {
		return err
	}
	log.Info("edgepipe worker running", "workers", cfg.Workers, "queues", strings.Join(a.Queues(), ","))
	return parts.Run(ctx, log, *grace)
}

// devMode is local development without configured tokens: loopback only,
// and one development tenant whose token is printed and saved.
func devMode(cfg *app.Config, stderr io.Writer) error {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("EDGEPIPE_ADDR: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("EDGEPIPE_TOKENS: is not set, so edgepipe only serves on loopback; set tokens to listen on %s", cfg.Addr)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return err
	}
	tok, err := readOrCreateToken(filepath.Join(cfg.DataDir, "dev-token"))
	if err != nil {
		return err
	}
	cfg.Tokens = map[string]string{tok: "dev"}
	adminNote := ""
	if cfg.AdminToken == "" {
		if cfg.AdminToken, err = readOrCreateToken(filepath.Join(cfg.DataDir, "dev-admin-token")); err != nil {
			return err
		}
		adminNote = fmt.Sprintf("; admin token %s (saved in %s)", cfg.AdminToken, filepath.Join(cfg.DataDir, "dev-admin-token"))
	}
	fmt.Fprintf(stderr, "edgepipe: development mode (EDGEPIPE_TOKENS unset): tenant \"dev\", token %s (saved in %s)%s\n",
		tok, filepath.Join(cfg.DataDir, "dev-token"), adminNote)
	return nil
}

func readOrCreateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= api.MinTokenLen {
		return strings.TrimSpace(string(b)), nil
	}
	tok, err := api.GenerateToken()
	if err != nil {
		return "", err
	}
	return tok, os.WriteFile(path, []byte(tok+"\n"), 0o600)
}

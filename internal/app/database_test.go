package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// A serve process sharing a Postgres job store refuses to generate tokens
// or a webhook secret into its own data directory: another machine's
// process would make different ones (issue 15: no shared local disk).
func TestCheckShared(t *testing.T) {
	t.Parallel()
	const url = "postgres://edgepipe:sekrit@db:5432/edgepipe"
	tokens := "tok-0123456789abcdef0123:acme"
	secret := "webhook-secret-0123456789abcdef"
	for _, tt := range []struct {
		name    string
		env     map[string]string
		missing string // the setting named in the error, "" = accepted
	}{
		{"sqlite without either", map[string]string{}, ""},
		{"postgres with both", map[string]string{"EDGEPIPE_DATABASE_URL": url, "EDGEPIPE_TOKENS": tokens, "EDGEPIPE_WEBHOOK_SECRET": secret}, ""},
		{"postgres without tokens", map[string]string{"EDGEPIPE_DATABASE_URL": url, "EDGEPIPE_WEBHOOK_SECRET": secret}, "EDGEPIPE_TOKENS"},
		{"postgres without secret", map[string]string{"EDGEPIPE_DATABASE_URL": url, "EDGEPIPE_TOKENS": tokens}, "EDGEPIPE_WEBHOOK_SECRET"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := testConfig(t, t.TempDir(), tt.env).CheckShared()
			if tt.missing == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrLocalOnlyState) || !strings.HasPrefix(err.Error(), tt.missing+": ") || strings.Contains(err.Error(), "sekrit") {
				t.Fatalf("err = %v; want ErrLocalOnlyState naming %s, without the URL", err, tt.missing)
			}
		})
	}
}

// Build refuses too (for callers of the package that skip CheckShared):
// with a shared database it never generates a webhook secret file.
func TestBuildRefusesLocalWebhookSecretOnSharedDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := Open(t.Context(), testConfig(t, dir, nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Cfg = testConfig(t, dir, map[string]string{"EDGEPIPE_DATABASE_URL": "postgres://db/edgepipe"})
	if _, err := a.Build(t.Context(), false, true, 0); !errors.Is(err, ErrLocalOnlyState) {
		t.Fatalf("Build = %v, want ErrLocalOnlyState", err)
	}
	if _, err := os.Stat(filepath.Join(dir, WebhookSecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a webhook secret file was made in the data directory: %v", err)
	}
}

// On SQLite a worker's wake-up hints come from the store's own commits in
// this process (the API and the workers of `serve` share it), only for the
// queues it consumes and only between Start and Stop; Build wires them.
func TestWakeHintsFollowSQLiteCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := Open(ctx, testConfig(t, t.TempDir(), nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	svc, wake, err := wakeHints(a.Cfg, a.Store, []string{"render-v1"}, slog.New(slog.DiscardHandler))
	if _, ok := svc.(*storeHints); err != nil || !ok {
		t.Fatalf("wakeHints on SQLite: %T, %v", svc, err)
	}
	submit := func(id, queue string) { t.Helper(); createQueuedJob(t, a.Store, id, queue) }
	quiet := func(why string) {
		t.Helper()
		select {
		case <-wake:
			t.Fatal("woken " + why)
		case <-time.After(200 * time.Millisecond):
		}
	}
	submit("v1-before", "render-v1")
	quiet("before Start")
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	submit("v9-other", "render-v9")
	quiet("for a queue this worker does not consume")
	submit("v1-mine", "render-v1")
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a commit on render-v1")
	}
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	submit("v1-after", "render-v1")
	quiet("after Stop")

	parts, err := a.Build(ctx, false, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parts.Hints.(*storeHints); !ok {
		t.Fatalf("a SQLite worker's hints are %T, want the store's own", parts.Hints)
	}
}

// EDGEPIPE_WORKER_POLL sets the worker's idle wait (pipeline.DefaultPoll
// unset, at least 10 ms); with an hour's poll, a job committed to a
// serve process's SQLite store still starts at once: Build hands the
// store's wake-ups to the worker.
func TestWorkerPollAndWakeThroughBuild(t *testing.T) {
	t.Parallel()
	if c := testConfig(t, t.TempDir(), nil); c.WorkerPoll != pipeline.DefaultPoll {
		t.Fatalf("default poll %s, want %s", c.WorkerPoll, pipeline.DefaultPoll)
	}
	for _, bad := range []string{"5ms", "soon", "-1s"} {
		env := map[string]string{"EDGEPIPE_DATA_DIR": t.TempDir(), "EDGEPIPE_WORKER_POLL": bad}
		environ := []string{"EDGEPIPE_DATA_DIR=" + env["EDGEPIPE_DATA_DIR"], "EDGEPIPE_WORKER_POLL=" + bad}
		if _, err := FromEnv(func(k string) string { return env[k] }, environ); err == nil || !strings.Contains(err.Error(), "EDGEPIPE_WORKER_POLL") {
			t.Errorf("EDGEPIPE_WORKER_POLL=%s: %v", bad, err)
		}
	}
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir(), map[string]string{"EDGEPIPE_WORKER_POLL": "1h"})
	if cfg.WorkerPoll != time.Hour {
		t.Fatalf("poll %s, want 1h", cfg.WorkerPoll)
	}
	a, parts := openBuilt(t, cfg, false, 1)
	for _, svc := range []pipeline.Starter{parts.Hints, parts.Worker} {
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Stop(context.Background()) })
	}
	time.Sleep(300 * time.Millisecond) // the worker found its queues empty and waits its hour
	createQueuedJob(t, a.Store, "v1-woken", "render-v1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := a.Store.GetJob(ctx, "v1-woken")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != pipeline.StatusPending {
			break // claimed (its empty input then fails it; that is not the point)
		}
		if time.Now().After(deadline) {
			t.Fatal("the job is still pending 30 s after its commit, with an hour's poll: the worker was not woken")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

//go:build postgres

package app

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/check"
	"edgepipe/pipeline"
	"edgepipe/storage/postgres"
	"edgepipe/storage/postgres/pgtest"
)

// freshDatabase is an empty database of its own for the test.
func freshDatabase(t *testing.T) string { return pgtest.FreshDatabase(t, "edgepipe_app_", false) }

// Two processes, each with its own empty data directory, share one
// Postgres (and one object store): the API process accepts jobs, the
// worker process runs them, and `edgepipe check --require-settled` finds
// nothing wrong. No SQLite file is made anywhere.
func TestTwoProcessesShareOnePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "postgres-test-token-0123456789"
	env := map[string]string{
		"EDGEPIPE_DATABASE_URL": freshDatabase(t), "EDGEPIPE_OBJECTS_DIR": t.TempDir(),
		"EDGEPIPE_TOKENS": token + ":acme", "EDGEPIPE_WEBHOOK_SECRET": "shared-secret-0123456789abcdef",
		"EDGEPIPE_FAKE_VIDEO_PROCESSING": "10ms", "EDGEPIPE_RENDER_PRESET": "ultrafast",
	}
	open := func(dir string, withAPI bool, workers int) (*App, *Parts) {
		return openBuilt(t, testConfig(t, dir, env), withAPI, workers)
	}
	apiDir, workerDir := t.TempDir(), t.TempDir()
	front, fp := open(apiDir, true, 0)
	_, wp := open(workerDir, false, 1)
	if wp.Hints == nil {
		t.Fatal("a worker on Postgres has no wake-up listener")
	}
	if err := wp.Hints.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Hints.Stop(context.Background()) })
	if err := wp.Worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Worker.Stop(context.Background()) })

	h := fp.API.Handler()
	for i, extra := range []string{``, `"instance_id":"v2-pgtwoprocs",`} {
		body := `{"operation":"render_video",` + extra + `"title":"Two","scenes":[
		 {"image_prompt":"a lighthouse","narration":"The keeper climbed.","duration_ms":1000}],
		 "options":{"resolution":"640x360","fps":24}}`
		r := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "two-"+string(rune('a'+i)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("submit %d: %d %s", i, w.Code, w.Body)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		jobs, _, err := front.Store.ListJobs(ctx, pipeline.ListFilter{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		settled := 0
		for _, j := range jobs {
			if j.Status.Settled() {
				if j.Status != pipeline.StatusSucceeded {
					t.Fatalf("job %s settled %s: %s", j.ID, j.Status, j.LastErrorCode)
				}
				settled++
			}
		}
		if len(jobs) == 2 && settled == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not done: %+v", jobs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep, err := check.Run(ctx, check.Config{Store: front.Store, Objects: front.Objects, RequireSettled: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 0 || rep.Jobs != 2 || rep.Assets == 0 {
		t.Fatalf("check: %+v", rep)
	}
	for _, dir := range []string{apiDir, workerDir} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".db") {
				return errors.New("a SQLite file was made: " + p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A worker's wake-up hints come from Postgres' commit-time notifications,
// only for the queues it consumes.
func TestWakeHintsFollowCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	env := map[string]string{"EDGEPIPE_DATABASE_URL": dbURL, "EDGEPIPE_OBJECTS_DIR": t.TempDir()}
	a, err := Open(ctx, testConfig(t, t.TempDir(), env), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	svc, wake, err := wakeHints(a.Cfg, a.Store, []string{"render-v1"}, slog.New(slog.DiscardHandler))
	l, ok := svc.(*postgres.Listener)
	if err != nil || !ok {
		t.Fatalf("wakeHints: %T %v", svc, err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Stop(context.Background()) })
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("listener never listened")
	}
	submit := func(id, queue string) { t.Helper(); createQueuedJob(t, a.Store, id, queue) }
	submit("v9-other", "render-v9")
	select {
	case <-wake:
		t.Fatal("woken for a queue this worker does not consume")
	case <-time.After(500 * time.Millisecond):
	}
	submit("v1-mine", "render-v1")
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a commit on render-v1")
	}
}

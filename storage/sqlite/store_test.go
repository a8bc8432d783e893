package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func openTest(t testing.TB, path string, clock pipeline.Clock) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "edgepipe.db")
	}
	s, err := Open(context.Background(), Config{Path: path, Clock: clock, MaxDeliveries: 3})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newJob(id string) pipeline.NewJob {
	return pipeline.NewJob{
		ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "key-" + id,
		RequestFingerprint: "fp-" + id, Input: json.RawMessage(`{"title":"t"}`), Version: "v1", Queue: "render-v1",
	}
}

func mustCreate(t testing.TB, s *Store, nj pipeline.NewJob) pipeline.Job {
	t.Helper()
	j, created, err := s.CreateJob(context.Background(), nj)
	if err != nil || !created {
		t.Fatalf("create %s: created=%v err=%v", nj.ID, created, err)
	}
	return j
}

func countRows(t *testing.T, s *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestMigrationsRecordedAndIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openTest(t, path, nil)
	ms, err := loadMigrations()
	if err != nil || len(ms) < 2 {
		t.Fatalf("migrations %d, %v", len(ms), err)
	}
	v, err := s.SchemaVersion(context.Background())
	if err != nil || v != len(ms) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(ms))
	}
	s2 := openTest(t, path, nil) // reopening applies nothing twice
	if n := countRows(t, s2, `SELECT count(*) FROM schema_migrations`); n != len(ms) {
		t.Fatalf("schema_migrations has %d rows", n)
	}
	var mode string
	if err := s.write.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal mode %q, %v", mode, err)
	}
	var fk int
	if err := s.write.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign keys %d, %v", fk, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openTest(t, path, nil)
	if _, err := s.write.Exec(`INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), Config{Path: path}); err == nil {
		t.Fatal("opened a database with a newer schema")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {Path: "x", Synchronous: "OFF"}, {Path: "x", BusyTimeout: -1},
		{Path: "x", CheckpointInterval: -1}, {Path: "x", CheckpointRestartPages: -1}} {
		if _, err := Open(context.Background(), c); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidInput", c, err)
		}
	}
}

// A data directory whose name holds URI metacharacters opens that exact
// directory, not a truncated path shared with others.
func TestPathWithURIMetacharacters(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	for _, name := range []string{"a#1", "a#2", "b?x=1", "c%41"} {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := openTest(t, filepath.Join(dir, "db.sqlite"), nil)
		mustCreate(t, s, newJob("v1-"+fmt.Sprint(len(name))+"x"))
		if _, err := os.Stat(filepath.Join(dir, "db.sqlite")); err != nil {
			t.Fatalf("%s: database not where asked: %v", name, err)
		}
	}
}

// The injected logger (not a global) hears about schema changes, once.
func TestMigrationsLoggedToInjectedLogger(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	open := func() {
		s, err := Open(context.Background(), Config{Path: path, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	open()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "applied migration"); n != len(ms) || !strings.Contains(buf.String(), "0001_init.sql") ||
		!strings.Contains(buf.String(), "0003_staging_infra_bindings.sql") {
		t.Fatalf("first open logged %q", buf.String())
	}
	buf.Reset()
	open()
	if strings.Contains(buf.String(), "applied migration") {
		t.Fatalf("reopening logged %q", buf.String())
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"edgepipe/pipeline"
)

// openAtVersion creates a database at schema version n (the first n
// migrations, recorded as migrate records them) and returns it raw.
func openAtVersion(t *testing.T, path string, n int) *sql.DB {
	t.Helper()
	ctx := context.Background()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+uriPath(path)+"?_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:n] {
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// schemaSQL returns the stored SQL of every trigger (or index) by name.
func schemaSQL(t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, typ string) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = ?`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, text string
		if err := rows.Scan(&name, &text); err != nil {
			t.Fatal(err)
		}
		out[name] = text
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Migration 0005 on a database with jobs: every job gets its id as its
// instance id (and keeps its id as its internal key), a terminal job
// included, and the triggers that guard jobs are what they were — a
// finished job is still immutable.
func TestMigration0005BackfillsInstanceIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old := openAtVersion(t, path, 4)
	for _, r := range []struct{ id, tenant, status string }{
		{"v1-open", "acme", "pending"},
		{"v1-done", "acme", "succeeded"},
		{"v2-gone", "globex", "canceled"},
	} {
		if _, err := old.ExecContext(ctx, `INSERT INTO jobs (id, tenant, operation, idempotency_key, request_fingerprint,
			input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
			VALUES (?, ?, 'render_video', ?, 'fp', '{}', 'v1', 'render-v1', ?, 1, 1, 1)`, r.id, r.tenant, "k-"+r.id, r.status); err != nil {
			t.Fatal(err)
		}
	}
	triggersBefore := schemaSQL(t, old, "trigger")
	if _, ok := triggersBefore["jobs_terminal_frozen"]; !ok {
		t.Fatal("fixture: no jobs_terminal_frozen at schema 4")
	}
	if _, err := old.ExecContext(ctx, `UPDATE jobs SET attempts = 1 WHERE id = 'v1-done'`); err == nil {
		t.Fatal("fixture: a terminal job changed at schema 4")
	}
	// 0005 alone: the triggers it dropped for the backfill are back as
	// they were (0010 replaces two of them later; checked below by what
	// they refuse).
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.ExecContext(ctx, ms[4].SQL); err != nil {
		t.Fatalf("%s: %v", ms[4].Name, err)
	}
	if _, err := old.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, 0)`, ms[4].Version, ms[4].Name); err != nil {
		t.Fatal(err)
	}
	at5 := schemaSQL(t, old, "trigger")
	for name, text := range triggersBefore {
		if at5[name] != text {
			t.Errorf("trigger %s changed by the migration:\nbefore %s\nafter  %s", name, text, at5[name])
		}
	}
	if _, ok := at5["jobs_instance_id_required"]; !ok {
		t.Error("no jobs_instance_id_required trigger")
	}
	old.Close()

	s := openTest(t, path, nil) // applies every later migration
	if v, err := s.SchemaVersion(ctx); err != nil || v != len(ms) || v < 5 {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(ms))
	}
	for _, tc := range []struct{ tenant, id string }{{"acme", "v1-open"}, {"acme", "v1-done"}, {"globex", "v2-gone"}} {
		j, err := s.GetTenantJob(ctx, tc.tenant, tc.id)
		if err != nil || j.ID != tc.id || j.InstanceID != tc.id {
			t.Fatalf("%s's %s after migration: %+v, %v", tc.tenant, tc.id, j, err)
		}
	}
	if idx := schemaSQL(t, s.read, "index"); idx["jobs_tenant_instance"] == "" {
		t.Errorf("no jobs_tenant_instance index: %v", slices.Sorted(maps.Keys(idx)))
	}
	// Terminal is still terminal: neither a column nor the new one moves.
	for _, q := range []string{
		`UPDATE jobs SET attempts = 7 WHERE id = 'v1-done'`,
		`UPDATE jobs SET instance_id = 'v1-renamed' WHERE id = 'v2-gone'`,
	} {
		if _, err := s.write.ExecContext(ctx, q); !errors.Is(translate(err), pipeline.ErrTerminal) {
			t.Errorf("%s on a terminal job after the migration: %v, want it refused", q, err)
		}
	}
	// The migrated store takes new jobs by the new rule: globex may now
	// use acme's old id, acme may not reuse its own.
	mustCreate(t, s, tenantJob("globex", "v1-done", "k-new"))
	if _, _, err := s.CreateJob(ctx, tenantJob("acme", "v1-open", "k-new")); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("acme's own migrated id again: %v, want ErrAlreadyExists", err)
	}
}

// tenantJob is tenant's job submitted as instanceID, keyed as the API keys
// it (pipeline.JobKey).
func tenantJob(tenant, instanceID, key string) pipeline.NewJob {
	nj := newJob(pipeline.JobKey(tenant, instanceID))
	nj.InstanceID, nj.Tenant, nj.IdempotencyKey = instanceID, tenant, key
	return nj
}

// jobs_guard (0010) refuses an update of a terminal job as terminal, whatever
// the update: status to any other (a refused transition too) or the same,
// or another column. translate makes it pipeline.ErrTerminal.
func TestJobsGuardRefusesTerminalFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", nil)
	for _, from := range []pipeline.Status{pipeline.StatusSucceeded, pipeline.StatusFailed, pipeline.StatusCanceled} {
		id := "v1-guard-" + string(from)
		if _, err := s.write.ExecContext(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
			request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
			VALUES (?, ?, 't', 'op', ?, 'fp', '{}', 'v1', 'render-v1', ?, 0, 0, 0)`, id, id, id, string(from)); err != nil {
			t.Fatal(err)
		}
		updates := []string{`UPDATE jobs SET attempts = 9 WHERE id = ?`}
		for _, to := range pipeline.AllStatuses {
			updates = append(updates, `UPDATE jobs SET status = '`+string(to)+`' WHERE id = ?`)
		}
		for _, q := range updates {
			if _, err := s.write.ExecContext(ctx, q, id); !errors.Is(translate(err), pipeline.ErrTerminal) {
				t.Errorf("%s: %s: %v, want ErrTerminal", from, q, err)
			}
		}
	}
}

//go:build postgres

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"edgepipe/pipeline"
)

// A job's keys live in job_keys (migration 0007), not in unique indexes of
// jobs. These tests hold the database to what the unique indexes
// guaranteed, through a connection of their own (not the store's): every
// job has its key row and it agrees with the job; a key is held by one
// job; the keys of a job never change; a key row never dangles.

// rawInsertJob inserts a queued job by hand, without ON CONFLICT.
func rawInsertJob(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, id, tenant, instanceID, key string) (pgconn.CommandTag, error) {
	return q.Exec(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
		request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
		VALUES ($1, $2, $3, 'render_video', $4, 'fp', '{}', 'v1', 'render-v1', 'pending', 1, 2, 3)`, id, instanceID, tenant, key)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestJobKeysGuardJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	s := openTest(t, url, nil)
	raw := rawPostgres(t, url).(*rawDB).conn
	if _, _, err := s.CreateJob(ctx, pipeline.NewJob{ID: "v1-a", InstanceID: "a", Tenant: "alice", Operation: "render_video",
		IdempotencyKey: "k1", RequestFingerprint: "fp", Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	var tenant, op, key, inst string
	if err := raw.QueryRow(ctx, `SELECT tenant, operation, idempotency_key, instance_id FROM job_keys WHERE job_id = 'v1-a'`).
		Scan(&tenant, &op, &key, &inst); err != nil {
		t.Fatalf("the store's job has no key row: %v", err)
	}
	if tenant != "alice" || op != "render_video" || key != "k1" || inst != "a" {
		t.Fatalf("key row %q %q %q %q, want the job's alice render_video k1 a", tenant, op, key, inst)
	}

	// A writer that skips the store: a held key is a unique violation, as
	// it was when jobs' own unique indexes refused it.
	// The refusal says which key and which job holds it.
	for _, tc := range []struct {
		name, id, tenant, inst, key, constraint, says string
	}{
		{"held idempotency key", "raw-1", "alice", "b", "k1", "job_keys_idempotency", "raw-1's idempotency key is held by job v1-a"},
		{"held instance id", "raw-2", "alice", "a", "k2", "job_keys_tenant_instance", "raw-2's instance id is held by job v1-a"},
		{"held job key", "v1-a", "bob", "c", "k3", "job_keys_pkey", "v1-a's job key is held by job v1-a"},
		{"free keys", "raw-3", "alice", "d", "k4", "", ""},
		{"another tenant's same keys", "raw-4", "bob", "a", "k1", "", ""},
	} {
		_, err := rawInsertJob(ctx, raw, tc.id, tc.tenant, tc.inst, tc.key)
		var pe *pgconn.PgError
		switch {
		case tc.constraint == "" && err != nil:
			t.Fatalf("%s: insert: %v", tc.name, err)
		case tc.constraint == "":
		case !errors.As(err, &pe) || pe.Code != "23505" || pe.ConstraintName != tc.constraint || !strings.Contains(pe.Message, tc.says):
			t.Fatalf("%s: insert: %v, want a unique violation of %s saying %q", tc.name, err, tc.constraint, tc.says)
		}
	}
	// Skipping instead of raising is the inserting transaction's choice,
	// and holds for that transaction only.
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('edgepipe.key_conflict', 'skip', true)`); err != nil {
		t.Fatal(err)
	}
	if tag, err := rawInsertJob(ctx, tx, "raw-5", "alice", "e", "k1"); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("held key with skip: %v, %d rows, want none and no error", err, tag.RowsAffected())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rawInsertJob(ctx, raw, "raw-6", "alice", "f", "k1"); sqlState(err) != "23505" {
		t.Fatalf("held key after that transaction: %v, want a unique violation", err)
	}
	var jobs, keys, agree int
	if err := raw.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_keys),
		(SELECT count(*) FROM jobs j JOIN job_keys k ON k.job_id = j.id AND k.tenant = j.tenant
			AND k.operation = j.operation AND k.idempotency_key = j.idempotency_key AND k.instance_id = j.instance_id
			AND k.created_at = j.created_at)`).
		Scan(&jobs, &keys, &agree); err != nil {
		t.Fatal(err)
	}
	if jobs != 3 || keys != 3 || agree != 3 {
		t.Fatalf("%d jobs, %d key rows, %d agreeing, want 3 of each", jobs, keys, agree)
	}

	// The keys of a job never change; key rows are never changed or
	// removed; a key row of no job is refused when its transaction commits.
	for _, q := range []string{
		`UPDATE jobs SET tenant = 'mallory' WHERE id = 'v1-a'`,
		`UPDATE jobs SET instance_id = 'z' WHERE id = 'v1-a'`,
		`UPDATE jobs SET idempotency_key = 'z' WHERE id = 'v1-a'`,
		`UPDATE jobs SET operation = 'z' WHERE id = 'v1-a'`,
		`UPDATE jobs SET created_at = created_at + 1 WHERE id = 'v1-a'`,
		`UPDATE job_keys SET idempotency_key = 'z' WHERE job_id = 'v1-a'`,
		`DELETE FROM job_keys WHERE job_id = 'v1-a'`,
		`TRUNCATE job_keys`,
		`INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id, created_at) VALUES ('nobody', 'alice', 'op', 'k9', 'x9', 2)`,
	} {
		if _, err := raw.Exec(ctx, q); err == nil {
			t.Fatalf("%s: accepted", q)
		}
	}
	// The control: an update that leaves the keys as they are is taken.
	if _, err := raw.Exec(ctx, `UPDATE jobs SET tenant = tenant, stage = 'x' WHERE id = 'v1-a'`); err != nil {
		t.Fatalf("update keeping the keys: %v", err)
	}
}

// A database migrated before 0007 gets a key row for every job it holds,
// and its keys stay held; one migrated before 0008 gets each job's
// creation time into its key row, and its listings read them.
func TestJobKeysMigration(t *testing.T) {
	t.Parallel()
	for _, before := range []int{7, 8} {
		t.Run(fmt.Sprintf("before %04d", before), func(t *testing.T) {
			t.Parallel()
			testJobKeysMigration(t, before)
		})
	}
}

// databaseBefore is a new database migrated up to, not including,
// migration before, as a store of an older edgepipe left it, and a raw
// connection to it.
func databaseBefore(t *testing.T, before int) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := newDatabase(t)
	raw := rawPostgres(t, url).(*rawDB).conn
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= before {
			break
		}
		if _, err := raw.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := raw.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, $2, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return url, raw
}

func testJobKeysMigration(t *testing.T, before int) {
	ctx := context.Background()
	url, raw := databaseBefore(t, before)
	for i, j := range [][3]string{{"v1-old1", "alice", "k1"}, {"v1-old2", "bob", "k1"}} {
		if _, err := rawInsertJob(ctx, raw, j[0], j[1], "x", j[2]); err != nil {
			t.Fatal(err)
		}
		// Until 0008 a job's creation time is not a key's.
		if _, err := raw.Exec(ctx, `UPDATE jobs SET created_at = $1 WHERE id = $2`, 5000+i, j[0]); err != nil {
			t.Fatal(err)
		}
	}
	s := openTest(t, url, nil)
	var keys int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM job_keys k JOIN jobs j ON j.id = k.job_id AND j.tenant = k.tenant
		AND j.idempotency_key = k.idempotency_key AND j.instance_id = k.instance_id AND j.created_at = k.created_at`).Scan(&keys); err != nil || keys != 2 {
		t.Fatalf("%d agreeing key rows after the migration (%v), want 2", keys, err)
	}
	got, created, err := s.CreateJob(ctx, pipeline.NewJob{ID: "v1-new", InstanceID: "y", Tenant: "alice", Operation: "render_video",
		IdempotencyKey: "k1", RequestFingerprint: "fp", Version: "v1", Queue: "render-v1"})
	if err != nil || created || got.ID != "v1-old1" {
		t.Fatalf("replay of an old job's key: %s created=%v %v, want v1-old1 found", got.ID, created, err)
	}
	if _, _, err := s.CreateJob(ctx, pipeline.NewJob{ID: "v1-new", InstanceID: "x", Tenant: "bob", Operation: "render_video",
		IdempotencyKey: "k2", RequestFingerprint: "fp", Version: "v1", Queue: "render-v1"}); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("an old job's instance id: %v, want ErrAlreadyExists", err)
	}
	if j, err := s.GetTenantJob(ctx, "bob", "x"); err != nil || j.ID != "v1-old2" {
		t.Fatalf("bob's x: %s %v, want v1-old2", j.ID, err)
	}
	if _, _, err := s.CreateJob(ctx, pipeline.NewJob{ID: "v1-new", InstanceID: "z", Tenant: "bob", Operation: "render_video",
		IdempotencyKey: "k3", RequestFingerprint: "fp", Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range []pipeline.ListFilter{{AllTenants: true}, {Tenant: "bob"}} {
		jobs, _, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	if want := "v1-new v1-old2 v1-old1 v1-new v1-old2"; strings.Join(ids, " ") != want {
		t.Fatalf("listings: %s, want %s", strings.Join(ids, " "), want)
	}
}

// Every lookup of a job by its keys reads job_keys' unique indexes and
// then jobs by its primary key, on a tenant with thousands of jobs:
// never a scan of jobs, nor the tenant's range of jobs_tenant_created
// (jobs has no index on its keys since 0007).
func TestKeyLookupsReadJobKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	createQueued(t, s, 3000)
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	id := "v1-001500"
	for _, tc := range []struct {
		name, query, keyIndex string
		args                  []any
	}{
		{"findByKey", qJobByKey, "job_keys_idempotency", []any{"acme", "render_video", "key-" + id}},
		{"notInserted's instance holder", qInstanceHolder, "job_keys_tenant_instance", []any{"acme", id}},
		{"GetTenantJob", qTenantJob, "job_keys_tenant_instance", []any{"acme", id}},
		{"lockJob", qTenantJob + ` FOR UPDATE`, "job_keys_tenant_instance", []any{"acme", id}},
	} {
		var out []byte
		if err := s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+tc.query, tc.args...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: EXPLAIN output: %v", tc.name, err)
		}
		var usedKey bool
		var nodes []string
		plans[0].Plan.walk(func(n planNode) {
			nodes = append(nodes, n.Type+" "+n.Relation+" "+n.Index)
			if n.Index == tc.keyIndex {
				usedKey = true
			}
			if n.Relation == "jobs" && n.Index != "jobs_pkey" {
				t.Errorf("%s: reads jobs by %s %q", tc.name, n.Type, n.Index)
			}
		})
		if !usedKey {
			t.Errorf("%s: does not use %s: %s", tc.name, tc.keyIndex, strings.Join(nodes, "; "))
		}
	}
	// The lookups find the job (the plans above are of a real answer).
	if j, err := s.GetTenantJob(ctx, "acme", id); err != nil || j.ID != id {
		t.Fatalf("GetTenantJob: %s %v", j.ID, err)
	}
}

// The store's submissions tell jobs' insert trigger to skip a held key for
// their own transaction only: on the pool's connection afterwards the
// setting is gone, and a writer's held key is refused again.
func TestKeyConflictSkipStaysInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t)
	nj := newJob("v1-a")
	for range 2 { // created, then replayed (the key is held: skipped)
		if _, _, err := s.CreateJob(ctx, nj); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateJobs(ctx, []pipeline.NewJob{newJob("v1-b"), nj}); err != nil {
		t.Fatal(err)
	}
	var setting string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(current_setting('edgepipe.key_conflict', true), '')`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "" {
		t.Fatalf("edgepipe.key_conflict is %q on the pool's connection after the submissions, want unset", setting)
	}
	if _, err := rawInsertJob(ctx, s.pool, "raw-1", "acme", "raw-1", nj.IdempotencyKey); sqlState(err) != "23505" {
		t.Fatalf("a held key inserted on the pool's connection: %v, want a unique violation", err)
	}
}

// A database migrated before 0009 keeps its queue messages, which are then
// keyed by their job: the primary key is the unique index on job_id, the
// identity column has no index of its own, and the queue still works.
func TestMessageKeyMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, raw := databaseBefore(t, 9)
	for _, id := range []string{"v1-old1", "v1-old2"} {
		if _, err := rawInsertJob(ctx, raw, id, "alice", id, "k-"+id); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(ctx, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ('render-v1', $1, 0, 0)`, id); err != nil {
			t.Fatal(err)
		}
	}
	s := openTest(t, url, nil)
	if v, err := s.SchemaVersion(ctx); err != nil || v < 9 {
		t.Fatalf("schema version %d, %v", v, err)
	}
	rows, err := raw.Query(ctx, `SELECT indexrelid::regclass::text || CASE WHEN indisprimary THEN ' primary ' ELSE ' ' END ||
		regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', 'UNIQUE=' || indisunique::text || ' ') FROM pg_index WHERE indrelid = 'queue_messages'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"queue_messages_pkey primary UNIQUE=true btree (job_id)",
		"queue_messages_ready UNIQUE=false btree (queue, visible_at, id)",
	}
	if strings.Join(indexes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queue_messages' indexes after 0009:\n%s\nwant\n%s", strings.Join(indexes, "\n"), strings.Join(want, "\n"))
	}
	if _, err := raw.Exec(ctx, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ('render-v1', 'v1-old1', 0, 0)`); sqlState(err) != "23505" {
		t.Fatalf("a second message for a job: %v, want unique_violation", err)
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 10, LeaseFor: time.Minute})
	if err != nil || len(cs) != 2 {
		t.Fatalf("fetch after the migration: %d claimed, %v", len(cs), err)
	}
	for _, c := range cs {
		if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM queue_messages`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d messages left after both jobs settled (%v)", left, err)
	}
}

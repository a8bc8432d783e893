//go:build postgres

package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
	"edgepipe/storage/postgres"
	"edgepipe/storage/postgres/pgtest"
	"edgepipe/storage/sqlite"
	"edgepipe/storage/transfer"
)

var (
	_ transfer.Source = (*postgres.Store)(nil)
	_ transfer.Target = (*postgres.Store)(nil)
)

// freshDatabase is an empty database of its own for the test.
func freshDatabase(t *testing.T) string { return pgtest.FreshDatabase(t, "edgepipe_transfer_", false) }

func openPostgres(t *testing.T, dbURL string, clock pipeline.Clock) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Config{URL: dbURL, Clock: clock, MaxDeliveries: 3, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func postgresRows(t *testing.T, dbURL string) rowsQuerier {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func(ctx context.Context, table string) ([]string, [][]any, error) {
		rows, err := conn.Query(ctx, `SELECT * FROM `+table)
		if err != nil {
			return nil, nil, err
		}
		defer rows.Close()
		var cols []string
		for _, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
		var out [][]any
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, nil, err
			}
			out = append(out, vals)
		}
		return cols, out, rows.Err()
	}
}

// The migration users need: a SQLite store with real history is checked,
// exported, imported into a fresh Postgres, checked again; every table
// matches row by row (both read through raw SQL), the sequences go on past
// every id the source handed out, and an SSE cursor from before resumes at
// the same event. Then back: Postgres → SQLite gives the same rows again.
func TestSQLiteToPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := buildHistory(t)
	mustCheck(t, h.store, h.objects, h.clock, "the SQLite source")
	file := exportOf(t, h.store)

	dbURL := freshDatabase(t)
	pg := openPostgres(t, dbURL, h.clock) // what edgepipe migrate does
	if _, err := transfer.Import(ctx, pg, bytes.NewReader(file)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, pg, h.objects, h.clock, "the Postgres target")
	sqliteDump := dumpWith(t, sqliteRows(t, h.path))
	sameRows(t, sqliteDump, dumpWith(t, postgresRows(t, dbURL)))
	resumes(t, pg, h)

	// Every id sequence is past what the source handed out: the next
	// event, call, message, dead letter and delivery get new ids.
	raw := postgresRows(t, dbURL)
	for table, v := range sqliteSequences(t, h.path) {
		_, rows, err := raw(ctx, `(SELECT last_value, is_called FROM `+seqName(t, dbURL, table)+`) s`)
		if err != nil || len(rows) != 1 {
			t.Fatalf("sequence of %s: %v", table, err)
		}
		if last := rows[0][0].(int64); last < v || !rows[0][1].(bool) {
			t.Errorf("sequence of %s at %d (called %v), the source handed out %d", table, last, rows[0][1], v)
		}
	}
	if _, _, err := pg.CreateJob(ctx, pipeline.NewJob{ID: "v1-after", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "key-after", RequestFingerprint: "fp", Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatalf("a new job on the imported store: %v", err)
	}
	evs, err := pg.Events(ctx, "v1-after", 0, 10)
	if err != nil || len(evs) != 1 || evs[0].ID <= h.next {
		t.Fatalf("new job's events %+v (%v), want ids after %d", evs, err, h.next)
	}

	// The terminal wall still stands after the import.
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `UPDATE jobs SET status = 'pending' WHERE id = 'v1-ok'`); err == nil {
		t.Fatal("an imported succeeded job could be moved back to pending")
	}

	// A second import into the now non-empty Postgres is refused.
	if _, err := transfer.Import(ctx, pg, bytes.NewReader(file)); !errors.Is(err, transfer.ErrNotEmpty) {
		t.Fatalf("second import: %v", err)
	}

	// And back: Postgres → SQLite.
	back := exportOf(t, pg)
	path := filepath.Join(t.TempDir(), "back.db")
	sq, err := sqlite.Open(ctx, sqlite.Config{Path: path, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	if _, err := transfer.Import(ctx, sq, bytes.NewReader(back)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, sq, h.objects, h.clock, "the SQLite store back from Postgres")
	sameRows(t, dumpWith(t, postgresRows(t, dbURL)), dumpWith(t, sqliteRows(t, path)))
}

func seqName(t *testing.T, dbURL, table string) string {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var name string
	if err := c.QueryRow(context.Background(), `SELECT pg_get_serial_sequence($1, 'id')`, table).Scan(&name); err != nil {
		t.Fatalf("sequence of %s: %v", table, err)
	}
	return name
}

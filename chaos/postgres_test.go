//go:build chaos

package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/storage/postgres/pgtest"
)

// freshDatabase creates an empty database for one cluster on the server of
// EDGEPIPE_TEST_DATABASE_URL and returns its URL. It is dropped when the
// test ends (after its processes, whose cleanups run first), unless
// CHAOS_LOG_DIR asks to keep everything for a post-mortem.
func freshDatabase(t testing.TB) string {
	t.Helper()
	u := pgtest.FreshDatabase(t, "chaos_", logRoot != "")
	t.Logf("job store: Postgres database %s", u[strings.LastIndex(u, "/")+1:])
	return u
}

// sqliteOnly skips a test that breaks the SQLite file itself when the
// suites run on Postgres (CHAOS_STORE=postgres).
func sqliteOnly(t testing.TB) {
	t.Helper()
	if storeKind != "sqlite" {
		t.Skipf("SKIPPING on %s: this test breaks the embedded SQLite file", storeKind)
	}
}

// connect opens a connection to a cluster's database for a test to read.
func connect(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

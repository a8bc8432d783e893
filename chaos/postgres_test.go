//go:build chaos

package chaos

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testDatabaseURL is the Postgres server the suites create their databases
// on (scripts/postgres.sh start exports it).
func testDatabaseURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("EDGEPIPE_TEST_DATABASE_URL")
	if admin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("EDGEPIPE_TEST_DATABASE_URL is not set and CI is: the Postgres chaos suites must run (eval \"$(scripts/postgres.sh start)\")")
		}
		t.Skip("SKIPPING: EDGEPIPE_TEST_DATABASE_URL is not set (eval \"$(scripts/postgres.sh start)\")")
	}
	return admin
}

// freshDatabase creates an empty database for one cluster on the server of
// EDGEPIPE_TEST_DATABASE_URL and returns its URL. It is dropped when the
// test ends (after its processes, whose cleanups run first), unless
// CHAOS_LOG_DIR asks to keep everything for a post-mortem.
func freshDatabase(t testing.TB) string {
	t.Helper()
	admin := testDatabaseURL(t)
	name := "chaos_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	if logRoot == "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := pgx.Connect(ctx, admin); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
				c.Close(ctx)
			}
		})
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("EDGEPIPE_TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	t.Logf("job store: Postgres database %s", name)
	return u.String()
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

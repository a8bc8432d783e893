// Package pgtest gives tests a throwaway PostgreSQL database on the server
// EDGEPIPE_TEST_DATABASE_URL names (scripts/postgres.sh start prints it).
// Without a server a test skips, or fails when CI is set: a suite that
// cannot run must not pass CI. Every Postgres test of the project (the
// driver, transfer, internal/app, chaos) gets its database here.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the test server: a URL whose user may create databases.
const EnvURL = "EDGEPIPE_TEST_DATABASE_URL"

// ServerURL returns the test server's URL, skipping t without one (failing
// it when CI is set).
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set and CI is: the Postgres tests must run (eval \"$(scripts/postgres.sh start)\")", EnvURL)
		}
		t.Skipf("SKIPPING: %s is not set (eval \"$(scripts/postgres.sh start)\")", EnvURL)
	}
	return u
}

// FreshDatabase creates an empty database named prefix + 12 random hex
// digits on the test server and returns its URL. It is dropped when t
// ends unless keep is set (a post-mortem wants it).
func FreshDatabase(t testing.TB, prefix string, keep bool) string {
	t.Helper()
	admin := ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	if !keep {
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
		t.Fatalf("%s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

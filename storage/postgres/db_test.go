package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"edgepipe/pipeline"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {URL: "postgres://x/y", MaxConns: -1}, {URL: "postgres://x/y", MaxDeliveries: -1}} {
		if _, err := Open(context.Background(), c); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidInput", c, err)
		}
	}
	// A URL that cannot be parsed is refused without being quoted back
	// (it may hold a password).
	_, err := Open(context.Background(), Config{URL: "postgres://u:sekrit@%zz/db"})
	if !errors.Is(err, pipeline.ErrInvalidInput) || err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("bad URL: %v", err)
	}
}

// Driver errors become the package's and pipeline's sentinels once, at the
// boundary, keeping the original in the chain.
func TestTranslate(t *testing.T) {
	t.Parallel()
	pg := func(code, msg, constraint string) error {
		return fmt.Errorf("exec: %w", &pgconn.PgError{Code: code, Message: msg, ConstraintName: constraint})
	}
	for _, tt := range []struct {
		err  error
		want []error
	}{
		{pgx.ErrNoRows, []error{pipeline.ErrNotFound}},
		{pg("23505", "duplicate key", "jobs_pkey"), []error{ErrConstraint}},
		{pg("23514", "edgepipe: terminal job is immutable", ""), []error{ErrConstraint, pipeline.ErrTerminal}},
		{pg("23514", "edgepipe: invalid job status transition (succeeded > running)", ""), []error{ErrConstraint, pipeline.ErrInvalidTransition}},
		{pg("57P01", "terminating connection", ""), []error{ErrUnavailable}},
		{context.Canceled, []error{context.Canceled}},
	} {
		got := translate(tt.err)
		for _, w := range tt.want {
			if !errors.Is(got, w) {
				t.Errorf("translate(%v) = %v, want it to match %v", tt.err, got, w)
			}
		}
		if again := translate(got); again.Error() != got.Error() {
			t.Errorf("translating twice changed %q to %q", got, again)
		}
		var pe *pgconn.PgError
		if errors.As(tt.err, &pe) && !errors.As(got, &pe) {
			t.Errorf("translate(%v) lost the driver error", tt.err)
		}
	}
	if !retryable(pg("40P01", "deadlock detected", "")) || !retryable(pg("40001", "could not serialize", "")) || retryable(pg("23505", "", "")) {
		t.Error("retryable misjudges deadlocks and serialization failures")
	}
}

package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed (the committer's own lifecycle is tested in
// internal/groupcommit).
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-before"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.group.Started() {
		t.Fatal("Close returned with the group committer's service running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
}

// A panic inside a write transaction must reach the caller (and leave the
// store usable), not hang. Today inTx's deferred stmts.preparePending runs
// while the panicking transaction still holds the writer pool's only
// connection, and PrepareContext waits for that connection forever: every
// later write blocks too. Found while checking the surviving mutant
// deadletters.go `err != nil` → `err == nil` (a nil Result dereference in a
// transaction hung the test binary instead of failing it).
func TestPanicInTransactionDoesNotHang(t *testing.T) {
	t.Parallel()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_ = s.inTx(context.Background(), func(tx *wtx) error {
			var n int
			// A statement text no transaction used before, so it is pending.
			_ = tx.QueryRowContext(context.Background(), `SELECT count(*) FROM jobs WHERE id = 'panic-probe'`).Scan(&n)
			panic("boom")
		})
	}()
	select {
	case r := <-recovered:
		if r == nil {
			t.Fatal("the panic was swallowed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a panic inside inTx hung the store instead of reaching the caller")
	}
	// The store still takes writes.
	mustCreate(t, s, newJob("v1-after-panic"))
}

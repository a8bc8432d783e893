package sqlite

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed.
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-before"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.group.closed:
	default:
		t.Fatal("Close returned with the group committer still running")
	}
	if s.group.svc.Started() {
		t.Fatal("Close returned with the group committer's service running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
}

// The committer's lifecycle: Stop before Start and a second Stop are
// no-ops that leave it closed, a stopped committer cannot be started
// again, and requests queued when it stops are answered, not left waiting.
func TestCommitterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noCommit := func(batch []createReq) { t.Errorf("committed %d requests", len(batch)) }

	t.Run("stop before start", func(t *testing.T) {
		t.Parallel()
		c := newCommitter(noCommit)
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop before Start: %v", err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		if err := c.Start(ctx); !errors.Is(err, errClosed) {
			t.Fatalf("Start after Stop: %v, want errClosed", err)
		}
		if _, _, err := c.submit(ctx, newJob("v1-x")); !errors.Is(err, errClosed) {
			t.Fatalf("submit to a stopped committer: %v, want errClosed", err)
		}
	})

	t.Run("stop twice", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var committed int
		c := newCommitter(func(batch []createReq) {
			mu.Lock()
			committed += len(batch)
			mu.Unlock()
			for _, r := range batch {
				r.resp <- createResp{created: true}
			}
		})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err == nil {
			t.Fatal("a second Start succeeded")
		}
		if _, created, err := c.submit(ctx, newJob("v1-a")); err != nil || !created {
			t.Fatalf("submit: %v, %v", created, err)
		}
		var wg sync.WaitGroup
		for range 2 { // concurrent Stops: both return once the loop ended
			wg.Go(func() {
				if err := c.Stop(ctx); err != nil {
					t.Errorf("Stop: %v", err)
				}
				if c.svc.Started() {
					t.Error("Stop returned with the loop running")
				}
			})
		}
		wg.Wait()
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("third Stop: %v", err)
		}
		if _, _, err := c.submit(ctx, newJob("v1-b")); !errors.Is(err, errClosed) {
			t.Fatalf("submit after Stop: %v, want errClosed", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if committed != 1 {
			t.Fatalf("%d requests committed, want 1", committed)
		}
	})

	t.Run("queued requests are answered", func(t *testing.T) {
		t.Parallel()
		c := newCommitter(noCommit) // never started: requests stay queued
		r := createReq{ctx: ctx, nj: newJob("v1-q"), resp: make(chan createResp, 1)}
		c.reqs <- r
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-r.resp:
			if !errors.Is(res.err, errClosed) {
				t.Fatalf("queued request answered %v, want errClosed", res.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a queued request was left waiting")
		}
	})
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

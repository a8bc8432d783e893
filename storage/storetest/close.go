package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// testCloseAnswersSubmissions: Close with submissions in flight stops the
// group committer without losing one. Every CreateJob is answered (none is
// left waiting); one answered as created is in the database, one refused is
// not; after Close every submission is refused, and a second Close is a
// no-op.
func testCloseAnswersSubmissions(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	mustCreate(t, s, newJob("v1-before"))
	type answer struct {
		id      string
		created bool
		err     error
	}
	const n = 64
	answers := make(chan answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("v1-close-%02d", i)
			<-start
			_, created, err := s.CreateJob(ctx, newJob(id))
			answers <- answer{id: id, created: created, err: err}
		})
	}
	close(start)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a submission was left waiting after Close")
	}
	close(answers)
	for a := range answers {
		rows := countRows(t, s, `SELECT count(*) FROM jobs WHERE id = ?`, a.id)
		if (a.err == nil && (!a.created || rows != 1)) || (a.err != nil && rows != 0) {
			t.Errorf("%s answered created=%v err=%v, %d rows in the database", a.id, a.created, a.err, rows)
		}
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); err == nil {
		t.Fatal("CreateJob after Close succeeded")
	}
	if rows := countRows(t, s, `SELECT count(*) FROM jobs WHERE id = ?`, "v1-after"); rows != 0 {
		t.Fatalf("a job submitted after Close is in the database (%d rows)", rows)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

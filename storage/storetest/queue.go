package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func testPoisonMessageDeadLettered(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock) // MaxDeliveries 3
	mustCreate(t, s, newJob("v1-p"))
	for i := 1; i <= 3; i++ {
		c := fetchOne(t, s, "render-v1", "crashy")
		if c.Deliveries != i {
			t.Fatalf("delivery %d reported as %d", i, c.Deliveries)
		}
		clock.Advance(2 * time.Minute) // the worker died; its lease runs out
	}
	cs, st, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 10, LeaseFor: time.Minute})
	if err != nil || len(cs) != 0 || st.DeadLettered != 1 {
		t.Fatalf("fourth delivery: %+v %+v %v", cs, st, err)
	}
	j, _ := s.GetJob(ctx, "v1-p")
	if j.Status != pipeline.StatusDeadLettered || j.LastErrorCode != pipeline.ReasonPoison || !j.RequiresAction {
		t.Fatalf("poisoned job %+v", j)
	}
	dls, _ := s.ListDeadLetters(ctx, false, 0, 0)
	if len(dls) != 1 || dls[0].Reason != pipeline.ReasonPoison || dls[0].Queue != "render-v1" || dls[0].JobID != "v1-p" {
		t.Fatalf("dead letters %+v", dls)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

func testRedriveExactlyOnce(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	c := fetchOne(t, s, "render-v1", "w")
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted}); err != nil {
		t.Fatal(err)
	}
	dls, _ := s.ListDeadLetters(ctx, false, 0, 0)
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	// Concurrent redrives of the same dead letter: exactly one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v1", Operator: "op"}); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, pipeline.ErrInvalidTransition) {
				t.Errorf("redrive: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d redrives succeeded", wins.Load())
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE queue = 'render-v1' AND job_id = 'v1-a'`); n != 1 {
		t.Fatalf("%d messages after redrive, want 1", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM job_events WHERE kind = ?`, pipeline.EventRedriven); n != 1 {
		t.Fatalf("%d redrive events", n)
	}
	c2 := fetchOne(t, s, "render-v1", "w")
	if c2.Lease.Attempt != 1 {
		t.Fatalf("attempts not reset by redrive: %d", c2.Lease.Attempt)
	}
	open, _ := s.ListDeadLetters(ctx, false, 0, 0)
	all, _ := s.ListDeadLetters(ctx, true, 0, 0)
	if len(open) != 0 || len(all) != 1 || all[0].RedrivenToQueue != "render-v1" {
		t.Fatalf("open %+v all %+v", open, all)
	}
}

func testRedriveRefusesLiveJob(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	nj := newJob("v2-a")
	nj.Version, nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue = "v2", "", pipeline.ReasonUnboundVersion, "render-v2"
	mustCreate(t, s, nj)
	dls, _ := s.ListDeadLetters(ctx, false, 0, 0)
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "", Operator: "op"}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("redrive without queue: %v", err)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v1", Operator: "op"}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("redrive of a v2 job to v1's queue: %v", err)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: 999, Queue: "render-v2", Operator: "op"}); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("redrive of a missing dead letter: %v", err)
	}
	j, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v2", Operator: "op"})
	if err != nil || j.Status != pipeline.StatusPending || j.Queue != "render-v2" {
		t.Fatalf("redrive: %+v %v", j, err)
	}
}

func testCancel(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)

	// Pending: canceled at once, message gone.
	mustCreate(t, s, newJob("v1-p"))
	j, err := s.RequestCancel(ctx, "acme", "v1-p")
	if err != nil || j.Status != pipeline.StatusCanceled || j.CancelRequestedAt.IsZero() {
		t.Fatalf("cancel pending: %+v %v", j, err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id = 'v1-p'`); n != 0 {
		t.Fatal("canceled job still queued")
	}
	// Terminal: refused.
	if _, err := s.RequestCancel(ctx, "acme", "v1-p"); !errors.Is(err, pipeline.ErrTerminal) {
		t.Fatalf("cancel terminal: %v", err)
	}
	// Another tenant: not found.
	mustCreate(t, s, newJob("v1-r"))
	if _, err := s.RequestCancel(ctx, "globex", "v1-r"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("cross-tenant cancel: %v", err)
	}
	// Running: recorded, the attempt honours it.
	c := fetchOne(t, s, "render-v1", "w")
	j, err = s.RequestCancel(ctx, "acme", "v1-r")
	if err != nil || j.Status != pipeline.StatusRunning {
		t.Fatalf("cancel running: %+v %v", j, err)
	}
	if req, _ := s.CancelRequested(ctx, "v1-r"); !req {
		t.Fatal("cancel request not recorded")
	}
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusCanceled, ErrorClass: pipeline.ClassCanceled}); err != nil {
		t.Fatal(err)
	}
}

func testDecide(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	for i, d := range []pipeline.ReviewDecision{pipeline.DecisionRetry, pipeline.DecisionFail} {
		id := fmt.Sprintf("v1-d%d", i)
		mustCreate(t, s, newJob(id))
		if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: id, Decision: d, Operator: "op"}); !errors.Is(err, pipeline.ErrInvalidTransition) {
			t.Fatalf("decide on pending: %v", err)
		}
		c := fetchOne(t, s, "render-v1", "w")
		if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
			ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_ambiguous"}); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id = ?`, id); n != 0 {
			t.Fatal("needs_review job still has a message")
		}
		if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: id, Decision: "maybe", Operator: "op"}); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Fatalf("bad decision: %v", err)
		}
		j, err := s.Decide(ctx, &pipeline.DecideParams{JobID: id, Decision: d, Operator: "op"})
		if err != nil {
			t.Fatal(err)
		}
		switch d {
		case pipeline.DecisionRetry:
			if j.Status != pipeline.StatusPending || j.RequiresAction {
				t.Fatalf("retry: %+v", j)
			}
			c := fetchOne(t, s, "render-v1", "w")
			if c.Job.ID != id {
				t.Fatal("retried job not back on its queue")
			}
			_ = s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded})
		case pipeline.DecisionFail:
			if j.Status != pipeline.StatusFailed || j.LastErrorCode != "provider_ambiguous" {
				t.Fatalf("fail: %+v", j)
			}
		}
	}
}

func testWebhookOutboxWrittenWithSettlement(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	nj := newJob("v1-w")
	nj.WebhookURL = "https://example.test/hook"
	mustCreate(t, s, nj)
	c := fetchOne(t, s, "render-v1", "w")
	if n := countRows(t, s, `SELECT count(*) FROM webhook_outbox`); n != 0 {
		t.Fatal("webhook written before the job settled")
	}
	_ = s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded})
	if n := countRows(t, s, `SELECT count(*) FROM webhook_outbox WHERE job_id = 'v1-w' AND status = 'pending'`); n != 1 {
		t.Fatalf("%d webhook deliveries", n)
	}
}

func testReleaseDoesNotCountAttempt(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-a"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.Release(ctx, c.Lease); err != nil {
		t.Fatal(err)
	}
	c2 := fetchOne(t, s, "render-v1", "w2")
	if c2.Lease.Attempt != 1 {
		t.Fatalf("released attempt counted: attempt %d", c2.Lease.Attempt)
	}
}

// Two *sql.DB on one file, 8 goroutines each, one queue of 2,000 messages:
// every job completes exactly once and no message is lost.
func testConcurrentConsumersTwoHandles(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	n := 2000
	if testing.Short() {
		n = 300
	}
	a := h.open(t, nil)
	b := h.openOn(t, a.name, nil)
	for i := range n {
		mustCreate(t, a, newJob(fmt.Sprintf("v1-%05d", i)))
	}
	var completed sync.Map
	var dupes atomic.Int32
	var wg sync.WaitGroup
	for w := range 16 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for idle < 20 {
				cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: fmt.Sprintf("w%d", w), Max: 8, LeaseFor: time.Minute})
				if err != nil {
					t.Errorf("fetch: %v", err)
					return
				}
				if len(cs) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				for _, c := range cs {
					if _, loaded := completed.LoadOrStore(c.Job.ID, w); loaded {
						dupes.Add(1)
					}
					if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
						t.Errorf("finish %s: %v", c.Job.ID, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if dupes.Load() != 0 {
		t.Fatalf("%d jobs claimed twice", dupes.Load())
	}
	got := 0
	completed.Range(func(any, any) bool { got++; return true })
	if got != n {
		t.Fatalf("%d of %d jobs completed", got, n)
	}
	if c := countRows(t, a, `SELECT count(*) FROM jobs WHERE status = 'succeeded' AND attempts = 1`); c != n {
		t.Fatalf("%d jobs succeeded on their first attempt, want %d", c, n)
	}
	if c := countRows(t, a, `SELECT count(*) FROM queue_messages`); c != 0 {
		t.Fatalf("%d messages left", c)
	}
	if c := countRows(t, a, `SELECT count(*) FROM job_events WHERE to_status = 'succeeded'`); c != n {
		t.Fatalf("%d success events", c)
	}
}

// Fetch refuses a batch size or lease that is not positive, and an empty owner.
func testFetchArguments(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-args"))
	for _, tt := range []struct {
		owner string
		max   int
		lease time.Duration
	}{
		{"w", 0, time.Minute}, {"w", -1, time.Minute}, {"w", 1, 0}, {"w", 1, -time.Second}, {"", 1, time.Minute},
	} {
		cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: tt.owner, Max: tt.max, LeaseFor: tt.lease})
		if !errors.Is(err, pipeline.ErrInvalidInput) || len(cs) != 0 {
			t.Errorf("Fetch(owner=%q, max=%d, lease=%s) = %d claimed, %v; want ErrInvalidInput", tt.owner, tt.max, tt.lease, len(cs), err)
		}
	}
	// The smallest valid arguments claim the job.
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Millisecond})
	if err != nil || len(cs) != 1 {
		t.Fatalf("Fetch(max=1, lease=1ms) = %d claimed, %v", len(cs), err)
	}
}

// A message enqueued with a delay becomes visible only once the delay has
// passed.
func testEnqueueDelay(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	deadLettered(t, s, 1) // a job with no message of its own
	if err := s.Enqueue(ctx, "render-v2", "v2-dl000", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance        time.Duration
		total, visible int
	}{
		{0, 1, 0}, {59 * time.Second, 1, 0}, {time.Second, 1, 1},
	} {
		clock.Advance(step.advance)
		total, visible, err := s.QueueDepth(ctx, "render-v2")
		if err != nil || total != step.total || visible != step.visible {
			t.Fatalf("at %s: depth %d/%d visible, %v; want %d/%d", clock.Now().Sub(t0), visible, total, err, step.visible, step.total)
		}
	}
}

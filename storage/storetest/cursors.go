package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// An SSE client resumes from the last event id it saw (Last-Event-ID). That
// is only sound if a job's event ids grow in commit order: a reader polling
// while writers append concurrently must see every event, each once, in id
// order — never skip one committed later under a smaller id.
func testEventCursorSeesEveryEvent(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	mustCreate(t, s, newJob("v1-sse"))
	c := fetchOne(t, s, "render-v1", "w")
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- s.AppendEvent(ctx, c.Lease, pipeline.EventUnitGenerated, map[string]any{"w": w, "i": i})
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var seen []int64
	last := int64(0)
	poll := func() {
		evs, err := s.Events(ctx, "v1-sse", last, 7)
		if err != nil {
			t.Error(err)
			return
		}
		for _, e := range evs {
			seen = append(seen, e.ID)
			last = e.ID
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		poll()
	}
	for before := -1; before != len(seen); {
		before = len(seen)
		poll()
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	total := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id = 'v1-sse'`)
	if len(seen) != total {
		t.Fatalf("the cursor reader saw %d events of %d", len(seen), total)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("event ids out of order at %d: %v", i, seen[i-1:i+1])
		}
	}
	// A page after the last id is empty; limit pages.
	if evs, err := s.Events(ctx, "v1-sse", last, 0); err != nil || len(evs) != 0 {
		t.Fatalf("after the last event: %d, %v", len(evs), err)
	}
	if evs, err := s.Events(ctx, "v1-sse", 0, 3); err != nil || len(evs) != 3 || evs[0].Kind != pipeline.EventCreated {
		t.Fatalf("first page: %+v, %v", evs, err)
	}
}

// QueueStats reports messages, ready ones and the oldest ready one's wait,
// against the store's clock.
func testQueueStats(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	clock.Advance(5 * time.Second)
	mustCreate(t, s, newJob("v1-b"))
	if err := s.Enqueue(ctx, "render-v1", "v1-b", time.Minute); err != nil { // merged: stays visible now
		t.Fatal(err)
	}
	nj := newJob("v2-c")
	nj.Version, nj.Queue = "v2", "render-v2"
	mustCreate(t, s, nj)
	c := fetchOne(t, s, "render-v2", "w") // leased: its message is hidden
	clock.Advance(3 * time.Second)
	type stat struct {
		messages, ready int
		age             time.Duration
	}
	got := map[string]stat{}
	if err := s.QueueStats(ctx, func(q string, m, r int, age time.Duration) { got[q] = stat{m, r, age} }); err != nil {
		t.Fatal(err)
	}
	want := map[string]stat{"render-v1": {2, 2, 8 * time.Second}, "render-v2": {1, 0, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queue stats %v, want %v", got, want)
	}
	if total, visible, err := s.QueueDepth(ctx, "render-v1"); err != nil || total != 2 || visible != 2 {
		t.Fatalf("depth %d/%d, %v", total, visible, err)
	}
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
}

// An abandon and a new claim on the same key, racing for real: in any
// serial order either the new claim is refused (the cleanup came first) or
// the cleanup leaves the object alone (the claim came first). Both
// succeeding — the object deleted under a claim that will commit it — is
// the race docs/design.md §7 forbids.
func testAbandonRacesNewClaim(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	const rounds = 40
	for i := range rounds {
		mustCreate(t, s, newJob(fmt.Sprintf("v1-r%03da", i)))
		mustCreate(t, s, newJob(fmt.Sprintf("v1-r%03db", i)))
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2 * rounds, LeaseFor: time.Hour})
	if err != nil || len(cs) != 2*rounds {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	for i := range rounds {
		a, b := cs[2*i].Lease, cs[2*i+1].Lease
		key := fmt.Sprintf("units/v1/aa/race-%03d.png", i)
		if err := s.ClaimObject(ctx, a, key); err != nil {
			t.Fatal(err)
		}
		var (
			wg       sync.WaitGroup
			deleted  bool
			claimErr error
			abErr    error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; deleted, abErr = s.AbandonClaim(ctx, a.AttemptID, key) }()
		go func() { defer wg.Done(); <-start; claimErr = s.ClaimObject(ctx, b, key) }()
		close(start)
		wg.Wait()
		if abErr != nil || (claimErr != nil && !errors.Is(claimErr, pipeline.ErrClaimConflict)) {
			t.Fatalf("round %d: abandon %v, claim %v", i, abErr, claimErr)
		}
		if deleted && claimErr == nil {
			t.Fatalf("round %d: the cleanup deletes %s while another attempt holds a fresh claim on it", i, key)
		}
	}
}

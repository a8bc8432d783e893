package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// The deployment's bindings are the union over live processes, and only a
// job no live process can run, idle long enough, is dead-lettered
// unbound_version (docs/design.md §4).
func testPresence(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	if err := s.AnnounceBindings(ctx, &pipeline.AnnounceBindingsParams{ProcessID: "p1", Role: "worker", Versions: []string{"v1"}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second)
	if err := s.AnnounceBindings(ctx, &pipeline.AnnounceBindingsParams{ProcessID: "p2", Role: "serve", Versions: []string{"v2", "v1"}}); err != nil {
		t.Fatal(err)
	}
	live, err := s.LiveBindings(ctx, &pipeline.LiveBindingsParams{Since: t0.Add(-time.Second)})
	if err != nil || !reflect.DeepEqual(live, []string{"v1", "v2"}) {
		t.Fatalf("live bindings %v, %v", live, err)
	}
	// p1's heartbeat is older than the cut-off.
	live, err = s.LiveBindings(ctx, &pipeline.LiveBindingsParams{Since: t0.Add(10 * time.Second)})
	if err != nil || !reflect.DeepEqual(live, []string{"v1", "v2"}) {
		t.Fatalf("live bindings after p1 went quiet %v, %v", live, err)
	}
	if err := s.WithdrawBindings(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	live, err = s.LiveBindings(ctx, &pipeline.LiveBindingsParams{Since: t0.Add(10 * time.Second)})
	if err != nil || len(live) != 0 {
		t.Fatalf("after p2 withdrew and p1 went quiet: %v, %v", live, err)
	}
	if _, err := s.LiveBindings(ctx, nil); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("nil params: %v", err)
	}
	if err := s.AnnounceBindings(ctx, &pipeline.AnnounceBindingsParams{Role: "worker"}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("no process id: %v", err)
	}
}

func testDeadLetterUnserved(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	v2 := func(id string) pipeline.NewJob {
		nj := newJob(id)
		nj.Version, nj.Queue = "v2", "render-v2"
		return nj
	}
	mustCreate(t, s, v2("v2-old"))
	mustCreate(t, s, v2("v2-waiting"))
	mustCreate(t, s, newJob("v1-old"))
	leased := fetchOne(t, s, "render-v2", "w") // v2-old is first in the queue
	clock.Advance(15 * time.Minute)
	mustCreate(t, s, v2("v2-new"))
	if _, err := s.DeadLetterUnserved(ctx, &pipeline.DeadLetterUnservedParams{Live: nil, IdleSince: t0}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("empty live set must be refused, it would condemn every job: %v", err)
	}
	n, err := s.DeadLetterUnserved(ctx, &pipeline.DeadLetterUnservedParams{Live: []string{"v1"}, IdleSince: clock.Now().Add(-10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// v2-old ran on a lease that has expired; v2-waiting waited pending;
	// v2-new is too recent; v1-old is served.
	if n != 2 {
		t.Fatalf("moved %d, want 2", n)
	}
	for id, want := range map[string]pipeline.Status{
		leased.Job.ID: pipeline.StatusDeadLettered, "v2-waiting": pipeline.StatusDeadLettered,
		"v2-new": pipeline.StatusPending, "v1-old": pipeline.StatusPending,
	} {
		if got := statusOf(t, s, id); got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
	if c := countRows(t, s, `SELECT count(*) FROM dead_letters WHERE reason = 'unbound_version' AND queue = 'render-v2'`); c != 2 {
		t.Fatalf("%d dead letters, want 2", c)
	}
	if c := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id IN ('v2-old', 'v2-waiting')`); c != 0 {
		t.Fatalf("dead-lettered jobs kept %d messages", c)
	}
	// The expired attempt is fenced out.
	if err := s.Finish(ctx, leased.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); !errors.Is(err, pipeline.ErrLeaseLost) {
		t.Fatalf("finish after dead-lettering: %v", err)
	}
}

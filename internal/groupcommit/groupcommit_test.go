package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

var errClosed = errors.New("test: store is closed")

func newJob(id string) pipeline.NewJob {
	return pipeline.NewJob{ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "key-" + id,
		RequestFingerprint: "fp-" + id, Version: "v1", Queue: "render-v1"}
}

// The committer's lifecycle: Stop before Start and a second Stop are
// no-ops that leave it closed, a stopped committer cannot be started
// again, and requests queued when it stops are answered, not left waiting.
// Both drivers run this Committer; their tests check that Close stops it.
func TestCommitterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noCommit := func(batch []Request) { t.Errorf("committed %d requests", len(batch)) }

	t.Run("stop before start", func(t *testing.T) {
		t.Parallel()
		c := New(noCommit, errClosed)
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop before Start: %v", err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		if err := c.Start(ctx); !errors.Is(err, errClosed) {
			t.Fatalf("Start after Stop: %v, want errClosed", err)
		}
		if _, _, err := c.Submit(ctx, newJob("v1-x")); !errors.Is(err, errClosed) {
			t.Fatalf("submit to a stopped committer: %v, want errClosed", err)
		}
	})

	t.Run("stop twice", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var committed int
		c := New(func(batch []Request) {
			mu.Lock()
			committed += len(batch)
			mu.Unlock()
			for _, r := range batch {
				r.Resp <- Response{Created: true}
			}
		}, errClosed)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err == nil {
			t.Fatal("a second Start succeeded")
		}
		if _, created, err := c.Submit(ctx, newJob("v1-a")); err != nil || !created {
			t.Fatalf("submit: %v, %v", created, err)
		}
		var wg sync.WaitGroup
		for range 2 { // concurrent Stops: both return once the loop ended
			wg.Go(func() {
				if err := c.Stop(ctx); err != nil {
					t.Errorf("Stop: %v", err)
				}
				if c.Started() {
					t.Error("Stop returned with the loop running")
				}
			})
		}
		wg.Wait()
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("third Stop: %v", err)
		}
		if _, _, err := c.Submit(ctx, newJob("v1-b")); !errors.Is(err, errClosed) {
			t.Fatalf("submit after Stop: %v, want errClosed", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if committed != 1 {
			t.Fatalf("%d requests committed, want 1", committed)
		}
	})

	t.Run("stop waits for the group in progress", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		finished := false
		c := New(func(batch []Request) {
			close(entered)
			<-release
			mu.Lock()
			finished = true
			mu.Unlock()
			for _, r := range batch {
				r.Resp <- Response{Created: true}
			}
		}, errClosed)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		answered := make(chan error, 1)
		go func() {
			_, _, err := c.Submit(ctx, newJob("v1-slow"))
			answered <- err
		}()
		<-entered
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(ctx) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while a group was being committed", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		done := finished
		mu.Unlock()
		if !done {
			t.Fatal("Stop returned before the group in progress was committed")
		}
		if err := <-answered; err != nil {
			t.Fatalf("the request in the last group: %v, want committed", err)
		}
	})

	t.Run("queued requests are answered", func(t *testing.T) {
		t.Parallel()
		c := New(noCommit, errClosed) // never started: requests stay queued
		r := Request{Ctx: ctx, Job: newJob("v1-q"), Resp: make(chan Response, 1)}
		c.reqs <- r
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-r.Resp:
			if !errors.Is(res.Err, errClosed) {
				t.Fatalf("queued request answered %v, want errClosed", res.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a queued request was left waiting")
		}
	})
}

// Requests queued while a group commits go into the next group together,
// never more than MaxGroup of them: the point of group commit is one
// transaction for many submissions, and the bound keeps a transaction
// short.
func TestCommitterGroupsQueuedRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	c := New(func(batch []Request) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		n := len(sizes)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release // hold the first group while the others queue up
		}
		for _, r := range batch {
			r.Resp <- Response{Created: true}
		}
	}, errClosed)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	var wg sync.WaitGroup
	submit := func(id string) {
		wg.Go(func() {
			if _, created, err := c.Submit(ctx, newJob(id)); err != nil || !created {
				t.Errorf("submit %s: %v, %v", id, created, err)
			}
		})
	}
	submit("v1-first")
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group was never committed")
	}
	const queued = MaxGroup + 10 // the queue holds MaxGroup; the rest wait to enqueue
	for i := range queued {
		submit("v1-q" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	// Wait until the queue is full, so the next group has MaxGroup to take.
	deadline := time.Now().Add(10 * time.Second)
	for len(c.reqs) < MaxGroup {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests queued", len(c.reqs))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range sizes {
		total += n
		if n > MaxGroup {
			t.Errorf("a group of %d requests, more than MaxGroup %d", n, MaxGroup)
		}
	}
	if total != queued+1 {
		t.Fatalf("%d requests committed, want %d (groups %v)", total, queued+1, sizes)
	}
	if len(sizes) < 2 || sizes[1] != MaxGroup {
		t.Errorf("groups %v: the second group should take the full queue of %d", sizes, MaxGroup)
	}
}

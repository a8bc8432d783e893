package sqlite

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// heard collects what a Store's listener was told.
type heard struct {
	mu     sync.Mutex
	queues []string
}

func (h *heard) wake(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queues = append(h.queues, queue)
}

// take returns what was heard since the last take.
func (h *heard) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues
	h.queues = nil
	return q
}

// A commit that makes a message visible now is announced to the listeners
// once, after it committed (a reader sees the message); a delayed
// message, a rolled-back transaction and a stopped listener hear nothing
// (storage/sqlite/wake.go).
func TestListenHearsCommitsThatMakeMessagesVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	var h, other heard
	// The listener reads through the read pool: after the commit, the
	// message it is told about is there and visible to everyone.
	stop := s.Listen(func(queue string) {
		if _, visible, err := s.QueueDepth(ctx, queue); err != nil || visible == 0 {
			t.Errorf("told about %s while a reader sees %d visible messages there (%v)", queue, visible, err)
		}
		h.wake(queue)
	})
	stopOther := s.Listen(other.wake)

	mustCreate(t, s, newJob("j1"))
	if got := h.take(); !slices.Equal(got, []string{"render-v1"}) {
		t.Fatalf("a submission was announced as %q, want once on render-v1", got)
	}
	if got := other.take(); !slices.Equal(got, []string{"render-v1"}) {
		t.Fatalf("a second listener heard %q, want render-v1", got)
	}

	// Delayed: nobody announces it (polling finds it when it is due).
	mustCreate(t, s, newJob("j2"))
	h.take()
	if err := s.Enqueue(ctx, "later", "j2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a message delayed by a minute was announced: %q", got)
	}
	if err := s.Enqueue(ctx, "now", "j2", 0); err != nil {
		t.Fatal(err)
	}
	if got := h.take(); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("an enqueue visible now was announced as %q", got)
	}

	// Rolled back: not announced, though the insert ran.
	boom := errors.New("boom")
	err := s.inTx(ctx, func(tx *wtx) error {
		if err := enqueue(ctx, tx, s.now(), "rolled", "j1", s.now()); err != nil {
			return err
		}
		if len(tx.visible) != 1 {
			t.Errorf("the transaction recorded %q", tx.visible)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("inTx: %v", err)
	}
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a rolled-back enqueue was announced: %q", got)
	}

	// A claim hides the message; releasing the job makes it visible again.
	claimed, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("fetch: %d claimed, %v", len(claimed), err)
	}
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a claim was announced: %q", got)
	}
	if err := s.Release(ctx, claimed[0].Lease); err != nil {
		t.Fatal(err)
	}
	if got := h.take(); !slices.Equal(got, []string{"render-v1"}) {
		t.Fatalf("a release was announced as %q, want render-v1", got)
	}

	other.take()
	stop()
	mustCreate(t, s, newJob("j3"))
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a stopped listener heard %q", got)
	}
	if got := other.take(); len(got) != 1 {
		t.Fatalf("the listener still registered heard %q, want one submission", got)
	}
	stopOther()
}

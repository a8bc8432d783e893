package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Rate limits shared by every worker (docs/design.md §6): a token bucket
// per (provider, operation) in the job store, concurrency slots that free
// themselves, and a pause (a 429's Retry-After) every taker honours.

// take asks s for a token of l and fails the test on an error.
func take(t *testing.T, s pipeline.RateLimitStore, l pipeline.RateLimit, holder string) pipeline.RateGrant {
	t.Helper()
	g, err := s.TakeRateToken(context.Background(), &pipeline.TakeRateTokenParams{Limit: l, Holder: holder, SlotTTL: time.Minute})
	if err != nil {
		t.Fatalf("take %s: %v", holder, err)
	}
	if !g.Granted && g.Wait <= 0 {
		t.Fatalf("take %s: refused without a wait: %+v", holder, g)
	}
	return g
}

// wantGrants takes n tokens in a row and fails unless each is granted.
func wantGrants(t *testing.T, s pipeline.RateLimitStore, l pipeline.RateLimit, n int, what string) []pipeline.RateGrant {
	t.Helper()
	var out []pipeline.RateGrant
	for i := range n {
		g := take(t, s, l, what)
		if !g.Granted {
			t.Fatalf("%s: token %d of %d refused (wait %s)", what, i+1, n, g.Wait)
		}
		out = append(out, g)
	}
	return out
}

// wantWait takes a token and fails unless it is refused with a wait in
// [lo, hi].
func wantWait(t *testing.T, s pipeline.RateLimitStore, l pipeline.RateLimit, lo, hi time.Duration, what string) {
	t.Helper()
	g := take(t, s, l, what)
	if g.Granted || g.Wait < lo || g.Wait > hi {
		t.Fatalf("%s: granted %v, wait %s; want refused with a wait in [%s, %s]", what, g.Granted, g.Wait, lo, hi)
	}
}

// The bucket starts full (Burst), refills at Requests per Per from the
// store's clock, and never holds more than Burst however long it rests.
func testRateTokensRefill(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	l := pipeline.RateLimit{Provider: "workers-ai", Op: pipeline.OpImage, Requests: 60, Per: time.Minute, Burst: 2}
	wantGrants(t, s, l, 2, "a full bucket")
	wantWait(t, s, l, time.Second, time.Second, "an empty bucket")
	clock.Advance(500 * time.Millisecond)
	wantWait(t, s, l, 500*time.Millisecond, 500*time.Millisecond, "half a token")
	clock.Advance(500 * time.Millisecond)
	wantGrants(t, s, l, 1, "a token refilled")
	wantWait(t, s, l, time.Second, time.Second, "the refilled token taken")
	// Another bucket is not this one.
	wantGrants(t, s, pipeline.RateLimit{Provider: "workers-ai", Op: pipeline.OpSpeech, Requests: 60, Per: time.Minute, Burst: 1}, 1, "another op's bucket")

	clock.Advance(time.Hour)
	wantGrants(t, s, l, 2, "after an hour's rest")
	wantWait(t, s, l, time.Second, time.Second, "capacity is the burst, not an hour's refill")
	var micro int64
	if err := s.db.QueryRow(context.Background(), `SELECT micro_tokens FROM rate_buckets WHERE provider = ? AND op = ?`, l.Provider, l.Op).Scan(&micro); err != nil || micro != 0 {
		t.Fatalf("stored micro-tokens %d (%v), want 0", micro, err)
	}
	for _, bad := range []*pipeline.TakeRateTokenParams{nil, {Limit: pipeline.RateLimit{Provider: "p", Op: "image"}},
		{Limit: pipeline.RateLimit{Provider: "p", Op: "image", Requests: 1, Per: time.Second, Burst: 1, Concurrency: 1}}} {
		if _, err := s.TakeRateToken(context.Background(), bad); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("take with %+v: %v, want ErrInvalidInput", bad, err)
		}
	}
}

// Concurrency slots: at most Concurrency granted at once, a released slot
// is free again at once, and a slot nobody released (a crashed process)
// frees itself at its expiry.
func testRateConcurrencySlots(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	l := pipeline.RateLimit{Provider: "replicate", Op: pipeline.OpVideoSubmit, Requests: 1000, Per: time.Second, Burst: 100, Concurrency: 2}
	gs := wantGrants(t, s, l, 2, "two slots")
	if gs[0].SlotID == 0 || gs[0].SlotID == gs[1].SlotID || !gs[0].SlotExpires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("slots %+v: want two distinct ids expiring a minute from now", gs)
	}
	wantWait(t, s, l, time.Millisecond, time.Minute, "both slots taken")
	if err := s.ReleaseRateSlot(ctx, &pipeline.ReleaseRateSlotParams{SlotID: gs[0].SlotID}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseRateSlot(ctx, &pipeline.ReleaseRateSlotParams{SlotID: gs[0].SlotID}); err != nil {
		t.Fatalf("a second release is no error: %v", err)
	}
	wantGrants(t, s, l, 1, "a released slot")
	wantWait(t, s, l, time.Millisecond, time.Minute, "both slots taken again")
	// Nobody releases: both slots expire a minute after they were taken.
	clock.Advance(time.Minute)
	wantGrants(t, s, l, 2, "expired slots")
	var rows int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM rate_slots`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("%d slot rows (%v), want the 2 live ones (expired slots are deleted)", rows, err)
	}
	// Without a concurrency bound no slot is taken.
	free := l
	free.Op, free.Concurrency = pipeline.OpImage, 0
	if g := wantGrants(t, s, free, 3, "no concurrency bound"); g[2].SlotID != 0 {
		t.Fatalf("a slot %d was taken without a bound", g[2].SlotID)
	}
}

// A pause (a 429's Retry-After) blocks every taker, on every handle, until
// it ends; a shorter pause does not shorten it.
func testRatePauseBlocksEveryone(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s1 := h.open(t, clock)
	s2 := h.openOn(t, s1.name, clock)
	l := pipeline.RateLimit{Provider: "workers-ai", Op: pipeline.OpImage, Requests: 100, Per: time.Second, Burst: 50}
	wantGrants(t, s2, l, 1, "before the pause")
	if err := s1.PauseRateBucket(ctx, &pipeline.PauseRateBucketParams{Limit: l, For: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s2.PauseRateBucket(ctx, &pipeline.PauseRateBucketParams{Limit: l, For: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wantWait(t, s2, l, 30*time.Second, 30*time.Second, "the other handle, paused")
	clock.Advance(29 * time.Second)
	wantWait(t, s1, l, time.Second, time.Second, "the pausing handle, a second before the end")
	clock.Advance(time.Second)
	wantGrants(t, s2, l, 1, "after the pause")
	wantGrants(t, s1, l, 1, "after the pause")
	// A pause of a bucket never taken from creates it, paused.
	other := pipeline.RateLimit{Provider: "replicate", Op: pipeline.OpImage, Requests: 1, Per: time.Second, Burst: 1}
	if err := s1.PauseRateBucket(ctx, &pipeline.PauseRateBucketParams{Limit: other, For: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wantWait(t, s2, other, 10*time.Second, 10*time.Second, "a bucket paused before its first take")
	if err := s1.PauseRateBucket(ctx, &pipeline.PauseRateBucketParams{Limit: l, For: -time.Second}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("negative pause: %v", err)
	}
}

// Two processes (two store handles on one database) share one bucket.
func testRateBucketSharedByTwoHandles(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s1 := h.open(t, clock)
	s2 := h.openOn(t, s1.name, clock)
	l := pipeline.RateLimit{Provider: "workers-ai", Op: pipeline.OpSpeech, Requests: 3, Per: time.Hour, Burst: 3, Concurrency: 2}
	a := wantGrants(t, s1, l, 1, "process 1")
	wantGrants(t, s2, l, 1, "process 2")
	wantWait(t, s1, l, time.Millisecond, time.Minute, "process 1, both slots held")
	if err := s2.ReleaseRateSlot(context.Background(), &pipeline.ReleaseRateSlotParams{SlotID: a[0].SlotID}); err != nil {
		t.Fatal(err)
	}
	wantGrants(t, s2, l, 1, "process 2 after process 1's slot was released")
	clock.Advance(time.Minute) // every slot expired; the bucket is still empty
	wantWait(t, s1, l, 19*time.Minute, 20*time.Minute, "process 1, the shared bucket empty")
	wantWait(t, s2, l, 19*time.Minute, 20*time.Minute, "process 2, the shared bucket empty")
}

// Concurrent takers on two handles never get more tokens than the bucket
// holds, nor more slots than its bound.
func testRateConcurrentTakersNeverExceedCapacity(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s1 := h.open(t, clock)
	s2 := h.openOn(t, s1.name, clock)
	for _, c := range []struct {
		name  string
		limit pipeline.RateLimit
		want  int
	}{
		{"tokens", pipeline.RateLimit{Provider: "p", Op: pipeline.OpImage, Requests: 1, Per: time.Hour, Burst: 5}, 5},
		{"slots", pipeline.RateLimit{Provider: "p", Op: pipeline.OpSpeech, Requests: 100, Per: time.Second, Burst: 100, Concurrency: 3}, 3},
	} {
		var mu sync.Mutex
		var wg sync.WaitGroup
		granted, errs := 0, []error{}
		for i := range 24 {
			s := s1.JobStore
			if i%2 == 1 {
				s = s2.JobStore
			}
			wg.Go(func() {
				g, err := s.TakeRateToken(context.Background(), &pipeline.TakeRateTokenParams{Limit: c.limit, Holder: "racer", SlotTTL: time.Minute})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if g.Granted {
					granted++
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 || granted != c.want {
			t.Fatalf("%s: %d of 24 concurrent takers granted (errors %v), want exactly %d", c.name, granted, errs, c.want)
		}
	}
}

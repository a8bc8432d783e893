package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// fakeLimiter is a RateLimitStore that refuses every token until opened.
type fakeLimiter struct {
	mu       sync.Mutex
	open     bool
	takes    []pipeline.TakeRateTokenParams
	released []int64
	pauses   []pipeline.PauseRateBucketParams
	// refused receives on every refusal. It is buffered so that a refusal
	// made before the test listens is not lost: with a long wait the unit
	// asks only once, and a dropped signal would leave the test waiting
	// for a take that never comes again.
	refused chan struct{}
	wait    time.Duration // of a refusal
	// releaseErr and pauseErr, when set, fail every release and pause.
	releaseErr, pauseErr error
}

func newFakeLimiter() *fakeLimiter {
	return &fakeLimiter{refused: make(chan struct{}, 1024), wait: 10 * time.Millisecond}
}

func (f *fakeLimiter) TakeRateToken(_ context.Context, p *pipeline.TakeRateTokenParams) (pipeline.RateGrant, error) {
	f.mu.Lock()
	f.takes = append(f.takes, *p)
	open := f.open
	f.mu.Unlock()
	if open {
		return pipeline.RateGrant{Granted: true, SlotID: 42, SlotExpires: t0.Add(p.SlotTTL)}, nil
	}
	select {
	case f.refused <- struct{}{}:
	default:
	}
	return pipeline.RateGrant{Wait: f.wait}, nil
}

func (f *fakeLimiter) ReleaseRateSlot(_ context.Context, p *pipeline.ReleaseRateSlotParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, p.SlotID)
	return f.releaseErr
}

func (f *fakeLimiter) PauseRateBucket(_ context.Context, p *pipeline.PauseRateBucketParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, *p)
	return f.pauseErr
}

func (f *fakeLimiter) setOpen() {
	f.mu.Lock()
	f.open = true
	f.mu.Unlock()
}

// imageLimit limits the harness's image calls (its provider is named
// "http", provider.DefaultName).
var imageLimit = pipeline.RateLimit{Provider: "http", Op: pipeline.OpImage, Requests: 1, Per: time.Second, Burst: 1, Concurrency: 1}

func withLimiter(s pipeline.RateLimitStore, limits ...pipeline.RateLimit) harnessOpt {
	return withConfig(func(c *pipeline.EngineConfig) {
		c.RateLimits = pipeline.RateLimits{Store: s, Limits: limits, Poll: 5 * time.Millisecond}
	})
}

// runResult is how a background attempt ended.
type runResult struct {
	o   pipeline.Outcome
	err error
}

// startAttempt claims the harness's one job and runs its attempt in the
// background under a context the returned cancel ends. Should the test
// fail while the unit waits, the cleanup ends the attempt (and opens fl)
// before the harness closes the store under it.
func startAttempt(t *testing.T, h *harness, fl *fakeLimiter) (pipeline.Claimed, context.CancelFunc, <-chan runResult) {
	t.Helper()
	cs, _, err := h.store.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %d claimed, %v", len(cs), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		o, err := h.engine.Run(ctx, cs[0])
		done <- runResult{o, err}
	}()
	t.Cleanup(func() { fl.setOpen(); cancel(); <-finished })
	return cs[0], cancel, done
}

// A unit waiting for a token is not an attempt and not a call: no
// provider_calls row exists and the attempt count stays where the claim
// put it until the token is granted; then the call is made once and its
// slot given back.
func TestRateLimitWaitIsNotAnAttemptNorACall(t *testing.T) {
	t.Parallel()
	fl := newFakeLimiter()
	h := newHarness(t, withLimiter(fl, imageLimit))
	h.submit("v1-rl", board(img("a lighthouse", "", 600)))
	ctx := context.Background()
	claimed, _, done := startAttempt(t, h, fl)
	for range 3 { // the unit asks again and again while it waits
		within(t, fl.refused, "a refused take")
	}
	calls, err := h.store.ProviderCalls(ctx, "v1-rl", pipeline.AllScenes, "")
	if err != nil || len(calls) != 0 {
		t.Fatalf("while waiting for a token: %d provider_calls rows (%v), want none", len(calls), err)
	}
	if j := h.job("v1-rl"); j.Attempts != 1 || j.Status != pipeline.StatusRunning {
		t.Fatalf("while waiting: attempts %d, status %s; want the claim's 1, running", j.Attempts, j.Status)
	}
	fl.setOpen()
	r := within(t, done, "the attempt")
	if r.err != nil || r.o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v, %v", r.o, r.err)
	}
	if err := h.store.Finish(ctx, claimed.Lease, r.o); err != nil {
		t.Fatal(err)
	}
	calls, err = h.store.ProviderCalls(ctx, "v1-rl", pipeline.AllScenes, "")
	if err != nil || len(calls) != 1 || calls[0].Op != pipeline.OpImage {
		t.Fatalf("after the grant: calls %+v (%v), want the one image call", calls, err)
	}
	if j := h.job("v1-rl"); j.Attempts != 1 {
		t.Fatalf("attempts %d after the wait, want 1", j.Attempts)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.released) != 1 || fl.released[0] != 42 {
		t.Fatalf("released slots %v, want the granted slot 42 once", fl.released)
	}
	if p := fl.takes[0]; p.Limit != imageLimit || p.SlotTTL != pipeline.DefaultRateSlotTTL || p.Holder == "" {
		t.Fatalf("take params %+v", p)
	}
}

// The wait ends with the attempt's context (shutdown, a lost lease: the
// attempt is interrupted and nothing is recorded) or with the job's
// cancellation, even in the middle of a long wait; no call row exists.
func TestRateLimitWaitEndsWithTheAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		cancel bool // the job (else the attempt's context)
	}{{"attempt interrupted", false}, {"job canceled", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fl := newFakeLimiter()
			fl.wait = time.Hour
			h := newHarness(t, withLimiter(fl, imageLimit))
			h.submit("v1-rl-stop", board(img("a lighthouse", "", 600)))
			ctx := context.Background()
			_, cancel, done := startAttempt(t, h, fl)
			within(t, fl.refused, "a refused take")
			if c.cancel {
				if _, err := h.store.RequestCancel(ctx, "acme", "v1-rl-stop"); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			r := within(t, done, "the attempt")
			switch {
			case c.cancel && (r.err != nil || r.o.Status != pipeline.StatusCanceled):
				t.Fatalf("canceled while waiting: %+v, %v; want canceled", r.o, r.err)
			case !c.cancel && r.err == nil:
				t.Fatalf("an attempt stopped while waiting for a token returned an outcome: %+v", r.o)
			}
			if calls, err := h.store.ProviderCalls(ctx, "v1-rl-stop", pipeline.AllScenes, ""); err != nil || len(calls) != 0 {
				t.Fatalf("%d provider_calls rows (%v), want none", len(calls), err)
			}
		})
	}
}

// A 429 with Retry-After pauses the bucket for every worker (in the job
// store every process shares), on top of the job's own retry.
func TestRateLimit429PausesTheSharedBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFaults("image:rate_limit=7s@1", 3), withConfig(func(c *pipeline.EngineConfig) {
		// The harness's own SQLite store is the shared limiter.
		c.RateLimits = pipeline.RateLimits{Store: c.Store.(pipeline.RateLimitStore), Limits: []pipeline.RateLimit{imageLimit}, Poll: 5 * time.Millisecond}
	}))
	h.submit("v1-429", board(img("a lighthouse", "", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_rate_limited" {
		t.Fatalf("outcome %+v, %v; want retry_wait provider_rate_limited", o, err)
	}
	// Another process asking the bucket now must wait for the Retry-After.
	g, err := h.store.TakeRateToken(context.Background(), &pipeline.TakeRateTokenParams{Limit: imageLimit, Holder: "another", SlotTTL: time.Minute})
	if err != nil || g.Granted || g.Wait != 7*time.Second {
		t.Fatalf("take after the 429: %+v, %v; want refused for the 7s Retry-After", g, err)
	}
	h.clock.Advance(7 * time.Second)
	g, err = h.store.TakeRateToken(context.Background(), &pipeline.TakeRateTokenParams{Limit: imageLimit, Holder: "another", SlotTTL: time.Minute})
	if err != nil || !g.Granted {
		t.Fatalf("take after the pause: %+v, %v; want granted (the 429's slot released)", g, err)
	}
}

// Only configured buckets are asked: a call whose (provider, op) has no
// limit never touches the limiter's store.
func TestRateLimitOtherBucketsNeverAsked(t *testing.T) {
	t.Parallel()
	fl := newFakeLimiter()
	other := imageLimit
	other.Provider = "workers-ai"
	h := newHarness(t, withLimiter(fl, other))
	h.submit("v1-free", board(img("a lighthouse", "and a narration", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.takes)+len(fl.released)+len(fl.pauses) != 0 {
		t.Fatalf("limiter asked %d/%d/%d times for an unlimited provider", len(fl.takes), len(fl.released), len(fl.pauses))
	}
}

// A unit waiting for a token keeps its job's lease: the worker heartbeats
// through the wait as through any other, so a wait longer than the lease
// is not mistaken for a dead worker, and the job ends in its one attempt.
func TestRateLimitWaitKeepsTheLease(t *testing.T) {
	t.Parallel()
	fl := newFakeLimiter()
	h := newHarness(t, withLimiter(fl, imageLimit))
	h.submit("v1-rl-lease", board(img("a lighthouse", "", 600)))
	w := newWorker(t, h, 1) // a 3s lease, heartbeats every second
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fl.setOpen(); _ = w.Stop(context.Background()) })
	within(t, fl.refused, "a refused take")
	// Five seconds of store time, one a second, while the heartbeat renews
	// the 3s lease every second: without it the lease would lapse.
	for range 5 {
		time.Sleep(time.Second)
		h.clock.Advance(time.Second)
	}
	ctx := context.Background()
	if cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "thief", Max: 1, LeaseFor: time.Minute}); err != nil || len(cs) != 0 {
		t.Fatalf("another worker took the waiting job over (%d claimed, %v): its lease lapsed during the wait", len(cs), err)
	}
	fl.setOpen()
	waitFor(t, "the job settled", func() bool { return h.job("v1-rl-lease").Status.Settled() })
	if j := h.job("v1-rl-lease"); j.Status != pipeline.StatusSucceeded || j.Attempts != 1 {
		t.Fatalf("%s after %d attempts; want succeeded in 1", j.Status, j.Attempts)
	}
}

// A 429 pauses the bucket only when it says for how long (Retry-After),
// and the limiter's store failing to release a slot or to pause a bucket
// costs the attempt nothing: the slot frees itself at its expiry, the
// pause is only a courtesy to the other workers. Both failures are logged;
// nothing is logged as failed when the store took them.
func TestRateLimitStoreFailuresAreOnlyLogged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		retryAfter time.Duration
		storeFails bool
		wantPauses int
		wantLogs   []string
		wantNoLogs []string
	}{
		{"429 without Retry-After", 0, false, 0, nil, []string{"releasing a slot failed", "paus"}},
		{"429 with Retry-After", 3 * time.Second, false, 1, []string{"bucket paused for every worker"}, []string{"releasing a slot failed", "pausing the bucket after a 429 failed"}},
		{"store refuses both", 3 * time.Second, true, 1, []string{"releasing a slot failed", "pausing the bucket after a 429 failed"}, []string{"bucket paused for every worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fl := newFakeLimiter()
			fl.setOpen()
			if c.storeFails {
				fl.releaseErr, fl.pauseErr = errors.New("database is locked"), errors.New("database is locked")
			}
			var logs syncBuffer
			h := newHarness(t, withLimiter(fl, imageLimit),
				withConfig(func(ec *pipeline.EngineConfig) {
					ec.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
				}),
				withProviders(func(pipeline.Providers) pipeline.Providers {
					return &hookProviders{before: func(_ context.Context, op, _ string) error {
						if op != pipeline.OpImage {
							return nil
						}
						return &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRateLimited, HTTPStatus: 429, RetryAfter: c.retryAfter,
							Code: "provider_rate_limited", Cause: errors.New("429 Too Many Requests")}
					}}
				}))
			h.submit("v1-rl-store", board(img("a lighthouse", "", 600)))
			if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_rate_limited" {
				t.Fatalf("outcome %+v, %v; want retry_wait provider_rate_limited", o, err)
			}
			fl.mu.Lock()
			pauses, released := len(fl.pauses), len(fl.released)
			fl.mu.Unlock()
			if pauses != c.wantPauses || released != 1 {
				t.Fatalf("%d pauses and %d releases, want %d and 1", pauses, released, c.wantPauses)
			}
			out := logs.String()
			for _, w := range c.wantLogs {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.wantNoLogs {
				if strings.Contains(out, w) {
					t.Errorf("log has %q:\n%s", w, out)
				}
			}
		})
	}
}

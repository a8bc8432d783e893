package pipeline_test

// Engine tests written from surviving mutants of `make mutation` (gremlins):
// each checks that an EngineConfig setting is honoured when given and
// defaulted when left zero, which no other test observed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider/fake"
)

var errTransientFP = &pipeline.ClassifiedError{Class: pipeline.ClassTransient, Code: "test_transient", Message: "injected"}

// runOnce claims the job on render-v1 with a long lease (so a test may move
// the clock by minutes) and runs one attempt without recording its outcome.
func runOnce(t *testing.T, h *harness) (pipeline.Claimed, pipeline.Outcome) {
	t.Helper()
	ctx := context.Background()
	cs, _, err := h.store.Fetch(ctx, "render-v1", "test-worker", 1, time.Hour)
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %d claimed, %v", len(cs), err)
	}
	rctx, cancel := context.WithTimeout(ctx, attemptDeadline)
	defer cancel()
	o, err := h.engine.Run(rctx, cs[0])
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return cs[0], o
}

func withConfig(f func(*pipeline.EngineConfig)) harnessOpt {
	return func(ec *pipeline.EngineConfig, _ *fake.Config) { f(ec) }
}

// A transient failure is rescheduled by the configured policy, on the
// configured clock: attempt 1 with Base 1 s and a jitter draw of 0.5 waits
// exactly 500 ms from the manual clock's now.
func TestEngineUsesConfiguredRetryPolicyAndClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry = pipeline.RetryPolicy{Base: time.Second, Cap: 10 * time.Second, MaxAttempts: 2, Rand: func() float64 { return 0.5 }}
	}))
	h.submit("v1-retry", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "test_transient" {
		t.Fatalf("outcome %+v, want retry_wait test_transient", o)
	}
	if want := t0.Add(500 * time.Millisecond); !o.NextRunAt.Equal(want) {
		t.Fatalf("NextRunAt = %s, want %s (policy Base 1s, jitter 0.5, manual clock)", o.NextRunAt, want)
	}
	// MaxAttempts 2: the second transient failure dead-letters the job.
	h.clock.Advance(time.Second)
	_, o, err = h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusDeadLettered || o.Reason != pipeline.ReasonRetriesExhausted {
		t.Fatalf("second outcome %+v, want dead_lettered retries_exhausted", o)
	}
}

// A zero RetryPolicy means the default one (5 attempts), not "never retry".
func TestEngineZeroRetryPolicyIsDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Retry = pipeline.RetryPolicy{} }))
	h.submit("v1-zero", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	for attempt := 1; attempt <= 4; attempt++ {
		c, o := runOnce(t, h)
		if o.Status != pipeline.StatusRetryWait {
			t.Fatalf("attempt %d: %+v, want retry_wait (default policy retries 5 times)", attempt, o)
		}
		d := o.NextRunAt.Sub(h.clock.Now())
		if ceiling := pipeline.DefaultRetryPolicy().Ceiling(attempt); d < 0 || d > ceiling {
			t.Fatalf("attempt %d: backoff %s outside the default policy's [0, %s]", attempt, d, ceiling)
		}
		if err := h.store.Finish(context.Background(), c.Lease, o); err != nil {
			t.Fatalf("finish: %v", err)
		}
		h.clock.Set(o.NextRunAt.Add(time.Millisecond))
	}
	if _, o := runOnce(t, h); o.Status != pipeline.StatusDeadLettered {
		t.Fatalf("attempt 5: %+v, want dead_lettered", o)
	}
}

// syncBuffer is an io.Writer safe for the engine's concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The configured logger receives the engine's records; none configured
// means a discarding one, never a nil-pointer panic.
func TestEngineLogger(t *testing.T) {
	t.Parallel()
	t.Run("configured", func(t *testing.T) {
		t.Parallel()
		var buf syncBuffer
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
			ec.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}))
		h.submit("v1-logged", board(img("a lighthouse", "", 600)))
		h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
		if _, _, err := h.attempt("render-v1", true); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, "attempt failed") || !strings.Contains(out, "v1-logged") {
			t.Fatalf("log output %q lacks the failed attempt of v1-logged", out)
		}
	})
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Logger = nil }))
		h.submit("v1-quiet", board(img("a lighthouse", "", 600)))
		h.fp.set("after_claim", once(errTransientFP))
		if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
			t.Fatalf("failing attempt: %+v, %v", o, err)
		}
		h.drain(5)
		if st := h.job("v1-quiet").Status; st != pipeline.StatusSucceeded {
			t.Fatalf("job ended %s, want succeeded", st)
		}
	})
}

// Scratch space is made under the configured TempDir: when it cannot be
// made there the attempt fails as a transient local-disk error instead of
// silently using another disk.
func TestEngineTempDirHonoured(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.TempDir = missing }))
	h.submit("v1-tmp", board(img("a lighthouse", "", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "local_disk_error" {
		t.Fatalf("outcome %+v, want retry_wait local_disk_error", o)
	}
}

// concurrencyProbe counts image calls in flight. Each call waits (up to
// 300 ms) for one more call than the limit to join it, so a loose limit is
// seen for certain and a correct one costs 300 ms per round.
type concurrencyProbe struct {
	limit         int32
	inFlight, max atomic.Int32
}

func (p *concurrencyProbe) before(ctx context.Context, op, _ string) error {
	if op != pipeline.OpImage {
		return nil
	}
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			break
		}
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for p.inFlight.Load() <= p.limit && time.Now().Before(deadline) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// UnitConcurrency bounds the scenes generated at once; zero means 4.
func TestEngineUnitConcurrency(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		configured int
		limit      int32
	}{
		{"configured 2", 2, 2},
		{"default", 0, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probe := &concurrencyProbe{limit: tt.limit}
			h := newHarness(t,
				withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = tt.configured }),
				withProviders(func(pipeline.Providers) pipeline.Providers { return &hookProviders{before: probe.before} }))
			var scenes []pipeline.Scene
			for i := range 8 {
				scenes = append(scenes, img(strings.Repeat("x", i+1), "", 600))
			}
			h.submit("v1-conc", board(scenes...))
			if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
				t.Fatalf("attempt: %+v, %v", o, err)
			}
			if got := probe.max.Load(); got > tt.limit || got < 2 {
				t.Fatalf("%d image calls ran at once, want between 2 and %d", got, tt.limit)
			}
		})
	}
}

// stallProviders submits videos that never finish, moving the manual clock
// by step on every status poll.
type stallProviders struct {
	pipeline.Providers
	clock atomic.Pointer[pipeline.ManualClock]
	step  time.Duration
	polls atomic.Int32
	fail  bool // every status poll fails
}

func (p *stallProviders) setInner(in pipeline.Providers) { p.Providers = in }

func (p *stallProviders) SubmitVideo(context.Context, pipeline.CallMeta, pipeline.VideoRequest) (string, error) {
	return "stalled-video", nil
}

// errPollLimit ends a run that polls far past any expected deadline quickly,
// as a poll failure the test then reports, instead of letting it spin.
var errPollLimit = errors.New("poll limit reached")

func (p *stallProviders) VideoStatus(context.Context, string) (pipeline.VideoState, error) {
	if p.polls.Add(1) > 20 || p.fail {
		return pipeline.VideoState{}, errPollLimit
	}
	p.clock.Load().Advance(p.step)
	return pipeline.VideoState{}, nil
}

func (p *stallProviders) FetchVideo(context.Context, string) (pipeline.Media, error) {
	return pipeline.Media{Body: io.NopCloser(strings.NewReader(""))}, errors.New("never done")
}

// An async video that does not finish within VideoTimeout (by the engine's
// clock) ends the attempt as transient provider_job_slow; unset, the
// timeout is 10 minutes.
func TestEngineVideoTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		timeout   time.Duration
		wantPolls int32
	}{
		// Polls at +1m, +2m (not after the deadline), +3m (after): 3.
		{"configured 2m", 2 * time.Minute, 3},
		{"default 10m", 0, 11},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sp := &stallProviders{step: time.Minute}
			h := newHarness(t,
				withConfig(func(ec *pipeline.EngineConfig) { ec.VideoTimeout = tt.timeout }),
				withProviders(func(pipeline.Providers) pipeline.Providers { return sp }))
			sp.clock.Store(h.clock)
			h.submit("v1-stall", board(vid("slow clouds", "", 600)))
			_, o := runOnce(t, h)
			if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_job_slow" {
				t.Fatalf("outcome %+v, want retry_wait provider_job_slow", o)
			}
			if got := sp.polls.Load(); got != tt.wantPolls {
				t.Fatalf("%d status polls before giving up, want %d", got, tt.wantPolls)
			}
		})
	}
}

// unitEvents returns the detail of every event of kind for job id.
func unitEvents(t *testing.T, h *harness, id, kind string) []map[string]any {
	t.Helper()
	evs, err := h.store.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range evs {
		if e.Kind != kind {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatalf("%s detail %s: %v", kind, e.Detail, err)
		}
		out = append(out, d)
	}
	return out
}

// Every generated unit leaves a unit_generated event, and every artifact
// found already stored (by an equal scene of another job, or as an object
// a crashed attempt uploaded) leaves a unit_reused event naming it: the
// history explains why nothing was paid for.
func TestEngineUnitEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	sb := board(img("a harbour", "the harbour at dawn", 700), img("a boat", "", 700))
	h.submit("v1-first", sb)
	h.drain(5)
	if n := len(unitEvents(t, h, "v1-first", pipeline.EventUnitGenerated)); n != 2 {
		t.Fatalf("first job: %d unit_generated events, want 2", n)
	}
	if n := len(unitEvents(t, h, "v1-first", pipeline.EventUnitReused)); n != 0 {
		t.Fatalf("first job: %d unit_reused events, want 0", n)
	}
	billed := h.fake.Ledger().Billed

	// The same scenes again: all three artifacts are found by key.
	h.submit("v1-second", sb)
	h.drain(5)
	if st := h.job("v1-second").Status; st != pipeline.StatusSucceeded {
		t.Fatalf("second job ended %s", st)
	}
	if after := h.fake.Ledger().Billed; after != billed {
		t.Fatalf("the second job paid again: %+v then %+v", billed, after)
	}
	reused := map[string]int{}
	for _, d := range unitEvents(t, h, "v1-second", pipeline.EventUnitReused) {
		reused[fmt.Sprint(d["scene"], "/", d["artifact"])]++
	}
	if want := map[string]int{"0/image": 1, "0/speech": 1, "1/image": 1}; fmt.Sprint(reused) != fmt.Sprint(want) {
		t.Fatalf("second job reused %v, want %v", reused, want)
	}
	if n := len(unitEvents(t, h, "v1-second", pipeline.EventUnitGenerated)); n != 2 {
		t.Fatalf("second job: %d unit_generated events, want 2", n)
	}

	// An attempt dies after uploading its image but before the asset row
	// (the second upload: the first stages the provider's answer): the next
	// attempt adopts the object and says so.
	h.submit("v1-adopt", board(img("a lighthouse at night", "", 700)))
	h.crashAt("render-v1", "after_upload_before_asset", 2)
	h.clock.Advance(2 * time.Minute)
	h.drain(5)
	var adopted int
	for _, d := range unitEvents(t, h, "v1-adopt", pipeline.EventUnitReused) {
		if d["adopted"] == true && d["artifact"] == pipeline.ArtifactImage {
			adopted++
		}
	}
	if adopted != 1 {
		t.Fatalf("adopting job: %d adopted unit_reused events, want 1", adopted)
	}
}

// A transient object-store failure after the provider was paid is retried
// inside the attempt, with growing pauses (200 ms, then 800 ms), and the
// artifact really is stored: the job succeeds in one attempt, paid once.
func TestEngineStoreRetriesWithinAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-storeretry", board(img("a windmill", "", 700)))
	var mu sync.Mutex
	var claims []time.Time
	h.fp.set("after_claim_object", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		claims = append(claims, time.Now())
		if len(claims) <= 2 {
			return errTransientFP
		}
		return nil
	})
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt: %+v, %v; want success after in-attempt retries", o, err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The image object's three tries, then the render's claim.
	if len(claims) < 3 {
		t.Fatalf("%d claims, want the failed two and a successful one", len(claims))
	}
	if gap := claims[1].Sub(claims[0]); gap < 200*time.Millisecond {
		t.Errorf("second try %s after the first, want at least 200ms", gap)
	}
	if gap := claims[2].Sub(claims[1]); gap < 800*time.Millisecond {
		t.Errorf("third try %s after the second, want at least 800ms", gap)
	}
	if b := h.fake.Ledger().Billed; b.Image != 1 {
		t.Errorf("image billed %d times, want 1", b.Image)
	}
	units, err := h.store.Units(context.Background(), "v1-storeretry")
	if err != nil || len(units) != 1 {
		t.Fatalf("units %+v, %v", units, err)
	}
	key := units[0].Artifacts[pipeline.ArtifactImage]
	if _, err := h.store.GetAsset(context.Background(), key); err != nil {
		t.Fatalf("the unit names %q but its asset row is missing: %v", key, err)
	}
}

// An object store that keeps failing transiently is not retried forever:
// after three tries the attempt ends transient and the job waits for its
// next attempt.
func TestEngineStoreRetryGivesUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-storefail", board(img("a windmill at dusk", "", 700)))
	var tries atomic.Int32
	h.fp.set("after_claim_object", func(context.Context) error {
		tries.Add(1)
		return errTransientFP
	})
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "test_transient" {
		t.Fatalf("outcome %+v, want retry_wait test_transient", o)
	}
	if n := tries.Load(); n != 3 {
		t.Fatalf("%d tries, want 3", n)
	}
}

// A permanent failure while storing is not retried inside the attempt.
func TestEngineStoreNoRetryOnPermanent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-storeperm", board(img("a windmill at noon", "", 700)))
	var tries atomic.Int32
	h.fp.set("after_claim_object", func(context.Context) error {
		tries.Add(1)
		return &pipeline.ClassifiedError{Class: pipeline.ClassPermanent, Code: "test_permanent", Message: "injected"}
	})
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusFailed || o.ErrorCode != "test_permanent" {
		t.Fatalf("outcome %+v, want failed test_permanent", o)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d tries, want 1", n)
	}
}

// When an earlier attempt may have paid for a sync call whose result was
// lost, the job stops for a human and the message names the scene the way
// the owner numbers it (from 1).
func TestEngineMaybeBilledMessageNamesScene(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-maybe", board(img("a quiet street", "footsteps on the street", 700)))
	// Intent #1 is the image's, #2 the speech's: die right after it.
	h.crashAt("render-v1", "after_provider_intent", 2)
	h.clock.Advance(2 * time.Minute)
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusNeedsReview || o.ErrorCode != "provider_outcome_unknown" {
		t.Fatalf("outcome %+v, want needs_review provider_outcome_unknown", o)
	}
	if !strings.Contains(o.ErrorMessage, "scene 1's speech") {
		t.Fatalf("message %q does not name scene 1's speech", o.ErrorMessage)
	}
}

// retryMetrics records RetryScheduled calls.
type retryMetrics struct {
	mu    sync.Mutex
	codes []string
}

func (m *retryMetrics) ProviderCall(string, string)         {}
func (m *retryMetrics) BytesUploaded(string, int64)         {}
func (m *retryMetrics) StageDuration(string, time.Duration) {}
func (m *retryMetrics) UnitReused(string)                   {}
func (m *retryMetrics) RetryScheduled(code string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.codes = append(m.codes, code)
}

// A retry is counted when an attempt is rescheduled, and only then.
func TestEngineRetryMetric(t *testing.T) {
	t.Parallel()
	m := &retryMetrics{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Metrics = m }))
	h.submit("v1-retrymetric", board(img("a lighthouse", "", 600)))
	h.submit("v2-failmetric", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
		t.Fatalf("transient attempt: %+v, %v", o, err)
	}
	h.fp.set("after_claim", func(context.Context) error {
		return &pipeline.ClassifiedError{Class: pipeline.ClassPermanent, Code: "test_permanent", Message: "injected"}
	})
	if _, o, err := h.attempt("render-v2", true); err != nil || o.Status != pipeline.StatusFailed {
		t.Fatalf("permanent attempt: %+v, %v", o, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.codes) != 1 || m.codes[0] != "test_transient" {
		t.Fatalf("RetryScheduled calls %v, want exactly [test_transient]", m.codes)
	}
}

// Forget removes a final job's spooled results, and only that job's; a job
// that may resume (dead_lettered, needs_review) keeps them: a redrive must
// use a paid answer rather than pay again (issue 11, finding 1).
func TestEngineForgetRemovesSpool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	mine := filepath.Join(h.cfg.SpoolDir, "v1-forget")
	other := filepath.Join(h.cfg.SpoolDir, "v1-keep")
	for _, dir := range []string{mine, other} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "call-1"), []byte("paid"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []pipeline.Status{pipeline.StatusDeadLettered, pipeline.StatusNeedsReview, pipeline.StatusRetryWait} {
		if err := h.engine.Forget(context.Background(), "v1-forget", st); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(mine, "call-1")); err != nil {
			t.Fatalf("spool after Forget(%s): %v, want it kept", st, err)
		}
	}
	if err := h.engine.Forget(context.Background(), "v1-forget", pipeline.StatusFailed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spool of the forgotten job: %v, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(other, "call-1")); err != nil {
		t.Fatalf("another job's spool: %v, want it kept", err)
	}
}

// spoolFiles lists the files left in a job's spool directory.
func spoolFiles(t *testing.T, h *harness, id string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(h.cfg.SpoolDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A paid result is spooled until stored, then removed: a finished job
// leaves nothing in its spool directory.
func TestEngineSpoolEmptiedOnceStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submit("v1-spool", board(img("a field", "wind over the field", 700), img("a hill", "", 700)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt: %+v, %v", o, err)
	}
	if left := spoolFiles(t, h, "v1-spool"); len(left) != 0 {
		t.Fatalf("spool files left after the results were stored: %v", left)
	}
}

// A worker that died after a sync call's answer was spooled but before the
// call was recorded as answered left an intent row and a whole spool file:
// the next attempt stores that file instead of stopping for review or
// paying again.
func TestEngineRecoversSpoolOfUnrecordedAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-recover", board(img("a pier", "waves under the pier", 700)))
	// Answers: #1 the image, #2 the speech; freeze right after the speech's.
	h.crashAt("render-v1", "after_provider_response", 2)
	calls, err := h.store.ProviderCalls(context.Background(), "v1-recover", 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallIntent {
		t.Fatalf("speech calls after the crash %+v, %v; want one open intent", calls, err)
	}
	h.clock.Advance(2 * time.Minute)
	h.drain(5)
	if j := h.job("v1-recover"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job ended %s (%s), want succeeded from the spooled answer", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1", n)
	}
}

// Status polls that keep failing end the attempt after five in a row as a
// transient provider_poll_failed (the next attempt polls the same job).
func TestEngineVideoPollFailures(t *testing.T) {
	t.Parallel()
	sp := &stallProviders{step: time.Second, fail: true}
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return sp }))
	sp.clock.Store(h.clock)
	h.submit("v1-pollfail", board(vid("unreadable status", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_poll_failed" {
		t.Fatalf("outcome %+v, want retry_wait provider_poll_failed", o)
	}
	if n := sp.polls.Load(); n != 5 {
		t.Fatalf("%d polls, want 5", n)
	}
}

// Every stage an attempt enters is recorded with the workflow that ran it,
// in order: `edgepipe check` holds the workflow against the id prefix.
func TestEngineStageStartedNamesWorkflow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, id := range []string{"v1-stages", "v2-stages"} {
		h.submit(id, board(img("a lighthouse", "", 600)))
	}
	h.drain(5)
	for _, id := range []string{"v1-stages", "v2-stages"} {
		var got []string
		for _, d := range unitEvents(t, h, id, pipeline.EventStageStarted) {
			got = append(got, fmt.Sprint(d["stage"], "@", d["workflow"]))
		}
		v := id[:2]
		want := []string{pipeline.StagePrepare + "@" + v, pipeline.StageExecute + "@" + v, pipeline.StageApply + "@" + v, pipeline.StageFinalize + "@" + v}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s stage_started %v, want %v", id, got, want)
		}
	}
}

// brokenRenderer fails like a full disk would: a plain error, no class.
type brokenRenderer struct{ stubRenderer }

func (brokenRenderer) SceneFromImage(context.Context, string, string, int, string, string) error {
	return errors.New("write clip: no space left on device")
}

// A render that fails without a class (a full disk) is retried: apply
// cannot reach a provider, so nothing can be paid twice by repeating it.
func TestEngineRenderFailureIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return brokenRenderer{}, nil }))
	h.submit("v1-fullrender", board(img("a dune", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "render_failed" || o.RequiresAction || o.ErrorMessage != "scene 1 could not be rendered" {
		t.Fatalf("outcome %+v, want retry_wait render_failed", o)
	}
}

// blockSpool makes the job's spool directory unwritable (a file where the
// directory should be), the way a full disk refuses writes.
func blockSpool(t *testing.T, h *harness, id string) string {
	t.Helper()
	dir := filepath.Join(h.cfg.SpoolDir, id)
	if err := os.RemoveAll(dir); err != nil {
		t.Error(err)
	}
	if err := os.MkdirAll(h.cfg.SpoolDir, 0o700); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(dir, []byte("in the way"), 0o600); err != nil {
		t.Error(err)
	}
	return dir
}

// refuseStaging is an object store that refuses to stage speech answers
// (an outage that started between the provider's answer and its staging).
type refuseStaging struct{ pipeline.ObjectStore }

func (r refuseStaging) Put(ctx context.Context, key string, rd io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if strings.HasPrefix(key, pipeline.PrefixStaging) && strings.Contains(key, "-speech-") {
		return pipeline.ObjectInfo{}, errors.New("connection refused")
	}
	return r.ObjectStore.Put(ctx, key, rd, o)
}

// A paid answer is kept before anything else: staged in the object store
// and spooled on the worker's disk. A full local disk therefore loses
// nothing while the object store takes the answer. If the store refuses it
// too, the answer is held in memory while the spool write is retried: once
// the disk takes it the job succeeds; if it never does, the call is
// recorded as paid-but-lost (local_disk_error) and the job waits for a
// human. The speech is bought once in every case.
func TestEnginePaidAnswerSurvivesFullDisk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		freeing      bool
		storeRefuses bool
		want         pipeline.Status
	}{
		{"disk stays full, store takes it", false, false, pipeline.StatusSucceeded},
		{"disk frees up, store refuses", true, true, pipeline.StatusRetryWait},
		{"disk stays full, store refuses", false, true, pipeline.StatusNeedsReview},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h *harness
			id := "v1-fulldisk"
			h = newHarness(t,
				withConfig(func(ec *pipeline.EngineConfig) {
					ec.UnitConcurrency = 1
					if !tc.freeing {
						ec.SpoolPatience = 300 * time.Millisecond
					}
					if tc.storeRefuses {
						ec.Objects = refuseStaging{ec.Objects}
					}
				}),
				withProviders(func(pipeline.Providers) pipeline.Providers {
					return &hookProviders{before: func(ctx context.Context, op, unit string) error {
						if op == pipeline.OpSpeech {
							dir := blockSpool(t, h, id)
							if tc.freeing {
								time.AfterFunc(400*time.Millisecond, func() { os.Remove(dir) })
							}
						}
						return nil
					}}
				}))
			h.submit(id, board(img("a quarry", "dust over the quarry", 700)))
			_, o := runOnce(t, h)
			switch {
			case o.Status != tc.want:
				t.Fatalf("outcome %+v, want %s", o, tc.want)
			case tc.want == pipeline.StatusNeedsReview && (o.ErrorCode != "local_disk_error" || !strings.Contains(o.ErrorMessage, "could not keep it on disk")):
				t.Fatalf("outcome %+v, want needs_review local_disk_error", o)
			case tc.want == pipeline.StatusRetryWait && (o.ErrorCode != "object_store_error" || !o.Infra):
				// Spooled once the disk took it; the attempt waits for the
				// store on the infrastructure budget.
				t.Fatalf("outcome %+v, want an infrastructure retry (object_store_error)", o)
			}
			if n := h.fake.Ledger().Billed.Speech; n != 1 {
				t.Fatalf("speech billed %d times, want 1", n)
			}
		})
	}
}

// A job of a version this build has no workflow for is never run as
// another version: the attempt parks it as a permanent, operator-facing
// dead letter before touching anything.
func TestEngineUnboundVersionIsDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if _, _, err := h.store.CreateJob(context.Background(), pipeline.NewJob{ID: "v9-nowhere", Tenant: "acme", Operation: pipeline.OperationRenderVideo,
		IdempotencyKey: "k-v9", RequestFingerprint: "f", Input: []byte(`{}`), Version: "v9", Queue: "render-v9"}); err != nil {
		t.Fatal(err)
	}
	_, o, err := h.attempt("render-v9", false)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusDeadLettered || o.Reason != pipeline.ReasonUnboundVersion || o.ErrorClass != pipeline.ClassPermanent ||
		o.ErrorCode != pipeline.ReasonUnboundVersion || !o.RequiresAction {
		t.Fatalf("outcome %+v", o)
	}
	if ev := unitEvents(t, h, "v9-nowhere", pipeline.EventStageStarted); len(ev) != 0 {
		t.Fatalf("an unbound job started stages: %v", ev)
	}
}

// brokenJoinRenderer's join dies after the first bytes reached the upload,
// as ffmpeg does when a clip is unreadable.
type brokenJoinRenderer struct{ stubRenderer }

func (brokenJoinRenderer) JoinTo(_ context.Context, _ []string, w io.Writer) error {
	if _, err := w.Write([]byte("partial mp4 bytes")); err != nil {
		return err
	}
	return errors.New("ffmpeg: invalid data found when processing input")
}

// A join that fails mid-upload is reported as the render failing (retried),
// and the half-written object is abandoned, not kept.
func TestEngineJoinFailureMidUpload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return brokenJoinRenderer{}, nil }))
	h.submit("v1-badjoin", board(img("a reef", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "render_failed" || o.ErrorMessage != "joining the scenes failed" {
		t.Fatalf("outcome %+v, want retry_wait render_failed (joining the scenes failed)", o)
	}
	n := 0
	if err := h.store.ListAssets(context.Background(), func(a pipeline.Asset) error {
		if a.Kind == "render" {
			n++
		}
		return nil
	}); err != nil || n != 0 {
		t.Fatalf("%d render assets, %v; want none", n, err)
	}
}

package pipeline_test

import (
	"context"
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
)

// refuseFinal is an object store whose writes of one kind of final
// artifact (keys under units/ ending in suffix) fail while refuse is set:
// an outage that starts after the provider's answer was staged.
type refuseFinal struct {
	pipeline.ObjectStore
	suffix string
	refuse atomic.Bool
	puts   atomic.Int32 // refused puts
}

func (r *refuseFinal) Put(ctx context.Context, key string, rd io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if r.refuse.Load() && strings.HasPrefix(key, pipeline.PrefixUnits) && strings.HasSuffix(key, r.suffix) {
		r.puts.Add(1)
		return pipeline.ObjectInfo{}, errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return r.ObjectStore.Put(ctx, key, rd, o)
}

// Issue 11, finding 1: a job dead-lettered after its speech was paid for
// keeps the staged answer (and the worker's spool), so the operator's
// redrive stores it instead of paying a second time. On main the spool was
// deleted for any terminal status, the redrive found a paid call without a
// result, and the job went to review.
func TestDeadLetteredJobKeepsPaidAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	objs := &refuseFinal{suffix: ".wav"}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry.InfraWindow = time.Hour
		objs.ObjectStore = ec.Objects
		ec.Objects = objs
	}))
	objs.refuse.Store(true)
	const id = "v1-dlkeep"
	h.submit(id, board(img("a harbour", "gulls over the harbour", 600)))

	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
		t.Fatalf("attempt 1: %+v %v; want an infrastructure retry", o, err)
	}
	// The store stays down past the infrastructure window: dead-lettered.
	h.clock.Advance(2 * time.Hour)
	_, o, err = h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusDeadLettered || o.Reason != pipeline.ReasonInfraUnavailable {
		t.Fatalf("attempt 2: %+v %v; want dead_lettered %s", o, err, pipeline.ReasonInfraUnavailable)
	}
	// What the worker does after recording the outcome, and a sweep: both
	// must keep what a redrive needs.
	if err := h.engine.Forget(ctx, id, pipeline.StatusDeadLettered); err != nil {
		t.Fatal(err)
	}
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: h.store, Objects: h.objs, Grace: time.Nanosecond, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	staged, err := h.store.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: id})
	if err != nil || len(staged) != 1 {
		t.Fatalf("staged answers of the dead-lettered job: %+v %v; want the speech", staged, err)
	}

	objs.refuse.Store(false)
	dls, err := h.store.ListDeadLetters(ctx, false, 0, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
	if _, err := h.store.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v1", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("after the redrive the job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1", n)
	}
	// The job succeeded: what it kept is released (the worker's Forget).
	if err := h.engine.Forget(ctx, id, pipeline.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if staged, err := h.store.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: id}); err != nil || len(staged) != 0 {
		t.Fatalf("staged answers of the finished job: %+v %v; want none", staged, err)
	}
}

// Infrastructure failures do not use up the job's attempts: a store outage
// longer than MaxAttempts backoffs leaves the job waiting for storage
// (retry_wait, InfraSince set), not dead-lettered, and it succeeds once the
// store is back, with every answer bought once.
func TestInfraFailuresHaveTheirOwnBudget(t *testing.T) {
	t.Parallel()
	objs := &refuseFinal{suffix: ".wav"}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry.MaxAttempts = 2
		ec.Retry.InfraWindow = time.Hour
		objs.ObjectStore = ec.Objects
		ec.Objects = objs
	}))
	objs.refuse.Store(true)
	const id = "v1-infra"
	h.submit(id, board(img("a quarry", "dust over the quarry", 600)))
	for i := range 6 {
		_, o, err := h.attempt("render-v1", true)
		if err != nil || o.Status != pipeline.StatusRetryWait || o.ErrorCode != "object_store_error" {
			t.Fatalf("attempt %d: %+v %v; want retry_wait object_store_error", i+1, o, err)
		}
		j := h.job(id)
		if !j.WaitingForInfra() || j.InfraFailures != i+1 {
			t.Fatalf("after attempt %d: waiting=%v infra_failures=%d; want waiting for storage, %d", i+1, j.WaitingForInfra(), j.InfraFailures, i+1)
		}
		h.clock.Advance(2 * time.Minute)
	}
	objs.refuse.Store(false)
	// A failure of the job's own after the outage is judged on the attempts
	// that did not end on the infrastructure: 1 of 2, so it retries.
	h.fp.set("after_claim", once(&pipeline.ClassifiedError{Class: pipeline.ClassTransient, Code: "test_transient", Message: "injected"}))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || o.Infra {
		t.Fatalf("attempt after the outage: %+v %v; want a plain retry_wait", o, err)
	}
	h.drain(5)
	j := h.job(id)
	if j.Status != pipeline.StatusSucceeded || !j.InfraSince.IsZero() {
		t.Fatalf("job %s (%s) infra_since %v; want succeeded, no longer waiting", j.Status, j.LastErrorCode, j.InfraSince)
	}
	if l := h.fake.Ledger().Billed; l.Speech != 1 || l.Image != 1 {
		t.Fatalf("billed %+v, want one image and one speech", l)
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

// refuseStagingThen refuses to stage speech answers like refuseStaging and
// calls refused after every refusal.
type refuseStagingThen struct {
	pipeline.ObjectStore
	refused func()
}

func (r refuseStagingThen) Put(ctx context.Context, key string, rd io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if strings.HasPrefix(key, pipeline.PrefixStaging) && strings.Contains(key, "-speech-") {
		r.refused()
		return pipeline.ObjectInfo{}, errors.New("connection refused")
	}
	return r.ObjectStore.Put(ctx, key, rd, o)
}

// The store refuses a paid answer and the disk is full when the worker
// first tries to spool it; the disk frees up half a second after the
// store's last refusal, while the spool write is being retried (after 100,
// 200, 400 ms):
// the answer is spooled, and the attempt waits for the store instead of
// losing the answer to a human's review.
func TestPaidAnswerWaitsForTheDiskToFreeUp(t *testing.T) {
	t.Parallel()
	const id = "v1-diskfrees"
	var (
		h       *harness
		mu      sync.Mutex
		dir     string
		freeing *time.Timer
	)
	h = newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) {
			ec.UnitConcurrency = 1
			ec.Objects = refuseStagingThen{ec.Objects, func() {
				// The disk is full from every refusal until half a second
				// after the last one.
				mu.Lock()
				defer mu.Unlock()
				if freeing != nil {
					freeing.Stop()
				}
				// The timer gets its own copy: a later refusal rewrites dir
				// while an earlier, stopped timer may already be running.
				d := blockSpool(t, h, id)
				dir = d
				freeing = time.AfterFunc(500*time.Millisecond, func() { os.Remove(d) })
			}}
		}))
	h.submit(id, board(img("a quarry", "dust over the quarry", 700)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "object_store_error" || !o.Infra {
		t.Fatalf("outcome %+v; want an infrastructure retry with the answer spooled", o)
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 {
		t.Fatalf("speech calls %+v, %v", calls, err)
	}
	mu.Lock()
	spool := dir
	mu.Unlock()
	if _, err := os.Stat(filepath.Join(spool, fmt.Sprintf("call-%d", calls[0].ID))); err != nil {
		t.Fatalf("the spooled answer: %v", err)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1", n)
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

// A paid answer staged by an attempt that died before recording the call
// (its row still an intent) survives an operator's retry: the retry waives
// the call, and the next attempt reuses the waived call's staged answer
// instead of paying again.
func TestWaivedCallKeepsItsStagedAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	const id = "v1-waived"
	h.submit(id, board(img("a pier", "waves under the pier", 700)))
	// Answers: #1 the image, #2 the speech; die right after the speech's
	// was staged, before its call was recorded as answered.
	h.crashAt("render-v1", "after_provider_response", 2)
	// Park the job for review (as an ambiguity elsewhere would), then an
	// operator retries it.
	h.parkForReview("render-v1")
	if _, err := h.store.Decide(ctx, &pipeline.DecideParams{JobID: id, Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	calls, err := h.store.ProviderCalls(ctx, id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallWaived || calls[0].StagedKey == "" {
		t.Fatalf("speech calls after the retry %+v, %v; want one waived call with its staged answer", calls, err)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job ended %s (%s), want succeeded from the staged answer", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1: the waived call's answer was staged", n)
	}
}

// An attempt that died after storing a unit's asset but before naming it
// in the unit leaves the answer's staged copy behind: the next attempt
// reuses the asset and never touches that copy. Forget, when the job is
// over, releases it (row and object).
func TestForgetReleasesAStagedAnswerLeftBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	const id = "v1-leftstaged"
	h.submit(id, board(img("a barn", "", 600)))
	h.crashAt("render-v1", "after_asset_before_unit", 1)
	h.clock.Advance(2 * time.Minute)
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	left, err := h.store.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: id})
	if err != nil || len(left) != 1 {
		t.Fatalf("staged answers after the job: %+v %v; want the one the crashed attempt left", left, err)
	}
	if err := h.engine.Forget(ctx, id, pipeline.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if staged, err := h.store.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: id}); err != nil || len(staged) != 0 {
		t.Fatalf("staged answers after Forget: %+v %v; want none", staged, err)
	}
	if _, err := h.objs.Head(ctx, left[0].Key); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("staged object %s after Forget: %v; want it deleted", left[0].Key, err)
	}
}

// outageByPhase is an object store whose outage moves on with phase: 1
// refuses to stage speech answers (they go to the worker's spool), 2
// takes them but refuses the final speech artifact (.wav under units/),
// 3 takes everything; failRelease refuses every delete of a staged
// answer.
type outageByPhase struct {
	pipeline.ObjectStore
	phase       atomic.Int32
	failRelease bool
}

func (o *outageByPhase) Put(ctx context.Context, key string, rd io.Reader, opts pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	staging := strings.HasPrefix(key, pipeline.PrefixStaging) && strings.Contains(key, "-speech-")
	final := strings.HasPrefix(key, pipeline.PrefixUnits) && strings.HasSuffix(key, ".wav")
	if p := o.phase.Load(); p == 1 && staging || p == 2 && final {
		return pipeline.ObjectInfo{}, errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return o.ObjectStore.Put(ctx, key, rd, opts)
}

func (o *outageByPhase) Delete(ctx context.Context, key string) error {
	if o.failRelease && strings.HasPrefix(key, pipeline.PrefixStaging) {
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return o.ObjectStore.Delete(ctx, key)
}

// An answer can have two copies left when its asset is finally stored:
// the spool file of the attempt that could not stage it, and the staged
// object of the attempt that staged the spool but could not store the
// asset. The attempt that stores the asset (from the staged copy, so its
// answer names no spool file) removes the spool file and releases the
// staged object; a release the object store refuses is logged, names the
// key, and leaves the object for the sweeper — it fails nothing.
func TestStoredAnswerDropsEveryCopy(t *testing.T) {
	t.Parallel()
	for _, failRelease := range []bool{false, true} {
		t.Run(fmt.Sprintf("release fails %v", failRelease), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var logs syncBuffer
			objs := &outageByPhase{failRelease: failRelease}
			h := newHarness(t, withRenderers(stubRenderers), withConfig(func(ec *pipeline.EngineConfig) {
				objs.ObjectStore = ec.Objects
				ec.Objects = objs
				ec.UnitConcurrency = 1
				ec.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}))
			const id = "v1-twocopies"
			h.submit(id, board(img("a mill", "the wheel turns slowly", 600)))
			var last pipeline.Outcome
			for phase := int32(1); phase <= 3; phase++ {
				objs.phase.Store(phase)
				last = attemptWhenDue(t, h)
				if phase < 3 && (last.Status != pipeline.StatusRetryWait || last.ErrorCode != "object_store_error") {
					t.Fatalf("phase %d: outcome %+v, want retry_wait on object_store_error", phase, last)
				}
				if phase == 2 && len(spoolFiles(t, h, id)) != 1 {
					t.Fatalf("after phase 2 the spool holds %v, want the answer's file", spoolFiles(t, h, id))
				}
			}
			if last.Status != pipeline.StatusSucceeded {
				t.Fatalf("last attempt %+v, want succeeded", last)
			}
			if n := h.fake.Ledger().Billed.Speech; n != 1 {
				t.Fatalf("speech billed %d times, want 1", n)
			}
			if left := spoolFiles(t, h, id); len(left) != 0 {
				t.Fatalf("spool files left after the answer was stored: %v", left)
			}
			calls, err := h.store.ProviderCalls(ctx, id, 0, pipeline.OpSpeech)
			if err != nil || len(calls) != 1 || calls[0].StagedKey == "" {
				t.Fatalf("speech calls %+v, %v; want one, staged", calls, err)
			}
			key := calls[0].StagedKey
			staged, err := h.store.StagedAnswers(ctx, &pipeline.StagedAnswersParams{JobID: id})
			if err != nil || len(staged) != 0 {
				t.Fatalf("staged answers left %+v, %v; want every one released", staged, err)
			}
			_, herr := objs.Head(ctx, key)
			warned := strings.Contains(logs.String(), "releasing a staged answer failed") && strings.Contains(logs.String(), "key="+key)
			switch {
			case !failRelease && (!errors.Is(herr, pipeline.ErrNotFound) || strings.Contains(logs.String(), "releasing a staged answer failed")):
				t.Fatalf("staged object %s: %v; want it deleted without a warning:\n%s", key, herr, logs.String())
			case failRelease && (herr != nil || !warned):
				t.Fatalf("staged object %s: %v; want it left for the sweeper and its failed release logged by key:\n%s", key, herr, logs.String())
			}
		})
	}
}

// attemptWhenDue runs the next attempt of the harness's v1 job, moving the
// clock on until its retry is due.
func attemptWhenDue(t *testing.T, h *harness) pipeline.Outcome {
	t.Helper()
	for range 200 {
		_, o, err := h.attempt("render-v1", true)
		if errors.Is(err, errNothing) {
			h.clock.Advance(5 * time.Second)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	t.Fatal("no attempt became due")
	return pipeline.Outcome{}
}

package pipeline_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// downStore refuses every operation while down is set: the object store
// is unreachable.
type downStore struct {
	pipeline.ObjectStore
	down       atomic.Bool
	stagedGets atomic.Int64 // reads of staged answers
}

var errRefused = errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")

func (d *downStore) Put(ctx context.Context, key string, r io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if d.down.Load() {
		return pipeline.ObjectInfo{}, errRefused
	}
	return d.ObjectStore.Put(ctx, key, r, o)
}

func (d *downStore) Head(ctx context.Context, key string) (pipeline.ObjectInfo, error) {
	if d.down.Load() {
		return pipeline.ObjectInfo{}, errRefused
	}
	return d.ObjectStore.Head(ctx, key)
}

func (d *downStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, pipeline.ObjectInfo, error) {
	if strings.HasPrefix(key, pipeline.PrefixStaging) {
		d.stagedGets.Add(1)
	}
	if d.down.Load() {
		return nil, pipeline.ObjectInfo{}, errRefused
	}
	return d.ObjectStore.Get(ctx, key, off, n)
}

func (d *downStore) Delete(ctx context.Context, key string) error {
	if d.down.Load() {
		return errRefused
	}
	return d.ObjectStore.Delete(ctx, key)
}

// A worker dies between uploading a staged answer and its asset row (the
// staged object exists, only the dead attempt's 'writing' claim refers to
// it). The object store then goes down for longer than the infrastructure
// window, so the job is dead-lettered — a status that must keep every paid
// answer (docs/design.md §6). The sweeper runs before the operator redrives. The
// staged answer must survive that sweep, and the redrive must store it
// instead of paying for the speech again.
func TestOrphanStagedAnswerSurvivesSweepOfResumableJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	objs := &downStore{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry.InfraWindow = time.Hour
		objs.ObjectStore = ec.Objects
		ec.Objects = objs
	}))
	const id = "v1-orphan"
	h.submit(id, board(img("a lighthouse", "waves at the lighthouse", 600)))
	// writeObject #1 image staging, #2 image asset, #3 speech staging.
	h.crashAt("render-v1", "after_upload_before_asset", 3)
	calls, err := h.store.ProviderCalls(ctx, id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 {
		t.Fatalf("speech calls %+v %v", calls, err)
	}
	staged := pipeline.StagingKey("acme", id, 0, pipeline.OpSpeech, calls[0].ID)
	if _, err := h.objs.Head(ctx, staged); err != nil {
		t.Fatalf("staged speech object after the crash: %v", err)
	}
	h.clock.Advance(2 * time.Minute) // the frozen attempt's lease dies

	objs.down.Store(true)
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
		t.Fatalf("attempt during the outage: %+v %v", o, err)
	}
	h.clock.Advance(2 * time.Hour)
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusDeadLettered {
		t.Fatalf("attempt after the window: %+v %v", o, err)
	}
	objs.down.Store(false)

	// The sweeper runs (grace 1 h) before anyone redrives. The manual clock
	// is moved past the objects' real modification times.
	h.clock.Advance(time.Since(h.clock.Now()) + 2*time.Hour)
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: h.store, Objects: h.objs, Grace: time.Hour, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.objs.Head(ctx, staged); err != nil {
		t.Errorf("the sweep deleted the paid speech answer of a dead-lettered job (report %+v): %v", rep, err)
	}

	dls, err := h.store.ListDeadLetters(ctx, false, 0, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
	if _, err := h.store.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v1", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Errorf("after the redrive the job ended %s (%s); want succeeded from the staged answer", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Errorf("speech billed %d times, want 1", n)
	}
}

// panicScene panics while building a scene clip: on the attempt's own
// goroutine (apply), where only Engine.Run's recover can catch it.
type panicScene struct{ pipeline.Renderer }

func (panicScene) SceneFromImage(context.Context, string, string, int, string, string) error {
	panic("clip builder bug")
}

// A panic on the attempt goroutine (not in a unit, not in the join) is
// recovered by Run into a retried failure with an attempt_panicked event.
func TestPanicOnAttemptGoroutineIsRecovered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withRenderers(func(ctx context.Context, w, hh, fps int) (pipeline.Renderer, error) {
		r, err := stubRenderers(ctx, w, hh, fps)
		return panicScene{r}, err
	}))
	const id = "v1-panicapply"
	h.submit(id, board(img("a kite", "", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusRetryWait || o.ErrorCode != "internal_panic" {
		t.Fatalf("outcome %+v %v; want retry_wait internal_panic", o, err)
	}
	if len(unitEvents(t, h, id, pipeline.EventAttemptPanicked)) == 0 {
		t.Fatal("no attempt_panicked event")
	}
}

// panicBody returns a speech answer whose body panics when read: the
// request was answered (and billed) but the panic strikes outside the
// adapter call, while the intent row is still open.
type panicBody struct{ pipeline.Providers }

func (p *panicBody) setInner(in pipeline.Providers) { p.Providers = in }

type panicReader struct{ io.ReadCloser }

func (panicReader) Read([]byte) (int, error) { panic("decoder bug") }

func (p *panicBody) Synthesize(ctx context.Context, m pipeline.CallMeta, r pipeline.SpeechRequest) (pipeline.Media, error) {
	md, err := p.Providers.Synthesize(ctx, m, r)
	if err == nil {
		md.Body = panicReader{md.Body}
	}
	return md, err
}

// A panic while a paid call's intent is open sends the job to review at
// once (the call may have been billed), with the call recorded ambiguous.
func TestPanicWithOpenIntentGoesToReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return &panicBody{} }))
	const id = "v1-panicbody"
	h.submit(id, board(img("a drum", "the drum rolls", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusNeedsReview || o.ErrorCode != "internal_panic" {
		t.Fatalf("outcome %+v %v; want needs_review internal_panic", o, err)
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallAmbiguous {
		t.Fatalf("speech calls %+v %v; want one ambiguous", calls, err)
	}
}

// The infrastructure window is measured from the first failure of a run of
// them, not restarted by each: a store that never comes back dead-letters
// the job once the window has passed.
func TestInfraWindowCountsFromFirstFailure(t *testing.T) {
	t.Parallel()
	objs := &downStore{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry.InfraWindow = 10 * time.Minute
		ec.Retry.InfraCap = time.Minute
		objs.ObjectStore = ec.Objects
		ec.Objects = objs
	}))
	objs.down.Store(true)
	const id = "v1-window"
	h.submit(id, board(img("a bell", "", 600)))
	for i := range 8 {
		_, o, err := h.attempt("render-v1", true)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == pipeline.StatusDeadLettered {
			if o.Reason != pipeline.ReasonInfraUnavailable || i < 3 {
				t.Fatalf("attempt %d: %+v; want infrastructure_unavailable after the window", i+1, o)
			}
			return
		}
		h.clock.Advance(3 * time.Minute)
	}
	t.Fatal("the job still waits for storage 24 minutes into a 10-minute window")
}

// edgepipe check's "paid answer kept" query: a clean run (image, speech,
// video, every staged copy released) reports nothing; a job still in
// flight whose answer is only in a worker's spool is not reported; the
// same job parked for review is.
func TestUnkeptAnswersQuery(t *testing.T) {
	t.Parallel()
	needFFmpeg(t, "the fake provider renders videos with ffmpeg")
	ctx := context.Background()
	objs := &downStore{}
	var outage atomic.Bool
	h := newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) { objs.ObjectStore = ec.Objects; ec.Objects = objs }),
		withProviders(func(pipeline.Providers) pipeline.Providers {
			return &hookProviders{before: func(_ context.Context, op, _ string) error {
				if op == pipeline.OpSpeech && outage.Load() {
					objs.down.Store(true)
				}
				return nil
			}}
		}))
	h.submit("v1-clean", board(img("a gate", "the gate creaks", 600), vid("a river", "", 600)))
	h.drain(10)
	if j := h.job("v1-clean"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("clean job %s (%s)", j.Status, j.LastErrorCode)
	}
	if err := h.engine.Forget(ctx, "v1-clean", pipeline.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if u, err := h.store.UnkeptAnswers(ctx); err != nil || len(u) != 0 {
		t.Fatalf("unkept answers after a clean run: %+v %v; want none", u, err)
	}

	outage.Store(true)
	h.submit("v1-spooled", board(img("a fence", "the fence leans", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || !o.Infra {
		t.Fatalf("attempt during the outage: %+v %v", o, err)
	}
	objs.down.Store(false)
	if u, err := h.store.UnkeptAnswers(ctx); err != nil || len(u) != 0 {
		t.Fatalf("unkept answers of a job still in flight: %+v %v; want none", u, err)
	}
	// Park it for review (as an ambiguity elsewhere would).
	h.parkForReview("render-v1")
	if u, err := h.store.UnkeptAnswers(ctx); err != nil || len(u) != 1 || u[0].Op != pipeline.OpSpeech {
		t.Fatalf("unkept answers of the parked job: %+v %v; want its spooled speech", u, err)
	}
}

// A whole-store outage (puts, heads, gets and deletes all refused) that
// starts as a speech answer arrives and outlasts MaxAttempts: the answer
// waits in the spool, every attempt waits for storage without touching a
// provider, and once the store is back the job succeeds with the speech
// bought once.
func TestWholeStoreOutageKeepsSpooledAnswer(t *testing.T) {
	t.Parallel()
	objs := &downStore{}
	var armed atomic.Bool
	armed.Store(true)
	h := newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) {
			ec.Retry.MaxAttempts = 2
			objs.ObjectStore = ec.Objects
			ec.Objects = objs
		}),
		withProviders(func(pipeline.Providers) pipeline.Providers {
			return &hookProviders{before: func(_ context.Context, op, _ string) error {
				if op == pipeline.OpSpeech && armed.CompareAndSwap(true, false) {
					objs.down.Store(true)
				}
				return nil
			}}
		}))
	const id = "v1-wholeoutage"
	h.submit(id, board(img("a tower", "bells in the tower", 600)))
	for i := range 5 {
		_, o, err := h.attempt("render-v1", true)
		if err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
			t.Fatalf("attempt %d during the outage: %+v %v; want waiting for storage", i+1, o, err)
		}
		h.clock.Advance(2 * time.Minute)
	}
	objs.down.Store(false)
	// The first attempt after the outage stages the spooled answer and
	// uses it at once: no attempt more, no provider call.
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("first attempt after the outage: %+v %v; want succeeded from the spooled answer", o, err)
	}
	if l := h.fake.Ledger().Billed; l.Speech != 1 {
		t.Fatalf("speech billed %d times, want 1", l.Speech)
	}
	// The answer was read from the nearest copy, this worker's spool, not
	// fetched back from the object store it was just staged in.
	if n := objs.stagedGets.Load(); n != 0 {
		t.Fatalf("%d reads of a staged answer, want none: the spool holds it", n)
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].StagedKey == "" {
		t.Fatalf("speech calls %+v %v; want one, pointing at its staged answer", calls, err)
	}
}

// failStagedCommitOnce fails the first CommitAsset of a staged answer with
// the driver's plain error (a busy or full database).
type failStagedCommitOnce struct {
	pipeline.Store
	failed atomic.Bool
}

func (s *failStagedCommitOnce) CommitAsset(ctx context.Context, lease pipeline.Lease, a pipeline.Asset) error {
	if a.Kind == pipeline.KindStaged && s.failed.CompareAndSwap(false, true) {
		return errors.New("database is locked")
	}
	return s.Store.CommitAsset(ctx, lease, a)
}

// A staged answer whose writer died before its asset row (and whose dead
// claim the sweeper already dropped) is adopted by the next attempt. If
// that adoption's asset row fails to commit, the object — which the
// adopting attempt did not write and which is the only copy of a paid
// answer — must stay for the next try, not be deleted as if it were the
// attempt's own failed upload.
func TestFailedAdoptionKeepsStagedAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fc := &failStagedCommitOnce{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { fc.Store = ec.Store; ec.Store = fc }))
	const id = "v1-adoptfail"
	h.submit(id, board(img("a quay", "ropes on the quay", 600)))
	fc.failed.Store(true) // the crashed attempt's own commits pass
	h.crashAt("render-v1", "after_upload_before_asset", 3)
	h.clock.Advance(2 * time.Hour)
	if _, err := h.store.DropStaleClaims(ctx, h.clock.Now().Add(-time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	fc.failed.Store(false)
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
		t.Fatalf("attempt whose adoption failed to commit: %+v %v; want an infrastructure retry", o, err)
	}
	h.clock.Advance(2 * time.Minute)
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Errorf("job %s (%s); want succeeded from the adopted answer", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Errorf("speech billed %d times, want 1", n)
	}
}

package pipeline_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// downStore refuses every operation while down is set: the object store
// is unreachable.
type downStore struct {
	pipeline.ObjectStore
	down atomic.Bool
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
// answer (DESIGN §6). The sweeper runs before the operator redrives. The
// staged answer must survive that sweep, and the redrive must store it
// instead of paying for the speech again.
func TestReviewOrphanStagedAnswerSurvivesSweepOfResumableJob(t *testing.T) {
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
	if _, err := h.store.Redrive(ctx, dls[0].ID, "render-v1", "op"); err != nil {
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

package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// attemptOn claims one job of queue and runs it on engine e (another
// worker of the same deployment), recording the outcome.
func (h *harness) attemptOn(e *pipeline.Engine, queue string) pipeline.Outcome {
	h.t.Helper()
	ctx := context.Background()
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: queue, Owner: "other-worker", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		h.t.Fatalf("fetch: %v %d", err, len(cs))
	}
	o, err := e.Run(ctx, cs[0])
	if err != nil {
		h.t.Fatalf("run: %v", err)
	}
	if err := h.store.Finish(ctx, cs[0].Lease, o); err != nil {
		h.t.Fatal(err)
	}
	return o
}

// fullDisk fails every scene clip the way a full scratch disk does.
type fullDisk struct{ pipeline.Renderer }

func (fullDisk) SceneFromImage(_ context.Context, _, _ string, _ int, _, out string) error {
	return fmt.Errorf("write clip: %w", &os.PathError{Op: "write", Path: out, Err: syscall.ENOSPC})
}

// Issue 11: "Object-store, database-busy and local-disk errors are not the
// job's fault: they must not count against the attempt limit that
// dead-letters a job." A full scratch disk while the clips are built
// (apply) is classified render_failed and uses up the attempts.
func TestFullDiskInApplyIsInfrastructure(t *testing.T) {
	t.Parallel()
	h := newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) { ec.Retry.MaxAttempts = 2 }),
		withRenderers(func(ctx context.Context, w, hh, fps int) (pipeline.Renderer, error) {
			r, err := stubRenderers(ctx, w, hh, fps)
			return fullDisk{r}, err
		}))
	const id = "v1-fulldisk"
	h.submit(id, board(img("a barn", "", 600)))
	for i := range 3 {
		_, o, err := h.attempt("render-v1", true)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != pipeline.StatusRetryWait || !o.Infra {
			t.Fatalf("attempt %d on a full disk: %s %s (infra=%v); want an infrastructure retry", i+1, o.Status, o.ErrorCode, o.Infra)
		}
		h.clock.Advance(2 * time.Minute)
	}
}

// The object store goes down just as a speech answer arrives: worker 1
// keeps it in its spool and the attempt waits for storage. The store comes
// back and the job's next attempt is claimed by worker 2 (another machine,
// its own spool). Issue 11: "Later attempts — on any machine — reuse it";
// "the local spool ... is no longer the only copy once the store is back".
// The job must not stop for review (and the operator's retry must not pay
// for the speech a second time) while worker 1 holds the paid answer.
func TestSpooledAnswerReachesAnotherWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	objs := &downStore{}
	h := newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) { objs.ObjectStore = ec.Objects; ec.Objects = objs }),
		withProviders(func(pipeline.Providers) pipeline.Providers {
			return &hookProviders{before: func(_ context.Context, op, _ string) error {
				if op == pipeline.OpSpeech {
					objs.down.Store(true) // the outage starts while speech is generated
				}
				return nil
			}}
		}))
	const id = "v1-twoworkers"
	h.submit(id, board(img("a mill", "the mill wheel turns", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
		t.Fatalf("attempt on worker 1: %+v %v; want waiting for storage", o, err)
	}
	objs.down.Store(false)
	// Worker 1's flush loop runs once the store is back: the answer is
	// staged and no longer worker 1's alone.
	if n, err := h.engine.FlushSpool(ctx); err != nil || n != 1 {
		t.Fatalf("worker 1 flushed %d answers, %v; want 1", n, err)
	}
	h.clock.Advance(2 * time.Minute)

	cfg2 := h.cfg
	cfg2.SpoolDir = filepath.Join(t.TempDir(), "spool-worker-2")
	e2, err := pipeline.NewEngine(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	o := h.attemptOn(e2, "render-v1")
	if o.Status != pipeline.StatusSucceeded {
		t.Errorf("worker 2's attempt ended %s (%s); want succeeded with the answer worker 1 staged", o.Status, o.ErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Errorf("speech billed %d times, want 1", n)
	}
}

// As above, but worker 2 claims the job before worker 1 flushed: it waits
// on the infrastructure budget. Worker 1
// keeps it in its spool and the attempt waits for storage. The store comes
// back and the job's next attempt is claimed by worker 2 (another machine,
// its own spool). Issue 11: "Later attempts — on any machine — reuse it";
// "the local spool ... is no longer the only copy once the store is back".
// The job must not stop for review (and the operator's retry must not pay
// for the speech a second time) while worker 1 holds the paid answer.
func TestAnotherWorkerWaitsForSpooledAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	objs := &downStore{}
	h := newHarness(t,
		withConfig(func(ec *pipeline.EngineConfig) { objs.ObjectStore = ec.Objects; ec.Objects = objs }),
		withProviders(func(pipeline.Providers) pipeline.Providers {
			return &hookProviders{before: func(_ context.Context, op, _ string) error {
				if op == pipeline.OpSpeech {
					objs.down.Store(true) // the outage starts while speech is generated
				}
				return nil
			}}
		}))
	const id = "v1-twoworkers"
	h.submit(id, board(img("a mill", "the mill wheel turns", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait || !o.Infra {
		t.Fatalf("attempt on worker 1: %+v %v; want waiting for storage", o, err)
	}
	objs.down.Store(false)
	h.clock.Advance(2 * time.Minute)

	cfg2 := h.cfg
	cfg2.SpoolDir = filepath.Join(t.TempDir(), "spool-worker-2")
	e2, err := pipeline.NewEngine(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	// Worker 2 comes first: it waits for the answer, it does not stop for
	// review (nor pay again).
	if o := h.attemptOn(e2, "render-v1"); o.Status != pipeline.StatusRetryWait || !o.Infra || o.ErrorCode != "answer_not_staged_yet" ||
		!strings.HasPrefix(o.ErrorMessage, "scene 1's paid speech is kept by another worker") {
		t.Fatalf("worker 2 before worker 1 flushed: %+v; want an infrastructure wait for scene 1's speech", o)
	}
	if n, err := h.engine.FlushSpool(ctx); err != nil || n != 1 {
		t.Fatalf("worker 1 flushed %d answers, %v; want 1", n, err)
	}
	h.clock.Advance(2 * time.Minute)
	if o := h.attemptOn(e2, "render-v1"); o.Status != pipeline.StatusSucceeded {
		t.Fatalf("worker 2 after the flush: %s (%s); want succeeded", o.Status, o.ErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Errorf("speech billed %d times, want 1", n)
	}
}

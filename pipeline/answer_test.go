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
	if _, err := h.store.Redrive(ctx, dls[0].ID, "render-v1", "op"); err != nil {
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

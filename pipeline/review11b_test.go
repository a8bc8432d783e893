package pipeline_test

import (
	"context"
	"fmt"
	"os"
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
	cs, _, err := h.store.Fetch(ctx, queue, "other-worker", 1, time.Minute)
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
func TestReviewFullDiskInApplyIsInfrastructure(t *testing.T) {
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

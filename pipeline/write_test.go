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

// flakyStore fails the first failPuts puts of final image artifacts and the
// first failDeletes deletes of final artifacts, counting those.
type flakyStore struct {
	pipeline.ObjectStore
	failPuts, failDeletes atomic.Int32
	deletes               atomic.Int32
}

func (f *flakyStore) Put(ctx context.Context, key string, r io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if strings.HasPrefix(key, pipeline.PrefixUnits) && strings.HasSuffix(key, ".png") && f.failPuts.Add(-1) >= 0 {
		return pipeline.ObjectInfo{}, errors.New("connection reset by peer")
	}
	return f.ObjectStore.Put(ctx, key, r, o)
}

func (f *flakyStore) Delete(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, pipeline.PrefixUnits) {
		return f.ObjectStore.Delete(ctx, key)
	}
	f.deletes.Add(1)
	if f.failDeletes.Add(-1) >= 0 {
		return errors.New("503 slow down")
	}
	return f.ObjectStore.Delete(ctx, key)
}

// failFinalCommitOnce fails the first CommitAsset of a final artifact (not
// of a staged answer) with the driver's plain error.
type failFinalCommitOnce struct {
	pipeline.Store
	failed atomic.Bool
}

func (s *failFinalCommitOnce) CommitAsset(ctx context.Context, lease pipeline.Lease, a pipeline.Asset) error {
	if strings.HasPrefix(a.Key, pipeline.PrefixUnits) && s.failed.CompareAndSwap(false, true) {
		return errors.New("database or disk is full")
	}
	return s.Store.CommitAsset(ctx, lease, a)
}

// Issue 11, finding 2. A failed Put leaves no object (Puts are atomic), so
// no delete is attempted and nothing can wedge the key: the retry within
// the attempt writes it.
func TestFailedPutDeletesNothing(t *testing.T) {
	t.Parallel()
	st := &flakyStore{}
	st.failPuts.Store(1)
	st.failDeletes.Store(1000)
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { st.ObjectStore = ec.Objects; ec.Objects = st }))
	h.submit("v1-failput", board(img("a pier", "", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v %v; want success", o, err)
	}
	if n := st.deletes.Load(); n != 0 {
		t.Fatalf("%d deletes after a failed put, want 0", n)
	}
}

// A cleanup whose deletes all fail leaves its claim 'deleting'. The key is
// busy only until StaleDeleteAfter: then the next writer takes the cleanup
// over, deletes the object and writes its own. The job waits on the
// infrastructure budget meanwhile and is never dead-lettered.
func TestFailedDeleteDoesNotWedgeKey(t *testing.T) {
	t.Parallel()
	st := &flakyStore{}
	st.failDeletes.Store(3) // every try of the first cleanup
	fc := &failFinalCommitOnce{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry.MaxAttempts = 2
		st.ObjectStore = ec.Objects
		ec.Objects = st
		fc.Store = ec.Store
		ec.Store = fc
	}))
	const id = "v1-wedge"
	h.submit(id, board(img("a jetty", "", 600)))
	busy := 0
	for i := range 10 {
		_, o, err := h.attempt("render-v1", true)
		if errors.Is(err, errNothing) {
			h.clock.Advance(time.Minute)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == pipeline.StatusSucceeded {
			break
		}
		if o.Status != pipeline.StatusRetryWait || !o.Infra {
			t.Fatalf("attempt %d: %+v; want an infrastructure retry", i+1, o)
		}
		if o.ErrorCode == "object_busy" {
			busy++
		}
		h.clock.Advance(time.Minute)
	}
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job %s (%s); want succeeded once the dead cleanup was taken over", j.Status, j.LastErrorCode)
	}
	if busy == 0 {
		t.Fatal("no attempt met the busy key: the test did not exercise the takeover")
	}
	if n := h.fake.Ledger().Billed.Image; n != 1 {
		t.Fatalf("image billed %d times, want 1", n)
	}
}

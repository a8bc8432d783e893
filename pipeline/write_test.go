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

// shaStore reports a chosen SHA-256 for every put, the way a backend that
// corrupted the upload (or computes no digest) would.
type shaStore struct {
	pipeline.ObjectStore
	sha  string // reported digest: "" = the backend keeps none
	puts atomic.Int32
}

func (s *shaStore) Put(ctx context.Context, key string, r io.Reader, opts pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	info, err := s.ObjectStore.Put(ctx, key, r, opts)
	s.puts.Add(1)
	info.SHA256 = s.sha
	return info, err
}

// The write protocol checks what the store says it kept: a digest that
// differs from what was sent fails the write (transient object_integrity)
// and leaves no object behind; a store that reports no digest is trusted on
// size alone.
func TestWriteObjectChecksStoredDigest(t *testing.T) {
	t.Parallel()
	t.Run("mismatch", func(t *testing.T) {
		t.Parallel()
		st := &shaStore{sha: strings.Repeat("0", 64)}
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { st.ObjectStore = ec.Objects; ec.Objects = st }))
		h.submit("v1-corrupt", board(img("a corrupted upload", "", 700)))
		_, o, err := h.attempt("render-v1", true)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "object_integrity" {
			t.Fatalf("outcome %+v, want retry_wait object_integrity", o)
		}
		var left []string
		if err := h.objs.List(context.Background(), pipeline.PrefixUnits, func(oi pipeline.ObjectInfo) bool {
			left = append(left, oi.Key)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("objects left after failed writes: %v", left)
		}
		if st.puts.Load() == 0 {
			t.Fatal("no put was made")
		}
	})
	t.Run("no digest", func(t *testing.T) {
		t.Parallel()
		st := &shaStore{sha: ""}
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { st.ObjectStore = ec.Objects; ec.Objects = st }))
		h.submit("v1-nodigest", board(img("a plain upload", "", 700)))
		_, o, err := h.attempt("render-v1", true)
		if err != nil || o.Status != pipeline.StatusSucceeded {
			t.Fatalf("outcome %+v, %v; want success", o, err)
		}
		units, err := h.store.Units(context.Background(), "v1-nodigest")
		if err != nil || len(units) != 1 {
			t.Fatalf("units %+v, %v", units, err)
		}
		a, err := h.store.GetAsset(context.Background(), units[0].Artifacts[pipeline.ArtifactImage])
		if err != nil || len(a.SHA256) != 64 || a.SHA256 == strings.Repeat("0", 64) {
			t.Fatalf("asset %+v, %v; want the digest computed while streaming", a, err)
		}
	})
}

// failCommitOnce fails the first CommitAsset the way the SQLite driver
// does on a full disk: a plain error, which writeObject must classify.
type failCommitOnce struct {
	pipeline.Store
	commits atomic.Int32
}

func (s *failCommitOnce) CommitAsset(ctx context.Context, lease pipeline.Lease, a pipeline.Asset) error {
	if s.commits.Add(1) == 1 {
		return errors.New("database or disk is full")
	}
	return s.Store.CommitAsset(ctx, lease, a)
}

// An asset row that could not be written is never taken for a stored
// artifact: the write is retried and the unit names an asset that exists.
func TestWriteObjectCommitFailureIsNotSuccess(t *testing.T) {
	t.Parallel()
	fc := &failCommitOnce{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { fc.Store = ec.Store; ec.Store = fc }))
	h.submit("v1-commit", board(img("a busy database", "", 700)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v, %v; want success after retrying the write", o, err)
	}
	// The staged answer ×2 (the failed and the retried commit), the image
	// and the render.
	if n := fc.commits.Load(); n != 4 {
		t.Errorf("%d commits, want 4", n)
	}
	units, err := h.store.Units(context.Background(), "v1-commit")
	if err != nil || len(units) != 1 {
		t.Fatalf("units %+v, %v", units, err)
	}
	key := units[0].Artifacts[pipeline.ArtifactImage]
	if _, err := h.store.GetAsset(context.Background(), key); err != nil {
		t.Fatalf("unit names %q without an asset row: %v", key, err)
	}
}

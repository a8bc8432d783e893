package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider/fake"
)

func newWorker(t *testing.T, h *harness, concurrency int) *pipeline.Worker {
	t.Helper()
	w, err := pipeline.NewWorker(pipeline.WorkerConfig{Store: h.store, Engine: h.engine, Queues: []string{"render-v1", "render-v2"},
		Owner: "test", Concurrency: concurrency, LeaseFor: 3 * time.Second, Poll: 10 * time.Millisecond, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// startWorker starts a worker on h's store and engine, consuming
// render-v1 and render-v2, with cfg's concurrency, poll and wake-ups, and
// stops it when the test ends.
func startWorker(t *testing.T, h *harness, cfg pipeline.WorkerConfig) *pipeline.Worker {
	t.Helper()
	cfg.Store, cfg.Engine, cfg.Queues, cfg.Owner = h.store, h.engine, []string{"render-v1", "render-v2"}, "test"
	cfg.LeaseFor, cfg.Clock = 3*time.Second, h.clock
	w, err := pipeline.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return w
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWorkerRunsJobsOnBoundQueues(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, id := range []string{"v1-w1", "v1-w2", "v2-w3"} {
		h.submit(id, board(img("p "+id, "n "+id, 600)))
	}
	w := newWorker(t, h, 2)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all jobs settled", func() bool {
		for _, id := range []string{"v1-w1", "v1-w2", "v2-w3"} {
			if !h.job(id).Status.Settled() {
				return false
			}
		}
		return true
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"v1-w1", "v1-w2", "v2-w3"} {
		if j := h.job(id); j.Status != pipeline.StatusSucceeded || j.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts", id, j.Status, j.Attempts)
		}
	}
}

// Shutdown stops claiming, waits for in-flight attempts until its deadline,
// then interrupts them: they release the job (pending, attempt not counted),
// they do not fail it.
func TestWorkerStopReleasesInFlightJobs(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, op, unit string) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done() // a slow provider, only interruption ends it
			return ctx.Err()
		}}
	}))
	h.submit("v1-slow", board(img("slow", "", 600)))
	w := newWorker(t, h, 1)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	within(t, entered, "the worker's provider call")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx); err == nil {
		t.Fatal("Stop reported a clean finish although it had to interrupt a job")
	}
	j := h.job("v1-slow")
	if j.Status != pipeline.StatusPending || j.Attempts != 0 || j.LeaseOwner != "" {
		t.Fatalf("after shutdown the job is %s, attempts %d, owner %q; want it released", j.Status, j.Attempts, j.LeaseOwner)
	}
	// and another worker picks it up at once
	if total, visible, _ := h.store.QueueDepth(context.Background(), "render-v1"); total != 1 || visible != 1 {
		t.Fatalf("released job's message: total %d visible %d", total, visible)
	}
}

// Spooled results of a job that ended without this worker (canceled while
// waiting, failed by an operator) are pruned — at worker start and then
// periodically; a job that may still need its spool (pending, under review)
// keeps it, and so does a directory whose job is unknown.
func TestPruneSpool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.submit("v1-ended", board(img("a", "", 600)))
	h.submit("v1-waiting", board(img("b", "", 600)))
	if j, err := h.store.RequestCancel(ctx, "acme", "v1-ended"); err != nil || j.Status != pipeline.StatusCanceled {
		t.Fatalf("cancel: %+v %v", j, err)
	}
	spool := func(id string) string {
		dir := filepath.Join(h.cfg.SpoolDir, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "call-1"), []byte("paid"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// A job as the API stores it: its key is JobKey's (instance id, ".t",
	// the tenant's hash), whose spool directory says "_t" for ".t".
	keyed := pipeline.JobKey("acme", "v1-keyed")
	sb, _ := board(img("c", "", 600)).Normalize()
	if _, _, err := h.store.CreateJob(ctx, pipeline.NewJob{ID: keyed, InstanceID: "v1-keyed", Tenant: "acme",
		Operation: pipeline.OperationRenderVideo, IdempotencyKey: "k-keyed", Input: sb.Canonical(),
		RequestFingerprint: pipeline.Fingerprint(pipeline.OperationRenderVideo, sb, ""), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	if j, err := h.store.RequestCancel(ctx, "acme", "v1-keyed"); err != nil || j.Status != pipeline.StatusCanceled {
		t.Fatalf("cancel: %+v %v", j, err)
	}
	ended, waiting, unknown := spool("v1-ended"), spool("v1-waiting"), spool("v1-nosuchjob")
	keyedDir := spool(strings.ReplaceAll(keyed, ".", "_"))
	n, err := h.engine.PruneSpool(ctx)
	if err != nil || n != 2 {
		t.Fatalf("PruneSpool = %d, %v; want 2", n, err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(ended) || exists(keyedDir) || !exists(waiting) || !exists(unknown) {
		t.Fatalf("after pruning: ended %v, keyed %v (want gone), waiting %v, unknown %v (want kept)",
			exists(ended), exists(keyedDir), exists(waiting), exists(unknown))
	}

	// The worker prunes when it starts.
	ended = spool("v1-ended")
	w := newWorker(t, h, 1)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to prune the ended job's spool", func() bool { return !exists(ended) })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// blockingProviders makes every provider call announce itself on entered
// and then wait until release is closed.
func blockingProviders(entered chan<- struct{}, release <-chan struct{}) harnessOpt {
	return withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, op, unit string) error {
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	})
}

// A worker never holds more leases than it has slots: with concurrency 1
// and a slow job in flight, the other jobs stay pending for other workers.
func TestWorkerClaimsNoMoreThanItsSlots(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 8), make(chan struct{})
	h := newHarness(t, blockingProviders(entered, release))
	ids := []string{"v1-slot1", "v1-slot2", "v1-slot3"}
	for _, id := range ids {
		h.submit(id, board(img("p "+id, "", 600)))
	}
	w := newWorker(t, h, 1)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	within(t, entered, "the first job's provider call")
	time.Sleep(100 * time.Millisecond) // ten poll intervals: time to over-claim, if it would
	running := 0
	for _, id := range ids {
		if h.job(id).Status == pipeline.StatusRunning {
			running++
		}
	}
	close(release)
	if running != 1 {
		t.Errorf("%d jobs leased by a worker with one slot", running)
	}
	waitFor(t, "all jobs settled", func() bool {
		for _, id := range ids {
			if !h.job(id).Status.Settled() {
				return false
			}
		}
		return true
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// An idle worker waits for its poll interval, unless the store announces a
// new message (Wake): then it fetches at once.
func TestWorkerWakesOnHint(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wake := make(chan struct{}, 1)
	startWorker(t, h, pipeline.WorkerConfig{Concurrency: 1, Poll: time.Hour, Wake: wake})
	time.Sleep(100 * time.Millisecond) // the worker found both queues empty and waits
	h.submit("v1-woken", board(img("p", "n", 600)))
	time.Sleep(200 * time.Millisecond)
	if st := h.job("v1-woken").Status; st != pipeline.StatusPending {
		t.Fatalf("job is %s before any hint, with an hour's poll interval", st)
	}
	wake <- struct{}{}
	waitFor(t, "the woken worker to finish the job", func() bool { return h.job("v1-woken").Status.Settled() })
	if st := h.job("v1-woken").Status; st != pipeline.StatusSucceeded {
		t.Fatalf("job is %s", st)
	}
}

// A slot that frees while the worker's turn is on an empty queue goes on
// to the next queue at once: the worker waits for its poll only when every
// queue it consumes was empty. (With one slot and an hour's poll, the old
// loop ran the first job, turned to the empty render-v2 and slept.)
func TestWorkerDoesNotIdleWhileAQueueHoldsWork(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := []string{"v1-busy1", "v1-busy2", "v1-busy3"}
	for _, id := range ids {
		h.submit(id, board(img("p "+id, "n "+id, 600)))
	}
	startWorker(t, h, pipeline.WorkerConfig{Concurrency: 1, Poll: time.Hour})
	waitFor(t, "every job on render-v1 to run, with render-v2 empty and an hour's poll", func() bool {
		for _, id := range ids {
			if !h.job(id).Status.Settled() {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if j := h.job(id); j.Status != pipeline.StatusSucceeded {
			t.Fatalf("%s: %s", id, j.Status)
		}
	}
}

// A wake-up is not spent on the wrong queue: the worker fetches every
// queue before it waits again, so a hint about render-v2 arriving when
// render-v1's turn is next still gets the job run at once. One slot, an
// hour's poll: each job must run on its hint alone.
func TestWorkerWakeReachesEitherQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wake := make(chan struct{}, 1)
	startWorker(t, h, pipeline.WorkerConfig{Concurrency: 1, Poll: time.Hour, Wake: wake})
	for i, id := range []string{"v1-a", "v1-b", "v2-c", "v2-d", "v1-e"} {
		h.submit(id, board(img("p "+id, "n "+id, 600)))
		wake <- struct{}{}
		waitFor(t, fmt.Sprintf("job %d (%s) to run on its wake-up", i+1, id), func() bool { return h.job(id).Status.Settled() })
	}
}

// A worker with free slots leaves a tenant's second job queued while the
// tenant has TenantMaxRunning jobs running, and runs another tenant's job
// meanwhile; the queued job runs once a slot frees.
func TestWorkerTenantMaxRunning(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 8), make(chan struct{})
	h := newHarness(t, blockingProviders(entered, release))
	jobs := []struct{ tenant, id string }{{"acme", "v1-ten1"}, {"acme", "v1-ten2"}, {"globex", "v1-ten3"}}
	for _, j := range jobs {
		h.submitFor(j.tenant, j.id, board(img("p "+j.id, "", 600)))
	}
	w, err := pipeline.NewWorker(pipeline.WorkerConfig{Store: h.store, Engine: h.engine, Queues: []string{"render-v1"},
		Owner: "test", Concurrency: 3, LeaseFor: 3 * time.Second, Poll: 10 * time.Millisecond, Clock: h.clock, TenantMaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	within(t, entered, "the first job's provider call")
	within(t, entered, "the second job's provider call")
	time.Sleep(100 * time.Millisecond) // ten poll intervals: time to over-claim, if it would
	running := map[string]int{}
	for _, j := range jobs {
		if h.job(j.id).Status == pipeline.StatusRunning {
			running[j.tenant]++
		}
	}
	close(release)
	if running["acme"] != 1 || running["globex"] != 1 {
		t.Errorf("running per tenant %v with a limit of 1 and 3 slots; want acme 1, globex 1", running)
	}
	waitFor(t, "all jobs settled", func() bool {
		for _, j := range jobs {
			if !h.job(j.id).Status.Settled() {
				return false
			}
		}
		return true
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.NewWorker(pipeline.WorkerConfig{Store: h.store, Engine: h.engine, Queues: []string{"render-v1"},
		Owner: "test", TenantMaxRunning: -1}); err == nil {
		t.Error("a negative tenant limit was accepted")
	}
}

// flakyJobStore is the harness's store with Fetch counted, and Fetch or
// Finish failing when told to (set before the worker starts).
type flakyJobStore struct {
	pipeline.Store
	fetches   atomic.Int32
	fetchErr  error
	finishErr error
}

func (s *flakyJobStore) Fetch(ctx context.Context, p *pipeline.FetchParams) ([]pipeline.Claimed, pipeline.FetchStats, error) {
	s.fetches.Add(1)
	if s.fetchErr != nil {
		return nil, pipeline.FetchStats{}, s.fetchErr
	}
	return s.Store.Fetch(ctx, p)
}

func (s *flakyJobStore) Finish(ctx context.Context, l pipeline.Lease, o pipeline.Outcome) error {
	if s.finishErr != nil {
		return s.finishErr
	}
	return s.Store.Finish(ctx, l, o)
}

// stagedAnswersFail is a store whose StagedAnswers fails for the final
// jobs (the query Engine.Forget makes when a job ends).
type stagedAnswersFail struct {
	pipeline.Store
	err error
}

func (s *stagedAnswersFail) StagedAnswers(ctx context.Context, p *pipeline.StagedAnswersParams) ([]pipeline.Asset, error) {
	if p.FinalJobsOnly {
		return nil, s.err
	}
	return s.Store.StagedAnswers(ctx, p)
}

// What a worker's background loops see is only in its log: a failed fetch,
// prune, flush or outcome write is a warning with its error; a prune or a
// flush that did something is noted; and an idle worker with nothing
// wrong logs nothing, however many rounds it runs, and fetches each queue
// once per poll interval rather than spinning.
func TestWorkerLogsWhatOnlyItSees(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, h *harness, st *flakyJobStore, logs *syncBuffer) *pipeline.Worker {
		t.Helper()
		w, err := pipeline.NewWorker(pipeline.WorkerConfig{Store: st, Engine: h.engine, Queues: []string{"render-v1", "render-v2"},
			Owner: "test", Concurrency: 1, LeaseFor: 3 * time.Second, Poll: time.Hour, PruneEvery: 5 * time.Millisecond,
			FlushEvery: 5 * time.Millisecond, Clock: h.clock,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return w
	}
	stop := func(t *testing.T, w *pipeline.Worker) {
		t.Helper()
		if err := w.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		st := &flakyJobStore{Store: h.store}
		var logs syncBuffer
		w := start(t, h, st, &logs)
		time.Sleep(150 * time.Millisecond) // some thirty prune and flush rounds
		stop(t, w)
		if n := st.fetches.Load(); n != 2 {
			t.Errorf("an idle worker fetched %d times in 150ms with an hour's poll interval, want once per queue", n)
		}
		if logs.String() != "" {
			t.Errorf("an idle worker logged:\n%s", logs.String())
		}
	})
	t.Run("pruned", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.submit("v1-ended", board(img("a", "", 600)))
		if _, err := h.store.RequestCancel(context.Background(), "acme", "v1-ended"); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(h.cfg.SpoolDir, "v1-ended"), 0o700); err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		w := start(t, h, &flakyJobStore{Store: h.store}, &logs)
		time.Sleep(100 * time.Millisecond)
		stop(t, w)
		if got := strings.Count(logs.String(), `msg="pruned spooled results of ended jobs"`); got != 1 ||
			!strings.Contains(logs.String(), "jobs=1") || strings.Contains(logs.String(), "WARN") {
			t.Errorf("want one note of the prune and no warning; log:\n%s", logs.String())
		}
	})
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		// A spool path that is a file: neither pruning nor flushing can read it.
		if err := os.WriteFile(h.cfg.SpoolDir, []byte("not a directory"), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		st := &flakyJobStore{Store: h.store, fetchErr: errors.New("queue unreachable")}
		w := start(t, h, st, &logs)
		waitFor(t, "the warnings", func() bool {
			s := logs.String()
			return strings.Contains(s, "fetch failed") && strings.Contains(s, "pruning the spool failed") &&
				strings.Contains(s, "staging spooled answers failed")
		})
		time.Sleep(50 * time.Millisecond) // ten more prune and flush rounds
		stop(t, w)
		// A failed fetch counts as an empty one: the worker waits its poll
		// after one per queue instead of spinning on the error.
		if n := st.fetches.Load(); n != 2 {
			t.Errorf("a worker whose fetches fail fetched %d times with an hour's poll interval, want once per queue", n)
		}
		if !strings.Contains(logs.String(), "queue unreachable") || !strings.Contains(logs.String(), "not a directory") {
			t.Errorf("the warnings do not carry their errors:\n%s", logs.String())
		}
	})
	t.Run("staged answers not released", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(ec *pipeline.EngineConfig, _ *fake.Config) {
			ec.Store = &stagedAnswersFail{Store: ec.Store, err: errors.New("disk I/O error")}
		})
		h.submit("v1-unreleased", board(img("a", "", 600)))
		var logs syncBuffer
		w := start(t, h, &flakyJobStore{Store: h.store}, &logs)
		waitFor(t, "the attempt's end", func() bool { return strings.Contains(logs.String(), "attempt finished") })
		stop(t, w)
		if !strings.Contains(logs.String(), "releasing the job's staged answers failed") || !strings.Contains(logs.String(), "disk I/O error") ||
			!strings.Contains(logs.String(), "status=succeeded") {
			t.Errorf("no warning with its error, or the job did not succeed:\n%s", logs.String())
		}
	})
	t.Run("outcome not recorded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.submit("v1-unrecorded", board(img("a", "", 600)))
		var logs syncBuffer
		w := start(t, h, &flakyJobStore{Store: h.store, finishErr: errors.New("database is locked")}, &logs)
		waitFor(t, "the warning", func() bool { return strings.Contains(logs.String(), "recording the outcome failed") })
		stop(t, w)
		if !strings.Contains(logs.String(), "database is locked") {
			t.Errorf("the warning does not carry its error:\n%s", logs.String())
		}
	})
}

package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// The lifecycle every long-running part shares: stop before start and a
// second stop are no-ops, start while running is refused, stop cancels the
// run with ErrServiceStopped and waits for it, and a service can start
// again after it stopped.
func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var s pipeline.Service
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	causes := make(chan error, 2)
	run := func(ctx context.Context) { <-ctx.Done(); causes <- context.Cause(ctx) }
	if err := s.Start(ctx, run); err != nil {
		t.Fatal(err)
	}
	if !s.Started() {
		t.Fatal("not started after Start")
	}
	if err := s.Start(ctx, run); err == nil {
		t.Fatal("a second Start while running was accepted")
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := within(t, causes, "the run to end"); !errors.Is(cause, pipeline.ErrServiceStopped) {
		t.Fatalf("run ended with cause %v, want ErrServiceStopped", cause)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := s.Start(ctx, run); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, causes, "the second run to end")
}

// Stop lets work in flight finish within its context; when that ends
// first, the work context is canceled (the work winds down, as a worker's
// attempts release their jobs) and Stop says so.
func TestServiceStopDeadline(t *testing.T) {
	t.Parallel()
	var s pipeline.Service
	loopEnded, workCause := make(chan struct{}), make(chan error, 1)
	if err := s.StartWork(context.Background(), func(loop, work context.Context) {
		<-loop.Done()
		close(loopEnded)
		<-work.Done() // long work, ended only by the abort
		workCause <- context.Cause(work)
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); err == nil {
		t.Fatal("Stop returned nil although it had to interrupt the work")
	}
	within(t, loopEnded, "the loop to end")
	if cause := within(t, workCause, "the work to be interrupted"); !errors.Is(cause, pipeline.ErrServiceStopped) {
		t.Fatalf("work interrupted with cause %v, want ErrServiceStopped", cause)
	}
}

// Work that finishes within Stop's context is not interrupted.
func TestServiceStopLetsWorkFinish(t *testing.T) {
	t.Parallel()
	var s pipeline.Service
	finished := make(chan error, 1)
	if err := s.StartWork(context.Background(), func(loop, work context.Context) {
		<-loop.Done()
		time.Sleep(20 * time.Millisecond) // the last attempt finishes
		finished <- work.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, finished, "the work"); err != nil {
		t.Fatalf("work context ended (%v) before the work finished", err)
	}
}

type recorder struct {
	name   string
	failAt bool
	log    *[]string
}

func (r recorder) Start(context.Context) error {
	if r.failAt {
		return errors.New(r.name + " failed")
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r recorder) Stop(context.Context) error {
	*r.log = append(*r.log, "stop "+r.name)
	return nil
}

// StartAll starts in order and, when one fails, stops those already
// started in reverse order.
func TestStartAllRollsBack(t *testing.T) {
	t.Parallel()
	var log []string
	err := pipeline.StartAll(context.Background(), recorder{"a", false, &log}, recorder{"b", false, &log}, recorder{"c", true, &log})
	if err == nil {
		t.Fatal("StartAll hid a failed start")
	}
	if want := []string{"start a", "start b", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
}

// The bindings heartbeat: a started Presence is live with its versions; a
// stopped one is not, and neither is one whose beats stopped long ago.
func TestPresenceAnnouncesAndWithdraws(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	st := openStore(t, filepath.Join(t.TempDir(), "db"), clock)
	live := func() []string {
		t.Helper()
		vs, err := st.LiveBindings(ctx, &pipeline.LiveBindingsParams{Since: pipeline.LiveSince(clock.Now(), 0)})
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	a, err := pipeline.NewPresence(pipeline.PresenceConfig{Store: st, ProcessID: "a", Role: "worker", Versions: []string{"v2"}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pipeline.NewPresence(pipeline.PresenceConfig{Store: st, ProcessID: "b", Role: "serve", Versions: []string{"v1", "v2"}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipeline.StartAll(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if got := live(); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("live %v, want [v1 v2]", got)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := live(); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("live after b stopped %v, want [v2]", got)
	}
	// a's beats are an hour apart here; past three default intervals
	// without one it no longer counts.
	clock.Advance(4 * pipeline.DefaultPresenceInterval)
	if got := live(); len(got) != 0 {
		t.Fatalf("live after a went silent %v, want none", got)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A job waiting for a version no live process binds is dead-lettered
// (unbound_version) once it has waited UnservedAfter — never left waiting
// forever, and never touched while a live process binds its version.
func TestPresenceDeadLettersUnservedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	st := openStore(t, filepath.Join(t.TempDir(), "db"), clock)
	for _, v := range []string{"v1", "v2"} {
		if _, _, err := st.CreateJob(ctx, pipeline.NewJob{ID: v + "-waiting", Tenant: "t", Operation: pipeline.OperationRenderVideo,
			IdempotencyKey: v, RequestFingerprint: v, Input: []byte(`{}`), Version: v, Queue: "render-" + v}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour)
	p, err := pipeline.NewPresence(pipeline.PresenceConfig{Store: st, ProcessID: "w1", Role: "worker", Versions: []string{"v1"},
		Interval: 5 * time.Millisecond, UnservedAfter: 30 * time.Minute, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := st.GetJob(ctx, "v2-waiting")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == pipeline.StatusDeadLettered {
			if j.LastErrorCode != pipeline.ReasonUnboundVersion {
				t.Fatalf("dead-lettered with %q, want unbound_version", j.LastErrorCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("v2 job still %s: a job nobody serves waits forever", j.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if j, _ := st.GetJob(ctx, "v1-waiting"); j.Status != pipeline.StatusPending {
		t.Fatalf("v1 job %s; a live process binds v1, it must keep waiting", j.Status)
	}
}

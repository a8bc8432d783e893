package api

import (
	"context"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Issue 11, finding 4: the deployment's bindings are the union of its live
// processes'. An API process that binds only v1 queues a v2 job while a
// live worker elsewhere binds v2, dead-letters it (unbound_version) when no
// live process does, and never runs it as v1.
func TestSubmitRoutesAgainstLiveBindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *Config) {
		r, err := routing.NewRouter(routing.Config{RolloutPercent: 100, Bindings: mustBindings(t, "v1")})
		if err != nil {
			t.Fatal(err)
		}
		c.Router = r
	})
	e.srv.cfg.Presence = e.store

	// No live process binds v2 yet: the new v2 job is dead-lettered.
	early := e.mustSubmit(t, tokAcme, "live-1")
	if early.Status != pipeline.StatusDeadLettered || early.Version != "v2" {
		t.Fatalf("v2 job with nobody binding v2: %s on %s, want dead_lettered v2", early.Status, early.Version)
	}
	// A worker on another machine binds v2 and beats.
	if err := e.store.AnnounceBindings(ctx, &pipeline.AnnounceBindingsParams{ProcessID: "host-b:42", Role: "worker", Versions: []string{"v2"}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(liveCacheFor + time.Millisecond)
	j := e.mustSubmit(t, tokAcme, "live-2")
	if j.Status != pipeline.StatusPending || j.Version != "v2" {
		t.Fatalf("v2 job with a live v2 worker: %s on %s, want pending v2", j.Status, j.Version)
	}
	if c := e.claim(t, "render-v2"); c.Job.ID != ak(j.ID) {
		t.Fatalf("render-v2 gave %s, want %s", c.Job.ID, j.ID)
	}
	// The worker stops beating: after it counts as gone, v2 is unbound again.
	e.clock.Advance(pipeline.LiveSince(time.Time{}, 0).Sub(time.Time{}) * -2)
	late := e.mustSubmit(t, tokAcme, "live-3")
	if late.Status != pipeline.StatusDeadLettered {
		t.Fatalf("v2 job after the v2 worker went silent: %s, want dead_lettered", late.Status)
	}
}

func mustBindings(t *testing.T, s string) routing.Bindings {
	t.Helper()
	b, err := routing.ParseBindings(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A job backing off on an infrastructure failure says so: waiting for
// storage, since when; any other retry does not.
func TestJobShowsWaitingForStorage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "wait-1")
	c := e.claim(t, "render-"+j.Version)
	if err := e.store.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: e.clock.Now().Add(time.Minute),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "object_store_error", ErrorMessage: "the object store did not accept the upload", Infra: true}); err != nil {
		t.Fatal(err)
	}
	g := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+j.ID))
	if g.WaitingFor == nil || *g.WaitingFor != "storage" || g.WaitingSince == nil || !g.WaitingSince.Equal(e.clock.Now()) {
		t.Fatalf("job %+v; want waiting_for storage since now", g)
	}
	e.clock.Advance(2 * time.Minute)
	c = e.claim(t, "render-"+j.Version)
	if err := e.store.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: e.clock.Now().Add(time.Minute),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_rate_limited", ErrorMessage: "slow down"}); err != nil {
		t.Fatal(err)
	}
	if g := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+j.ID)); g.WaitingFor != nil || g.WaitingSince != nil {
		t.Fatalf("job after a provider retry %+v; want no waiting_for", g)
	}
}

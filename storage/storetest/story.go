package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// JobStory returns one job's row, events, calls, assets and open claims,
// and nothing of another job.
func testJobStory(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-story"))
	mustCreate(t, s, newJob("v1-other"))

	// Attempt 1: a refused call, an object claimed but never committed,
	// then a retry.
	c1 := fetchOne(t, s, "render-v1", "worker-a")
	if c1.Job.ID != "v1-story" {
		t.Fatalf("fetched %s first", c1.Job.ID)
	}
	id1, err := s.RecordIntent(ctx, c1.Lease, pipeline.ProviderCall{Scene: 0, Op: "image", Provider: "fake", Model: "m1", Contract: pipeline.ContractFailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: id1, Status: pipeline.CallFailed, HTTPStatus: 429, ErrorCode: "rate_limited"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimObject(ctx, c1.Lease, "images/left-behind.png"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, c1.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(time.Second), ErrorCode: "rate_limited"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	other := fetchOne(t, s, "render-v1", "worker-b")
	if _, err := s.RecordIntent(ctx, other.Lease, pipeline.ProviderCall{Scene: 0, Op: "image", Provider: "fake", Contract: pipeline.ContractFailClosed}); err != nil {
		t.Fatal(err)
	}
	// Attempt 2: a paid call and its asset.
	c2 := fetchOne(t, s, "render-v1", "worker-b")
	id2, err := s.RecordIntent(ctx, c2.Lease, pipeline.ProviderCall{Scene: 0, Op: "image", Provider: "fake", Model: "m1", Contract: pipeline.ContractFailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: id2, Status: pipeline.CallSucceeded, HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
	key := "images/kept.png"
	if err := s.ClaimObject(ctx, c2.Lease, key); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitAsset(ctx, c2.Lease, pipeline.Asset{Key: key, Kind: "image", SizeBytes: 3, SHA256: strings.Repeat("a", 64), ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}

	st, err := s.JobStory(ctx, &pipeline.JobStoryParams{JobID: "v1-story"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Job.ID != "v1-story" || st.Job.Status != pipeline.StatusRunning || st.Job.AttemptID != c2.Lease.AttemptID || st.MoreEvents {
		t.Fatalf("job %+v more=%v", st.Job, st.MoreEvents)
	}
	var kinds []string
	for _, e := range st.Events {
		if e.JobID != "v1-story" {
			t.Fatalf("another job's event: %+v", e)
		}
		kinds = append(kinds, e.Kind+":"+string(e.ToStatus))
	}
	if got, want := strings.Join(kinds, " "), "created:pending status:running status:retry_wait status:running"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if st.Events[1].AttemptID != c1.Lease.AttemptID || st.Events[3].AttemptID != c2.Lease.AttemptID {
		t.Fatalf("attempt ids on events: %+v", st.Events)
	}
	if len(st.Calls) != 2 || st.Calls[0].ID != id1 || st.Calls[0].Status != pipeline.CallFailed || st.Calls[0].HTTPStatus != 429 ||
		st.Calls[0].ErrorCode != "rate_limited" || st.Calls[0].Model != "m1" || st.Calls[1].Status != pipeline.CallSucceeded ||
		st.Calls[1].AttemptID != c2.Lease.AttemptID {
		t.Fatalf("calls %+v", st.Calls)
	}
	if len(st.Assets) != 1 || st.Assets[0].Key != key || st.Assets[0].CreatedByAttempt != c2.Lease.AttemptID {
		t.Fatalf("assets %+v", st.Assets)
	}
	if len(st.Claims) != 1 || st.Claims[0].Key != "images/left-behind.png" || st.Claims[0].AttemptID != c1.Lease.AttemptID ||
		st.Claims[0].State != "writing" || !st.Claims[0].ClaimedAt.Equal(t0) {
		t.Fatalf("claims %+v", st.Claims)
	}

	// The event bound is honoured and said.
	st, err = s.JobStory(ctx, &pipeline.JobStoryParams{JobID: "v1-story", MaxEvents: 2})
	if err != nil || len(st.Events) != 2 || !st.MoreEvents || st.Events[1].Kind != pipeline.EventStatus {
		t.Fatalf("bounded: %d events, more=%v, %v", len(st.Events), st.MoreEvents, err)
	}
	if _, err := s.JobStory(ctx, &pipeline.JobStoryParams{JobID: "v1-missing"}); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("missing job: %v", err)
	}
}

// ListJobs filters by version and creation time for the operator's list.
func testListJobsVersionAndAge(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-old"))
	clock.Advance(time.Hour)
	nj := newJob("v2-new")
	nj.Version, nj.Queue, nj.Tenant = "v2", "render-v2", "globex"
	mustCreate(t, s, nj)
	ids := func(f pipeline.ListFilter) string {
		t.Helper()
		f.AllTenants = true
		js, _, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name string
		f    pipeline.ListFilter
		want string
	}{
		{"all", pipeline.ListFilter{}, "v2-new,v1-old"},
		{"version", pipeline.ListFilter{Version: "v2"}, "v2-new"},
		{"older than 30m", pipeline.ListFilter{CreatedBefore: t0.Add(30 * time.Minute)}, "v1-old"},
		{"newer than 30m", pipeline.ListFilter{CreatedAfter: t0.Add(30 * time.Minute)}, "v2-new"},
		{"both bounds, inclusive", pipeline.ListFilter{CreatedAfter: t0, CreatedBefore: t0}, "v1-old"},
		{"version and age exclude each other", pipeline.ListFilter{Version: "v1", CreatedAfter: t0.Add(time.Minute)}, ""},
	} {
		if got := ids(tc.f); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A story bounded by exactly the number of its events shows them all,
// with no "more"; one below says there is more.
func testJobStoryEventBound(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	c := claimOwn(t, s, "v1-bound", "acme")
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "renders/b.mp4"}); err != nil {
		t.Fatal(err)
	}
	all, err := s.JobStory(ctx, &pipeline.JobStoryParams{JobID: "v1-bound", MaxEvents: 1000})
	if err != nil || all.MoreEvents || len(all.Events) < 3 {
		t.Fatalf("unbounded: %d events, more=%v, %v", len(all.Events), all.MoreEvents, err)
	}
	n := len(all.Events)
	for _, tc := range []struct {
		max, want int
		more      bool
	}{{n, n, false}, {n - 1, n - 1, true}} {
		st, err := s.JobStory(ctx, &pipeline.JobStoryParams{JobID: "v1-bound", MaxEvents: tc.max})
		if err != nil || len(st.Events) != tc.want || st.MoreEvents != tc.more {
			t.Errorf("bound %d: %d events, more=%v, %v; want %d, more=%v", tc.max, len(st.Events), st.MoreEvents, err, tc.want, tc.more)
		}
	}
}

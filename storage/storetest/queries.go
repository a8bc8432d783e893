package storetest

// The read queries of the store (listing, /metrics counts, the consistency
// checker's scans, the sweeper's reference check and the dead-letter reads),
// tested here: gremlins reported them NOT COVERED because only other
// packages' tests reached them.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// ownQueueJob creates a job of tenant on its own queue ("q-"+id), so that
// fetching it claims exactly that job.
func ownQueueJob(t *testing.T, s *env, id, tenant string) pipeline.NewJob {
	t.Helper()
	nj := newJob(id)
	nj.Tenant, nj.Queue = tenant, "q-"+id
	mustCreate(t, s, nj)
	return nj
}

// claimOwn creates a job on its own queue and fetches it.
func claimOwn(t *testing.T, s *env, id, tenant string) pipeline.Claimed {
	t.Helper()
	nj := ownQueueJob(t, s, id, tenant)
	return fetchOne(t, s, nj.Queue, "w-"+id)
}

func jobIDs(js []pipeline.Job) []string {
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.ID
	}
	return ids
}

func mustList(t *testing.T, s *env, f pipeline.ListFilter) ([]pipeline.Job, pipeline.Cursor) {
	t.Helper()
	js, next, err := s.ListJobs(context.Background(), f)
	if err != nil {
		t.Fatalf("ListJobs(%+v): %v", f, err)
	}
	return js, next
}

func cursorOf(j pipeline.Job) pipeline.Cursor {
	return pipeline.Cursor{CreatedAtMS: j.CreatedAt.UnixMilli(), ID: j.ID}
}

// mixedStatuses builds one job per line below, 1ms apart, so listings are
// newest first in exactly the reverse of this order.
func mixedStatuses(t *testing.T, s *env, clock *pipeline.ManualClock) {
	t.Helper()
	ctx := context.Background()
	step := func() { clock.Advance(time.Millisecond) }
	finish := func(c pipeline.Claimed, o pipeline.Outcome) {
		t.Helper()
		if err := s.Finish(ctx, c.Lease, o); err != nil {
			t.Fatalf("finish %s as %s: %v", c.Job.ID, o.Status, err)
		}
	}
	ownQueueJob(t, s, "v1-p1", "acme") // pending
	step()
	ownQueueJob(t, s, "v1-p2", "acme") // pending
	step()
	claimOwn(t, s, "v1-r1", "acme") // running
	step()
	for _, id := range []string{"v1-s1", "v1-s2", "v1-s3"} {
		finish(claimOwn(t, s, id, "acme"), pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "renders/" + id})
		step()
	}
	finish(claimOwn(t, s, "v1-n1", "acme"), pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"})
	step()
	finish(claimOwn(t, s, "v1-w1", "acme"), pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: clock.Now().Add(time.Hour),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_unavailable"})
	step()
	finish(claimOwn(t, s, "v1-f1", "acme"), pipeline.Outcome{Status: pipeline.StatusFailed,
		ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_input"})
	step()
	ownQueueJob(t, s, "v1-c1", "acme")
	if _, err := s.RequestCancel(ctx, "acme", "v1-c1"); err != nil {
		t.Fatal(err)
	}
	step()
	dl := newJob("v1-d1")
	dl.Queue, dl.DeadLetterReason, dl.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
	mustCreate(t, s, dl)
	step()
	finish(claimOwn(t, s, "v1-g1", "globex"), pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"})
	step()
	ownQueueJob(t, s, "v1-g2", "globex")
	step()

	want := map[string]struct {
		st     pipeline.Status
		action bool
	}{
		"v1-p1": {pipeline.StatusPending, false}, "v1-p2": {pipeline.StatusPending, false},
		"v1-r1": {pipeline.StatusRunning, false},
		"v1-s1": {pipeline.StatusSucceeded, false}, "v1-s2": {pipeline.StatusSucceeded, false}, "v1-s3": {pipeline.StatusSucceeded, false},
		"v1-n1": {pipeline.StatusNeedsReview, true}, "v1-w1": {pipeline.StatusRetryWait, false},
		"v1-f1": {pipeline.StatusFailed, false}, "v1-c1": {pipeline.StatusCanceled, false},
		"v1-d1": {pipeline.StatusDeadLettered, true},
		"v1-g1": {pipeline.StatusNeedsReview, true}, "v1-g2": {pipeline.StatusPending, false},
	}
	for id, w := range want {
		j, err := s.GetJob(ctx, id)
		if err != nil || j.Status != w.st || j.RequiresAction != w.action {
			t.Fatalf("fixture job %s: status %s requires_action %v (%v); want %s %v", id, j.Status, j.RequiresAction, err, w.st, w.action)
		}
	}
}

// Listing is scoped to one tenant unless the caller is an operator; a
// missing tenant is refused, never widened to everyone.
func testListJobsTenantScope(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mixedStatuses(t, s, clock)

	for _, f := range []pipeline.ListFilter{{}, {Statuses: []pipeline.Status{pipeline.StatusPending}}, {RequiresAction: true, Limit: 10}} {
		js, next, err := s.ListJobs(ctx, f)
		if !errors.Is(err, pipeline.ErrInvalidInput) || js != nil || next != (pipeline.Cursor{}) {
			t.Errorf("ListJobs(%+v) without a tenant = %v, %+v, %v; want ErrInvalidInput and nothing", f, jobIDs(js), next, err)
		}
	}
	tests := []struct {
		f    pipeline.ListFilter
		want []string
	}{
		{pipeline.ListFilter{Tenant: "acme"}, []string{"v1-d1", "v1-c1", "v1-f1", "v1-w1", "v1-n1", "v1-s3", "v1-s2", "v1-s1", "v1-r1", "v1-p2", "v1-p1"}},
		{pipeline.ListFilter{Tenant: "globex"}, []string{"v1-g2", "v1-g1"}},
		{pipeline.ListFilter{Tenant: "nobody"}, nil},
		{pipeline.ListFilter{AllTenants: true}, []string{"v1-g2", "v1-g1", "v1-d1", "v1-c1", "v1-f1", "v1-w1", "v1-n1", "v1-s3", "v1-s2", "v1-s1", "v1-r1", "v1-p2", "v1-p1"}},
	}
	for _, tt := range tests {
		js, next := mustList(t, s, tt.f)
		if got := jobIDs(js); !slices.Equal(got, tt.want) {
			t.Errorf("ListJobs(%+v) = %v, want %v", tt.f, got, tt.want)
		}
		if next != (pipeline.Cursor{}) {
			t.Errorf("ListJobs(%+v) returned next cursor %+v for a single page", tt.f, next)
		}
	}

	// GetTenantJob: another tenant's job looks exactly like a missing one.
	if j, err := s.GetTenantJob(ctx, "acme", "v1-p1"); err != nil || j.ID != "v1-p1" || j.Tenant != "acme" {
		t.Errorf("GetTenantJob(acme, v1-p1) = %s/%s, %v", j.ID, j.Tenant, err)
	}
	for _, tc := range [][2]string{{"globex", "v1-p1"}, {"acme", "v1-g1"}, {"acme", "v1-missing"}} {
		if _, err := s.GetTenantJob(ctx, tc[0], tc[1]); !errors.Is(err, pipeline.ErrNotFound) {
			t.Errorf("GetTenantJob(%s, %s) = %v, want ErrNotFound", tc[0], tc[1], err)
		}
	}
}

// Status and requires-action filters, alone and combined with the tenant.
func testListJobsFilters(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mixedStatuses(t, s, clock)
	st := func(ss ...pipeline.Status) []pipeline.Status { return ss }
	tests := []struct {
		name string
		f    pipeline.ListFilter
		want []string
	}{
		{"pending", pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusPending)}, []string{"v1-p2", "v1-p1"}},
		{"pending all tenants", pipeline.ListFilter{AllTenants: true, Statuses: st(pipeline.StatusPending)}, []string{"v1-g2", "v1-p2", "v1-p1"}},
		{"running and succeeded", pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusRunning, pipeline.StatusSucceeded)},
			[]string{"v1-s3", "v1-s2", "v1-s1", "v1-r1"}},
		{"three ended kinds", pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusFailed, pipeline.StatusCanceled, pipeline.StatusDeadLettered)},
			[]string{"v1-d1", "v1-c1", "v1-f1"}},
		{"retry_wait", pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusRetryWait)}, []string{"v1-w1"}},
		{"status with no jobs", pipeline.ListFilter{Tenant: "globex", Statuses: st(pipeline.StatusSucceeded)}, nil},
		{"empty status list means any", pipeline.ListFilter{Tenant: "globex", Statuses: st()}, []string{"v1-g2", "v1-g1"}},
		{"the empty status matches no job", pipeline.ListFilter{Tenant: "globex", Statuses: st("")}, nil},
		{"the empty status among others", pipeline.ListFilter{Tenant: "acme", Statuses: st("", pipeline.StatusPending)}, []string{"v1-p2", "v1-p1"}},
		{"a status twice lists its jobs once", pipeline.ListFilter{AllTenants: true, Statuses: st(pipeline.StatusPending, pipeline.StatusPending)},
			[]string{"v1-g2", "v1-p2", "v1-p1"}},
		{"requires action", pipeline.ListFilter{Tenant: "acme", RequiresAction: true}, []string{"v1-d1", "v1-n1"}},
		{"requires action all tenants", pipeline.ListFilter{AllTenants: true, RequiresAction: true}, []string{"v1-g1", "v1-d1", "v1-n1"}},
		{"requires action and status", pipeline.ListFilter{AllTenants: true, RequiresAction: true, Statuses: st(pipeline.StatusNeedsReview)},
			[]string{"v1-g1", "v1-n1"}},
		{"requires action excludes", pipeline.ListFilter{Tenant: "acme", RequiresAction: true, Statuses: st(pipeline.StatusFailed, pipeline.StatusPending)}, nil},
		{"filters and limit", pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusSucceeded, pipeline.StatusPending), Limit: 3},
			[]string{"v1-s3", "v1-s2", "v1-s1"}},
	}
	for _, tt := range tests {
		js, _ := mustList(t, s, tt.f)
		if got := jobIDs(js); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ListJobs(%+v) = %v, want %v", tt.name, tt.f, got, tt.want)
		}
		for _, j := range js {
			if tt.f.RequiresAction && !j.RequiresAction {
				t.Errorf("%s: %s listed without requires_action", tt.name, j.ID)
			}
		}
	}
	// The filtered page continues with the same filter.
	f := pipeline.ListFilter{Tenant: "acme", Statuses: st(pipeline.StatusSucceeded, pipeline.StatusPending), Limit: 3}
	js, next := mustList(t, s, f)
	if want := cursorOf(js[2]); next != want {
		t.Fatalf("filtered next cursor %+v, want %+v", next, want)
	}
	f.After = next
	js, next = mustList(t, s, f)
	if got := jobIDs(js); !slices.Equal(got, []string{"v1-p2", "v1-p1"}) || next != (pipeline.Cursor{}) {
		t.Fatalf("filtered second page %v next %+v, want [v1-p2 v1-p1] and no cursor", got, next)
	}
}

// Newest first by (created_at, id), paged with a cursor that is zero exactly
// on the last page; ties on created_at are broken by id, descending.
func testListJobsOrderAndCursor(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	// Three at t0 (created out of id order), one 1ms later, two 1s later.
	for _, id := range []string{"v1-m", "v1-z", "v1-k"} {
		mustCreate(t, s, newJob(id))
	}
	clock.Advance(time.Millisecond)
	mustCreate(t, s, newJob("v1-b"))
	clock.Advance(time.Second)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-y"))
	all := []string{"v1-y", "v1-a", "v1-b", "v1-z", "v1-m", "v1-k"}
	t1, t2 := t0.Add(time.Millisecond), t0.Add(time.Millisecond+time.Second)
	created := map[string]time.Time{"v1-m": t0, "v1-z": t0, "v1-k": t0, "v1-b": t1, "v1-a": t2, "v1-y": t2}

	// One page with everything: each row is the stored job.
	js, next := mustList(t, s, pipeline.ListFilter{Tenant: "acme"})
	if got := jobIDs(js); !slices.Equal(got, all) || next != (pipeline.Cursor{}) {
		t.Fatalf("full listing %v next %+v, want %v and no cursor", got, next, all)
	}
	for _, j := range js {
		if !j.CreatedAt.Equal(created[j.ID]) {
			t.Errorf("%s created at %v, want %v", j.ID, j.CreatedAt, created[j.ID])
		}
		stored, err := s.GetJob(ctx, j.ID)
		if err != nil || !reflect.DeepEqual(j, stored) {
			t.Errorf("listed %+v\nstored %+v (%v)", j, stored, err)
		}
	}

	// Every page size walks the same sequence; the cursor is the last row
	// of a page exactly when more follow.
	for limit := 1; limit <= len(all)+1; limit++ {
		var got []string
		f := pipeline.ListFilter{Tenant: "acme", Limit: limit}
		for page := 0; ; page++ {
			if page > len(all) {
				t.Fatalf("limit %d: more than %d pages (cursor not advancing?)", limit, len(all))
			}
			js, next := mustList(t, s, f)
			remaining := len(all) - len(got)
			if want := min(limit, remaining); len(js) != want {
				t.Fatalf("limit %d page %d: %d jobs, want %d", limit, page, len(js), want)
			}
			got = append(got, jobIDs(js)...)
			last := len(got) == len(all)
			if last {
				if next != (pipeline.Cursor{}) {
					t.Fatalf("limit %d page %d: last page has cursor %+v", limit, page, next)
				}
				break
			}
			if want := cursorOf(js[len(js)-1]); next != want {
				t.Fatalf("limit %d page %d: cursor %+v, want %+v", limit, page, next, want)
			}
			f.After = next
		}
		if !slices.Equal(got, all) {
			t.Errorf("limit %d: pages gave %v, want %v", limit, got, all)
		}
	}

	// Cursors that are not a listed row's: inside and around the tie.
	tests := []struct {
		after pipeline.Cursor
		want  []string
	}{
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: "v1-z"}, []string{"v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: "v1-n"}, []string{"v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: "v1-zz"}, []string{"v1-z", "v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: "v1-k"}, nil},
		{pipeline.Cursor{CreatedAtMS: t1.UnixMilli(), ID: "v1-b"}, []string{"v1-z", "v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t1.UnixMilli(), ID: "v1-c"}, []string{"v1-b", "v1-z", "v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t2.UnixMilli(), ID: "v1-a"}, []string{"v1-b", "v1-z", "v1-m", "v1-k"}},
		{pipeline.Cursor{CreatedAtMS: t2.UnixMilli() + 1, ID: "v1-a"}, all},
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli() - 1, ID: "v1-zzz"}, nil},
		// No id: not a cursor, the first page.
		{pipeline.Cursor{CreatedAtMS: t0.UnixMilli()}, all},
	}
	for _, tt := range tests {
		js, next := mustList(t, s, pipeline.ListFilter{Tenant: "acme", After: tt.after})
		if got := jobIDs(js); !slices.Equal(got, tt.want) || next != (pipeline.Cursor{}) {
			t.Errorf("after %+v: %v next %+v, want %v and no cursor", tt.after, got, next, tt.want)
		}
	}
}

// The page size defaults to 50 when not positive and is clamped to 500.
func testListJobsLimitDefaultAndClamp(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	const n = 502
	njs := make([]pipeline.NewJob, n)
	for i := range njs {
		njs[i] = newJob(fmt.Sprintf("v1-bulk%03d", i))
	}
	if err := s.CreateJobs(ctx, njs); err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return fmt.Sprintf("v1-bulk%03d", i) }
	// All share t0, so the order is by id, descending: bulk501 first.
	tests := []struct {
		limit, want int
	}{
		{-7, 50}, {0, 50}, {1, 1}, {2, 2}, {3, 3}, {49, 49}, {50, 50}, {51, 51}, {499, 499}, {500, 500}, {501, 500}, {502, 500}, {10000, 500},
	}
	for _, tt := range tests {
		js, next := mustList(t, s, pipeline.ListFilter{Tenant: "acme", Limit: tt.limit})
		if len(js) != tt.want {
			t.Errorf("limit %d: %d jobs, want %d", tt.limit, len(js), tt.want)
			continue
		}
		if js[0].ID != id(n-1) || js[len(js)-1].ID != id(n-tt.want) {
			t.Errorf("limit %d: page %s..%s, want %s..%s", tt.limit, js[0].ID, js[len(js)-1].ID, id(n-1), id(n-tt.want))
		}
		if want := (pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: id(n - tt.want)}); next != want {
			t.Errorf("limit %d: next %+v, want %+v", tt.limit, next, want)
		}
	}
	// The clamped page continues to the end.
	_, next := mustList(t, s, pipeline.ListFilter{Tenant: "acme", Limit: 501})
	js, next := mustList(t, s, pipeline.ListFilter{Tenant: "acme", Limit: 501, After: next})
	if got := jobIDs(js); !slices.Equal(got, []string{id(1), id(0)}) || next != (pipeline.Cursor{}) {
		t.Fatalf("after the clamped page: %v next %+v, want [%s %s] and no cursor", got, next, id(1), id(0))
	}
	// Exactly a full page left: no cursor.
	js, next = mustList(t, s, pipeline.ListFilter{Tenant: "acme", Limit: 2, After: pipeline.Cursor{CreatedAtMS: t0.UnixMilli(), ID: id(2)}})
	if len(js) != 2 || next != (pipeline.Cursor{}) {
		t.Fatalf("last full page: %v next %+v, want 2 jobs and no cursor", jobIDs(js), next)
	}
}

// CountByStatus counts every job once, by its current status, across tenants.
func testCountByStatus(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	got, err := s.CountByStatus(ctx)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v; want an empty map", got, err)
	}
	mixedStatuses(t, s, clock)
	got, err = s.CountByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[pipeline.Status]int{
		pipeline.StatusPending: 3, pipeline.StatusRunning: 1, pipeline.StatusSucceeded: 3, pipeline.StatusNeedsReview: 2,
		pipeline.StatusRetryWait: 1, pipeline.StatusFailed: 1, pipeline.StatusCanceled: 1, pipeline.StatusDeadLettered: 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CountByStatus = %v, want %v", got, want)
	}
	// A transition moves one job between counts.
	if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: "v1-n1", Decision: pipeline.DecisionFail, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	want[pipeline.StatusNeedsReview], want[pipeline.StatusFailed] = 1, 2
	if got, err = s.CountByStatus(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after a decision: %v, %v; want %v", got, err, want)
	}
}

type callSpec struct {
	scene    int
	op       string
	contract pipeline.Contract
	status   string // intent leaves the call open
}

func recordCalls(t *testing.T, s *env, c pipeline.Claimed, calls []callSpec) {
	t.Helper()
	ctx := context.Background()
	for i, cl := range calls {
		id, err := s.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: cl.scene, Op: cl.op, Provider: "fake",
			Contract: cl.contract, IdempotencyKey: fmt.Sprintf("%s-%d", c.Job.ID, i)})
		if err != nil {
			t.Fatalf("RecordIntent %s %+v: %v", c.Job.ID, cl, err)
		}
		if cl.status == pipeline.CallIntent {
			continue
		}
		if err := s.FinishCall(ctx, &pipeline.FinishCallParams{ID: id, Status: cl.status, HTTPStatus: 0, ErrorCode: "", ExternalID: ""}); err != nil {
			t.Fatalf("FinishCall %s %+v: %v", c.Job.ID, cl, err)
		}
	}
}

// billingFixture writes an audit trail over three jobs. v1-bill-w went to
// review and an operator retried it, which waived its unknown calls and its
// answered image/speech calls (no unit holds their artifacts).
func billingFixture(t *testing.T, s *env) {
	t.Helper()
	ctx := context.Background()
	const (
		syn = pipeline.ContractSync
		idm = pipeline.ContractIdempotentVerified
		asy = pipeline.ContractAsyncPollable
	)
	// Created in reverse id order, so row ids do not follow job ids.
	w := claimOwn(t, s, "v1-bill-w", "acme")
	recordCalls(t, s, w, []callSpec{
		{0, pipeline.OpImage, syn, pipeline.CallAmbiguous},
		{0, pipeline.OpImage, syn, pipeline.CallAmbiguous},
		{0, pipeline.OpSpeech, syn, pipeline.CallIntent},
		{1, pipeline.OpImage, syn, pipeline.CallAmbiguous},
		{1, pipeline.OpSpeech, syn, pipeline.CallSucceeded},
		{1, pipeline.OpVideoSubmit, asy, pipeline.CallSucceeded}, // never waived
		{1, pipeline.OpImage, syn, pipeline.CallFailed},          // never billed, never waived
		{12, pipeline.OpSpeech, syn, pipeline.CallAmbiguous},
	})
	if err := s.Finish(ctx, w.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: "v1-bill-w", Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}

	b := claimOwn(t, s, "v1-bill-b", "globex")
	recordCalls(t, s, b, []callSpec{
		{2, pipeline.OpImage, syn, pipeline.CallSucceeded},
		{0, pipeline.OpImage, syn, pipeline.CallAmbiguous},
		{2, pipeline.OpImage, syn, pipeline.CallIntent},
		{0, pipeline.OpImage, syn, pipeline.CallSucceeded},
		{0, pipeline.OpSpeech, syn, pipeline.CallFailed},
		{0, pipeline.OpSpeech, syn, pipeline.CallFailed}, // two refusals: not a group
		{1, pipeline.OpImage, syn, pipeline.CallNotSent},
		{1, pipeline.OpImage, syn, pipeline.CallNotSent}, // never sent: not a group
	})

	a := claimOwn(t, s, "v1-bill-a", "acme")
	recordCalls(t, s, a, []callSpec{
		{0, pipeline.OpImage, syn, pipeline.CallIntent},
		{0, pipeline.OpImage, syn, pipeline.CallSucceeded},
		{0, pipeline.OpImage, syn, pipeline.CallAmbiguous},
		{0, pipeline.OpImage, syn, pipeline.CallNotSent},
		{0, pipeline.OpImage, syn, pipeline.CallFailed},
		{0, pipeline.OpImage, idm, pipeline.CallSucceeded}, // another contract: its own group of one
		{0, pipeline.OpSpeech, syn, pipeline.CallSucceeded},
		{0, pipeline.OpSpeech, syn, pipeline.CallSucceeded},
		{1, pipeline.OpSpeech, syn, pipeline.CallSucceeded},
		{1, pipeline.OpVideoSubmit, asy, pipeline.CallFailed},
		{1, pipeline.OpVideoSubmit, asy, pipeline.CallNotSent},
	})
}

// Only intent, succeeded and ambiguous calls may have been billed; not_sent,
// failed and waived ones are not counted.
func testCountBilledCallsByStatus(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	got, err := s.CountBilledCalls(ctx)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v; want an empty map", got, err)
	}
	billingFixture(t, s)
	got, err = s.CountBilledCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// image: a 3 sync + 1 idempotent, b 4; w's are waived or failed.
	// speech: a 3; w's and b's are waived or failed.
	// video_submit: w's succeeded submission; a's failed and not_sent.
	want := map[string]int{pipeline.OpImage: 8, pipeline.OpSpeech: 3, pipeline.OpVideoSubmit: 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CountBilledCalls = %v, want %v", got, want)
	}
}

// Groups of more than one possibly billed call per (job, scene, op,
// contract), ordered by job and scene.
func testBilledCallGroups(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	if gs, err := s.BilledCallGroups(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("empty store: %+v, %v", gs, err)
	}
	billingFixture(t, s)
	got, err := s.BilledCallGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The SQL orders by (job, scene) only: check that, then compare the
	// groups of one scene in a fixed order.
	for i := 1; i < len(got); i++ {
		p, c := got[i-1], got[i]
		if p.JobID > c.JobID || (p.JobID == c.JobID && p.Scene > c.Scene) {
			t.Errorf("group %d (%s/%d) comes before group %d (%s/%d)", i-1, p.JobID, p.Scene, i, c.JobID, c.Scene)
		}
	}
	sorted := slices.Clone(got)
	slices.SortStableFunc(sorted, func(x, y pipeline.BilledCallGroup) int {
		return strings.Compare(fmt.Sprintf("%s|%04d|%s|%s", x.JobID, x.Scene, x.Op, x.Contract), fmt.Sprintf("%s|%04d|%s|%s", y.JobID, y.Scene, y.Op, y.Contract))
	})
	want := []pipeline.BilledCallGroup{
		{JobID: "v1-bill-a", Scene: 0, Op: pipeline.OpImage, Contract: pipeline.ContractSync, Count: 3},
		{JobID: "v1-bill-a", Scene: 0, Op: pipeline.OpSpeech, Contract: pipeline.ContractSync, Count: 2},
		{JobID: "v1-bill-b", Scene: 0, Op: pipeline.OpImage, Contract: pipeline.ContractSync, Count: 2},
		{JobID: "v1-bill-b", Scene: 2, Op: pipeline.OpImage, Contract: pipeline.ContractSync, Count: 2},
	}
	if !reflect.DeepEqual(sorted, want) {
		t.Fatalf("BilledCallGroups = %+v\nwant %+v", got, want)
	}
}

// WaivedCalls maps "job/scene" to the waived calls per operation.
func testWaivedCalls(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	if got, err := s.WaivedCalls(ctx); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v; want an empty map", got, err)
	}
	billingFixture(t, s)
	got, err := s.WaivedCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{
		"v1-bill-w/0":  {pipeline.OpImage: 2, pipeline.OpSpeech: 1},
		"v1-bill-w/1":  {pipeline.OpImage: 1, pipeline.OpSpeech: 1},
		"v1-bill-w/12": {pipeline.OpSpeech: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("WaivedCalls = %v, want %v", got, want)
	}
}

var errStop = errors.New("stop here")

// EachJob visits every job, whatever its tenant or status, in id order, as
// stored; the callback's error stops the walk and is returned.
func testEachJob(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	calls := 0
	if err := s.EachJob(ctx, func(pipeline.Job) error { calls++; return nil }); err != nil || calls != 0 {
		t.Fatalf("empty store: %d calls, %v", calls, err)
	}
	mixedStatuses(t, s, clock)
	var got []string
	if err := s.EachJob(ctx, func(j pipeline.Job) error {
		stored, err := s.GetJob(ctx, j.ID)
		if err != nil || !reflect.DeepEqual(j, stored) {
			t.Errorf("visited %+v\nstored  %+v (%v)", j, stored, err)
		}
		got = append(got, j.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"v1-c1", "v1-d1", "v1-f1", "v1-g1", "v1-g2", "v1-n1", "v1-p1", "v1-p2", "v1-r1", "v1-s1", "v1-s2", "v1-s3", "v1-w1"}
	if !slices.Equal(got, want) {
		t.Fatalf("EachJob visited %v, want %v", got, want)
	}
	got = got[:0]
	err := s.EachJob(ctx, func(j pipeline.Job) error {
		got = append(got, j.ID)
		if len(got) == 3 {
			return fmt.Errorf("job %s: %w", j.ID, errStop)
		}
		return nil
	})
	if !errors.Is(err, errStop) || !slices.Equal(got, want[:3]) {
		t.Fatalf("stopping at the third job: visited %v, err %v", got, err)
	}
}

// EachAuditEvent yields created, status, redriven and stage_started events
// only, ordered by job and then by event id, as Events stores them.
func testEachAuditEvent(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	calls := 0
	if err := s.EachAuditEvent(ctx, func(pipeline.AuditEvent) error { calls++; return nil }); err != nil || calls != 0 {
		t.Fatalf("empty store: %d calls, %v", calls, err)
	}
	x := seedAuditHistory(t, s, clock)

	type ev struct {
		job, kind string
		from, to  pipeline.Status
	}
	wantSeq := []ev{
		{"v1-x", pipeline.EventCreated, "", pipeline.StatusPending},
		{"v1-x", pipeline.EventStatus, pipeline.StatusPending, pipeline.StatusRunning},
		{"v1-x", pipeline.EventStageStarted, "", ""},
		{"v1-x", pipeline.EventStatus, pipeline.StatusRunning, pipeline.StatusNeedsReview},
		{"v1-x", pipeline.EventStatus, pipeline.StatusNeedsReview, pipeline.StatusPending},
		{"v1-x", pipeline.EventStatus, pipeline.StatusPending, pipeline.StatusCanceled},
		{"v1-y", pipeline.EventCreated, "", pipeline.StatusPending},
		{"v1-y", pipeline.EventStatus, pipeline.StatusPending, pipeline.StatusDeadLettered},
		{"v1-y", pipeline.EventRedriven, "", ""},
		{"v1-y", pipeline.EventStatus, pipeline.StatusDeadLettered, pipeline.StatusPending},
	}
	// The same rows, as Events returns them.
	audited := map[string]bool{pipeline.EventCreated: true, pipeline.EventStatus: true, pipeline.EventRedriven: true, pipeline.EventStageStarted: true}
	var want []pipeline.Event
	for _, id := range []string{"v1-x", "v1-y"} {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if audited[e.Kind] {
				want = append(want, e)
			}
		}
	}
	var got []pipeline.Event
	if err := s.EachAuditEvent(ctx, func(e pipeline.AuditEvent) error {
		if e.InstanceID != e.JobID { // jobs created without an instance id are addressed by their key
			t.Errorf("event %d of %s: instance id %q", e.ID, e.JobID, e.InstanceID)
		}
		got = append(got, e.Event)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(wantSeq) {
		t.Fatalf("EachAuditEvent gave %d events, want %d: %+v", len(got), len(wantSeq), got)
	}
	for i, e := range got {
		if w := wantSeq[i]; e.JobID != w.job || e.Kind != w.kind || e.FromStatus != w.from || e.ToStatus != w.to {
			t.Errorf("event %d: %s %s %s→%s, want %s %s %s→%s", i, e.JobID, e.Kind, e.FromStatus, e.ToStatus, w.job, w.kind, w.from, w.to)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("EachAuditEvent rows differ from Events:\ngot  %+v\nwant %+v", got, want)
	}
	if got[0].ID <= got[6].ID {
		t.Errorf("fixture: v1-x's first event id %d is not above v1-y's first %d, so job order is not tested", got[0].ID, got[6].ID)
	}
	if !got[2].At.Equal(t0.Add(2*time.Second)) || got[2].AttemptID != x.Lease.AttemptID || !strings.Contains(string(got[2].Detail), `"stage":"execute"`) {
		t.Errorf("stage_started event %+v", got[2])
	}

	var seen []pipeline.Event
	err := s.EachAuditEvent(ctx, func(e pipeline.AuditEvent) error {
		seen = append(seen, e.Event)
		if len(seen) == 4 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || !reflect.DeepEqual(seen, want[:4]) {
		t.Fatalf("stopping at the fourth event: %d seen, err %v", len(seen), err)
	}
}

// seedAuditHistory gives two jobs a history with every audited event kind
// and some that are not audited: v1-x is claimed, records stage and unit
// events, goes to review, is retried and canceled; v1-y is dead-lettered
// at submission and redriven. v1-y is created first (it has the lowest event
// ids) but sorts last. It returns v1-x's claim.
func seedAuditHistory(t *testing.T, s *env, clock *pipeline.ManualClock) pipeline.Claimed {
	t.Helper()
	ctx := context.Background()
	y := newJob("v1-y")
	y.Queue, y.DeadLetterReason, y.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
	mustCreate(t, s, y)
	clock.Advance(time.Second)
	x := claimOwn(t, s, "v1-x", "acme")
	clock.Advance(time.Second)
	for _, kind := range []string{pipeline.EventStageStarted, pipeline.EventStageFinished, pipeline.EventUnitGenerated, pipeline.EventUnitReused, pipeline.EventUnitSubmitted} {
		if err := s.AppendEvent(ctx, x.Lease, kind, map[string]any{"stage": "execute"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish(ctx, x.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := s.Decide(ctx, &pipeline.DecideParams{JobID: "v1-x", Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil { // decision: not audited
		t.Fatal(err)
	}
	if _, err := s.RequestCancel(ctx, "acme", "v1-x"); err != nil { // cancel_requested: not audited
		t.Fatal(err)
	}
	dls, err := s.ListDeadLetters(ctx, false, 0, 0)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	clock.Advance(time.Second)
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[0].ID, Queue: "render-v1", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	return x
}

// ListAssets walks committed assets in key order; claims without a commit
// are not assets.
func testListAssets(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	calls := 0
	if err := s.ListAssets(ctx, func(pipeline.Asset) error { calls++; return nil }); err != nil || calls != 0 {
		t.Fatalf("empty store: %d calls, %v", calls, err)
	}
	a := claimOwn(t, s, "v1-la", "acme")
	b := claimOwn(t, s, "v1-lb", "globex")
	commit := func(c pipeline.Claimed, key string, size int64) {
		t.Helper()
		if err := s.ClaimObject(ctx, c.Lease, key); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
		if err := s.CommitAsset(ctx, c.Lease, pipeline.Asset{Key: key, Kind: "image", SizeBytes: size,
			SHA256: strings.Repeat("f", 64), ContentType: "image/png", DurationMS: int(size)}); err != nil {
			t.Fatal(err)
		}
	}
	commit(a, "units/v1/cc/3.png", 3)
	commit(b, "units/v1/aa/1.png", 1)
	commit(a, "units/v1/bb/2.png", 2)
	commit(b, "renders/v1/zz.mp4", 4)
	if err := s.ClaimObject(ctx, a.Lease, "units/v1/ab/uncommitted.png"); err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"renders/v1/zz.mp4", "units/v1/aa/1.png", "units/v1/bb/2.png", "units/v1/cc/3.png"}
	var got []pipeline.Asset
	if err := s.ListAssets(ctx, func(x pipeline.Asset) error { got = append(got, x); return nil }); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, x := range got {
		keys = append(keys, x.Key)
		stored, err := s.GetAsset(ctx, x.Key)
		if err != nil || stored != x {
			t.Errorf("listed %+v\nstored %+v (%v)", x, stored, err)
		}
	}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("ListAssets keys %v, want %v", keys, wantKeys)
	}
	if x := got[1]; x.JobID != "v1-lb" || x.CreatedByAttempt != b.Lease.AttemptID || x.SizeBytes != 1 || !x.CreatedAt.Equal(t0.Add(2*time.Millisecond)) {
		t.Errorf("asset %+v", x)
	}
	var seen []string
	err := s.ListAssets(ctx, func(x pipeline.Asset) error {
		seen = append(seen, x.Key)
		if len(seen) == 2 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || !slices.Equal(seen, wantKeys[:2]) {
		t.Fatalf("stopping at the second asset: %v, %v", seen, err)
	}
}

// KeyReferenced: an asset row, a 'deleting' claim, or a 'writing' claim of
// the current attempt of a running job whose lease has not yet expired.
func testKeyReferenced(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	check := func(key string, want bool) {
		t.Helper()
		got, err := s.KeyReferenced(ctx, key)
		if err != nil || got != want {
			t.Fatalf("KeyReferenced(%s) at %v = %v, %v; want %v", key, clock.Now().Sub(t0), got, err, want)
		}
	}
	const (
		live  = "units/v1/aa/live.png"
		asset = "units/v1/aa/asset.png"
		swept = "units/v1/aa/swept.png"
		two   = "units/v1/aa/two.png"
		del   = "units/v1/aa/del.png"
	)
	nj := ownQueueJob(t, s, "v1-kr", "acme")
	a1 := fetchOne(t, s, nj.Queue, "w1") // lease of one minute
	check(live, false)
	if err := s.ClaimObject(ctx, a1.Lease, live); err != nil {
		t.Fatal(err)
	}
	check(live, true)
	check("units/v1/aa/other.png", false)
	if err := s.ClaimObject(ctx, a1.Lease, asset); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitAsset(ctx, a1.Lease, assetFor(asset)); err != nil {
		t.Fatal(err)
	}
	check(asset, true)
	if ok, err := s.ClaimForSweep(ctx, "sweeper", swept); err != nil || !ok {
		t.Fatalf("ClaimForSweep = %v, %v", ok, err)
	}
	check(swept, true) // a 'deleting' claim with no job

	// The lease runs out exactly at a1.Lease.ExpiresAt.
	clock.Set(a1.Lease.ExpiresAt.Add(-time.Millisecond))
	check(live, true)
	clock.Set(a1.Lease.ExpiresAt)
	check(live, false)
	check(asset, true)
	check(swept, true)

	// Another attempt takes over: a1's claim is not its claim.
	a2 := fetchOne(t, s, nj.Queue, "w2")
	if a2.Lease.AttemptID == a1.Lease.AttemptID {
		t.Fatal("takeover kept the attempt id")
	}
	check(live, false)
	for _, k := range []string{two, del} {
		if err := s.ClaimObject(ctx, a2.Lease, k); err != nil {
			t.Fatal(err)
		}
		check(k, true)
	}
	if d, err := s.AbandonClaim(ctx, a2.Lease.AttemptID, del); err != nil || !d {
		t.Fatalf("AbandonClaim = %v, %v", d, err)
	}
	// Once the job is no longer running, only 'deleting' claims and assets count.
	if err := s.Finish(ctx, a2.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: asset}); err != nil {
		t.Fatal(err)
	}
	if n := claimsOn(t, s, two); n != 1 {
		t.Fatalf("%d claims on %s, want the finished attempt's", n, two)
	}
	check(two, false)
	check(del, true)
	check(asset, true)
	if err := s.FinishAbandon(ctx, a2.Lease.AttemptID, del); err != nil {
		t.Fatal(err)
	}
	check(del, false)
}

// Open dead letters are counted by reason; GetDeadLetter reads one row,
// before and after its redrive.
func testDeadLetterReads(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	if got, err := s.CountDeadLetters(ctx); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v; want an empty map", got, err)
	}
	if _, err := s.GetDeadLetter(ctx, 1); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("GetDeadLetter on an empty store: %v, want ErrNotFound", err)
	}
	mustCreate(t, s, newJob("v1-ex"))
	c := fetchOne(t, s, "render-v1", "w")
	clock.Advance(time.Second)
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonRetriesExhausted}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	for _, id := range []string{"v1-u1", "v1-u2"} {
		nj := newJob(id)
		nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue, nj.DeadLetterDetail = "", pipeline.ReasonUnboundVersion, "render-v1", "v1 is not bound"
		mustCreate(t, s, nj)
	}
	counts, err := s.CountDeadLetters(ctx)
	if want := map[string]int{pipeline.ReasonRetriesExhausted: 1, pipeline.ReasonUnboundVersion: 2}; err != nil || !reflect.DeepEqual(counts, want) {
		t.Fatalf("CountDeadLetters = %v, %v; want %v", counts, err, want)
	}
	dls, err := s.ListDeadLetters(ctx, false, 0, 0)
	if err != nil || len(dls) != 3 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	byJob := map[string]pipeline.DeadLetter{}
	for _, d := range dls {
		got, err := s.GetDeadLetter(ctx, d.ID)
		if err != nil || got != d {
			t.Errorf("GetDeadLetter(%d) = %+v, %v; listed %+v", d.ID, got, err, d)
		}
		byJob[d.JobID] = d
	}
	ex := byJob["v1-ex"]
	if ex.Queue != "render-v1" || ex.Reason != pipeline.ReasonRetriesExhausted || ex.Detail != pipeline.ReasonRetriesExhausted ||
		!ex.DeadLetteredAt.Equal(t0.Add(time.Second)) || !ex.RedrivenAt.IsZero() || ex.RedrivenToQueue != "" {
		t.Errorf("retries-exhausted dead letter %+v", ex)
	}
	if u := byJob["v1-u1"]; u.Reason != pipeline.ReasonUnboundVersion || u.Detail != "v1 is not bound" || u.Queue != "render-v1" ||
		!u.DeadLetteredAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("unbound dead letter %+v", u)
	}

	clock.Advance(time.Second)
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: byJob["v1-u1"].ID, Queue: "render-v1", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	counts, err = s.CountDeadLetters(ctx)
	if want := map[string]int{pipeline.ReasonRetriesExhausted: 1, pipeline.ReasonUnboundVersion: 1}; err != nil || !reflect.DeepEqual(counts, want) {
		t.Fatalf("after one redrive: %v, %v; want %v", counts, err, want)
	}
	if _, err := s.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: ex.ID, Queue: "render-v1", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	counts, err = s.CountDeadLetters(ctx)
	if want := map[string]int{pipeline.ReasonUnboundVersion: 1}; err != nil || !reflect.DeepEqual(counts, want) {
		t.Fatalf("after both redrives: %v, %v; want %v", counts, err, want)
	}
	got, err := s.GetDeadLetter(ctx, byJob["v1-u1"].ID)
	if err != nil || !got.RedrivenAt.Equal(t0.Add(3*time.Second)) || got.RedrivenToQueue != "render-v1" || got.Reason != pipeline.ReasonUnboundVersion {
		t.Fatalf("redriven dead letter %+v, %v", got, err)
	}
	open, err := s.ListDeadLetters(ctx, false, 0, 0)
	if err != nil || len(open) != 1 || open[0].JobID != "v1-u2" {
		t.Fatalf("open dead letters %+v, %v; want v1-u2's only", open, err)
	}
	if every, err := s.ListDeadLetters(ctx, true, 0, 0); err != nil || len(every) != 3 {
		t.Fatalf("all dead letters %+v, %v; want 3", every, err)
	}
}

// The operators' listing (every tenant) is newest first by (created_at,
// internal key), and its cursor carries the internal key: paged at every
// size, alone and filtered by one status, by several or by needing
// action, it gives exactly the full listing, through ties on created_at
// whose instance ids sort the other way round from their keys and repeat
// across tenants. A tenant's listing is the same by (created_at, instance
// id), and its cursor carries the instance id.
func testListJobsOperatorsCursor(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	type row struct{ key, instance, tenant string }
	mk := func(r row, deadLetter bool) {
		t.Helper()
		nj := newJob(r.key)
		nj.InstanceID, nj.Tenant, nj.IdempotencyKey = r.instance, r.tenant, "key-"+r.key
		if deadLetter {
			nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
		}
		mustCreate(t, s, nj)
	}
	// At t0, five jobs: keys a..e, instance ids in the opposite order, two
	// tenants sharing instance ids; b and d dead-lettered (needing action,
	// as f below is).
	for i, r := range []row{{"v1-a", "v1-5", "acme"}, {"v1-c", "v1-3", "globex"}, {"v1-e", "v1-1", "acme"},
		{"v1-b", "v1-4", "globex"}, {"v1-d", "v1-1", "globex"}} {
		mk(r, i >= 3)
	}
	clock.Advance(time.Millisecond)
	mk(row{"v1-f", "v1-0", "acme"}, true)
	mk(row{"v1-0", "v1-9", "acme"}, false)
	clock.Advance(time.Second)
	mk(row{"v1-g", "v1-8", "globex"}, false)

	for _, tc := range []struct {
		name string
		f    pipeline.ListFilter
		want []string
	}{
		{"every job", pipeline.ListFilter{AllTenants: true}, []string{"v1-g", "v1-f", "v1-0", "v1-e", "v1-d", "v1-c", "v1-b", "v1-a"}},
		{"pending", pipeline.ListFilter{AllTenants: true, Statuses: []pipeline.Status{pipeline.StatusPending}},
			[]string{"v1-g", "v1-0", "v1-e", "v1-c", "v1-a"}},
		{"needing action", pipeline.ListFilter{AllTenants: true, RequiresAction: true}, []string{"v1-f", "v1-d", "v1-b"}},
		{"two statuses", pipeline.ListFilter{AllTenants: true, Statuses: []pipeline.Status{pipeline.StatusPending, pipeline.StatusDeadLettered}},
			[]string{"v1-g", "v1-f", "v1-0", "v1-e", "v1-d", "v1-c", "v1-b", "v1-a"}},
		{"one tenant", pipeline.ListFilter{Tenant: "acme"}, []string{"v1-0", "v1-f", "v1-a", "v1-e"}},
		{"one tenant, two statuses", pipeline.ListFilter{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusDeadLettered, pipeline.StatusPending}},
			[]string{"v1-0", "v1-f", "v1-a", "v1-e"}},
		{"one tenant, one status", pipeline.ListFilter{Tenant: "globex", Statuses: []pipeline.Status{pipeline.StatusDeadLettered}},
			[]string{"v1-b", "v1-d"}},
	} {
		js, next := mustList(t, s, tc.f)
		if got := jobIDs(js); !slices.Equal(got, tc.want) || next != (pipeline.Cursor{}) {
			t.Fatalf("%s: %v next %+v, want %v and no cursor", tc.name, got, next, tc.want)
		}
		for limit := 1; limit <= len(tc.want)+1; limit++ {
			f := tc.f
			f.Limit = limit
			var got []string
			for page := 0; ; page++ {
				if page > len(tc.want) {
					t.Fatalf("%s, limit %d: more than %d pages (cursor not advancing?)", tc.name, limit, len(tc.want))
				}
				js, next := mustList(t, s, f)
				got = append(got, jobIDs(js)...)
				if next == (pipeline.Cursor{}) {
					break
				}
				last := js[len(js)-1]
				want := pipeline.Cursor{CreatedAtMS: last.CreatedAt.UnixMilli(), ID: last.ID}
				if !tc.f.AllTenants {
					want.ID = last.InstanceID
				}
				if next != want {
					t.Fatalf("%s, limit %d page %d: cursor %+v, want the last row's %+v", tc.name, limit, page, next, want)
				}
				f.After = next
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s, limit %d: pages gave %v, want %v", tc.name, limit, got, tc.want)
			}
		}
	}
}

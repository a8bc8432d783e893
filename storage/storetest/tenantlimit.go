package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// The per-tenant running limit (FetchParams.TenantMaxRunning,
// EDGEPIPE_TENANT_MAX_RUNNING, docs/design.md §5).

// jobOf is newJob(id) of tenant (the internal key is id, unique across
// tenants, so the raw queries can name it).
func jobOf(tenant, id string) pipeline.NewJob {
	nj := newJob(id)
	nj.Tenant = tenant
	return nj
}

// fetchLimited fetches up to max jobs of render-v1 under a tenant limit.
func fetchLimited(t *testing.T, s *env, max, limit int) ([]pipeline.Claimed, pipeline.FetchStats) {
	t.Helper()
	cs, st, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: max,
		LeaseFor: time.Minute, TenantMaxRunning: limit})
	if err != nil {
		t.Fatalf("fetch(max %d, tenant limit %d): %v", max, limit, err)
	}
	return cs, st
}

func claimedIDs(cs []pipeline.Claimed) []string {
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.Job.ID)
	}
	slices.Sort(ids)
	return ids
}

// Limit 1, two ready jobs of acme and one of globex: one Fetch of 3 leases
// acme's first and globex's only; acme's second stays pending on the queue
// (visible, no delivery counted) until acme's first ends, then it is
// claimed.
func testTenantLimitClaimsOtherTenants(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, jobOf("acme", "v1-a1"))
	mustCreate(t, s, jobOf("acme", "v1-a2"))
	mustCreate(t, s, jobOf("globex", "v1-b1"))
	cs, st := fetchLimited(t, s, 3, 1)
	if got := claimedIDs(cs); !slices.Equal(got, []string{"v1-a1", "v1-b1"}) || st.TenantLimited != 1 || st.DeadLettered != 0 {
		t.Fatalf("claimed %v, stats %+v; want v1-a1 and v1-b1, one job left for acme's limit", got, st)
	}
	if statusOf(t, s, "v1-a2") != pipeline.StatusPending {
		t.Fatalf("v1-a2 is %s, want pending", statusOf(t, s, "v1-a2"))
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages WHERE job_id = 'v1-a2' AND delivery_count = 0 AND visible_at <= ?`,
		t0.UnixMilli()); n != 1 {
		t.Fatal("v1-a2's message was hidden or counted as a delivery")
	}
	if cs, _ := fetchLimited(t, s, 3, 1); len(cs) != 0 {
		t.Fatalf("claimed %v while acme is at its limit", claimedIDs(cs))
	}
	a1 := cs[slices.IndexFunc(cs, func(c pipeline.Claimed) bool { return c.Job.ID == "v1-a1" })]
	if err := s.Finish(ctx, a1.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	cs, _ = fetchLimited(t, s, 3, 1)
	if len(cs) != 1 || cs[0].Job.ID != "v1-a2" || cs[0].Deliveries != 1 {
		t.Fatalf("after v1-a1 finished: claimed %+v, want v1-a2 on its first delivery", cs)
	}
}

// The claim reads past a saturated tenant's messages, in one Fetch and
// across Fetches: globex's job behind four of acme's is claimed.
func testTenantLimitReadsPastSaturatedTenant(t *testing.T, h *Harness) {
	t.Parallel()
	s := h.open(t, pipeline.NewManualClock(t0))
	for i := range 4 {
		mustCreate(t, s, jobOf("acme", fmt.Sprintf("v1-a%d", i)))
	}
	mustCreate(t, s, jobOf("globex", "v1-b1"))
	mustCreate(t, s, jobOf("globex", "v1-b2"))
	// In one Fetch: the first page (2) is acme's a0 and a1; a1 finds acme
	// out of slots, so the next page leaves acme out and finds globex.
	cs, st := fetchLimited(t, s, 2, 1)
	if got := claimedIDs(cs); !slices.Equal(got, []string{"v1-a0", "v1-b1"}) || st.TenantLimited != 1 {
		t.Fatalf("claimed %v, stats %+v; want v1-a0 and v1-b1", got, st)
	}
	// Across Fetches: acme's ready messages come first, and once acme is at
	// its limit a Fetch of 1 still finds globex's second job behind them.
	cs, _ = fetchLimited(t, s, 1, 2)
	if got := claimedIDs(cs); !slices.Equal(got, []string{"v1-a1"}) {
		t.Fatalf("limit 2: claimed %v, want v1-a1", got)
	}
	cs, _ = fetchLimited(t, s, 1, 2)
	if got := claimedIDs(cs); !slices.Equal(got, []string{"v1-b2"}) {
		t.Fatalf("acme at its limit: claimed %v, want globex's v1-b2", got)
	}
}

// An expired lease does not count toward the limit (its job is claimable
// again), and a job taken over from an expired lease counts like any other.
func testTenantLimitExpiredLeaseDoesNotCount(t *testing.T, h *Harness) {
	t.Parallel()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, jobOf("acme", "v1-a1"))
	mustCreate(t, s, jobOf("acme", "v1-a2"))
	if cs, _ := fetchLimited(t, s, 2, 1); len(cs) != 1 || cs[0].Job.ID != "v1-a1" {
		t.Fatalf("claimed %v, want v1-a1", claimedIDs(cs))
	}
	clock.Advance(2 * time.Minute) // v1-a1's worker died; its lease ran out
	cs, st := fetchLimited(t, s, 2, 1)
	if len(cs) != 1 || cs[0].Job.ID != "v1-a2" {
		t.Fatalf("with v1-a1's lease expired: claimed %v (stats %+v), want v1-a2", claimedIDs(cs), st)
	}
	// v1-a1 is claimable (expired) but acme now has v1-a2 live.
	if cs, st := fetchLimited(t, s, 2, 1); len(cs) != 0 || st.DeadLettered != 0 {
		t.Fatalf("claimed %v, stats %+v; want v1-a1 left for acme's limit", claimedIDs(cs), st)
	}
	if j, _ := s.GetJob(context.Background(), "v1-a1"); j.Status != pipeline.StatusRunning || j.Attempts != 1 {
		t.Fatalf("v1-a1 %s after %d attempts, want still the first (expired) attempt", j.Status, j.Attempts)
	}
}

// Limit 0 is no limit; a negative limit is refused.
func testTenantLimitZeroIsUnlimited(t *testing.T, h *Harness) {
	t.Parallel()
	s := h.open(t, pipeline.NewManualClock(t0))
	for i := range 3 {
		mustCreate(t, s, jobOf("acme", fmt.Sprintf("v1-a%d", i)))
	}
	_, _, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 3, LeaseFor: time.Minute, TenantMaxRunning: -1})
	if !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("tenant limit -1: %v, want ErrInvalidInput", err)
	}
	if cs, st := fetchLimited(t, s, 3, 0); len(cs) != 3 || st.TenantLimited != 0 {
		t.Fatalf("limit 0: claimed %v, stats %+v; want all three", claimedIDs(cs), st)
	}
}

// A job left on the queue for its tenant's limit is not a delivery: however
// many Fetches pass it by (more than MaxDeliveries, 3 in the suite), it is
// not dead-lettered as poison and its first claim is delivery 1.
func testTenantLimitNotPoison(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, jobOf("acme", "v1-a1"))
	mustCreate(t, s, jobOf("acme", "v1-a2"))
	cs, _ := fetchLimited(t, s, 1, 1)
	for i := range 6 {
		if got, st := fetchLimited(t, s, 5, 1); len(got) != 0 || st.DeadLettered != 0 {
			t.Fatalf("pass %d: claimed %v, stats %+v; want v1-a2 passed by", i, claimedIDs(got), st)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	if n := countRows(t, s, `SELECT delivery_count FROM queue_messages WHERE job_id = 'v1-a2'`); n != 0 {
		t.Fatalf("v1-a2's message counts %d deliveries, want 0", n)
	}
	if err := s.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	got, _ := fetchLimited(t, s, 5, 1)
	if len(got) != 1 || got[0].Job.ID != "v1-a2" || got[0].Deliveries != 1 || got[0].Lease.Attempt != 1 {
		t.Fatalf("after v1-a1 finished: %+v, want v1-a2's first delivery and attempt", got)
	}
}

// Fetchers on two handles (two processes) claiming at once never give a
// tenant more running jobs than the limit: on Postgres two transactions
// counting the same tenant at once must not both see it below its limit.
// Every job still runs.
func testTenantLimitConcurrentClaims(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	const limit, perTenant, fetchers = 2, 30, 8
	tenants := []string{"acme", "globex", "initech"}
	a := h.open(t, nil)
	b := h.openOn(t, a.name, nil)
	var njs []pipeline.NewJob
	for i := range perTenant {
		for _, tn := range tenants {
			njs = append(njs, jobOf(tn, fmt.Sprintf("v1-%s-%02d", tn, i)))
		}
	}
	if err := a.CreateJobs(ctx, njs); err != nil {
		t.Fatal(err)
	}
	var (
		held    sync.Map // tenant -> *atomic.Int32: leases handed out, not yet being finished
		done    atomic.Int32
		peak    atomic.Int32
		wg      sync.WaitGroup
		timeout = time.Now().Add(2 * time.Minute)
	)
	for _, tn := range tenants {
		held.Store(tn, new(atomic.Int32))
	}
	for w := range fetchers {
		s := []*env{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for int(done.Load()) < len(njs) && time.Now().Before(timeout) {
				cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: fmt.Sprintf("w%d", w), Max: 2,
					LeaseFor: time.Minute, TenantMaxRunning: limit})
				if err != nil {
					t.Errorf("fetch: %v", err)
					return
				}
				// A lease counts here from after its claim committed until
				// before its Finish starts, so this count never exceeds the
				// database's: above the limit, the database was too.
				for _, c := range cs {
					n, _ := held.Load(c.Job.Tenant)
					if v := n.(*atomic.Int32).Add(1); v > limit {
						t.Errorf("tenant %s holds %d running jobs, limit %d", c.Job.Tenant, v, limit)
					} else if v > peak.Load() {
						peak.Store(v)
					}
				}
				time.Sleep(time.Millisecond) // the attempts overlap with other fetchers
				for _, c := range cs {
					n, _ := held.Load(c.Job.Tenant)
					n.(*atomic.Int32).Add(-1)
					if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
						t.Errorf("finish %s: %v", c.Job.ID, err)
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := countRows(t, a, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`); n != len(njs) {
		t.Fatalf("%d of %d jobs succeeded", n, len(njs))
	}
	t.Logf("peak running jobs of one tenant: %d (limit %d)", peak.Load(), limit)
}

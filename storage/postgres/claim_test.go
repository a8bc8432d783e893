//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// TestClaimChecksClaimableStatus: claimCTEs' upd claims a job only from
// pending, retry_wait, or running with a lease that has expired (a running
// job without a lease expiry is not claimable: NULL <= now is not true), and
// leaves every other job, and its message, as it is. The Fetch paths only
// hand upd jobs that triage or plain found claimable, under their row locks,
// so no conformance test reaches this check: it is driven here directly.
func TestClaimChecksClaimableStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	now := s.now()
	ids := []string{"v1-pending", "v1-retrywait", "v1-expired", "v1-live", "v1-nolease", "v1-succeeded", "v1-review", "v1-dead"}
	var batch []pipeline.NewJob
	for _, id := range ids {
		batch = append(batch, newJob(id))
	}
	if err := s.CreateJobs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	running := func(id string, exp any) {
		exec(`UPDATE jobs SET status = 'running', attempt_id = 'att-old', lease_owner = 'w0', lease_expires_at = $2 WHERE id = $1`, id, exp)
	}
	running("v1-retrywait", now+60_000)
	exec(`UPDATE jobs SET status = 'retry_wait', lease_owner = NULL, lease_expires_at = NULL, next_run_at = $2 WHERE id = $1`, "v1-retrywait", now+3_600_000)
	running("v1-expired", now-1)
	running("v1-live", now+60_000)
	running("v1-nolease", nil)
	for id, st := range map[string]string{"v1-succeeded": "succeeded", "v1-review": "needs_review", "v1-dead": "dead_lettered"} {
		running(id, now+60_000)
		exec(`UPDATE jobs SET status = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`, id, st)
	}
	msgOf := map[string]int64{}
	rows, err := s.pool.Query(ctx, `SELECT job_id, id FROM queue_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var m int64
		if err := rows.Scan(&id, &m); err != nil {
			t.Fatal(err)
		}
		msgOf[id] = m
	}
	if rows.Close(); rows.Err() != nil || len(msgOf) != len(ids) {
		t.Fatalf("messages %v, %v", msgOf, rows.Err())
	}
	// claim runs claimJobs on ids (as triage would have picked them) and
	// returns the ids it claimed.
	claim := func(ids ...string) ([]string, error) {
		var got []string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var args []claimArg
			for _, id := range ids {
				args = append(args, claimArg{jobID: id, msgID: msgOf[id], from: pipeline.StatusPending, deliveries: 1})
			}
			cs, err := claimJobs(ctx, tx, now, "w1", now+60_000, args)
			for _, c := range cs {
				got = append(got, c.Job.ID)
			}
			return err
		})
		return got, err
	}
	// One at a time first, so that a trigger refusing one claim does not
	// hide what the CASE did with the others.
	for _, id := range []string{"v1-live", "v1-nolease", "v1-succeeded", "v1-review", "v1-dead"} {
		if got, err := claim(id); err != nil || len(got) != 0 {
			t.Errorf("claiming %s: claimed %v, %v; want nothing claimed and no error", id, got, err)
		}
	}
	got, err := claim("v1-pending", "v1-retrywait", "v1-expired", "v1-live", "v1-nolease")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"v1-expired", "v1-pending", "v1-retrywait"}; !slices.Equal(got, want) {
		t.Errorf("claimed %v, want %v", got, want)
	}
	var untouched int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs j JOIN queue_messages m ON m.job_id = j.id
		WHERE j.id IN ('v1-live', 'v1-nolease', 'v1-succeeded', 'v1-review', 'v1-dead')
		  AND coalesce(j.lease_owner, '') <> 'w1' AND m.delivery_count = 0`).Scan(&untouched); err != nil || untouched != 5 {
		t.Errorf("%d of the 5 unclaimable jobs and their messages untouched (%v)", untouched, err)
	}
}

// TestFetchClaimsPastLockedJob: a job whose row another transaction holds
// is skipped (SKIP LOCKED), and the Fetch still claims up to Max of the
// claimable jobs behind it, as fetchCandidates (the join, then LIMIT) does
// and qFetchPlain did before 2dd8af7. Its message is not counted as a
// delivery and the job is claimed by the next Fetch once the lock is gone.
func TestFetchClaimsPastLockedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	if err := s.CreateJobs(ctx, []pipeline.NewJob{newJob("v1-a"), newJob("v1-b"), newJob("v1-c")}); err != nil {
		t.Fatal(err)
	}
	holder, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM jobs WHERE id = 'v1-a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, c.Job.ID)
	}
	if want := []string{"v1-b", "v1-c"}; !slices.Equal(got, want) {
		t.Errorf("with v1-a's row held elsewhere, a Fetch of 2 claimed %v, want %v", got, want)
	}
	var deliveries int
	if err := s.pool.QueryRow(ctx, `SELECT delivery_count FROM queue_messages WHERE job_id = 'v1-a'`).Scan(&deliveries); err != nil || deliveries != 0 {
		t.Errorf("v1-a's message: %d deliveries (%v), want 0", deliveries, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	cs, _, err = s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if err != nil || len(cs) == 0 || cs[0].Job.ID != "v1-a" {
		t.Fatalf("after the lock is gone, Fetch claimed %v, %v; want v1-a first", cs, err)
	}
}

// The claim without a tenant limit (qFetchPlain) runs on the claim pool,
// whose sessions plan it generically: planned once per session, not on
// every call, as Postgres' default did (its generic plan's estimate for
// LIMIT $6 never came near a custom plan's; see claimPoolParams).
// pg_prepared_statements counts each session's plans of each statement;
// every session of the claim pool is read.
func TestClaimPlannedOncePerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	var batch []pipeline.NewJob
	for i := range 40 {
		batch = append(batch, newJob(fmt.Sprintf("v1-plan%02d", i)))
	}
	if err := s.CreateJobs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for _, max := range []int{1, 2, 3, 1, 5, 8, 1, 2, 4, 3} { // more calls than auto's five custom plans
		cs, stats, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w1", Max: max, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != max || stats.Claimed != max {
			t.Fatalf("Max %d: claimed %d (stats %d)", max, len(cs), stats.Claimed)
		}
		claimed += len(cs)
	}
	conns := s.claims.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var generic, custom, sessions int64
	for _, c := range conns {
		var g, cu int64
		err := c.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement = $1`, qFetchPlain).Scan(&g, &cu)
		if err != nil {
			t.Fatal(err)
		}
		if g+cu > 0 {
			sessions++
		}
		generic, custom = generic+g, custom+cu
	}
	if sessions == 0 || generic != 10 || custom != 0 {
		t.Errorf("%d claims (%d jobs) in %d sessions: %d generic plans used, %d custom plans made; want every call on the one generic plan of its session",
			10, claimed, sessions, generic, custom)
	}
}

// The claim pool connects only when a claim needs it: the URL's
// pool_min_conns sizes the main pool alone, so a process that never claims
// (an API server) opens no claiming session.
func TestClaimPoolConnectsOnlyToClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t)+"&pool_min_conns=3", nil)
	waitUntil := time.Now().Add(10 * time.Second)
	for s.pool.Stat().TotalConns() < 3 && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.pool.Stat().TotalConns(); n < 3 {
		t.Fatalf("the main pool holds %d connections, want pool_min_conns=3", n)
	}
	time.Sleep(100 * time.Millisecond) // the pools fill their minimum in the background
	if n := s.claims.Stat().TotalConns(); n != 0 {
		t.Errorf("the claim pool holds %d connections before any claim", n)
	}
	if _, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w1", Max: 1, LeaseFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n := s.claims.Stat().TotalConns(); n != 1 {
		t.Errorf("the claim pool holds %d connections after one claim, want 1", n)
	}
}

//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"testing"

	"edgepipe/pipeline"
)

// Listings are planned with their values on every call, never from a
// cached prepared statement whose generic plan ignores the filters
// (planEachCall). Seen through pg_prepared_statements on the pool's only
// connection; the control shows that a statement run the default way is
// cached there.
func TestListingsPlannedWithTheirValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t)
	var jobs []pipeline.NewJob
	for i := range 3 {
		id := fmt.Sprintf("v1-l%d", i)
		jobs = append(jobs, pipeline.NewJob{ID: id, Tenant: "acme", Operation: "noop", IdempotencyKey: id,
			RequestFingerprint: id, Version: "v1", Queue: "render-v1"})
	}
	if err := s.CreateJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	cached := func(where string, arg string) int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE `+where, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, f := range []pipeline.ListFilter{
		{AllTenants: true, Statuses: []pipeline.Status{pipeline.StatusFailed}},
		{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusPending}, Limit: 2},
	} {
		if _, _, err := s.ListJobs(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, err := s.ListJobs(ctx, pipeline.ListFilter{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusPending}}); err != nil || len(got) != 3 {
		t.Fatalf("listing: %d jobs, %v; want 3", len(got), err)
	}
	if _, err := s.ListDeadLetters(ctx, true, 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FindDeadLetters(ctx, pipeline.DeadLetterFilter{Reason: "poison"}, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StagedAnswers(ctx, &pipeline.StagedAnswersParams{FinalJobsOnly: true}); err != nil {
		t.Fatal(err)
	}
	for _, like := range []string{`%FROM jobs WHERE true%`, `%FROM dead_letters%`, `%FROM assets a JOIN jobs%`} {
		if n := cached(`statement LIKE $1`, like); n != 0 {
			t.Errorf("%d statements like %q cached as prepared statements", n, like)
		}
	}
	// Control: a statement run the default way is cached.
	const control = `SELECT id FROM jobs WHERE true AND status = ANY($1::text[])`
	rows, err := s.pool.Query(ctx, control, []string{"failed"})
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n := cached(`statement = $1`, control); n != 1 {
		t.Fatalf("control: %d statements cached, want 1 (the check cannot see the pool's statements)", n)
	}
}

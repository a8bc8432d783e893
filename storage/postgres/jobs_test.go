//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"testing"

	"edgepipe/pipeline"
)

// A listing is planned with its values on every call, never from a cached
// prepared statement whose generic plan ignores the filter (ListJobs).
// Seen through pg_prepared_statements on the pool's only connection; the
// control shows that a statement run the default way is cached there.
func TestListJobsPlannedWithItsValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: newDatabase(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var jobs []pipeline.NewJob
	for i := range 3 {
		id := fmt.Sprintf("v1-l%d", i)
		jobs = append(jobs, pipeline.NewJob{ID: id, Tenant: "acme", Operation: "noop", IdempotencyKey: id,
			RequestFingerprint: id, Version: "v1", Queue: "render-v1"})
	}
	if err := s.CreateJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	cached := func(like string) int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, f := range []pipeline.ListFilter{
		{AllTenants: true, Statuses: []pipeline.Status{pipeline.StatusFailed}},
		{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusPending}, Limit: 2},
	} {
		for range 7 { // past the five custom plans after which a generic one may be chosen
			if _, _, err := s.ListJobs(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, _, err := s.ListJobs(ctx, pipeline.ListFilter{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusPending}}); err != nil || len(got) != 3 {
		t.Fatalf("listing: %d jobs, %v; want 3", len(got), err)
	}
	if n := cached(`%FROM jobs WHERE true%`); n != 0 {
		t.Errorf("%d listing statements cached as prepared statements", n)
	}
	// Control: the same kind of statement run the default way is cached.
	rows, err := s.pool.Query(ctx, `SELECT id FROM jobs WHERE true AND status = ANY($1::text[])`, []string{"failed"})
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if n := cached(`%FROM jobs WHERE true%`); n != 1 {
		t.Fatalf("control: %d statements cached, want 1 (the check cannot see the pool's statements)", n)
	}
}

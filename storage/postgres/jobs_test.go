//go:build postgres

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
		{Tenant: "acme", Statuses: []pipeline.Status{pipeline.StatusPending, pipeline.StatusFailed}},
		{AllTenants: true},
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
	for _, like := range []string{`%FROM jobs j WHERE true%`, `%FROM job_keys k JOIN jobs j%`, `%FROM dead_letters%`, `%FROM assets a JOIN jobs%`} {
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

// TestListingsReadInIndexOrder: every listing shape reads its page from an
// index in order, jobs otherwise only by its primary key, and sorts nothing
// but a page from each status. A page is read with the row that says there
// is a next one, the cursor's own row (the index range starts at its
// creation time) and the row an incremental sort reads to close a group of
// one creation time; a tenant's status listing reads the other tenant's
// jobs of the status too (every other job). Every third job failed: a
// status listing that walked every job newest first, filtering by status,
// would read three rows for each it keeps (as the listings did when they
// moved to job_keys in order, once).
//
// The statuses are spread over time here. Where one status is all old
// jobs, the planner, which takes a status and a creation time as
// independent, may read a next page of it as a bitmap of every older job
// in that status, sorted: a miss by the share of jobs older than the
// cursor (a sort of 950 rows in 6,000 jobs whose 1,000 oldest failed).
func TestListingsReadInIndexOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	const n = 6000
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
			request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at, requires_action)
		SELECT 'v1-' || lpad(i::text, 6, '0'), 'i-' || lpad(i::text, 6, '0'), CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END,
			'noop', 'k' || i, 'f', '{}', 'v1', 'render-v1', CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'pending' END,
			1000 + i, 1000 + i, 1000 + i, CASE WHEN i % 1000 = 7 THEN 1 ELSE 0 END
		FROM generate_series(0, $1 - 1) i`, n); err != nil {
		t.Fatal(err)
	}
	// A burst: 500 canceled jobs created in one millisecond (one
	// CreateJobs batch is stamped with one time), the newest of all. A
	// page of them reads a page, not the whole group.
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
			request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
		SELECT 'v1-b' || lpad(i::text, 6, '0'), 'b-' || lpad(i::text, 6, '0'), 'a', 'noop', 'kb' || i, 'f', '{}', 'v1', 'render-v1',
			'canceled', 1000 + $1, 1000 + $1, 1000 + $1
		FROM generate_series(0, 499) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	pending := []pipeline.Status{pipeline.StatusPending}
	burst := []pipeline.Status{pipeline.StatusCanceled}
	failed := []pipeline.Status{pipeline.StatusFailed}
	two := []pipeline.Status{pipeline.StatusPending, pipeline.StatusFailed, pipeline.StatusPending}
	first := []struct {
		name    string
		f       pipeline.ListFilter
		index   string
		perPage int // pages merged: a sort of that many pages at most
	}{
		{"tenant", pipeline.ListFilter{Tenant: "a"}, "job_keys_tenant_created", 0},
		{"operators", pipeline.ListFilter{AllTenants: true}, "job_keys_created", 0},
		{"operators, one version", pipeline.ListFilter{AllTenants: true, Version: "v1"}, "job_keys_created", 0},
		{"operators, one status", pipeline.ListFilter{AllTenants: true, Statuses: pending}, "jobs_status", 0},
		{"operators, a third's status", pipeline.ListFilter{AllTenants: true, Statuses: failed}, "jobs_status", 0},
		{"tenant, a third's status", pipeline.ListFilter{Tenant: "b", Statuses: failed}, "jobs_status", 0},
		{"operators, a burst's status", pipeline.ListFilter{AllTenants: true, Statuses: burst}, "jobs_status", 0},
		{"operators, two statuses", pipeline.ListFilter{AllTenants: true, Statuses: two}, "jobs_status", 2},
		{"tenant, two statuses", pipeline.ListFilter{Tenant: "a", Statuses: two}, "jobs_status", 2},
	}
	// Each shape lists every job it should, once, newest first.
	for _, c := range first {
		var want int
		var sts []string
		for _, st := range c.f.Statuses {
			sts = append(sts, string(st))
		}
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs
			WHERE ($1 OR tenant = $2) AND (coalesce(cardinality($3::text[]), 0) = 0 OR status = ANY($3))`,
			c.f.AllTenants, c.f.Tenant, sts).Scan(&want); err != nil {
			t.Fatal(err)
		}
		f := c.f
		f.Limit = 500
		seen := map[string]bool{}
		var last pipeline.Job
		for {
			jobs, next, err := s.ListJobs(ctx, f)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			key := func(j pipeline.Job) string {
				if f.AllTenants {
					return j.ID
				}
				return j.InstanceID
			}
			for _, j := range jobs {
				older := j.CreatedAt.Before(last.CreatedAt) || j.CreatedAt.Equal(last.CreatedAt) && key(j) < key(last)
				if seen[j.ID] || len(seen) > 0 && !older {
					t.Fatalf("%s: %s (created %v) after %s (created %v)", c.name, j.ID, j.CreatedAt, last.ID, last.CreatedAt)
				}
				seen[j.ID], last = true, j
			}
			if next.ID == "" {
				break
			}
			f.After = next
		}
		if len(seen) != want {
			t.Errorf("%s: listed %d jobs, want %d", c.name, len(seen), want)
		}
	}
	var cases = first
	for _, c := range first {
		f := c.f
		f.Limit = 50
		_, next, err := s.ListJobs(ctx, f)
		if err != nil || next.ID == "" {
			t.Fatalf("%s: first page: %v, next %+v", c.name, err, next)
		}
		c.name += ", next page"
		c.f.After = next
		cases = append(cases, c)
	}
	cases = append(cases, struct {
		name    string
		f       pipeline.ListFilter
		index   string
		perPage int
	}{"needing action", pipeline.ListFilter{AllTenants: true, RequiresAction: true}, "jobs_attention", 1})
	for _, c := range cases {
		c.f.Limit = 50
		q, args, err := listJobsQuery(c.f)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		if err := s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+q, args...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: EXPLAIN output: %v", c.name, err)
		}
		page := c.f.Limit + 1
		reads := page + 2
		if !c.f.AllTenants && c.index == "jobs_status" {
			reads = 2*page + 4
		}
		var ordered int
		var nodes []string
		plans[0].Plan.walk(func(n planNode) {
			nodes = append(nodes, fmt.Sprintf("%s %s %s rows=%d", n.Type, n.Relation, n.Index, n.Rows))
			read := n.Rows + n.Removed
			switch {
			case n.Index == c.index && read <= reads:
				ordered++
			case n.Index == c.index:
				t.Errorf("%s: %d rows read from %s for a page of %d", c.name, read, c.index, page-1)
			case n.Type == "Sort" && n.Rows > c.perPage*page:
				t.Errorf("%s: a sort of %d rows", c.name, n.Rows)
			case n.Type == "Sort" && c.perPage == 0, n.Type == "Seq Scan",
				n.Relation == "jobs" && n.Index != "jobs_pkey" && n.Index != c.index:
				t.Errorf("%s: %s %s %s", c.name, n.Type, n.Relation, n.Index)
			}
		})
		if want := max(c.perPage, 1); ordered != want {
			t.Errorf("%s: %d in-order reads of %s, want %d: %s", c.name, ordered, c.index, want, strings.Join(nodes, "; "))
		}
	}
}

//go:build postgres

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// TestFetchPlanWithoutStatistics: a Fetch reads about as many jobs as it
// claims even when Postgres has no statistics on the tables (a new
// database, or a burst of submissions since autovacuum last analyzed
// them). Without statistics the planner takes the queue for a dozen rows,
// so a claim written as "join messages to jobs, order, limit" was planned
// as "join every visible message to its job, sort, lock the first Max" (a
// job lookup per queued job, 10,000 to claim 200), and the claim's status
// check read the whole status index. The test counts, in EXPLAIN ANALYZE,
// the rows every plan node of the jobs table or its indexes produced.
func TestFetchPlanWithoutStatistics(t *testing.T) {
	t.Parallel()
	const queued, max = 10_000, 200
	s := storeWithoutStatistics(t, queued)
	now := s.now()
	root := explainAnalyze(t, s, qFetchPlain, now, "w", now+60_000, `"w"`, "render-v1", max, s.cfg.MaxDeliveries, newAttemptIDs(max))
	if root.Rows != max {
		t.Fatalf("the fetch returned %d rows, want the %d it claims", root.Rows, max)
	}
	// Each claimed job is read twice (locked, then updated), through its
	// table or its primary key.
	if read, where := root.rowsOf("jobs"); read > 4*max {
		t.Errorf("claiming %d of %d queued jobs read %d job rows: %s", max, queued, read, where)
	}
}

// TestSettlePlanWithoutStatistics: FinishMany's one statement (qSettleBulk)
// reads about as many jobs and messages as it settles, on tables without
// statistics.
func TestSettlePlanWithoutStatistics(t *testing.T) {
	t.Parallel()
	const queued, max = 10_000, 200
	s := storeWithoutStatistics(t, queued)
	cs, _, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: max, LeaseFor: time.Minute})
	if err != nil || len(cs) != max {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	fs := make([]Finished, len(cs))
	idx := make([]int, len(cs))
	for i, c := range cs {
		fs[i], idx[i] = Finished{Lease: c.Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}}, i
	}
	b, err := newBulkBatch(fs, idx, make([]error, len(fs)))
	if err != nil {
		t.Fatal(err)
	}
	root := explainAnalyze(t, s, qSettleBulk, s.now(), b.jobs, b.atts, b.sts, b.classes, b.codes, b.msgs, b.results, b.actions, b.details, true)
	if root.Rows != max { // a row a settled job
		t.Fatalf("the settle returned %d rows, want %d", root.Rows, max)
	}
	for _, table := range []string{"jobs", "queue_messages"} {
		if read, where := root.rowsOf(table); read > 4*max {
			t.Errorf("settling %d of %d jobs read %d rows of %s: %s", max, queued, read, table, where)
		}
	}
}

// storeWithoutStatistics opens a store on a new database holding queued
// pending jobs, on which autovacuum is off so that no table ever gets
// statistics.
func storeWithoutStatistics(t *testing.T, queued int) *Store {
	t.Helper()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	for _, table := range []string{"jobs", "queue_messages", "job_events"} {
		if _, err := s.pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	batch := make([]pipeline.NewJob, 0, queued)
	for i := range queued {
		batch = append(batch, newJob(fmt.Sprintf("v1-%06d", i)))
	}
	if err := s.CreateJobs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var analyzed int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables
		WHERE relname IN ('jobs', 'queue_messages') AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`).Scan(&analyzed); err != nil || analyzed != 0 {
		t.Fatalf("%d of the tables have statistics (%v); the test needs none", analyzed, err)
	}
	return s
}

// explainAnalyze runs q under EXPLAIN ANALYZE in a transaction it rolls
// back (EXPLAIN ANALYZE executes the statement) and returns its plan.
func explainAnalyze(t *testing.T, s *Store, q string, args ...any) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "+q, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output: %v", err)
	}
	return plans[0].Plan
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     int        `json:"Actual Rows"`
	Removed  int        `json:"Rows Removed by Filter"` // read and dropped, per loop
	Loops    int        `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// rowsOf sums the rows that the plan's nodes on table or its indexes read
// (produced or removed by a filter, times loops), and says which nodes.
func (n planNode) rowsOf(table string) (int, string) {
	read, where := 0, []string{}
	n.walk(func(n planNode) {
		if n.Relation == table || strings.HasPrefix(n.Index, table+"_") {
			read += (n.Rows + n.Removed) * n.Loops
			where = append(where, fmt.Sprintf("%s %s%s: (%d+%d)×%d", n.Type, n.Relation, n.Index, n.Rows, n.Removed, n.Loops))
		}
	})
	return read, strings.Join(where, "; ")
}

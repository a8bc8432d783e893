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
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	for _, table := range []string{"jobs", "queue_messages", "job_events"} {
		if _, err := s.pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	const queued, max = 2000, 50
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

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // EXPLAIN ANALYZE runs the claim: undo it
	now := s.now()
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "+qFetchPlain,
		now, "w", now+60_000, `"w"`, "render-v1", max, s.cfg.MaxDeliveries, newAttemptIDs(max)).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output: %v", err)
	}
	root := plans[0].Plan
	if root.Rows != max {
		t.Fatalf("the fetch returned %d rows, want the %d it claims", root.Rows, max)
	}
	read, where := 0, []string{}
	root.walk(func(n planNode) {
		if n.Relation == "jobs" || strings.HasPrefix(n.Index, "jobs_") {
			read += n.Rows * n.Loops
			where = append(where, fmt.Sprintf("%s %s%s: %d×%d", n.Type, n.Relation, n.Index, n.Rows, n.Loops))
		}
	})
	// Each claimed job is read twice (locked, then updated), through its
	// table or its primary key.
	if read > 4*max {
		t.Errorf("claiming %d of %d queued jobs read %d job rows: %s", max, queued, read, strings.Join(where, "; "))
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     int        `json:"Actual Rows"`
	Loops    int        `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

//go:build postgres

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	requireNoStatistics(t, s)
	now := s.now()
	for _, generic := range []bool{false, true} {
		root := explainAnalyze(t, s, generic, qFetchPlain, now, "w", now+60_000, `"w"`, "render-v1", max, s.cfg.MaxDeliveries, newAttemptIDs(max))
		if root.Rows != max {
			t.Fatalf("generic %v: the fetch returned %d rows, want the %d it claims", generic, root.Rows, max)
		}
		// Each claimed job is read twice (locked, then updated), through its
		// table or its primary key; the generic run also reads the dead
		// index entries the custom run's rolled-back UPDATE left.
		if read, where := root.rowsOf("jobs"); read > 5*max {
			t.Errorf("generic %v: claiming %d of %d queued jobs read %d job rows: %s", generic, max, queued, read, where)
		}
		if pairs, where := root.joinPairs(); pairs > 4*max {
			t.Errorf("generic %v: claiming %d jobs formed and dropped %d join pairs: %s", generic, max, pairs, where)
		}
		// claimCTEs' msgs reaches the claimed jobs' messages by their key
		// (job_id, compared in its own collation), never by reading the
		// whole queue.
		root.walk(func(n planNode) {
			if n.Type != "ModifyTable" || n.Relation != "queue_messages" {
				return
			}
			n.walk(func(c planNode) {
				if c.Type == "Seq Scan" && c.Relation == "queue_messages" {
					t.Errorf("generic %v: the claim's update of the messages read the whole queue: (%d+%d)×%d rows",
						generic, c.Rows, c.Removed, c.Loops)
				}
			})
		})
	}
}

// TestSettlePlanWithoutStatistics: FinishMany's one statement (qSettleBulk)
// reads about as many jobs and messages as it settles, on tables without
// statistics, in its custom plan and in its generic one (the plan pgx's
// cached statement runs after a few executions), while workers hold more
// running jobs than one settle finishes, as in a burn-down where claims
// run ahead of settles. Its status check once matched the partial index
// of running jobs, for which a planner without statistics guesses four
// rows: the generic plan then read every running job and matched the whole
// batch against each of them in a nested loop (a batch of 500 against
// 1,000 running jobs: 500,000 pairs and 150 ms a settle). The table holds
// 90,000 finished jobs besides the queue, so that reading it whole costs
// more than reaching the batch by key, as in a store in service.
func TestSettlePlanWithoutStatistics(t *testing.T) {
	t.Parallel()
	const queued, max = 10_000, 200
	s := storeWithoutStatistics(t, queued)
	ctx := context.Background()
	// Nine finished copies of every queued job: a store in service holds
	// far more finished jobs than queued ones.
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs SELECT r.* FROM jobs j, generate_series(1, 9) AS g,
		LATERAL jsonb_populate_record(NULL::jobs, to_jsonb(j) || jsonb_build_object(
		'id', j.id || '-' || g, 'instance_id', j.instance_id || '-' || g, 'idempotency_key', j.idempotency_key || '-' || g,
		'status', 'succeeded')) AS r`); err != nil {
		t.Fatal(err)
	}
	cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: max, LeaseFor: time.Minute})
	if err != nil || len(cs) != max {
		t.Fatalf("fetch %d, %v", len(cs), err)
	}
	for range 4 {
		if more, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: max, LeaseFor: time.Minute}); err != nil || len(more) != max {
			t.Fatalf("fetch %d, %v", len(more), err)
		}
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
	requireNoStatistics(t, s)
	for _, generic := range []bool{false, true} {
		root := explainAnalyze(t, s, generic, qSettleBulk, s.now(), b.jobs, b.atts, b.sts, b.classes, b.codes, b.msgs, b.results, b.actions, b.details, true)
		if root.Rows != max { // a row a settled job
			t.Fatalf("generic %v: the settle returned %d rows, want %d", generic, root.Rows, max)
		}
		for _, table := range []string{"jobs", "queue_messages"} {
			// Each settled job is read about four times (the webhook
			// guard, the index, the heap, the update), and the generic run
			// also reads the dead index entries of the custom run's
			// rolled-back UPDATE.
			if read, where := root.rowsOf(table); read > 5*max {
				t.Errorf("generic %v: settling %d of %d jobs read %d rows of %s: %s", generic, max, queued, read, table, where)
			}
		}
		if pairs, where := root.joinPairs(); pairs > 4*max {
			t.Errorf("generic %v: settling %d jobs formed and dropped %d join pairs: %s", generic, max, pairs, where)
		}
	}
}

// TestCreatePlanWithoutStatistics: a submission touches a few index pages
// however many jobs its tenant has. Its instance-id check was once a NOT
// EXISTS subquery the planner was free to answer from jobs_tenant_created
// (tenant, created_at, instance_id) instead of the unique index, and the
// generic plan a connection caches while the table is (nearly) empty did:
// from then on each of its submissions read the tenant's whole range (3.7
// ms each at 5,000 jobs). Now the unique indexes themselves arbitrate (ON
// CONFLICT DO NOTHING, in jobs' insert trigger on job_keys since 0007). The test prepares the statement on an empty store
// as a worker's connection does, runs it there generically once, stores
// 20,000 jobs of the tenant, and then explains the cached plan.
func TestCreatePlanWithoutStatistics(t *testing.T) {
	t.Parallel()
	const queued = 20_000
	ctx := context.Background()
	s := storeWithoutStatistics(t, 0)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	execute := executeOf("create_cached", len(queuedArgs(newJob("x"), 0)))
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "PREPARE create_cached AS " + qCreateQueued} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE create_cached") }()
	// EXECUTE's arguments are expressions in its text, not protocol
	// parameters: the simple protocol writes them in as literals.
	run := func(prefix string, nj pipeline.NewJob) []byte {
		var out []byte
		args := append([]any{pgx.QueryExecModeSimpleProtocol}, queuedArgs(nj.WithDefaults(), s.now())...)
		if err := conn.QueryRow(ctx, prefix+execute, args...).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	run("", newJob("v1-first"))
	createQueued(t, s, queued)
	requireNoStatistics(t, s)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(run("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) ", newJob("v1-last")), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output: %v", err)
	}
	var genericPlans, customPlans int64
	if err := tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'create_cached'`).Scan(&genericPlans, &customPlans); err != nil || genericPlans != 2 || customPlans != 0 {
		t.Fatalf("the statement ran %d generic and %d custom plans (%v), want two generic ones", genericPlans, customPlans, err)
	}
	// An insert descends the indexes of jobs, the five of job_keys
	// (through jobs' insert trigger), two of job_events and two of
	// queue_messages (three before 0009), a few pages each (34 buffers in all before job_keys);
	// the old statement read 152, 124 of them the tenant's range in
	// jobs_tenant_created.
	root := plans[0].Plan
	if read := root.Hits + root.Misses; read > 100 {
		var where []string
		root.walk(func(n planNode) {
			where = append(where, fmt.Sprintf("%s %s %s: %d+%d", n.Type, n.Relation, n.Index, n.Hits, n.Misses))
		})
		t.Errorf("one submission read %d buffers with %d jobs of its tenant stored: %s", read, queued, strings.Join(where, "; "))
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
	createQueued(t, s, queued)
	requireNoStatistics(t, s)
	return s
}

// createQueued submits n pending jobs of one tenant in one CreateJobs.
func createQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	batch := make([]pipeline.NewJob, 0, n)
	for i := range n {
		batch = append(batch, newJob(fmt.Sprintf("v1-%06d", i)))
	}
	if err := s.CreateJobs(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// requireNoStatistics fails the test if jobs or queue_messages have
// planner statistics (autovacuum is off on them; this says so rather than
// letting a plan test pass on the wrong premise).
func requireNoStatistics(t *testing.T, s *Store) {
	t.Helper()
	var analyzed int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_user_tables
		WHERE relname IN ('jobs', 'queue_messages') AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`).Scan(&analyzed); err != nil || analyzed != 0 {
		t.Fatalf("%d of the tables have statistics (%v); the test needs none", analyzed, err)
	}
}

// explained names each statement explainAnalyze prepares: PREPARE is the
// session's, not the transaction's, so a name is never used twice.
var explained atomic.Int64

// explainAnalyze runs q under EXPLAIN ANALYZE in a transaction it rolls
// back (EXPLAIN ANALYZE executes the statement) and returns its plan: the
// custom plan, made for these parameter values, or with generic the
// generic one, which a prepared statement (pgx caches every statement it
// runs) is given after a few executions, made without the parameters'
// values (without statistics, an unnest of an array parameter is taken
// for 10 rows).
func explainAnalyze(t *testing.T, s *Store, generic bool, q string, args ...any) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	explain := "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) "
	name := fmt.Sprintf("explained_%d", explained.Add(1))
	qargs := args
	if generic {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+q); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE "+name) }()
		q = executeOf(name, len(args))
		// EXECUTE's arguments are expressions in its text, not protocol
		// parameters: the simple protocol writes them in as literals.
		qargs = append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	}
	var out []byte
	if err := tx.QueryRow(ctx, explain+q, qargs...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if generic {
		var genericPlans, customPlans int64
		if err := tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1`, name).Scan(&genericPlans, &customPlans); err != nil || genericPlans != 1 || customPlans != 0 {
			t.Fatalf("the explained statement ran %d generic and %d custom plans (%v), want the generic one", genericPlans, customPlans, err)
		}
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output: %v", err)
	}
	return plans[0].Plan
}

// executeOf is "EXECUTE name($1, …, $n)": the prepared statement run with
// the query's own n parameters.
func executeOf(name string, n int) string {
	params := make([]string, n)
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return "EXECUTE " + name + "(" + strings.Join(params, ", ") + ")"
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string `json:"Node Type"`
	Relation string `json:"Relation Name"`
	Index    string `json:"Index Name"`
	Rows     int    `json:"Actual Rows"`
	Removed  int    `json:"Rows Removed by Filter"` // read and dropped, per loop
	// JoinRemoved: pairs a join formed and dropped, per loop. A nested
	// loop that matches a batch against a CTE by a join filter forms every
	// pair (batch × rows), however few rows it reads from tables.
	JoinRemoved int `json:"Rows Removed by Join Filter"`
	Loops       int `json:"Actual Loops"`
	// Buffers: the node's shared buffer reads (hits and misses),
	// including its children's.
	Hits   int        `json:"Shared Hit Blocks"`
	Misses int        `json:"Shared Read Blocks"`
	Plans  []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// joinPairs sums, over every join of the plan, the pairs it formed and
// dropped by its join filter (times loops), and says which joins.
func (n planNode) joinPairs() (int, string) {
	pairs, where := 0, []string{}
	n.walk(func(n planNode) {
		if n.JoinRemoved > 0 {
			pairs += n.JoinRemoved * max(n.Loops, 1)
			where = append(where, fmt.Sprintf("%s: %d×%d", n.Type, n.JoinRemoved, n.Loops))
		}
	})
	return pairs, strings.Join(where, "; ")
}

// rowsOf sums the rows that the plan's nodes on table or its indexes read
// (produced or removed by a filter, times loops), and says which nodes.
func (n planNode) rowsOf(table string) (int, string) {
	read, where := 0, []string{}
	n.walk(func(n planNode) {
		if n.Relation == table || strings.HasPrefix(n.Index, table+"_") {
			read += (n.Rows + n.Removed) * n.Loops
			where = append(where, fmt.Sprintf("%s %s %s: (%d+%d)×%d", n.Type, n.Relation, n.Index, n.Rows, n.Removed, n.Loops))
		}
	})
	return read, strings.Join(where, "; ")
}

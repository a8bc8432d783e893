package sqliteceiling

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/internal/burndown"
	"edgepipe/internal/cmalloc"
)

// BenchmarkCeiling has the shape of storage/sqlite's BenchmarkBurnDown:
// insert N jobs, then a producer claims them 200 at a time, 100 workers
// "run" them, and a completer marks them done in batches of up to 500,
// until every job is done.
//
//	go test ./bench/sqliteceiling -run '^$' -bench Ceiling -benchtime 20000x
func BenchmarkCeiling(b *testing.B) { benchCeiling(b, Guarantees{}) }

// BenchmarkGuarantees is BenchmarkCeiling with the guarantees the issue's
// burn-down goal keeps (Guarantees) added back, alone and together: what
// they cost by themselves, apart from the rest of edgepipe's schema; and
// with text ids, the first thing that schema adds.
//
//	go test ./bench/sqliteceiling -run '^$' -bench Guarantees -benchtime 20000x
func BenchmarkGuarantees(b *testing.B) {
	for _, c := range []struct {
		name string
		g    Guarantees
	}{
		{"wall", Guarantees{Wall: true}},
		{"events", Guarantees{Events: true}},
		{"events+wall", Guarantees{Events: true, Wall: true}},
		{"events+wall+textids", Guarantees{Events: true, Wall: true, TextIDs: true}},
	} {
		b.Run(c.name, func(b *testing.B) { benchCeiling(b, c.g) })
	}
}

func benchCeiling(b *testing.B, g Guarantees) {
	// The C allocator as the edgepipe program sets it (internal/cmalloc);
	// make bench tunes both sides alike.
	cmalloc.Tune(os.Getenv("GLIBC_TUNABLES"), os.Getenv("MALLOC_TRIM_THRESHOLD_"))
	ctx := context.Background()
	q, err := OpenWith(ctx, filepath.Join(b.TempDir(), "ceiling.db"), g)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	n := b.N
	if err := q.Insert(ctx, n, time.Now().UnixMilli()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	done := burn(ctx, b, q, 100, n)
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("completed %d of %d", done, n)
	}
	if left, err := q.Left(ctx); err != nil || left != 0 {
		b.Fatalf("%d jobs not done (%v)", left, err)
	}
	// The rate is only worth its name if the guarantees were there.
	var events, wall int
	if err := q.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sqlite_master WHERE name = 'job_events'),
		(SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'jobs_guard')`).Scan(&events, &wall); err != nil {
		b.Fatal(err)
	}
	if (events == 1) != g.Events || (wall == 1) != g.Wall {
		b.Fatalf("schema has events %d, wall %d; want %+v", events, wall, g)
	}
	var textKeys int
	if err := q.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'id' AND type = 'TEXT'`).Scan(&textKeys); err != nil {
		b.Fatal(err)
	}
	if (textKeys == 1) != g.TextIDs {
		b.Fatalf("jobs keyed by text: %d; want %+v", textKeys, g)
	}
	if g.Events {
		if err := q.db.QueryRowContext(ctx, `SELECT count(*) FROM job_events`).Scan(&events); err != nil || events != 3*n {
			b.Fatalf("%d events for %d jobs (%v), want 3 a job", events, n, err)
		}
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
}

// burn runs the burn-down loop on q until n jobs are done.
func burn(ctx context.Context, b *testing.B, q *Queue, workers, n int) int {
	const owner = "bench"
	return burndown.Run(ctx, b, n, workers,
		func(ctx context.Context, max int) ([]Lease, error) {
			now := time.Now().UnixMilli()
			return q.Claim(ctx, owner, max, now, now+time.Minute.Milliseconds())
		},
		func(l Lease) Lease { return l },
		func(ctx context.Context, batch []Lease) int {
			k, err := q.Done(ctx, owner, batch, time.Now().UnixMilli())
			if err != nil {
				b.Error(err)
			}
			return k
		})
}

// claimed opens a queue with g in a temporary directory, inserts n jobs at
// time 1 and claims them all for "w" until time 2.
func claimed(t *testing.T, g Guarantees, n int) (*Queue, []Lease) {
	t.Helper()
	ctx := context.Background()
	q, err := OpenWith(ctx, filepath.Join(t.TempDir(), "q.db"), g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.Insert(ctx, n, 1); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Claim(ctx, "w", n, 1, 2)
	if err != nil || len(ls) != n {
		t.Fatalf("claim: %v %v", ls, err)
	}
	return q, ls
}

// A completion whose lease is no longer the job's (another attempt took
// it) must change nothing: the fence is part of what the ceiling costs.
func TestDoneIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, ls := claimed(t, Guarantees{}, 3)
	stale := ls[1]
	stale.Attempt++
	for _, c := range []struct {
		name  string
		owner string
		ls    []Lease
		want  int
	}{
		{"wrong attempt", "w", []Lease{stale}, 0},
		{"wrong owner", "x", ls[:1], 0},
		{"own leases", "w", ls, 3},
		{"already done", "w", ls, 0},
	} {
		got, err := q.Done(ctx, c.owner, c.ls, 3)
		if err != nil || got != c.want {
			t.Errorf("%s: done %d (%v), want %d", c.name, got, err, c.want)
		}
	}
	if left, err := q.Left(ctx); err != nil || left != 0 {
		t.Fatalf("%d left (%v)", left, err)
	}
}

// With the guarantees added, a burn-down leaves three status events per job
// (created, claimed, finished) and the wall refuses changing a finished job; a fenced
// completion that finishes nothing appends nothing.
func TestGuarantees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, ls := claimed(t, Guarantees{Events: true, Wall: true}, 3)
	if n, err := q.Done(ctx, "x", ls, 3); err != nil || n != 0 {
		t.Fatalf("done by another owner: %d (%v)", n, err)
	}
	if n, err := q.Done(ctx, "w", ls, 3); err != nil || n != 3 {
		t.Fatalf("done: %d (%v)", n, err)
	}
	rows, err := q.db.QueryContext(ctx, `SELECT job_id, from_status, to_status, attempt, detail_json FROM job_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, attempt int64
		var from, to, detail string
		if err := rows.Scan(&id, &from, &to, &attempt, &detail); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s>%s %d %s", id, from, to, attempt, detail))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`1 >pending 0 {}`, `2 >pending 0 {}`, `3 >pending 0 {}`,
		`1 pending>running 1 {"attempt":1,"owner":"w"}`, `2 pending>running 1 {"attempt":1,"owner":"w"}`, `3 pending>running 1 {"attempt":1,"owner":"w"}`,
		`1 running>succeeded 1 {"attempt":1,"owner":"w"}`, `2 running>succeeded 1 {"attempt":1,"owner":"w"}`, `3 running>succeeded 1 {"attempt":1,"owner":"w"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, stmt := range []string{
		`UPDATE jobs SET updated_at = 9 WHERE id = 1`,     // a finished job is frozen
		`UPDATE jobs SET status = 'pending' WHERE id = 1`, // and cannot go back
	} {
		if _, err := q.db.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "terminal job is immutable") {
			t.Errorf("%s: %v, want the wall's refusal", stmt, err)
		}
	}
	if err := q.Insert(ctx, 1, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := q.db.ExecContext(ctx, `UPDATE jobs SET status = 'succeeded' WHERE id = 4`); err == nil || !strings.Contains(err.Error(), "invalid job status transition") {
		t.Errorf("pending > succeeded: %v, want the wall's refusal", err)
	}
}

// A claim or a completion and its events commit together: when the events
// cannot be written, the jobs keep their status. The events table is what
// edgepipe's is where the cost is: a reference to its job, an index by job
// and AUTOINCREMENT ids.
func TestGuaranteesAtomicAndShaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := OpenWith(ctx, filepath.Join(t.TempDir(), "a.db"), Guarantees{Events: true, Wall: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var fks, idx, seq int
	if err := q.db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM pragma_foreign_key_list('job_events') WHERE "table" = 'jobs' AND "from" = 'job_id'),
		(SELECT count(*) FROM pragma_index_info('job_events_job')),
		(SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence')`).Scan(&fks, &idx, &seq); err != nil {
		t.Fatal(err)
	}
	if fks != 1 || idx != 2 || seq != 1 {
		t.Fatalf("job_events: %d references to jobs, index of %d columns, sqlite_sequence %d; want 1, 2, 1", fks, idx, seq)
	}
	if err := q.Insert(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		var s string
		if err := q.db.QueryRowContext(ctx, `SELECT group_concat(status, ',') FROM (SELECT status FROM jobs ORDER BY id)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	block := func(on bool) {
		stmt := `DROP TRIGGER IF EXISTS no_events`
		if on {
			stmt = `CREATE TRIGGER no_events BEFORE INSERT ON job_events BEGIN SELECT RAISE(ABORT, 'no events'); END`
		}
		if _, err := q.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	block(true)
	if ls, err := q.Claim(ctx, "w", 2, 1, 2); err == nil {
		t.Fatalf("claim without its events: %v, want an error", ls)
	}
	if got := status(); got != "pending,pending" {
		t.Fatalf("after a failed claim: %s, want pending,pending", got)
	}
	block(false)
	ls, err := q.Claim(ctx, "w", 2, 1, 2)
	if err != nil || len(ls) != 2 {
		t.Fatalf("claim: %v %v", ls, err)
	}
	block(true)
	if n, err := q.Done(ctx, "w", ls, 3); err == nil {
		t.Fatalf("done without its events: %d, want an error", n)
	}
	if got := status(); got != "running,running" {
		t.Fatalf("after a failed completion: %s, want running,running", got)
	}
	// The wall lets a running job go back to pending (edgepipe's release).
	if _, err := q.db.ExecContext(ctx, `UPDATE jobs SET status = 'pending' WHERE id = 2`); err != nil {
		t.Fatalf("running > pending: %v", err)
	}
}

// With text ids the jobs are keyed by text, as edgepipe's (a rowid table
// with a unique index on the key), and the burn-down works the same, with
// events or without: fenced completions, events referencing the keys, keys
// unique across Insert calls.
func TestGuaranteesTextIDs(t *testing.T) {
	t.Parallel()
	for _, g := range []Guarantees{{TextIDs: true}, {Events: true, Wall: true, TextIDs: true}} {
		t.Run(fmt.Sprintf("events=%v", g.Events), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, err := OpenWith(ctx, filepath.Join(t.TempDir(), "t.db"), g)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			for range 2 {
				if err := q.Insert(ctx, 1, 1); err != nil {
					t.Fatal(err)
				}
			}
			ls, err := q.Claim(ctx, "w", 2, 1, 2)
			if err != nil || len(ls) != 2 || ls[0].Key != "v1-000000001" || ls[1].Key != "v1-000000002" || ls[0].ID != 0 {
				t.Fatalf("claim: %+v %v", ls, err)
			}
			stale := ls[0]
			stale.Attempt++
			if n, err := q.Done(ctx, "w", []Lease{stale}, 3); err != nil || n != 0 {
				t.Fatalf("done with a stale attempt: %d (%v)", n, err)
			}
			if n, err := q.Done(ctx, "w", ls, 3); err != nil || n != 2 {
				t.Fatalf("done: %d (%v)", n, err)
			}
			var idType, withoutRowid, autoindex int
			if err := q.db.QueryRowContext(ctx, `SELECT
				(SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'id' AND type = 'TEXT' AND pk = 1),
				(SELECT wr FROM pragma_table_list('jobs')),
				(SELECT count(*) FROM pragma_index_list('jobs') WHERE origin = 'pk' AND "unique" = 1)`).Scan(&idType, &withoutRowid, &autoindex); err != nil {
				t.Fatal(err)
			}
			if idType != 1 || withoutRowid != 0 || autoindex != 1 {
				t.Fatalf("jobs: text key %d, WITHOUT ROWID %d, unique key index %d; want 1, 0, 1", idType, withoutRowid, autoindex)
			}
			if !g.Events {
				return
			}
			var jobIDType string
			var events int
			if err := q.db.QueryRowContext(ctx, `SELECT (SELECT type FROM pragma_table_info('job_events') WHERE name = 'job_id'),
				(SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE j.id LIKE 'v1-%')`).Scan(&jobIDType, &events); err != nil {
				t.Fatal(err)
			}
			if jobIDType != "TEXT" || events != 6 {
				t.Fatalf("job_events.job_id is %s with %d events on text keys; want TEXT and 6", jobIDType, events)
			}
		})
	}
}

// The leases the integer-keyed ceiling sends SQLite are what they were
// before text ids existed: {"i":…,"a":…}, nothing more.
func TestLeaseJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		l    Lease
		want string
	}{
		{Lease{ID: 1, Attempt: 2}, `{"i":1,"a":2}`},
		{Lease{Key: "v1-000000001", Attempt: 2}, `{"k":"v1-000000001","a":2}`},
	} {
		b, err := json.Marshal(c.l)
		if err != nil || string(b) != c.want {
			t.Errorf("%+v: %s (%v), want %s", c.l, b, err, c.want)
		}
	}
}

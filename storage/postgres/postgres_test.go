//go:build postgres

package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"edgepipe/pipeline"
)

func newJob(id string) pipeline.NewJob {
	return pipeline.NewJob{ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "key-" + id,
		RequestFingerprint: "fp-" + id, Version: "v1", Queue: "render-v1"}
}

// N processes starting at once against an empty database migrate it once:
// the advisory lock makes the others wait and then find every version.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := Open(context.Background(), Config{URL: url, MaxConns: 2})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a concurrent Open failed: %v", err)
		}
	}
	raw := rawPostgres(t, url)
	var rows, maxV int
	if err := raw.QueryRow(context.Background(), `SELECT count(*), max(version) FROM schema_migrations`).Scan(&rows, &maxV); err != nil {
		t.Fatal(err)
	}
	if rows != len(ms) || maxV != len(ms) {
		t.Fatalf("schema_migrations has %d rows up to %d, want %d", rows, maxV, len(ms))
	}
	s := openTest(t, url, nil) // again: applies nothing
	if v, err := s.SchemaVersion(context.Background()); err != nil || v != len(ms) {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate is idempotent: %v", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	openTest(t, url, nil)
	if _, err := rawPostgres(t, url).Exec(context.Background(), `INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), Config{URL: url}); err == nil {
		s.Close()
		t.Fatal("opened a database with a newer schema")
	}
}

// A job row another transaction holds (an attempt's write, another
// fetcher) is skipped, not waited for: fetchers never block each other.
func TestFetchSkipsLockedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	s := openTest(t, url, pipeline.NewManualClock(t0))
	for _, id := range []string{"v1-a", "v1-b"} {
		if _, _, err := s.CreateJob(ctx, newJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = 'v1-a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, _, err := s.Fetch(fctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("fetch while a job row is locked: %v (did it wait for the lock?)", err)
	}
	if len(cs) != 1 || cs[0].Job.ID != "v1-b" {
		t.Fatalf("claimed %+v, want only v1-b", cs)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	cs, _, err = s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 || cs[0].Job.ID != "v1-a" {
		t.Fatalf("after the lock: %+v, %v", cs, err)
	}
}

// A submission's commit wakes a listener with its queue's name.
func TestListenerWakesOnCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	s := openTest(t, url, nil)
	woken := make(chan string, 16)
	l, err := NewListener(ListenerConfig{URL: url, Wake: func(q string) {
		select {
		case woken <- q:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(ctx)
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener never listened")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-n")); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-woken:
		if q != "render-v1" {
			t.Fatalf("woken for %q", q)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a committed submission")
	}
	// A release makes the job visible again: another wake-up.
	c, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(c) != 1 {
		t.Fatalf("fetch %v %v", c, err)
	}
	if err := s.Release(ctx, c[0].Lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a release")
	}
	if err := l.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := NewListener(ListenerConfig{URL: url}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("listener without a wake function: %v", err)
	}
}

// A deadlock or serialization failure reruns the transaction from the
// start, a bounded number of times; other errors are returned at once.
func TestTransactionRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	s, err := Open(ctx, Config{URL: url, MaxRetries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	calls := 0
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		calls++
		if _, err := tx.Exec(ctx, `INSERT INTO process_bindings VALUES ($1, 'worker', 'v1', 0, 0)`, fmt.Sprint("p", calls)); err != nil {
			return err
		}
		if calls < 3 {
			return &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d runs, want success on the third", err, calls)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM process_bindings`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows (%v): a failed run's writes survived", rows, err)
	}
	calls = 0
	err = s.inTx(ctx, func(tx pgx.Tx) error { calls++; return &pgconn.PgError{Code: "40001", Message: "could not serialize"} })
	if !retryable(err) || calls != 3 {
		t.Fatalf("gave up after %d runs with %v, want 3 runs", calls, err)
	}
	calls = 0
	err = s.inTx(ctx, func(tx pgx.Tx) error { calls++; return pipeline.ErrInvalidInput })
	if !errors.Is(err, pipeline.ErrInvalidInput) || calls != 1 {
		t.Fatalf("a refusal was retried: %d runs, %v", calls, err)
	}
}

// A listener whose connection is killed reconnects and hears the next
// commit (polling covers what it missed meanwhile).
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	s := openTest(t, url, nil)
	woken := make(chan string, 16)
	l, err := NewListener(ListenerConfig{URL: url, Retry: 50 * time.Millisecond, Wake: func(q string) {
		select {
		case woken <- q:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(ctx)
	<-l.Ready()
	raw := rawPostgres(t, url)
	var killed bool
	if err := raw.QueryRow(ctx, `SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener's backend: %v %v", killed, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if _, _, err := s.CreateJob(ctx, newJob(fmt.Sprintf("v1-re%d", i))); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener never came back after its connection was killed")
		}
	}
}

// The default clock follows the database server's: a wrong offset is
// corrected by the next measurement.
func TestDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), nil)
	c, ok := s.clock.(*dbClock)
	if !ok {
		t.Fatalf("default clock is %T, want the database clock", s.clock)
	}
	c.offset.Store(int64(time.Hour)) // as if this machine ran an hour behind
	if d := time.Until(c.Now()); d < 59*time.Minute {
		t.Fatalf("offset not applied: %s", d)
	}
	c.measure(ctx)
	var server time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	if d := c.Now().Sub(server); d < -time.Second || d > time.Second {
		t.Fatalf("after measuring, the clock is %s off the server's", d)
	}
}

// A store opened on a database whose queue tables hold rows but were never
// analyzed (a restore, an import, submissions before the first worker)
// gives them planner statistics at once; empty tables are left to
// autovacuum, and tables analyzed before are not analyzed again.
func TestOpenAnalyzesLoadedTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newDatabase(t)
	raw := rawPostgres(t, url)
	reltuples := func() map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for _, table := range []string{"jobs", "queue_messages", "job_events", "units"} {
			var r float64
			if err := raw.QueryRow(ctx, `SELECT reltuples::float8 FROM pg_class WHERE oid = ?::regclass`, table).Scan(&r); err != nil {
				t.Fatal(err)
			}
			out[table] = r
		}
		return out
	}
	s := openTest(t, url, nil)
	if got := reltuples(); got["jobs"] >= 0 || got["queue_messages"] >= 0 || got["job_events"] >= 0 {
		t.Fatalf("empty tables analyzed on open: %v", got)
	}
	var batch []pipeline.NewJob
	for i := range 30 {
		batch = append(batch, newJob(fmt.Sprintf("v1-an%02d", i)))
	}
	if err := s.CreateJobs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := reltuples(); got["jobs"] >= 0 {
		t.Fatalf("statistics before a second open: %v", got)
	}
	// A table held by a manual VACUUM or CREATE INDEX CONCURRENTLY (SHARE
	// UPDATE EXCLUSIVE): Open gives up on the ANALYZE after its lock
	// timeout and opens; the statistics wait for the next Open.
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	htx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := htx.Exec(ctx, `LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	blocked, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatalf("Open with the jobs table held: %v", err)
	}
	blocked.Close()
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Open waited %v for a table another session holds", waited)
	}
	if got := reltuples(); got["jobs"] >= 0 {
		t.Errorf("jobs analyzed while held: %v", got)
	}
	if err := htx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	openTest(t, url, nil)
	got := reltuples()
	for _, table := range []string{"jobs", "queue_messages", "job_events"} {
		if got[table] != 30 {
			t.Errorf("%s: reltuples %v after an open, want 30 (analyzed)", table, got[table])
		}
	}
	if got["units"] >= 0 {
		t.Errorf("units analyzed: %v (not a queue table, and empty)", got["units"])
	}
	// Analyzed once: more rows do not make the next open analyze again.
	if err := s.CreateJobs(ctx, []pipeline.NewJob{newJob("v1-an99")}); err != nil {
		t.Fatal(err)
	}
	openTest(t, url, nil)
	if again := reltuples(); again["jobs"] != 30 {
		t.Errorf("jobs reltuples %v after a third open, want 30 (not analyzed again)", again["jobs"])
	}
}

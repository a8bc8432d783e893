// Package postgres is edgepipe's job store on PostgreSQL (pgx/v5, pgxpool):
// the same tables, queue, dead letters, unit/provider-call/claim/asset
// bookkeeping and webhook outbox as storage/sqlite, with the same semantics,
// for deployments where many processes on many machines share one database
// (docs/design.md §10).
//
// Concurrency. SQLite serialises every write with BEGIN IMMEDIATE; here
// writes run at READ COMMITTED and serialise exactly where the SQLite driver
// relied on that:
//
//   - every write of an attempt locks its job row first (checkFence's
//     SELECT … FOR UPDATE, or the conditional UPDATE itself), so the fence
//     holds until commit and no takeover can slip between check and write;
//   - every transaction that appends a job event holds that job's row lock,
//     so one job's event ids grow in commit order (SSE cursors never skip);
//   - claims in Fetch lock message and job rows with FOR UPDATE SKIP LOCKED,
//     so many workers claim at once without waiting on each other;
//   - the object-claim protocol of docs/design.md §7 serialises per key on a
//     transaction-scoped advisory lock (lockKey);
//   - deadlocks and serialization failures (40P01, 40001) are retried a
//     bounded number of times with jitter (inTx).
package postgres

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"edgepipe/internal/groupcommit"
	"edgepipe/internal/sqlmigrate"
	"edgepipe/pipeline"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Config configures a Store.
type Config struct {
	// URL is the connection string (postgres://…). Required.
	URL string
	// MaxConns bounds the pool. Default 16.
	MaxConns int32
	// MaxDeliveries is how often a queue message may be delivered without
	// being acked before it goes to the dead-letter queue as poison.
	// Default 10.
	MaxDeliveries int
	// MaxRetries bounds how often a transaction that hit a deadlock or a
	// serialization failure is run again. Default 8.
	MaxRetries int
	// Clock is the store's time (leases, backoff, visibility). Default: the
	// database server's clock, as measured from this process (dbClock), so
	// processes on machines whose clocks drift still agree on leases.
	Clock  pipeline.Clock
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = 16
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = 10
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 8
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: postgres: database URL is empty (EDGEPIPE_DATABASE_URL)", pipeline.ErrInvalidInput)
	case c.MaxConns < 1:
		return fmt.Errorf("%w: postgres: the pool needs at least one connection", pipeline.ErrInvalidInput)
	case c.MaxDeliveries < 1:
		return fmt.Errorf("%w: postgres: max deliveries must be at least 1", pipeline.ErrInvalidInput)
	case c.MaxRetries < 1:
		return fmt.Errorf("%w: postgres: max retries must be at least 1", pipeline.ErrInvalidInput)
	}
	return nil
}

// Store is the Postgres job store and queue.
type Store struct {
	cfg  Config
	pool *pgxpool.Pool
	// claims runs qFetchPlain, the claim without a tenant limit, and
	// nothing else; its sessions plan every statement generically
	// (claimPoolParams).
	claims    *pgxpool.Pool
	group     *groupcommit.Committer
	closeOnce sync.Once
	clock     pipeline.Clock
	log       *slog.Logger
}

// Open connects, and applies pending migrations under an advisory lock.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// The parse error may quote the URL, password included: say only what failed.
		return nil, fmt.Errorf("%w: postgres: the database URL cannot be parsed", pipeline.ErrInvalidInput)
	}
	cc := pc.Copy()
	pc.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", translate(err))
	}
	claimPoolParams(cc, cfg.MaxConns)
	claims, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", translate(err))
	}
	if cfg.Clock == nil {
		cfg.Clock = newDBClock(ctx, pool, time.Minute)
	}
	s := &Store{cfg: cfg, pool: pool, claims: claims, clock: cfg.Clock, log: cfg.Logger}
	if err := s.Migrate(ctx); err != nil {
		s.closePools()
		return nil, err
	}
	s.group = groupcommit.New(s.commitGroup, errClosed)
	// The committer outlives Open's ctx: it runs until Close.
	if err := s.group.Start(context.WithoutCancel(ctx)); err != nil {
		s.closePools()
		return nil, err
	}
	return s, nil
}

// claimPoolParams makes pc the claim pool's (Store.claims): at most 4
// connections (a worker process fetches from one loop; pgxpool connects
// lazily, so a process that never claims opens none), each session with
// plan_cache_mode = force_generic_plan.
//
// Why: under the default (auto), Postgres planned qFetchPlain anew on every
// call. Its generic plan is the same index scans as a custom plan, but with
// LIMIT $6 its cost is estimated for a tenth of the visible messages, so it
// never came near a custom plan's for the actual limit, and Postgres kept
// choosing custom plans once the queue held thousands of messages with
// planner statistics (at 40 jobs, or 10,000 without statistics, it went
// generic after five): 0.6 ms of planning a call, 200 µs a job where
// fetches claim a few jobs each (20 ms jobs, bench/riverref -work), 13 µs
// a job in a no-op burn-down. Only this statement runs here: the listings
// depend on custom plans (TestListingsPlannedWithTheirValues).
func claimPoolParams(pc *pgxpool.Config, maxConns int32) {
	pc.MaxConns = min(maxConns, 4)
	pc.MinConns, pc.MinIdleConns = 0, 0 // not the URL's pool_min_conns: only a claimer connects
	// A SET when the session starts rather than a startup parameter, which
	// a connection pooler such as PgBouncer may refuse. Behind a pooler it
	// must be in session mode: in transaction mode the SET would stay on a
	// server connection that other statements, listings among them, reuse.
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		return err
	}
}

func (s *Store) closePools() {
	s.pool.Close()
	s.claims.Close()
}

// Pool is the connection pool (the Notifier and tests share it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the group committer (its last group is committed first) and
// closes the pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		_ = s.group.Stop(context.Background()) // waits for its commit; cannot fail without a deadline
		s.closePools()
	})
	return nil
}

// Ping checks the database answers (for /readyz).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", translate(err))
	}
	return nil
}

type migration = sqlmigrate.Migration

func loadMigrations() ([]migration, error) {
	return sqlmigrate.Load(migrationFS, "migrations", "postgres")
}

// migrationLock is the advisory lock key every edgepipe process takes to
// migrate ("edgepipe" in ASCII), so N processes starting at once migrate
// once: the others wait, then find every version recorded.
const migrationLock int64 = 0x6564676570697065

// Migrate applies, each in its own transaction, every embedded migration
// not yet recorded in schema_migrations, holding the migration advisory
// lock on one connection for the whole run. Idempotent (edgepipe migrate).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", translate(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("postgres: migrate: take lock: %w", translate(err))
	}
	defer func() {
		// A failed unlock leaves the session holding the lock: drop the
		// connection so the lock goes with it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: create schema_migrations: %w", translate(err))
	}
	for _, m := range ms {
		applied, err := s.applyMigration(ctx, conn.Conn(), m)
		if err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", m.Name, err)
		}
		if applied {
			s.log.Info("postgres: applied migration", "version", m.Version, "name", m.Name)
		}
	}
	if err := analyzeUnplanned(ctx, conn.Conn()); err != nil {
		s.log.Warn("postgres: analyze of the queue tables failed; plans stay without statistics until autovacuum", "err", err)
	}
	var maxV int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&maxV); err != nil {
		return fmt.Errorf("postgres: read schema version: %w", translate(err))
	}
	if maxV > len(ms) {
		return fmt.Errorf("postgres: database schema version %d is newer than this binary knows (%d); upgrade edgepipe", maxV, len(ms))
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, conn *pgx.Conn, m migration) (bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, translate(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, m.Version).Scan(&n); err != nil {
		return false, translate(err)
	}
	if n > 0 {
		return false, nil
	}
	// A multi-statement script runs through the simple protocol.
	if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return false, translate(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
		m.Version, m.Name, s.now()); err != nil {
		return false, translate(err)
	}
	return true, translate(tx.Commit(ctx))
}

// SchemaVersion returns the highest applied migration.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, translate(err)
}

// dbtx is what a transaction and the pool have in common.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// inTx runs fn in a READ COMMITTED transaction and commits it. A deadlock
// or serialization failure runs fn again from the start (at most
// MaxRetries times, with jittered backoff), so fn must only write through
// tx and must reset whatever it returns.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retrying(ctx, func() error { return s.runTx(ctx, fn) })
}

// retrying runs fn, and runs it again after a deadlock or serialization
// failure (at most MaxRetries times in all, with jittered backoff), so fn
// must reset whatever it returns. inTx uses it for a transaction; the
// single-statement paths (fetchPlain, finishBulkOnly), which run outside an
// explicit transaction, use it directly.
func (s *Store) retrying(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = fn()
		if err == nil || !retryable(err) || attempt+1 >= s.cfg.MaxRetries {
			return translate(err)
		}
		wait := time.Duration(mrand.Int64N(int64(5*time.Millisecond) << min(attempt, 6)))
		select {
		case <-ctx.Done():
			return translate(err)
		case <-time.After(wait):
		}
	}
}

func (s *Store) runTx(ctx context.Context, fn func(tx pgx.Tx) error) (err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// retryable reports a deadlock or serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// lockKey serialises, until the end of tx, every transaction touching the
// object key's claims and asset (docs/design.md §7): what SQLite's single
// writer gives the SQLite driver for free.
func lockKey(ctx context.Context, tx pgx.Tx, key string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, "object:"+key)
	return err
}

func (s *Store) now() int64 { return ms(s.clock.Now()) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := ms(t)
	return &v
}

func timeOf(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return fromMS(*v)
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// newAttemptIDs is n fresh random attempt ids, the fencing tokens of
// claims ("att_" and 24 hex digits), read from the random source at once: a
// claim batch needs one per job.
func newAttemptIDs(n int) []string {
	b := make([]byte, 12*n)
	_, _ = rand.Read(b)
	out := make([]string, n)
	for i := range out {
		out[i] = "att_" + hex.EncodeToString(b[12*i:12*i+12])
	}
	return out
}

var errClosed = errors.New("postgres: store is closed")

// ErrConstraint marks a write refused by a constraint or trigger.
var ErrConstraint = errors.New("postgres: constraint violated")

// ErrUnavailable marks a database that could not be reached or answered.
var ErrUnavailable = errors.New("postgres: database unavailable")

// translate turns driver errors into the package's and pipeline's
// sentinels, once, here.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return pipeline.ErrNotFound
	}
	if errors.Is(err, ErrConstraint) || errors.Is(err, ErrUnavailable) || errors.Is(err, pipeline.ErrNotFound) {
		return err // translated already
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.Contains(pe.Message, "terminal job is immutable"):
			return fmt.Errorf("%w: %w: %w", ErrConstraint, pipeline.ErrTerminal, err)
		case strings.Contains(pe.Message, "invalid job status transition"):
			return fmt.Errorf("%w: %w: %w", ErrConstraint, pipeline.ErrInvalidTransition, err)
		case strings.HasPrefix(pe.Code, "23"): // integrity constraint violation
			return fmt.Errorf("%w: %w", ErrConstraint, err)
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57P"):
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// analyzeUnplanned runs ANALYZE on the queue's hot tables that hold rows
// but have never been analyzed or vacuumed (pg_class.reltuples < 0): a
// database loaded since it was created (a restore, a burst of submissions
// before the first worker) has no planner statistics until autovacuum's
// next visit (autovacuum_naptime, a minute by default). Without them the
// cached generic plan of the claim joins its batch to jobs by a nested
// loop whose index scan repeats the whole id array per row (quadratic in
// the batch) and reads by bitmap scans where an index scan serves. It runs
// under the migration lock, so processes starting together analyze once;
// a table analyzed before, or empty, is left to autovacuum, so in a
// database in service this is one catalog read. (PostgreSQL 14 and later
// mark a table never analyzed with reltuples -1; on older servers this
// finds nothing and autovacuum does it, as before.)
func analyzeUnplanned(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c
		WHERE c.oid IN ('jobs'::regclass, 'queue_messages'::regclass, 'job_events'::regclass)
		  AND c.reltuples < 0 AND pg_relation_size(c.oid) > 0`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	// Best effort, so bounded: a manual VACUUM or CREATE INDEX
	// CONCURRENTLY holding the table must not keep Open (and every process
	// behind the migration lock) waiting; ANALYZE samples, so its own time
	// is short whatever the table's size.
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '30s'`); err != nil {
			return err
		}
		for _, n := range names {
			if _, err := tx.Exec(ctx, `ANALYZE `+pgx.Identifier{n}.Sanitize()); err != nil {
				return err
			}
		}
		return nil
	})
}

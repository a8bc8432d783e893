// Package sqlite is edgepipe's D1 role: the job store, its event log, the
// durable queue with its dead-letter queue, the unit/provider-call/claim/asset
// bookkeeping, and the webhook outbox, all in one SQLite database so that a
// job, its queue message and its history commit in one transaction.
//
// Writes go through a pool of exactly one connection with BEGIN IMMEDIATE, so
// within a process writers queue in Go instead of spinning on SQLITE_BUSY;
// across processes the busy timeout makes them wait for each other. Reads use
// a separate pool and never block writers (WAL).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"edgepipe/internal/groupcommit"
	"edgepipe/internal/sqlitewal"
	"edgepipe/internal/sqlmigrate"
	"edgepipe/pipeline"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Config configures a Store.
type Config struct {
	// Path of the database file. Required.
	Path string
	// BusyTimeout is how long a writer waits for another process's write
	// transaction. Default 10 s.
	BusyTimeout time.Duration
	// Synchronous is the WAL synchronous mode: "NORMAL" (default) or "FULL".
	// NORMAL in WAL mode never corrupts the database; a power loss (not a
	// process crash) may roll back the last transactions before a
	// checkpoint. FULL also fsyncs every commit.
	Synchronous string
	// MaxDeliveries is how often a queue message may be delivered without
	// being acked before it goes to the dead-letter queue as poison.
	// Default 10.
	MaxDeliveries int
	// ReadConns is the size of the read pool. Default 4.
	ReadConns int
	// CheckpointInterval is how often the WAL is checkpointed, off the
	// commit path, when something was committed since the last time
	// (checkpoint.go). Default 250 ms.
	CheckpointInterval time.Duration
	// CheckpointRestartPages is the WAL length, in pages, past which a
	// RESTART checkpoint lets the WAL start over, when no reader still
	// needs it (checkpoint.go). Default 10,000 (about 40 MiB).
	CheckpointRestartPages int
	Clock                  pipeline.Clock
	Logger                 *slog.Logger
}

func (c *Config) setDefaults() {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 10 * time.Second
	}
	if c.Synchronous == "" {
		c.Synchronous = "NORMAL"
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = 10
	}
	if c.ReadConns == 0 {
		c.ReadConns = 4
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 250 * time.Millisecond
	}
	if c.CheckpointRestartPages == 0 {
		c.CheckpointRestartPages = 10_000
	}
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.Path == "":
		return fmt.Errorf("%w: sqlite: database path is empty (EDGEPIPE_DATA_DIR)", pipeline.ErrInvalidInput)
	case c.BusyTimeout < 0:
		return fmt.Errorf("%w: sqlite: busy timeout must not be negative", pipeline.ErrInvalidInput)
	case c.Synchronous != "NORMAL" && c.Synchronous != "FULL":
		return fmt.Errorf("%w: sqlite: synchronous must be NORMAL or FULL, got %q", pipeline.ErrInvalidInput, c.Synchronous)
	case c.MaxDeliveries < 1:
		return fmt.Errorf("%w: sqlite: max deliveries must be at least 1", pipeline.ErrInvalidInput)
	case c.ReadConns < 1:
		return fmt.Errorf("%w: sqlite: read pool needs at least one connection", pipeline.ErrInvalidInput)
	case c.CheckpointInterval < 0 || c.CheckpointRestartPages < 0:
		return fmt.Errorf("%w: sqlite: checkpoint interval and restart pages must not be negative", pipeline.ErrInvalidInput)
	}
	return nil
}

// Store is the SQLite job store and queue.
type Store struct {
	cfg   Config
	write *sql.DB // exactly one connection
	stmts stmtCache
	group *groupcommit.Committer
	ckpt  *checkpointer
	read  *sql.DB
	clock pipeline.Clock
	log   *slog.Logger
	wake  listeners
}

// Open opens (creating if needed) the database and applies pending migrations.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", cfg.Synchronous)
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	// No per-connection mutex (SQLITE_OPEN_NOMUTEX, SQLite's multi-thread
	// mode): a connection and its statements must then never be used by
	// two goroutines at once. database/sql makes every driver call under
	// the connection's lock; go-sqlite3's own goroutines either run a
	// statement while its caller waits (a cancellable Exec) or call
	// sqlite3_interrupt, which is safe from anywhere; its finalizers close
	// statements and connections database/sql has already let go of. What
	// would break it is code here holding a driver statement or rows past
	// a sql.Conn.Raw callback, or sharing a sql.Conn between goroutines:
	// this package does neither (the only Raw uses are tests that close
	// what they open inside the callback). With the mutex every step, bind
	// and column read locked and unlocked it: 6% of a burn-down's samples
	// in pthread_mutex_lock/unlock, 3% without (the rest is SQLite's
	// global allocator mutex).
	q.Set("_mutex", "no")
	// The writer's WAL commits go to the file in one write each
	// (internal/sqlitewal): SQLite's default VFS makes two pwrite calls a
	// frame, most of a commit's cost when nothing is fsynced at commit.
	if err := sqlitewal.Register(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	q.Set("vfs", sqlitewal.Name)
	write, err := sql.Open(writerDriver, "file:"+uriPath(abs)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	s := &Store{cfg: cfg, write: write, clock: cfg.Clock, log: cfg.Logger}
	s.ckpt = &checkpointer{every: cfg.CheckpointInterval, restartPages: cfg.CheckpointRestartPages, store: s}
	s.stmts.db = write
	if err := s.migrate(ctx); err != nil {
		write.Close()
		return nil, err
	}

	rq := url.Values{}
	rq.Set("_busy_timeout", strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10))
	rq.Set("_foreign_keys", "1")
	rq.Set("mode", "ro")
	rq.Set("_mutex", "no") // as the writer's
	rq.Set("_stmt_cache_size", strconv.Itoa(readStmtCache))
	read, err := sql.Open("sqlite3", "file:"+uriPath(abs)+"?"+rq.Encode())
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open read pool: %w", err)
	}
	read.SetMaxOpenConns(cfg.ReadConns)
	read.SetMaxIdleConns(cfg.ReadConns)
	s.read = read
	// The checkpointer's connection writes the database file; its own
	// commits (none) would checkpoint as SQLite does by default.
	// Its busy timeout bounds how long a RESTART checkpoint, which holds
	// the write lock while it waits for readers, stalls the writer.
	cq := url.Values{}
	cq.Set("_busy_timeout", strconv.FormatInt(min(cfg.BusyTimeout, ckptBusyTimeout).Milliseconds(), 10))
	ckdb, err := sql.Open("sqlite3", "file:"+uriPath(abs)+"?"+cq.Encode())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: open checkpointer: %w", err), read.Close(), write.Close())
	}
	ckdb.SetMaxOpenConns(1)
	s.ckpt.db = ckdb
	s.group = groupcommit.New(s.commitGroup, errClosed)
	// The committer and the checkpointer outlive Open's ctx: they run
	// until Close.
	if err := s.ckpt.svc.Start(context.WithoutCancel(ctx), s.ckpt.run); err != nil {
		return nil, errors.Join(err, ckdb.Close(), read.Close(), write.Close())
	}
	if err := s.group.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, errors.Join(err, s.ckpt.svc.Stop(context.WithoutCancel(ctx)), ckdb.Close(), read.Close(), write.Close())
	}
	return s, nil
}

// readStmtCache is how many prepared statements each read connection
// keeps (go-sqlite3's _stmt_cache_size, least recently used out). Parsing
// and planning a statement costs more than running most of the reads the
// API and the workers make — a job by id, its events after a cursor — and
// the set of statement texts is small and fixed, so every read connection
// keeps them all. Writes have their own cache (stmtCache).
const readStmtCache = 64

// uriPath escapes the characters that end or escape the path part of an
// SQLite URI filename: without it a data directory containing '#' or '?'
// silently opens a different, truncated path.
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(p)
}

// Close stops the group committer (its last group is committed first) and
// the checkpointer, and closes the pools.
func (s *Store) Close() error {
	_ = s.group.Stop(context.Background()) // waits for its commit; cannot fail without a deadline
	_ = s.ckpt.svc.Stop(context.Background())
	s.stmts.close()
	return errors.Join(s.ckpt.db.Close(), s.read.Close(), s.write.Close())
}

// Ping checks the database answers (for /readyz).
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.read.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

type migration = sqlmigrate.Migration

func loadMigrations() ([]migration, error) {
	return sqlmigrate.Load(migrationFS, "migrations", "sqlite")
}

// migrate applies, each in its own transaction, every embedded migration not
// yet recorded in schema_migrations. Two processes starting at once are
// serialised by BEGIN IMMEDIATE; the loser sees the version recorded.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	return s.applyMigrations(ctx, ms)
}

// applyMigrations is migrate with the migrations given (tests add one).
func (s *Store) applyMigrations(ctx context.Context, ms []migration) (rerr error) {
	// A migration may rewrite a whole table in one statement (0005 did),
	// whose statement journal would then hold every page of it: on disk,
	// as SQLite does by default, rather than in memory as the writer's
	// small statements do (writerPragmas). The writer pool is one
	// connection, so the setting is that connection's until the end.
	if _, err := s.write.ExecContext(ctx, "PRAGMA temp_store = FILE"); err != nil {
		return fmt.Errorf("sqlite: %w", translate(err))
	}
	defer func() {
		if _, err := s.write.ExecContext(context.WithoutCancel(ctx), journalsInMemory); err != nil && rerr == nil {
			rerr = fmt.Errorf("sqlite: %w", translate(err))
		}
	}()
	if _, err := s.write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: create schema_migrations: %w", translate(err))
	}
	for _, m := range ms {
		applied := false
		err := s.inTx(ctx, func(tx *wtx) error {
			applied = false
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			applied = true
			// Multi-statement scripts cannot be prepared; run them raw.
			if _, err := tx.tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply %s: %w", m.Name, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, s.now())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		if applied {
			// A schema change is worth a line in the operator's log.
			s.log.Info("sqlite: applied migration", "version", m.Version, "name", m.Name)
		}
	}
	var maxV int
	if err := s.write.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&maxV); err != nil {
		return fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if maxV > len(ms) {
		return fmt.Errorf("sqlite: database schema version %d is newer than this binary knows (%d); upgrade edgepipe", maxV, len(ms))
	}
	return nil
}

// SchemaVersion returns the highest applied migration.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.read.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, translate(err)
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE via _txlock).
func (s *Store) inTx(ctx context.Context, fn func(*wtx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return translate(err)
	}
	// Statements first seen in this transaction are prepared on the pool
	// once it is free again (the pool's one connection is ours until then).
	defer s.stmts.preparePending(ctx)
	// A panic in fn must give the connection back before preparePending
	// (deferred above, so it runs after this) asks the pool for it.
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	w := &wtx{tx: tx, cache: &s.stmts}
	if err := fn(w); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := s.commit(tx); err != nil {
		return err
	}
	s.wake.announce(w.visible)
	return nil
}

// commit commits a write transaction and tells the checkpointer the WAL
// has grown.
func (s *Store) commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return translate(err)
	}
	s.ckpt.committed()
	return nil
}

func (s *Store) now() int64 { return ms(s.clock.Now()) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: ms(t), Valid: true}
}

func timeOf(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

var errClosed = errors.New("sqlite: store is closed")

// ErrBusy is returned when the database stayed locked by another process for
// longer than the busy timeout.
var ErrBusy = errors.New("sqlite: database busy")

// ErrConstraint marks a write refused by a constraint or trigger.
var ErrConstraint = errors.New("sqlite: constraint violated")

// translate turns driver errors into the package's and pipeline's sentinels,
// once, here.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return pipeline.ErrNotFound
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return fmt.Errorf("%w: %v", ErrBusy, err)
		case sqlite3.ErrConstraint:
			if strings.Contains(se.Error(), "terminal job is immutable") {
				return fmt.Errorf("%w: %w: %v", ErrConstraint, pipeline.ErrTerminal, err)
			}
			if strings.Contains(se.Error(), "invalid job status transition") {
				return fmt.Errorf("%w: %w: %v", ErrConstraint, pipeline.ErrInvalidTransition, err)
			}
			return fmt.Errorf("%w: %v", ErrConstraint, err)
		}
	}
	return err
}

// nullInt is sql.NullInt64 under a name that reads well in scans.
type nullInt struct{ sql.NullInt64 }

func (n *nullInt) Scan(v any) error { return n.NullInt64.Scan(v) }

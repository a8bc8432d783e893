// Package storetest is the conformance suite of edgepipe's job store: every
// driver (storage/sqlite, storage/postgres) runs Exercise against itself, so
// a contract of docs/design.md §2–§7 and §9 is tested once and holds on every
// backend. In the style of River's riverdrivertest.Exercise.
//
// The suite drives a store only through its methods, and checks what
// matters through a second connection to the same database (Harness.Raw):
// a store cannot pass by agreeing with itself. Raw SQL in the suite is the
// common subset of SQLite and Postgres, with ? placeholders (?N numbered);
// each harness rewrites them for its driver.
package storetest

import (
	"context"
	"testing"
	"time"

	"edgepipe/internal/jobstore"
	"edgepipe/pipeline"
)

// JobStore is everything the suite calls: the interfaces the consumers own,
// and the operator and test methods both drivers have.
type JobStore interface {
	jobstore.Consumers

	CreateJobs(ctx context.Context, njs []pipeline.NewJob) error
	FinishMany(ctx context.Context, fs []pipeline.Finished) ([]error, error)
	Enqueue(ctx context.Context, queue, jobID string, delay time.Duration) error
	Ack(ctx context.Context, messageID int64) error
	QueueDepth(ctx context.Context, queue string) (total, visible int, err error)
	WebhookDeliveries(ctx context.Context, jobID string) ([]pipeline.WebhookDelivery, error)
	CountWebhooks(ctx context.Context) (map[string]int, error)
	SchemaVersion(ctx context.Context) (int, error)
	Close() error
}

// Row is one row of a raw query.
type Row interface{ Scan(dest ...any) error }

// DB is a second connection to a store's database, outside the store.
// Queries use ? placeholders (or ?N).
type DB interface {
	QueryRow(ctx context.Context, q string, args ...any) Row
	// Query returns every row, each value formatted with fmt.Sprint
	// (NULL as "<nil>").
	Query(ctx context.Context, q string, args ...any) ([][]string, error)
	// Exec runs one statement and returns the rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// Harness is what a driver gives the suite.
type Harness struct {
	// NewDatabase makes a fresh, empty database for one test and returns
	// its name (a file path, a URL); it is removed when t ends.
	NewDatabase func(t *testing.T) string
	// Open opens a store on the named database with MaxDeliveries 3 and
	// clock (nil: the system clock), and closes it when t ends.
	Open func(t *testing.T, db string, clock pipeline.Clock) JobStore
	// Raw opens the second connection on the named database, closed when t
	// ends.
	Raw func(t *testing.T, db string) DB
	// RefuseInserts makes every later INSERT into table fail (a trigger in
	// the driver's dialect), so the suite can show a transaction rolls back
	// whole when its last write fails.
	RefuseInserts func(t *testing.T, db DB, table string)
}

// Exercise runs the whole suite against the driver h opens.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	for _, c := range suite {
		// Each test calls t.Parallel itself.
		t.Run(c.name, func(t *testing.T) { c.fn(t, &h) })
	}
}

// env is one test's store with the second connection to its database.
type env struct {
	JobStore
	name  string
	db    DB
	read  rawRead
	write rawWrite
}

func (h *Harness) open(t *testing.T, clock pipeline.Clock) *env {
	t.Helper()
	return h.openOn(t, h.NewDatabase(t), clock)
}

// openOn opens another store on the database db (a second process).
func (h *Harness) openOn(t *testing.T, db string, clock pipeline.Clock) *env {
	t.Helper()
	s := h.Open(t, db, clock)
	raw := h.Raw(t, db)
	return &env{JobStore: s, name: db, db: raw, read: rawRead{raw}, write: rawWrite{raw}}
}

// ExecForTest runs raw SQL through the second connection (to break the
// database on purpose).
func (e *env) ExecForTest(ctx context.Context, q string) error {
	_, err := e.db.Exec(ctx, q)
	return err
}

type rawRead struct{ db DB }

func (r rawRead) QueryRow(q string, args ...any) Row {
	return r.db.QueryRow(context.Background(), q, args...)
}

type rawWrite struct{ db DB }

func (w rawWrite) ExecContext(ctx context.Context, q string, args ...any) (int64, error) {
	return w.db.Exec(ctx, q, args...)
}

func (w rawWrite) Exec(q string, args ...any) (int64, error) {
	return w.db.Exec(context.Background(), q, args...)
}

// maxDecisionReason is the longest operator reason a store accepts (bytes).
const maxDecisionReason = pipeline.MaxOperatorReason

// maxWebhookError is the longest last_error a store keeps on a delivery
// (bytes, cut on a rune boundary).
const maxWebhookError = 200

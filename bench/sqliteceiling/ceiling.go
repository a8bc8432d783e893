// Package sqliteceiling is the ceiling edgepipe's SQLite burn-down is
// measured against (issue 16): the smallest durable queue that keeps the
// guarantees that matter for a burn-down, on edgepipe's settings — WAL,
// synchronous=NORMAL, foreign keys on, BEGIN IMMEDIATE, one writer
// connection, mattn/go-sqlite3, the writer's VFS (storage/sqlite/db.go,
// internal/sqlitewal) — with the claim and
// the completion each one committed batch, the completion fenced by the
// lease (owner and attempt). No events, no messages, no triggers: whatever
// edgepipe does beyond this is its price for them.
//
// `make bench` runs it next to storage/sqlite's BenchmarkBurnDown, in the
// same shape (the producer claims 200, 100 workers, a completer batches up
// to 500), alternating, and prints both rates and their ratio.
package sqliteceiling

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"

	_ "github.com/mattn/go-sqlite3" // the driver storage/sqlite uses

	"edgepipe/internal/sqlitewal"
)

const schema = `CREATE TABLE jobs (
	id               INTEGER PRIMARY KEY,
	status           TEXT NOT NULL CHECK (status IN ('pending','running','succeeded')),
	attempt          INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT,
	lease_expires_at INTEGER,
	updated_at       INTEGER NOT NULL
);
CREATE INDEX jobs_ready ON jobs (id) WHERE status = 'pending';`

// Queue is the minimal queue: one writer connection, statements prepared once.
type Queue struct {
	db          *sql.DB
	insert      *sql.Stmt
	claim, done *sql.Stmt
}

// Lease is what a worker holds: the fence its completion must match.
type Lease struct {
	ID      int64 `json:"i"`
	Attempt int64 `json:"a"`
}

// Open creates the queue in a new database file at path.
func Open(ctx context.Context, path string) (*Queue, error) {
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	q.Set("_mutex", "no") // as edgepipe's connections (storage/sqlite Open)
	// and its writer's VFS: each WAL commit in one write (internal/sqlitewal)
	if err := sqlitewal.Register(); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	q.Set("vfs", sqlitewal.Name)
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("ceiling: open: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	// edgepipe's writer keeps statement journals in memory
	// (storage/sqlite writerPragmas); the same here, on the one connection.
	if _, err := db.ExecContext(ctx, "PRAGMA temp_store = MEMORY"); err != nil {
		db.Close()
		return nil, fmt.Errorf("ceiling: pragma: %w", err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("ceiling: schema: %w", err)
	}
	qu := &Queue{db: db}
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&qu.insert, `INSERT INTO jobs (status, updated_at) VALUES ('pending', ?)`},
		// The claim: the oldest pending jobs, a fresh attempt and lease each.
		{&qu.claim, `UPDATE jobs SET status = 'running', attempt = attempt + 1, lease_owner = ?1,
			lease_expires_at = ?2, updated_at = ?3
			WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT ?4)
			RETURNING id, attempt`},
		// The completion: every lease of the batch in one statement, each
		// row only if its lease (owner, attempt) is still the job's.
		{&qu.done, `UPDATE jobs SET status = 'succeeded', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1
			FROM json_each(?2) AS d
			WHERE jobs.id = d.value ->> 'i' AND jobs.attempt = d.value ->> 'a'
			  AND jobs.lease_owner = ?3 AND jobs.status = 'running'`},
	} {
		if *p.st, err = db.PrepareContext(ctx, p.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("ceiling: prepare: %w", err)
		}
	}
	return qu, nil
}

// Close closes the database.
func (q *Queue) Close() error { return q.db.Close() }

// Insert adds n pending jobs, in committed batches of 1,000.
func (q *Queue) Insert(ctx context.Context, n int, now int64) error {
	for n > 0 {
		b := min(n, 1000)
		err := q.inTx(ctx, func(tx *sql.Tx) error {
			st := tx.StmtContext(ctx, q.insert)
			for range b {
				if _, err := st.ExecContext(ctx, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("ceiling: insert: %w", err)
		}
		n -= b
	}
	return nil
}

// Claim leases up to max pending jobs to owner until leaseExp, in one
// committed transaction.
func (q *Queue) Claim(ctx context.Context, owner string, max int, now, leaseExp int64) ([]Lease, error) {
	var out []Lease
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.StmtContext(ctx, q.claim).QueryContext(ctx, owner, leaseExp, now, max)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l Lease
			if err := rows.Scan(&l.ID, &l.Attempt); err != nil {
				return err
			}
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ceiling: claim: %w", err)
	}
	return out, nil
}

// Done marks the leased jobs succeeded in one committed transaction and
// says how many still held their lease.
func (q *Queue) Done(ctx context.Context, owner string, ls []Lease, now int64) (int, error) {
	arg, err := json.Marshal(ls)
	if err != nil {
		return 0, err
	}
	var n int64
	err = q.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.StmtContext(ctx, q.done).ExecContext(ctx, now, string(arg), owner)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ceiling: done: %w", err)
	}
	return int(n), nil
}

// Left counts the jobs not succeeded.
func (q *Queue) Left(ctx context.Context) (int, error) {
	var n int
	err := q.db.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE status <> 'succeeded'`).Scan(&n)
	return n, err
}

func (q *Queue) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

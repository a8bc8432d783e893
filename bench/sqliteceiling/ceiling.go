// Package sqliteceiling is the ceiling edgepipe's SQLite burn-down is
// measured against (issue 16): the smallest durable queue that keeps the
// guarantees that matter for a burn-down, on edgepipe's settings — WAL,
// synchronous=NORMAL, foreign keys on, BEGIN IMMEDIATE, one writer
// connection, mattn/go-sqlite3, the writer's VFS (storage/sqlite/db.go,
// internal/sqlitewal) — with the claim and
// the completion each one committed batch, the completion fenced by the
// lease (owner and attempt). No events, no messages, no triggers: whatever
// edgepipe does beyond this is its price for them. OpenWith adds two of
// them back (Guarantees: status events and the terminal wall), so that what
// the guarantees the goal keeps cost by themselves is measured apart from
// the rest of edgepipe's schema, and then that schema's text job keys.
//
// `make bench` runs it next to storage/sqlite's BenchmarkBurnDown, in the
// same shape (the producer claims 200, 100 workers, a completer batches up
// to 500), alternating, and prints the rates and their ratios: edgepipe's
// to the ceiling's, and the guaranteed ceiling's (events and wall) to the
// ceiling's.
package sqliteceiling

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

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

// wallSchema is the terminal wall (Guarantees.Wall) as edgepipe's SQLite
// store has it (storage/sqlite migration 0010, jobs_guard): a BEFORE UPDATE
// trigger whose WHEN clause refuses any change to a finished job and any
// status change the transition table does not list.
const wallSchema = `CREATE TRIGGER jobs_guard BEFORE UPDATE ON jobs
WHEN OLD.status = 'succeeded'
  OR (NEW.status <> OLD.status AND instr(CASE OLD.status
        WHEN 'pending' THEN ',running,'
        WHEN 'running' THEN ',pending,succeeded,'
        ELSE '' END, ',' || NEW.status || ',') = 0)
BEGIN
    SELECT RAISE(ABORT, 'ceiling: terminal job is immutable') WHERE OLD.status = 'succeeded';
    SELECT RAISE(ABORT, 'ceiling: invalid job status transition');
END;`

// eventsSchema is the job history (Guarantees.Events) as edgepipe keeps
// it: one row per status change, in commit order (the SSE cursor), tied to
// its job by a foreign key and read by job.
const eventsSchema = `CREATE TABLE job_events (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id      INTEGER NOT NULL REFERENCES jobs (id),
	at          INTEGER NOT NULL,
	from_status TEXT NOT NULL,
	to_status   TEXT NOT NULL,
	attempt     INTEGER NOT NULL,
	detail_json TEXT NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, id);`

// doneSQL is the completion: every lease of the batch in one statement,
// each row only if its lease (owner, attempt) is still the job's.
const doneSQL = `UPDATE jobs SET status = 'succeeded', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1
	FROM json_each(?2) AS d
	WHERE jobs.id = d.value ->> 'i' AND jobs.attempt = d.value ->> 'a'
	  AND jobs.lease_owner = ?3 AND jobs.status = 'running'`

// Guarantees are guarantees of edgepipe's store that issue 16 names, added
// back to the ceiling one by one: the burn-down's goal is a share of the
// ceiling "on the same schema guarantees (events, fences, terminal wall)";
// the fence is always there. With all of them, the ceiling measures what
// those guarantees cost by themselves, apart from the rest of edgepipe's
// schema (its ids, columns, indexes and queue messages); TextIDs adds the
// ids.
type Guarantees struct {
	// Events appends a status event per job at claim and at completion,
	// in the same transaction, one multi-row insert per batch.
	Events bool
	// Wall adds the terminal wall: the transition trigger on jobs.
	Wall bool
	// TextIDs is not a guarantee but the first thing edgepipe's schema
	// adds to them: jobs keyed by text (ids shaped as the burn-down's,
	// "v1-000000001"), so the table is a rowid table with a unique index
	// on the key, as edgepipe's jobs are, and the events reference the key.
	TextIDs bool
}

// eventInsert appends the status events of a batch: ?1 the time, ?2 the
// batch's leases as JSON, ?3 the owner.
const eventInsert = `INSERT INTO job_events (job_id, at, from_status, to_status, attempt, detail_json)
	SELECT d.value ->> 'i', ?1, '%s', '%s', d.value ->> 'a', json_object('attempt', d.value ->> 'a', 'owner', ?3)
	FROM json_each(?2) AS d`

// Queue is the minimal queue: one writer connection, statements prepared once.
type Queue struct {
	db     *sql.DB
	insert *sql.Stmt
	// created appends a job's created event (Guarantees.Events), as
	// edgepipe's submissions do: the burn-down's events then go into a
	// table and index that already hold a row per job.
	created     *sql.Stmt
	claim, done *sql.Stmt
	// With Guarantees.Events: doneReturning is done returning the leases
	// it finished, and claimed and finished append the events of a batch.
	doneReturning, claimed, finished *sql.Stmt
	// textIDs is Guarantees.TextIDs; keys counts the keys handed out.
	textIDs bool
	keys    int
}

// withTextIDs rewrites statement or schema text for Guarantees.TextIDs:
// text keys, read from the leases' "k".
func withTextIDs(s string) string {
	return strings.NewReplacer(
		"id               INTEGER PRIMARY KEY", "id               TEXT PRIMARY KEY",
		"job_id      INTEGER NOT NULL", "job_id      TEXT NOT NULL",
		"->> 'i'", "->> 'k'",
	).Replace(s)
}

// Lease is what a worker holds: the fence its completion must match.
type Lease struct {
	ID      int64  `json:"i,omitempty"`
	Key     string `json:"k,omitempty"` // the id with Guarantees.TextIDs
	Attempt int64  `json:"a"`
}

// Open creates the queue in a new database file at path.
func Open(ctx context.Context, path string) (*Queue, error) {
	return OpenWith(ctx, path, Guarantees{})
}

// OpenWith is Open with guarantees g added to the ceiling.
func OpenWith(ctx context.Context, path string, g Guarantees) (*Queue, error) {
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
	ddl := schema
	if g.Wall {
		ddl += "\n" + wallSchema
	}
	if g.Events {
		ddl += "\n" + eventsSchema
	}
	insert := `INSERT INTO jobs (status, updated_at) VALUES ('pending', ?)`
	text := func(s string) string { return s }
	if g.TextIDs {
		text = withTextIDs
		insert = `INSERT INTO jobs (id, status, updated_at) VALUES (?, 'pending', ?)`
	}
	ddl = text(ddl)
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		db.Close()
		return nil, fmt.Errorf("ceiling: schema: %w", err)
	}
	qu := &Queue{db: db, textIDs: g.TextIDs}
	type stmt struct {
		st  **sql.Stmt
		sql string
	}
	stmts := []stmt{
		{&qu.insert, insert},
		// The claim: the oldest pending jobs, a fresh attempt and lease each.
		{&qu.claim, `UPDATE jobs SET status = 'running', attempt = attempt + 1, lease_owner = ?1,
			lease_expires_at = ?2, updated_at = ?3
			WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT ?4)
			RETURNING id, attempt`},
		{&qu.done, text(doneSQL)},
	}
	if g.Events {
		stmts = append(stmts,
			stmt{&qu.created, `INSERT INTO job_events (job_id, at, from_status, to_status, attempt, detail_json)
				VALUES (?, ?, '', 'pending', 0, '{}')`},
			stmt{&qu.claimed, text(fmt.Sprintf(eventInsert, "pending", "running"))},
			stmt{&qu.finished, text(fmt.Sprintf(eventInsert, "running", "succeeded"))},
			stmt{&qu.doneReturning, text(doneSQL) + ` RETURNING jobs.id, jobs.attempt`})
	}
	for _, p := range stmts {
		if *p.st, err = db.PrepareContext(ctx, p.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("ceiling: prepare: %w", err)
		}
	}
	return qu, nil
}

// Close closes the database.
func (q *Queue) Close() error { return q.db.Close() }

// Insert adds n pending jobs, in committed batches of 1,000, each with its
// created event under Guarantees.Events. Not safe for concurrent use: the
// text keys (Guarantees.TextIDs) are counted on the Queue.
func (q *Queue) Insert(ctx context.Context, n int, now int64) error {
	for n > 0 {
		b := min(n, 1000)
		err := q.inTx(ctx, func(tx *sql.Tx) error {
			st := tx.StmtContext(ctx, q.insert)
			var ev *sql.Stmt
			if q.created != nil {
				ev = tx.StmtContext(ctx, q.created)
			}
			for range b {
				var id any
				args := []any{now}
				if q.textIDs {
					q.keys++
					id = fmt.Sprintf("v1-%09d", q.keys)
					args = []any{id, now}
				}
				res, err := st.ExecContext(ctx, args...)
				if err != nil {
					return err
				}
				if ev == nil {
					continue
				}
				if !q.textIDs {
					if id, err = res.LastInsertId(); err != nil {
						return err
					}
				}
				if _, err := ev.ExecContext(ctx, id, now); err != nil {
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
		var err error
		if out, err = q.leases(ctx, tx, q.claim, owner, leaseExp, now, max); err != nil {
			return err
		}
		return q.appendEvents(ctx, tx, q.claimed, now, owner, out)
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
		if q.doneReturning != nil {
			fin, err := q.doneWithEvents(ctx, tx, owner, string(arg), now)
			n = int64(fin)
			return err
		}
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

// doneWithEvents is Done's statement with Guarantees.Events: the leases it
// finished come back, and their events are appended in the same
// transaction.
func (q *Queue) doneWithEvents(ctx context.Context, tx *sql.Tx, owner, arg string, now int64) (int, error) {
	fin, err := q.leases(ctx, tx, q.doneReturning, now, arg, owner)
	if err != nil {
		return 0, err
	}
	return len(fin), q.appendEvents(ctx, tx, q.finished, now, owner, fin)
}

// appendEvents appends one status event per lease with st, in one
// statement; without Guarantees.Events (st nil) it does nothing.
func (q *Queue) appendEvents(ctx context.Context, tx *sql.Tx, st *sql.Stmt, now int64, owner string, ls []Lease) error {
	if st == nil || len(ls) == 0 {
		return nil
	}
	arg, err := json.Marshal(ls)
	if err != nil {
		return err
	}
	_, err = tx.StmtContext(ctx, st).ExecContext(ctx, now, string(arg), owner)
	return err
}

// leases runs st, a statement returning (id, attempt), in tx and reads
// what it returned.
func (q *Queue) leases(ctx context.Context, tx *sql.Tx, st *sql.Stmt, args ...any) ([]Lease, error) {
	rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		var l Lease
		id := any(&l.ID)
		if q.textIDs {
			id = &l.Key
		}
		if err := rows.Scan(id, &l.Attempt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
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

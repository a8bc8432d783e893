package sqlite

import (
	"context"
	"database/sql"
	"slices"
	"sync"
)

// stmtCache keeps write statements prepared on the writer pool. go-sqlite3
// does not cache prepared statements, and preparing costs more than running
// most of ours, so reuse is where much of the burn-down throughput comes
// from. A statement can only be prepared on the pool while no transaction
// holds its single connection, so one first seen inside a transaction is
// prepared on that transaction for this use and on the pool right after.
type stmtCache struct {
	mu      sync.Mutex
	db      *sql.DB
	stmts   map[string]*sql.Stmt
	pending map[string]bool
	// seen records every statement text ever asked for, so a test can check
	// the plan of each one (TestWriteQueryPlansUseIndexes).
	seen map[string]bool
}

func (c *stmtCache) seenQueries() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.seen))
	for q := range c.seen {
		out = append(out, q)
	}
	return out
}

func (c *stmtCache) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stmts[q]
	if st == nil {
		if c.seen == nil {
			c.seen = map[string]bool{}
		}
		c.seen[q] = true
		if c.pending == nil {
			c.pending = map[string]bool{}
		}
		c.pending[q] = true
	}
	return st
}

// preparePending prepares, on the pool, the statements that transactions
// asked for but did not find. Errors are left for the next use to report.
func (c *stmtCache) preparePending(ctx context.Context) {
	c.mu.Lock()
	var qs []string
	for q := range c.pending {
		qs = append(qs, q)
	}
	c.pending = nil
	c.mu.Unlock()
	for _, q := range qs {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.stmts == nil {
			c.stmts = map[string]*sql.Stmt{}
		}
		if c.stmts[q] == nil {
			c.stmts[q] = st
			st = nil
		}
		c.mu.Unlock()
		if st != nil {
			st.Close()
		}
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		st.Close()
	}
	c.stmts = nil
}

// wtx is a write transaction whose statements come from the cache. It has
// the method set of *sql.Tx that the store uses, so queries read the same.
type wtx struct {
	tx    *sql.Tx
	cache *stmtCache
	// visible names the queues this transaction made a message visible
	// on now: announced to the store's listeners once it commits.
	visible []string
}

// madeVisible records that queue has a message visible now, to be
// announced on commit (Store.Listen).
func (t *wtx) madeVisible(queue string) {
	if queue != "" && !slices.Contains(t.visible, queue) {
		t.visible = append(t.visible, queue)
	}
}

func (t *wtx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := t.cache.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st), nil
	}
	return t.tx.PrepareContext(ctx, q)
}

func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t *wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// errRow lets QueryRowContext report a prepare error through Scan, like
// *sql.Row does.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) rowScanner {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

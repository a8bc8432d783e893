package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"edgepipe/pipeline"
)

// WAL checkpoints off the commit path.
//
// By default SQLite checkpoints inside the commit that takes the WAL past
// 1,000 pages (wal_autocheckpoint): that commit copies the WAL into the
// database file and syncs both while the one writer connection, and every
// submission queued behind it, waits. The store's writer connection turns
// that off (writerDriver) and a checkpointer runs them on a connection of
// its own, as litestream does: a PASSIVE checkpoint every interval in
// which something was committed — it copies what no reader still needs and
// never blocks the writer or a reader. The WAL starts over when a write
// begins after a checkpoint copied all of it; under a steady stream of
// commits that moment may never come (each checkpoint copies what was there
// when it began, and the writer has added more since), so once the WAL is
// CheckpointRestartPages long and a PASSIVE checkpoint copied every frame,
// a RESTART checkpoint takes the write lock, copies the last frames and
// waits for the readers to leave the WAL, so the next write starts it
// over. It waits at most ckptBusyTimeout for either — writers wait
// meanwhile, they do not fail —, and it is not tried while a reader still
// needs frames PASSIVE could not copy: it would hold the write lock for
// that reader and then fail. A process that stops leaves the rest to the
// next one: SQLite checkpoints when the last connection to the file closes.

// writerDriver is mattn/go-sqlite3 with writerPragmas run on every
// connection it opens: the store's writer pool (one connection, reopened
// with the same settings if database/sql ever replaces it).
const writerDriver = "sqlite3_edgepipe_writer"

// writerPragmas are the writer connection's own settings:
//
//   - wal_autocheckpoint = 0: commits never checkpoint (see above).
//   - temp_store = MEMORY: statement journals stay in memory. A statement
//     that writes many rows inside a transaction and may abort half way
//     (every multi-row insert, claim and settle here: CHECK, NOT NULL and
//     trigger RAISEs) first copies each page it changes into a statement
//     journal, so that the abort can undo it alone. SQLite keeps that
//     journal in memory only up to 64 KiB and then spills it to a
//     temporary file, written a page at a time — two pwrite calls a page,
//     never read back when the statement succeeds. A group commit spilled:
//     bench api made 7.2 pwrite calls a submission, half of them to that
//     file, 3.7 with this. The journal of one statement is at most the
//     pages the statement changes; migrations, whose one statement may
//     rewrite a table, run with FILE (migrate). The reader connections
//     keep SQLite's default.
var writerPragmas = []string{
	"PRAGMA wal_autocheckpoint = 0",
	journalsInMemory,
}

// journalsInMemory is writerPragmas' temp_store setting; migrate sets FILE
// for the migrations and this again after them.
const journalsInMemory = "PRAGMA temp_store = MEMORY"

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		for _, p := range writerPragmas {
			if _, err := c.Exec(p, nil); err != nil {
				return err
			}
		}
		return nil
	}})
}

// ckptBusyTimeout is the checkpointer connection's busy timeout: the
// longest a RESTART checkpoint waits for the writer lock, and then, holding
// it, for the readers — every commit waits meanwhile.
const ckptBusyTimeout = 100 * time.Millisecond

// checkpointer runs the store's WAL checkpoints (see above).
type checkpointer struct {
	db           *sql.DB // a read-write pool of one connection, its own
	every        time.Duration
	restartPages int
	store        *Store
	svc          pipeline.Service
	wrote        atomic.Bool  // a commit since the last checkpoint
	runs         atomic.Int64 // PASSIVE checkpoints run
	restartTries atomic.Int64 // RESTART checkpoints begun
	restarts     atomic.Int64 // and completed
}

// committed tells the checkpointer the WAL has grown (the writer calls it
// after every commit: one atomic store).
func (c *checkpointer) committed() { c.wrote.Store(true) }

func (c *checkpointer) run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.wrote.Swap(false) {
			c.checkpoint(ctx)
		}
	}
}

// checkpoint runs one PASSIVE checkpoint and, when the WAL is longer than
// restartPages, a RESTART one. A failure is logged and left to the next
// interval: the WAL keeps every commit until a checkpoint succeeds, so
// nothing is lost meanwhile.
func (c *checkpointer) checkpoint(ctx context.Context) {
	var busy, pages, copied int
	if err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &pages, &copied); err != nil {
		if ctx.Err() == nil {
			c.store.log.Warn("sqlite: WAL checkpoint failed; retrying at the next interval", "err", err)
			c.wrote.Store(true)
		}
		return
	}
	c.runs.Add(1)
	// A reader still needs frames PASSIVE could not copy: RESTART would
	// hold the write lock waiting for it and then fail.
	if pages < c.restartPages || copied < pages {
		return
	}
	c.restartTries.Add(1)
	if err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &pages, &copied); err != nil {
		if ctx.Err() == nil {
			c.store.log.Warn("sqlite: WAL restart checkpoint failed; retrying at the next interval", "err", err, "wal_pages", pages)
			c.wrote.Store(true)
		}
		return
	}
	if busy == 0 { // 1: a writer or a reader outlasted ckptBusyTimeout; the next commit brings it back
		c.restarts.Add(1)
	}
}

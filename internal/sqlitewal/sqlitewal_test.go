package sqlitewal

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// open opens path with the settings storage/sqlite's writer uses, through
// vfs ("" for SQLite's default VFS), on one connection.
func open(t testing.TB, path, vfs string, extra ...string) *sql.DB {
	t.Helper()
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_txlock", "immediate")
	if vfs != "" {
		q.Set("vfs", vfs)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, s := range extra {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func exec1(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// check opens path through the default VFS, as another process would,
// and returns the row count and sum of t after an integrity check.
func check(t *testing.T, path string) (n, sum int64) {
	t.Helper()
	db := open(t, path, "")
	var ok string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(v), 0) FROM t`).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	return n, sum
}

// packed is how many writes carry sizes, in order, when consecutive
// writes are joined up to the default VFS's largest write.
func packed(sizes []int64) int64 {
	var n, cur int64
	for _, s := range sizes {
		if cur > 0 && cur+s > 0x1ffff {
			n, cur = n+1, 0
		}
		cur += s
	}
	if cur > 0 {
		n++
	}
	return n
}

// TestCommitIsOneWrite commits transactions of 1 to 150 rows (1 to about
// 40 frames), so that commit frames fall on both sides of the 128 KiB a
// write can carry. It is not parallel: Counts are the process's.
func TestCommitIsOneWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	db := open(t, path, Name)
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	reader := open(t, path, "") // another connection, the default VFS
	total := 0
	for rows := 1; rows <= 150; rows++ {
		asked0, written0 := Counts()
		mustTx(t, db, func(tx *sql.Tx) error {
			for i := range rows {
				if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("x", 900)); err != nil {
					return err
				}
			}
			return nil
		}, true)
		total += rows
		asked, written := Counts()
		asked, written = asked-asked0, written-written0
		// SQLite asks for a 24-byte header and a 4,096-byte page a frame;
		// the file gets them joined. After a checkpoint reset the WAL
		// (auto-checkpoint), its 32-byte header comes first, alone: SQLite
		// syncs it before any frame.
		var sizes []int64
		for range asked / 2 {
			sizes = append(sizes, 24, 4096)
		}
		want := packed(sizes) + asked%2
		if asked < 2 || written != want {
			t.Errorf("%d rows: SQLite asked for %d writes, the file got %d, want %d", rows, asked, written, want)
		}
		// What the commit wrote is there for another connection at once.
		var n int
		if err := reader.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != total {
			t.Fatalf("%d rows: the reader sees %d rows of %d (%v)", rows, n, total, err)
		}
	}
	if n, _ := check(t, path); n != int64(total) {
		t.Fatalf("%d rows, want %d", n, total)
	}
}

// TestReadersDuringCommits reads, from other connections of the default
// VFS, while the writer commits transactions of every size: a commit is
// visible to readers (the wal-index header) before the writer gives up its
// write lock, so its frames must be in the file by then.
func TestReadersDuringCommits(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.db")
	w := open(t, path, Name, `PRAGMA wal_autocheckpoint = 0`)
	exec1(t, w, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		r := open(t, path, "")
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				// Every committed transaction i has i rows of value i.
				var bad int
				if err := r.QueryRow(`SELECT count(*) FROM (SELECT v, count(*) AS c FROM t GROUP BY v HAVING c <> v)`).Scan(&bad); err != nil || bad != 0 {
					errs <- fmt.Errorf("reader: %d partial transactions, %v", bad, err)
					return
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		mustTx(t, w, func(tx *sql.Tx) error {
			for range i % 60 {
				if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i%60, strings.Repeat("w", 1200)); err != nil {
					return err
				}
			}
			return nil
		}, true)
		exec1(t, w, `DELETE FROM t WHERE v = ?`, i%60) // the next round of i%60 starts again
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRollbackLeavesNothingBehind: a transaction larger than the page
// cache writes frames before its commit, then rolls back. Another writer
// (the default VFS, as another process would) then commits frames at the
// same offsets of the WAL. Nothing the first connection kept may reach the
// file after that: the write lock's release empties the buffer.
func TestRollbackLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.db")
	a := open(t, path, Name, `PRAGMA cache_size = 8`)
	exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	b := open(t, path, "")
	for round := range 5 {
		// An empty WAL, so that the rollback reads nothing back from it,
		// and one statement whose overflow pages spill past the cache.
		exec1(t, a, `PRAGMA wal_checkpoint(TRUNCATE)`)
		mustTx(t, a, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, -1, strings.Repeat("r", 90_000+round*7_000))
			return err
		}, false)
		for i := range 40 {
			exec1(t, b, `INSERT INTO t (v, pad) VALUES (?, ?)`, round*100+i, strings.Repeat("b", 1500))
		}
		exec1(t, a, `INSERT INTO t (v, pad) VALUES (?, ?)`, round*100+99, "a")
	}
	n, sum := check(t, path)
	var want int64
	for round := range 5 {
		for i := range 40 {
			want += int64(round*100 + i)
		}
		want += int64(round*100 + 99)
	}
	if n != 5*41 || sum != want {
		t.Fatalf("%d rows, sum %d; want %d, sum %d", n, sum, 5*41, want)
	}
}

// TestSpillAndOverwrite runs transactions larger than the page cache, so
// SQLite writes frames before the commit, reads them back and overwrites
// some in place (writes that are not the next byte), and a WAL reset after
// a checkpoint; the result must be the same database as without the VFS.
func TestSpillAndOverwrite(t *testing.T) {
	t.Parallel()
	for _, vfs := range []string{"", Name} {
		t.Run("vfs="+vfs, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "b.db")
			db := open(t, path, vfs, `PRAGMA cache_size = 8`)
			exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
			for round := range 3 {
				mustTx(t, db, func(tx *sql.Tx) error {
					for i := range 2000 {
						if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("y", 300+i%500)); err != nil {
							return err
						}
					}
					// Rewrite pages already spilled to the WAL in this transaction.
					_, err := tx.Exec(`UPDATE t SET v = v + 1, pad = substr(pad, 1, 200) WHERE id % 3 = ?`, round)
					return err
				}, true)
				exec1(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)
			}
			exec1(t, db, `DELETE FROM t WHERE id % 7 = 0`)
			n, sum := check(t, path)
			var wn, wsum int64
			if err := db.QueryRow(`SELECT count(*), sum(v) FROM t`).Scan(&wn, &wsum); err != nil {
				t.Fatal(err)
			}
			if n != wn || sum != wsum || n == 0 {
				t.Fatalf("another connection reads %d rows (sum %d), the writer %d (sum %d)", n, sum, wn, wsum)
			}
		})
	}
}

// childEnv makes the test binary a child process (TestChild): mode:path.
const childEnv = "EDGEPIPE_SQLITEWAL_TEST_CHILD"

// runChild starts the test binary as TestChild in mode, reads the
// commit numbers it prints, and kills it after stopAt (or lets it finish).
func runChild(t *testing.T, mode, path string, stopAt int) (last int, sawErr bool) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChild$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode+":"+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	last = -1
	for sc.Scan() {
		if sc.Text() == "ERR" {
			sawErr = true
			break
		}
		if i, err := strconv.Atoi(sc.Text()); err == nil {
			last = i
		}
		if stopAt >= 0 && last >= stopAt {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return last, sawErr
}

// TestKilledRightAfterCommit kills (SIGKILL, the child's own pid) a
// process that commits in a loop and prints each commit's number once
// COMMIT returned: every printed commit must be in the database after. In
// locking_mode=EXCLUSIVE (a heap-memory wal-index: no xShmBarrier, no
// xShmLock) only the commit-frame flush puts the commit in the file.
func TestKilledRightAfterCommit(t *testing.T) {
	t.Parallel()
	for run := range 6 {
		mode := []string{"normal", "excl"}[run%2]
		path := filepath.Join(t.TempDir(), "k.db")
		stopAt := 20 + 30*run
		last, _ := runChild(t, mode, path, stopAt)
		if last < stopAt {
			t.Fatalf("child stopped at %d", last)
		}
		if n, _ := check(t, path); n < int64(6*(last+1)) {
			t.Fatalf("run %d (%s): commit %d reported, %d rows of %d", run, mode, last, n, 6*(last+1))
		}
	}
}

// TestWriteErrorFailsCommit: a write that fails (the child's RLIMIT_FSIZE)
// fails the COMMIT; every COMMIT that returned nil is in the database.
func TestWriteErrorFailsCommit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f.db")
	last, sawErr := runChild(t, "fsize", path, -1)
	if !sawErr {
		t.Fatalf("the child saw no write error (last %d)", last)
	}
	if n, _ := check(t, path); n < int64(6*(last+1)) {
		t.Fatalf("commit %d reported, %d rows of %d", last, n, 6*(last+1))
	}
}

// TestWALHeaderAlone: the first transaction of a new WAL syncs its header
// before any frame (wal.c, ticket ff5be73dee), so it reaches the file
// alone, and the frames after it in one write. Not parallel: Counts are
// the process's.
func TestWALHeaderAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	db := open(t, path, Name)
	exec1(t, db, `PRAGMA user_version = 1`)
	exec1(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`) // a fresh WAL
	a0, w0 := Counts()
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	a, w := Counts()
	// header (32) alone + frames joined
	if a-a0 < 3 || w-w0 != 2 {
		t.Fatalf("asked %d, written %d; want the header alone then the frames", a-a0, w-w0)
	}
}

// TestChild is the child process of TestKilledRightAfterCommit and
// TestWriteErrorFailsCommit.
func TestChild(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("the child process of TestKilledRightAfterCommit and TestWriteErrorFailsCommit")
	}
	mode, path, _ := strings.Cut(env, ":")
	var extra []string
	if mode == "excl" {
		extra = append(extra, `PRAGMA locking_mode = EXCLUSIVE`)
	}
	extra = append(extra, `PRAGMA wal_autocheckpoint = 0`)
	db := open(t, path, Name, extra...)
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	if mode == "fsize" {
		signal.Ignore(syscall.SIGXFSZ)
		lim := syscall.Rlimit{Cur: 300_000, Max: 300_000}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for i := 0; i < 100000; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			fmt.Println("ERR")
			return
		}
		for k := range 6 {
			if _, err := tx.Exec(`INSERT INTO t (id, v, pad) VALUES (?, ?, ?)`, i*6+k, i, strings.Repeat("z", 1000)); err != nil {
				fmt.Println("ERR")
				return
			}
		}
		if err := tx.Commit(); err != nil {
			fmt.Fprintln(os.Stderr, "commit:", err)
			fmt.Println("ERR")
			return
		}
		fmt.Println(i)
	}
}

// mustTx runs f in a transaction of db, then commits it or rolls it back.
func mustTx(t *testing.T, db *sql.DB, f func(tx *sql.Tx) error, commit bool) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeavingExclusiveModeLeavesNothingBehind: in locking_mode=EXCLUSIVE
// the WAL locks are not taken through xShmLock, so leaving the mode (the
// database file's xUnlock, at the end of a rolled-back transaction that
// spilled frames) must empty the buffer as the write lock's release does.
// Found by review: without the flush in dbUnlock, the stale frames were
// written over another connection's commits.
func TestLeavingExclusiveModeLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	for _, vfs := range []string{"", Name} {
		t.Run("vfs="+vfs, func(t *testing.T) { exclusiveExit(t, vfs) })
	}
}

func exclusiveExit(t *testing.T, vfs string) {
	path := filepath.Join(t.TempDir(), "x.db")
	a := open(t, path, vfs, `PRAGMA cache_size = 8`)
	exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	exec1(t, a, `PRAGMA locking_mode = EXCLUSIVE`)
	exec1(t, a, `INSERT INTO t (v, pad) VALUES (0, 'a')`) // enters exclusive mode
	exec1(t, a, `PRAGMA wal_checkpoint(TRUNCATE)`)
	exec1(t, a, `PRAGMA locking_mode = NORMAL`)
	mustTx(t, a, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, -1, strings.Repeat("r", 90_000))
		return err
	}, false) // rollback: leaves exclusive mode, releases the db lock
	b := open(t, path, "")
	for i := range 40 {
		exec1(t, b, `INSERT INTO t (v, pad) VALUES (?, ?)`, i+1, strings.Repeat("b", 1500))
	}
	var n int
	if err := a.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Logf("a's read: %v", err)
	}
	a.Close()
	if n, sum := check(t, path); n != 41 || sum != 820 {
		t.Fatalf("%d rows sum %d, want 41 / 820", n, sum)
	}
}

// TestExclusiveMode: locking_mode=EXCLUSIVE from the start (a heap-memory
// wal-index: no xShmBarrier, no xShmLock at all), with spills, rollbacks
// and a reopen.
func TestExclusiveMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "e.db")
	a := open(t, path, Name, `PRAGMA locking_mode = EXCLUSIVE`, `PRAGMA cache_size = 8`)
	exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	want := 0
	for r := range 6 {
		mustTx(t, a, func(tx *sql.Tx) error {
			for i := range 200 {
				if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (1, ?)`, strings.Repeat("e", 500+i)); err != nil {
					return err
				}
			}
			return nil
		}, r%2 == 0)
		if r%2 == 0 {
			want += 200
		}
	}
	a.Close()
	if n, _ := check(t, path); n != int64(want) {
		t.Fatalf("%d rows, want %d", n, want)
	}
}

// TestSavepointRollbackAfterSpill: a savepoint rolled back after spills,
// then more frames and the commit, read by another connection each round.
func TestSavepointRollbackAfterSpill(t *testing.T) {
	t.Parallel()
	for _, vfs := range []string{"", Name} {
		path := filepath.Join(t.TempDir(), "s.db")
		a := open(t, path, vfs, `PRAGMA cache_size = 8`)
		exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
		r := open(t, path, "")
		for round := range 4 {
			mustTx(t, a, func(tx *sql.Tx) error {
				for i := range 100 {
					if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (1, ?)`, strings.Repeat("s", 700+i)); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(`SAVEPOINT sp`); err != nil {
					return err
				}
				for i := range 150 {
					if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (1000, ?)`, strings.Repeat("u", 900+i)); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(`UPDATE t SET pad = substr(pad,1,10) WHERE id % 5 = ?`, round); err != nil {
					return err
				}
				if _, err := tx.Exec(`ROLLBACK TO sp`); err != nil {
					return err
				}
				for i := range 30 {
					if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (1, ?)`, strings.Repeat("k", 300+i)); err != nil {
						return err
					}
				}
				return nil
			}, true)
			var n int
			if err := r.QueryRow(`SELECT count(*) FROM t WHERE v = 1`).Scan(&n); err != nil || n != 130*(round+1) {
				t.Fatalf("vfs %q round %d: reader %d (%v)", vfs, round, n, err)
			}
		}
		if n, _ := check(t, path); n != 4*130 {
			t.Fatalf("vfs %q: %d rows", vfs, n)
		}
	}
}

// TestCheckpointsAndReadersDuringWrites: a checkpointer connection runs
// PASSIVE, RESTART and TRUNCATE checkpoints between (and, blocked on the
// write lock, during) the writer's large transactions and rollbacks;
// readers check every committed transaction is whole; journal_size_limit
// is set and the writer's connection is reopened now and then.
func TestCheckpointsAndReadersDuringWrites(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	w := open(t, path, Name, `PRAGMA wal_autocheckpoint = 0`, `PRAGMA cache_size = 20`, `PRAGMA journal_size_limit = 65536`)
	exec1(t, w, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	ck := open(t, path, "")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var db *sql.DB
			if k == 0 {
				db = ck
			} else {
				db = open(t, path, "")
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if k == 0 {
					mode := []string{"PASSIVE", "RESTART", "TRUNCATE"}[i%3]
					if _, err := db.Exec(`PRAGMA wal_checkpoint(` + mode + `)`); err != nil {
						errs <- fmt.Errorf("checkpoint: %v", err)
						return
					}
					continue
				}
				var bad int
				if err := db.QueryRow(`SELECT count(*) FROM (SELECT v, count(*) AS c FROM t GROUP BY v HAVING c <> v % 97 + 1)`).Scan(&bad); err != nil || bad != 0 {
					errs <- fmt.Errorf("reader: %d partial, %v", bad, err)
					return
				}
			}
		}()
	}
	for i := 1; i <= 150; i++ {
		mustTx(t, w, func(tx *sql.Tx) error {
			for range i%97 + 1 {
				if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("c", 1500)); err != nil {
					return err
				}
			}
			return nil
		}, i%7 != 3)
		if i%11 == 0 { // close and reopen the writer's pool connection
			w.SetMaxIdleConns(0)
			w.SetMaxIdleConns(1)
			exec1(t, w, `PRAGMA wal_autocheckpoint = 0`)
			exec1(t, w, `PRAGMA cache_size = 20`)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := 0
	for i := 1; i <= 150; i++ {
		if i%7 != 3 {
			want += i%97 + 1
		}
	}
	if n, _ := check(t, path); n != int64(want) {
		t.Fatalf("%d rows, want %d", n, want)
	}
}

// TestFullSyncPadding: synchronous=FULL with psow=0, where SQLite pads a
// commit to a sector boundary and splits the padding frame's write around
// a sync; the rest after the sync goes through at once.
func TestFullSyncPadding(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.db")
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL&_txlock=immediate&psow=0&vfs="+Name)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	for i := range 30 {
		exec1(t, db, `INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("f", 100*i))
	}
	if n, _ := check(t, path); n != 30 {
		t.Fatalf("%d rows", n)
	}
}

// openFull opens path with synchronous=FULL and psow=0 (SQLite then pads
// each commit to a sector and syncs part way through the padding) and the
// given page size, through vfs.
func openFull(t *testing.T, path, vfs string, pageSize int, extra ...string) *sql.DB {
	t.Helper()
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	dsn := "file:" + path + "?_synchronous=FULL&_txlock=immediate&psow=0"
	if vfs != "" {
		dsn += "&vfs=" + vfs
	}
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, q := range append([]string{`PRAGMA page_size = ` + strconv.Itoa(pageSize), `PRAGMA journal_mode = WAL`, `PRAGMA wal_autocheckpoint = 0`}, extra...) {
		exec1(t, db, q)
	}
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	return db
}

// TestSyncSplitTailIsNotKept: with synchronous=FULL, psow=0 and pages
// smaller than the 4 KiB sector, the last padding frame's write is split
// at the sync point, and the part after the sync can be exactly 24 bytes
// long. Found by review: it was kept as if it were a frame header, and in
// locking_mode=EXCLUSIVE it stayed in the buffer after COMMIT returned.
// After every COMMIT the WAL must hold whole frames.
func TestSyncSplitTailIsNotKept(t *testing.T) {
	t.Parallel()
	for _, ps := range []int{512, 1024, 2048} {
		t.Run(strconv.Itoa(ps), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "t.db")
			db := openFull(t, path, Name, ps, `PRAGMA locking_mode = EXCLUSIVE`)
			for i := range 300 {
				exec1(t, db, `INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("f", i%50))
				st, err := os.Stat(path + "-wal")
				if err != nil {
					t.Fatal(err)
				}
				if (st.Size()-32)%int64(ps+24) != 0 {
					t.Fatalf("commit %d: the WAL is %d bytes after COMMIT returned, not whole frames of %d", i, st.Size(), ps+24)
				}
			}
		})
	}
}

// TestSyncSplitTailErrorFailsCommit: the same split, with the process's
// file size limit right at a 24-byte tail (found by review at 491,520
// bytes for 1 KiB pages): the write of the tail fails, and so must the
// COMMIT that wrote it, the same COMMIT as through the default VFS. Not parallel: the
// limit is the process's.
func TestSyncSplitTailErrorFailsCommit(t *testing.T) {
	lastDefault := -1
	for _, vfs := range []string{"", Name} {
		path := filepath.Join(t.TempDir(), "t.db")
		db := openFull(t, path, vfs, 1024)
		signal.Ignore(syscall.SIGXFSZ)
		var old syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 491520, Max: old.Max}); err != nil {
			t.Fatal(err)
		}
		last, failed := -1, false
		for i := range 200 {
			if _, err := db.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("f", i%50)); err != nil {
				failed = true
				break
			}
			last = i
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if !failed {
			t.Fatalf("vfs %q: no COMMIT failed under the file size limit", vfs)
		}
		if n, _ := check(t, path); n != int64(last+1) {
			t.Errorf("vfs %q: COMMIT %d was the last to succeed, the database has %d rows", vfs, last, n)
		}
		if vfs == "" {
			if last < 0 {
				t.Fatalf("the limit fails the first COMMIT already")
			}
			lastDefault = last
		} else if last != lastDefault {
			t.Errorf("the last COMMIT to succeed is %d through the VFS, %d through the default one", last, lastDefault)
		}
	}
}

// TestRewrittenHeadersOnDiskAtCommit: in locking_mode=EXCLUSIVE, a
// transaction spills, overwrites frames it spilled (walRewriteChecksums
// then rewrites their headers, the commit frame's last) and commits; a copy
// of the files taken right after COMMIT returned (what a crash leaves)
// must hold the commit. Found by review to be what keeps the rule that a
// header rewritten right after a read goes through at once.
func TestRewrittenHeadersOnDiskAtCommit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "w.db")
	a := open(t, path, Name, `PRAGMA locking_mode = EXCLUSIVE`, `PRAGMA cache_size = 8`, `PRAGMA wal_autocheckpoint = 0`)
	exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	for round := range 3 {
		mustTx(t, a, func(tx *sql.Tx) error {
			for i := range 300 {
				if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (1, ?)`, strings.Repeat("q", 300+i)); err != nil {
					return err
				}
			}
			_, err := tx.Exec(`UPDATE t SET v = v + 1 WHERE id % 4 = ?`, round)
			return err
		}, true)
		snap := filepath.Join(t.TempDir(), "snap.db")
		copyFile(t, path, snap)
		copyFile(t, path+"-wal", snap+"-wal")
		if n, _ := check(t, snap); n != int64(300*(round+1)) {
			t.Fatalf("round %d: the copy has %d rows, want %d", round, n, 300*(round+1))
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRollbackWithOpenReadStatement: a ROLLBACK while a read statement of
// the same connection is still open gives up the WAL write lock but not the
// database file's lock, so only the write lock's release can empty the
// buffer before another connection commits over the offsets of the
// rolled-back frames. (Found by review: with the file lock released too,
// TestRollbackLeavesNothingBehind is covered by either flush.)
func TestRollbackWithOpenReadStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	a := open(t, path, Name, `PRAGMA cache_size = 8`)
	exec1(t, a, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	exec1(t, a, `CREATE TABLE r (x)`)
	exec1(t, a, `INSERT INTO r VALUES (1), (2), (3)`)
	exec1(t, a, `PRAGMA wal_checkpoint(TRUNCATE)`)
	conn, err := a.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, `SELECT x FROM r`)
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	for _, q := range []string{`BEGIN IMMEDIATE`, `INSERT INTO t (v, pad) VALUES (-1, '` + strings.Repeat("r", 90_000) + `')`, `ROLLBACK`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	b := open(t, path, "")
	for i := range 40 {
		exec1(t, b, `INSERT INTO t (v, pad) VALUES (?, ?)`, i+1, strings.Repeat("b", 1500))
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	a.Close()
	if n, sum := check(t, path); n != 40 || sum != 820 {
		t.Fatalf("%d rows, sum %d; want 40, sum 820", n, sum)
	}
}

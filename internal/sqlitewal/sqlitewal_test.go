package sqlitewal

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("x", 900)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
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
		tx, err := w.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for range i % 60 {
			if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i%60, strings.Repeat("w", 1200)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
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
		tx, err := a.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, -1, strings.Repeat("r", 90_000+round*7_000)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
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
				tx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for i := range 2000 {
					if _, err := tx.Exec(`INSERT INTO t (v, pad) VALUES (?, ?)`, i, strings.Repeat("y", 300+i%500)); err != nil {
						t.Fatal(err)
					}
				}
				// Rewrite pages already spilled to the WAL in this transaction.
				if _, err := tx.Exec(`UPDATE t SET v = v + 1, pad = substr(pad, 1, 200) WHERE id % 3 = ?`, round); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
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

// childEnv makes the test binary the child of TestKilledRightAfterCommit.
const childEnv = "EDGEPIPE_SQLITEWAL_TEST_CHILD"

// TestKilledRightAfterCommit kills (SIGKILL, the child's own pid) a
// process that commits in a loop and prints each commit's number once
// COMMIT returned: every printed commit must be in the database after.
func TestKilledRightAfterCommit(t *testing.T) {
	t.Parallel()
	for run := range 3 {
		path := filepath.Join(t.TempDir(), "c.db")
		cmd := exec.Command(os.Args[0], "-test.run", "^TestChild$")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		last := -1
		stopAt := 50 + 70*run
		for sc.Scan() {
			if i, err := strconv.Atoi(sc.Text()); err == nil {
				last = i
			}
			if last >= stopAt {
				break
			}
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if last < stopAt {
			t.Fatalf("run %d: the child stopped at commit %d", run, last)
		}
		n, _ := check(t, path)
		if want := int64(6 * (last + 1)); n < want {
			t.Fatalf("run %d: commit %d was reported done, the database has %d of its first %d rows", run, last, n, want)
		}
	}
}

// TestChild is the child process of TestKilledRightAfterCommit.
func TestChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("the child of TestKilledRightAfterCommit")
	}
	db := open(t, path, Name)
	exec1(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad TEXT NOT NULL)`)
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		// Each commit writes a few frames (several rows of 1 KiB).
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 6 {
			if _, err := tx.Exec(`INSERT INTO t (id, v, pad) VALUES (?, ?, ?)`, i*6+k, i, strings.Repeat("z", 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		fmt.Println(i)
	}
}

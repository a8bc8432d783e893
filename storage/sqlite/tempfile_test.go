package sqlite

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"syscall"
	"testing"

	"edgepipe/internal/groupcommit"
	"edgepipe/pipeline"
)

// sqliteTempFiles counts the process's open temporary files: regular
// files with no name left (SQLite unlinks a temporary file as it opens it,
// or creates it with O_TMPFILE, which Linux shows as "/var/tmp/#inode
// (deleted)"), so they are only to be seen among the open descriptors.
func sqliteTempFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		fi, err := os.Stat("/proc/self/fd/" + e.Name()) // follows to the open file
		if err != nil || !fi.Mode().IsRegular() {
			continue // closed meanwhile (ReadDir's own descriptor), or a pipe
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
			n++
		}
	}
	return n
}

// randomJobs returns n new jobs with random ids, idempotency keys and
// instance ids, so that a group's rows land all over the indexes of jobs,
// as real submissions do, rather than at their right edges.
func randomJobs(rng *rand.Rand, n int) []pipeline.NewJob {
	out := make([]pipeline.NewJob, n)
	for i := range out {
		out[i] = newJob(fmt.Sprintf("v1-%016x", rng.Uint64())).WithDefaults()
	}
	return out
}

// A group commit's multi-row statements keep their statement journals in
// memory (writerPragmas): while a full group's transaction is open, after
// its inserts, the process has no more temporary files open than before —
// on the connection Open leaves (migrations ran on it with temp_store =
// FILE) and on one database/sql opens later. The control in between, the
// same group with temp_store = FILE, must open one, or the test could not
// see a spill; the new connection must then have dropped that setting.
//
// Not parallel: it counts the whole process's temporary files, and the
// package's parallel tests only start once the sequential ones are done.
func TestGroupCommitOpensNoTemporaryFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/fd")
	}
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	rng := rand.New(rand.NewSource(1))
	// Existing pages for a group's rows to land on: some hundred pages of
	// jobs and of each of its indexes.
	if err := s.CreateJobs(ctx, randomJobs(rng, 4096)); err != nil {
		t.Fatal(err)
	}
	// group runs one full group (createJobsTx in one transaction, as
	// commitGroup does) and returns how many temporary files the process
	// opened meanwhile, counted before the transaction commits (a spilled
	// statement journal stays open until then).
	group := func() int {
		t.Helper()
		before := sqliteTempFiles(t)
		opened := 0
		err := s.inTx(ctx, func(tx *wtx) error {
			out, err := s.createJobsTx(ctx, tx, s.now(), randomJobs(rng, groupcommit.MaxGroup), true)
			if err != nil {
				return err
			}
			for _, c := range out {
				if c.err != nil || !c.created {
					return fmt.Errorf("job not created: %v", c.err)
				}
			}
			opened = sqliteTempFiles(t) - before
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return opened
	}
	if n := group(); n > 0 {
		t.Errorf("connection after Open: a %d-job group opened %d temporary file(s) before its commit", groupcommit.MaxGroup, n)
	}
	if _, err := s.write.ExecContext(ctx, "PRAGMA temp_store = FILE"); err != nil { // the pool's one connection
		t.Fatal(err)
	}
	if n := group(); n == 0 {
		t.Fatal("control: with temp_store = FILE the same group opened no temporary file, so this test cannot see a spill")
	}
	renewWriterConn(s)
	if n := group(); n > 0 {
		t.Errorf("new writer connection: a %d-job group opened %d temporary file(s) before its commit", groupcommit.MaxGroup, n)
	}
}

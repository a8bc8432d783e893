package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// walFrame is one page in the WAL file with its frame header.
const walFrame = 4096 + 24

// fillWAL commits about pages WAL pages of jobs, a few jobs per commit.
func fillWAL(t *testing.T, s *Store, prefix string, pages int) {
	t.Helper()
	input := json.RawMessage(`{"pad":"` + strings.Repeat("x", 16<<10) + `"}`) // ~4 pages a job
	for i := range pages / 4 / 5 {
		batch := make([]pipeline.NewJob, 5)
		for k := range batch {
			batch[k] = newJob(fmt.Sprintf("%s-%04d-%d", prefix, i, k))
			batch[k].Input = input
		}
		if err := s.CreateJobs(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A commit never checkpoints: with the checkpointer idle, the WAL holds
// every page committed — SQLite's default would have copied it into the
// database at 1,000 pages and started the WAL over (the file stays at that
// high-water mark) — and the database file holds none of them.
func TestCommitsDoNotCheckpoint(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(context.Background(), Config{Path: path, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dbBefore := fileSize(t, path)
	fillWAL(t, s, "v1-nock", 3000)
	if frames := fileSize(t, path+"-wal") / walFrame; frames < 2500 {
		t.Errorf("WAL holds %d frames after ~3,000 pages committed: a commit checkpointed", frames)
	}
	if db := fileSize(t, path); db > dbBefore+1<<20 {
		t.Errorf("database file grew from %d to %d bytes without a checkpoint of the store's", dbBefore, db)
	}
	if n := s.ckpt.runs.Load(); n != 0 {
		t.Errorf("checkpointer ran %d times within its hour", n)
	}
}

// renewWriterConn closes the writer pool's idle connection, so that the
// next statement runs on a new one the driver opens (its ConnectHook).
func renewWriterConn(s *Store) {
	s.write.SetMaxIdleConns(0)
	s.write.SetMaxIdleConns(1)
}

// writerInt is the one integer q returns on the writer's connection.
func writerInt(t *testing.T, s *Store, q string) int {
	t.Helper()
	var n int
	if err := s.write.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The writer connection keeps statement journals in memory (see
// writerPragmas): its temp_store is MEMORY (2) once Open has migrated on
// that connection (migrations run with FILE), and also on a connection
// database/sql opens after the first one is gone.
func TestWriterKeepsStatementJournalsInMemory(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for round := range 2 {
		mode, autockpt := writerInt(t, s, "PRAGMA temp_store"), writerInt(t, s, "PRAGMA wal_autocheckpoint")
		if mode != 2 || autockpt != 0 {
			t.Errorf("round %d: writer connection has temp_store = %d, wal_autocheckpoint = %d; want 2 (MEMORY), 0", round, mode, autockpt)
		}
		// Mark this connection (only replacing it clears the mark), then
		// drop it so that the next round's is a new one.
		if _, err := s.write.Exec("PRAGMA temp_store = FILE"); err != nil {
			t.Fatal(err)
		}
		renewWriterConn(s)
	}
}

// Migrations run with temp_store = FILE (a migration's one statement may
// rewrite a whole table; its statement journal belongs on disk), and the
// writer is back to MEMORY after them: a migration after the embedded ones
// records the setting it ran with.
func TestMigrationsJournalOnDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "m.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	probe := migration{Version: len(ms) + 1, Name: "probe",
		SQL: `CREATE TABLE temp_store_probe AS SELECT temp_store AS mode FROM pragma_temp_store()`}
	if err := s.applyMigrations(ctx, append(ms, probe)); err != nil {
		t.Fatal(err)
	}
	during, after := writerInt(t, s, "SELECT mode FROM temp_store_probe"), writerInt(t, s, "PRAGMA temp_store")
	if during != 1 || after != 2 {
		t.Errorf("temp_store = %d during a migration and %d after; want 1 (FILE), 2 (MEMORY)", during, after)
	}
}

// The checkpointer copies what was committed into the database file, and
// past CheckpointRestartPages it also lets the WAL start over.
func TestCheckpointerCheckpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		restartPages int
		wantRestarts bool
	}{
		{"passive", 1 << 30, false},
		{"restart", 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.db")
			s, err := Open(context.Background(), Config{Path: path, CheckpointInterval: 5 * time.Millisecond, CheckpointRestartPages: tc.restartPages})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fillWAL(t, s, "v1-ck", 2000)
			deadline := time.Now().Add(10 * time.Second)
			for fileSize(t, path) < 6<<20 || (tc.wantRestarts && s.ckpt.restarts.Load() == 0) {
				if time.Now().After(deadline) {
					t.Fatalf("after 10 s: database file %d bytes, %d checkpoints, %d restarts",
						fileSize(t, path), s.ckpt.runs.Load(), s.ckpt.restarts.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if !tc.wantRestarts && s.ckpt.restarts.Load() != 0 {
				t.Errorf("%d restart checkpoints below the restart length", s.ckpt.restarts.Load())
			}
			// Every job is still there, read through the read pool.
			var n int
			if err := s.read.QueryRow(`SELECT count(*) FROM jobs`).Scan(&n); err != nil || n != 2000/4/5*5 {
				t.Errorf("jobs after checkpoints: %d (%v), want %d", n, err, 2000/4/5*5)
			}
		})
	}
}

// An idle store does not checkpoint: the checkpointer runs only after a
// commit.
func TestCheckpointerIdleWithoutCommits(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "c.db"), CheckpointInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Wait for the checkpoint of the migrations' commits.
	for deadline := time.Now().Add(5 * time.Second); s.ckpt.wrote.Load() || s.ckpt.runs.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the migrations' commits were never checkpointed")
		}
	}
	before := s.ckpt.runs.Load()
	time.Sleep(50 * time.Millisecond)
	if after := s.ckpt.runs.Load(); after != before {
		t.Errorf("%d checkpoints with nothing committed", after-before)
	}
	mustCreate(t, s, newJob("v1-idle"))
	deadline := time.Now().Add(5 * time.Second)
	for s.ckpt.runs.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after a commit")
		}
		time.Sleep(time.Millisecond)
	}
}

// A reader holding an old snapshot while the WAL is past the restart length
// stalls no commit: the RESTART checkpoint, which would hold the write lock
// waiting for that reader, is not tried while PASSIVE cannot copy every
// frame. (Before, every submission waited out the checkpointer's busy
// timeout, and with the writer's own shorter than that, failed.)
func TestCheckpointerLeavesWritersAloneBehindAReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "c.db"), CheckpointInterval: 5 * time.Millisecond,
		CheckpointRestartPages: 100, BusyTimeout: 1 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The reader's snapshot must need WAL frames no checkpoint copied yet
	// (a reader that begins on a fully copied WAL reads only the database
	// file, and no checkpoint waits for it): the checkpointer pauses while
	// the WAL fills and the reader begins.
	if err := s.ckpt.svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fillWAL(t, s, "v1-a", 400)
	rtx, err := s.read.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback() //nolint:errcheck // a read transaction
	var n int
	if err := rtx.QueryRow(`SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// A commit after the reader began puts frames in the WAL that no
	// checkpoint may copy while the reader is open: without it, a first
	// checkpoint that ran before the loop's first commit (a loaded
	// machine) would find every frame copied, the reader's included.
	if _, _, err := s.CreateJob(ctx, newJob("v1-after-reader")); err != nil {
		t.Fatal(err)
	}
	if err := s.ckpt.svc.Start(context.WithoutCancel(ctx), s.ckpt.run); err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for i := 0; i < 300; i++ {
		t0 := time.Now()
		if _, _, err := s.CreateJob(ctx, newJob(fmt.Sprintf("v1-b%05d", i))); err != nil {
			t.Fatalf("submission %d behind a reader: %v", i, err)
		}
		worst = max(worst, time.Since(t0))
		if i%50 == 0 {
			time.Sleep(10 * time.Millisecond) // let the checkpointer run
		}
	}
	if worst > 500*time.Millisecond {
		t.Errorf("a submission waited %v behind a reader", worst)
	}
	if s.ckpt.runs.Load() == 0 {
		t.Error("no checkpoint ran: the test proved nothing")
	}
	if n := s.ckpt.restartTries.Load(); n != 0 {
		t.Errorf("%d RESTART checkpoints tried behind a reader that needs the WAL", n)
	}
}

// A checkpoint that fails is tried again at the next interval, even with
// nothing committed meanwhile.
func TestCheckpointerRetriesAFailure(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "c.db"), CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ckpt.wrote.Store(false)
	broken := &checkpointer{db: s.ckpt.db, store: s, restartPages: 1}
	if err := broken.db.Close(); err != nil { // Close closes it again: harmless
		t.Fatal(err)
	}
	broken.checkpoint(context.Background())
	if !broken.wrote.Load() {
		t.Error("a failed checkpoint was not left for the next interval")
	}
	if broken.runs.Load() != 0 {
		t.Error("a failed checkpoint counted as run")
	}
}

// Close stops the checkpointer: no goroutine goes on querying closed pools.
func TestCloseStopsCheckpointer(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "c.db")})
	if err != nil {
		t.Fatal(err)
	}
	if !s.ckpt.svc.Started() {
		t.Fatal("Open did not start the checkpointer")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.ckpt.svc.Started() {
		t.Error("the checkpointer runs after Close")
	}
}

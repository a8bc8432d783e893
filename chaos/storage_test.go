//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"edgepipe/storage/storagetest"
)

// ---------------------------------------------------------------- MinIO

// minioServer is a MinIO process that can be stopped and started again on
// the same address and data (storagetest.StartMinIO cannot restart).
type minioServer struct {
	t          testing.TB
	bin        string
	addr       string
	data, home string
	user, pass string
	logDir     string
	p          *proc
	restarts   int
}

func startMinio(t testing.TB, logDir string) *minioServer {
	t.Helper()
	bin := storagetest.MinIOBinary()
	if bin == "" {
		msg := "no minio binary: set EDGEPIPE_MINIO_BIN, put minio on PATH, or install it to ~/.cache/edgepipe-bin/minio"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so the storage fault suite may not be skipped)")
		}
		t.Skip("SKIPPING storage faults: " + msg)
	}
	m := &minioServer{t: t, bin: bin, data: t.TempDir(), home: t.TempDir(), user: "chaos-" + randHex(4), pass: randHex(16), logDir: logDir}
	for try := 0; ; try++ {
		m.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		if err := m.start(); err == nil {
			return m
		} else if try == 2 {
			t.Fatalf("minio: %v\n%s", err, tail(m.p.log(), 30))
		}
	}
}

func (m *minioServer) endpoint() string { return "http://" + m.addr }

func (m *minioServer) start() error {
	env := baseEnv("HOME="+m.home, "MINIO_ROOT_USER="+m.user, "MINIO_ROOT_PASSWORD="+m.pass,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	m.p = startProc(m.t, m.logDir, "minio", env, m.bin, "server", "--quiet", "--address", m.addr, m.data)
	if err := waitHTTP(m.p, m.endpoint()+"/minio/health/live", 60*time.Second); err != nil {
		m.p.killWait()
		return err
	}
	return nil
}

// stop kills MinIO (SIGKILL: the harshest stop an object store can have).
func (m *minioServer) stop() { m.p.killWait() }

func (m *minioServer) restart() {
	m.t.Helper()
	m.restarts++
	for try := 0; ; try++ {
		err := m.start()
		if err == nil {
			return
		}
		if try == 5 {
			m.t.Fatalf("minio restart: %v\n%s", err, tail(m.p.log(), 30))
		}
		time.Sleep(time.Second)
	}
}

// s3Env points edgepipe at endpoint with m's credentials.
func (m *minioServer) s3Env(endpoint string) []string {
	return []string{"EDGEPIPE_STORE=s3", "EDGEPIPE_S3_ENDPOINT=" + endpoint, "EDGEPIPE_S3_BUCKET=chaos",
		"EDGEPIPE_S3_ACCESS_KEY=" + m.user, "EDGEPIPE_S3_SECRET_KEY=" + m.pass, "EDGEPIPE_S3_REGION=us-east-1",
		"EDGEPIPE_S3_PATH_STYLE=true"}
}

// ---------------------------------------------------------------- storage faults

// TestStorageFaults puts the fault proxy between edgepipe and MinIO and
// cycles through latency, connections reset in the middle of uploads,
// refused connections, HTTP 503 answers and MinIO itself being killed and
// restarted, while 24 jobs run on two processes. Every job must settle
// (retrying or waiting, none lost) and `edgepipe check` must be clean
// against the real bucket.
func TestStorageFaults(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	logs := logDir(t)
	m := startMinio(t, logs)
	plog, err := os.Create(filepath.Join(logs, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plog.Close() })
	px, err := StartProxy(ctx, ProxyConfig{Upstream: m.addr, Seed: 42, Logger: slog.New(slog.NewTextHandler(plog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })

	// Backoff slow enough, and attempts many enough, to outlast two fault
	// cycles: this test is about riding out an outage, not about giving up
	// (which the default 5 attempts would, correctly, after a minute of
	// this schedule, dead-lettering the job as exhausted).
	c := newCluster(t, clusterConfig{Env: append(m.s3Env(px.URL()),
		"EDGEPIPE_RETRY_BASE=500ms", "EDGEPIPE_RETRY_CAP=5s", "EDGEPIPE_RETRY_MAX_ATTEMPTS=60")})
	c.serve("EDGEPIPE_WORKERS=2")
	c.worker("EDGEPIPE_WORKERS=1")

	const n = 24
	ids := map[string]bool{}
	run := "sf" + randHex(3)
	for i := range n {
		id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", i%4 == 0))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}

	type phase struct {
		name  string
		f     Faults
		dur   time.Duration
		minio bool // kill MinIO for the phase, start it after
	}
	phases := []phase{
		{"latency 40ms per chunk", Faults{Latency: 40 * time.Millisecond}, 4 * time.Second, false},
		{"uploads reset after 8 KiB on half the connections", Faults{ResetAfter: 8 << 10, ResetRate: 0.5}, 8 * time.Second, false},
		{"refused", Faults{Refuse: true}, 3 * time.Second, false},
		{"clean", Faults{}, 5 * time.Second, false},
		{"503 answers", Faults{Status: http.StatusServiceUnavailable}, 3 * time.Second, false},
		{"clean", Faults{}, 5 * time.Second, false},
		{"minio killed, gateway answers 503", Faults{DownStatus: http.StatusServiceUnavailable}, 4 * time.Second, true},
		{"clean", Faults{}, 5 * time.Second, false},
		{"minio killed, connections reset", Faults{}, 4 * time.Second, true},
		{"clean", Faults{}, 6 * time.Second, false},
	}
	cycles := 0
	for {
		for _, ph := range phases {
			px.SetFaults(ph.f)
			px.DropAll() // every fault applies to new connections; force them
			if ph.minio {
				m.stop()
			}
			t.Logf("phase %q for %s", ph.name, ph.dur)
			time.Sleep(ph.dur)
			if ph.minio {
				m.restart()
			}
		}
		cycles++
		open, err := c.api.jobs(ctx, unsettled)
		if err != nil {
			t.Fatal(err)
		}
		if len(open) == 0 || cycles >= 4 {
			break
		}
	}
	px.SetFaults(Faults{})
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	expectAll(t, ids, js)
	o := summarize(js)
	for _, j := range js {
		if j.Status != "succeeded" && j.Status != "needs_review" {
			t.Errorf("job %s ended %s; storage faults must be retried or waited out%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	st := px.Stats()
	t.Logf("storage faults: %d fault cycles, proxy %+v, MinIO restarts %d", cycles, st, m.restarts)
	if st.Resets == 0 || st.Refused == 0 || st.Answered == 0 || st.DialFailures == 0 || m.restarts == 0 {
		t.Errorf("a fault never took effect: %+v, MinIO restarts %d", st, m.restarts)
	}
	// Sweep and check against MinIO directly: the proxy is not under test.
	c.finish(m.s3Env(m.endpoint())...)
	c.scanLogs()
	// The faults must have been felt by edgepipe, not only by the proxy.
	felt := countLog(c, "object_store_error", "store_unavailable", "object storage", "connection reset", "503")
	if felt == 0 {
		t.Errorf("no edgepipe log line mentions a storage failure: the faults did not reach the pipeline")
	}
	t.Logf("storage faults: %d jobs %s, p50=%s p99=%s, %d log lines about storage failures%s",
		len(js), o, o.pct(.5).Round(time.Millisecond), o.pct(.99).Round(time.Millisecond), felt, problems(js))
	totals.jobs.Add(int64(len(js)))
}

// countLog counts lines of every edgepipe process log containing any of
// needles.
func countLog(c *cluster, needles ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.servers {
		for _, line := range strings.Split(p.log(), "\n") {
			for _, nd := range needles {
				if strings.Contains(line, nd) {
					n++
					break
				}
			}
		}
	}
	return n
}

// ---------------------------------------------------------------- SQLite busy

// TestSQLiteBusy has another process-like writer hold the database's write
// lock, in turns shorter and longer than edgepipe's 10 s busy timeout,
// while 16 jobs run on two processes. Writers must wait or fail an attempt
// and retry it; nothing may be lost or left inconsistent.
func TestSQLiteBusy(t *testing.T) {
	t.Parallel()
	sqliteOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(t, clusterConfig{Env: []string{"EDGEPIPE_RETRY_MAX_ATTEMPTS=20"}})
	c.serve("EDGEPIPE_WORKERS=2")
	c.worker("EDGEPIPE_WORKERS=1")

	const n = 16
	ids := map[string]bool{}
	run := "sb" + randHex(3)
	for i := range n {
		id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", i%4 == 0))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}

	db, err := sql.Open("sqlite3", "file:"+filepath.Join(c.dataDir, "edgepipe.db")+"?_busy_timeout=60000&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// Hold the write lock in turns: 2 s and 5 s (edgepipe waits them out),
	// then 12 s (past its busy timeout: its writes fail with
	// SQLITE_BUSY and leases run out meanwhile).
	holds := []time.Duration{2 * time.Second, 5 * time.Second, 12 * time.Second}
	held := 0
	for i := 0; ; i++ {
		d := holds[i%len(holds)]
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A write makes the lock real even if the driver deferred it.
		if _, err := tx.Exec(`CREATE TABLE IF NOT EXISTS chaos_lock (n INTEGER)`); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		time.Sleep(d)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		held++
		t.Logf("held the write lock for %s", d)
		time.Sleep(2 * time.Second)
		open, err := c.api.jobs(ctx, unsettled)
		if err == nil && len(open) == 0 && held >= len(holds) || held >= 3*len(holds) {
			break
		}
	}
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	expectAll(t, ids, js)
	for _, j := range js {
		if j.Status != "succeeded" && j.Status != "needs_review" {
			t.Errorf("job %s ended %s under a busy database%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	db.Close()
	c.finish()
	c.scanLogs()
	busy := countLog(c, "database busy", "database is locked")
	if busy == 0 {
		t.Errorf("edgepipe never reported a busy database: the %s hold did not reach it", holds[2])
	}
	o := summarize(js)
	t.Logf("sqlite busy: %d lock holds, %d busy reports in logs, %d jobs %s%s", held, busy, len(js), o, problems(js))
	totals.jobs.Add(int64(len(js)))
}

// ---------------------------------------------------------------- disk full

// TestDiskFull runs edgepipe with its whole data directory (database,
// objects, spool, scratch) on a small tmpfs and fills that file system to
// the last byte twice while jobs run, freeing it after a few seconds.
// Writes fail with ENOSPC / SQLITE_FULL; jobs must retry and settle, the
// database must stay sound and `edgepipe check` clean. Needs root (mount);
// elsewhere it skips saying so.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	sqliteOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIPPING disk-full simulation: cannot mount a tmpfs (%v: %s); it needs root", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	scratch := filepath.Join(mnt, "tmp")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, clusterConfig{DataDir: filepath.Join(mnt, "data"), Env: []string{"TMPDIR=" + scratch, "EDGEPIPE_RETRY_MAX_ATTEMPTS=20"}})
	c.serve("EDGEPIPE_WORKERS=2")

	const n = 16
	ids := map[string]bool{}
	run := "df" + randHex(3)
	for i := range n {
		id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", i%4 == 0))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	fills := 0
	for round := range 3 {
		time.Sleep(2 * time.Second)
		ballast := filepath.Join(mnt, fmt.Sprintf("ballast-%d", round))
		size, err := fillDisk(ballast)
		if err != nil {
			t.Fatal(err)
		}
		fills++
		t.Logf("disk full: %d MiB of ballast, holding 6s", size>>20)
		time.Sleep(6 * time.Second)
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		open, err := c.api.jobs(ctx, unsettled)
		if err == nil && len(open) == 0 {
			break
		}
	}
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	expectAll(t, ids, js)
	for _, j := range js {
		if j.Status != "succeeded" && j.Status != "needs_review" {
			t.Errorf("job %s ended %s after the disk filled up%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	c.finish()
	c.scanLogs()
	felt := countLog(c, "no space left on device", "database or disk is full")
	if felt == 0 {
		t.Errorf("edgepipe never reported a full disk: the fault did not reach it")
	}
	o := summarize(js)
	t.Logf("disk full: %d fills, %d ENOSPC/SQLITE_FULL log lines, %d jobs %s%s", fills, felt, len(js), o, problems(js))
	totals.jobs.Add(int64(len(js)))
}

// fillDisk writes path until the file system is full and returns its size.
func fillDisk(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return 0, nil
		}
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for len(buf) > 0 {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				buf = buf[:len(buf)/2] // fill the last partial MiB too
				continue
			}
			return n, err
		}
	}
	return n, nil
}

// TestStoreBusyBeforePrepare pins one path of the busy database
// deterministically: a job is claimed, the attempt pauses at after_claim
// (a delay failpoint), and meanwhile another writer holds the database past
// edgepipe's 10 s busy timeout, so the attempt's first write in prepare
// fails with SQLITE_BUSY. That failure is transient by nature (docs/design.md §6):
// the job must go to retry_wait and then succeed, not stop in needs_review
// as an unexpected error for a human.
func TestStoreBusyBeforePrepare(t *testing.T) {
	t.Parallel()
	sqliteOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newCluster(t, clusterConfig{})
	// The API alone in serve, and the attempt in a worker process whose only
	// other writer is the heartbeat (every 20 s with a 60 s lease): nothing
	// else of that process queues for its single write connection.
	c.serve("EDGEPIPE_WORKERS=0")
	c.worker("EDGEPIPE_WORKERS=1", "EDGEPIPE_FAILPOINTS=after_claim=delay(3000)@1", "EDGEPIPE_LEASE=60s")
	id, _, err := c.api.submitRetrying(ctx, jobBody("bp"+randHex(3), 0, "v1", "", false))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the claim: the attempt now sleeps 3 s before prepare.
	for {
		j, err := c.api.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == "running" {
			break
		}
		if settled(j.Status) {
			t.Fatalf("job %s is %s before the lock was taken", id, j.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(c.dataDir, "edgepipe.db")+"?_busy_timeout=60000&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`CREATE TABLE IF NOT EXISTS chaos_lock (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	// prepare's first write starts about 3 s from now and gives up after
	// the 10 s busy timeout.
	time.Sleep(16 * time.Second)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	js, err := c.api.waitSettled(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	j := js[0]
	if j.Status != "succeeded" {
		t.Errorf("job %s ended %s%s after a busy database at prepare; want retry_wait and then succeeded", j.ID, j.Status, problems(js))
	}
	if countLog(c, "database busy", "database is locked") == 0 {
		t.Errorf("the attempt never saw the busy database: the lock did not overlap prepare")
	}
	c.finish()
	c.scanLogs()
}

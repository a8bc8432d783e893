//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// outageLength is how long TestStorageOutage keeps the object store down:
// CHAOS_OUTAGE (a Go duration), 5 minutes by default; CI runs it shortened.
func outageLength(t testing.TB) time.Duration {
	v := os.Getenv("CHAOS_OUTAGE")
	if v == "" {
		return 5 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("CHAOS_OUTAGE=%q: want a positive duration", v)
	}
	return d
}

// ledgerCounts reads the fake provider's own billing ledger: billed calls
// per unit (job/scene) and operation.
func (c *cluster) ledgerCounts(ctx context.Context) (map[string]map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.fakeURL+"/ledger", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		ByUnit map[string]map[string]int64 `json:"by_unit"`
	}
	return l.ByUnit, json.NewDecoder(resp.Body).Decode(&l)
}

// billedFigures is the ledger's total and its largest count for one
// (job, scene, operation).
func billedFigures(l map[string]map[string]int64) (total, maxPerUnitOp int64) {
	for _, ops := range l {
		for _, n := range ops {
			total += n
			maxPerUnitOp = max(maxPerUnitOp, n)
		}
	}
	return total, maxPerUnitOp
}

// TestStorageOutage stops the S3 store (a real MinIO, SIGKILL) for
// CHAOS_OUTAGE while 20 jobs are in the middle of generating their scenes,
// then starts it again. The outage outlasts by far what the job's own retry
// budget (8 attempts, 200 ms–2 s backoff) could ride out: only the
// infrastructure budget (EDGEPIPE_INFRA_RETRY_WINDOW) carries the jobs
// through. Every job must end succeeded — none dead-lettered, none in
// review —, the provider's own ledger must show at most one billed call per
// (job, scene, operation), and `edgepipe check --require-settled --ledger`
// must be clean.
func TestStorageOutage(t *testing.T) {
	t.Parallel()
	outage := outageLength(t)
	ctx, cancel := context.WithTimeout(context.Background(), outage+15*time.Minute)
	defer cancel()
	m := startMinio(t, logDir(t))
	c := newCluster(t, clusterConfig{Faults: "*:latency=250ms", Seed: 11, Env: append(m.s3Env(m.endpoint()),
		"EDGEPIPE_INFRA_RETRY_WINDOW="+(4*outage+2*time.Minute).String(), "EDGEPIPE_INFRA_RETRY_CAP=3s")})
	c.serve("EDGEPIPE_WORKERS=2")
	c.worker("EDGEPIPE_WORKERS=2")

	const n = 20
	ids := map[string]bool{}
	run := "so" + randHex(3)
	for i := range n {
		id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", i%4 == 0))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	// Stop the store once scenes are being paid for, with most jobs still
	// far from done.
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := c.ledgerCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if total, _ := billedFigures(l); total >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no scene was paid for within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	open, err := c.api.jobs(ctx, unsettled)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) < n/2 {
		t.Fatalf("only %d of %d jobs were still running when the store went down: the outage would prove little", len(open), n)
	}
	l0, _ := c.ledgerCounts(ctx)
	billedBefore, _ := billedFigures(l0)
	m.stop()
	stopped := time.Now()
	t.Logf("object store stopped for %s with %d of %d jobs mid-run, %d calls billed so far", outage, len(open), n, billedBefore)
	waiting := 0
	for time.Since(stopped) < outage {
		time.Sleep(min(5*time.Second, outage-time.Since(stopped)))
		js, err := c.api.jobs(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		w := 0
		for _, j := range js {
			if j.Status == "dead_lettered" || j.Status == "failed" {
				t.Fatalf("job %s ended %s during the outage%s", j.ID, j.Status, problems([]job{j}))
			}
			if j.WaitingFor != nil && *j.WaitingFor == "storage" {
				w++
			}
		}
		waiting = max(waiting, w)
	}
	l1, _ := c.ledgerCounts(ctx)
	billedDuring, _ := billedFigures(l1)
	m.restart()
	back := time.Now()
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	drain := time.Since(back)
	expectAll(t, ids, js)
	for _, j := range js {
		if j.Status != "succeeded" {
			t.Errorf("job %s ended %s after the outage; want succeeded%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	l, err := c.ledgerCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total, maxPer := billedFigures(l)
	if maxPer > 1 {
		t.Errorf("the provider billed one (job, scene, operation) %d times", maxPer)
	}
	if waiting == 0 {
		t.Errorf("no job ever said it was waiting for storage: the outage did not reach the pipeline")
	}
	probed := c.probeAll(ctx, js)
	c.finish()
	c.scanLogs()
	o := summarize(js)
	t.Logf("storage outage: %d jobs, store down %s, up to %d jobs waiting for storage, %d calls billed before / %d by the end of the outage / %d in all, at most %d per (job, scene, op); drained %s after the store was back; %s, %d results probed",
		n, outage, waiting, billedBefore, billedDuring, total, maxPer, drain.Round(time.Second), o, probed)
	totals.jobs.Add(int64(len(js)))
}

// TestWipedSpoolAfterKill kills a worker (SIGKILL from inside, at the
// moment a provider's answer was kept but before the asset made from it
// exists) several times, and each time wipes its local disk's spool before
// starting it again. One job at a time and one scene at a time, so no other
// paid call is ever in flight at a kill: a job may then only end
// succeeded. The answer the killed worker held was staged in the object
// store, so the restarted worker uses it and pays nothing twice (the
// provider's own ledger shows one bill per job, scene and operation).
func TestWipedSpoolAfterKill(t *testing.T) {
	t.Parallel()
	kills := 3
	if fullMode {
		kills = 8
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := startMinio(t, logDir(t))
	c := newCluster(t, clusterConfig{Seed: 12, Env: m.s3Env(m.endpoint())})
	c.serve("EDGEPIPE_WORKERS=0")
	const n = 12
	ids := map[string]bool{}
	run := "ws" + randHex(3)
	for i := range n {
		id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", false))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	spool := filepath.Join(c.dataDir, "spool")
	wiped := 0
	for k := range kills {
		w := c.worker("EDGEPIPE_WORKERS=1", "EDGEPIPE_UNIT_CONCURRENCY=1", fmt.Sprintf("EDGEPIPE_FAILPOINTS=after_provider_response=crash@%d", 2+k%3))
		select {
		case <-w.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("kill %d: the worker never reached after_provider_response", k+1)
		}
		if !w.signaled(syscall.SIGKILL) {
			t.Fatalf("kill %d: worker exited with %v, want SIGKILL at the failpoint", k+1, w.cmd.ProcessState)
		}
		totals.kills.Add(1)
		files, _ := filepath.Glob(filepath.Join(spool, "*", "call-*"))
		wiped += len(files)
		if err := os.RemoveAll(spool); err != nil {
			t.Fatal(err)
		}
	}
	c.worker("EDGEPIPE_WORKERS=1", "EDGEPIPE_UNIT_CONCURRENCY=1")
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	expectAll(t, ids, js)
	for _, j := range js {
		if j.Status != "succeeded" {
			t.Errorf("job %s ended %s; want succeeded (every answer the killed worker held was staged)%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	l, err := c.ledgerCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total, maxPer := billedFigures(l)
	if maxPer > 1 {
		t.Errorf("the provider billed one (job, scene, operation) %d times", maxPer)
	}
	c.finish()
	c.scanLogs()
	t.Logf("wiped spool: %d jobs, %d SIGKILLs each holding a kept answer, %d spooled files wiped with the local disk, %d calls billed, at most %d per (job, scene, op); %s",
		n, kills, wiped, total, maxPer, summarize(js))
	totals.jobs.Add(int64(len(js)))
}

//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"edgepipe/failpoint"
)

// unreachable lists the failpoints the matrix cannot reach through the
// binary, each with the reason. A listed failpoint that is hit anyway fails
// the test, so this list cannot go stale silently.
var unreachable = map[string]string{}

// totals counts, across every test of the run, what the closing line of
// TestMain reports.
var totals struct {
	kills, jobs atomic.Int64
}

type crashCase struct {
	fp      string
	version string // v1 or v2: the version of the jobs the crash can hit
	nth     int    // crash@nth
	jobs    int
}

func (cc crashCase) name() string { return fmt.Sprintf("%s/%s/@%d", cc.fp, cc.version, cc.nth) }

// crashCases is the matrix: every failpoint edgepipe declares × both
// workflow versions; the full matrix also crashes at a later hit and runs
// more jobs per case.
func crashCases() []crashCase {
	var cs []crashCase
	for _, fp := range failpoint.Names {
		for _, v := range []string{"v1", "v2"} {
			if !fullMode {
				cs = append(cs, crashCase{fp: fp, version: v, nth: 1, jobs: 2})
				continue
			}
			for _, n := range []int{1, 3} {
				cs = append(cs, crashCase{fp: fp, version: v, nth: n, jobs: 5})
			}
		}
	}
	return cs
}

// TestCrashMatrix crashes a real edgepipe (SIGKILL from inside, at a named
// failpoint) while it runs jobs, restarts it on the same data without
// failpoints, lets every job settle, sweeps, and requires `edgepipe check`
// to find nothing. A failpoint that is never reached fails its case: a crash
// test that does not crash proves nothing.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cases := crashCases()
	var (
		hit, ran    sync.Map // failpoint → true
		kills, jobs atomic.Int64
	)
	t.Run("cases", func(t *testing.T) {
		for _, cc := range cases {
			t.Run(cc.name(), func(t *testing.T) {
				t.Parallel()
				ran.Store(cc.fp, true)
				if n := runCrashCase(t, cc); n >= 0 {
					hit.Store(cc.fp, true)
					kills.Add(1)
					jobs.Add(int64(n))
				}
			})
		}
	})
	var missed []string
	for _, fp := range failpoint.Names {
		_, tried := ran.Load(fp)
		if _, ok := hit.Load(fp); tried && !ok {
			if _, known := unreachable[fp]; !known {
				missed = append(missed, fp)
			}
		}
	}
	if len(missed) > 0 && !t.Failed() {
		t.Errorf("failpoints never reached: %s", strings.Join(missed, ", "))
	}
	t.Logf("crash matrix on %s: %d cases (%d failpoints × v1,v2%s), %d SIGKILLs, %d jobs, in %s",
		storeKind, len(cases), len(failpoint.Names), map[bool]string{true: " × @1,@3", false: ""}[fullMode],
		kills.Load(), jobs.Load(), time.Since(start).Round(time.Second))
}

// runCrashCase runs one case and returns how many jobs ran through the
// crash, or -1 when the failpoint did not fire.
func runCrashCase(t *testing.T, cc crashCase) int {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	hook := newWebhookReceiver(t)
	c := newCluster(t, clusterConfig{Seed: uint64(len(cc.fp)*100 + cc.nth)})
	spec := fmt.Sprintf("%s=crash@%d", cc.fp, cc.nth)
	first := c.serve("EDGEPIPE_FAILPOINTS="+spec, "EDGEPIPE_WORKERS=2")

	// Submit in the background: the crash may come before every job is
	// accepted, and the submitter must ride it out with the same keys.
	run := "cm" + randHex(3)
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
	)
	subErr := make(chan error, 1)
	go func() {
		for i := range cc.jobs {
			// Most jobs are of the case's version; one in three of the full
			// matrix's runs on the other, so both share the crashed process.
			v := cc.version
			if fullMode && i%3 == 2 {
				v = map[string]string{"v1": "v2", "v2": "v1"}[v]
			}
			id, _, err := c.api.submitRetrying(ctx, jobBody(run, i, v, hook.url, i%2 == 1))
			if err != nil {
				subErr <- err
				return
			}
			mu.Lock()
			ids[id] = true
			mu.Unlock()
		}
		subErr <- nil
	}()

	// Wait for the crash, or for every job to settle without one.
	crashed := false
	deadline := time.Now().Add(4 * time.Minute)
	settledAt := time.Time{}
	for !crashed {
		select {
		case <-first.done:
			crashed = true
			continue
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: neither crashed nor finished within 4 minutes", spec)
		}
		mu.Lock()
		n := len(ids)
		mu.Unlock()
		if n < cc.jobs {
			continue
		}
		js, err := c.api.jobs(ctx, unsettled)
		if err != nil || len(js) > 0 {
			continue
		}
		if settledAt.IsZero() {
			settledAt = time.Now()
		}
		// Settled without a crash: give the webhook dispatcher and the
		// sweeper a moment, then conclude the point was never reached.
		if time.Since(settledAt) > 8*time.Second {
			break
		}
	}

	if !crashed {
		if reason, ok := unreachable[cc.fp]; ok {
			first.stop(30 * time.Second)
			t.Skipf("UNREACHABLE %s: %s (%d jobs settled without reaching it)", cc.fp, reason, cc.jobs)
		}
		t.Fatalf("failpoint %s was never reached by %d %s jobs: the crash test proves nothing", spec, cc.jobs, cc.version)
	}
	if !first.signaled(syscall.SIGKILL) {
		t.Fatalf("edgepipe exited with %v, want death by SIGKILL at %s", first.cmd.ProcessState, spec)
	}
	if want := "failpoint " + cc.fp + ": crash"; !strings.Contains(first.log(), want) {
		t.Fatalf("edgepipe died of SIGKILL but its log lacks %q", want)
	}
	if reason, ok := unreachable[cc.fp]; ok {
		t.Errorf("%s is listed as unreachable (%s) but it fired: remove it from unreachable in chaos/crash_test.go", cc.fp, reason)
	}
	totals.kills.Add(1)

	// Restart on the same data, without failpoints, and let it finish.
	c.serve("EDGEPIPE_WORKERS=2")
	if err := <-subErr; err != nil {
		t.Fatalf("submission: %v", err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	js, err := c.api.waitSettled(sctx, cc.jobs)
	scancel()
	if err != nil {
		// Let the checker say which jobs are stuck and how, then fail.
		t.Errorf("after the restart: %v", err)
		c.finish()
		t.FailNow()
	}
	expectAll(t, ids, js)
	o := summarize(js)
	totals.jobs.Add(int64(len(js)))
	// Without provider faults a crash may only end a job in succeeded or,
	// when the crash left a paid call's outcome unknown, needs_review.
	for _, j := range js {
		if j.Status != "succeeded" && j.Status != "needs_review" {
			code := ""
			if j.Error != nil {
				code = j.Error.Code
			}
			t.Errorf("job %s ended %s (%s) after a crash at %s; want succeeded or needs_review", j.ID, j.Status, code, spec)
		}
		if j.Version != cc.version && !fullMode {
			t.Errorf("job %s ran as %s, want %s", j.ID, j.Version, cc.version)
		}
	}
	probed := c.probeAll(ctx, js)
	c.finish()
	c.scanLogs()
	t.Logf("%s: crashed and recovered, %d results probed: %s, %d webhook deliveries;%s", spec, probed, o, hook.total(), problems(js))
	return len(js)
}

// TestRandomKills runs 200 jobs (60 in the short run) on two edgepipe
// processes sharing one database (serve and worker) and SIGKILLs one of
// them at a random moment every 1.5–4.5 s, at least 10 times, restarting it
// at once. Submissions ride out the kills with their idempotency keys.
// Afterwards every accepted job must be settled and `edgepipe check` clean.
func TestRandomKills(t *testing.T) {
	t.Parallel()
	n, minKills, maxKills := 200, 10, 20
	if testing.Short() {
		n = 60
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("random kills: %d jobs, seed %d", n, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := newCluster(t, clusterConfig{Seed: seed})
	var (
		mu    sync.Mutex
		procs = map[string]*proc{"serve": c.serve("EDGEPIPE_WORKERS=2"), "worker": c.worker("EDGEPIPE_WORKERS=2")}
		ids   = map[string]bool{}
	)
	start := time.Now()

	// Spread submissions over the first kills, so that kills land while
	// the API is taking jobs as well as while workers run them.
	subErr := make(chan error, 1)
	var replays atomic.Int64
	go func() {
		run := "rk" + randHex(3)
		for i := range n {
			id, replayed, err := c.api.submitRetrying(ctx, jobBody(run, i, []string{"v1", "v2"}[i%2], "", i%5 == 0))
			if err != nil {
				subErr <- err
				return
			}
			if replayed {
				replays.Add(1)
			}
			mu.Lock()
			ids[id] = true
			mu.Unlock()
			time.Sleep(submitPause(i))
		}
		subErr <- nil
	}()

	kills := 0
	submitted := false
	var subFailure error
	for {
		if !submitted {
			select {
			case subFailure = <-subErr:
				submitted = true
			default:
			}
		}
		if subFailure != nil {
			t.Fatalf("submission: %v", subFailure)
		}
		if submitted && kills >= minKills {
			// Past the minimum, keep killing while jobs are still open, up
			// to maxKills: a job delivered ten times without an ack is
			// (rightly) dead-lettered as poison, which is not what this
			// test is about.
			open, err := c.api.jobs(ctx, unsettled)
			if err == nil && len(open) == 0 || kills >= maxKills {
				break
			}
		}
		time.Sleep(time.Duration(1500+rng.IntN(3000)) * time.Millisecond)
		victim := []string{"serve", "worker"}[rng.IntN(2)]
		mu.Lock()
		p := procs[victim]
		mu.Unlock()
		p.killWait()
		if !p.signaled(syscall.SIGKILL) {
			t.Fatalf("%s exited on its own before the kill: %v\n%s", victim, p.cmd.ProcessState, tail(p.log(), 30))
		}
		kills++
		var np *proc
		if victim == "serve" {
			np = c.serve("EDGEPIPE_WORKERS=2")
		} else {
			np = c.worker("EDGEPIPE_WORKERS=2")
		}
		mu.Lock()
		procs[victim] = np
		done := len(ids)
		mu.Unlock()
		t.Logf("kill %d: %s (pid %d) at %s, %d jobs accepted", kills, victim, p.pid(), time.Since(start).Round(time.Millisecond), done)
	}
	totals.kills.Add(int64(kills))
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	expectAll(t, ids, js)
	if len(js) != n {
		t.Errorf("%d jobs exist, %d submitted", len(js), n)
	}
	o := summarize(js)
	totals.jobs.Add(int64(len(js)))
	for _, j := range js {
		if j.Status != "succeeded" && j.Status != "needs_review" {
			code := ""
			if j.Error != nil {
				code = j.Error.Code
			}
			t.Errorf("job %s ended %s (%s); random kills without provider faults allow succeeded or needs_review", j.ID, j.Status, code)
		}
	}
	c.finish()
	c.scanLogs()
	t.Logf("random kills: %d SIGKILLs, %d jobs (%d submissions replayed after a kill) in %s: %s, p50=%s p99=%s",
		kills, len(js), replays.Load(), elapsed.Round(time.Second), o, o.pct(.5).Round(time.Millisecond), o.pct(.99).Round(time.Millisecond))
}

// submitPause is the pause after submission i: bursts of ten with gaps.
func submitPause(i int) time.Duration {
	if i%10 == 9 {
		return 1500 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// TestStopRightAfterStart stops workers the moment the harness has started
// them, as TestRandomKills' last restart followed by the cluster's shutdown
// can: stop must find a program that handles SIGTERM (and exits 0 after
// its grace), not one killed by the signal's default action before its
// handler was in place. Every stop is timed from the start's return.
func TestStopRightAfterStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterConfig{})
	for i := range 5 {
		w := c.worker("EDGEPIPE_WORKERS=1")
		// stop's nil means the worker exited 0 after the SIGTERM: it
		// handled the signal.
		if err := w.stop(30 * time.Second); err != nil {
			t.Fatalf("stop %d: %v\n%s", i, err, tail(w.log(), 20))
		}
	}
}

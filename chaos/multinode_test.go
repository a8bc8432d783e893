//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// mnNode is one worker process of the multi-node test and what it binds.
type mnNode struct {
	p        *proc
	bindings string // EDGEPIPE_BINDINGS, e.g. "v1" or "v1,v2"
	dir      string // its own data directory, empty when it started
}

// mnBoard is a small job: one narrated image scene, and on every other job a
// narrated video scene too, so each job pays for speech and half of them for
// a video (the two operations that must never be billed twice). Jobs i%4==0
// are pinned to v1 and i%4==1 to v2 by their instance id; the others get an
// id from the API's rollout (WORKFLOW_V2_ROLLOUT_PERCENT=50).
func mnBoard(run string, i int) (submitReq, int) {
	uniq := fmt.Sprintf("%s-%03d", run, i)
	scenes := []map[string]any{{"image_prompt": "a quiet pier " + uniq, "narration": "the pier waits " + uniq, "duration_ms": 500}}
	if i%2 == 0 {
		scenes = append(scenes, map[string]any{"video_prompt": "a tide coming in " + uniq, "narration": "the tide turns " + uniq, "duration_ms": 500})
	}
	body := map[string]any{"operation": "render_video", "title": "multinode " + uniq, "scenes": scenes,
		"options": map[string]any{"resolution": "640x360", "fps": 24}}
	switch i % 4 {
	case 0:
		body["instance_id"] = "v1-" + uniq
	case 1:
		body["instance_id"] = "v2-" + uniq
	}
	return submitReq{Key: "mn-" + uniq, Body: body}, len(scenes)
}

// TestMultiNode is the multi-node proof of issue 15: one Postgres, one MinIO
// bucket, the fake provider, one API process and three worker processes,
// each edgepipe process on its own empty data directory (nothing shared on
// local disk). Workers bind different versions (v1, v2, v1+v2). 100 jobs of
// both versions are submitted; twice, a random worker is SIGKILLed mid-run
// and a fresh one with the same bindings starts on a new empty directory.
// Then every job must have succeeded, every attempt must have run on its
// job's version in a process that binds that version (claim and stage
// events), the fake provider's own ledger must show at most one billed
// speech and video call per (job, scene) — exactly one for a succeeded job —
// and `edgepipe check --require-settled --ledger` must be clean.
//
// A kill can land between a speech or video request and the recording of
// its answer; the design then parks the job in needs_review
// (provider_outcome_unknown) instead of paying twice. The test accepts that
// only for a job whose ambiguous call was made by an attempt of a killed
// process, and reports it.
func TestMultiNode(t *testing.T) {
	t.Parallel()
	const n = 100
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 15))
	t.Logf("multi-node: %d jobs, seed %d", n, seed)
	logs := logDir(t)
	m := startMinio(t, logs)
	c := newCluster(t, clusterConfig{Postgres: true, Env: m.s3Env(m.endpoint())})
	db := connect(t, c.dbURL)
	dirs := 0
	newDir := func() string {
		dirs++
		d := filepath.Join(t.TempDir(), fmt.Sprintf("node-%02d", dirs))
		if logRoot != "" {
			d = filepath.Join(logs, fmt.Sprintf("node-%02d", dirs))
		}
		return d
	}
	apiDir := newDir()
	c.serve("EDGEPIPE_WORKERS=0", "WORKFLOW_V2_ROLLOUT_PERCENT=50", "EDGEPIPE_DATA_DIR="+apiDir)

	var (
		mu     sync.Mutex
		nodes  []*mnNode
		byPid  = map[int]*mnNode{} // every worker ever started
		killed = map[int]bool{}
	)
	startWorker := func(bindings string) *mnNode {
		nd := &mnNode{bindings: bindings, dir: newDir()}
		nd.p = c.worker("EDGEPIPE_WORKERS=2", "EDGEPIPE_BINDINGS="+bindings, "EDGEPIPE_DATA_DIR="+nd.dir)
		mu.Lock()
		byPid[nd.p.pid()] = nd
		mu.Unlock()
		return nd
	}
	for _, b := range []string{"v1", "v2", "v1,v2"} {
		nodes = append(nodes, startWorker(b))
	}
	// The API dead-letters a version no live process binds, so wait until
	// the three workers have announced their bindings.
	waitWorkers(ctx, t, db, 3)

	start := time.Now()
	run := "mn" + randHex(3)
	ids := map[string]bool{}
	scenes := map[string]int{}
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, ns := mnBoard(run, i)
				id, _, err := c.api.submitRetrying(ctx, req)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				ids[id], scenes[id] = true, ns
				mu.Unlock()
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	// Two kills, mid-run: once a random share of the jobs has settled.
	var kills []string
	for k, window := range [][2]int{{15, 35}, {50, 70}} {
		at := window[0] + rng.IntN(window[1]-window[0]+1)
		for settledCount(ctx, t, db) < at {
			select {
			case err := <-errc:
				t.Fatalf("submission: %v", err)
			case <-ctx.Done():
				t.Fatalf("waiting for %d settled jobs: %v", at, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		i := rng.IntN(len(nodes))
		victim := nodes[i]
		held := leasesOf(ctx, t, db, victim.p.pid())
		victim.p.killWait()
		if !victim.p.signaled(syscall.SIGKILL) {
			t.Fatalf("worker %s exited on its own before the kill: %v\n%s", victim.p.name, victim.p.cmd.ProcessState, tail(victim.p.log(), 30))
		}
		mu.Lock()
		killed[victim.p.pid()] = true
		mu.Unlock()
		nodes[i] = startWorker(victim.bindings)
		msg := fmt.Sprintf("kill %d: %s (pid %d, binds %s) after %d settled jobs at %s, holding %d leases %v; %s (pid %d) starts on a new empty directory",
			k+1, victim.p.name, victim.p.pid(), victim.bindings, at, time.Since(start).Round(time.Millisecond), len(held), held,
			nodes[i].p.name, nodes[i].p.pid())
		kills = append(kills, msg)
		t.Log(msg)
	}
	totals.kills.Add(int64(len(kills)))
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("submission: %v", err)
	default:
	}
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Errorf("%v", err)
		c.finish()
		t.FailNow()
	}
	elapsed := time.Since(start)
	expectAll(t, ids, js)
	if len(js) != n {
		t.Errorf("%d jobs exist, %d submitted", len(js), n)
	}
	totals.jobs.Add(int64(len(js)))

	owners := claimOwners(ctx, t, db)
	reviewed := mnStatuses(ctx, t, db, js, owners, killed)
	versions := mnVersions(ctx, t, db, js, owners, byPid)
	billed := mnLedger(t, c.fakeURL, js, scenes)
	probed := c.probeAll(ctx, js)
	rep := c.finish()
	if rep.Jobs != n {
		t.Errorf("edgepipe check saw %d jobs, want %d", rep.Jobs, n)
	}
	c.scanLogs()
	mnNoLocalStore(t, append([]string{apiDir}, nodeDirs(byPid)...))
	t.Logf("MULTI-NODE: %d jobs (%s), 1 API + 3 workers (v1 | v2 | v1,v2) on Postgres + MinIO, %d SIGKILLs, %d worker processes in all, settled in %s: %s; "+
		"%d needs_review after a kill in a billing window; %s; %d results probed; check: %d jobs, %d events, %d assets, %d objects, ledger=%v, %d violations",
		n, versions, len(kills), len(byPid), elapsed.Round(time.Second), summarize(js), reviewed, billed, probed,
		rep.Jobs, rep.Events, rep.Assets, rep.Objects, rep.Ledger, len(rep.Violations))
}

// waitWorkers waits until want worker processes have a bindings heartbeat.
func waitWorkers(ctx context.Context, t *testing.T, db *pgx.Conn, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got int
		err := db.QueryRow(ctx, `SELECT count(*) FROM process_bindings WHERE role = 'worker'`).Scan(&got)
		if err == nil && got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d workers announced their bindings within 60 s (err %v)", got, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func settledCount(ctx context.Context, t *testing.T, db *pgx.Conn) int {
	t.Helper()
	var k int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status NOT IN ('pending','running','retry_wait')`).Scan(&k); err != nil {
		t.Fatalf("count settled jobs: %v", err)
	}
	return k
}

// leasesOf lists the jobs process pid holds a lease on now.
func leasesOf(ctx context.Context, t *testing.T, db *pgx.Conn, pid int) []string {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT id FROM jobs WHERE status = 'running' AND lease_owner LIKE $1 ORDER BY id`, "%:"+strconv.Itoa(pid))
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	return ids
}

// claimOwners maps every attempt id to the pid of the process that claimed
// it, from the claim events (status → running, detail owner host:pid).
func claimOwners(ctx context.Context, t *testing.T, db *pgx.Conn) map[string]int {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT attempt_id, detail_json->>'owner' FROM job_events WHERE kind = 'status' AND to_status = 'running'`)
	if err != nil {
		t.Fatalf("claim events: %v", err)
	}
	out := map[string]int{}
	var att, owner string
	_, err = pgx.ForEachRow(rows, []any{&att, &owner}, func() error {
		i := strings.LastIndex(owner, ":")
		pid, perr := strconv.Atoi(owner[i+1:])
		if i < 0 || perr != nil {
			return fmt.Errorf("claim event of attempt %s has owner %q, not host:pid", att, owner)
		}
		out[att] = pid
		return nil
	})
	if err != nil {
		t.Fatalf("claim events: %v", err)
	}
	return out
}

// mnStatuses requires every job to have succeeded, except a job parked in
// needs_review because a SIGKILL left one of its non-idempotent calls with
// an unknown outcome: that call must have been made by an attempt of a
// killed process. It returns how many such jobs there are.
func mnStatuses(ctx context.Context, t *testing.T, db *pgx.Conn, js []job, owners map[string]int, killed map[int]bool) int {
	t.Helper()
	reviewed := 0
	for _, j := range js {
		if j.Status == "succeeded" {
			continue
		}
		if j.Status == "needs_review" && j.Error != nil && j.Error.Code == "provider_outcome_unknown" {
			rows, err := db.Query(ctx, `SELECT attempt_id FROM provider_calls WHERE job_id = $1
				AND contract <> 'idempotent_verified' AND status IN ('intent','ambiguous')`, pipeline.JobKey(chaosTenant, j.ID))
			if err != nil {
				t.Fatal(err)
			}
			atts, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(atts, func(a string) bool { return killed[owners[a]] }) {
				reviewed++
				t.Logf("job %s is in needs_review: a SIGKILL hit its paid call between request and answer (attempts %v)", j.ID, atts)
				continue
			}
		}
		t.Errorf("job %s ended %s%s; want succeeded", j.ID, j.Status, problems([]job{j}))
	}
	return reviewed
}

// mnVersions checks invariant 5 per attempt across processes: the job's
// recorded version is its id's, every claim was made by a process that
// binds that version, and every stage an attempt started ran that
// version's workflow. It returns a summary of the versions.
func mnVersions(ctx context.Context, t *testing.T, db *pgx.Conn, js []job, owners map[string]int, byPid map[int]*mnNode) string {
	t.Helper()
	count := map[string]int{}
	for _, j := range js {
		id, err := routing.ParseInstanceID(j.ID)
		if err != nil {
			t.Errorf("job %s: %v", j.ID, err)
			continue
		}
		if want := id.VersionOrDefault(); j.Version != want {
			t.Errorf("job %s recorded version %s, its id says %s", j.ID, j.Version, want)
		}
		count[j.Version]++
	}
	if count["v1"] < 25 || count["v2"] < 25 || count["v1"]+count["v2"] != len(js) {
		t.Errorf("versions %v: want 25 pinned to each plus the rollout's share", count)
	}
	type ev struct {
		job, version, att, kind, workflow string
	}
	rows, err := db.Query(ctx, `SELECT e.job_id, j.workflow_version, e.attempt_id, e.kind, coalesce(e.detail_json->>'workflow', '')
		FROM job_events e JOIN jobs j ON j.id = e.job_id
		WHERE (e.kind = 'status' AND e.to_status = 'running') OR e.kind = 'stage_started' ORDER BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev, error) {
		var e ev
		return e, r.Scan(&e.job, &e.version, &e.att, &e.kind, &e.workflow)
	})
	if err != nil {
		t.Fatal(err)
	}
	claims, stages := 0, 0
	for _, e := range evs {
		pid, ok := owners[e.att]
		nd := byPid[pid]
		switch {
		case !ok:
			t.Errorf("job %s: attempt %s has no claim event", e.job, e.att)
		case nd == nil:
			t.Errorf("job %s: attempt %s was claimed by pid %d, which is none of the test's workers", e.job, e.att, pid)
		case !slices.Contains(strings.Split(nd.bindings, ","), e.version):
			t.Errorf("job %s (%s): attempt %s ran in %s, which binds only %s", e.job, e.version, e.att, nd.p.name, nd.bindings)
		}
		if e.kind == "stage_started" {
			stages++
			if e.workflow != e.version {
				t.Errorf("job %s (%s): attempt %s ran a stage on workflow %q", e.job, e.version, e.att, e.workflow)
			}
		} else {
			claims++
		}
	}
	succeeded := 0
	for _, j := range js {
		if j.Status == "succeeded" {
			succeeded++
		}
	}
	if claims < len(js) || stages < 4*succeeded {
		t.Errorf("%d claims and %d stage starts for %d jobs: the event log is not what the check assumes", claims, stages, len(js))
	}
	return fmt.Sprintf("v1=%d v2=%d, %d attempts, %d stages checked against the claiming process's bindings", count["v1"], count["v2"], claims, stages)
}

// mnLedger reads the fake provider's own ledger: per (job, scene) at most
// one billed speech and one billed video, exactly one each for the scenes
// of a succeeded job (so the ledger is keyed as this check assumes).
func mnLedger(t *testing.T, fakeURL string, js []job, scenes map[string]int) string {
	t.Helper()
	var ledger struct {
		Billed map[string]int64 `json:"billed"`
		ByUnit map[string]struct {
			Image  int64 `json:"image"`
			Speech int64 `json:"speech"`
			Video  int64 `json:"video"`
		} `json:"by_unit"`
		Calls    int64 `json:"calls"`
		Replayed int64 `json:"replayed"`
	}
	if err := getJSON(fakeURL+"/ledger", &ledger); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	units := 0
	for _, j := range js {
		for s := range scenes[j.ID] {
			// The engine names a job to its providers by its internal key.
			u := ledger.ByUnit[pipeline.JobKey(chaosTenant, j.ID)+"/"+strconv.Itoa(s)]
			units++
			if u.Speech > 1 || u.Video > 1 {
				t.Errorf("PROVIDER LEDGER: job %s scene %d was billed %d speech and %d video calls; at most one each", j.ID, s, u.Speech, u.Video)
			}
			if j.Status != "succeeded" {
				continue
			}
			video := s == 1 // mnBoard: the second scene, when there is one, is the video
			if u.Speech != 1 || (video && u.Video != 1) || (!video && u.Video != 0) {
				t.Errorf("PROVIDER LEDGER: succeeded job %s scene %d billed speech=%d video=%d, want 1 and %d", j.ID, s, u.Speech, u.Video, map[bool]int{true: 1}[video])
			}
		}
	}
	keys := make([]string, 0, len(ledger.Billed))
	for k, v := range ledger.Billed {
		keys = append(keys, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(keys)
	return fmt.Sprintf("provider ledger: %d units, billed %s, %d image replays, %d requests", units, strings.Join(keys, " "), ledger.Replayed, ledger.Calls)
}

func nodeDirs(byPid map[int]*mnNode) []string {
	var out []string
	for _, nd := range byPid {
		out = append(out, nd.dir)
	}
	sort.Strings(out)
	return out
}

// mnNoLocalStore fails if any process made a SQLite job store in its data
// directory, and logs what the directories hold (a worker's spool only
// while the object store refuses answers).
func mnNoLocalStore(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		var files []string
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && p == d {
					return nil
				}
				return err
			}
			if strings.Contains(filepath.Base(p), "edgepipe.db") {
				t.Errorf("a SQLite job store was made in a data directory: %s", p)
			}
			if !e.IsDir() {
				files = append(files, strings.TrimPrefix(p, d+"/"))
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", d, err)
		}
		t.Logf("data directory %s: %d files %v", filepath.Base(d), len(files), files)
	}
}

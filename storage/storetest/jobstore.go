package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newJob(id string) pipeline.NewJob {
	return pipeline.NewJob{
		ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "key-" + id,
		RequestFingerprint: "fp-" + id, Input: json.RawMessage(`{"title":"t"}`), Version: "v1", Queue: "render-v1",
	}
}

func mustCreate(t *testing.T, s *env, nj pipeline.NewJob) pipeline.Job {
	t.Helper()
	j, created, err := s.CreateJob(context.Background(), nj)
	if err != nil || !created {
		t.Fatalf("create %s: created=%v err=%v", nj.ID, created, err)
	}
	return j
}

func fetchOne(t *testing.T, s *env, queue, owner string) pipeline.Claimed {
	t.Helper()
	cs, _, err := s.Fetch(context.Background(), &pipeline.FetchParams{Queue: queue, Owner: owner, Max: 1, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if len(cs) != 1 {
		t.Fatalf("fetch got %d jobs, want 1", len(cs))
	}
	return cs[0]
}

func statusOf(t *testing.T, s *env, id string) pipeline.Status {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j.Status
}

func countRows(t *testing.T, s *env, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func claimsOn(t *testing.T, s *env, key string) int {
	t.Helper()
	return countRows(t, s, `SELECT count(*) FROM object_claims WHERE object_key = ?`, key)
}

// deadLettered creates n jobs stored directly as dead letters, ids v2-dl000….
func deadLettered(t *testing.T, s *env, n int) {
	t.Helper()
	for i := range n {
		nj := newJob(fmt.Sprintf("v2-dl%03d", i))
		nj.Version, nj.Queue = "v2", ""
		nj.DeadLetterReason, nj.DeadLetterQueue, nj.DeadLetterDetail = pipeline.ReasonUnboundVersion, "render-v2", "v2 is not bound"
		mustCreate(t, s, nj)
	}
}

func testCreateJobIdempotency(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	nj := newJob("v1-a")
	j := mustCreate(t, s, nj)
	if j.Status != pipeline.StatusPending || j.Version != "v1" || j.Queue != "render-v1" {
		t.Fatalf("created job %+v", j)
	}
	// Same key, same fingerprint, even with another id: the existing job.
	again := nj
	again.ID = "v1-b"
	j2, created, err := s.CreateJob(ctx, again)
	if err != nil || created || j2.ID != "v1-a" {
		t.Fatalf("replay: id=%s created=%v err=%v", j2.ID, created, err)
	}
	// Same key, different fingerprint: refused.
	diff := nj
	diff.ID, diff.RequestFingerprint = "v1-c", "other"
	if _, _, err := s.CreateJob(ctx, diff); !errors.Is(err, pipeline.ErrIdempotencyReused) {
		t.Fatalf("mismatch: %v", err)
	}
	// The key is scoped to (tenant, operation).
	other := nj
	other.ID, other.Tenant = "v1-d", "globex"
	mustCreate(t, s, other)
	other2 := nj
	other2.ID, other2.Operation = "v1-e", "render_audio"
	mustCreate(t, s, other2)
	if n := countRows(t, s, `SELECT count(*) FROM jobs`); n != 3 {
		t.Fatalf("%d jobs, want 3", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 3 {
		t.Fatalf("%d messages, want 3 (one per job, same transaction)", n)
	}
	// A taken id with a fresh key is refused, not overwritten.
	dup := newJob("v1-a")
	dup.IdempotencyKey = "fresh"
	if _, _, err := s.CreateJob(ctx, dup); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}

	// A submission stored dead-lettered at once (an unbound version)
	// answers the same: a replay is the stored job, another request under
	// its key is refused, and its id is taken — also for a dead-lettered
	// submission against a queued job.
	dl := newJob("v2-dl")
	dl.Version, dl.Queue = "v2", ""
	dl.DeadLetterReason, dl.DeadLetterQueue, dl.DeadLetterDetail = pipeline.ReasonUnboundVersion, "render-v2", "v2 is not bound"
	stored := mustCreate(t, s, dl)
	if got, created, err := s.CreateJob(ctx, dl); err != nil || created || got.ID != stored.ID || got.Status != pipeline.StatusDeadLettered {
		t.Fatalf("dead-lettered replay: %s %s created=%v %v", got.ID, got.Status, created, err)
	}
	dlDiff := dl
	dlDiff.RequestFingerprint = "other"
	if _, _, err := s.CreateJob(ctx, dlDiff); !errors.Is(err, pipeline.ErrIdempotencyReused) {
		t.Fatalf("dead-lettered key reused: %v", err)
	}
	dlTaken := dl
	dlTaken.IdempotencyKey = "fresh-dl"
	if _, _, err := s.CreateJob(ctx, dlTaken); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("dead-lettered id taken: %v", err)
	}
	onQueued := dl
	onQueued.ID, onQueued.IdempotencyKey = "v1-a", "fresh-dl-2"
	if _, _, err := s.CreateJob(ctx, onQueued); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("dead-lettered submission of a queued job's id: %v", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM dead_letters`); n != 1 {
		t.Fatalf("%d dead letters, want the one stored", n)
	}
}

func testCreateJobConcurrentSameKeyOneJob(t *testing.T, h *Harness) {
	t.Parallel()
	a := h.open(t, nil)
	b := h.openOn(t, a.name, nil)
	errs := make(chan error, 40)
	ids := make(chan string, 40)
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			nj := newJob(fmt.Sprintf("v1-r%d", i))
			nj.IdempotencyKey, nj.RequestFingerprint = "same", "same-fp"
			j, _, err := s.CreateJob(context.Background(), nj)
			errs <- err
			ids <- j.ID
		}()
	}
	first := ""
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		id := <-ids
		if first == "" {
			first = id
		}
		if id != first {
			t.Fatalf("two jobs for one key: %s and %s", first, id)
		}
	}
	if n := countRows(t, a, `SELECT count(*) FROM jobs`); n != 1 {
		t.Fatalf("%d jobs", n)
	}
}

func testDeadLetteredAtSubmission(t *testing.T, h *Harness) {
	t.Parallel()
	s := h.open(t, pipeline.NewManualClock(t0))
	nj := newJob("v2-x")
	nj.Version, nj.Queue = "v2", ""
	nj.DeadLetterReason, nj.DeadLetterQueue, nj.DeadLetterDetail = pipeline.ReasonUnboundVersion, "render-v2", "v2 is not bound"
	j := mustCreate(t, s, nj)
	if j.Status != pipeline.StatusDeadLettered || j.LastErrorCode != pipeline.ReasonUnboundVersion || !j.RequiresAction ||
		j.LastErrorClass != pipeline.ClassPermanent {
		t.Fatalf("job %+v", j)
	}
	// What was answered is what was stored.
	if got, err := s.GetJob(context.Background(), "v2-x"); err != nil || got.LastErrorClass != pipeline.ClassPermanent ||
		got.LastErrorCode != j.LastErrorCode || got.LastErrorMessage != j.LastErrorMessage {
		t.Fatalf("stored %+v, %v; answered %+v", got, err, j)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 0 {
		t.Fatalf("unbound job was enqueued (%d messages)", n)
	}
	dls, err := s.ListDeadLetters(context.Background(), false, 0, 10)
	if err != nil || len(dls) != 1 || dls[0].Reason != pipeline.ReasonUnboundVersion || dls[0].Queue != "render-v2" {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	bad := newJob("v1-y")
	bad.Queue = ""
	if _, _, err := s.CreateJob(context.Background(), bad); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("job with neither queue nor dead letter: %v", err)
	}
	if ok := mustCreate(t, s, newJob("v1-ok")); ok.LastErrorClass != "" || ok.LastErrorCode != "" || ok.RequiresAction {
		t.Fatalf("a queued job carries an error: %+v", ok)
	}
}

func testFetchClaimFinish(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	c := fetchOne(t, s, "render-v1", "w1")
	if c.Job.Status != pipeline.StatusRunning || c.Lease.Attempt != 1 || c.Lease.AttemptID == "" || c.Deliveries != 1 {
		t.Fatalf("claimed %+v", c)
	}
	// The message is invisible while leased.
	if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 10, LeaseFor: time.Minute}); len(cs) != 0 {
		t.Fatalf("leased job fetched again: %+v", cs)
	}
	// Other queues do not see it.
	if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v2", Owner: "w2", Max: 10, LeaseFor: time.Minute}); len(cs) != 0 {
		t.Fatal("job fetched from the wrong queue")
	}
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "renders/x.mp4"}); err != nil {
		t.Fatal(err)
	}
	j, _ := s.GetJob(ctx, "v1-a")
	if j.Status != pipeline.StatusSucceeded || j.ResultKey != "renders/x.mp4" || j.LeaseOwner != "" {
		t.Fatalf("finished job %+v", j)
	}
	if n := countRows(t, s, `SELECT count(*) FROM queue_messages`); n != 0 {
		t.Fatalf("message not acked with the finish: %d left", n)
	}
	evs, err := s.Events(ctx, "v1-a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind+":"+string(e.FromStatus)+">"+string(e.ToStatus))
	}
	want := fmt.Sprint([]string{"created:>pending", "status:pending>running", "status:running>succeeded"})
	if fmt.Sprint(kinds) != want {
		t.Fatalf("events %v, want %v", kinds, want)
	}
}

func testRetryWaitReschedulesMessage(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	c := fetchOne(t, s, "render-v1", "w1")
	next := t0.Add(30 * time.Second)
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: next,
		ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_rate_limited", ErrorMessage: "slow down"}); err != nil {
		t.Fatal(err)
	}
	j, _ := s.GetJob(ctx, "v1-a")
	if j.Status != pipeline.StatusRetryWait || !j.NextRunAt.Equal(next) || j.LastErrorCode != "provider_rate_limited" {
		t.Fatalf("job %+v", j)
	}
	clock.Advance(29 * time.Second)
	if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w1", Max: 10, LeaseFor: time.Minute}); len(cs) != 0 {
		t.Fatal("fetched before next_run_at")
	}
	clock.Advance(time.Second)
	c2 := fetchOne(t, s, "render-v1", "w2")
	if c2.Lease.Attempt != 2 || c2.Lease.AttemptID == c.Lease.AttemptID {
		t.Fatalf("second attempt %+v", c2.Lease)
	}
	if c2.Deliveries != 1 {
		t.Fatalf("delivery count %d after a finished attempt, want it restarted at 1", c2.Deliveries)
	}
}

// Attempt A claims, its lease expires, B claims: every write A makes
// afterwards fails with a FenceError and changes nothing.
func testFencingZombieAttempt(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	a := fetchOne(t, s, "render-v1", "worker-a")
	if _, err := s.FreezeInput(ctx, a.Lease, json.RawMessage(`{"frozen":"a"}`), 3); err != nil {
		t.Fatal(err)
	}
	clock.Advance(61 * time.Second)
	b := fetchOne(t, s, "render-v1", "worker-b")
	if b.Lease.Attempt != 2 || b.Job.Status != pipeline.StatusRunning {
		t.Fatalf("takeover %+v", b)
	}
	before := snapshot(t, s)
	writes := map[string]func() error{
		"finish": func() error {
			return s.Finish(ctx, a.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "zombie"})
		},
		"fail":    func() error { return s.Finish(ctx, a.Lease, pipeline.Outcome{Status: pipeline.StatusFailed}) },
		"release": func() error { return s.Release(ctx, a.Lease) },
		"heartbeat": func() error {
			_, err := s.Heartbeat(ctx, a.Lease, time.Minute)
			return err
		},
		"freeze": func() error {
			_, err := s.FreezeInput(ctx, a.Lease, json.RawMessage(`{}`), 1)
			return err
		},
		"stage": func() error { return s.StageFinished(ctx, a.Lease, "execute", 3, nil) },
		"event": func() error { return s.AppendEvent(ctx, a.Lease, pipeline.EventUnitGenerated, nil) },
		"finishMany": func() error {
			errs, err := s.FinishMany(ctx, []pipeline.Finished{{Lease: a.Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}}})
			return errors.Join(err, errs[0])
		},
	}
	for name, w := range writes {
		err := w()
		var fe *pipeline.FenceError
		if !errors.As(err, &fe) || !errors.Is(err, pipeline.ErrLeaseLost) {
			t.Errorf("%s by zombie: err = %v, want FenceError", name, err)
		}
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("zombie writes changed the database:\nbefore %s\nafter  %s", before, after)
	}
	// B still works.
	if err := s.Finish(ctx, b.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatalf("live attempt: %v", err)
	}
	// After B finished, A's lease is still refused (the job moved on).
	if err := s.Finish(ctx, a.Lease, pipeline.Outcome{Status: pipeline.StatusFailed}); !errors.Is(err, pipeline.ErrLeaseLost) {
		t.Fatalf("zombie finish after B finished: %v", err)
	}
}

// snapshot renders every mutable table, read through the second
// connection, so a test can show nothing changed.
func snapshot(t *testing.T, s *env) string {
	t.Helper()
	out := ""
	for _, q := range []string{
		`SELECT id, status, attempt_id, lease_expires_at, result_key, stage, units_done, frozen_input_json FROM jobs ORDER BY id`,
		`SELECT count(*), coalesce(max(id), 0) FROM job_events`,
		`SELECT id, visible_at, delivery_count FROM queue_messages ORDER BY id`,
		`SELECT count(*) FROM dead_letters`,
		`SELECT count(*) FROM webhook_outbox`,
		`SELECT count(*) FROM object_claims`,
		`SELECT count(*) FROM provider_calls`,
		`SELECT count(*) FROM units`,
	} {
		rows, err := s.db.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprint(rows) + ";"
	}
	return out
}

func testHeartbeatKeepsLease(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	a := fetchOne(t, s, "render-v1", "w1")
	for range 5 {
		clock.Advance(40 * time.Second)
		var err error
		if a.Lease, err = s.Heartbeat(ctx, a.Lease, time.Minute); err != nil {
			t.Fatal(err)
		}
		if cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 1, LeaseFor: time.Minute}); len(cs) != 0 {
			t.Fatal("a heartbeating job was taken over")
		}
	}
	if !a.Lease.ExpiresAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("lease expires %s", a.Lease.ExpiresAt)
	}
}

func testRedeliveryForTerminalJobChangesNothing(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := h.open(t, clock)
	mustCreate(t, s, newJob("v1-a"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	// A duplicate message arrives (at-least-once delivery).
	if err := s.Enqueue(ctx, "render-v1", "v1-a", 0); err != nil {
		t.Fatal(err)
	}
	events := countRows(t, s, `SELECT count(*) FROM job_events`)
	cs, st, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w2", Max: 10, LeaseFor: time.Minute})
	if err != nil || len(cs) != 0 || st.AckedSettled != 1 {
		t.Fatalf("fetch: %+v %+v %v", cs, st, err)
	}
	if got := countRows(t, s, `SELECT count(*) FROM queue_messages`); got != 0 {
		t.Fatalf("duplicate not acked: %d", got)
	}
	if got := countRows(t, s, `SELECT count(*) FROM job_events`); got != events {
		t.Fatal("a redelivery to a terminal job wrote an event")
	}
	j, _ := s.GetJob(ctx, "v1-a")
	if j.Status != pipeline.StatusSucceeded || j.Attempts != 1 {
		t.Fatalf("terminal job changed: %+v", j)
	}
}

func testDatabaseRefusesTerminalChange(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	for _, st := range []pipeline.Status{pipeline.StatusSucceeded, pipeline.StatusFailed, pipeline.StatusCanceled} {
		id := "v1-" + string(st)
		mustCreate(t, s, newJob(id))
		c := fetchOne(t, s, "render-v1", "w")
		if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: st}); err != nil {
			t.Fatal(err)
		}
		// Bypass the Go code: the trigger is the second wall.
		for _, to := range pipeline.AllStatuses {
			_, err := s.write.ExecContext(ctx, `UPDATE jobs SET status = ? WHERE id = ?`, string(to), id)
			if err == nil {
				t.Errorf("database let terminal %s become %s", st, to)
			}
		}
		if _, err := s.write.ExecContext(ctx, `UPDATE jobs SET attempts = 99 WHERE id = ?`, id); err == nil {
			t.Errorf("database let a terminal job's attempts change")
		}
		if got := statusOf(t, s, id); got != st {
			t.Fatalf("%s became %s", st, got)
		}
	}
	if _, err := s.write.ExecContext(ctx, `DELETE FROM jobs`); err == nil {
		t.Error("jobs can be deleted")
	}
	if _, err := s.write.ExecContext(ctx, `UPDATE job_events SET kind = 'x'`); err == nil {
		t.Error("events can be rewritten")
	}
}

// No event, message or unit without its job (DESIGN: no dangling rows),
// held by the database's foreign keys (on SQLite, enforced on every
// connection the store opens) and not only by the Go code that writes
// them: a row naming a job that does not exist is refused, in one-row and
// in multi-row statements, and a job's id cannot change under the rows
// that name it.
func testDatabaseRefusesDanglingRows(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	// A settled job has no message left: the control row may add one.
	mustCreate(t, s, newJob("v1-done"))
	c := fetchOne(t, s, "render-v1", "w")
	if err := s.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, newJob("v1-held"))
	for _, tc := range []struct{ name, q, job string }{
		{"event", `INSERT INTO job_events (job_id, at, kind) VALUES ('%s', 0, 'status')`, "v1-held"},
		{"event among events", `INSERT INTO job_events (job_id, at, kind) VALUES ('v1-held', 0, 'status'), ('%s', 0, 'status'),
			('v1-held', 0, 'status')`, "v1-held"},
		{"message", `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ('render-v1', '%s', 0, 0)`, "v1-done"},
		{"unit", `INSERT INTO units (job_id, scene_index, kind, unit_key, updated_at) VALUES ('%s', 0, 'image', 'k', 0)`, "v1-held"},
	} {
		if _, err := s.write.ExecContext(ctx, fmt.Sprintf(tc.q, "v1-none")); err == nil {
			t.Errorf("database took a dangling %s", tc.name)
		}
		// The same row naming a job that exists is taken: the refusal
		// above is the missing job's, not a malformed statement's.
		if _, err := s.write.ExecContext(ctx, fmt.Sprintf(tc.q, tc.job)); err != nil {
			t.Errorf("%s naming an existing job refused: %v", tc.name, err)
		}
	}
	if _, err := s.write.ExecContext(ctx, `UPDATE jobs SET id = 'v1-moved' WHERE id = 'v1-held'`); err == nil {
		t.Error("database let a job's id change under its events and message")
	}
	if _, err := s.write.ExecContext(ctx, `UPDATE jobs SET id = 'v1-held' WHERE id = 'v1-held'`); err != nil {
		t.Errorf("the same update keeping the id refused: %v", err)
	}
	if got := countRows(t, s, `SELECT count(*) FROM job_events WHERE job_id NOT IN ('v1-held', 'v1-done')`); got != 0 {
		t.Errorf("%d events name no job", got)
	}
}

// The trigger carries exactly the transition table of pipeline: every
// allowed edge passes, every refused one aborts.
func testTriggerMatchesTransitionTable(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	table := pipeline.Transitions()
	i := 0
	for _, from := range pipeline.AllStatuses {
		for _, to := range pipeline.AllStatuses {
			if from == to {
				continue
			}
			i++
			id := fmt.Sprintf("v1-t%d", i)
			// The trigger guards updates; inserting in any status is how a
			// row gets into `from` without walking the graph.
			if _, err := s.write.ExecContext(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
				request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
				VALUES (?, ?, 't', 'op', ?, 'fp', '{}', 'v1', 'render-v1', ?, 0, 0, 0)`, id, id, id, string(from)); err != nil {
				t.Fatal(err)
			}
			_, err := s.write.ExecContext(ctx, `UPDATE jobs SET status = ? WHERE id = ?`, string(to), id)
			allowed := false
			for _, x := range table[from] {
				allowed = allowed || x == to
			}
			if allowed && err != nil {
				t.Errorf("%s > %s refused by the database: %v", from, to, err)
			}
			if !allowed && err == nil {
				t.Errorf("%s > %s allowed by the database", from, to)
			}
			// Out of a terminal status the terminal wall refuses first; out
			// of any other the refusal must be the transition table's, or
			// an edge wrongly listed there would hide behind another check.
			if !allowed && err != nil && !from.Terminal() && !strings.Contains(err.Error(), "invalid job status transition") {
				t.Errorf("%s > %s refused, but not as a transition: %v", from, to, err)
			}
		}
	}
}

// Submissions share commits (group commit); one request's failure must not
// fail the others committed with it, and none may be lost.
func testGroupCommitIsolatesFailures(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	mustCreate(t, s, newJob("v1-taken"))
	const n = 200
	errs := make(chan error, n)
	for i := range n {
		go func() {
			nj := newJob(fmt.Sprintf("v1-g%03d", i))
			switch i % 10 {
			case 3: // an id that exists, under a fresh key: refused alone
				nj.ID = "v1-taken"
			case 7: // a reused key with another fingerprint: refused alone
				nj.IdempotencyKey, nj.RequestFingerprint = "key-v1-taken", "other"
			}
			_, _, err := s.CreateJob(ctx, nj)
			errs <- err
		}()
	}
	var taken, reused, ok int
	for range n {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, pipeline.ErrAlreadyExists):
			taken++
		case errors.Is(err, pipeline.ErrIdempotencyReused):
			reused++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if ok != 160 || taken != 20 || reused != 20 {
		t.Fatalf("ok=%d taken=%d reused=%d", ok, taken, reused)
	}
	if c := countRows(t, s, `SELECT count(*) FROM jobs`); c != 161 {
		t.Fatalf("%d jobs, want 161", c)
	}
	if c := countRows(t, s, `SELECT count(*) FROM queue_messages`); c != 161 {
		t.Fatalf("%d messages, want 161", c)
	}
	if c := countRows(t, s, `SELECT count(*) FROM job_events WHERE kind = 'created'`); c != 161 {
		t.Fatalf("%d created events, want 161", c)
	}
}

func testCreateAfterCloseFails(t *testing.T, h *Harness) {
	t.Parallel()
	s := h.Open(t, h.NewDatabase(t), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateJob(context.Background(), newJob("v1-late")); err == nil {
		t.Fatal("created a job on a closed store")
	}
}

// CreateJob builds the returned job instead of reading it back; it must be
// exactly what a read returns.
func testCreatedJobMatchesStoredRow(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	for _, nj := range []pipeline.NewJob{newJob("v1-m"), func() pipeline.NewJob {
		nj := newJob("v2-m")
		nj.Version, nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue, nj.WebhookURL = "v2", "", pipeline.ReasonUnboundVersion, "render-v2", "https://x.test/h"
		return nj
	}()} {
		got, _, err := s.CreateJob(ctx, nj)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.GetJob(ctx, nj.ID)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("returned %+v\nstored   %+v", got, want)
		}
	}
}

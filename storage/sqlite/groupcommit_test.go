package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgepipe/internal/groupcommit"
	"edgepipe/pipeline"
)

// commitOne runs one group through commitGroup, as the group committer
// would, and returns the answers in request order.
func commitOne(t *testing.T, s *Store, reqs []groupcommit.Request) []groupcommit.Response {
	t.Helper()
	for i := range reqs {
		if reqs[i].Ctx == nil {
			reqs[i].Ctx = context.Background()
		}
		reqs[i].Job = reqs[i].Job.WithDefaults()
		reqs[i].Resp = make(chan groupcommit.Response, 1)
	}
	s.commitGroup(reqs)
	out := make([]groupcommit.Response, len(reqs))
	for i, r := range reqs {
		out[i] = <-r.Resp
	}
	return out
}

// TestCommitGroupAnswersEachRequest: one group of submissions in one
// transaction gives each request the answer it would get alone and in
// order — replays and refusals against stored jobs and against earlier
// requests of the same group, a job key held by another job, a gone caller
// left out — and stores each new job, its created event (in request order)
// and its message exactly, texts that are not UTF-8 byte for byte.
func TestCommitGroupAnswersEachRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := openTest(t, "", clock)
	stored, created, err := s.CreateJob(ctx, withInstance(newJob("v1-old"), "old-inst"))
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	clock.Advance(time.Minute) // a replay is the stored job, not one built now
	replay := withInstance(newJob("v1-old"), "another-inst")
	replay.Input = json.RawMessage(`{"title":"another"}`)
	keyClash := withInstance(newJob("v1-old"), "k1") // another tenant's submission under the stored job's key
	keyClash.Tenant, keyClash.IdempotencyKey = "globex", "k-clash"
	groupClash := withInstance(newJob("v1-f"), "k2") // … and under a key created earlier in the group
	groupClash.Tenant, groupClash.IdempotencyKey = "globex", "k-clash-2"
	gone, cancel := context.WithCancel(ctx)
	cancel()
	a := withInstance(newJob("v1-a"), "a")
	otherFP := a
	otherFP.RequestFingerprint = "fp-other"
	sameInstance := withInstance(newJob("v1-d"), "a")
	storedInstance := withInstance(newJob("v1-e"), "old-inst")
	f := withInstance(newJob("v1-f"), "f")
	g := withInstance(newJob("v1-g"), "g")
	g.Input = json.RawMessage(`{"title":"<&> \u2028 ünï \"q\""}`)
	g.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	g.WebhookURL = "https://example.test/hook"
	reqs := []groupcommit.Request{
		{Job: a},
		{Job: a},              // the same request again: a replay of the one before it
		{Job: otherFP},        // its key with another request
		{Job: replay},         // a replay of a stored job
		{Job: sameInstance},   // an instance id taken earlier in the group
		{Job: storedInstance}, // an instance id taken in the store
		{Job: f, Ctx: gone},   // its caller has gone
		{Job: f},              // so this one creates it
		{Job: g},
		{Job: keyClash},
		{Job: groupClash},
	}
	res := commitOne(t, s, reqs)
	want := []struct {
		created bool
		id      string
		err     error
	}{
		{true, "v1-a", nil}, {false, "v1-a", nil}, {false, "", pipeline.ErrIdempotencyReused},
		{false, "v1-old", nil}, {false, "", pipeline.ErrAlreadyExists}, {false, "", pipeline.ErrAlreadyExists},
		{false, "", context.Canceled}, {true, "v1-f", nil}, {true, "v1-g", nil},
		{false, "", errJobKeyHeld}, {false, "", errJobKeyHeld},
	}
	for i, w := range want {
		r := res[i]
		if r.Created != w.created || r.Job.ID != w.id || !errors.Is(r.Err, w.err) || (w.err == nil) != (r.Err == nil) {
			t.Errorf("request %d: created %v job %q err %v; want %v %q %v", i, r.Created, r.Job.ID, r.Err, w.created, w.id, w.err)
		}
	}
	if !reflect.DeepEqual(res[3].Job, stored) {
		t.Errorf("replay of a stored job: %+v, want %+v", res[3].Job, stored)
	}
	var lastEvent int64
	for _, i := range []int{0, 7, 8} {
		got, err := s.GetJob(ctx, res[i].Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, res[i].Job) {
			t.Errorf("request %d: answered %+v, stored %+v", i, res[i].Job, got)
		}
		evs, err := s.Events(ctx, got.ID, 0, 10)
		if err != nil || len(evs) != 1 || evs[0].Kind != pipeline.EventCreated || evs[0].ToStatus != pipeline.StatusPending || evs[0].FromStatus != "" ||
			string(evs[0].Detail) != `{"queue":"render-v1","version":"v1"}` || evs[0].ID <= lastEvent {
			t.Errorf("request %d: events %+v (%v), want one created event after id %d", i, evs, err, lastEvent)
		} else {
			lastEvent = evs[0].ID
		}
	}
	if got, _ := s.GetJob(ctx, "v1-g"); string(got.Input) != string(g.Input) || got.TraceParent != g.TraceParent || got.WebhookURL != g.WebhookURL {
		t.Errorf("stored input %s, trace %q, webhook %q", got.Input, got.TraceParent, got.WebhookURL)
	}
	var nullTrace int
	if err := s.read.QueryRow(`SELECT count(*) FROM jobs WHERE trace_parent IS NULL`).Scan(&nullTrace); err != nil || nullTrace != 3 {
		t.Errorf("%d jobs without a trace parent stored as NULL (%v), want 3", nullTrace, err)
	}
	if total, visible, err := s.QueueDepth(ctx, "render-v1"); err != nil || total != 4 || visible != 4 {
		t.Errorf("queue depth %d/%d (%v), want the stored job's and three new messages, visible", total, visible, err)
	}
	if _, err := s.GetJob(ctx, "v1-d"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("refused request stored: %v", err)
	}

	// Texts that are not UTF-8 are stored as sent.
	for i, mangle := range []func(*pipeline.NewJob){
		func(nj *pipeline.NewJob) { nj.IdempotencyKey = "key-\xff\xfe" },
		func(nj *pipeline.NewJob) { nj.Input = json.RawMessage("{\"title\":\"\xff\"}") },
		func(nj *pipeline.NewJob) { nj.WebhookURL = "https://example.test/\xff" },
		func(nj *pipeline.NewJob) { nj.TraceParent = "00-\xff" },
	} {
		odd := withInstance(newJob(fmt.Sprintf("v1-odd%d", i)), fmt.Sprintf("odd%d", i))
		mangle(&odd)
		fresh := withInstance(newJob(fmt.Sprintf("v1-h%d", i)), fmt.Sprintf("h%d", i))
		res = commitOne(t, s, []groupcommit.Request{{Job: fresh}, {Job: odd}, {Job: odd}})
		if !res[0].Created || !res[1].Created || res[2].Created || res[2].Err != nil || res[2].Job.ID != odd.ID {
			t.Fatalf("odd text %d: %+v", i, res)
		}
		got, err := s.GetJob(ctx, odd.ID)
		if err != nil || got.IdempotencyKey != odd.IdempotencyKey || string(got.Input) != string(odd.Input) ||
			got.WebhookURL != odd.WebhookURL || got.TraceParent != odd.TraceParent {
			t.Errorf("odd text %d: stored %q %q %q %q (%v), want %q %q %q %q", i, got.IdempotencyKey, got.Input, got.WebhookURL, got.TraceParent, err,
				odd.IdempotencyKey, odd.Input, odd.WebhookURL, odd.TraceParent)
		}
	}
	// The same clash of job keys in a group with a dead-lettered job is
	// that request's refusal too.
	dl := withInstance(newJob("v1-dl"), "dl")
	dl.Queue, dl.DeadLetterReason, dl.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
	res = commitOne(t, s, []groupcommit.Request{{Job: keyClash}, {Job: dl}, {Job: withInstance(newJob("v1-i"), "i")}})
	if !errors.Is(res[0].Err, errJobKeyHeld) || !res[1].Created || !res[2].Created {
		t.Errorf("a job-key clash next to a dead-lettered job: %+v", res)
	}

	// Two requests for one job key: the first reuses a stored idempotency
	// key with another request and is refused, the second is new. The row
	// inserted is the second's, though both carry the job key.
	reused := withInstance(newJob("v1-x"), "x")
	reused.IdempotencyKey = "key-v1-old"
	res = commitOne(t, s, []groupcommit.Request{{Job: reused}, {Job: withInstance(newJob("v1-x"), "x")}})
	if !errors.Is(res[0].Err, pipeline.ErrIdempotencyReused) || res[0].Created || !res[1].Created || res[1].Err != nil || res[1].Job.IdempotencyKey != "key-v1-x" {
		t.Errorf("one job key, the first request refused: %+v", res)
	}
}

// TestCommitGroupAcrossChunks: a group larger than one multi-row
// statement (createJobsTx writes chunks of up to insertChunk rows) answers
// replays of jobs from an earlier chunk and stores exactly one created
// event and one message for each new job.
func TestCommitGroupAcrossChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	const fresh, replays = insertChunk + 45, 40
	var reqs []groupcommit.Request
	for i := range fresh {
		reqs = append(reqs, groupcommit.Request{Job: withInstance(newJob(fmt.Sprintf("v1-c%03d", i)), fmt.Sprintf("c%03d", i))})
	}
	for i := range replays {
		reqs = append(reqs, groupcommit.Request{Job: reqs[i*7].Job})
	}
	res := commitOne(t, s, reqs)
	for i, r := range res {
		want := fmt.Sprintf("v1-c%03d", i)
		if i >= fresh {
			want = fmt.Sprintf("v1-c%03d", (i-fresh)*7)
		}
		if r.Err != nil || r.Created != (i < fresh) || r.Job.ID != want {
			t.Errorf("request %d: created %v job %q err %v; want created %v job %q", i, r.Created, r.Job.ID, r.Err, i < fresh, want)
		}
	}
	var events, messages, jobs int
	if err := s.read.QueryRow(`SELECT (SELECT count(DISTINCT job_id) FROM job_events WHERE kind = 'created'),
		(SELECT count(*) FROM job_events), (SELECT count(DISTINCT job_id) FROM queue_messages)`).Scan(&jobs, &events, &messages); err != nil {
		t.Fatal(err)
	}
	if jobs != fresh || events != fresh || messages != fresh {
		t.Errorf("%d jobs with a created event, %d events, %d messages; want %d of each", jobs, events, messages, fresh)
	}
	if total, visible, err := s.QueueDepth(ctx, "render-v1"); err != nil || total != fresh || visible != fresh {
		t.Errorf("queue depth %d/%d (%v), want %d visible", total, visible, err, fresh)
	}
}

func TestChunks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, nil}, {1, []int{1}}, {3, []int{2, 1}}, {insertChunk, []int{insertChunk}},
		{insertChunk + 45, []int{insertChunk, 32, 8, 4, 1}}, {2*insertChunk + 1, []int{insertChunk, insertChunk, 1}},
	} {
		if got := chunks(tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("chunks(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func withInstance(nj pipeline.NewJob, instance string) pipeline.NewJob {
	nj.InstanceID = instance
	return nj
}

// TestCommitGroupLaterRowIsNoReason: a request refused by a stored
// job must get that refusal, not an answer made of a row a later request of
// the same group inserted: notInserted runs after the whole group is
// inserted, and sees rows that did not exist at the refused row's turn.
func TestCommitGroupLaterRowIsNoReason(t *testing.T) {
	t.Parallel()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	api := func(inst, key, fp string) pipeline.NewJob {
		nj := newJob(pipeline.JobKey("acme", inst))
		nj.InstanceID, nj.IdempotencyKey, nj.RequestFingerprint = inst, key, fp
		return nj
	}
	// Reachable through the API: the caller pins instance_id "x" (taken) under
	// key k1, and another request pins "y" under the same key (another body).
	commitOne(t, s, []groupcommit.Request{{Job: api("x", "k0", "fp0")}})
	res := commitOne(t, s, []groupcommit.Request{{Job: api("x", "k1", "fpA")}, {Job: api("y", "k1", "fpB")}})
	if !errors.Is(res[0].Err, pipeline.ErrAlreadyExists) || !res[1].Created {
		t.Errorf("pinned taken instance, then same key: got %v / created=%v; alone: ErrAlreadyExists / created", res[0].Err, res[1].Created)
	}

	// Store level (CreateJobs, caller-chosen job keys): two requests with one
	// job key, one idempotency key and fingerprint, different instance ids;
	// the first's instance id is taken. Alone: the first is refused, the
	// second created.
	commitOne(t, s, []groupcommit.Request{{Job: withInstance(newJob("v1-s"), "i1")}})
	a := withInstance(newJob("v1-x"), "i1")
	b := withInstance(newJob("v1-x"), "i2")
	res = commitOne(t, s, []groupcommit.Request{{Job: a}, {Job: b}})
	if !errors.Is(res[0].Err, pipeline.ErrAlreadyExists) || res[0].Created || !res[1].Created {
		t.Errorf("one job key, first instance taken: got [created=%v inst=%q err=%v] [created=%v err=%v]; alone: ErrAlreadyExists, created",
			res[0].Created, res[0].Job.InstanceID, res[0].Err, res[1].Created, res[1].Err)
	}
}

// TestCommitGroupMatchesAlone: random groups whose requests collide
// on idempotency keys, instance ids and job keys, within the group and with
// stored jobs, are committed as one group on store g and one request per
// group, in order, on store a. Every answer (created, job, error text) and
// every stored row of the iteration's tenants must agree.
//
// A third of the job keys are chosen by the caller (CreateJobs, the
// conformance suite), the rest are the API's JobKey(tenant, instance). It
// found that a refused request was answered from a row a later request of
// its group inserted (notInserted's later).
func TestCommitGroupMatchesAlone(t *testing.T) {
	t.Parallel()
	iters := 300
	if testing.Short() {
		iters = 60
	}
	rng := rand.New(rand.NewSource(1))
	clock := pipeline.NewManualClock(t0)
	g := openTest(t, "", clock)
	a := openTest(t, "", clock)
	failures := 0
	for it := 0; it < iters && failures < 5; it++ {
		p := fmt.Sprintf("i%d-", it)
		gen := func() pipeline.NewJob {
			tenant := p + "t" + strconv.Itoa(rng.Intn(2))
			inst := "n" + strconv.Itoa(rng.Intn(4))
			id := pipeline.JobKey(tenant, inst)
			if rng.Intn(3) == 0 {
				id = p + "id" + strconv.Itoa(rng.Intn(4)) // a caller-chosen job key
			}
			nj := pipeline.NewJob{
				ID: id, InstanceID: inst, Tenant: tenant, Operation: "render_video",
				IdempotencyKey:     "k" + strconv.Itoa(rng.Intn(4)),
				RequestFingerprint: "f" + strconv.Itoa(rng.Intn(2)),
				Input:              json.RawMessage(`{"n":` + strconv.Itoa(rng.Intn(3)) + `}`),
				Version:            "v1", Queue: "render-v1",
			}
			if rng.Intn(4) == 0 {
				nj.Input = nil
			}
			if rng.Intn(5) == 0 {
				nj.Queue, nj.DeadLetterReason, nj.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
				nj.WebhookURL = "https://example.test/h"
			}
			return nj
		}
		// Stored jobs first, the same on both stores.
		for range rng.Intn(3) {
			nj := gen()
			rg := commitOne(t, g, []groupcommit.Request{{Job: nj}})
			ra := commitOne(t, a, []groupcommit.Request{{Job: nj}})
			if !sameResp(rg[0], ra[0]) {
				t.Fatalf("iteration %d: seeding disagrees: %+v vs %+v", it, rg[0], ra[0])
			}
		}
		n := 1 + rng.Intn(8)
		reqs := make([]groupcommit.Request, n)
		for i := range reqs {
			if i > 0 && rng.Intn(4) == 0 {
				reqs[i].Job = reqs[rng.Intn(i)].Job // an exact repeat
			} else {
				reqs[i].Job = gen()
			}
		}
		group := freshRequests(reqs)
		got := commitOne(t, g, group)
		want := make([]groupcommit.Response, n)
		for i := range reqs {
			want[i] = commitOne(t, a, freshRequests(reqs[i:i+1]))[0]
		}
		bad := false
		for i := range reqs {
			if !sameResp(got[i], want[i]) {
				bad = true
				t.Errorf("iteration %d request %d: group answered created=%v job=%q/%q err=%v; alone created=%v job=%q/%q err=%v",
					it, i, got[i].Created, got[i].Job.ID, got[i].Job.InstanceID, got[i].Err, want[i].Created, want[i].Job.ID, want[i].Job.InstanceID, want[i].Err)
			}
		}
		if dg, da := dumpRows(t, g, p), dumpRows(t, a, p); dg != da {
			bad = true
			t.Errorf("iteration %d: stored rows differ\ngroup:\n%s\nalone:\n%s", it, dg, da)
		}
		if bad {
			failures++
			for i, r := range reqs {
				j := r.Job
				t.Logf("  req %d: id=%s inst=%s tenant=%s key=%s fp=%s dl=%q", i, j.ID, j.InstanceID, j.Tenant, j.IdempotencyKey, j.RequestFingerprint, j.DeadLetterReason)
			}
		}
	}
}

// freshRequests copies reqs' jobs into new requests (commitOne fills in
// the rest).
func freshRequests(reqs []groupcommit.Request) []groupcommit.Request {
	out := make([]groupcommit.Request, len(reqs))
	for i, r := range reqs {
		out[i] = groupcommit.Request{Job: r.Job}
	}
	return out
}

func sameResp(x, y groupcommit.Response) bool {
	if x.Created != y.Created || !reflect.DeepEqual(x.Job, y.Job) {
		return false
	}
	if (x.Err == nil) != (y.Err == nil) {
		return false
	}
	return x.Err == nil || x.Err.Error() == y.Err.Error()
}

// dumpRows renders every row of the jobs of tenants prefixed p, their
// events (per job, in order; event ids left out), messages, dead letters
// and webhooks.
func dumpRows(t *testing.T, s *Store, p string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT ` + jobColumns + ` FROM jobs WHERE tenant LIKE ?1 || '%' ORDER BY id`,
		`SELECT e.job_id, e.at, e.kind, e.from_status, e.to_status, e.attempt_id, e.detail_json FROM job_events e JOIN jobs j ON j.id = e.job_id
			WHERE j.tenant LIKE ?1 || '%' ORDER BY e.job_id, e.id`,
		`SELECT m.queue, m.job_id, m.enqueued_at, m.visible_at, m.delivery_count FROM queue_messages m JOIN jobs j ON j.id = m.job_id
			WHERE j.tenant LIKE ?1 || '%' ORDER BY m.job_id`,
		`SELECT d.job_id, d.queue, d.reason, d.detail, d.dead_lettered_at FROM dead_letters d JOIN jobs j ON j.id = d.job_id
			WHERE j.tenant LIKE ?1 || '%' ORDER BY d.job_id, d.id`,
		`SELECT w.job_id, e.kind, e.to_status, w.url, json_remove(w.payload_json, '$.event_id'), w.status, w.next_attempt_at
			FROM webhook_outbox w JOIN job_events e ON e.id = w.event_id JOIN jobs j ON j.id = w.job_id
			WHERE j.tenant LIKE ?1 || '%' ORDER BY w.job_id, w.id`,
		// Nothing dangling anywhere in the store.
		`SELECT 'event', job_id FROM job_events WHERE job_id NOT IN (SELECT id FROM jobs) AND ?1 = ?1
			UNION ALL SELECT 'message', job_id FROM queue_messages WHERE job_id NOT IN (SELECT id FROM jobs)
			UNION ALL SELECT 'nomessage', id FROM jobs WHERE status = 'pending' AND id NOT IN (SELECT job_id FROM queue_messages)
			UNION ALL SELECT 'nocreated', id FROM jobs WHERE id NOT IN (SELECT job_id FROM job_events WHERE kind = 'created')`,
	} {
		rows, err := rawDB{db: s.read}.Query(context.Background(), q, p)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for _, row := range rows {
			b.WriteString(strings.Join(row, "|"))
			b.WriteByte('\n')
		}
		b.WriteString("--\n")
	}
	return b.String()
}

package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

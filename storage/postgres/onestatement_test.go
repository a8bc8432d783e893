//go:build postgres

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// The one-statement paths (fetchPlain, finishBulkOnly) must write exactly
// what the transactional paths write. Each test below drives two stores on
// two databases through the same steps, one through the one-statement path
// and one through the transaction, and compares every row they wrote.

// weirdOwner needs escaping in JSON, and encoding/json escapes more of it
// than Postgres's to_json would (<, >, &, U+2028): the claim event's detail
// must still be json.Marshal's, byte for byte.
const weirdOwner = "w<&>\"\\\u2028é"

// twin is one of the two stores of a comparison, with its clock.
type twin struct {
	s     *Store
	clock *pipeline.ManualClock
}

func newTwin(t *testing.T) twin {
	clock := pipeline.NewManualClock(t0)
	return twin{s: openTest(t, newDatabase(t), clock), clock: clock}
}

// dump is every row of the tables a claim or a settle writes, as text,
// attempt ids left out (they are random); the job events' detail is kept
// as written (json, not jsonb, so its exact text).
func (tw twin) dump(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT (to_jsonb(j) - 'attempt_id')::text FROM jobs j ORDER BY id`,
		`SELECT (to_jsonb(e) - 'attempt_id' - 'detail_json')::text || ' ' || e.detail_json::text FROM job_events e ORDER BY id`,
		`SELECT to_jsonb(m)::text FROM queue_messages m ORDER BY id`,
		`SELECT to_jsonb(d)::text FROM dead_letters d ORDER BY id`,
		`SELECT to_jsonb(w)::text FROM webhook_outbox w ORDER BY id`,
	} {
		rows, err := tw.s.pool.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		b.WriteString("--\n")
	}
	return b.String()
}

// attemptsAgree checks that every status event names the attempt id its
// job holds or held: the claim's event the job's current attempt when the
// job is still running.
func (tw twin) attemptsAgree(t *testing.T) {
	t.Helper()
	var bad int
	if err := tw.s.pool.QueryRow(context.Background(), `SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id
		WHERE e.kind = 'status' AND e.to_status = 'running' AND j.status = 'running'
		  AND e.id = (SELECT max(id) FROM job_events WHERE job_id = j.id) AND e.attempt_id IS DISTINCT FROM j.attempt_id`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d claim events name another attempt than their job's (%v)", bad, err)
	}
}

func (tw twin) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := tw.s.pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatal(err)
	}
}

func (tw twin) create(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		nj := newJob(id)
		if strings.HasSuffix(id, "-hook") {
			nj.WebhookURL = "https://hooks.example.test/" + id
		}
		if _, _, err := tw.s.CreateJob(context.Background(), nj); err != nil {
			t.Fatal(err)
		}
	}
}

// claim claims one job through the transactional path (a tenant limit
// takes it) and returns it.
func (tw twin) claim(t *testing.T) pipeline.Claimed {
	t.Helper()
	cs, _, err := tw.s.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "setup", Max: 1,
		LeaseFor: time.Minute, TenantMaxRunning: 100})
	if err != nil || len(cs) != 1 {
		t.Fatalf("setup claim: %d, %v", len(cs), err)
	}
	return cs[0]
}

func (tw twin) settleTx(t *testing.T, c pipeline.Claimed, o pipeline.Outcome) {
	t.Helper()
	if err := tw.s.inTx(context.Background(), func(tx pgx.Tx) error { return finishTx(context.Background(), tx, tw.s.now(), c.Lease, o) }); err != nil {
		t.Fatal(err)
	}
}

// claimSummary is what a Fetch returned, attempt ids left out.
func claimSummary(cs []pipeline.Claimed, st pipeline.FetchStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v\n", st)
	for _, c := range cs {
		j := c.Job
		j.AttemptID = ""
		l := c.Lease
		l.AttemptID = ""
		fmt.Fprintf(&b, "%+v %+v msg=%d deliveries=%d\n", j, l, c.MessageID, c.Deliveries)
	}
	return b.String()
}

func TestFetchPlainWritesWhatTriageWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(t *testing.T, tw twin)
		plain bool // fetchPlain claims (rather than leaving it to triage)
	}{
		{"empty queue", func(t *testing.T, tw twin) {}, true},
		{"pending jobs", func(t *testing.T, tw twin) { tw.create(t, "v1-a", "v1-b", "v1-c") }, true},
		{"a lease expired: takeover", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.claim(t)
			tw.clock.Advance(2 * time.Minute)
		}, true},
		{"a retry is due", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.settleTx(t, tw.claim(t), pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(time.Minute),
				ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_timeout"})
			tw.clock.Advance(2 * time.Minute)
		}, true},
		{"running without a lease is skipped", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.exec(t, `UPDATE jobs SET status = 'running', lease_expires_at = NULL WHERE id = 'v1-a'`)
		}, true},
		{"a settled job's message is acked", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b", "v1-c")
			tw.settleTx(t, tw.claim(t), pipeline.Outcome{Status: pipeline.StatusSucceeded})
			tw.exec(t, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ('render-v1', 'v1-a', $1, $1)`, ms(t0))
		}, false},
		{"a job in review: its message is acked", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.settleTx(t, tw.claim(t), pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorCode: "policy"})
			tw.exec(t, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ('render-v1', 'v1-a', $1, $1)`, ms(t0))
		}, false},
		{"a live lease is deferred", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.claim(t)
			tw.exec(t, `UPDATE queue_messages SET visible_at = $1 WHERE job_id = 'v1-a'`, ms(t0))
		}, false},
		{"a retry not yet due is deferred", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b")
			tw.settleTx(t, tw.claim(t), pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: t0.Add(time.Minute),
				ErrorClass: pipeline.ClassTransient, ErrorCode: "provider_timeout"})
			tw.exec(t, `UPDATE queue_messages SET visible_at = $1 WHERE job_id = 'v1-a'`, ms(t0))
		}, false},
		{"a poison message is dead-lettered", func(t *testing.T, tw twin) {
			tw.create(t, "v1-a", "v1-b-hook", "v1-c")
			tw.exec(t, `UPDATE queue_messages SET delivery_count = 3 WHERE job_id = 'v1-b-hook'`) // openTest: MaxDeliveries 3
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plainSide, txSide := newTwin(t), newTwin(t)
			tc.setup(t, plainSide)
			tc.setup(t, txSide)
			p := &pipeline.FetchParams{Queue: "render-v1", Owner: weirdOwner, Max: 10, LeaseFor: time.Minute}
			before := plainSide.dump(t)
			cs, plain, err := plainSide.s.fetchPlain(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if plain != tc.plain {
				t.Fatalf("fetchPlain plain = %v, want %v", plain, tc.plain)
			}
			st := pipeline.FetchStats{Claimed: len(cs)}
			if !plain {
				if len(cs) != 0 || plainSide.dump(t) != before {
					t.Fatalf("fetchPlain left it to triage but claimed %d or wrote", len(cs))
				}
				if cs, st, err = plainSide.s.Fetch(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			tp := *p
			tp.TenantMaxRunning = 100 // takes the transaction, and limits nothing
			tcs, tst, err := txSide.s.Fetch(ctx, &tp)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := claimSummary(cs, st), claimSummary(tcs, tst); got != want {
				t.Errorf("claims differ:\none statement:\n%s\ntransaction:\n%s", got, want)
			}
			if got, want := plainSide.dump(t), txSide.dump(t); got != want {
				t.Errorf("rows differ:\none statement:\n%s\ntransaction:\n%s", got, want)
			}
			plainSide.attemptsAgree(t)
			txSide.attemptsAgree(t)
			for _, c := range cs {
				if c.Lease.AttemptID == "" || c.Lease.AttemptID != c.Job.AttemptID || c.Lease.Owner != weirdOwner {
					t.Errorf("claim %s: lease %+v, job attempt %q", c.Job.ID, c.Lease, c.Job.AttemptID)
				}
			}
		})
	}
}

// A claim's status event carries {attempt, delivery, owner} exactly as
// encoding/json writes that map, on both claim paths.
func TestClaimEventDetailIsJSONMarshal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, limit := range []int{0, 5} {
		t.Run(fmt.Sprint("tenant limit ", limit), func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t)
			tw.create(t, "v1-a")
			tw.exec(t, `UPDATE queue_messages SET delivery_count = 1`)
			cs, _, err := tw.s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: weirdOwner, Max: 5, LeaseFor: time.Minute, TenantMaxRunning: limit})
			if err != nil || len(cs) != 1 {
				t.Fatalf("%d claimed, %v", len(cs), err)
			}
			want, err := json.Marshal(map[string]any{"attempt": 1, "owner": weirdOwner, "delivery": 2})
			if err != nil {
				t.Fatal(err)
			}
			var got, att string
			if err := tw.s.pool.QueryRow(ctx, `SELECT detail_json::text, attempt_id FROM job_events WHERE job_id = 'v1-a' AND to_status = 'running'`).Scan(&got, &att); err != nil {
				t.Fatal(err)
			}
			if got != string(want) || att != cs[0].Lease.AttemptID || cs[0].Deliveries != 2 {
				t.Errorf("detail %s attempt %s deliveries %d; want %s %s 2", got, att, cs[0].Deliveries, want, cs[0].Lease.AttemptID)
			}
		})
	}
}

// Finish and FinishMany through their one-statement path write what
// settle, in a transaction, writes; a job with a webhook, or an outcome
// only settle records in full, takes the transaction.
func TestFinishBulkOnlyWritesWhatSettleWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: "renders/v1/aa/x.mp4"}
	failed := pipeline.Outcome{Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "bad_prompt", ErrorMessage: "refused"}
	review := pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorClass: pipeline.ClassPermanent, ErrorCode: "policy"}
	canceled := pipeline.Outcome{Status: pipeline.StatusCanceled, ErrorClass: pipeline.ClassCanceled, ErrorCode: "canceled", ErrorMessage: "the job was canceled by its owner"}
	infraReview := review
	infraReview.Infra, infraReview.Reason = true, "infra_unavailable"
	cases := []struct {
		name     string
		jobs     []string
		outcomes []pipeline.Outcome
		stale    int  // the attempt whose lease is gone, or -1
		batch    bool // FinishMany rather than Finish per job
		oneStmt  bool // the one-statement path settles it
	}{
		{"succeeded", []string{"v1-a"}, []pipeline.Outcome{ok}, -1, false, true},
		{"failed", []string{"v1-a"}, []pipeline.Outcome{failed}, -1, false, true},
		{"needs review", []string{"v1-a"}, []pipeline.Outcome{review}, -1, false, true},
		{"canceled", []string{"v1-a"}, []pipeline.Outcome{canceled}, -1, false, true},
		{"lease lost", []string{"v1-a"}, []pipeline.Outcome{ok}, 0, false, true},
		{"with a webhook", []string{"v1-a-hook"}, []pipeline.Outcome{ok}, -1, false, false},
		{"what only settle records", []string{"v1-a"}, []pipeline.Outcome{infraReview}, -1, false, false},
		{"a batch", []string{"v1-a", "v1-b", "v1-c", "v1-d"}, []pipeline.Outcome{ok, failed, review, canceled}, 2, true, true},
		{"a batch with a webhook", []string{"v1-a", "v1-b-hook", "v1-c"}, []pipeline.Outcome{ok, failed, ok}, 0, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Every side starts from the same rows: the jobs, each claimed,
			// one of the leases stale, a second later.
			setup := func() (twin, []pipeline.Lease) {
				tw := newTwin(t)
				tw.create(t, tc.jobs...)
				var ls []pipeline.Lease
				for i := range tc.jobs {
					l := tw.claim(t).Lease
					if i == tc.stale {
						l.AttemptID = "att_gone"
					}
					ls = append(ls, l)
				}
				tw.clock.Advance(time.Second)
				return tw, ls
			}
			finished := func(ls []pipeline.Lease) []Finished {
				var fs []Finished
				for i, o := range tc.outcomes {
					fs = append(fs, Finished{Lease: ls[i], Outcome: o})
				}
				return fs
			}
			probe, pl := setup()
			_, done, err := probe.s.finishBulkOnly(ctx, finished(pl))
			if err != nil {
				t.Fatal(err)
			}
			oneStmt := done && (tc.batch || settlesLikeBulk(tc.outcomes[0]))
			if oneStmt != tc.oneStmt {
				t.Fatalf("one statement = %v, want %v", oneStmt, tc.oneStmt)
			}
			oneSide, ol := setup()
			txSide, tl := setup()
			var gotErrs, wantErrs []string
			if tc.batch {
				errs, err := oneSide.s.FinishMany(ctx, finished(ol))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range errs {
					gotErrs = append(gotErrs, fmt.Sprint(e))
				}
			} else {
				for i, o := range tc.outcomes {
					gotErrs = append(gotErrs, fmt.Sprint(oneSide.s.Finish(ctx, ol[i], o)))
				}
			}
			for i, o := range tc.outcomes { // settle, one transaction per job
				err := txSide.s.inTx(ctx, func(tx pgx.Tx) error { return finishTx(ctx, tx, txSide.s.now(), tl[i], o) })
				wantErrs = append(wantErrs, fmt.Sprint(err))
			}
			for i := range gotErrs {
				gotErrs[i] = strings.ReplaceAll(gotErrs[i], ol[i].AttemptID, "ATT")
				wantErrs[i] = strings.ReplaceAll(wantErrs[i], tl[i].AttemptID, "ATT")
			}
			if !slices.Equal(gotErrs, wantErrs) {
				t.Errorf("errors %q, want %q", gotErrs, wantErrs)
			}
			if got, want := oneSide.dump(t), txSide.dump(t); got != want {
				t.Errorf("rows differ:\none statement:\n%s\ntransaction:\n%s", got, want)
			}
		})
	}
}

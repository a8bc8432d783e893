package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// bodyWith is validBody with extra top-level fields.
func bodyWith(fields map[string]any) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(validBody), &m); err != nil {
		panic(err)
	}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// sseIDs returns the event ids of a finished Server-Sent Events body.
func sseIDs(body string) []string {
	var ids []string
	for line := range strings.SplitSeq(body, "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// Issue 12 item 1 (docs/design.md §3): instance ids are unique per tenant.
// acme and globex both submit v1-invoice-2026-0043 and get two jobs; each
// tenant's GET, events, result and cancel see only its own job, and the
// only 409 instance_id_taken comes from a tenant reusing its own id.
func TestInstanceIDsArePerTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const id = "v1-invoice-2026-0043"
	path := "/v1/jobs/" + id
	submitted := map[string]JobResource{}
	for _, tok := range []string{tokAcme, tokGlobex} {
		w := e.submit(t, tok, "invoice-43", bodyWith(map[string]any{"instance_id": id, "webhook_url": "https://hooks.example.com/done"}))
		if w.Code != http.StatusAccepted || w.Header().Get("Location") != path || w.Header().Get(HeaderIdempotentReplayed) != "" {
			t.Fatalf("%s: %d Location %q replayed %q %s", tok, w.Code, w.Header().Get("Location"), w.Header().Get(HeaderIdempotentReplayed), w.Body)
		}
		j := decode[JobResource](t, w)
		if j.ID != id || j.Links.Self != path {
			t.Fatalf("%s: job %+v", tok, j)
		}
		submitted[tok] = j
		e.clock.Advance(time.Second) // acme's job is first in the queue
	}
	acmeKey, globexKey := ak(id), pipeline.JobKey("globex", id)
	for key, tenant := range map[string]string{acmeKey: "acme", globexKey: "globex"} {
		if j, err := e.store.GetJob(ctx, key); err != nil || j.Tenant != tenant || j.InstanceID != id {
			t.Fatalf("%s's job %s: %+v, %v", tenant, key, j, err)
		}
	}
	// Same tenant, same id, another key: taken.
	if w := e.submit(t, tokAcme, "invoice-43-again", withField("instance_id", id)); w.Code != http.StatusConflict || problemOf(t, w).Code != "instance_id_taken" {
		t.Fatalf("acme reusing its id: %d %s", w.Code, w.Body)
	}

	// acme's job succeeds; globex's is still pending.
	c := e.claim(t, "render-v1")
	if c.Job.ID != acmeKey {
		t.Fatalf("claimed %s, want acme's %s", c.Job.ID, acmeKey)
	}
	e.succeed(t, c, []byte("acme's film"))
	own := func(tok string) JobResource { return decode[JobResource](t, e.get(t, tok, path)) }
	if a, g := own(tokAcme), own(tokGlobex); a.Status != pipeline.StatusSucceeded || a.Result == nil || g.Status != pipeline.StatusPending || g.Result != nil {
		t.Fatalf("GET: acme %s %+v, globex %s %+v", a.Status, a.Result, g.Status, g.Result)
	}
	if w := e.get(t, tokAcme, path+"/result"); w.Code != http.StatusOK || w.Body.String() != "acme's film" ||
		!strings.Contains(w.Header().Get("Content-Disposition"), `filename="`+id+`.mp4"`) {
		t.Fatalf("acme's result: %d %v %q", w.Code, w.Header(), w.Body)
	}
	if w := e.get(t, tokGlobex, path+"/result"); w.Code != http.StatusConflict || problemOf(t, w).Code != "result_not_ready" {
		t.Fatalf("globex's result: %d %s", w.Code, w.Body)
	}
	// Cancel: globex's job is canceled, acme's succeeded one refuses.
	cancel := func(tok string) *httptest.ResponseRecorder {
		return e.do(t, req{method: http.MethodPost, path: path + "/cancellation", hdr: map[string]string{"Authorization": "Bearer " + tok}})
	}
	if w := cancel(tokGlobex); w.Code != http.StatusAccepted || decode[JobResource](t, w).Status != pipeline.StatusCanceled {
		t.Fatalf("globex's cancel: %d %s", w.Code, w.Body)
	}
	if w := cancel(tokAcme); w.Code != http.StatusConflict || problemOf(t, w).Code != "job_terminal" {
		t.Fatalf("acme's cancel of its succeeded job: %d %s", w.Code, w.Body)
	}
	if a := own(tokAcme); a.Status != pipeline.StatusSucceeded {
		t.Fatalf("acme's job after globex's cancel: %s", a.Status)
	}
	// Events: both jobs are settled, so each stream ends by itself; each
	// carries exactly its own job's log and never an internal key.
	for tok, key := range map[string]string{tokAcme: acmeKey, tokGlobex: globexKey} {
		w := e.get(t, tok, path+"/events")
		log, err := e.store.Events(ctx, key, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, ev := range log {
			want = append(want, fmt.Sprint(ev.ID))
		}
		if got := sseIDs(w.Body.String()); w.Code != http.StatusOK || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s's events: %d ids %v, want %v", tok, w.Code, got, want)
		}
		if strings.Contains(w.Body.String(), pipeline.JobKeySeparator) {
			t.Fatalf("%s's events leak an internal key: %s", tok, w.Body)
		}
	}
	// Webhooks name the job by the id its owner knows.
	for _, key := range []string{acmeKey, globexKey} {
		ds, err := e.store.WebhookDeliveries(ctx, key)
		if err != nil || len(ds) != 1 {
			t.Fatalf("%s: deliveries %+v, %v", key, ds, err)
		}
		var p struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(ds[0].Payload, &p); err != nil || p.JobID != id {
			t.Fatalf("%s: webhook payload %s, want job_id %s", key, ds[0].Payload, id)
		}
	}
	// Listings show each tenant its own job, by the id it knows.
	for _, tok := range []string{tokAcme, tokGlobex} {
		l := decode[JobList](t, e.get(t, tok, "/v1/jobs"))
		if len(l.Jobs) != 1 || l.Jobs[0].ID != id || l.Jobs[0].Status != own(tok).Status {
			t.Fatalf("%s's listing: %+v", tok, l.Jobs)
		}
	}
	// A listing's cursor carries the id the tenant knows, never a key.
	if w := e.submit(t, tokAcme, "invoice-44", withField("instance_id", "v1-invoice-2026-0044")); w.Code != http.StatusAccepted {
		t.Fatalf("second acme job: %d %s", w.Code, w.Body)
	}
	var pages []string
	cursor := ""
	for range 3 {
		l := decode[JobList](t, e.get(t, tokAcme, "/v1/jobs?limit=1"+cursor))
		for _, j := range l.Jobs {
			pages = append(pages, j.ID)
		}
		if l.NextCursor == nil {
			break
		}
		raw, err := cursorEncoding.DecodeString(*l.NextCursor)
		if err != nil || strings.Contains(string(raw), pipeline.JobKeySeparator) || !strings.HasSuffix(string(raw), "."+pages[len(pages)-1]) {
			t.Fatalf("cursor %q (%q, %v) after %v", *l.NextCursor, raw, err, pages)
		}
		cursor = "&cursor=" + *l.NextCursor
	}
	if strings.Join(pages, ",") != "v1-invoice-2026-0044,"+id {
		t.Fatalf("acme's pages: %v", pages)
	}
}

// requestID and event ids differ between any two calls or jobs; they say
// nothing about who holds an id.
var (
	requestID = regexp.MustCompile(`"request_id":"[^"]*"`)
	eventID   = regexp.MustCompile(`(?m)^id: [0-9]+$|"id":[0-9]+`)
)

// answer is a response with the id it was about replaced, for comparison.
func answer(w *httptest.ResponseRecorder, id string) string {
	h := w.Header().Clone()
	h.Del("X-Request-Id")
	hb, _ := json.Marshal(h)
	body := requestID.ReplaceAllString(w.Body.String(), `"request_id":"-"`)
	body = eventID.ReplaceAllString(body, "<event id>")
	return strings.ReplaceAll(fmt.Sprintf("%d %s %s", w.Code, hb, body), id, "<id>")
}

// No answer depends on whether another tenant holds an id: for globex, an
// id only acme uses answers exactly like one nobody ever used — GET,
// events, result and cancel before submitting, the submission itself, and
// everything after it.
func TestAnotherTenantsIDAnswersLikeAnUnusedOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const held, fresh = "v1-only-acme", "v1-never-used"
	if w := e.submit(t, tokAcme, "acme-key", withField("instance_id", held)); w.Code != http.StatusAccepted {
		t.Fatalf("acme: %d %s", w.Code, w.Body)
	}
	// Settled, so that an events stream wrongly given to globex would end
	// (and show) instead of waiting for more.
	if w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs/" + held + "/cancellation", hdr: map[string]string{"Authorization": "Bearer " + tokAcme}}); w.Code != http.StatusAccepted {
		t.Fatalf("acme's cancel: %d %s", w.Code, w.Body)
	}
	acmeLog, err := e.store.Events(context.Background(), ak(held), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name   string
		method string
		suffix string
	}{
		{"GET", http.MethodGet, ""},
		{"events", http.MethodGet, "/events"},
		{"result", http.MethodGet, "/result"},
		{"cancel", http.MethodPost, "/cancellation"},
	}
	compare := func(stage string, names ...string) {
		t.Helper()
		for _, c := range calls {
			if len(names) > 0 && !strings.Contains(strings.Join(names, ","), c.name) {
				continue
			}
			var got [2]string
			for i, id := range []string{held, fresh} {
				w := e.do(t, req{method: c.method, path: "/v1/jobs/" + id + c.suffix, hdr: map[string]string{"Authorization": "Bearer " + tokGlobex}})
				got[i] = answer(w, id)
			}
			if got[0] != got[1] {
				t.Errorf("%s, %s: acme's id answers\n  %s\nan unused id answers\n  %s", stage, c.name, got[0], got[1])
			}
		}
	}
	compare("before submitting")
	var subs [2]string
	for i, id := range []string{held, fresh} {
		// The same key for both would be a replay of the first; each id
		// gets its own key, named after neither.
		w := e.submit(t, tokGlobex, fmt.Sprintf("globex-key-%d", i), withField("instance_id", id))
		subs[i] = answer(w, id)
		if w.Code != http.StatusAccepted {
			t.Fatalf("globex submitting %s: %d %s", id, w.Code, w.Body)
		}
	}
	if subs[0] != subs[1] {
		t.Errorf("submission: acme's id answers\n  %s\nan unused id answers\n  %s", subs[0], subs[1])
	}
	compare("after submitting", "GET", "result") // pending: a stream would stay open
	compare("cancel", "cancel")
	compare("after cancel", "GET", "events", "result")
	// acme's job was never touched by any of it.
	if after, err := e.store.Events(context.Background(), ak(held), 0, 0); err != nil || len(after) != len(acmeLog) {
		t.Fatalf("acme's job has %d events, had %d (%v)", len(after), len(acmeLog), err)
	}
}

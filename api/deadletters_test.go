package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

func basicJSON(user, method, path, body string) req {
	return req{method: method, path: path, body: body,
		hdr: map[string]string{"Authorization": basic(user, tokAdmin), "Content-Type": "application/json"}}
}

func adminForm(path string, v url.Values) req {
	return req{method: http.MethodPost, path: path, body: v.Encode(),
		hdr: map[string]string{"Authorization": basic("alice", tokAdmin), "Content-Type": "application/x-www-form-urlencoded"}}
}

// Issue 12 item 9: a decision is recorded on the job — what, who, why,
// when — and shown on the job resource (the owner's and the operator's)
// and on /admin; a failed job no longer reads as waiting for a decision.
func TestDecisionRecordedOnTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	if w := e.get(t, tokAcme, "/v1/jobs/"+j.ID); !strings.Contains(w.Body.String(), `"decision":null`) {
		t.Fatalf("a job without a decision: %s", w.Body)
	}
	e.toReview(t, e.claim(t, "render-v1"))
	path := "/v1/admin/jobs/" + ak(j.ID) + "/decision"
	for _, tc := range []struct{ body, field string }{
		{`{"decision":"fail","reason":" padded"}`, "reason"},
		{`{"decision":"fail","reason":"two\nlines"}`, "reason"},
		{`{"decision":"fail","reason":"` + strings.Repeat("x", pipeline.MaxOperatorReason+1) + `"}`, "reason"},
		{`{"decision":"fail","reason":7}`, "reason"},
		{`{"decision":"maybe","reason":"ok"}`, "decision"},
	} {
		w := e.do(t, adminJSON(http.MethodPost, path, tc.body))
		if w.Code != http.StatusBadRequest || !hasField(problemOf(t, w), tc.field) {
			t.Fatalf("%.60s: %d %s", tc.body, w.Code, w.Body)
		}
	}
	e.clock.Advance(time.Minute)
	w := e.do(t, basicJSON("alice", http.MethodPost, path, `{"decision":"fail","reason":"billed twice by the provider, refunded"}`))
	if w.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", w.Code, w.Body)
	}
	a := decode[AdminJob](t, w)
	want := Decision{Decision: pipeline.DecisionFail, Operator: "alice", Reason: "billed twice by the provider, refunded", At: e.clock.Now()}
	if a.Decision == nil || *a.Decision != want {
		t.Fatalf("decision on the admin job: %+v, want %+v", a.Decision, want)
	}
	if a.Status != pipeline.StatusFailed || a.RequiresAction || a.Error == nil ||
		a.Error.Message != "failed by operator alice: billed twice by the provider, refunded" {
		t.Fatalf("failed job: %s requires_action=%v error=%+v", a.Status, a.RequiresAction, a.Error)
	}
	// The owner sees it too.
	own := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+j.ID))
	if own.Decision == nil || *own.Decision != want || own.Error.Message != a.Error.Message {
		t.Fatalf("owner's view: %+v %+v", own.Decision, own.Error)
	}
	// The decision event carries the reason.
	evs, _ := e.store.Events(context.Background(), ak(j.ID), 0, 0)
	found := false
	for _, ev := range evs {
		found = found || ev.Kind == pipeline.EventDecision && strings.Contains(string(ev.Detail), `"reason":"billed twice by the provider, refunded"`)
	}
	if !found {
		t.Fatal("no decision event with the reason")
	}

	// The page's form sends a reason too, and the page shows the decisions.
	j2 := e.mustSubmit(t, tokAcme, "k2")
	e.toReview(t, e.claim(t, "render-v1"))
	w = e.do(t, adminForm("/v1/admin/jobs/"+ak(j2.ID)+"/decision", url.Values{"csrf": {e.srv.csrf}, "decision": {"retry"}, "reason": {"provider confirmed no charge"}}))
	if w.Code != http.StatusSeeOther {
		t.Fatalf("form: %d %s", w.Code, w.Body)
	}
	if got, _ := e.store.GetJob(context.Background(), ak(j2.ID)); got.Decision.Reason != "provider confirmed no charge" || got.Decision.Kind != pipeline.DecisionRetry {
		t.Fatalf("form decision: %+v", got.Decision)
	}
	page := e.do(t, req{method: http.MethodGet, path: "/admin", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}}).Body.String()
	for _, s := range []string{"Latest operator decisions", j.ID, "billed twice by the provider, refunded", j2.ID, "provider confirmed no charge", "alice", `name="reason"`} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// deadLetterEnv serves v1 only, so v2 and v3 jobs are dead-lettered at
// submission; bindV2 then swaps in a server that also binds v2, as a
// redeploy would.
func deadLetterEnv(t *testing.T) *testEnv {
	t.Helper()
	b, _ := routing.NewBindings("v1")
	r, _ := routing.NewRouter(routing.Config{Bindings: b})
	return newEnv(t, func(c *Config) { c.Router = r })
}

func (e *testEnv) bindV2(t *testing.T) {
	t.Helper()
	b, _ := routing.NewBindings("v1", "v2")
	r, _ := routing.NewRouter(routing.Config{Bindings: b})
	srv, err := New(Config{Store: e.store, Objects: e.objects, Router: r, AdminToken: tokAdmin, Clock: e.clock,
		Tokens: map[string]string{tokAcme: "acme", tokGlobex: "globex"}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.srv, e.h = srv, srv.Handler()
}

func (e *testEnv) deadLetterOf(t *testing.T, jobID string) DeadLetter {
	t.Helper()
	l := decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters?include_redriven=true", "")))
	for _, d := range l.DeadLetters {
		if d.InstanceID == jobID {
			return d
		}
	}
	t.Fatalf("no dead letter for %s in %+v", jobID, l.DeadLetters)
	return DeadLetter{}
}

// Issue 12 item 10: a dead letter can be discarded with a reason; the job
// stays dead_lettered, the discard is audited, the dead letter leaves the
// open list and "needs you", and it can be settled only once.
func TestDiscardDeadLetter(t *testing.T) {
	t.Parallel()
	e := deadLetterEnv(t)
	e.submit(t, tokAcme, "k1", withField("instance_id", "v2-gone"))
	e.submit(t, tokAcme, "k2", withField("instance_id", "v2-kept"))
	e.submit(t, tokAcme, "k3", withField("instance_id", "v2-back"))
	d := e.deadLetterOf(t, "v2-gone")
	if d.DiscardedAt != nil || d.Tenant != "acme" || d.Version != "v2" {
		t.Fatalf("open dead letter: %+v", d)
	}
	path := "/v1/admin/dead-letters/" + strconv.FormatInt(d.ID, 10) + "/discard"
	for _, body := range []string{`{}`, `{"reason":""}`, `{"reason":"x","extra":1}`, `{"reason":"tab\there"}`} {
		if w := e.do(t, adminJSON(http.MethodPost, path, body)); w.Code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	if w := e.do(t, req{method: http.MethodPost, path: path, body: "reason=x", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": "text/plain"}}); w.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d", w.Code)
	}
	e.clock.Advance(time.Minute)
	w := e.do(t, basicJSON("alice", http.MethodPost, path, `{"reason":"customer withdrew the order"}`))
	if w.Code != http.StatusOK {
		t.Fatalf("discard: %d %s", w.Code, w.Body)
	}
	got := decode[DeadLetter](t, w)
	if got.DiscardedAt == nil || !got.DiscardedAt.Equal(e.clock.Now()) || got.DiscardedBy != "alice" || got.DiscardReason != "customer withdrew the order" || got.RedrivenAt != nil {
		t.Fatalf("discarded: %+v", got)
	}
	j, _ := e.store.GetJob(context.Background(), ak("v2-gone"))
	if j.Status != pipeline.StatusDeadLettered || j.RequiresAction {
		t.Fatalf("job after discard: %s requires_action=%v", j.Status, j.RequiresAction)
	}
	evs, _ := e.store.Events(context.Background(), ak("v2-gone"), 0, 0)
	if last := evs[len(evs)-1]; last.Kind != pipeline.EventDeadLetterDiscarded || !strings.Contains(string(last.Detail), `"operator":"alice"`) {
		t.Fatalf("audit event: %+v %s", last, last.Detail)
	}
	// Settled once: neither a second discard nor a redrive (even once bound).
	if w := e.do(t, adminJSON(http.MethodPost, path, `{"reason":"again"}`)); w.Code != http.StatusConflict || problemOf(t, w).Code != "dead_letter_settled" {
		t.Fatalf("second discard: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/999/discard", `{"reason":"x"}`)); w.Code != http.StatusNotFound {
		t.Fatalf("missing: %d", w.Code)
	}
	open := decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters", "")))
	if len(open.DeadLetters) != 2 || open.DeadLetters[0].InstanceID != "v2-back" || open.DeadLetters[1].InstanceID != "v2-kept" {
		t.Fatalf("open after discard: %+v", open.DeadLetters)
	}
	if l := decode[AdminJobList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs", ""))); len(l.Jobs) != 2 || l.Jobs[0].InstanceID == "v2-gone" || l.Jobs[1].InstanceID == "v2-gone" {
		t.Fatalf("jobs needing action: %+v", l.Jobs)
	}
	page := e.do(t, req{method: http.MethodGet, path: "/admin", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}}).Body.String()
	if !strings.Contains(page, "2 items need you") || !strings.Contains(page, "discarded by alice") || !strings.Contains(page, "customer withdrew the order") {
		t.Fatalf("page after discard:\n%s", page)
	}
	e.bindV2(t)
	if w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/"+strconv.FormatInt(d.ID, 10)+"/redrive", `{}`)); w.Code != http.StatusConflict {
		t.Fatalf("redrive of a discarded dead letter: %d %s", w.Code, w.Body)
	}
	// The page's discard button.
	kept := e.deadLetterOf(t, "v2-kept")
	w = e.do(t, adminForm("/v1/admin/dead-letters/"+strconv.FormatInt(kept.ID, 10)+"/discard", url.Values{"csrf": {e.srv.csrf}, "reason": {"duplicate"}}))
	if w.Code != http.StatusSeeOther {
		t.Fatalf("form discard: %d %s", w.Code, w.Body)
	}
	w = e.do(t, req{method: http.MethodGet, path: w.Header().Get("Location"), hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}})
	if !strings.Contains(w.Body.String(), fmt.Sprintf("Dead letter %d: discarded.", kept.ID)) || !strings.Contains(w.Body.String(), "1 item needs you") {
		t.Fatalf("after the form: %s", w.Body)
	}
	// A redriven one cannot be discarded.
	back := e.deadLetterOf(t, "v2-back")
	if w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/"+strconv.FormatInt(back.ID, 10)+"/redrive", `{}`)); w.Code != http.StatusOK {
		t.Fatalf("redrive: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/"+strconv.FormatInt(back.ID, 10)+"/discard", `{"reason":"x"}`)); w.Code != http.StatusConflict {
		t.Fatalf("discard of a redriven dead letter: %d %s", w.Code, w.Body)
	}
}

// Issue 12 item 10: bulk redrive and discard by reason, version, tenant
// and age answer how many and which; unbound versions are skipped, a dry
// run changes nothing, and a filter is required.
func TestBulkDeadLetters(t *testing.T) {
	t.Parallel()
	e := deadLetterEnv(t)
	for _, s := range []struct{ tok, key, id string }{
		{tokAcme, "a1", "v2-a1"}, {tokGlobex, "g1", "v2-g1"}, {tokAcme, "a2", "v3-a2"}, {tokAcme, "a3", "v2-a3"}, {tokGlobex, "g2", "v3-g2"},
	} {
		if w := e.submit(t, s.tok, s.key, withField("instance_id", s.id)); w.Code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", s.id, w.Code, w.Body)
		}
		e.clock.Advance(24 * time.Hour)
	}
	e.bindV2(t) // v3 stays unbound
	bulk := func(action, body string) DeadLetterBulkResult {
		t.Helper()
		w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/"+action, body))
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", action, body, w.Code, w.Body)
		}
		return decode[DeadLetterBulkResult](t, w)
	}
	jobs := func(r DeadLetterBulkResult) string {
		var out []string
		for _, it := range r.Items {
			s := it.InstanceID + ":" + it.Outcome
			if it.Code != "" {
				s += "/" + it.Code
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	}

	for _, action := range []string{"redrive", "discard"} {
		w := e.do(t, req{method: http.MethodPost, path: "/v1/admin/dead-letters/" + action, body: "filter_tenant=acme",
			hdr: map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": "text/plain"}})
		if w.Code != http.StatusUnsupportedMediaType {
			t.Fatalf("text/plain bulk %s: %d", action, w.Code)
		}
	}
	for _, tc := range []struct{ action, body, field string }{
		{"redrive", `{}`, "filter"},
		{"redrive", `{"filter":{}}`, "filter"},
		{"redrive", `{"filter":{"reason":"bored"}}`, "filter.reason"},
		{"redrive", `{"filter":{"version":"V2"}}`, "filter.version"},
		{"redrive", `{"filter":{"older_than":"soon"}}`, "filter.older_than"},
		{"redrive", `{"filter":{"tenant":"acme"},"limit":501}`, "limit"},
		{"redrive", `{"filter":{"tenant":"acme"},"reason":"why"}`, "reason"},
		{"redrive", `{"filter":{"tenant":"acme","colour":"red"}}`, "filter.colour"},
		{"discard", `{"filter":{"tenant":"acme"}}`, "reason"},
	} {
		w := e.do(t, adminJSON(http.MethodPost, "/v1/admin/dead-letters/"+tc.action, tc.body))
		if w.Code != http.StatusBadRequest || !hasField(problemOf(t, w), tc.field) {
			t.Fatalf("%s %s: %d %s", tc.action, tc.body, w.Code, w.Body)
		}
	}

	// A dry run says what would happen and changes nothing.
	r := bulk("redrive", `{"filter":{"tenant":"acme"},"dry_run":true}`)
	if !r.DryRun || r.Matched != 3 || r.Done != 2 || r.Skipped != 1 || r.More ||
		jobs(r) != "v2-a1:would_redrive,v3-a2:skipped/version_unbound,v2-a3:would_redrive" {
		t.Fatalf("dry run: %+v", r)
	}
	if n := len(decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters", ""))).DeadLetters); n != 5 {
		t.Fatalf("dry run changed something: %d open", n)
	}
	// By reason and age (older than 49h: the first three submitted),
	// with a limit: oldest first, and more to do.
	r = bulk("redrive", `{"filter":{"reason":"unbound_version","older_than":"49h"},"limit":2}`)
	if r.Action != "redrive" || r.Matched != 2 || r.Done != 2 || !r.More || jobs(r) != "v2-a1:redriven,v2-g1:redriven" {
		t.Fatalf("redrive by age: %+v", r)
	}
	for _, id := range []string{ak("v2-a1"), pipeline.JobKey("globex", "v2-g1")} {
		if j, _ := e.store.GetJob(context.Background(), id); j.Status != pipeline.StatusPending || j.Queue != "render-v2" {
			t.Fatalf("%s after bulk redrive: %s %s", id, j.Status, j.Queue)
		}
	}
	r = bulk("redrive", `{"filter":{"older_than":"49h"}}`)
	if r.Matched != 1 || r.Done != 0 || r.Skipped != 1 || jobs(r) != "v3-a2:skipped/version_unbound" {
		t.Fatalf("unbound: %+v", r)
	}
	// By version: discard every v3 dead letter.
	r = bulk("discard", `{"filter":{"version":"v3"},"reason":"v3 was never released"}`)
	if r.Action != "discard" || r.Matched != 2 || r.Done != 2 || jobs(r) != "v3-a2:discarded,v3-g2:discarded" {
		t.Fatalf("discard by version: %+v", r)
	}
	if j, _ := e.store.GetJob(context.Background(), pipeline.JobKey("globex", "v3-g2")); j.Status != pipeline.StatusDeadLettered {
		t.Fatalf("discarded job: %s", j.Status)
	}
	// Nothing left to match is an empty answer, not an error.
	if r = bulk("discard", `{"filter":{"version":"v3"},"reason":"again"}`); r.Matched != 0 || len(r.Items) != 0 {
		t.Fatalf("nothing left: %+v", r)
	}
	// The page's bulk form: older_than "0s" selects every open one.
	w := e.do(t, adminForm("/v1/admin/dead-letters/redrive", url.Values{"csrf": {e.srv.csrf}, "filter_older_than": {"0s"}}))
	if w.Code != http.StatusSeeOther {
		t.Fatalf("bulk form: %d %s", w.Code, w.Body)
	}
	if loc, _ := url.QueryUnescape(w.Header().Get("Location")); !strings.Contains(loc, "Redrove 1 dead letters; skipped 0.") {
		t.Fatalf("bulk form went to %s", loc)
	}
	if j, _ := e.store.GetJob(context.Background(), ak("v2-a3")); j.Status != pipeline.StatusPending {
		t.Fatalf("v2-a3 after the form: %s", j.Status)
	}
	w = e.do(t, adminForm("/v1/admin/dead-letters/discard", url.Values{"csrf": {e.srv.csrf}, "filter_tenant": {"acme"}, "reason": {"x"}, "dry_run": {"true"}}))
	if loc, _ := url.QueryUnescape(w.Header().Get("Location")); w.Code != http.StatusSeeOther || !strings.Contains(loc, "Would discard 0 dead letters; skipped 0.") {
		t.Fatalf("bulk discard form: %d %s", w.Code, loc)
	}
	page := e.do(t, req{method: http.MethodGet, path: "/admin", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}}).Body.String()
	for _, s := range []string{`action="/v1/admin/dead-letters/redrive"`, `formaction="/v1/admin/dead-letters/discard"`, "Recently settled dead letters", "v3 was never released", "redriven to"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

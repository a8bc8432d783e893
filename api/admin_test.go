package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name   string
		auth   string
		status int
	}{
		{"bearer", "Bearer " + tokAdmin, 200},
		{"basic with user", basic("alice", tokAdmin), 200},
		{"basic without user", basic("", tokAdmin), 200},
		{"nothing", "", 401},
		{"tenant token", "Bearer " + tokAcme, 401},
		{"wrong bearer", "Bearer " + tokAdmin + "x", 401},
		{"basic wrong password", basic("alice", "nope"), 401},
		{"token as basic user", basic(tokAdmin, ""), 401},
	}
	for _, path := range []string{"/v1/admin/jobs", "/v1/admin/dead-letters", "/admin"} {
		for _, tc := range cases {
			h := map[string]string{}
			if tc.auth != "" {
				h["Authorization"] = tc.auth
			}
			w := e.do(t, req{method: http.MethodGet, path: path, hdr: h})
			if w.Code != tc.status {
				t.Fatalf("%s %s: %d, want %d", path, tc.name, w.Code, tc.status)
			}
			if w.Code == 401 {
				if p := problemOf(t, w); p.Code != "unauthorized" || !strings.Contains(strings.Join(w.Header().Values("WWW-Authenticate"), " "), "Basic") {
					t.Fatalf("%s %s: %+v %v", path, tc.name, p, w.Header())
				}
			}
		}
	}
	// Without an admin token the operator API is off, whatever is sent.
	off := newEnv(t, func(c *Config) { c.AdminToken = "" })
	w := off.do(t, req{method: http.MethodGet, path: "/v1/admin/jobs", hdr: map[string]string{"Authorization": "Bearer "}})
	if w.Code != http.StatusForbidden || problemOf(t, w).Code != "admin_disabled" {
		t.Fatalf("disabled: %d %s", w.Code, w.Body)
	}
}

func adminJSON(method, path, body string) req {
	h := map[string]string{"Authorization": "Bearer " + tokAdmin}
	if body != "" {
		h["Content-Type"] = "application/json"
	}
	return req{method: method, path: path, body: body, hdr: h}
}

func TestAdminJobsAndDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	e.toReview(t, e.claim(t, "render-v1"))
	other := e.mustSubmit(t, tokGlobex, "k1") // pending: needs nobody

	l := decode[AdminJobList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs", "")))
	if len(l.Jobs) != 1 {
		t.Fatalf("jobs needing action: %+v", l.Jobs)
	}
	a := l.Jobs[0]
	if a.ID != ak(j.ID) || a.JobID != a.ID || a.InstanceID != j.ID || a.Links.Self != "/v1/jobs/"+j.ID || a.Tenant != "acme" || a.ErrorClass != pipeline.ClassAmbiguous || a.HasResult ||
		a.Error == nil || a.Error.Code != "provider_timeout" || a.Attempts != 1 || a.Status != pipeline.StatusNeedsReview {
		t.Fatalf("admin job %+v", a)
	}

	path := "/v1/admin/jobs/" + ak(j.ID) + "/decision"
	for body, field := range map[string]string{`{"decision":"maybe"}`: "decision", `{}`: "decision", `{"decision":"retry","x":1}`: "x", `{"decision":"retry","decision":"fail"}`: "decision", `{"decision":7}`: "decision", `nope`: "body"} {
		w := e.do(t, adminJSON(http.MethodPost, path, body))
		if w.Code != 400 || !hasField(problemOf(t, w), field) {
			t.Fatalf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	w := e.do(t, req{method: http.MethodPost, path: path, body: "decision=retry", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": "text/plain"}})
	if w.Code != 415 {
		t.Fatalf("text/plain decision: %d", w.Code)
	}
	w = e.do(t, adminJSON(http.MethodPost, path, `{"decision":"retry"}`))
	if w.Code != 200 || decode[AdminJob](t, w).Status != pipeline.StatusPending {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	// Not in needs_review any more: 409, and a pending job of another
	// tenant cannot be decided either.
	for _, id := range []string{ak(j.ID), pipeline.JobKey("globex", other.ID)} {
		w = e.do(t, adminJSON(http.MethodPost, "/v1/admin/jobs/"+id+"/decision", `{"decision":"fail"}`))
		if w.Code != http.StatusConflict || problemOf(t, w).Code != "invalid_transition" {
			t.Fatalf("decide %s: %d %s", id, w.Code, w.Body)
		}
	}
	if w = e.do(t, adminJSON(http.MethodPost, "/v1/admin/jobs/v1-missing/decision", `{"decision":"fail"}`)); w.Code != 404 {
		t.Fatalf("missing: %d", w.Code)
	}
	if l := decode[AdminJobList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs", ""))); len(l.Jobs) != 0 {
		t.Fatalf("still listed after the decision: %+v", l.Jobs)
	}
	// The decision is in the job's history under the operator's name.
	evs, _ := e.store.Events(context.Background(), ak(j.ID), 0, 0)
	if !strings.Contains(string(evs[len(evs)-2].Detail), `"operator":"admin"`) {
		t.Fatalf("decision event %s", evs[len(evs)-2].Detail)
	}
}

func TestAdminRedrive(t *testing.T) {
	t.Parallel()
	// This deployment serves v1 only; a v2 job is dead-lettered at submission.
	b, _ := routing.NewBindings("v1")
	r, _ := routing.NewRouter(routing.Config{Bindings: b})
	e := newEnv(t, func(c *Config) { c.Router = r })
	e.submit(t, tokAcme, "k1", withField("instance_id", "v2-later"))
	dls := decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters", "")))
	if len(dls.DeadLetters) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	d := dls.DeadLetters[0]
	if d.JobID != ak("v2-later") || d.InstanceID != "v2-later" || d.Reason != pipeline.ReasonUnboundVersion || d.Queue != "render-v2" || d.Bound || d.RedrivenAt != nil {
		t.Fatalf("dead letter %+v", d)
	}
	path := "/v1/admin/dead-letters/" + strconv.FormatInt(d.ID, 10) + "/redrive"
	// Still unbound: refused, nothing changes.
	w := e.do(t, adminJSON(http.MethodPost, path, `{}`))
	if w.Code != http.StatusConflict || problemOf(t, w).Code != "version_unbound" {
		t.Fatalf("unbound redrive: %d %s", w.Code, w.Body)
	}
	if j, _ := e.store.GetJob(context.Background(), ak("v2-later")); j.Status != pipeline.StatusDeadLettered {
		t.Fatalf("job moved: %s", j.Status)
	}
	// The operator binds v2 (a new deployment) and redrives: the job goes to
	// its own version's queue.
	r2, _ := routing.NewRouter(routing.Config{})
	srv, err := New(Config{Store: e.store, Objects: e.objects, Router: r2, AdminToken: tokAdmin})
	if err != nil {
		t.Fatal(err)
	}
	e.h = srv.Handler()
	// The body is optional, but a body that is neither JSON nor the page's
	// form is still refused, and so is a bodiless post from another site.
	w = e.do(t, req{method: http.MethodPost, path: path, body: "x", hdr: map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": "text/plain"}})
	if w.Code != 415 {
		t.Fatalf("text/plain redrive: %d %s", w.Code, w.Body)
	}
	w = e.do(t, req{method: http.MethodPost, path: path, hdr: map[string]string{"Authorization": basic("op", tokAdmin), "Origin": "https://evil.example"}})
	if w.Code != 415 {
		t.Fatalf("cross-site bodiless redrive: %d %s", w.Code, w.Body)
	}
	if j, _ := e.store.GetJob(context.Background(), ak("v2-later")); j.Status != pipeline.StatusDeadLettered {
		t.Fatalf("a refused redrive moved the job: %s", j.Status)
	}
	// No body and no Content-Type at all (curl -X POST): accepted.
	w = e.do(t, req{method: http.MethodPost, path: path, hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}})
	if w.Code != 200 || decode[AdminJob](t, w).Status != pipeline.StatusPending {
		t.Fatalf("bodiless redrive: %d %s", w.Code, w.Body)
	}
	if total, _, _ := e.store.QueueDepth(context.Background(), "render-v2"); total != 1 {
		t.Fatalf("render-v2 has %d messages", total)
	}
	// Once only.
	if w = e.do(t, adminJSON(http.MethodPost, path, `{}`)); w.Code != http.StatusConflict {
		t.Fatalf("second redrive: %d %s", w.Code, w.Body)
	}
	all := decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters?include_redriven=true", "")))
	if len(all.DeadLetters) != 1 || all.DeadLetters[0].RedrivenAt == nil || all.DeadLetters[0].RedrivenToQueue != "render-v2" {
		t.Fatalf("redriven dead letter %+v", all)
	}
	if open := decode[DeadLetterList](t, e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters", ""))); len(open.DeadLetters) != 0 {
		t.Fatalf("still open: %+v", open)
	}
	for _, p := range []string{"/v1/admin/dead-letters/999/redrive", "/v1/admin/dead-letters/x/redrive", "/v1/admin/dead-letters/0/redrive"} {
		if w = e.do(t, adminJSON(http.MethodPost, p, `{}`)); w.Code != 404 {
			t.Fatalf("%s: %d", p, w.Code)
		}
	}
	for _, q := range []string{"?include_redriven=maybe", "?after=x", "?limit=0", "?limit=1000"} {
		if w = e.do(t, adminJSON(http.MethodGet, "/v1/admin/dead-letters"+q, "")); w.Code != 400 {
			t.Fatalf("%s: %d", q, w.Code)
		}
	}
}

func TestAdminPageAndForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	e.toReview(t, e.claim(t, "render-v1"))
	e.submit(t, tokAcme, "k2", withField("instance_id", "v7-future"))

	w := e.do(t, req{method: http.MethodGet, path: "/admin", hdr: map[string]string{"Authorization": basic("alice", tokAdmin)}})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %v", w.Code, w.Header())
	}
	page := w.Body.String()
	for _, want := range []string{
		"2 items need you", j.ID, "provider_timeout", "the speech provider did not answer", // the review job, its error
		"v7-future", "unbound_version", "version not bound", // the dead letter, and why it cannot be redriven
		`action="/v1/admin/jobs/` + ak(j.ID) + `/decision"`, `value="retry"`, `value="fail"`,
		`name="csrf" value="` + e.srv.csrf + `"`, "needs_review", "dead_lettered",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("the page must work without JavaScript")
	}
	if w.Header().Get("X-Frame-Options") != "DENY" || !strings.Contains(w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("clickjacking headers missing: %v", w.Header())
	}

	form := func(csrf, decision string) req {
		v := url.Values{"decision": {decision}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return req{method: http.MethodPost, path: "/v1/admin/jobs/" + ak(j.ID) + "/decision", body: v.Encode(),
			hdr: map[string]string{"Authorization": basic("alice", tokAdmin), "Content-Type": "application/x-www-form-urlencoded"}}
	}
	// A cross-site form has no token: refused, with a page a browser shows.
	for _, csrf := range []string{"", "forged"} {
		w = e.do(t, form(csrf, "fail"))
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "csrf_failed") || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("csrf %q: %d %s", csrf, w.Code, w.Body)
		}
	}
	w = e.do(t, form(e.srv.csrf, "fail"))
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/admin?done=") {
		t.Fatalf("form decision: %d %v", w.Code, w.Header())
	}
	jj, _ := e.store.GetJob(context.Background(), ak(j.ID))
	evs, _ := e.store.Events(context.Background(), ak(j.ID), 0, 0)
	if jj.Status != pipeline.StatusFailed || !strings.Contains(string(evs[len(evs)-2].Detail), `"operator":"alice"`) {
		t.Fatalf("after form: %s %s", jj.Status, evs[len(evs)-2].Detail)
	}
	// The redirect target shows the message.
	w = e.do(t, req{method: http.MethodGet, path: w.Header().Get("Location"), hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}})
	if !strings.Contains(w.Body.String(), "fail recorded") || !strings.Contains(w.Body.String(), "1 item needs you") {
		t.Fatalf("after redirect: %s", w.Body)
	}
	// A crafted link cannot put its own words on the page.
	w = e.do(t, req{method: http.MethodGet, path: "/admin?done=" + url.QueryEscape("Your session expired, call +1 555"), hdr: map[string]string{"Authorization": "Bearer " + tokAdmin}})
	if strings.Contains(w.Body.String(), "session expired") {
		t.Fatal("arbitrary done message shown")
	}
}

// The operations page says which provider keys are proven: a fresh
// idempotent proof lets retries rely on the key; an old one, or a latest
// proof that failed, leaves the operation running as sync (issue 14).
func TestAdminPageProofs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.ProofMaxAge = 48 * time.Hour
		c.Operations = []RoutedOperation{
			{Op: "image", Kind: "fake", Provider: "http", Model: "fresh-model", Endpoint: "in-process", Declared: pipeline.ContractIdempotentVerified},
			{Op: "speech", Kind: "fake", Provider: "http", Model: "tts-model", Endpoint: "in-process", Declared: pipeline.ContractSync},
		}
	})
	// opRow is the routed operation's row of the page.
	opRow := func(t *testing.T, p, op string) string {
		t.Helper()
		i := strings.Index(p, "<td>"+op+"</td><td>http")
		if i < 0 {
			t.Fatalf("the page has no row for the routed operation %s", op)
		}
		return p[i : i+strings.Index(p[i:], "</tr>")]
	}
	page := func() string {
		t.Helper()
		w := e.do(t, req{method: http.MethodGet, path: "/admin", hdr: map[string]string{"Authorization": basic("alice", tokAdmin)}})
		if w.Code != 200 {
			t.Fatalf("page: %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	p0 := page()
	if !strings.Contains(p0, "No proof yet: every operation declared idempotent_verified runs as sync") {
		t.Error("the page does not say that nothing is proven")
	}
	if r := opRow(t, p0, "image"); !strings.Contains(r, "sync: unproven") || !strings.Contains(r, "no proof") {
		t.Errorf("image without a proof: %q", r)
	}
	if r := opRow(t, p0, "speech"); !strings.Contains(r, "<b>sync</b>") || strings.Contains(r, "unproven") {
		t.Errorf("speech is sync as declared: %q", r)
	}
	// A proof of the same provider, operation and model at another
	// endpoint proves nothing here.
	other := pipeline.Proof{Provider: "http", Op: "image", Model: "fresh-model", Endpoint: "http://staging:9000", Verdict: pipeline.ProofIdempotent,
		Calls: 3, ProvedAt: e.clock.Now().Add(-time.Minute)}
	if _, err := e.store.RecordProof(context.Background(), &pipeline.RecordProofParams{Proof: other}); err != nil {
		t.Fatal(err)
	}
	if r := opRow(t, page(), "image"); !strings.Contains(r, "sync: unproven") {
		t.Errorf("image with a proof of another endpoint only: %q", r)
	}
	now := e.clock.Now()
	for _, p := range []pipeline.Proof{
		{Provider: "http", Op: "image", Model: "fresh-model", Endpoint: "in-process", Verdict: pipeline.ProofIdempotent, Calls: 2, Detail: "same sha256 ab12", ProvedAt: now.Add(-time.Hour)},
		{Provider: "http", Op: "image", Model: "old-model", Endpoint: "in-process", Verdict: pipeline.ProofIdempotent, Calls: 2, Detail: "same sha256 cd34", ProvedAt: now.Add(-72 * time.Hour)},
		{Provider: "http", Op: "speech", Model: "failed-model", Endpoint: "in-process", Verdict: pipeline.ProofNotIdempotent, Calls: 2, Detail: "billed 2", ProvedAt: now.Add(-time.Hour)},
	} {
		if _, err := e.store.RecordProof(context.Background(), &pipeline.RecordProofParams{Proof: p}); err != nil {
			t.Fatal(err)
		}
	}
	p := page()
	if r := opRow(t, p, "image"); !strings.Contains(r, "<b>idempotent_verified</b>") || !strings.Contains(r, "proven") {
		t.Errorf("image with a fresh proof: %q", r)
	}
	if !strings.Contains(p, "younger than 48h0m0s") {
		t.Error("the page does not give the configured proof age")
	}
	for model, want := range map[string]string{"fresh-model": "<td>yes</td>", "old-model": "no: runs as sync", "failed-model": "no: runs as sync"} {
		i := strings.Index(p, "</td><td><code>"+model+"</code></td><td><code>in-process</code></td>\n    <td><b>")
		if i < 0 {
			t.Fatalf("the page does not list the proof of %s", model)
		}
		row := p[i:]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, want) {
			t.Errorf("proof of %s: row %q lacks %q", model, row, want)
		}
	}
}

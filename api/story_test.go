package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"edgepipe/pipeline"
)

// storyFixture is a job that went through a retry and a review: attempt 1
// (worker-a) had its image call refused (429) and backed off; attempt 2
// (worker-b) paid for the image, stored it, and lost the speech call's
// answer (ambiguous), so it stopped in needs_review; operator alice
// decided retry (waiving the ambiguous call); attempt 3 (worker-c) paid
// for the speech again and rendered.
type storyFixture struct {
	JobID                     string
	Attempts                  [3]string // attempt ids
	RefusedCall, PaidImage    int64
	AmbiguousCall, PaidSpeech int64
	ImageKey, RenderKey       string
	LeftClaim                 string // an object attempt 1 claimed and never wrote
	Reason                    string
}

// storyReason has markup in it: the page must show it as text.
const storyReason = `provider says <b>no charge</b> for the lost call`

func buildStory(t testing.TB, e *testEnv) storyFixture {
	t.Helper()
	ctx := context.Background()
	f := storyFixture{JobID: pipeline.JobKey("acme", e.mustSubmit(t, tokAcme, "story").ID), Reason: storyReason, LeftClaim: "images/never-written.png"}
	fetch := func(owner string) pipeline.Claimed {
		t.Helper()
		cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: owner, Max: 1, LeaseFor: time.Minute})
		if err != nil || len(cs) != 1 || cs[0].Job.ID != f.JobID {
			t.Fatalf("fetch by %s: %v %v", owner, cs, err)
		}
		if err := e.store.AppendEvent(ctx, cs[0].Lease, pipeline.EventStageStarted, map[string]any{"stage": "prepare", "workflow": "v1"}); err != nil {
			t.Fatal(err)
		}
		return cs[0]
	}
	call := func(c pipeline.Claimed, op string, fin pipeline.FinishCallParams) int64 {
		t.Helper()
		e.clock.Advance(time.Second)
		id, err := e.store.RecordIntent(ctx, c.Lease, pipeline.ProviderCall{Scene: 0, Op: op, Provider: "fake-" + op, Model: op + "-model-1", Contract: pipeline.ContractFailClosed})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		fin.ID = id
		if err := e.store.FinishCall(ctx, &fin); err != nil {
			t.Fatal(err)
		}
		return id
	}

	c1 := fetch("worker-a")
	f.Attempts[0] = c1.Lease.AttemptID
	if err := e.store.PlanUnits(ctx, c1.Lease, []pipeline.Unit{{JobID: f.JobID, Scene: 0, Kind: "image", UnitKey: "unit-0"}}); err != nil {
		t.Fatal(err)
	}
	f.RefusedCall = call(c1, "image", pipeline.FinishCallParams{Status: pipeline.CallFailed, HTTPStatus: 429, ErrorCode: "rate_limited"})
	if err := e.store.ClaimObject(ctx, c1.Lease, f.LeftClaim); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Finish(ctx, c1.Lease, pipeline.Outcome{Status: pipeline.StatusRetryWait, NextRunAt: e.clock.Now().Add(30 * time.Second),
		ErrorClass: pipeline.ClassTransient, ErrorCode: "rate_limited", ErrorMessage: "the image provider asked to slow down"}); err != nil {
		t.Fatal(err)
	}

	e.clock.Advance(31 * time.Second)
	c2 := fetch("worker-b")
	f.Attempts[1] = c2.Lease.AttemptID
	f.PaidImage = call(c2, "image", pipeline.FinishCallParams{Status: pipeline.CallSucceeded, HTTPStatus: 200})
	img := []byte("png bytes")
	sum := sha256.Sum256(img)
	f.ImageKey = "images/" + hex.EncodeToString(sum[:8]) + ".png"
	if err := e.store.ClaimObject(ctx, c2.Lease, f.ImageKey); err != nil {
		t.Fatal(err)
	}
	if _, err := e.objects.Put(ctx, f.ImageKey, bytes.NewReader(img), pipeline.PutOptions{ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.CommitAsset(ctx, c2.Lease, pipeline.Asset{Key: f.ImageKey, Kind: "image", SizeBytes: int64(len(img)),
		SHA256: hex.EncodeToString(sum[:]), ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	// The unit holds the paid image: a retry does not pay for it again.
	if err := e.store.UpdateUnit(ctx, c2.Lease, 0, pipeline.UnitUpdate{Artifacts: map[string]string{"image": f.ImageKey}}); err != nil {
		t.Fatal(err)
	}
	f.AmbiguousCall = call(c2, "speech", pipeline.FinishCallParams{Status: pipeline.CallAmbiguous, ErrorCode: "provider_timeout"})
	e.toReview(t, c2)

	e.clock.Advance(time.Minute)
	w := e.do(t, req{method: http.MethodPost, path: "/v1/admin/jobs/" + f.JobID + "/decision",
		body: `{"decision":"retry","reason":"provider says <b>no charge</b> for the lost call"}`,
		hdr:  map[string]string{"Authorization": basic("alice", tokAdmin), "Content-Type": "application/json"}})
	if w.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", w.Code, w.Body)
	}

	c3 := fetch("worker-c")
	f.Attempts[2] = c3.Lease.AttemptID
	f.PaidSpeech = call(c3, "speech", pipeline.FinishCallParams{Status: pipeline.CallSucceeded, HTTPStatus: 200})
	f.RenderKey = e.succeed(t, c3, []byte("an mp4"))
	return f
}

func TestAdminJobStoryJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := buildStory(t, e)
	w := e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs/"+f.JobID, ""))
	if w.Code != http.StatusOK || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
	st := decode[AdminJobStory](t, w)
	if st.Job.ID != f.JobID || st.Job.Tenant != "acme" || st.Job.Status != pipeline.StatusSucceeded || st.Job.Version != "v1" ||
		st.Queue != "render-v1" || st.Job.Decision == nil || st.Job.Decision.Operator != "alice" || st.MoreEvents {
		t.Fatalf("header: %+v queue %q", st.Job, st.Queue)
	}

	type attempt struct {
		n                     int
		id, worker, outcome   string
		code                  string
		calls                 int
		ended, leaseRemaining bool
	}
	var gotA []attempt
	for _, a := range st.Attempts {
		gotA = append(gotA, attempt{a.Number, a.ID, a.Worker, a.Outcome, a.ErrorCode, a.ProviderCalls, a.EndedAt != nil, a.LeaseExpiresAt != nil})
		if a.Version != "v1" || a.StartedAt.IsZero() {
			t.Errorf("attempt %d: version %q started %v", a.Number, a.Version, a.StartedAt)
		}
	}
	wantA := []attempt{
		{1, f.Attempts[0], "worker-a", "retry_wait", "rate_limited", 1, true, false},
		{2, f.Attempts[1], "worker-b", "needs_review", "provider_timeout", 2, true, false},
		{3, f.Attempts[2], "worker-c", "succeeded", "", 1, true, false},
	}
	if !slices.Equal(gotA, wantA) {
		t.Errorf("attempts\n got %+v\nwant %+v", gotA, wantA)
	}

	type call struct {
		id              int64
		op, status, bil string
		http            int
		attempt         string
	}
	var gotC []call
	for _, c := range st.Calls {
		gotC = append(gotC, call{c.ID, c.Op, c.Status, c.Billing, c.HTTPStatus, c.AttemptID})
		if c.Contract != pipeline.ContractFailClosed || c.Model != c.Op+"-model-1" || c.FinishedAt == nil {
			t.Errorf("call %d: %+v", c.ID, c)
		}
	}
	wantC := []call{
		{f.RefusedCall, "image", "failed", "not_billed", 429, f.Attempts[0]},
		{f.PaidImage, "image", "succeeded", "billed", 200, f.Attempts[1]},
		{f.AmbiguousCall, "speech", "waived", "waived", 0, f.Attempts[1]},
		{f.PaidSpeech, "speech", "succeeded", "billed", 200, f.Attempts[2]},
	}
	if !slices.Equal(gotC, wantC) {
		t.Errorf("calls\n got %+v\nwant %+v", gotC, wantC)
	}

	if len(st.Decisions) != 1 {
		t.Fatalf("decisions %+v", st.Decisions)
	}
	if d := st.Decisions[0]; d.Action != "retry" || d.Operator != "alice" || d.Reason != storyReason ||
		!slices.Equal(d.WaivedCalls, []int64{f.AmbiguousCall}) || d.EventID == 0 {
		t.Errorf("decision %+v", d)
	}
	var keys []string
	for _, a := range st.Assets {
		keys = append(keys, a.Kind+":"+a.Key)
	}
	if want := []string{"image:" + f.ImageKey, "render:" + f.RenderKey}; !slices.Equal(keys, want) {
		t.Errorf("assets %v, want %v", keys, want)
	}
	if len(st.Claims) != 1 || st.Claims[0].Key != f.LeftClaim || st.Claims[0].AttemptID != f.Attempts[0] || st.Claims[0].State != "writing" {
		t.Errorf("claims %+v", st.Claims)
	}
	var kinds []string
	for _, ev := range st.Events {
		kinds = append(kinds, ev.Kind+">"+string(ev.To))
	}
	want := "created>pending status>running stage_started> status>retry_wait status>running stage_started> status>needs_review " +
		"decision> call_waived> status>pending status>running stage_started> status>succeeded"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	// Operators see the worker in the claim's detail (the public stream
	// does not).
	if st.Events[1].Detail["owner"] != "worker-a" {
		t.Errorf("claim event detail %v", st.Events[1].Detail)
	}

	for _, path := range []string{"/v1/admin/jobs/v1-missing", "/v1/admin/jobs/" + strings.Repeat("x", 65)} {
		if w := e.do(t, adminJSON(http.MethodGet, path, "")); w.Code != http.StatusNotFound || problemOf(t, w).Code != "not_found" {
			t.Errorf("%s: %d %s", path, w.Code, w.Body)
		}
	}
}

// A running attempt shows its live lease; one whose lease ran out and was
// taken over by another worker is lease_lost.
func TestAdminJobStoryLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	j := e.mustSubmit(t, tokAcme, "lease")
	fetch := func(owner string) pipeline.Claimed {
		cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: owner, Max: 1, LeaseFor: time.Minute})
		if err != nil || len(cs) != 1 {
			t.Fatalf("fetch: %v %v", cs, err)
		}
		return cs[0]
	}
	first := fetch("worker-a")
	story := func() AdminJobStory {
		w := e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs/"+pipeline.JobKey("acme", j.ID), ""))
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		return decode[AdminJobStory](t, w)
	}
	st := story()
	if len(st.Attempts) != 1 || st.Attempts[0].Outcome != "running" || st.Attempts[0].EndedAt != nil ||
		st.Attempts[0].LeaseExpiresAt == nil || !st.Attempts[0].LeaseExpiresAt.Equal(first.Lease.ExpiresAt) {
		t.Fatalf("running attempt %+v", st.Attempts)
	}
	e.clock.Advance(2 * time.Minute)
	if st = story(); st.Attempts[0].Outcome != "lease_expired" {
		t.Fatalf("expired attempt %+v", st.Attempts)
	}
	second := fetch("worker-b")
	st = story()
	if len(st.Attempts) != 2 || st.Attempts[0].Outcome != "lease_lost" || st.Attempts[0].EndedAt == nil ||
		st.Attempts[1].ID != second.Lease.AttemptID || st.Attempts[1].Outcome != "running" || st.Attempts[1].Worker != "worker-b" {
		t.Fatalf("takeover %+v", st.Attempts)
	}
}

// pageGet fetches an operator page with Basic credentials.
func pageGet(t *testing.T, e *testEnv, path string) (*http.Response, string) {
	t.Helper()
	w := e.do(t, req{method: http.MethodGet, path: path, hdr: map[string]string{"Authorization": basic("alice", tokAdmin)}})
	return w.Result(), w.Body.String()
}

// tableRows returns the text of each cell of each body row of the table
// with id, or nil when the page has no such table.
func tableRows(t *testing.T, page, id string) [][]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var table *html.Node
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && n.Data == "table" && attr(n, "id") == id {
			table = n
		}
	}
	if table == nil {
		return nil
	}
	rows := [][]string{}
	for n := range table.Descendants() {
		if n.Type != html.ElementNode || n.Data != "tr" || n.Parent.Data != "tbody" {
			continue
		}
		var cells []string
		for c := range n.ChildNodes() {
			if c.Type == html.ElementNode && c.Data == "td" {
				cells = append(cells, strings.Join(strings.Fields(textOf(c)), " "))
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

// definitions maps each dt of the dl with id to its dd's text.
func definitions(t *testing.T, page, id string) map[string]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode || n.Data != "dl" || attr(n, "id") != id {
			continue
		}
		term := ""
		for c := range n.ChildNodes() {
			switch {
			case c.Type == html.ElementNode && c.Data == "dt":
				term = strings.TrimSpace(textOf(c))
			case c.Type == html.ElementNode && c.Data == "dd":
				out[term] = strings.Join(strings.Fields(textOf(c)), " ")
			}
		}
	}
	return out
}

// elementText is the text of the element with id ("" when absent).
func elementText(t *testing.T, page, id string) string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && attr(n, "id") == id {
			return textOf(n)
		}
	}
	return ""
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

func TestAdminJobStoryPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := buildStory(t, e)
	resp, page := pageGet(t, e, "/admin/jobs/"+f.JobID)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	checkStoryPage(t, f, page)
	// Nothing runs or loads from elsewhere.
	for _, bad := range []string{"<script", "http://", "https://", "//cdn", "<link", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	// The reason is text, not markup.
	if strings.Contains(page, "<b>no charge</b>") || !strings.Contains(page, "&lt;b&gt;no charge&lt;/b&gt;") {
		t.Error("the operator's reason is not escaped")
	}

	// A job in needs_review has its decision form on the page.
	j := e.mustSubmit(t, tokGlobex, "review")
	e.toReview(t, e.claim(t, "render-v1"))
	key := pipeline.JobKey("globex", j.ID)
	_, page = pageGet(t, e, "/admin/jobs/"+key)
	if !strings.Contains(page, `action="/v1/admin/jobs/`+key+`/decision"`) || !strings.Contains(page, `name="csrf" value="`+e.srv.csrf+`"`) {
		t.Error("needs_review job page lacks the decision form")
	}

	// Unknown jobs are a page a browser shows.
	resp, page = pageGet(t, e, "/admin/jobs/v1-missing")
	if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(page, "not_found") {
		t.Fatalf("missing job page: %d %v %s", resp.StatusCode, resp.Header, page)
	}
}

// checkStoryPage checks the tables of the story page of f (the HTML unit
// test and the Chromium test share what a page must show).
func checkStoryPage(t *testing.T, f storyFixture, page string) {
	t.Helper()
	want := map[string][][]string{
		// #, attempt, worker, version, started, ended, outcome, calls
		"attempts": {
			{"1", f.Attempts[0], "worker-a", "v1", "*", "ended *", "retry_wait rate_limited", "1"},
			{"2", f.Attempts[1], "worker-b", "v1", "*", "ended *", "needs_review provider_timeout", "2"},
			{"3", f.Attempts[2], "worker-c", "v1", "*", "ended *", "succeeded", "1"},
		},
		// #, scene, op, provider/model, contract, status, billing, http, error, attempt, intended, took, staged
		"calls": {
			{itoa(f.RefusedCall), "0", "image", "fake-image / image-model-1", "fail_closed", "failed", "not_billed", "429", "rate_limited", f.Attempts[0], "*", "1s", "—"},
			{itoa(f.PaidImage), "0", "image", "fake-image / image-model-1", "fail_closed", "succeeded", "billed", "200", "—", f.Attempts[1], "*", "1s", "—"},
			{itoa(f.AmbiguousCall), "0", "speech", "fake-speech / speech-model-1", "fail_closed", "waived", "waived", "—", "provider_timeout", f.Attempts[1], "*", "1s", "—"},
			{itoa(f.PaidSpeech), "0", "speech", "fake-speech / speech-model-1", "fail_closed", "succeeded", "billed", "200", "—", f.Attempts[2], "*", "1s", "—"},
		},
		"decisions": {
			{"retry", "alice", storyReason, "*", "waived provider calls #" + itoa(f.AmbiguousCall) + " (accepted paying again)"},
		},
		"claims": {{f.LeftClaim, "writing", f.Attempts[0], "*"}},
	}
	for id, rows := range want {
		got := tableRows(t, page, id)
		if got == nil {
			t.Errorf("the page has no table #%s", id)
			continue
		}
		if !cellsMatch(got, rows) {
			t.Errorf("table #%s\n got %q\nwant %q", id, got, rows)
		}
	}
	assets := tableRows(t, page, "assets")
	if len(assets) != 2 || assets[0][0] != f.ImageKey || assets[0][1] != "image" || assets[1][0] != f.RenderKey || assets[1][1] != "render" {
		t.Errorf("assets %q", assets)
	}
	events := tableRows(t, page, "events")
	var kinds []string
	for _, r := range events {
		kinds = append(kinds, r[2])
	}
	if want := []string{"created", "status", "stage_started", "status", "status", "stage_started", "status", "decision", "call_waived",
		"status", "status", "stage_started", "status"}; !slices.Equal(kinds, want) {
		t.Errorf("timeline kinds %q, want %q", kinds, want)
	}
	if len(events) > 7 && (events[7][5] != "decision=retry operator=alice reason="+storyReason) {
		t.Errorf("decision event detail %q", events[7][5])
	}
	header := definitions(t, page, "job-header")
	for k, v := range map[string]string{"Tenant": "acme", "Version": "v1", "Waiting for": "—", "Attempts": "3", "Error": "—"} {
		if header[k] != v {
			t.Errorf("job header %s: %q, want %q", k, header[k], v)
		}
	}
	if d := header["Decision"]; !strings.HasPrefix(d, "retry by alice at ") || !strings.HasSuffix(d, ": "+storyReason) {
		t.Errorf("job header decision %q", d)
	}
	if id, st := elementText(t, page, "job-id"), elementText(t, page, "job-status"); id != f.JobID || st != "succeeded" {
		t.Errorf("job %q status %q", id, st)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// cellsMatch compares rows cell by cell; "*" matches any non-empty cell
// and a trailing " *" any suffix.
func cellsMatch(got, want [][]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for j, w := range want[i] {
			g := got[i][j]
			switch {
			case w == "*":
				if g == "" {
					return false
				}
			case strings.HasSuffix(w, " *"):
				if !strings.HasPrefix(g, strings.TrimSuffix(w, "*")) {
					return false
				}
			case g != w:
				return false
			}
		}
	}
	return true
}

// The operations page filters jobs by tenant, status, version and age, and
// links each to its story.
func TestAdminPageJobFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := e.mustSubmit(t, tokAcme, "old") // created at testT0, then in needs_review
	e.toReview(t, e.claim(t, "render-v1"))
	e.clock.Advance(3 * time.Hour)
	fresh := e.mustSubmit(t, tokGlobex, "fresh")
	w := e.submit(t, tokGlobex, "v2", withField("instance_id", "v2-fresh"))
	if w.Code != http.StatusAccepted {
		t.Fatalf("v2 submit: %d %s", w.Code, w.Body)
	}
	ids := func(query string) []string {
		t.Helper()
		resp, page := pageGet(t, e, "/admin?"+query)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", query, resp.StatusCode, page)
		}
		var out []string
		for _, r := range tableRows(t, page, "job-list") {
			out = append(out, r[0])
		}
		return out
	}
	// The operators' list shows internal keys (docs/design.md §3).
	o, fr, v2 := pipeline.JobKey("acme", old.ID), pipeline.JobKey("globex", fresh.ID), pipeline.JobKey("globex", "v2-fresh")
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{v2, fr, o}},
		{"tenant=acme", []string{o}},
		{"tenant=globex&status=pending", []string{v2, fr}},
		{"status=needs_review", []string{o}},
		{"version=v2", []string{v2}},
		{"older_than=2h", []string{o}},
		{"newer_than=1h", []string{v2, fr}},
		{"older_than=1d", nil},
		{"tenant=&status=&version=&older_than=&newer_than=", []string{v2, fr, o}},
	} {
		if got := ids(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.query, got, tc.want)
		}
	}
	// Every job in the list links to its story, and the filter form shows
	// the filter given.
	_, page := pageGet(t, e, "/admin?tenant=acme&status=needs_review")
	if !strings.Contains(page, `<a href="/admin/jobs/`+o+`">`) || !strings.Contains(page, `value="acme"`) ||
		!strings.Contains(page, `<option value="needs_review" selected>`) {
		t.Errorf("links or filter form missing:\n%s", page)
	}
	// A filter that is not one is refused with a page naming it.
	for q, field := range map[string]string{"status=bogus": "status", "version=x1": "version", "older_than=soon": "older_than", "newer_than=-1h": "newer_than"} {
		resp, page := pageGet(t, e, "/admin?"+q)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(page, field+":") {
			t.Errorf("%s: %d %s", q, resp.StatusCode, page)
		}
	}
	// A tenant name with markup is shown as text.
	_, page = pageGet(t, e, "/admin?tenant="+url.QueryEscape(`"><b>x`))
	if strings.Contains(page, `"><b>x`) {
		t.Error("tenant filter not escaped")
	}
}

// A story cut after its first events cannot say how an attempt that was
// still open at the cut ended: unknown, never "running" on a finished job;
// the attempt the job runs on now keeps its live lease.
func TestAttemptsOfTruncatedStory(t *testing.T) {
	t.Parallel()
	now := testT0.Add(time.Hour)
	evs := []StoryEvent{
		{ID: 1, Kind: pipeline.EventCreated, At: testT0},
		{ID: 2, Kind: pipeline.EventStatus, From: pipeline.StatusPending, To: pipeline.StatusRunning, AttemptID: "a1",
			At: testT0, Detail: map[string]any{"owner": "w1", "attempt": float64(1)}},
	}
	done := pipeline.Job{Status: pipeline.StatusSucceeded, AttemptID: "a1", Version: "v1"}
	if got := attemptsOf(done, evs, true, now); len(got) != 1 || got[0].Outcome != "unknown" || got[0].EndedAt != nil {
		t.Fatalf("finished job, story cut: %+v", got)
	}
	running := pipeline.Job{Status: pipeline.StatusRunning, AttemptID: "a1", Version: "v1", LeaseExpiresAt: now.Add(time.Minute)}
	if got := attemptsOf(running, evs, true, now); len(got) != 1 || got[0].Outcome != "running" || got[0].LeaseExpiresAt == nil {
		t.Fatalf("running job, story cut: %+v", got)
	}
}

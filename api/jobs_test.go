package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func TestGetJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	w := e.get(t, tokAcme, "/v1/jobs/"+j.ID)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	g := decode[JobResource](t, w)
	if g.ID != j.ID || g.Status != pipeline.StatusPending || g.Links.Self != "/v1/jobs/"+j.ID ||
		g.Links.Events != "/v1/jobs/"+j.ID+"/events" || g.Links.Cancel != "/v1/jobs/"+j.ID+"/cancellation" ||
		g.Links.Result != "" || g.Result != nil || g.Error != nil || g.NextRetryAt != nil || !g.CreatedAt.Equal(testT0) {
		t.Fatalf("job %+v", g)
	}
	// Only public fields: nothing about tenants, leases, queues, inputs.
	for _, leak := range []string{"tenant", "lease", "attempt_id", "queue", "fingerprint", "idempotency", "input", "webhook", "acme"} {
		if strings.Contains(strings.ToLower(w.Body.String()), leak) {
			t.Errorf("job resource mentions %q: %s", leak, w.Body)
		}
	}
}

func TestOtherTenantsJobIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	c := e.claim(t, "render-v1")
	e.succeed(t, c, []byte("mp4 bytes"))
	for _, path := range []string{"", "/events", "/result"} {
		theirs := e.get(t, tokGlobex, "/v1/jobs/"+j.ID+path)
		missing := e.get(t, tokGlobex, "/v1/jobs/v1-doesnotexist"+path)
		if theirs.Code != 404 || missing.Code != 404 {
			t.Fatalf("%s: other tenant %d, missing %d", path, theirs.Code, missing.Code)
		}
		problemOf(t, theirs)
		if theirs.Body.String() != missing.Body.String() {
			t.Fatalf("%s: bodies differ:\n%s\n%s", path, theirs.Body, missing.Body)
		}
	}
	w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs/" + j.ID + "/cancellation", hdr: map[string]string{"Authorization": "Bearer " + tokGlobex}})
	if w.Code != 404 {
		t.Fatalf("cancel other tenant's job: %d", w.Code)
	}
	if w := e.get(t, tokGlobex, "/v1/jobs"); len(decode[JobList](t, w).Jobs) != 0 {
		t.Fatalf("other tenant lists %s", w.Body)
	}
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, e.mustSubmit(t, tokAcme, fmt.Sprintf("k%d", i)).ID)
		e.clock.Advance(time.Second)
	}
	e.mustSubmit(t, tokGlobex, "k0")
	// Cancel the oldest so the status filter has something to find.
	if w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs/" + ids[0] + "/cancellation", hdr: map[string]string{"Authorization": "Bearer " + tokAcme}}); w.Code != 202 {
		t.Fatal(w.Code)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/jobs?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		w := e.get(t, tokAcme, path)
		if w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		l := decode[JobList](t, w)
		for _, j := range l.Jobs {
			got = append(got, j.ID)
		}
		if l.NextCursor == nil {
			break
		}
		if page > 5 {
			t.Fatal("pagination does not end")
		}
		cursor = *l.NextCursor
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages %v, want newest first %v", got, want)
	}
	for _, q := range []string{"?status=canceled", "?status=succeeded,canceled", "?status=succeeded&status=canceled"} {
		l := decode[JobList](t, e.get(t, tokAcme, "/v1/jobs"+q))
		if len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] {
			t.Fatalf("%s: %+v", q, l.Jobs)
		}
	}
	for q, field := range map[string]string{
		"?status=done": "status", "?limit=0": "limit", "?limit=501": "limit", "?limit=x": "limit",
		"?cursor=!!!": "cursor", "?cursor=" + cursorEncoding.EncodeToString([]byte("no-dot")): "cursor", "?cursor=" + cursorEncoding.EncodeToString([]byte("-5.v1-x")): "cursor",
	} {
		w := e.get(t, tokAcme, "/v1/jobs"+q)
		if w.Code != 400 || !hasField(problemOf(t, w), field) {
			t.Fatalf("%s: %d %s", q, w.Code, w.Body)
		}
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	auth := map[string]string{"Authorization": "Bearer " + tokAcme}
	post := func(id string) (int, string) {
		w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancellation", hdr: auth})
		return w.Code, w.Body.String()
	}
	// A pending job is canceled at once.
	j := e.mustSubmit(t, tokAcme, "k1")
	if code, body := post(j.ID); code != 202 || !strings.Contains(body, `"status":"canceled"`) {
		t.Fatalf("pending: %d %s", code, body)
	}
	// Repeating the cancel of a canceled job is harmless: the job again,
	// not an error, and nothing is appended to its history.
	evs, _ := e.store.Events(context.Background(), j.ID, 0, 100)
	for range 2 {
		code, body := post(j.ID)
		if code != http.StatusAccepted || !strings.Contains(body, `"status":"canceled"`) || !strings.Contains(body, `"id":"`+j.ID+`"`) {
			t.Fatalf("repeated cancel: %d %s", code, body)
		}
	}
	if again, _ := e.store.Events(context.Background(), j.ID, 0, 100); len(again) != len(evs) {
		t.Fatalf("a repeated cancel wrote events: %d → %d", len(evs), len(again))
	}
	// A job that ended otherwise cannot be canceled: 409.
	done := e.mustSubmit(t, tokAcme, "k-done")
	e.succeed(t, e.claim(t, "render-v1"), []byte("mp4"))
	code, body := post(done.ID)
	if code != http.StatusConflict || !strings.Contains(body, `"code":"job_terminal"`) {
		t.Fatalf("succeeded: %d %s", code, body)
	}
	// Another tenant's canceled job is still a 404.
	if w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs/" + j.ID + "/cancellation", hdr: map[string]string{"Authorization": "Bearer " + tokGlobex}}); w.Code != 404 {
		t.Fatalf("other tenant's canceled job: %d", w.Code)
	}
	// A running job keeps running until its next boundary; the request is
	// recorded, and repeating it is fine.
	r := e.mustSubmit(t, tokAcme, "k2")
	e.claim(t, "render-v1")
	for range 2 {
		code, body := post(r.ID)
		if code != 202 || !strings.Contains(body, `"status":"running"`) || !strings.Contains(body, `"cancel_requested_at":"20`) {
			t.Fatalf("running: %d %s", code, body)
		}
	}
	if code, _ := post("v1-nope"); code != 404 {
		t.Fatalf("missing job: %d", code)
	}
}

func TestResultDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	path := "/v1/jobs/" + j.ID + "/result"
	if w := e.get(t, tokAcme, path); w.Code != 409 || problemOf(t, w).Code != "result_not_ready" {
		t.Fatalf("pending: %d %s", w.Code, w.Body)
	}
	content := bytes.Repeat([]byte("0123456789"), 1000)
	key := e.succeed(t, e.claim(t, "render-v1"), content)
	sum := sha256.Sum256(content)

	g := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+j.ID))
	if g.Status != pipeline.StatusSucceeded || g.Result == nil || g.Result.Key != key || g.Result.Bytes != int64(len(content)) ||
		g.Result.SHA256 != hex.EncodeToString(sum[:]) || g.Result.DurationMS != 3500 || g.Result.URL != path ||
		g.Links.Result != path || g.Links.Cancel != "" {
		t.Fatalf("succeeded job %+v result %+v", g, g.Result)
	}

	w := e.get(t, tokAcme, path)
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), content) || w.Header().Get("Content-Type") != "video/mp4" ||
		w.Header().Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` || w.Header().Get("Accept-Ranges") != "bytes" {
		t.Fatalf("full: %d %d bytes %v", w.Code, w.Body.Len(), w.Header())
	}
	cases := []struct {
		rng    string
		status int
		want   []byte
	}{
		{"bytes=0-9", 206, content[:10]},
		{"bytes=9990-", 206, content[9990:]},
		{"bytes=-5", 206, content[len(content)-5:]},
		{"bytes=5000-5004", 206, content[5000:5005]},
		{"bytes=20000-", 416, nil},
		{"bytes=10000-10005", 416, nil},
	}
	for _, tc := range cases {
		w := e.do(t, req{method: http.MethodGet, path: path, hdr: map[string]string{"Authorization": "Bearer " + tokAcme, "Range": tc.rng}})
		if w.Code != tc.status || (tc.want != nil && !bytes.Equal(w.Body.Bytes(), tc.want)) {
			t.Fatalf("%s: %d %q", tc.rng, w.Code, w.Body.Bytes()[:min(20, w.Body.Len())])
		}
		if tc.status == 416 {
			// A problem like every other error, with the size the client
			// needs to ask again (RFC 9110 §15.5.17), and no file name.
			p := problemOf(t, w)
			if p.Code != "range_not_satisfiable" || w.Header().Get("Content-Range") != "bytes */10000" ||
				w.Header().Get("Content-Disposition") != "" || !strings.Contains(p.Detail, "10000 bytes") {
				t.Fatalf("%s: %+v %v", tc.rng, p, w.Header())
			}
		}
	}
	// A failed If-Match is a problem too.
	w = e.do(t, req{method: http.MethodGet, path: path, hdr: map[string]string{"Authorization": "Bearer " + tokAcme, "If-Match": `"other"`}})
	if w.Code != http.StatusPreconditionFailed || problemOf(t, w).Code != "precondition_failed" {
		t.Fatalf("If-Match: %d %v %s", w.Code, w.Header(), w.Body)
	}
	// A cached copy is revalidated by its ETag.
	w = e.do(t, req{method: http.MethodGet, path: path, hdr: map[string]string{"Authorization": "Bearer " + tokAcme, "If-None-Match": `"` + hex.EncodeToString(sum[:]) + `"`}})
	if w.Code != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", w.Code)
	}
}

// presigningStore makes the test object store look like S3.
type presigningStore struct {
	pipeline.ObjectStore
}

func (presigningStore) PresignGet(_ context.Context, key string, ttl time.Duration) (string, error) {
	return "https://bucket.example.com/" + key + "?X-Amz-Expires=" + fmt.Sprint(int(ttl.Seconds())), nil
}

func TestResultRedirectsToPresignedURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv, err := New(Config{Store: e.store, Objects: presigningStore{e.objects}, Router: e.srv.cfg.Router,
		Tokens: map[string]string{tokAcme: "acme"}, PresignTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.h = srv.Handler()
	j := e.mustSubmit(t, tokAcme, "k1")
	key := e.succeed(t, e.claim(t, "render-v1"), []byte("movie"))
	w := e.get(t, tokAcme, "/v1/jobs/"+j.ID+"/result")
	want := "https://bucket.example.com/" + key + "?X-Amz-Expires=600"
	if w.Code != http.StatusFound || w.Header().Get("Location") != want {
		t.Fatalf("%d Location %q", w.Code, w.Header().Get("Location"))
	}
	if g := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+j.ID)); g.Result.URL != want {
		t.Fatalf("result url %q", g.Result.URL)
	}
}

// A job's failure shows only its class, code and safe message.
func TestJobErrorIsSafe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	c := e.claim(t, "render-v1")
	ce := pipeline.Classify(fmt.Errorf("dial tcp 10.0.0.7:443: secret-token-123 refused"))
	d := pipeline.DefaultRetryPolicy().Decide(ce, 1, e.clock.Now())
	if err := e.store.Finish(context.Background(), c.Lease, pipeline.OutcomeFor(d, ce)); err != nil {
		t.Fatal(err)
	}
	w := e.get(t, tokAcme, "/v1/jobs/"+j.ID)
	g := decode[JobResource](t, w)
	if g.Status != pipeline.StatusNeedsReview || g.Error == nil || g.Error.Code != "internal_error" || g.Error.Class != pipeline.ClassAmbiguous || !g.RequiresAction {
		t.Fatalf("job %+v", g)
	}
	if strings.Contains(w.Body.String(), "10.0.0.7") || strings.Contains(w.Body.String(), "secret-token") {
		t.Fatalf("raw error leaked: %s", w.Body)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
)

const demoFile = "../../testdata/storyboards/demo.json"

// sseWrite writes one event the way the API does.
func sseWrite(w io.Writer, m api.EventMessage) {
	if m.Detail == nil {
		m.Detail = map[string]any{}
	}
	b, _ := json.Marshal(m)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", m.ID, m.Kind, b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func TestSubmitPrintsIDAndSendsTheRequest(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/jobs/v1-abc")
		respondJSON(w, http.StatusAccepted, jobResource("v1-abc", pipeline.StatusPending))
	}))
	c := newTestCLI(t, srv.URL)
	if err := c.submit(context.Background(), []string{demoFile, "--id", "v1-mine"}); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); got != "v1-abc\n" {
		t.Errorf("stdout = %q, want the id alone", got)
	}
	if !strings.Contains(c.errOut.String(), "submitted: job v1-abc on v1, pending") {
		t.Errorf("stderr = %q", c.errOut)
	}
	reqs := rec.find("POST", "/v1/jobs")
	if len(reqs) != 1 {
		t.Fatalf("requests: %+v", rec.all())
	}
	r := reqs[0]
	if r.Header.Get("Authorization") != "Bearer "+testToken || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers: %v", r.Header)
	}
	if k := r.Header.Get(api.HeaderIdempotencyKey); !strings.HasPrefix(k, idempotencyKeyPrefix) || len(k) != len(idempotencyKeyPrefix)+64 {
		t.Errorf("Idempotency-Key = %q", k)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatal(err)
	}
	if body["instance_id"] != "v1-mine" || body["operation"] != "render_video" || len(body["scenes"].([]any)) != 4 {
		t.Errorf("body = %v", body)
	}
}

func TestSubmitReplayAndKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get(api.HeaderIdempotencyKey)
		mu.Lock()
		replay := seen[k]
		seen[k] = true
		mu.Unlock()
		if replay {
			w.Header().Set(api.HeaderIdempotentReplayed, "true")
		}
		respondJSON(w, http.StatusAccepted, jobResource("v1-"+k[len(k)-6:], pipeline.StatusSucceeded))
	}))
	ctx := context.Background()
	run := func(args ...string) *testCLI {
		t.Helper()
		c := newTestCLI(t, srv.URL)
		if err := c.submit(ctx, args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := run(demoFile)
	if strings.Contains(first.errOut.String(), "replayed") {
		t.Fatalf("first submit says replayed: %s", first.errOut)
	}
	second := run(demoFile)
	if !strings.Contains(second.errOut.String(), "replayed: job "+strings.TrimSpace(first.out.String())+" was already submitted") {
		t.Errorf("second submit: %q", second.errOut)
	}
	if first.out.String() != second.out.String() {
		t.Errorf("ids differ: %q %q", first.out, second.out)
	}

	// The same storyboard formatted differently, from stdin, is the same
	// request: the same derived key.
	raw, err := os.ReadFile(demoFile)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	_ = json.Unmarshal(raw, &v)
	compact, _ := json.Marshal(v)
	c := newTestCLI(t, srv.URL)
	c.stdin = bytes.NewReader(compact)
	if err := c.submit(ctx, []string{"-"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.errOut.String(), "replayed") {
		t.Errorf("reformatted storyboard was not a replay: %s", c.errOut)
	}
	// Another instance id, or an explicit key, is another request.
	run(demoFile, "--id", "v2-other")
	run(demoFile, "--key", "my-key-1")
	keys := map[string]bool{}
	for _, r := range rec.find("POST", "/v1/jobs") {
		keys[r.Header.Get(api.HeaderIdempotencyKey)] = true
	}
	if len(keys) != 3 || !keys["my-key-1"] {
		t.Errorf("keys = %v, want the derived one, the --id one and my-key-1", keys)
	}
}

func TestSubmitProblemIsOneLine(t *testing.T) {
	t.Parallel()
	srv, _ := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		respondProblem(w, 400, "validation_failed", "The request is invalid", "the request has invalid fields; see errors",
			pipeline.FieldError{Field: "scenes[1].duration_ms", Message: "must be between 500 and 30000"},
			pipeline.FieldError{Field: "options.fps", Message: "must be one of 24, 25, 30"})
	}))
	c := newTestCLI(t, srv.URL)
	err := c.submit(context.Background(), []string{"../../testdata/storyboards/invalid.json"})
	want := "The request is invalid: scenes[1].duration_ms: must be between 500 and 30000; options.fps: must be one of 24, 25, 30 (validation_failed)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if c.out.Len() != 0 {
		t.Errorf("stdout = %q, want nothing on failure", c.out)
	}
}

func TestSubmitRefusesWhatIsNotAnObject(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "[]", "null", `"x"`, "{", `{"a":1} trailing`} {
		c := newTestCLI(t, "http://127.0.0.1:1")
		c.stdin = strings.NewReader(body)
		err := c.submit(context.Background(), []string{"-"})
		if err == nil || !strings.Contains(err.Error(), "stdin: not a JSON object") {
			t.Errorf("%q: err = %v", body, err)
		}
	}
	c := newTestCLI(t, "http://127.0.0.1:1")
	if err := c.submit(context.Background(), []string{filepath.Join(t.TempDir(), "missing.json")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// waitServer is a canned API for submit --wait: the job moves through the
// events in script, the first stream connection drops after dropAfter
// events, and the job resource is final once the stream reached the end.
type waitServer struct {
	t         *testing.T
	id        string
	script    []api.EventMessage
	dropAfter int
	final     api.JobResource
	mp4       []byte
	// redirect, when set, is where GET .../result redirects.
	redirect string
	// holdOpen keeps the stream open after the script, as a proxy that
	// buffers the close might: the client must stop at the settled event.
	holdOpen bool
	// stallAfter > 0: the first connection goes silent (no keep-alives)
	// after this many events, like a connection a NAT forgot.
	stallAfter int
	// submitted, when set, is the answer to the submission, sent as a
	// replay (Idempotent-Replayed: true).
	submitted *api.JobResource

	mu       sync.Mutex
	conns    int
	lastIDs  []string
	streamed int
}

func (s *waitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	base := "/v1/jobs/" + s.id
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/jobs":
		if s.submitted != nil {
			w.Header().Set(api.HeaderIdempotentReplayed, "true")
			respondJSON(w, http.StatusAccepted, *s.submitted)
			return
		}
		respondJSON(w, http.StatusAccepted, jobResource(s.id, pipeline.StatusPending))
	case r.URL.Path == base+"/events":
		s.mu.Lock()
		s.conns++
		first := s.conns == 1
		s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
		s.mu.Unlock()
		after := int64(0)
		fmt.Sscan(r.Header.Get("Last-Event-ID"), &after)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "retry: 2000\n\n: keep-alive\n\n")
		n := 0
		for _, m := range s.script {
			if m.ID <= after {
				continue
			}
			if first && s.stallAfter > 0 && n == s.stallAfter {
				<-r.Context().Done()
				return
			}
			if first && n == s.dropAfter {
				// A half-written event, then the connection drops.
				fmt.Fprintf(w, "id: %d\ndata: {\"id\":", m.ID)
				return
			}
			// Recorded before it is sent: once the client has the
			// event, the job resource must agree with it.
			s.mu.Lock()
			s.streamed = max(s.streamed, int(m.ID))
			s.mu.Unlock()
			sseWrite(w, m)
			n++
		}
		if s.holdOpen {
			<-r.Context().Done()
		}
	case r.URL.Path == base:
		s.mu.Lock()
		done := s.streamed == int(s.script[len(s.script)-1].ID)
		s.mu.Unlock()
		if done {
			respondJSON(w, 200, s.final)
			return
		}
		j := jobResource(s.id, pipeline.StatusRunning)
		j.Progress = api.Progress{UnitsTotal: 4, UnitsDone: 1, Stage: "prepare"}
		respondJSON(w, 200, j)
	case r.URL.Path == base+"/result":
		if s.redirect != "" {
			http.Redirect(w, r, s.redirect, http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "video/mp4")
		w.Write(s.mp4)
	default:
		s.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

func ev(id int64, kind string, from, to pipeline.Status, detail map[string]any) api.EventMessage {
	return api.EventMessage{ID: id, Kind: kind, From: from, To: to, At: t0, Detail: detail}
}

// successScript is a job's log from creation to success, one event every
// 250ms.
func successScript() []api.EventMessage {
	s := []api.EventMessage{
		ev(1, "created", "", pipeline.StatusPending, map[string]any{"version": "v1"}),
		ev(2, "status", pipeline.StatusPending, pipeline.StatusRunning, map[string]any{"attempt": 1}),
		ev(3, "stage_finished", "", "", map[string]any{"stage": "prepare", "units_done": 0}),
		ev(4, "unit_generated", "", "", map[string]any{"scene": 0, "kind": "image"}),
		ev(5, "unit_generated", "", "", map[string]any{"scene": 2, "kind": "image"}),
		ev(6, "unit_generated", "", "", map[string]any{"scene": 1, "kind": "video"}),
		ev(7, "unit_generated", "", "", map[string]any{"scene": 3, "kind": "image"}),
		ev(8, "stage_finished", "", "", map[string]any{"stage": "execute", "units_done": 4}),
		ev(9, "stage_finished", "", "", map[string]any{"stage": "apply", "units_done": 4}),
		ev(10, "stage_finished", "", "", map[string]any{"stage": "finalize", "units_done": 4}),
		ev(11, "status", pipeline.StatusRunning, pipeline.StatusSucceeded, map[string]any{"attempt": 1}),
	}
	for i := range s {
		s[i].At = t0.Add(time.Duration(i) * 250 * time.Millisecond)
	}
	return s
}

func succeededJob(id string, mp4 []byte) api.JobResource {
	j := jobResource(id, pipeline.StatusSucceeded)
	sum := sha256.Sum256(mp4)
	j.Attempts = 1
	j.Progress = api.Progress{UnitsTotal: 4, UnitsDone: 4, Stage: "finalize"}
	j.Result = &api.Result{Key: "renders/v1/ab/abcdef.mp4", Bytes: int64(len(mp4)), SHA256: hex.EncodeToString(sum[:]),
		DurationMS: 5000, URL: "/v1/jobs/" + id + "/result"}
	return j
}

// TestSubmitWaitFollowsTheStream: the stream drops mid-event, the client
// reconnects with the last complete event's id, follows to succeeded,
// downloads the MP4 to --out and checks it against the job's SHA-256.
func TestSubmitWaitFollowsTheStream(t *testing.T) {
	t.Parallel()
	mp4 := []byte("not really an mp4, but the bytes the job's sha256 names")
	ws := &waitServer{t: t, id: "v1-wait", script: successScript(), dropAfter: 5, final: succeededJob("v1-wait", mp4), mp4: mp4}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	out := filepath.Join(t.TempDir(), "got.mp4")
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", out}); err != nil {
		t.Fatalf("submit --wait: %v\nstderr:\n%s", err, c.errOut)
	}
	if ws.conns != 2 || ws.lastIDs[0] != "" || ws.lastIDs[1] != "5" {
		t.Errorf("connections %d with Last-Event-ID %q; want 2: none, then 5", ws.conns, ws.lastIDs)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, mp4) {
		t.Fatalf("downloaded %q, %v", got, err)
	}
	stdout := c.out.String()
	for _, want := range []string{"v1-wait\n", "v1-wait succeeded after", "result    renders/v1/ab/abcdef.mp4",
		fmt.Sprintf("bytes     %d", len(mp4)), "sha256    " + ws.final.Result.SHA256, "duration  5.000s", "saved     " + out,
		"note      ffprobe not found"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// Not a terminal: one plain line per change, ending full.
	stderr := c.errOut.String()
	for _, want := range []string{"v1-wait [------------------------] 0/4 scenes · queued +0.0s\n",
		"v1-wait [############------------] 2/4 scenes · generating scenes +1.0s\n",
		"2/4 scenes · generating scenes [reconnecting] +1.0s\n", "4/4 scenes · rendering clips +1.8s\n",
		"v1-wait [########################] 4/4 scenes · succeeded +2.5s\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "\r") || strings.Contains(stderr, "\x1b") {
		t.Errorf("plain progress has terminal control characters: %q", stderr)
	}
}

func TestSubmitWaitJSON(t *testing.T) {
	t.Parallel()
	mp4 := []byte("mp4 bytes")
	ws := &waitServer{t: t, id: "v1-json", script: successScript(), dropAfter: -1, final: succeededJob("v1-json", mp4), mp4: mp4,
		holdOpen: true}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	out := filepath.Join(t.TempDir(), "x.mp4")
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--json", "--out", out, "--timeout", "60s"}); err != nil {
		t.Fatal(err)
	}
	var got submitOutput
	if err := json.Unmarshal(c.out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, c.out)
	}
	if got.Job.Status != pipeline.StatusSucceeded || got.File != out || got.Replayed || got.Job.Result.Bytes != int64(len(mp4)) {
		t.Errorf("json = %+v", got)
	}
}

// TestSubmitWaitWithoutFFprobe: no ffprobe and no --out → no download.
func TestSubmitWaitWithoutFFprobe(t *testing.T) {
	t.Parallel()
	ws := &waitServer{t: t, id: "v1-nop", script: successScript(), dropAfter: -1, final: succeededJob("v1-nop", []byte("x"))}
	srv, rec := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	if err := c.submit(context.Background(), []string{demoFile, "--wait"}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.find("GET", "/v1/jobs/v1-nop/result")); n != 0 {
		t.Errorf("%d downloads without ffprobe or --out", n)
	}
	if !strings.Contains(c.out.String(), "not downloading (pass --out to save the MP4)") {
		t.Errorf("stdout: %s", c.out)
	}
}

func TestSubmitWaitChecksTheDownload(t *testing.T) {
	t.Parallel()
	final := succeededJob("v1-bad", []byte("what the job stored"))
	ws := &waitServer{t: t, id: "v1-bad", script: successScript(), dropAfter: -1, final: final, mp4: []byte("something else")}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	dir := t.TempDir()
	out := filepath.Join(dir, "x.mp4")
	err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", out})
	if err == nil || !strings.Contains(err.Error(), "does not match the job's "+final.Result.SHA256) {
		t.Fatalf("err = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestSubmitWaitRedirectDropsToken: the result redirects to a presigned URL
// elsewhere, which must not see the API token.
func TestSubmitWaitRedirectDropsToken(t *testing.T) {
	t.Parallel()
	mp4 := []byte("presigned bytes")
	var auth []string
	var mu sync.Mutex
	store, _ := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write(mp4)
	}))
	ws := &waitServer{t: t, id: "v1-s3", script: successScript(), dropAfter: -1, final: succeededJob("v1-s3", mp4),
		redirect: store.URL + "/bucket/key.mp4?X-Amz-Signature=abc"}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	out := filepath.Join(t.TempDir(), "x.mp4")
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", out}); err != nil {
		t.Fatal(err)
	}
	if len(auth) != 1 || auth[0] != "" {
		t.Errorf("object store saw Authorization %q", auth)
	}
}

func TestSubmitWaitNeedsReviewExits1(t *testing.T) {
	t.Parallel()
	script := []api.EventMessage{
		ev(1, "created", "", pipeline.StatusPending, nil),
		ev(2, "status", pipeline.StatusPending, pipeline.StatusRunning, map[string]any{"attempt": 1}),
		ev(3, "status", pipeline.StatusRunning, pipeline.StatusNeedsReview,
			map[string]any{"attempt": 1, "error_code": "provider_outcome_unknown"}),
	}
	final := jobResource("v1-rev", pipeline.StatusNeedsReview)
	final.RequiresAction = true
	final.Error = &api.JobError{Class: pipeline.ClassAmbiguous, Code: "provider_outcome_unknown",
		Message: "the video provider may have billed the call; an operator must decide"}
	ws := &waitServer{t: t, id: "v1-rev", script: script, dropAfter: -1, final: final}
	srv, rec := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", filepath.Join(t.TempDir(), "x.mp4")})
	var je *jobError
	if !errors.As(err, &je) || je.Status != pipeline.StatusNeedsReview {
		t.Fatalf("err = %v, want a needs_review jobError", err)
	}
	want := "job v1-rev needs-review: the video provider may have billed the call; an operator must decide (provider_outcome_unknown); an operator must retry or fail it (edgepipe review)"
	if err.Error() != want {
		t.Errorf("err =\n  %s\nwant\n  %s", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Error("multi-line error")
	}
	if n := len(rec.find("GET", "/v1/jobs/v1-rev/result")); n != 0 {
		t.Errorf("downloaded a result of a job in review")
	}
	if !strings.Contains(c.errOut.String(), "needs review (provider_outcome_unknown)") {
		t.Errorf("progress: %s", c.errOut)
	}
}

func TestSettledError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		st   pipeline.Status
		err  *api.JobError
		want string
	}{
		{pipeline.StatusSucceeded, nil, ""},
		{pipeline.StatusFailed, &api.JobError{Code: "prompt_rejected", Message: "the provider refused the prompt"},
			"job j failed: the provider refused the prompt (prompt_rejected)"},
		{pipeline.StatusCanceled, &api.JobError{Code: "canceled"}, "job j canceled: canceled"},
		{pipeline.StatusCanceled, nil, "job j canceled"},
		{pipeline.StatusDeadLettered, &api.JobError{Code: "unbound_version", Message: "v3 is not served"},
			"job j dead-lettered: v3 is not served (unbound_version); see edgepipe dlq list"},
		{pipeline.StatusNeedsReview, nil, "job j needs-review; an operator must retry or fail it (edgepipe review)"},
	} {
		j := jobResource("j", tc.st)
		j.Error = tc.err
		err := settledError(j)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.st, err, tc.want)
		}
	}
}

// TestStreamGivesUpOn4xx: a 404 on the stream is not retried.
func TestStreamGivesUpOn4xx(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			respondJSON(w, 202, jobResource("v1-gone", pipeline.StatusPending))
			return
		}
		respondProblem(w, 404, "not_found", "Not found", "no such resource")
	}))
	c := newTestCLI(t, srv.URL)
	err := c.submit(context.Background(), []string{demoFile, "--wait"})
	if err == nil || err.Error() != "Not found: no such resource (not_found)" {
		t.Fatalf("err = %v", err)
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("%d requests, want the submission and one stream: %+v", n, rec.all())
	}
}

// TestStreamRetriesThenGivesUp: a server whose stream keeps failing is
// retried a bounded number of times.
func TestStreamRetriesThenGivesUp(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST":
			respondJSON(w, 202, jobResource("v1-flaky", pipeline.StatusPending))
		case strings.HasSuffix(r.URL.Path, "/events"):
			respondProblem(w, 503, "unavailable", "Service unavailable", "the service is busy; retry shortly")
		default:
			respondJSON(w, 200, jobResource("v1-flaky", pipeline.StatusRunning))
		}
	}))
	c := newTestCLI(t, srv.URL)
	err := c.submit(context.Background(), []string{demoFile, "--wait"})
	if err == nil || !strings.Contains(err.Error(), "following job v1-flaky: Service unavailable") {
		t.Fatalf("err = %v", err)
	}
	if n := len(rec.find("GET", "/v1/jobs/v1-flaky/events")); n != client.DefaultMaxStreamFailures {
		t.Errorf("%d stream attempts, want %d", n, client.DefaultMaxStreamFailures)
	}
}

// TestSubmitWaitTimeout: --timeout ends the wait, not the job.
func TestSubmitWaitTimeout(t *testing.T) {
	t.Parallel()
	srv, _ := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST":
			respondJSON(w, 202, jobResource("v1-slow", pipeline.StatusPending))
		case strings.HasSuffix(r.URL.Path, "/events"):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			respondJSON(w, 200, jobResource("v1-slow", pipeline.StatusPending))
		}
	}))
	c := newTestCLI(t, srv.URL)
	err := c.submit(context.Background(), []string{demoFile, "--wait", "--timeout", "100ms"})
	if err == nil || !strings.HasPrefix(err.Error(), "gave up waiting after 100ms; job v1-slow keeps running") {
		t.Fatalf("err = %v", err)
	}
}

func TestTrackerTTY(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tr := newTracker(&buf, true, jobResource("v1-tty", pipeline.StatusPending), 2)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr.event(api.EventMessage{ID: 1, Kind: "status", From: pipeline.StatusPending, To: pipeline.StatusRunning, At: at(1500)})
	tr.event(api.EventMessage{ID: 2, Kind: "unit_generated", At: at(2500), Detail: map[string]any{"scene": 1}})
	tr.event(api.EventMessage{ID: 3, Kind: "unit_generated", At: at(2600), Detail: map[string]any{"scene": 1}}) // the same scene again
	tr.finish()
	want := "\r\x1b[K[------------------------] 0/2 scenes · preparing +1.5s" +
		"\r\x1b[K[############------------] 1/2 scenes · preparing +2.5s\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}

func TestTrackerRetryWait(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tr := newTracker(&buf, false, jobResource("j", pipeline.StatusRunning), 3)
	tr.event(ev(1, "status", pipeline.StatusPending, pipeline.StatusRunning, nil))
	tr.event(ev(2, "stage_finished", "", "", map[string]any{"stage": "prepare", "units_done": 1}))
	tr.event(ev(3, "status", pipeline.StatusRunning, pipeline.StatusRetryWait,
		map[string]any{"error_code": "provider_timeout", "next_run_at": t0.Add(12 * time.Second).Format(time.RFC3339Nano)}))
	tr.event(ev(4, "status", pipeline.StatusRetryWait, pipeline.StatusRunning, map[string]any{"attempt": 2}))
	want := "j [------------------------] 0/3 scenes · preparing +0.0s\n" +
		"j [########----------------] 1/3 scenes · generating scenes +0.0s\n" +
		"j [########----------------] 1/3 scenes · retry wait (provider_timeout, retry in 12s) +0.0s\n" +
		"j [########----------------] 1/3 scenes · preparing +0.0s\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestSafeFileName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"v1-abc_9": "v1-abc_9", "../etc/passwd": "result", "": "result", "-rf": "result",
		"a b": "result", strings.Repeat("a", 65): "result", "v2-x": "v2-x",
	} {
		if got := safeFileName(in); got != want {
			t.Errorf("safeFileName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSubmitWaitProbesARealMP4 runs the ffprobe path on a file ffmpeg
// makes; skipped without ffmpeg (CI has it).
func TestSubmitWaitProbesARealMP4(t *testing.T) {
	t.Parallel()
	ffmpeg, err1 := exec.LookPath("ffmpeg")
	ffprobe, err2 := exec.LookPath("ffprobe")
	if err1 != nil || err2 != nil {
		t.Skip("ffmpeg/ffprobe not installed: the probe path is not exercised")
	}
	src := filepath.Join(t.TempDir(), "src.mp4")
	cmd := exec.Command(ffmpeg, "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=160x96:rate=25:duration=1",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=24000:duration=1", "-c:v", "libx264", "-preset", "ultrafast",
		"-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}
	mp4, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	ws := &waitServer{t: t, id: "v1-real", script: successScript(), dropAfter: -1, final: succeededJob("v1-real", mp4), mp4: mp4}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL, envFFprobe, ffprobe)
	out := filepath.Join(t.TempDir(), "out.mp4")
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", out}); err != nil {
		t.Fatal(err)
	}
	stdout := c.out.String()
	for _, want := range []string{"ffprobe   mov,mp4,m4a,3gp,3g2,mj2, ", "#0 video    h264", "160x96 yuv420p 25/1 fps", ", 25 frames",
		"#1 audio    aac (LC) 24000 Hz 1 ch"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// TestStoryboardCanonicalForm: the body sent is the file's object with keys
// sorted at every level and numbers exactly as written, so the server
// judges what the user wrote and formatting never changes the key.
func TestStoryboardCanonicalForm(t *testing.T) {
	t.Parallel()
	c := newTestCLI(t, "http://127.0.0.1:1")
	c.stdin = strings.NewReader(`{ "scenes": [ {"z": 1e3, "y": 1500.0, "x": 12345678901234567890} ],
		"b": "<&>", "a": null }`)
	body, scenes, err := c.readStoryboard("-", "v2-x")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":null,"b":"\u003c\u0026\u003e","instance_id":"v2-x","scenes":[{"x":12345678901234567890,"y":1500.0,"z":1e3}]}`
	if string(body) != want || scenes != 1 {
		t.Errorf("body %s (%d scenes)\nwant %s", body, scenes, want)
	}
}

// TestSubmitWaitReconnectsASilentStream: a stream that goes silent without
// closing is dropped after the idle limit and resumed with Last-Event-ID.
func TestSubmitWaitReconnectsASilentStream(t *testing.T) {
	t.Parallel()
	mp4 := []byte("x")
	ws := &waitServer{t: t, id: "v1-stall", script: successScript(), dropAfter: -1, stallAfter: 3, final: succeededJob("v1-stall", mp4), mp4: mp4}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	c.streamIdle = 100 * time.Millisecond
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", filepath.Join(t.TempDir(), "x.mp4"), "--timeout", "60s"}); err != nil {
		t.Fatalf("%v\n%s", err, c.errOut)
	}
	if ws.conns != 2 || ws.lastIDs[1] != "3" {
		t.Errorf("connections %d with Last-Event-ID %q; want a second one resuming after 3", ws.conns, ws.lastIDs)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

const (
	testToken      = "tok-client-test-0123456789"
	testAdminToken = "adm-client-test-0123456789"
)

// testCLI is a cliEnv wired to buffers and a fake environment.
type testCLI struct {
	*cliEnv
	out, errOut *bytes.Buffer
	env         map[string]string
	dataDir     string
}

// newTestCLI points the client commands at url with the tenant token in
// EDGEPIPE_TOKEN and no ffprobe, unless overridden by kv pairs ("" deletes).
func newTestCLI(t *testing.T, url string, kv ...string) *testCLI {
	t.Helper()
	dir := t.TempDir()
	env := map[string]string{
		envURL:              url,
		envToken:            testToken,
		"EDGEPIPE_DATA_DIR": dir,
		envFFprobe:          filepath.Join(dir, "no-ffprobe-here"),
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(env, kv[i])
		} else {
			env[kv[i]] = kv[i+1]
		}
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	tc := &testCLI{out: &bytes.Buffer{}, errOut: &bytes.Buffer{}, env: env, dataDir: dir}
	tc.cliEnv = &cliEnv{
		stdin: strings.NewReader(""), stdout: tc.out, stderr: tc.errOut,
		getenv: func(k string) string { return env[k] }, environ: environ,
		reconnectDelay: time.Millisecond, reconnectMax: 5 * time.Millisecond,
		streamIdle: 10 * time.Second, now: time.Now,
	}
	return tc
}

// request is what a canned server saw.
type request struct {
	Method, Path, Query string
	Header              http.Header
	Body                string
}

// recorder records every request to a handler.
type recorder struct {
	mu   sync.Mutex
	reqs []request
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, request{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Clone(), b.String()})
		r.mu.Unlock()
		req.Body = http.NoBody
		h.ServeHTTP(w, req)
	})
}

func (r *recorder) all() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// find returns the requests with this method and path.
func (r *recorder) find(method, path string) []request {
	var out []request
	for _, q := range r.all() {
		if q.Method == method && q.Path == path {
			out = append(out, q)
		}
	}
	return out
}

func serveCanned(t *testing.T, h http.Handler) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec.wrap(h))
	t.Cleanup(srv.Close)
	return srv, rec
}

func respondJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func respondProblem(w http.ResponseWriter, status int, code, title, detail string, fields ...pipeline.FieldError) {
	w.Header().Set("Content-Type", api.ProblemContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.Problem{Type: "urn:edgepipe:problem:" + code, Title: title, Status: status,
		Code: code, Detail: detail, Errors: fields})
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func jobResource(id string, st pipeline.Status) api.JobResource {
	return api.JobResource{ID: id, Operation: "render_video", Version: "v1", Status: st,
		CreatedAt: t0, UpdatedAt: t0, StatusChangedAt: t0,
		Links: api.Links{Self: "/v1/jobs/" + id, Events: "/v1/jobs/" + id + "/events"}}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		wantPos  []string
		wantWait bool
		wantKey  string
	}{
		{[]string{"f.json"}, []string{"f.json"}, false, ""},
		{[]string{"f.json", "--wait"}, []string{"f.json"}, true, ""},
		{[]string{"--wait", "f.json", "--key", "k"}, []string{"f.json"}, true, "k"},
		{[]string{"-", "--key=k"}, []string{"-"}, false, "k"},
		{[]string{"a", "b", "--wait"}, []string{"a", "b"}, true, ""},
		{[]string{"--", "--wait"}, []string{"--wait"}, false, ""},
		{[]string{"a", "--", "-x", "--wait"}, []string{"a", "-x", "--wait"}, false, ""},
		{nil, nil, false, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			wait := fs.Bool("wait", false, "")
			key := fs.String("key", "", "")
			pos, err := parseArgs(fs, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pos, tc.wantPos) || *wait != tc.wantWait || *key != tc.wantKey {
				t.Errorf("pos %q wait %v key %q; want %q %v %q", pos, *wait, *key, tc.wantPos, tc.wantWait, tc.wantKey)
			}
		})
	}
}

func TestHelpOnEveryClientCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"submit", []string{"--help"}, "Usage: edgepipe submit FILE"},
		{"status", []string{"-h"}, "Usage: edgepipe status ID"},
		{"cancel", []string{"--help"}, "Usage: edgepipe cancel ID"},
		{"dlq", []string{"--help"}, "Usage: edgepipe dlq list|redrive"},
		{"dlq", []string{"list", "--help"}, "Usage: edgepipe dlq list"},
		{"dlq", []string{"redrive", "--help"}, "Usage: edgepipe dlq redrive DEAD_LETTER_ID"},
		{"review", []string{"--help"}, "Usage: edgepipe review list|retry|fail"},
		{"review", []string{"list", "--help"}, "Usage: edgepipe review list"},
		{"review", []string{"retry", "--help"}, "Usage: edgepipe review retry ID [--reason TEXT]"},
		{"review", []string{"fail", "-h"}, "Usage: edgepipe review fail ID [--reason TEXT]"},
	} {
		t.Run(strings.Join(append([]string{tc.name}, tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			tc2 := newTestCLI(t, "http://127.0.0.1:1")
			cmds := map[string]func(context.Context, []string) error{
				"submit": tc2.submit, "status": tc2.status, "cancel": tc2.cancel, "dlq": tc2.dlq, "review": tc2.review,
			}
			err := cmds[tc.name](context.Background(), tc.args)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("err = %v", err)
			}
			if !strings.Contains(tc2.errOut.String(), tc.want) {
				t.Errorf("help output lacks %q:\n%s", tc.want, tc2.errOut)
			}
			if _, ok := commands[tc.name]; !ok {
				t.Errorf("%s is not registered", tc.name)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(*testCLI) error
		want string
	}{
		{"submit without file", func(c *testCLI) error { return c.submit(context.Background(), nil) }, "missing FILE"},
		{"status with two ids", func(c *testCLI) error { return c.status(context.Background(), []string{"a", "b"}) }, `unexpected argument "b"`},
		{"dlq unknown", func(c *testCLI) error { return c.dlq(context.Background(), []string{"purge"}) }, `unknown dlq command "purge"`},
		{"redrive non-number", func(c *testCLI) error { return c.dlq(context.Background(), []string{"redrive", "x"}) }, "positive whole number"},
		{"key with a newline", func(c *testCLI) error {
			return c.submit(context.Background(), []string{demoFile, "--key", "a\nb"})
		}, "--key must be 1 to 255 printable ASCII characters"},
		{"out without wait", func(c *testCLI) error {
			return c.submit(context.Background(), []string{"f.json", "--out", "x.mp4"})
		}, "--out needs --wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestCLI(t, "http://127.0.0.1:1")
			err := tc.run(c)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a usage error with %q", err, tc.want)
			}
		})
	}
}

// TestTokenResolution: --token, then the environment, then the
// development token file serve writes; the admin commands read their own.
func TestTokenResolution(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/admin/") {
			respondJSON(w, 200, api.DeadLetterList{DeadLetters: []api.DeadLetter{}})
			return
		}
		respondJSON(w, 200, jobResource("j1", pipeline.StatusPending))
	}))
	type tcase struct {
		name  string
		kv    []string
		files map[string]string
		args  []string
		admin bool
		want  string // Authorization header, or an error substring
	}
	for _, tc := range []tcase{
		{name: "flag wins", args: []string{"--token", "tok-from-flag-000000"}, want: "Bearer tok-from-flag-000000"},
		{name: "environment", want: "Bearer " + testToken},
		{name: "dev-token file", kv: []string{envToken, ""}, files: map[string]string{"dev-token": " tok-from-file-000000\n"},
			want: "Bearer tok-from-file-000000"},
		{name: "no token anywhere", kv: []string{envToken, ""}, want: "no token: pass --token"},
		{name: "empty file", kv: []string{envToken, ""}, files: map[string]string{"dev-token": "\n"}, want: "is empty"},
		{name: "admin from environment", admin: true, kv: []string{"EDGEPIPE_ADMIN_TOKEN", testAdminToken}, want: "Bearer " + testAdminToken},
		{name: "admin from file, not the tenant token", admin: true, files: map[string]string{"dev-admin-token": "adm-from-file-000000"},
			want: "Bearer adm-from-file-000000"},
		{name: "admin missing", admin: true, want: "dev-admin-token"},
		{name: "token with a space", args: []string{"--token", "a b"}, want: "printable ASCII"},
		{name: "unknown setting refused", kv: []string{"EDGEPIPE_TYPO", "1"}, want: "EDGEPIPE_TYPO: unknown setting"},
		{name: "bad URL", args: []string{"--url", "ftp://x"}, want: "want http(s)://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestCLI(t, srv.URL, tc.kv...)
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(c.dataDir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tc.admin {
				err = c.dlq(context.Background(), append([]string{"list"}, tc.args...))
			} else {
				err = c.status(context.Background(), append([]string{"j1"}, tc.args...))
			}
			if !strings.HasPrefix(tc.want, "Bearer ") {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rec.all() {
				got = append(got, r.Header.Get("Authorization"))
			}
			if !slices.Contains(got, tc.want) {
				t.Errorf("Authorization headers %q lack %q", got, tc.want)
			}
		})
	}
}

// realAPI serves the real API over a SQLite store with no workers: jobs
// stay where the API put them.
func realAPI(t *testing.T) *httptest.Server { return realAPIEnv(t).srv }

// apiEnv is the real API with its store and clock, for tests that move
// jobs the way a worker would.
type apiEnv struct {
	srv     *httptest.Server
	store   *sqlite.Store
	objects *fs.Store
	clock   *pipeline.ManualClock
}

func realAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clock := pipeline.NewManualClock(t0)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "edgepipe.db"), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	router, err := routing.NewRouter(routing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{Store: st, Objects: objs, Router: router, Clock: clock,
		Tokens: map[string]string{testToken: "acme"}, AdminToken: testAdminToken, SSEPoll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.CloseStreams(); hs.Close() })
	return &apiEnv{srv: hs, store: st, objects: objs, clock: clock}
}

// claim takes the next v1 job like a worker does.
func (e *apiEnv) claim(t *testing.T) pipeline.Claimed {
	t.Helper()
	cs, _, err := e.store.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "test-worker", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v %v", cs, err)
	}
	return cs[0]
}

// finish ends a claimed job with an outcome.
func (e *apiEnv) finish(t *testing.T, c pipeline.Claimed, o pipeline.Outcome) {
	t.Helper()
	if err := e.store.Finish(context.Background(), c.Lease, o); err != nil {
		t.Fatal(err)
	}
}

// toReview parks a claimed job for an operator, as an ambiguous provider
// failure does.
func (e *apiEnv) toReview(t *testing.T, c pipeline.Claimed) {
	t.Helper()
	e.finish(t, c, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorClass: pipeline.ClassAmbiguous,
		ErrorCode: "provider_timeout", ErrorMessage: "the speech provider did not answer; it may have billed"})
}

// succeed stores content as a claimed job's result and marks it succeeded.
func (e *apiEnv) succeed(t *testing.T, c pipeline.Claimed, content []byte) {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256(content)
	key := "renders/" + hex.EncodeToString(sum[:8]) + ".mp4"
	if err := e.store.ClaimObject(ctx, c.Lease, key); err != nil {
		t.Fatal(err)
	}
	info, err := e.objects.Put(ctx, key, bytes.NewReader(content), pipeline.PutOptions{ContentType: "video/mp4"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CommitAsset(ctx, c.Lease, pipeline.Asset{Key: key, Kind: "render", SizeBytes: info.Size,
		SHA256: hex.EncodeToString(sum[:]), ContentType: "video/mp4", DurationMS: 3500}); err != nil {
		t.Fatal(err)
	}
	e.finish(t, c, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: key})
}

// TestAgainstRealAPI runs the client commands against the real handlers,
// so the client and the API cannot drift apart: submit, replay, a refused
// body, status, cancel (and 409 after), an unbound version followed to
// dead_lettered over SSE, dlq list and a refused redrive.
func TestAgainstRealAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := realAPI(t)
	sb := filepath.Join("..", "..", "testdata", "storyboards")
	newCLI := func() *testCLI { return newTestCLI(t, hs.URL, "EDGEPIPE_ADMIN_TOKEN", testAdminToken) }

	c := newCLI()
	if err := c.submit(ctx, []string{filepath.Join(sb, "demo.json")}); err != nil {
		t.Fatalf("submit: %v (%s)", err, c.errOut)
	}
	id := strings.TrimSpace(c.out.String())
	if !strings.HasPrefix(id, "v1-") || !strings.Contains(c.errOut.String(), "submitted: job "+id+" on v1, pending") {
		t.Fatalf("submit printed %q / %q", id, c.errOut)
	}

	c = newCLI()
	if err := c.submit(ctx, []string{filepath.Join(sb, "demo.json")}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(c.out.String()); got != id || !strings.Contains(c.errOut.String(), "replayed: job "+id) {
		t.Fatalf("second submit printed %q / %q, want a replay of %s", got, c.errOut, id)
	}

	c = newCLI()
	err := c.submit(ctx, []string{filepath.Join(sb, "invalid.json")})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Problem.Code != "validation_failed" || len(ae.Problem.Errors) < 4 {
		t.Fatalf("invalid.json: err = %v", err)
	}
	if !strings.HasPrefix(err.Error(), "The request is invalid: ") || strings.Contains(err.Error(), "see errors") {
		t.Errorf("invalid.json: %s", err)
	}

	c = newCLI()
	if err := c.status(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"job        " + id, "status     pending", "version    v1", "attempts   0"} {
		if !strings.Contains(c.out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, c.out)
		}
	}

	c = newCLI()
	if err := c.cancel(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); got != "job "+id+" canceled\n" {
		t.Errorf("cancel printed %q", got)
	}
	// Repeating a cancel of a canceled job is harmless: it answers the job.
	c = newCLI()
	if err := c.cancel(ctx, []string{id}); err != nil {
		t.Fatalf("second cancel: %v", err)
	}

	// v3 is not bound: the job is accepted dead-lettered, and --wait
	// follows the real event stream to that.
	c = newCLI()
	err = c.submit(ctx, []string{filepath.Join(sb, "v2.json"), "--id", "v3-unbound", "--wait", "--timeout", "10s"})
	var je *jobError
	if !errors.As(err, &je) || je.Status != pipeline.StatusDeadLettered || je.Err == nil || je.Err.Code != "unbound_version" {
		t.Fatalf("submit v3 --wait: err = %v", err)
	}

	c = newCLI()
	if err := c.dlq(ctx, []string{"list"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.out.String(), "v3-unbound") || !strings.Contains(c.out.String(), "unbound_version") {
		t.Errorf("dlq list:\n%s", c.out)
	}
	c = newCLI()
	if err := c.dlq(ctx, []string{"list", "--json"}); err != nil {
		t.Fatal(err)
	}
	var page api.DeadLetterList
	if err := json.Unmarshal(c.out.Bytes(), &page); err != nil || len(page.DeadLetters) != 1 {
		t.Fatalf("dlq list --json: %v %s", err, c.out)
	}
	c = newCLI()
	err = c.dlq(ctx, []string{"redrive", fmt.Sprint(page.DeadLetters[0].ID)})
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Problem.Code != "version_unbound" {
		t.Fatalf("redrive: %v", err)
	}

	// The tenant token is not an operator token.
	c = newTestCLI(t, hs.URL, "EDGEPIPE_ADMIN_TOKEN", testToken)
	err = c.dlq(ctx, []string{"list"})
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("dlq with a tenant token: %v", err)
	}
}

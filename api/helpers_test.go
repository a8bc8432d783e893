package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

// The concrete store satisfies the API's interface.
var _ Store = (*sqlite.Store)(nil)

const (
	tokAcme   = "tok-acme-0123456789abcdef"
	tokGlobex = "tok-globex-0123456789abcdef"
	tokAdmin  = "admin-token-0123456789abcdef"
)

var testT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fakeResolver answers every name from a table; unknown names fail, so no
// test ever reaches real DNS.
type fakeResolver map[string][]string

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ips, ok := r[host]
	if !ok {
		return nil, &netErr{host}
	}
	out := make([]netip.Addr, len(ips))
	for i, s := range ips {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

type netErr struct{ host string }

func (e *netErr) Error() string { return "no such host " + e.host }

var testResolver = fakeResolver{
	"hooks.example.com":    {"93.184.215.14"},
	"internal.example.com": {"10.1.2.3"},
	"mixed.example.com":    {"93.184.215.14", "127.0.0.1"},
	"metadata.example.com": {"169.254.169.254"},
	"localhost":            {"127.0.0.1", "::1"},
}

type testEnv struct {
	srv     *Server
	h       http.Handler
	store   *sqlite.Store
	objects *fs.Store
	clock   *pipeline.ManualClock
	metrics *Metrics
	// noContract skips the openapi.yaml check of each exchange, for the
	// few tests that route requests the document does not describe.
	noContract bool
}

type envOption func(*Config)

func newEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	ctx := context.Background()
	clock := pipeline.NewManualClock(testT0)
	dir := t.TempDir()
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
	m := NewMetrics()
	cfg := Config{
		Store: st, Objects: objs, Router: router,
		Tokens:     map[string]string{tokAcme: "acme", tokGlobex: "globex"},
		AdminToken: tokAdmin, Resolver: testResolver, Clock: clock, Metrics: m,
		SSEPoll: 5 * time.Millisecond, Logger: testLogger(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{srv: srv, h: srv.Handler(), store: st, objects: objs, clock: clock, metrics: m}
}

func testLogger() *slog.Logger {
	if os.Getenv("EDGEPIPE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

const validBody = `{"operation":"render_video","title":"A story","scenes":[
 {"image_prompt":"a lighthouse at dusk","narration":"Every night the keeper climbed.","duration_ms":2000},
 {"video_prompt":"waves on rocks","narration":"And the sea answered.","duration_ms":1500}],
 "options":{"resolution":"640x360","fps":25}}`

// withField returns validBody with one more top-level field.
func withField(k string, v any) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(validBody), &m); err != nil {
		panic(err)
	}
	m[k] = v
	b, _ := json.Marshal(m)
	return string(b)
}

type req struct {
	method, path, body string
	hdr                map[string]string
}

func (e *testEnv) do(t testing.TB, r req) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	for k, v := range r.hdr {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, hr)
	if !e.noContract {
		checkContract(t, hr, []byte(r.body), w)
	}
	return w
}

func submitHeaders(token, key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Idempotency-Key": key}
}

func (e *testEnv) submit(t testing.TB, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	return e.do(t, req{method: http.MethodPost, path: "/v1/jobs", body: body, hdr: submitHeaders(token, key)})
}

// mustSubmit submits validBody and returns the created job.
func (e *testEnv) mustSubmit(t testing.TB, token, key string) JobResource {
	t.Helper()
	w := e.submit(t, token, key, validBody)
	if w.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	return decode[JobResource](t, w)
}

func (e *testEnv) get(t testing.TB, token, path string) *httptest.ResponseRecorder {
	t.Helper()
	return e.do(t, req{method: http.MethodGet, path: path, hdr: map[string]string{"Authorization": "Bearer " + token}})
}

func decode[T any](t testing.TB, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, w.Body.String(), err)
	}
	return v
}

func problemOf(t testing.TB, w *httptest.ResponseRecorder) Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != ProblemContentType {
		t.Fatalf("content type %q, want %s (body %s)", ct, ProblemContentType, w.Body)
	}
	p := decode[Problem](t, w)
	if p.Status != w.Code || p.Code == "" || p.Title == "" || !strings.HasPrefix(p.Type, problemTypePrefix) {
		t.Fatalf("incomplete problem for %d: %+v", w.Code, p)
	}
	return p
}

// claim takes the job's queue message like a worker does.
func (e *testEnv) claim(t testing.TB, queue string) pipeline.Claimed {
	t.Helper()
	cs, _, err := e.store.Fetch(context.Background(), &pipeline.FetchParams{Queue: queue, Owner: "test-worker", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v %v", cs, err)
	}
	return cs[0]
}

// succeed drives a claimed job to succeeded with content as its result,
// following the object write protocol.
func (e *testEnv) succeed(t testing.TB, c pipeline.Claimed, content []byte) string {
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
	if err := e.store.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: key}); err != nil {
		t.Fatal(err)
	}
	return key
}

// toReview drives a claimed job to needs_review with an ambiguous error.
func (e *testEnv) toReview(t testing.TB, c pipeline.Claimed) {
	t.Helper()
	if err := e.store.Finish(context.Background(), c.Lease, pipeline.Outcome{
		Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorClass: pipeline.ClassAmbiguous,
		ErrorCode: "provider_timeout", ErrorMessage: "the speech provider did not answer; it may have billed",
	}); err != nil {
		t.Fatal(err)
	}
}

// ak is the internal key of acme's job with instance id id: what the store
// and the operator routes address it by.
func ak(id string) string { return pipeline.JobKey("acme", id) }

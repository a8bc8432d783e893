package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

// The client is tested against the real api package served in-process
// over a real SQLite store: no workers run, so jobs stay where the API put
// them until a test moves them with the store, as a worker would.

const (
	tokAcme   = "tok-acme-client-0123456789"
	tokGlobex = "tok-globex-client-0123456789"
	tokAdmin  = "tok-admin-client-0123456789"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type testServer struct {
	*httptest.Server
	store   *sqlite.Store
	objects *fs.Store
	clock   *pipeline.ManualClock

	// wrap, when set, sees every request before the API does.
	mu   sync.Mutex
	wrap func(w http.ResponseWriter, r *http.Request, next http.Handler)
	seen []*http.Request
}

func newServer(t testing.TB) *testServer {
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
		Tokens:     map[string]string{tokAcme: "acme", tokGlobex: "globex"},
		AdminToken: tokAdmin, SSEPoll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{store: st, objects: objs, clock: clock}
	h := srv.Handler()
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.seen = append(ts.seen, r.Clone(context.Background()))
		wrap := ts.wrap
		ts.mu.Unlock()
		if wrap != nil {
			wrap(w, r, h)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseStreams(); ts.Close() })
	return ts
}

// setWrap installs wrap.
func (s *testServer) setWrap(wrap func(w http.ResponseWriter, r *http.Request, next http.Handler)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrap = wrap
}

// requests returns the requests seen for a path.
func (s *testServer) requests(path string) []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*http.Request
	for _, r := range s.seen {
		if r.URL.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (s *testServer) client(t testing.TB, token string) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: s.URL, Token: token, ReconnectDelay: time.Millisecond, ReconnectMax: 5 * time.Millisecond,
		MaxStreamFailures: 5})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// board is a valid storyboard with n scenes.
func board(n int) map[string]any {
	var scenes []any
	for i := range n {
		scenes = append(scenes, map[string]any{"image_prompt": "a lighthouse, view " + string(rune('a'+i)),
			"narration": "The keeper climbed.", "duration_ms": 1000})
	}
	return map[string]any{"operation": "render_video", "title": "t", "scenes": scenes,
		"options": map[string]any{"resolution": "640x360", "fps": 25}}
}

// claim takes the job's queue message like a worker does.
func (s *testServer) claim(t testing.TB) pipeline.Claimed {
	t.Helper()
	cs, _, err := s.store.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "test-worker", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v %v", cs, err)
	}
	return cs[0]
}

// succeed drives a claimed job to succeeded with content as its result,
// following the object write protocol.
func (s *testServer) succeed(t testing.TB, c pipeline.Claimed, content []byte) {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256(content)
	key := "renders/" + hex.EncodeToString(sum[:8]) + ".mp4"
	if err := s.store.ClaimObject(ctx, c.Lease, key); err != nil {
		t.Fatal(err)
	}
	info, err := s.objects.Put(ctx, key, bytes.NewReader(content), pipeline.PutOptions{ContentType: "video/mp4"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.CommitAsset(ctx, c.Lease, pipeline.Asset{Key: key, Kind: "render", SizeBytes: info.Size,
		SHA256: hex.EncodeToString(sum[:]), ContentType: "video/mp4", DurationMS: 3500}); err != nil {
		t.Fatal(err)
	}
	if err := s.store.Finish(ctx, c.Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded, ResultKey: key}); err != nil {
		t.Fatal(err)
	}
}

// toReview drives a claimed job to needs_review with an ambiguous error.
func (s *testServer) toReview(t testing.TB, c pipeline.Claimed) {
	t.Helper()
	if err := s.store.Finish(context.Background(), c.Lease, pipeline.Outcome{
		Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorClass: pipeline.ClassAmbiguous,
		ErrorCode: "provider_timeout", ErrorMessage: "the speech provider did not answer; it may have billed",
	}); err != nil {
		t.Fatal(err)
	}
}

func mustSubmit(t testing.TB, c *Client, key string, body any) Job {
	t.Helper()
	s, err := c.Submit(context.Background(), key, body)
	if err != nil {
		t.Fatalf("submit %s: %v", key, err)
	}
	return s.Job
}

func hasField(p Problem, field string) bool {
	return slices.ContainsFunc(p.Errors, func(f pipeline.FieldError) bool { return strings.HasPrefix(f.Field, field) })
}

package provider_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

type seen struct {
	method, path string
	header       http.Header
	body         map[string]any
}

// recorder answers every provider endpoint successfully and records the
// requests.
func recorder(t *testing.T) (string, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var got []seen
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, header: r.Header.Clone()}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			if err := json.Unmarshal(b, &s.body); err != nil {
				t.Errorf("request body %q is not JSON: %v", b, err)
			}
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		switch r.URL.Path {
		case "/api/v1/images":
			w.Header().Set("Content-Type", "image/png")
		case "/api/v1/speech":
			w.Header().Set("Content-Type", "audio/wav")
		case "/api/v1/videos":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"id":"vid_1","status":"queued"}`)
		case "/api/v1/videos/vid_1":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"vid_1","status":"running"}`)
		case "/api/v1/videos/vid_1/content":
			w.Header().Set("Content-Type", "video/mp4")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/api/", func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

// TestHeadersFollowTheContract: Idempotency-Key goes only to the
// idempotent_verified operation; every billable call names its unit; bodies
// use the provider's field names. The base URL's path prefix is kept.
func TestHeadersFollowTheContract(t *testing.T) {
	t.Parallel()
	base, requests := recorder(t)
	p := newClient(t, base, func(c *provider.Config) { c.Models = map[string]string{pipeline.OpImage: "img-model-x"} })
	ctx := context.Background()
	meta := metaFor("job7/scene3", "job7/scene3/key")

	m, err := p.GenerateImage(ctx, meta, sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	readMedia(t, m)
	if m, err = p.Synthesize(ctx, meta, sampleSpeech); err != nil {
		t.Fatal(err)
	}
	readMedia(t, m)
	id, err := p.SubmitVideo(ctx, meta, sampleVideo)
	if err != nil || id != "vid_1" {
		t.Fatalf("SubmitVideo = %q, %v", id, err)
	}
	st, err := p.VideoStatus(ctx, id)
	if err != nil || st != (pipeline.VideoState{}) {
		t.Fatalf("VideoStatus = %+v, %v; want running (zero state)", st, err)
	}
	if m, err = p.FetchVideo(ctx, id); err != nil {
		t.Fatal(err)
	}
	readMedia(t, m)

	got := requests()
	want := []struct {
		method, path string
		key, unit    string
		body         map[string]any
	}{
		{"POST", "/api/v1/images", meta.IdempotencyKey, meta.UnitID,
			map[string]any{"prompt": sampleImage.Prompt, "width": 64.0, "height": 48.0, "model": "img-model-x"}},
		{"POST", "/api/v1/speech", "", meta.UnitID,
			map[string]any{"text": sampleSpeech.Text, "voice": "narrator"}},
		{"POST", "/api/v1/videos", "", meta.UnitID,
			map[string]any{"prompt": sampleVideo.Prompt, "duration_ms": 400.0, "width": 64.0, "height": 48.0, "fps": 10.0}},
		{"GET", "/api/v1/videos/vid_1", "", "", nil},
		{"GET", "/api/v1/videos/vid_1/content", "", "", nil},
	}
	if len(got) != len(want) {
		t.Fatalf("server saw %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.method != w.method || g.path != w.path {
			t.Errorf("request %d: %s %s, want %s %s", i, g.method, g.path, w.method, w.path)
		}
		if k := g.header.Get(provider.HeaderIdempotencyKey); k != w.key {
			t.Errorf("%s: Idempotency-Key %q, want %q", w.path, k, w.key)
		}
		if _, ok := g.header["X-Idempotency-Key"]; ok {
			t.Errorf("%s: X-Idempotency-Key sent", w.path)
		}
		if _, ok := g.header[provider.HeaderUnitID]; ok != (w.unit != "") || g.header.Get(provider.HeaderUnitID) != w.unit {
			t.Errorf("%s: X-Unit-Id %q, want %q", w.path, g.header.Get(provider.HeaderUnitID), w.unit)
		}
		if w.body != nil {
			if ct := g.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q", w.path, ct)
			}
			if len(g.body) != len(w.body) {
				t.Errorf("%s: body %v, want %v", w.path, g.body, w.body)
			}
			for k, v := range w.body {
				if g.body[k] != v {
					t.Errorf("%s: body[%q] = %v, want %v", w.path, k, g.body[k], v)
				}
			}
		}
	}
}

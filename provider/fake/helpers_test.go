package fake

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

const noFFmpeg = "/nonexistent/edgepipe-test/ffmpeg"

// harness is a fake provider behind an httptest server.
type harness struct {
	t      *testing.T
	srv    *Server
	base   string
	client *http.Client
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	if cfg.FFmpegPath == "" {
		cfg.FFmpegPath = noFFmpeg
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	c := ts.Client()
	c.Timeout = 20 * time.Second
	return &harness{t: t, srv: s, base: ts.URL, client: c}
}

// stubFFmpeg returns the path of a shell script standing in for ffmpeg.
func stubFFmpeg(t *testing.T, name string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the ffmpeg stub is a shell script")
	}
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	status int
	header http.Header
	body   []byte
	err    error // transport error (e.g. dropped connection)
}

func (h *harness) do(method, path string, body any, headers map[string]string) result {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

func (h *harness) post(path string, body any, headers map[string]string) result {
	h.t.Helper()
	return h.do(http.MethodPost, path, body, headers)
}

func (h *harness) get(path string) result {
	h.t.Helper()
	return h.do(http.MethodGet, path, nil, nil)
}

func (r result) errorCode(t *testing.T) string {
	t.Helper()
	var e ErrorResponse
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return e.Error.Code
}

func mustStatus(t *testing.T, r result, want int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != want {
		b := r.body
		if len(b) > 300 {
			b = b[:300]
		}
		t.Fatalf("status = %d, want %d; body %q", r.status, want, b)
	}
}

func mustParseFaults(t *testing.T, spec string) Faults {
	t.Helper()
	f, err := ParseFaults(spec)
	if err != nil {
		t.Fatalf("ParseFaults(%q): %v", spec, err)
	}
	return f
}

var (
	sampleImage  = ImageRequest{Prompt: "a red fox jumps over the lazy dog", Width: 320, Height: 240}
	sampleSpeech = SpeechRequest{Text: "hello from the fake provider", Voice: "narrator"}
	sampleVideo  = VideoRequest{Prompt: "waves at dusk", DurationMS: 1200, Width: 320, Height: 240, FPS: 25}
)

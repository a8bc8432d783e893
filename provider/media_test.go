package provider_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

// TestMediaIsStreamed: the call returns while the provider is still sending
// the body, so nothing buffers the whole file. The server holds back the
// second half until the test has received the first.
func TestMediaIsStreamed(t *testing.T) {
	t.Parallel()
	half := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	release := make(chan struct{})
	var finished atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(2*len(half)))
		_, _ = w.Write(half)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Second):
			return
		}
		_, _ = w.Write(half)
		finished.Store(true)
	}))
	t.Cleanup(ts.Close)
	p := newClient(t, ts.URL)

	start := time.Now()
	m, err := p.GenerateImage(context.Background(), metaFor("u", "k"), sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Body.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the call took %s: it waited for the whole body instead of streaming it", d)
	}
	if finished.Load() {
		t.Fatal("the server finished before the call returned")
	}
	if m.ContentType != provider.ContentTypePNG {
		t.Fatalf("ContentType = %q", m.ContentType)
	}
	first := make([]byte, len(half))
	if _, err := io.ReadFull(m.Body, first); err != nil {
		t.Fatalf("first half: %v", err)
	}
	if finished.Load() {
		t.Fatal("the server finished before the first half was read")
	}
	close(release)
	rest, err := io.ReadAll(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, half) || !bytes.Equal(rest, half) {
		t.Fatal("streamed bytes differ from what the server sent")
	}
}

// TestMediaBodyErrorsAreClassified: a stream that breaks off after a 200 is
// classified like the call: a billable call's outcome is unknown (it was
// answered, so probably billed, and the result is lost), a read's is
// not_sent.
func TestMediaBodyErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cut := func(w http.ResponseWriter, ct string) {
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write([]byte("partial"))
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
	stall := func(w http.ResponseWriter, r *http.Request, ct string) {
		// Read the body: net/http notices a client hanging up (and cancels
		// r.Context) only once the request body is consumed.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write([]byte("partial"))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
	speech := func(p *provider.HTTP) (pipeline.Media, error) {
		return p.Synthesize(context.Background(), metaFor("u", ""), sampleSpeech)
	}
	fetch := func(p *provider.HTTP) (pipeline.Media, error) { return p.FetchVideo(context.Background(), "vid_1") }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		call    func(*provider.HTTP) (pipeline.Media, error)
		op      string
		outcome pipeline.CallOutcome
		code    string
	}{
		{"speech cut", func(w http.ResponseWriter, _ *http.Request) { cut(w, "audio/wav") }, speech,
			pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeConnectionLost},
		{"speech stalls past the timeout", func(w http.ResponseWriter, r *http.Request) { stall(w, r, "audio/x-wav") }, speech,
			pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeTimeout},
		{"video content cut", func(w http.ResponseWriter, _ *http.Request) { cut(w, "video/mp4") }, fetch,
			provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodePollFailed},
		{"video content stalls", func(w http.ResponseWriter, r *http.Request) { stall(w, r, "video/mp4") }, fetch,
			provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodePollFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(tt.handler)
			t.Cleanup(ts.Close)
			p := newClient(t, ts.URL, withTimeout(3*time.Second))
			m, err := tt.call(p)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			defer m.Body.Close()
			b, err := io.ReadAll(m.Body)
			if string(b) != "partial" {
				t.Errorf("read %q before the failure, want %q", b, "partial")
			}
			wantCallError(t, err, tt.op, tt.outcome, tt.code, 200)
		})
	}
}

// TestMediaBodyCancelIsCancellation: the caller canceling while it streams
// sees its cancellation, not a provider failure.
func TestMediaBodyCancelIsCancellation(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write([]byte("partial"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(ts.Close)
	p := newClient(t, ts.URL)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := p.FetchVideo(ctx, "vid_1")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Body.Close()
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = io.ReadAll(m.Body)
	var ce *pipeline.CallError
	if !errors.Is(err, context.Canceled) || errors.As(err, &ce) {
		t.Fatalf("err = %v, want context.Canceled and no CallError", err)
	}
}

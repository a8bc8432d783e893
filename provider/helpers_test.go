package provider_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

// noFFmpeg makes the fake refuse videos (503) without looking at $PATH.
const noFFmpeg = "/nonexistent/edgepipe-provider-test/ffmpeg"

// startFake runs a real fake provider on a loopback port.
func startFake(t *testing.T, cfg fake.Config) (*fake.Server, string) {
	t.Helper()
	if cfg.FFmpegPath == "" {
		cfg.FFmpegPath = noFFmpeg
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	s, err := fake.New(cfg)
	if err != nil {
		t.Fatalf("fake.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base, err := s.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("fake Stop: %v", err)
		}
	})
	return s, base
}

// newClient builds the client under test against base.
func newClient(t *testing.T, base string, mod ...func(*provider.Config)) *provider.HTTP {
	t.Helper()
	cfg := provider.Config{BaseURL: base, Timeout: 10 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := provider.New(cfg)
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func withTimeout(d time.Duration) func(*provider.Config) {
	return func(c *provider.Config) { c.Timeout = d }
}

// withKeepAliveClient gives the provider an ordinary keep-alive client, the
// setting in which net/http would resend a replayable POST on a reused
// connection. It is what a caller passing its own Config.Client gets.
func withKeepAliveClient(t *testing.T) func(*provider.Config) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return func(c *provider.Config) { c.Client = &http.Client{Transport: tr} }
}

func setFaults(t *testing.T, s *fake.Server, spec string) {
	t.Helper()
	f, err := fake.ParseFaults(spec)
	if err != nil {
		t.Fatalf("ParseFaults(%q): %v", spec, err)
	}
	if err := s.SetFaults(f); err != nil {
		t.Fatal(err)
	}
}

// asCallError fails the test unless err is a *pipeline.CallError.
func asCallError(t *testing.T, err error) *pipeline.CallError {
	t.Helper()
	var ce *pipeline.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *pipeline.CallError", err, err)
	}
	return ce
}

func wantCallError(t *testing.T, err error, op string, outcome pipeline.CallOutcome, code string, status int) *pipeline.CallError {
	t.Helper()
	ce := asCallError(t, err)
	if ce.Op != op || ce.Outcome != outcome || ce.Code != code || ce.HTTPStatus != status {
		t.Fatalf("CallError{Op:%q Outcome:%q Code:%q HTTPStatus:%d}, want {%q %q %q %d}; err: %v",
			ce.Op, ce.Outcome, ce.Code, ce.HTTPStatus, op, outcome, code, status, err)
	}
	if !knownCodes[ce.Code] {
		t.Fatalf("code %q is not one of the package's fixed codes", ce.Code)
	}
	return ce
}

var knownCodes = map[string]bool{
	provider.CodeUnreachable: true, provider.CodeTimeout: true, provider.CodeConnectionLost: true,
	provider.CodeServerError: true, provider.CodeRateLimited: true, provider.CodeRejectedInput: true,
	provider.CodeIdempotencyConflict: true, provider.CodeUnauthorized: true, provider.CodeNotFound: true,
	provider.CodeRejected: true, provider.CodeBadResponse: true, provider.CodePollFailed: true,
	provider.CodeJobNotFound: true, provider.CodeVideoNotReady: true, provider.CodeJobFailed: true,
	provider.CodeGenerationFailed: true, provider.CodeRenderFailed: true, provider.CodeInvalidCall: true,
	provider.CodeIdempotencyKeyMissing: true,
}

// readMedia reads and closes a media body.
func readMedia(t *testing.T, m pipeline.Media) []byte {
	t.Helper()
	defer m.Body.Close()
	b, err := io.ReadAll(m.Body)
	if err != nil {
		t.Fatalf("read media: %v", err)
	}
	return b
}

// deadURL returns the URL of a loopback port nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// stubFFmpeg writes a shell script standing in for ffmpeg: it writes
// "stub mp4" to its last argument, the output path the fake passes, or
// fails when fail is set.
func stubFFmpeg(t *testing.T, fail bool) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh for the ffmpeg stub")
	}
	script := "#!/bin/sh\nfor a in \"$@\"; do out=$a; done\nprintf 'stub mp4\\n' > \"$out\"\n"
	if fail {
		script = "#!/bin/sh\necho 'stub ffmpeg: failing on purpose' >&2\nexit 1\n"
	}
	p := filepath.Join(t.TempDir(), "ffmpeg")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	sampleImage  = pipeline.ImageRequest{Prompt: "a red fox jumps over the lazy dog", Width: 64, Height: 48}
	sampleSpeech = pipeline.SpeechRequest{Text: "hello from the provider client", Voice: "narrator"}
	sampleVideo  = pipeline.VideoRequest{Prompt: "waves at dusk", DurationMS: 400, Width: 64, Height: 48, FPS: 10}
)

func metaFor(unit, key string) pipeline.CallMeta {
	return pipeline.CallMeta{UnitID: unit, IdempotencyKey: key}
}

package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

func speechCall(ctx context.Context, p *provider.HTTP) error {
	m, err := p.Synthesize(ctx, metaFor("job1/scene1", "k"), sampleSpeech)
	if err == nil {
		_, err = io.Copy(io.Discard, m.Body)
		_ = m.Body.Close()
	}
	return err
}

// TestClassificationAgainstTheFake drives every failure the real provider
// server can produce, plus unreachable servers, and checks the CallError and
// what the provider actually billed: not_sent must never have been billed.
func TestClassificationAgainstTheFake(t *testing.T) {
	t.Parallel()
	ffmpeg := stubFFmpeg(t, false)
	type tc struct {
		name       string
		faults     string
		noFFmpeg   bool
		base       func(t *testing.T) string // instead of the fake
		timeout    time.Duration
		call       func(context.Context, *provider.HTTP) error
		op         string
		outcome    pipeline.CallOutcome
		code       string
		status     int
		retryAfter time.Duration
		billed     int64 // -1: not checked (no fake)
	}
	submit := func(ctx context.Context, p *provider.HTTP) error {
		_, err := p.SubmitVideo(ctx, metaFor("job1/scene1", ""), sampleVideo)
		return err
	}
	image := func(req pipeline.ImageRequest) func(context.Context, *provider.HTTP) error {
		return func(ctx context.Context, p *provider.HTTP) error {
			m, err := p.GenerateImage(ctx, metaFor("job1/scene1", "img-key"), req)
			if err == nil {
				_ = m.Body.Close()
			}
			return err
		}
	}
	dead := func(t *testing.T) string { return deadURL(t) }
	tests := []tc{
		{name: "connection refused", base: dead, call: speechCall, op: pipeline.OpSpeech,
			outcome: pipeline.OutcomeNotSent, code: provider.CodeUnreachable, billed: -1},
		{name: "dns failure", base: func(*testing.T) string { return "http://nonexistent.invalid" }, timeout: 3 * time.Second,
			call: speechCall, op: pipeline.OpSpeech, outcome: pipeline.OutcomeNotSent, code: provider.CodeUnreachable, billed: -1},
		{name: "refused video submit", base: dead, call: submit, op: pipeline.OpVideoSubmit,
			outcome: pipeline.OutcomeNotSent, code: provider.CodeUnreachable, billed: -1},
		{name: "timeout after sending", faults: "speech:latency=5s", timeout: 2 * time.Second, call: speechCall,
			op: pipeline.OpSpeech, outcome: pipeline.OutcomeUnknown, code: provider.CodeTimeout},
		{name: "drop after billing", faults: "speech:drop=1", call: speechCall, op: pipeline.OpSpeech,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeConnectionLost, billed: 1},
		{name: "500 before commit is still unknown to the client", faults: "speech:before_commit=1", call: speechCall,
			op: pipeline.OpSpeech, outcome: pipeline.OutcomeUnknown, code: provider.CodeServerError, status: 500},
		{name: "500 after commit", faults: "speech:after_commit=1", call: speechCall, op: pipeline.OpSpeech,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeServerError, status: 500, billed: 1},
		{name: "429 with Retry-After", faults: "speech:rate_limit=7s@1", call: speechCall, op: pipeline.OpSpeech,
			outcome: pipeline.OutcomeRateLimited, code: provider.CodeRateLimited, status: 429, retryAfter: 7 * time.Second},
		{name: "429 default Retry-After", faults: "speech:rate_limit=1", call: speechCall, op: pipeline.OpSpeech,
			outcome: pipeline.OutcomeRateLimited, code: provider.CodeRateLimited, status: 429, retryAfter: time.Second},
		{name: "400 speech", op: pipeline.OpSpeech, outcome: pipeline.OutcomeRejected, code: provider.CodeRejectedInput, status: 400,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.Synthesize(ctx, metaFor("job1/scene1", ""), pipeline.SpeechRequest{Text: "  "})
				return err
			}},
		{name: "400 image", call: image(pipeline.ImageRequest{Prompt: "x", Width: 1, Height: 1}), op: pipeline.OpImage,
			outcome: pipeline.OutcomeRejected, code: provider.CodeRejectedInput, status: 400},
		{name: "drop image", faults: "image:drop=1", call: image(sampleImage), op: pipeline.OpImage,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeConnectionLost, billed: 1},
		{name: "400 video", op: pipeline.OpVideoSubmit, outcome: pipeline.OutcomeRejected, code: provider.CodeRejectedInput, status: 400,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.SubmitVideo(ctx, metaFor("job1/scene1", ""), pipeline.VideoRequest{Prompt: "x", Width: 64, Height: 48})
				return err
			}},
		{name: "503 video unavailable", noFFmpeg: true, call: submit, op: pipeline.OpVideoSubmit,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeServerError, status: 503},
		{name: "drop video submit", faults: "video:drop=1", call: submit, op: pipeline.OpVideoSubmit,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeConnectionLost, billed: 1},
		{name: "after commit video submit", faults: "video:after_commit=1", call: submit, op: pipeline.OpVideoSubmit,
			outcome: pipeline.OutcomeUnknown, code: provider.CodeServerError, status: 500, billed: 1},
		{name: "status of an unknown job", op: provider.OpVideoStatus, outcome: pipeline.OutcomeRejected, code: provider.CodeJobNotFound, status: 404,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.VideoStatus(ctx, "vid_doesnotexist")
				return err
			}},
		{name: "content of an unknown job", op: provider.OpVideoFetch, outcome: pipeline.OutcomeRejected, code: provider.CodeJobNotFound, status: 404,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.FetchVideo(ctx, "vid_doesnotexist")
				return err
			}},
		{name: "poll an unreachable provider", base: dead, op: provider.OpVideoStatus, outcome: pipeline.OutcomeNotSent,
			code: provider.CodePollFailed, billed: -1,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.VideoStatus(ctx, "vid_1")
				return err
			}},
		{name: "fetch from an unreachable provider", base: dead, op: provider.OpVideoFetch, outcome: pipeline.OutcomeNotSent,
			code: provider.CodePollFailed, billed: -1,
			call: func(ctx context.Context, p *provider.HTTP) error {
				_, err := p.FetchVideo(ctx, "vid_1")
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var srv *fake.Server
			var base string
			if tt.base != nil {
				base = tt.base(t)
			} else {
				cfg := fake.Config{FFmpegPath: ffmpeg, VideoProcessing: -1}
				if tt.noFFmpeg {
					cfg.FFmpegPath = noFFmpeg
				}
				srv, base = startFake(t, cfg)
				setFaults(t, srv, tt.faults)
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			p := newClient(t, base, withTimeout(timeout))
			err := tt.call(context.Background(), p)
			ce := wantCallError(t, err, tt.op, tt.outcome, tt.code, tt.status)
			if ce.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %s, want %s", ce.RetryAfter, tt.retryAfter)
			}
			if ce.Cause == nil {
				t.Error("no Cause for the logs")
			}
			if srv != nil && tt.billed >= 0 {
				if got := srv.Ledger().Billed.Total(); got != tt.billed {
					t.Errorf("provider billed %d calls, want %d", got, tt.billed)
				}
			}
		})
	}
}

// TestClassificationOfAnswers covers answers the fake never gives, from a
// scripted server.
func TestClassificationOfAnswers(t *testing.T) {
	t.Parallel()
	pastDate := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	jsonError := func(status int, code, msg string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
		}
	}
	typed := func(ct, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ct)
			_, _ = io.WriteString(w, body)
		}
	}
	speech := func(ctx context.Context, p *provider.HTTP) error { return speechCall(ctx, p) }
	image := func(ctx context.Context, p *provider.HTTP) error {
		m, err := p.GenerateImage(ctx, metaFor("u", "k"), sampleImage)
		if err == nil {
			_ = m.Body.Close()
		}
		return err
	}
	submit := func(ctx context.Context, p *provider.HTTP) error {
		_, err := p.SubmitVideo(ctx, metaFor("u", ""), sampleVideo)
		return err
	}
	status := func(ctx context.Context, p *provider.HTTP) error {
		_, err := p.VideoStatus(ctx, "vid_1")
		return err
	}
	fetch := func(ctx context.Context, p *provider.HTTP) error {
		m, err := p.FetchVideo(ctx, "vid_1")
		if err == nil {
			_ = m.Body.Close()
		}
		return err
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		call       func(context.Context, *provider.HTTP) error
		op         string
		outcome    pipeline.CallOutcome
		code       string
		status     int
		retryAfter time.Duration
	}{
		{"401", jsonError(401, "unauthorized", "bad key"), speech, pipeline.OpSpeech, pipeline.OutcomeRejected, provider.CodeUnauthorized, 401, 0},
		{"403", jsonError(403, "forbidden", "no"), image, pipeline.OpImage, pipeline.OutcomeRejected, provider.CodeUnauthorized, 403, 0},
		{"404 endpoint", jsonError(404, "not_found", "no such endpoint"), speech, pipeline.OpSpeech, pipeline.OutcomeRejected, provider.CodeNotFound, 404, 0},
		{"413", jsonError(413, "request_too_large", "big"), speech, pipeline.OpSpeech, pipeline.OutcomeRejected, provider.CodeRejectedInput, 413, 0},
		{"422 input", jsonError(422, "unprocessable", "no"), speech, pipeline.OpSpeech, pipeline.OutcomeRejected, provider.CodeRejectedInput, 422, 0},
		{"422 key reused", jsonError(422, "idempotency_key_reused", "other body"), image, pipeline.OpImage, pipeline.OutcomeRejected, provider.CodeIdempotencyConflict, 422, 0},
		{"418", jsonError(418, "teapot", "short and stout"), speech, pipeline.OpSpeech, pipeline.OutcomeRejected, provider.CodeRejected, 418, 0},
		{"502 billable", jsonError(502, "bad_gateway", "upstream"), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeServerError, 502, 0},
		{"500 poll", jsonError(500, "server_error", "oops"), status, provider.OpVideoStatus, pipeline.OutcomeNotSent, provider.CodePollFailed, 500, 0},
		{"503 fetch", jsonError(503, "unavailable", "later"), fetch, provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodePollFailed, 503, 0},
		{"429 poll", jsonError(429, "rate_limited", "slow"), status, provider.OpVideoStatus, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 429, time.Second},
		{"429 HTTP date against the response Date", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Date", pastDate.Format(http.TimeFormat))
			w.Header().Set("Retry-After", pastDate.Add(20*time.Second).Format(http.TimeFormat))
			w.WriteHeader(429)
		}, speech, pipeline.OpSpeech, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 429, 20 * time.Second},
		{"429 garbage Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "soon")
			w.WriteHeader(429)
		}, speech, pipeline.OpSpeech, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 429, time.Second},
		{"429 huge Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "86400")
			w.WriteHeader(429)
		}, speech, pipeline.OpSpeech, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 429, provider.MaxRetryAfter},
		{"409 not ready", jsonError(409, "not_ready", "queued"), fetch, provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodeVideoNotReady, 409, 0},
		{"409 job failed", jsonError(409, "job_failed", "failed"), fetch, provider.OpVideoFetch, pipeline.OutcomeFailed, provider.CodeJobFailed, 409, 0},
		{"302 billable is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, speech, pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeBadResponse, 302, 0},
		{"204 speech", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) },
			speech, pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeBadResponse, 204, 0},
		{"speech as text/html", typed("text/html", "<html>"), speech, pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"image as audio/wav", typed("audio/wav", "RIFF"), image, pipeline.OpImage, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"image without content type", typed("", ""), image, pipeline.OpImage, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"video content as text/plain", typed("text/plain", "x"), fetch, provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodeBadResponse, 200, 0},
		{"submit as text/html", typed("text/html", "<html>"), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"submit malformed JSON", typed("application/json", `{"id":`), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"submit without id", typed("application/json", `{"status":"queued"}`), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"submit with a path in the id", typed("application/json", `{"id":"../ledger","status":"queued"}`), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"submit answer too large", typed("application/json", `{"id":"v","status":"`+strings.Repeat("x", 70<<10)+`"}`), submit, pipeline.OpVideoSubmit, pipeline.OutcomeUnknown, provider.CodeBadResponse, 200, 0},
		{"status unknown", typed("application/json", `{"id":"vid_1","status":"melting"}`), status, provider.OpVideoStatus, pipeline.OutcomeNotSent, provider.CodeBadResponse, 200, 0},
		{"status of another job", typed("application/json", `{"id":"vid_2","status":"queued"}`), status, provider.OpVideoStatus, pipeline.OutcomeNotSent, provider.CodeBadResponse, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var elsewhere atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) })
			mux.HandleFunc("/v1/", tt.handler)
			ts := httptest.NewServer(mux)
			t.Cleanup(ts.Close)
			p := newClient(t, ts.URL)
			ce := wantCallError(t, tt.call(context.Background(), p), tt.op, tt.outcome, tt.code, tt.status)
			if ce.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %s, want %s", ce.RetryAfter, tt.retryAfter)
			}
			if elsewhere.Load() != 0 {
				t.Error("a redirect was followed")
			}
		})
	}
}

// TestCodeNeverCarriesProviderText: whatever the provider writes stays in
// Cause (for logs); Code is a fixed string.
func TestCodeNeverCarriesProviderText(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-token-abc123"
	for _, status := range []int{400, 401, 404, 418, 422, 429, 500, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"error":{"code":"%s","message":"prompt was: %s\n\x1b[31mred"}}`, secret, secret)
			}))
			t.Cleanup(ts.Close)
			err := speechCall(context.Background(), newClient(t, ts.URL))
			ce := asCallError(t, err)
			if strings.Contains(ce.Code, secret) || !knownCodes[ce.Code] {
				t.Fatalf("code %q carries provider text or is not a fixed code", ce.Code)
			}
			var re *provider.ResponseError
			if !errors.As(err, &re) || re.Status != status || !strings.Contains(re.Message, secret) {
				t.Fatalf("cause %v does not keep the provider's message for the logs", ce.Cause)
			}
			if strings.ContainsAny(ce.Error(), "\n\x1b") {
				t.Fatalf("error text %q is not one line of printable text", ce.Error())
			}
		})
	}
}

// TestCallerCancellationIsNotACallError: the pipeline must see that it was
// stopped (errors.Is context.Canceled / its cause), not a provider failure.
func TestCallerCancellationIsNotACallError(t *testing.T) {
	t.Parallel()
	errStop := errors.New("worker shutting down")
	tests := []struct {
		name      string
		ctx       func(srv *fake.Server) (context.Context, context.CancelFunc)
		want      []error
		maybeSent bool
	}{
		{"canceled before the call", func(*fake.Server) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, []error{context.Canceled}, false},
		// Canceled once the provider has the request (its ledger counts
		// it before the 5 s latency): a timer from before the call could
		// fire before a loaded machine sent it (seen in CI under -race).
		{"canceled with a cause while the provider works", func(srv *fake.Server) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				for srv.Ledger().Calls == 0 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				cancel(errStop)
			}()
			return ctx, func() { cancel(nil) }
		}, []error{context.Canceled, errStop}, true},
		// A deadline cannot wait for the provider; 2 s of the 5 s latency
		// leaves a loaded machine time to send the request.
		{"caller deadline while the provider works", func(*fake.Server) (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*time.Second)
		}, []error{context.DeadlineExceeded}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, base := startFake(t, fake.Config{})
			setFaults(t, srv, "speech:latency=5s")
			p := newClient(t, base)
			ctx, cancel := tt.ctx(srv)
			defer cancel()
			err := speechCall(ctx, p)
			var ce *pipeline.CallError
			if err == nil || errors.As(err, &ce) {
				t.Fatalf("err = %v, want a cancellation that is not a CallError", err)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("err = %v, does not match %v", err, w)
				}
			}
			if got := strings.Contains(err.Error(), "may have reached"); got != tt.maybeSent {
				t.Errorf("err = %q: says it may have been sent = %t, want %t", err, got, tt.maybeSent)
			}
			if !tt.maybeSent && srv.Ledger().Calls != 0 {
				t.Error("a call canceled beforehand reached the provider")
			}
		})
	}
}

// TestRefusedBeforeSending: calls the client refuses itself never reach the
// provider.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(ts.Close)
	p := newClient(t, ts.URL)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		op   string
		code string
	}{
		{"image without idempotency key", func() error {
			_, err := p.GenerateImage(ctx, metaFor("u", ""), sampleImage)
			return err
		}, pipeline.OpImage, provider.CodeIdempotencyKeyMissing},
		{"speech without unit", func() error {
			_, err := p.Synthesize(ctx, metaFor("", ""), sampleSpeech)
			return err
		}, pipeline.OpSpeech, provider.CodeInvalidCall},
		{"video with a newline in the unit", func() error {
			_, err := p.SubmitVideo(ctx, metaFor("u\r\nX-Evil: 1", ""), sampleVideo)
			return err
		}, pipeline.OpVideoSubmit, provider.CodeInvalidCall},
		{"image with a non-ASCII key", func() error {
			_, err := p.GenerateImage(ctx, metaFor("u", "clé"), sampleImage)
			return err
		}, pipeline.OpImage, provider.CodeInvalidCall},
		{"status of an empty id", func() error {
			_, err := p.VideoStatus(ctx, "")
			return err
		}, provider.OpVideoStatus, provider.CodeInvalidCall},
		{"content of a path", func() error {
			_, err := p.FetchVideo(ctx, "../../ledger")
			return err
		}, provider.OpVideoFetch, provider.CodeInvalidCall},
	}
	for _, tt := range tests {
		err := tt.call()
		wantCallError(t, err, tt.op, pipeline.OutcomeRejected, tt.code, 0)
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: %v does not match pipeline.ErrInvalidInput", tt.name, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d refused calls reached the server", hits.Load())
	}
}

// TestTimeoutWhileSendingIsUnknown: once a connection was obtained, bytes of
// the request may be at the provider, so even a timeout while the request
// is still being written is unknown, never not_sent. The server accepts the
// connection and never reads, so the client blocks writing a body larger
// than the socket buffers; httptrace's WroteRequest has not fired when the
// call gives up.
func TestTimeoutWhileSendingIsUnknown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		<-stop // never read
	}()
	p := newClient(t, "http://"+ln.Addr().String(), withTimeout(2*time.Second))
	huge := pipeline.SpeechRequest{Text: strings.Repeat("a", 32<<20)}
	_, err = p.Synthesize(context.Background(), metaFor("u", ""), huge)
	wantCallError(t, err, pipeline.OpSpeech, pipeline.OutcomeUnknown, provider.CodeTimeout, 0)
	var te *provider.TransportError
	if !errors.As(err, &te) || !te.Connected {
		t.Fatalf("cause %v: want a TransportError with Connected", err)
	}
	t.Logf("request written when the call gave up: %t", te.Written)
}

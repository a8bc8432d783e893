package replicate_test

// The server these tests run against is package replicatetest, a local
// emulator of Replicate's HTTP API for predictions as published in its
// reference (no test calls the internet):
// https://replicate.com/docs/reference/http (predictions.create,
// predictions.get, predictions.cancel; also
// https://sdks.replicate.com/resources/predictions). Its documentation
// lists the requests and answers reproduced; the error bodies of the create
// failures below are the reference's too: {"title","detail","status"}
// (e.g. 422 "Input validation failed", 429 "Request was throttled. Expected
// available in N seconds." with Retry-After). The end-to-end tests of
// package chaos run the real binary against the same emulator.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/replicate"
	"edgepipe/provider/replicate/replicatetest"
)

const token = "r8_testtoken123"

const predID = replicatetest.ExampleID

// newFake starts the Replicate emulator shared with the end-to-end tests
// (package replicatetest, which cites the API reference).
func newFake(t *testing.T) *replicatetest.Server {
	f := replicatetest.New(token)
	t.Cleanup(f.Close)
	return f
}

func newAdapter(t *testing.T, base string, mod ...func(*replicate.Config)) *replicate.Adapter {
	t.Helper()
	cfg := replicate.Config{BaseURL: base, APIToken: token, Timeout: 2 * time.Second, PollInterval: 5 * time.Millisecond, SyncWait: 2 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	a, err := replicate.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func asCallError(t *testing.T, err error) *pipeline.CallError {
	t.Helper()
	var ce *pipeline.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a CallError", err)
	}
	return ce
}

// TestVideoTakesSeveralPolls: submit once, poll through starting and
// processing, fetch the output once it succeeded.
func TestVideoTakesSeveralPolls(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.Script = []string{"starting", "processing", "processing", "succeeded"}
	a := newAdapter(t, f.URL)
	ctx := context.Background()
	id, err := a.SubmitVideo(ctx, pipeline.CallMeta{UnitID: "j/0"}, pipeline.VideoRequest{Prompt: "a fox runs", DurationMS: 4000, Width: 1280, Height: 720})
	if err != nil {
		t.Fatal(err)
	}
	if id != predID {
		t.Fatalf("id %q", id)
	}
	if c := f.Creates()[0]; c.Path != "/v1/models/minimax/video-01/predictions" || c.Body != `{"input":{"prompt":"a fox runs"}}` {
		t.Errorf("create %s %s", c.Path, c.Body)
	}
	if c := f.Creates()[0]; c.Prefer != "" {
		t.Error("create sent a Prefer header: a dropped wait would lose the prediction id")
	}
	var states []pipeline.VideoState
	for range 4 {
		st, err := a.VideoStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	for i, st := range states[:3] {
		if st.Done || st.Failed {
			t.Errorf("poll %d: %+v, want pending", i, st)
		}
	}
	if !states[3].Done {
		t.Fatalf("last poll %+v, want done", states[3])
	}
	m, err := a.FetchVideo(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if string(b) != "FILE-BYTES" || m.ContentType != "video/mp4" {
		t.Errorf("fetched %q %s", b, m.ContentType)
	}
	if _, auth := f.Deliveries(); auth != "Bearer "+token {
		t.Errorf("download on the API host without the token: %q", auth)
	}
	if f.CreateCount() != 1 {
		t.Errorf("%d creates, want 1", f.CreateCount())
	}
}

func TestVideoFailedAndCanceled(t *testing.T) {
	t.Parallel()
	for status, code := range map[string]string{"failed": provider.CodeGenerationFailed, "canceled": provider.CodeJobCanceled} {
		f := newFake(t)
		f.Script = []string{"processing", status}
		a := newAdapter(t, f.URL)
		ctx := context.Background()
		if st, err := a.VideoStatus(ctx, predID); err != nil || st.Done || st.Failed {
			t.Fatalf("%s: first poll %+v %v", status, st, err)
		}
		st, err := a.VideoStatus(ctx, predID)
		if err != nil || !st.Failed || st.Code != code {
			t.Errorf("%s: %+v %v, want failed %s", status, st, err, code)
		}
		_, err = a.FetchVideo(ctx, predID)
		if ce := asCallError(t, err); ce.Outcome != pipeline.OutcomeFailed || ce.Code != provider.CodeJobFailed {
			t.Errorf("%s: fetch %s %s", status, ce.Outcome, ce.Code)
		}
	}
}

// TestExpiredOutput: Replicate deletes outputs about an hour after the
// prediction ended. A download answered 404/410, or a prediction whose data
// was removed, is a clear failed outcome with CodeOutputExpired, not a
// transient read failure.
func TestExpiredOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		setup   func(f *replicatetest.Server)
		fetches int
	}{
		{"404", func(f *replicatetest.Server) { f.DeliveryStatus = 404 }, 1},
		{"410", func(f *replicatetest.Server) { f.DeliveryStatus = 410 }, 1},
		{"data removed", func(f *replicatetest.Server) { f.DataRemoved = true }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			tc.setup(f)
			a := newAdapter(t, f.URL)
			_, err := a.FetchVideo(context.Background(), predID)
			ce := asCallError(t, err)
			if ce.Outcome != pipeline.OutcomeFailed || ce.Code != provider.CodeOutputExpired || ce.Op != provider.OpVideoFetch {
				t.Errorf("got %s %s %s, want video_fetch failed %s", ce.Op, ce.Outcome, ce.Code, provider.CodeOutputExpired)
			}
			if n, _ := f.Deliveries(); n != tc.fetches {
				t.Errorf("%d downloads, want %d", n, tc.fetches)
			}
		})
	}
}

func TestFetchBeforeDoneAndPollFailures(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.Script = []string{"processing", "500"}
	a := newAdapter(t, f.URL)
	_, err := a.FetchVideo(context.Background(), predID)
	if ce := asCallError(t, err); ce.Outcome != pipeline.OutcomeNotSent || ce.Code != provider.CodeVideoNotReady {
		t.Errorf("fetch early: %s %s", ce.Outcome, ce.Code)
	}
	_, err = a.VideoStatus(context.Background(), predID)
	if ce := asCallError(t, err); ce.Outcome != pipeline.OutcomeNotSent || ce.Code != provider.CodePollFailed {
		t.Errorf("poll 500: %s %s", ce.Outcome, ce.Code)
	}
	_, err = a.VideoStatus(context.Background(), "nope")
	if ce := asCallError(t, err); ce.Outcome != pipeline.OutcomeRejected || ce.Code != provider.CodeJobNotFound {
		t.Errorf("unknown id: %s %s", ce.Outcome, ce.Code)
	}
	_, err = a.VideoStatus(context.Background(), "../x")
	if ce := asCallError(t, err); ce.Code != provider.CodeInvalidCall {
		t.Errorf("bad id: %s", ce.Code)
	}
}

// TestCreateFailuresAreClassified: every failure of the billable create,
// each with exactly one request reaching the server.
func TestCreateFailuresAreClassified(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		h          func(w http.ResponseWriter)
		outcome    pipeline.CallOutcome
		code       string
		retryAfter time.Duration
	}{
		{"422 input", func(w http.ResponseWriter) {
			replicatetest.WriteJSON(w, 422, `{"title":"Input validation failed","detail":"- input: prompt is required","status":422,"invalid_fields":[{"type":"required","field":"input","description":"prompt is required"}]}`)
		}, pipeline.OutcomeRejected, provider.CodeRejectedInput, 0},
		{"402 billing", func(w http.ResponseWriter) {
			replicatetest.WriteJSON(w, 402, `{"title":"Insufficient credit","detail":"You have insufficient credit to run this model.","status":402}`)
		}, pipeline.OutcomeRejected, provider.CodeRejected, 0},
		{"404 model", func(w http.ResponseWriter) {
			replicatetest.WriteJSON(w, 404, `{"title":"Not found","detail":"The requested resource could not be found.","status":404}`)
		}, pipeline.OutcomeRejected, provider.CodeNotFound, 0},
		{"429", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "3")
			replicatetest.WriteJSON(w, 429, `{"detail":"Request was throttled. Expected available in 3 seconds.","status":429}`)
		}, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 3 * time.Second},
		{"500", func(w http.ResponseWriter) {
			replicatetest.WriteJSON(w, 500, `{"title":"Internal Server Error","detail":"","status":500}`)
		}, pipeline.OutcomeUnknown, provider.CodeServerError, 0},
		{"201 without id", func(w http.ResponseWriter) {
			replicatetest.WriteJSON(w, 201, `{"status":"starting"}`)
		}, pipeline.OutcomeUnknown, provider.CodeBadResponse, 0},
		{"dropped after sending", func(w http.ResponseWriter) {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		}, pipeline.OutcomeUnknown, provider.CodeConnectionLost, 0},
		{"timeout", func(w http.ResponseWriter) { time.Sleep(1500 * time.Millisecond) }, pipeline.OutcomeUnknown, provider.CodeTimeout, 0},
	} {
		for _, op := range []string{pipeline.OpVideoSubmit, pipeline.OpImage} {
			t.Run(op+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFake(t)
				f.CreateHandler = tc.h
				a := newAdapter(t, f.URL, func(c *replicate.Config) { c.Timeout = 500 * time.Millisecond })
				var err error
				if op == pipeline.OpImage {
					_, err = a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "p"})
				} else {
					_, err = a.SubmitVideo(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.VideoRequest{Prompt: "p"})
				}
				ce := asCallError(t, err)
				if ce.Op != op || ce.Outcome != tc.outcome || ce.Code != tc.code || ce.RetryAfter != tc.retryAfter {
					t.Errorf("got %s %s %s %s, want %s %s %s", ce.Op, ce.Outcome, ce.Code, ce.RetryAfter, tc.outcome, tc.code, tc.retryAfter)
				}
				if strings.Contains(err.Error(), token) {
					t.Error("error carries the token")
				}
				if n := f.CreateCount(); n != 1 {
					t.Errorf("%d creates reached the server, want exactly 1", n)
				}
			})
		}
	}
}

// TestImageRunsToTheEndInOneCall: the sync path creates once, polls, and
// downloads the PNG.
func TestImageRunsToTheEndInOneCall(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.Script = []string{"processing", "processing", "succeeded"}
	f.DeliveryType = "image/png"
	f.Output = "" // set below, needs the server URL
	f.Output = `["` + f.URL + `/delivery/xezq/out-0.png"]`
	a := newAdapter(t, f.URL)
	m, err := a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "a fox", Width: 1280, Height: 720})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if string(b) != "FILE-BYTES" || m.ContentType != "image/png" {
		t.Errorf("got %q %s", b, m.ContentType)
	}
	if c := f.Creates()[0]; c.Path != "/v1/models/black-forest-labs/flux-schnell/predictions" ||
		c.Body != `{"input":{"aspect_ratio":"16:9","num_outputs":1,"output_format":"png","prompt":"a fox"}}` {
		t.Errorf("create %s %s", c.Path, c.Body)
	}
	if f.Polls() != 3 || f.CreateCount() != 1 {
		t.Errorf("%d polls %d creates", f.Polls(), f.CreateCount())
	}
}

// TestImageFailuresAfterCreateAreNeverNotSent: once the prediction exists
// it bills; whatever happens next must not look like a call the pipeline
// may simply repeat.
func TestImageFailuresAfterCreateAreNeverNotSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		setup   func(f *replicatetest.Server)
		outcome pipeline.CallOutcome
		code    string
	}{
		{"prediction failed", func(f *replicatetest.Server) { f.Script = []string{"processing", "failed"} }, pipeline.OutcomeFailed, provider.CodeGenerationFailed},
		{"polls keep failing", func(f *replicatetest.Server) { f.Script = []string{"500"} }, pipeline.OutcomeUnknown, provider.CodePollFailed},
		{"output expired", func(f *replicatetest.Server) { f.DeliveryStatus = 410 }, pipeline.OutcomeFailed, provider.CodeOutputExpired},
		{"download 500", func(f *replicatetest.Server) { f.DeliveryStatus = 500 }, pipeline.OutcomeUnknown, provider.CodeConnectionLost},
		{"never finishes", func(f *replicatetest.Server) { f.Script = []string{"processing"} }, pipeline.OutcomeUnknown, provider.CodeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			f.DeliveryType = "image/png"
			tc.setup(f)
			// Only the case that waits out the in-call bound shortens it:
			// the others must reach their own end first, even on a loaded
			// machine under -race.
			a := newAdapter(t, f.URL, func(c *replicate.Config) {
				if tc.code == provider.CodeTimeout {
					c.SyncWait = 300 * time.Millisecond
				}
			})
			_, err := a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "p"})
			ce := asCallError(t, err)
			if ce.Op != pipeline.OpImage || ce.Outcome != tc.outcome || ce.Code != tc.code {
				t.Errorf("got %s %s %s, want image %s %s", ce.Op, ce.Outcome, ce.Code, tc.outcome, tc.code)
			}
			if !strings.Contains(err.Error(), predID) {
				t.Errorf("error does not name the prediction for an operator: %v", err)
			}
			if f.CreateCount() != 1 {
				t.Errorf("%d creates", f.CreateCount())
			}
			if wantCancel := tc.code == provider.CodeTimeout; (f.Cancels() == 1) != wantCancel {
				t.Errorf("%d cancels, want %d", f.Cancels(), map[bool]int{true: 1}[wantCancel])
			}
		})
	}
}

func TestVersionedModelAndTokenScope(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	var foreignAuth atomic.Value
	foreignAuth.Store("unset")
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		foreignAuth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "audio/wav")
		_, _ = io.WriteString(w, "RIFF")
	}))
	t.Cleanup(other.Close)
	f.Output = `"` + other.URL + `/speech.wav"`
	const version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
	a := newAdapter(t, f.URL, func(c *replicate.Config) {
		c.Models = map[string]string{pipeline.OpSpeech: "jaaari/kokoro-82m:" + version}
	})
	if a.Contract(pipeline.OpSpeech) != pipeline.ContractSync {
		t.Errorf("speech contract %s", a.Contract(pipeline.OpSpeech))
	}
	m, err := a.Synthesize(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.SpeechRequest{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	m.Body.Close()
	if c := f.Creates()[0]; c.Path != "/v1/predictions" || c.Body != `{"input":{"text":"hello"},"version":"`+version+`"}` {
		t.Errorf("create %s %s", c.Path, c.Body)
	}
	if got := foreignAuth.Load().(string); got != "" {
		t.Errorf("token sent to a foreign output host: %q", got)
	}
}

func TestContractsAndConfig(t *testing.T) {
	t.Parallel()
	a := newAdapter(t, "http://127.0.0.1:1")
	for op, want := range map[string]pipeline.Contract{
		pipeline.OpImage: pipeline.ContractSync, pipeline.OpSpeech: pipeline.ContractFailClosed,
		pipeline.OpVideoSubmit: pipeline.ContractAsyncPollable, "*": pipeline.ContractFailClosed, "x": pipeline.ContractFailClosed,
	} {
		if got := a.Contract(op); got != want {
			t.Errorf("Contract(%s) = %s, want %s", op, got, want)
		}
	}
	_, err := a.Synthesize(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.SpeechRequest{Text: "x"})
	if ce := asCallError(t, err); ce.Outcome != pipeline.OutcomeRejected || ce.Code != provider.CodeUnsupportedOperation {
		t.Errorf("speech without a model: %s %s", ce.Outcome, ce.Code)
	}
	b, err := replicate.New(replicate.Config{APIToken: token, Models: map[string]string{pipeline.OpVideoSubmit: "wan-video/wan-2.1-t2v-480p"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Model(pipeline.OpVideoSubmit) != "wan-video/wan-2.1-t2v-480p" || b.Model(pipeline.OpImage) != "black-forest-labs/flux-schnell" {
		t.Errorf("models %q %q", b.Model(pipeline.OpVideoSubmit), b.Model(pipeline.OpImage))
	}
	for name, c := range map[string]replicate.Config{
		"no token":  {},
		"bad base":  {APIToken: token, BaseURL: "api.replicate.com"},
		"bad model": {APIToken: token, Models: map[string]string{pipeline.OpImage: "flux"}},
		"bad op":    {APIToken: token, Models: map[string]string{"music": "a/b"}},
	} {
		if _, err := replicate.New(c); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

package workersai_test

// The server these tests run against is package workersaitest, a local
// emulator of the Workers AI REST API as published by Cloudflare (no test
// calls the internet); its documentation cites the references: the request
// POST {base}/accounts/{account_id}/ai/run/{model} with a Bearer token, the
// model catalogue's input and output schemas (cloudflare/cloudflare-docs
// src/content/workers-ai-models/flux-1-schnell.json and melotts.json,
// https://developers.cloudflare.com/workers-ai/models/flux-1-schnell/ and
// .../models/melotts/), and the API v4 envelope
// {"result":…,"success":…,"errors":[{"code","message"}],"messages":[]}.
// The failure answers below take their codes and statuses from
// https://developers.cloudflare.com/workers-ai/platform/errors/ (5007 no
// such model → 400, 3007 timeout → 408, 3036 account limited → 429, 3040
// out of capacity → 429), the API's routing error 7003 (→ 404 "Could not
// route to …, perhaps your object identifier is invalid?") and 10000
// "Authentication error" (→ 401). The end-to-end tests of package chaos run
// the real binary against the same emulator.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image/png"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/workersai"
	"edgepipe/provider/workersai/workersaitest"
)

const (
	account = "023e105f4ecef8ad9ca31a8372d0c353"
	token   = "cf-test-token-123"
)

// newServer starts the emulator; h, when set, answers instead of it.
func newServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body string)) *workersaitest.Server {
	t.Helper()
	s := workersaitest.New(account, token)
	if h != nil {
		s.Handler = func(w http.ResponseWriter, r *http.Request, c workersaitest.Call) { h(w, r, c.Body) }
	}
	t.Cleanup(s.Close)
	return s
}

func newAdapter(t *testing.T, base string, mod ...func(*workersai.Config)) *workersai.Adapter {
	t.Helper()
	cfg := workersai.Config{BaseURL: base + "/client/v4", AccountID: account, APIToken: token, Timeout: 5 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	a, err := workersai.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func TestImageRequestAndAnswerShapes(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	a := newAdapter(t, s.URL)
	m, err := a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "job/0", IdempotencyKey: "ignored"},
		pipeline.ImageRequest{Prompt: "a red fox", Width: 1280, Height: 720})
	if err != nil {
		t.Fatalf("GenerateImage: %v", err)
	}
	c := s.Calls()[0]
	if c.Path != "/client/v4/accounts/"+account+"/ai/run/@cf/black-forest-labs/flux-1-schnell" || c.Body != `{"prompt":"a red fox","steps":4}` {
		t.Errorf("request %s %s", c.Path, c.Body)
	}
	if c.Header.Get("Content-Type") != "application/json" || c.Header.Get("Idempotency-Key") != "" || c.Header.Get("cf-aig-skip-cache") != "true" {
		t.Errorf("headers %v", c.Header)
	}
	if m.ContentType != "image/png" {
		t.Errorf("content type %q", m.ContentType)
	}
	b, _ := io.ReadAll(m.Body)
	m.Body.Close()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("answer is not a PNG: %v", err)
	}
	if img.Bounds().Dx() != 16 || img.Bounds().Dy() != 8 {
		t.Errorf("image %v, want the JPEG's 16x8", img.Bounds())
	}
	if a.Model(pipeline.OpImage) != "@cf/black-forest-labs/flux-1-schnell" || a.Name() != "workers-ai" {
		t.Errorf("model %q name %q", a.Model(pipeline.OpImage), a.Name())
	}
}

func TestSpeechAnswersBase64OrBinary(t *testing.T) {
	t.Parallel()
	for _, binary := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "binary"}[binary], func(t *testing.T) {
			t.Parallel()
			s := newServer(t, nil)
			s.AudioBinary = binary
			a := newAdapter(t, s.URL)
			m, err := a.Synthesize(context.Background(), pipeline.CallMeta{UnitID: "job/1"}, pipeline.SpeechRequest{Text: "Hello there.", Voice: "narrator", SampleRate: 48000})
			if err != nil {
				t.Fatalf("Synthesize: %v", err)
			}
			if c := s.Calls()[0]; c.Model != "@cf/myshell-ai/melotts" || c.Body != `{"prompt":"Hello there.","lang":"en"}` {
				t.Errorf("request %s %s", c.Path, c.Body)
			}
			b, _ := io.ReadAll(m.Body)
			if !bytes.Equal(b, workersaitest.DefaultAudio) || m.ContentType != "audio/mpeg" {
				t.Errorf("got %q (%s), want the MP3 bytes", b, m.ContentType)
			}
		})
	}
}

// TestFailuresAreClassified covers every failure class of docs/design.md §6 for
// both operations; each case also checks that the server saw exactly one
// request, i.e. nothing was resent.
func TestFailuresAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		h          func(w http.ResponseWriter)
		outcome    pipeline.CallOutcome
		code       string
		retryAfter time.Duration
	}{
		{"400 no such model", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 400, `{"result":null,"success":false,"errors":[{"code":5007,"message":"No such model @cf/x or task"}],"messages":[]}`)
		}, pipeline.OutcomeRejected, provider.CodeRejectedInput, 0},
		{"401 auth", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 401, `{"success":false,"errors":[{"code":10000,"message":"Authentication error"}]}`)
		}, pipeline.OutcomeRejected, provider.CodeUnauthorized, 0},
		{"404 route", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 404, `{"result":null,"success":false,"errors":[{"code":7003,"message":"Could not route to /client/v4/accounts/x/ai/run, perhaps your object identifier is invalid?"}],"messages":[]}`)
		}, pipeline.OutcomeRejected, provider.CodeNotFound, 0},
		{"408 inference timeout", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 408, `{"result":null,"success":false,"errors":[{"code":3007,"message":"Request timeout"}],"messages":[]}`)
		}, pipeline.OutcomeUnknown, provider.CodeTimeout, 0},
		{"429 with Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			workersaitest.WriteJSON(w, 429, `{"result":null,"success":false,"errors":[{"code":3040,"message":"No more data centers to forward the request to"}],"messages":[]}`)
		}, pipeline.OutcomeRateLimited, provider.CodeRateLimited, 7 * time.Second},
		{"500", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 500, `{"result":null,"success":false,"errors":[{"code":3043,"message":"Internal server error"}],"messages":[]}`)
		}, pipeline.OutcomeUnknown, provider.CodeServerError, 0},
		{"502 html", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		}, pipeline.OutcomeUnknown, provider.CodeServerError, 0},
		{"200 success false", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 200, `{"result":null,"success":false,"errors":[{"code":5006,"message":"oops"}],"messages":[]}`)
		}, pipeline.OutcomeUnknown, provider.CodeBadResponse, 0},
		{"200 success false with a result", func(w http.ResponseWriter) {
			workersaitest.WriteJSON(w, 200, `{"result":{"image":"/9j/","audio":"SUQz"},"success":false,"errors":[{"code":5006,"message":"oops"}],"messages":[]}`)
		}, pipeline.OutcomeUnknown, provider.CodeBadResponse, 0},
		{"200 not json", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "hello")
		}, pipeline.OutcomeUnknown, provider.CodeBadResponse, 0},
		{"dropped after sending", workersaitest.HijackClose, pipeline.OutcomeUnknown, provider.CodeConnectionLost, 0},
		{"timeout", func(w http.ResponseWriter) {
			time.Sleep(1500 * time.Millisecond)
		}, pipeline.OutcomeUnknown, provider.CodeTimeout, 0},
	}
	for _, op := range []string{pipeline.OpImage, pipeline.OpSpeech} {
		for _, tc := range cases {
			t.Run(op+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ string) { tc.h(w) })
				a := newAdapter(t, s.URL, func(c *workersai.Config) { c.Timeout = 500 * time.Millisecond })
				var err error
				if op == pipeline.OpImage {
					_, err = a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "p"})
				} else {
					_, err = a.Synthesize(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.SpeechRequest{Text: "t"})
				}
				var ce *pipeline.CallError
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want a CallError", err)
				}
				if ce.Op != op || ce.Outcome != tc.outcome || ce.Code != tc.code || ce.RetryAfter != tc.retryAfter {
					t.Errorf("got op %s outcome %s code %s retry-after %s; want %s %s %s", ce.Op, ce.Outcome, ce.Code, ce.RetryAfter, tc.outcome, tc.code, tc.retryAfter)
				}
				if strings.Contains(err.Error(), token) {
					t.Errorf("error carries the token: %v", err)
				}
				if n := s.Count(); n != 1 {
					t.Errorf("server saw %d requests, want exactly 1 (no resend)", n)
				}
			})
		}
	}
}

func TestNotSentWhenNothingListens(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a := newAdapter(t, "http://"+addr)
	_, err = a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "p"})
	var ce *pipeline.CallError
	if !errors.As(err, &ce) || ce.Outcome != pipeline.OutcomeNotSent || ce.Code != provider.CodeUnreachable {
		t.Fatalf("err = %v, want not_sent provider_unreachable", err)
	}
}

// TestKeepAliveDropIsNotResent is the case net/http would retry on its own
// if the request were replayable: a keep-alive connection that served one
// call is closed by the server after reading the next request. Even with
// an ordinary keep-alive client (the adapter's own transports never reuse a
// connection for billable calls), the second call reaches the server once
// and is reported unknown, never silently sent again.
func TestKeepAliveDropIsNotResent(t *testing.T) {
	t.Parallel()
	jpg := workersaitest.JPEG(16, 8)
	var calls atomic.Int32
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		if calls.Add(1) == 1 {
			workersaitest.WriteJSON(w, 200, `{"result":{"image":"`+base64.StdEncoding.EncodeToString(jpg)+`"},"success":true,"errors":[],"messages":[]}`)
			return
		}
		workersaitest.HijackClose(w)
	})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	a := newAdapter(t, s.URL, func(c *workersai.Config) { c.Client = &http.Client{Transport: tr} })
	m, err := a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.ImageRequest{Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	m.Body.Close()
	_, err = a.GenerateImage(context.Background(), pipeline.CallMeta{UnitID: "j/1"}, pipeline.ImageRequest{Prompt: "q"})
	var ce *pipeline.CallError
	if !errors.As(err, &ce) || ce.Outcome != pipeline.OutcomeUnknown {
		t.Fatalf("err = %v, want outcome unknown", err)
	}
	if n := s.Count(); n != 2 {
		t.Fatalf("server saw %d requests, want 2: the dropped one was resent", n)
	}
}

func TestContractsAndUnsupportedVideo(t *testing.T) {
	t.Parallel()
	a := newAdapter(t, "http://127.0.0.1:1")
	for op, want := range map[string]pipeline.Contract{
		pipeline.OpImage: pipeline.ContractSync, pipeline.OpSpeech: pipeline.ContractSync,
		pipeline.OpVideoSubmit: pipeline.ContractFailClosed, "other": pipeline.ContractFailClosed, "*": pipeline.ContractFailClosed,
	} {
		if got := a.Contract(op); got != want {
			t.Errorf("Contract(%s) = %s, want %s", op, got, want)
		}
	}
	_, err := a.SubmitVideo(context.Background(), pipeline.CallMeta{UnitID: "j/0"}, pipeline.VideoRequest{Prompt: "p"})
	var ce *pipeline.CallError
	if !errors.As(err, &ce) || ce.Outcome != pipeline.OutcomeRejected || ce.Code != provider.CodeUnsupportedOperation {
		t.Fatalf("SubmitVideo err = %v", err)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := workersai.Config{AccountID: account, APIToken: token, BaseURL: "http://127.0.0.1:9/gw",
		Models: map[string]string{pipeline.OpImage: "@cf/bytedance/stable-diffusion-xl-lightning"}}
	a, err := workersai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Model(pipeline.OpImage) != "@cf/bytedance/stable-diffusion-xl-lightning" || a.Model(pipeline.OpSpeech) != "@cf/myshell-ai/melotts" {
		t.Errorf("models %q %q", a.Model(pipeline.OpImage), a.Model(pipeline.OpSpeech))
	}
	withLang, err := workersai.New(workersai.Config{AccountID: account, APIToken: token, Lang: "fr", Steps: 8})
	if err != nil {
		t.Fatal(err)
	}
	if withLang.Model(pipeline.OpSpeech) != "@cf/myshell-ai/melotts;lang=fr" || withLang.Model(pipeline.OpImage) != "@cf/black-forest-labs/flux-1-schnell;steps=8" {
		t.Errorf("settings not in the model id (and so not in object keys): %q %q", withLang.Model(pipeline.OpSpeech), withLang.Model(pipeline.OpImage))
	}
	for name, c := range map[string]workersai.Config{
		"no account": {APIToken: token},
		"no token":   {AccountID: account},
		"bad base":   {AccountID: account, APIToken: token, BaseURL: "ftp://x"},
		"bad model":  {AccountID: account, APIToken: token, Models: map[string]string{pipeline.OpImage: "../x"}},
		"video":      {AccountID: account, APIToken: token, Models: map[string]string{pipeline.OpVideoSubmit: "@cf/x/y"}},
		"steps":      {AccountID: account, APIToken: token, Steps: 9},
	} {
		_, err := workersai.New(c)
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
		} else if strings.Contains(err.Error(), token) {
			t.Errorf("%s: error carries the token", name)
		}
	}
}

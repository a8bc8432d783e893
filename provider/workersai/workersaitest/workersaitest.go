// Package workersaitest is a local emulator of the Cloudflare Workers AI
// REST API for tests (no test calls the internet). It reproduces the API as
// published by Cloudflare:
//   - request: POST {base}/accounts/{account_id}/ai/run/{model},
//     Authorization: Bearer {token}, JSON input. Input schemas from the
//     model catalogue, cloudflare/cloudflare-docs
//     src/content/workers-ai-models/flux-1-schnell.json ({"prompt","steps"},
//     output {"image": base64 JPEG}) and melotts.json ({"prompt","lang"},
//     output {"audio": base64 MP3} or a binary audio/mpeg body),
//     https://developers.cloudflare.com/workers-ai/models/flux-1-schnell/
//     and .../models/melotts/;
//   - answers: the Cloudflare API v4 envelope
//     {"result":…,"success":…,"errors":[{"code","message"}],"messages":[]};
//     error codes from https://developers.cloudflare.com/workers-ai/platform/errors/
//     (5007 no such model → 400) and the API's routing error 7003 (→ 404
//     "Could not route to …, perhaps your object identifier is invalid?")
//     and 10000 "Authentication error" (→ 401).
//
// Workers AI has no idempotency key and bills every run it receives, so the
// emulator's ledger (Calls) records every request that reached it, including
// those it then dropped without an answer.
package workersaitest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// The models the emulator runs (workersai.DefaultModels).
const (
	ModelImage  = "@cf/black-forest-labs/flux-1-schnell"
	ModelSpeech = "@cf/myshell-ai/melotts"
)

// DefaultPrefix is the path of the API root on the emulator, as on
// api.cloudflare.com.
const DefaultPrefix = "/client/v4"

// DefaultAudio is the speech answer when Server.Audio is nil: an MP3
// header and frame sync, not playable audio.
var DefaultAudio = []byte("ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64fake-mp3-frames")

// Call is one request the emulator received (and so billed).
type Call struct {
	Model  string // "" when the path named no model
	Path   string
	Body   string
	Prompt string // the input's "prompt", when the body is JSON
	Header http.Header
	// Dropped says the connection was closed without an answer.
	Dropped bool
}

// Server emulates Workers AI. Set its fields before the first request.
type Server struct {
	*httptest.Server
	// Prefix, Account and Token are the API root path, the account id in
	// the path and the Bearer token every request must carry.
	Prefix, Account, Token string
	// Image is flux's answer (nil = JPEG(16, 8)); Audio melotts's (nil =
	// DefaultAudio), sent base64 in JSON, or as an audio/mpeg body when
	// AudioBinary is set.
	Image, Audio []byte
	AudioBinary  bool
	// Drop, when it returns true for a call, closes the connection after
	// the whole request was read, without an answer: the model may have run
	// and billed, and the client cannot know.
	Drop func(Call) bool
	// Handler, when set, answers every request instead of the emulation
	// (after recording it): tests of failure answers.
	Handler func(w http.ResponseWriter, r *http.Request, c Call)

	mu    sync.Mutex
	calls []Call
}

// New starts an emulator of account with token. Close it when done.
func New(account, token string) *Server {
	s := &Server{Prefix: DefaultPrefix, Account: account, Token: token}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// BaseURL is the API root to configure (EDGEPIPE_CF_API_BASE).
func (s *Server) BaseURL() string { return s.URL + s.Prefix }

// Calls returns every request received, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Count is the number of requests received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Received counts the requests received for model with prompt.
func (s *Server) Received(model, prompt string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Model == model && c.Prompt == prompt {
			n++
		}
	}
	return n
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c := Call{Path: r.URL.Path, Body: string(b), Header: r.Header.Clone()}
	prefix := s.Prefix + "/accounts/" + s.Account + "/ai/run/"
	if m, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
		c.Model = m
	}
	var in struct {
		Prompt string `json:"prompt"`
	}
	if json.Unmarshal(b, &in) == nil {
		c.Prompt = in.Prompt
	}
	drop := s.Drop != nil && s.Drop(c)
	c.Dropped = drop
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	switch {
	case drop:
		HijackClose(w)
	case s.Handler != nil:
		s.Handler(w, r, c)
	default:
		s.answer(w, r, c)
	}
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, c Call) {
	if r.Method != http.MethodPost || c.Model == "" {
		WriteJSON(w, 404, `{"result":null,"success":false,"errors":[{"code":7003,"message":"Could not route to `+
			r.URL.Path+`, perhaps your object identifier is invalid?"}],"messages":[]}`)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		WriteJSON(w, 401, `{"result":null,"success":false,"errors":[{"code":10000,"message":"Authentication error"}],"messages":[]}`)
		return
	}
	var result map[string]string
	switch c.Model {
	case ModelImage:
		img := s.Image
		if img == nil {
			img = JPEG(16, 8)
		}
		result = map[string]string{"image": base64.StdEncoding.EncodeToString(img)}
	case ModelSpeech:
		audio := s.Audio
		if audio == nil {
			audio = DefaultAudio
		}
		if s.AudioBinary {
			w.Header().Set("Content-Type", "audio/mpeg")
			_, _ = w.Write(audio)
			return
		}
		result = map[string]string{"audio": base64.StdEncoding.EncodeToString(audio)}
	default:
		WriteJSON(w, 400, `{"result":null,"success":false,"errors":[{"code":5007,"message":"No such model `+c.Model+` or task"}],"messages":[]}`)
		return
	}
	body, _ := json.Marshal(map[string]any{"result": result, "success": true, "errors": []any{}, "messages": []any{}})
	WriteJSON(w, 200, string(body))
}

// WriteJSON answers with a JSON body.
func WriteJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body) //nolint:gosec // G705: a test emulator echoing canned JSON, not a page
}

// HijackClose drops the connection without a word: the request reached the
// provider, which may have run (and billed) it.
func HijackClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// JPEG returns a w×h gradient JPEG, what flux-1-schnell answers with.
func JPEG(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{uint8(x * 256 / w), uint8(y * 256 / h), 200, 255})
		}
	}
	var b bytes.Buffer
	_ = jpeg.Encode(&b, img, nil)
	return b.Bytes()
}

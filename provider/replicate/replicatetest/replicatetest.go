// Package replicatetest is a local emulator of Replicate's predictions HTTP
// API for tests (no test calls the internet). It reproduces the API as
// published in its reference, https://replicate.com/docs/reference/http
// (predictions.create, predictions.get, predictions.cancel; also
// https://sdks.replicate.com/resources/predictions):
//   - POST /v1/models/{owner}/{name}/predictions {"input":{…}} (official
//     models) or POST /v1/predictions {"version":…,"input":{…}}, with
//     Authorization: Bearer <token>, answers 201 with the prediction object
//     {"id","model","version","input","logs","output","error","status",
//     "created_at","data_removed","urls":{"cancel","get"}}, status
//     "starting";
//   - GET /v1/predictions/{id} answers the same object; status is one of
//     starting, processing, succeeded, failed, canceled; output holds HTTPS
//     URLs of files (a string, or a list for flux-schnell), which are
//     deleted about an hour after the prediction ends (data_removed: true);
//   - POST /v1/predictions/{id}/cancel answers the canceled prediction;
//   - errors are JSON {"title","detail","status"} (401 "Unauthenticated",
//     404 "Not found", 500).
//
// The example prediction id is the reference's hello-world example's. The
// emulator also records what it received (creates with their bodies and
// headers, polls, downloads, cancels), so tests can count billed creates.
package replicatetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// ExampleID is the id of the first prediction created, and of a prediction
// that exists from the start (so reads can be tested without a create).
const ExampleID = "gm3qorzdhgbfurvjtvhg6dckhu"

// DefaultModel is the model of the prediction that exists from the start.
const DefaultModel = "minimax/video-01"

// DefaultFile is what downloads serve when Server.File is nil.
const DefaultFile = "FILE-BYTES"

// Create is one create request the emulator received (billable).
type Create struct {
	ID     string // the prediction it created ("" when CreateHandler answered)
	Path   string
	Body   string
	Prefer string // the Prefer header, which edgepipe must never send
	Auth   string
}

type prediction struct {
	model, version string
	input          json.RawMessage
	polls          int // polls answered
}

// Server emulates the predictions API. Set its fields before the first
// request; read what it received with its methods.
type Server struct {
	*httptest.Server
	// Token is the API token every API request must carry as a Bearer.
	Token string
	// Script is the status successive answered polls of one prediction
	// return; the last repeats. "500" answers an internal error instead.
	Script []string
	// Output is a succeeded prediction's output (JSON); "" = the URL of
	// /delivery/{id}/out on this server.
	Output string
	// File, DeliveryType and DeliveryStatus answer downloads (nil =
	// DefaultFile, "" = video/mp4, 0 = 200 with the file).
	File           []byte
	DeliveryType   string
	DeliveryStatus int
	// DataRemoved marks predictions as expired: no output any more.
	DataRemoved bool
	// CreateHandler, when set, answers creates instead (no prediction is
	// made).
	CreateHandler func(w http.ResponseWriter)
	// OnCreate, when set, is called with the id of each created prediction
	// once its 201 answer has been written and flushed.
	OnCreate func(id string)
	// OnPoll, when set, is called with the id of each poll as it arrives,
	// before it is held or answered.
	OnPoll func(id string)

	mu           sync.Mutex
	preds        map[string]*prediction
	creates      []Create
	pollsIn      int
	polls        int
	abandoned    int
	deliveries   int
	deliveryAuth string
	cancels      int
	hold         chan struct{} // non-nil: polls wait for it to close
}

// New starts an emulator that requires token. Close it when done.
func New(token string) *Server {
	s := &Server{Token: token, Script: []string{"succeeded"},
		preds: map[string]*prediction{ExampleID: {model: DefaultModel, input: json.RawMessage(`{"prompt":"x"}`)}}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close releases held polls and stops the server.
func (s *Server) Close() {
	s.ReleasePolls()
	s.Server.Close()
}

// HoldPolls makes every poll wait, unanswered, until ReleasePolls or until
// its client goes away.
func (s *Server) HoldPolls() {
	s.mu.Lock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
	s.mu.Unlock()
}

// ReleasePolls answers the held polls and stops holding.
func (s *Server) ReleasePolls() {
	s.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.mu.Unlock()
}

// WriteJSON answers with a JSON body.
func WriteJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (s *Server) predictionJSON(id, status string) string {
	s.mu.Lock()
	p := s.preds[id]
	out, removed := s.Output, s.DataRemoved
	s.mu.Unlock()
	output := json.RawMessage("null")
	if status == "succeeded" && !removed {
		output = json.RawMessage(out)
		if out == "" {
			output, _ = json.Marshal(s.URL + "/delivery/" + id + "/out")
		}
	}
	var errField any
	if status == "failed" {
		errField = "CUDA out of memory"
	}
	version := p.version
	if version == "" {
		version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "model": p.model, "version": version, "input": p.input, "logs": "", "output": output,
		"error": errField, "status": status, "created_at": "2023-09-08T16:19:34.765994Z", "data_removed": removed,
		"urls": map[string]string{"cancel": s.URL + "/v1/predictions/" + id + "/cancel", "get": s.URL + "/v1/predictions/" + id},
	})
	return string(b)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/delivery/") {
		s.deliver(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		WriteJSON(w, 401, `{"title":"Unauthenticated","detail":"You did not pass a valid authentication token","status":401}`)
		return
	}
	id, action, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/predictions/"), "/")
	known := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return strings.HasPrefix(r.URL.Path, "/v1/predictions/") && s.preds[id] != nil
	}
	switch {
	case r.Method == http.MethodPost && action == "cancel" && known():
		s.mu.Lock()
		s.cancels++
		s.mu.Unlock()
		WriteJSON(w, 200, s.predictionJSON(id, "canceled"))
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/predictions"):
		s.create(w, r)
	case r.Method == http.MethodGet && action == "" && known():
		s.poll(w, r, id)
	default:
		WriteJSON(w, 404, `{"title":"Not found","detail":"The requested resource could not be found.","status":404}`)
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c := Create{Path: r.URL.Path, Body: string(b), Prefer: r.Header.Get("Prefer"), Auth: r.Header.Get("Authorization")}
	var body struct {
		Version string          `json:"version"`
		Input   json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(b, &body)
	model := strings.TrimSuffix(strings.TrimPrefix(c.Path, "/v1/models/"), "/predictions")
	if c.Path == "/v1/predictions" {
		model = ""
	}
	s.mu.Lock()
	h := s.CreateHandler
	if h == nil {
		n := len(s.creates)
		c.ID = ExampleID
		if n > 0 {
			c.ID = fmt.Sprintf("%.22s%04d", ExampleID, n)
		}
		s.preds[c.ID] = &prediction{model: model, version: body.Version, input: body.Input}
	}
	s.creates = append(s.creates, c)
	onCreate := s.OnCreate
	s.mu.Unlock()
	if h != nil {
		h(w)
		return
	}
	WriteJSON(w, 201, s.predictionJSON(c.ID, "starting"))
	_ = http.NewResponseController(w).Flush()
	if onCreate != nil {
		onCreate(c.ID)
	}
}

func (s *Server) poll(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	s.pollsIn++
	hold, onPoll := s.hold, s.OnPoll
	s.mu.Unlock()
	if onPoll != nil {
		onPoll(id)
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			// The client went away: this poll was never answered.
			s.mu.Lock()
			s.abandoned++
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	p := s.preds[id]
	st := s.Script[min(p.polls, len(s.Script)-1)]
	p.polls++
	s.polls++
	s.mu.Unlock()
	if st == "500" {
		WriteJSON(w, 500, `{"title":"Internal Server Error","detail":"","status":500}`)
		return
	}
	WriteJSON(w, 200, s.predictionJSON(id, st))
}

func (s *Server) deliver(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.deliveries++
	s.deliveryAuth = r.Header.Get("Authorization")
	st, ct, file := s.DeliveryStatus, s.DeliveryType, s.File
	s.mu.Unlock()
	if st != 0 {
		w.WriteHeader(st)
		return
	}
	if ct == "" {
		ct = "video/mp4"
	}
	if file == nil {
		file = []byte(DefaultFile)
	}
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(file)
}

// Creates returns every create received, in order.
func (s *Server) Creates() []Create {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Create(nil), s.creates...)
}

// CreateCount is len(Creates()).
func (s *Server) CreateCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.creates)
}

// Polls counts the polls answered (held polls whose client went away are
// not).
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// PollsReceived counts every poll that arrived, answered or not.
func (s *Server) PollsReceived() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollsIn
}

// PollsAbandoned counts the held polls whose client went away before
// they were released (never answered).
func (s *Server) PollsAbandoned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abandoned
}

// PollsOf counts the answered polls of prediction id.
func (s *Server) PollsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.preds[id]; p != nil {
		return p.polls
	}
	return 0
}

// Deliveries counts downloads; DeliveryAuth is the last one's
// Authorization header.
func (s *Server) Deliveries() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries, s.deliveryAuth
}

// Cancels counts cancel requests.
func (s *Server) Cancels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels
}

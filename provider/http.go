package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
)

// Provider API paths, relative to Config.BaseURL.
const (
	pathImages = "/v1/images"
	pathSpeech = "/v1/speech"
	pathVideos = "/v1/videos"
)

// Header names of the provider API.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderUnitID         = "X-Unit-Id"
)

// Operations of reads of a video job, as they appear in CallError.Op. They
// bill nothing and have no contract (Contract reports fail_closed for them,
// as for any operation outside the table).
const (
	OpVideoStatus = "video_status"
	OpVideoFetch  = "video_fetch"
)

// Media types the provider answers with.
const (
	ContentTypePNG = "image/png"
	ContentTypeWAV = "audio/wav"
	ContentTypeMP4 = "video/mp4"
)

// HTTP is a pipeline.Providers over the provider HTTP API. Create it with
// New. Safe for concurrent use.
type HTTP struct {
	cfg  Config
	base *url.URL
	// client sends reads and replayable calls; billClient sends billable
	// calls that must reach the provider at most once.
	client, billClient *http.Client
	own                []*http.Transport // transports New made, closed by Close
	log                *slog.Logger
}

var (
	_ pipeline.Providers     = (*HTTP)(nil)
	_ pipeline.EndpointNamer = (*HTTP)(nil)
)

// Endpoint is where the adapter sends every operation (Config.Endpoint, or
// the base URL without credentials): the server a probe's proof is of.
func (h *HTTP) Endpoint(string) string {
	if h.cfg.Endpoint != "" {
		return h.cfg.Endpoint
	}
	return EndpointOf(h.base)
}

// EndpointOf is u as a proof's endpoint: scheme, host and path, without
// credentials, query or fragment.
func EndpointOf(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment, c.ForceQuery = nil, "", "", false
	return c.String()
}

// New validates cfg and builds the client.
func New(cfg Config) (*HTTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &HTTP{cfg: cfg, base: base, log: cfg.Logger}
	if cfg.Client != nil {
		c, b := *cfg.Client, *cfg.Client
		h.client, h.billClient = &c, &b
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.IdleConnTimeout = 30 * time.Second
		// A billable call that cannot be resent gets a connection of its
		// own. On a reused keep-alive connection the server may have
		// closed meanwhile, such a call fails with nothing processed, yet
		// this client cannot prove that (see transportError) and must call
		// it unknown, which stops the job for a human. A fresh dial costs a
		// round trip; a spurious needs_review costs a person.
		bill := tr.Clone()
		bill.DisableKeepAlives = true
		h.own = []*http.Transport{tr, bill}
		h.client, h.billClient = &http.Client{Transport: tr}, &http.Client{Transport: bill}
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	h.client.CheckRedirect, h.billClient.CheckRedirect = noRedirect, noRedirect
	return h, nil
}

// Close releases idle connections of the transport New created. Calls in
// flight are not affected; the HTTP stays usable.
func (h *HTTP) Close() error {
	for _, tr := range h.own {
		tr.CloseIdleConnections()
	}
	return nil
}

// Name identifies the provider set for the intent log.
func (h *HTTP) Name() string { return h.cfg.Name }

// Contract returns op's declared contract from ContractTable; operations
// outside it fail closed.
func (h *HTTP) Contract(op string) pipeline.Contract { return contractOf(op) }

// Model returns the model id of op ("" for an operation without one).
func (h *HTTP) Model(op string) string { return h.cfg.Models[op] }

// Wire formats of the provider API (copied from provider/fake's api.go so
// that production code does not import a test double).
type (
	imageBody struct {
		Prompt string `json:"prompt"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
		Model  string `json:"model,omitempty"`
	}
	speechBody struct {
		Text       string `json:"text"`
		Voice      string `json:"voice,omitempty"`
		SampleRate int    `json:"sample_rate,omitempty"`
	}
	videoBody struct {
		Prompt     string `json:"prompt"`
		DurationMS int    `json:"duration_ms"`
		Width      int    `json:"width"`
		Height     int    `json:"height"`
		FPS        int    `json:"fps,omitempty"`
	}
	videoJob struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  *struct {
			Code string `json:"code"`
		} `json:"error,omitempty"`
	}
)

// GenerateImage is POST /v1/images, idempotent_verified: it carries
// meta.IdempotencyKey, and a call without one is refused before sending
// (CodeIdempotencyKeyMissing, outcome rejected). Only this request may be
// resent by net/http on a dropped keep-alive connection; the server
// deduplicates the key, so that resend is not billed.
func (h *HTTP) GenerateImage(ctx context.Context, meta pipeline.CallMeta, req pipeline.ImageRequest) (pipeline.Media, error) {
	c := &call{op: pipeline.OpImage, method: http.MethodPost, path: pathImages, unit: meta.UnitID, accept: ContentTypePNG}
	if meta.IdempotencyKey == "" {
		return pipeline.Media{}, h.fail(c, &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected,
			Code: CodeIdempotencyKeyMissing, Cause: fmt.Errorf("%w: %w", pipeline.ErrInvalidInput, ErrIdempotencyKeyMissing)})
	}
	model := req.Model
	if model == "" {
		model = h.Model(pipeline.OpImage)
	}
	c.key = meta.IdempotencyKey
	c.replayable = true
	if err := c.setJSON(imageBody{Prompt: req.Prompt, Width: req.Width, Height: req.Height, Model: model}); err != nil {
		return pipeline.Media{}, h.fail(c, err)
	}
	return h.media(ctx, c)
}

// Synthesize is POST /v1/speech, sync: no Idempotency-Key is sent (the
// provider ignores it, and net/http would treat it as permission to resend)
// and the request cannot be rewound, so one call reaches the provider at
// most once.
func (h *HTTP) Synthesize(ctx context.Context, meta pipeline.CallMeta, req pipeline.SpeechRequest) (pipeline.Media, error) {
	c := &call{op: pipeline.OpSpeech, method: http.MethodPost, path: pathSpeech, unit: meta.UnitID, accept: ContentTypeWAV}
	if err := c.setJSON(speechBody{Text: req.Text, Voice: req.Voice, SampleRate: req.SampleRate}); err != nil {
		return pipeline.Media{}, h.fail(c, err)
	}
	return h.media(ctx, c)
}

// SubmitVideo is POST /v1/videos, async_pollable: it returns the provider's
// job id, which the caller must persist before anything else. Like speech it
// carries no Idempotency-Key and cannot be resent. A failure after sending
// is unknown: a job may exist whose id we never saw.
func (h *HTTP) SubmitVideo(ctx context.Context, meta pipeline.CallMeta, req pipeline.VideoRequest) (string, error) {
	c := &call{op: pipeline.OpVideoSubmit, method: http.MethodPost, path: pathVideos, unit: meta.UnitID, accept: "application/json"}
	if err := c.setJSON(videoBody{Prompt: req.Prompt, DurationMS: req.DurationMS, Width: req.Width, Height: req.Height, FPS: req.FPS}); err != nil {
		return "", h.fail(c, err)
	}
	var job videoJob
	if err := h.doJSON(ctx, c, &job, http.StatusOK, http.StatusCreated, http.StatusAccepted); err != nil {
		return "", err
	}
	if !validJobID(job.ID) {
		return "", h.fail(c, h.badResponse(c, c.status, fmt.Errorf("submit answered with an invalid job id %q", sanitize(job.ID, 80))))
	}
	h.log.Debug("provider video submitted", "op", c.op, "unit", c.unit, "id", job.ID, "status", job.Status)
	return job.ID, nil
}

// VideoStatus is GET /v1/videos/{id}. It bills nothing, so every transport
// failure and 5xx is outcome not_sent with CodePollFailed: repeating a read
// cannot pay twice. An unknown id is rejected (CodeJobNotFound). A failed
// job is not an error: it is VideoState{Failed: true, Code: ...}, with Code
// one of CodeGenerationFailed, CodeRenderFailed, CodeJobFailed. The API has
// no retryability signal, so Retryable is always false (a resubmission is a
// new bill; the pipeline decides).
func (h *HTTP) VideoStatus(ctx context.Context, externalID string) (pipeline.VideoState, error) {
	c := &call{op: OpVideoStatus, read: true, method: http.MethodGet, accept: "application/json"}
	if !validJobID(externalID) {
		return pipeline.VideoState{}, h.fail(c, invalidJobID(c, externalID))
	}
	c.path = pathVideos + "/" + externalID
	var job videoJob
	if err := h.doJSON(ctx, c, &job, http.StatusOK); err != nil {
		return pipeline.VideoState{}, err
	}
	if job.ID != externalID {
		return pipeline.VideoState{}, h.fail(c, h.badResponse(c, c.status, fmt.Errorf("status of job %q answered for %q", externalID, sanitize(job.ID, 80))))
	}
	switch job.Status {
	case "queued", "running":
		return pipeline.VideoState{}, nil
	case "succeeded":
		return pipeline.VideoState{Done: true}, nil
	case "failed":
		code := CodeJobFailed
		if job.Error != nil {
			switch job.Error.Code {
			case "generation_failed":
				code = CodeGenerationFailed
			case "render_failed":
				code = CodeRenderFailed
			}
		}
		return pipeline.VideoState{Failed: true, Code: code}, nil
	}
	return pipeline.VideoState{}, h.fail(c, h.badResponse(c, c.status, fmt.Errorf("unknown job status %q", sanitize(job.Status, 40))))
}

// FetchVideo is GET /v1/videos/{id}/content, streamed. Like VideoStatus it
// bills nothing: transport failures, 5xx and a wrong content type are
// not_sent. Content asked for too early is not_sent with CodeVideoNotReady;
// content of a failed job is outcome failed with CodeJobFailed.
func (h *HTTP) FetchVideo(ctx context.Context, externalID string) (pipeline.Media, error) {
	c := &call{op: OpVideoFetch, read: true, method: http.MethodGet, accept: ContentTypeMP4}
	if !validJobID(externalID) {
		return pipeline.Media{}, h.fail(c, invalidJobID(c, externalID))
	}
	c.path = pathVideos + "/" + externalID + "/content"
	return h.media(ctx, c)
}

// validJobID accepts what can be put in a URL path segment as is: 1–256
// unreserved characters (RFC 3986), not "." or "..". The fake's ids are
// vid_<hex>.
func validJobID(id string) bool {
	if id == "" || len(id) > 256 || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.' || b == '~') {
			return false
		}
	}
	return true
}

func invalidJobID(c *call, id string) *pipeline.CallError {
	return &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall,
		Cause: fmt.Errorf("%w: invalid video job id %q", pipeline.ErrInvalidInput, sanitize(id, 80))}
}

// call is one exchange with the provider.
type call struct {
	op         string
	read       bool // a read of a video job: bills nothing
	method     string
	path       string
	body       []byte
	replayable bool // the operation's contract lets net/http resend it
	unit, key  string
	accept     string
	status     int // of the answer, once there is one
}

func (c *call) setJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil { // plain structs of strings and ints: cannot happen
		return &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall, Cause: err}
	}
	c.body = b
	return nil
}

// traceState records what net/http reported about one call. The hooks may
// run on the transport's goroutines.
type traceState struct {
	gotConn atomic.Bool
	wrote   atomic.Bool // diagnostic only, see transportError
}

// newRequest builds the request of c. Billable requests must not be
// replayable unless their contract allows it: net/http resends a request on
// a dropped reused connection only when it can rewind the body (GetBody) and
// either the method is idempotent or the request carries Idempotency-Key /
// X-Idempotency-Key (Request.isReplayable). So a non-replayable call gets a
// plain body with GetBody nil and no such header; then the transport can
// only retry when it wrote nothing, and even that needs GetBody.
func (h *HTTP) newRequest(ctx context.Context, c *call) (*http.Request, error) {
	u := *h.base
	u.Path = h.base.Path + c.path
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), nil)
	if err != nil {
		return nil, &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall,
			Cause: fmt.Errorf("%w: %v", pipeline.ErrInvalidInput, err)}
	}
	if c.body != nil {
		body := c.body
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = nil
		if c.replayable {
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		req.Header.Set("Content-Type", "application/json")
	}
	if c.accept != "" {
		req.Header.Set("Accept", c.accept)
	}
	req.Header.Set("User-Agent", "edgepipe-provider/1")
	// The W3C traceparent of the span ctx carries (the pipeline's provider
	// call span) goes with the request; with no span, nothing is added.
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if !c.read {
		if err := checkHeader(HeaderUnitID, c.unit); err != nil {
			return nil, &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall, Cause: err}
		}
		req.Header.Set(HeaderUnitID, c.unit)
		if c.replayable && c.key != "" {
			if err := checkHeader(HeaderIdempotencyKey, c.key); err != nil {
				return nil, &pipeline.CallError{Op: c.op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall, Cause: err}
			}
			req.Header.Set(HeaderIdempotencyKey, c.key)
		}
	}
	return req, nil
}

// checkHeader refuses values net/http would refuse only after dialing (which
// would look like a network failure), and an empty unit id, without which
// the provider's bill cannot be matched to a unit.
func checkHeader(name, v string) error {
	if v == "" || len(v) > 256 {
		return fmt.Errorf("%w: %s must be 1 to 256 characters, got %d", pipeline.ErrInvalidInput, name, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Errorf("%w: %s must be printable ASCII", pipeline.ErrInvalidInput, name)
		}
	}
	return nil
}

// exchange sends c and returns the answer, whatever its status. On success
// the caller owns resp.Body and must call done when finished with it; done
// also ends the call's deadline.
func (h *HTTP) exchange(ctx context.Context, c *call) (resp *http.Response, done context.CancelFunc, tr *traceState, err error) {
	tr = &traceState{}
	if ctx.Err() != nil {
		return nil, nil, tr, h.canceled(ctx, c, nil)
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, h.cfg.Timeout, errCallTimeout)
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { tr.gotConn.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { tr.wrote.Store(true) },
	})
	req, err := h.newRequest(callCtx, c)
	if err != nil {
		cancel()
		return nil, nil, tr, err
	}
	client := h.client
	if !c.read && !c.replayable {
		client = h.billClient
	}
	resp, err = client.Do(req)
	if err != nil {
		cancel()
		return nil, nil, tr, h.transportError(ctx, c, tr, 0, err)
	}
	c.status = resp.StatusCode
	return resp, cancel, tr, nil
}

// media runs c and hands back its body as a stream.
func (h *HTTP) media(ctx context.Context, c *call) (pipeline.Media, error) {
	start := time.Now()
	resp, done, tr, err := h.exchange(ctx, c)
	if err != nil {
		return pipeline.Media{}, h.fail(c, err)
	}
	if resp.StatusCode != http.StatusOK {
		ce := h.statusError(c, resp)
		done()
		return pipeline.Media{}, h.fail(c, ce)
	}
	if !mediaTypeIs(resp.Header.Get("Content-Type"), c.accept) {
		resp.Body.Close()
		done()
		return pipeline.Media{}, h.fail(c, h.badResponse(c, resp.StatusCode,
			fmt.Errorf("content type %q, want %s", sanitize(resp.Header.Get("Content-Type"), 80), c.accept)))
	}
	h.log.Debug("provider call answered", "op", c.op, "unit", c.unit, "status", resp.StatusCode,
		"content_length", resp.ContentLength, "elapsed", time.Since(start))
	return pipeline.Media{
		Body:        &mediaBody{h: h, c: c, parent: ctx, tr: tr, rc: resp.Body, done: done},
		ContentType: c.accept,
	}, nil
}

// doJSON runs c and decodes a JSON answer with one of the ok statuses into v.
func (h *HTTP) doJSON(ctx context.Context, c *call, v any, ok ...int) error {
	resp, done, tr, err := h.exchange(ctx, c)
	if err != nil {
		return h.fail(c, err)
	}
	defer done()
	good := false
	for _, s := range ok {
		good = good || resp.StatusCode == s
	}
	if !good {
		return h.fail(c, h.statusError(c, resp))
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !mediaTypeIs(ct, "application/json") {
		return h.fail(c, h.badResponse(c, resp.StatusCode, fmt.Errorf("content type %q, want application/json", sanitize(ct, 80))))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody+1))
	if err != nil {
		return h.fail(c, h.transportError(ctx, c, tr, resp.StatusCode, err))
	}
	if len(b) > maxJSONBody {
		return h.fail(c, h.badResponse(c, resp.StatusCode, fmt.Errorf("JSON answer exceeds %d bytes", maxJSONBody)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return h.fail(c, h.badResponse(c, resp.StatusCode, fmt.Errorf("malformed JSON answer: %w", err)))
	}
	return nil
}

// fail logs a failed call and returns err unchanged. Failed reads are
// routine (a poll before the video is ready) and log at debug.
//
//nolint:contextcheck // logging with context.Background, nothing is canceled
func (h *HTTP) fail(c *call, err error) error {
	var ce *pipeline.CallError
	if errors.As(err, &ce) {
		level := slog.LevelWarn
		if c.read {
			level = slog.LevelDebug
		}
		h.log.Log(context.Background(), level, "provider call failed", "op", c.op, "unit", c.unit,
			"outcome", ce.Outcome, "code", ce.Code, "http_status", ce.HTTPStatus, "err", ce.Cause)
	}
	return err
}

// mediaTypeIs compares a Content-Type header with want, ignoring
// parameters and case, and accepting the common aliases of WAV.
func mediaTypeIs(header, want string) bool {
	mt, _, err := mime.ParseMediaType(header)
	if err != nil {
		return false
	}
	mt = strings.ToLower(mt)
	if want == ContentTypeWAV {
		switch mt {
		case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave":
			return true
		}
		return false
	}
	return mt == want
}

// mediaBody is the live response body of a media call. Read errors are
// classified like call errors, so the caller storing the stream learns
// whether the failed call may have been billed; Close ends the call's
// deadline.
type mediaBody struct {
	h      *HTTP
	c      *call
	parent context.Context
	tr     *traceState
	rc     io.ReadCloser
	done   context.CancelFunc
	once   sync.Once
}

func (b *mediaBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.h.fail(b.c, b.h.transportError(b.parent, b.c, b.tr, b.c.status, err))
	}
	return n, err
}

func (b *mediaBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.done)
	return err
}

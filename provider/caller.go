package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
)

// Codes used by the real-provider adapters (provider/workersai,
// provider/replicate) in addition to the ones above.
const (
	// CodeOutputExpired: a finished job's output can no longer be
	// downloaded (Replicate deletes outputs about an hour after a prediction
	// ends). The job was paid for; only a new, billed job can replace it.
	CodeOutputExpired = "provider_output_expired"
	// CodeJobCanceled: the provider reports the job canceled or aborted.
	CodeJobCanceled = "provider_job_canceled"
	// CodeUnsupportedOperation: the provider has no model for the
	// operation (Workers AI has no text-to-video); nothing was sent.
	CodeUnsupportedOperation = "provider_unsupported_operation"
)

// ErrorBodyParser extracts a provider's error code and message from an error
// answer's body (both only ever end up in logs). It returns empty strings
// when the body is not in its format.
type ErrorBodyParser func(body []byte) (code, message string)

// CallerConfig configures a Caller.
type CallerConfig struct {
	// Timeout bounds one exchange, from the first byte sent to the last
	// byte of the answer read (0 = DefaultTimeout).
	Timeout time.Duration
	// Client, when set, sends every request (tests); it is copied and never
	// follows redirects. nil = transports of the Caller's own: billable
	// calls get a fresh connection each (DisableKeepAlives), reads share
	// keep-alive connections.
	Client *http.Client
	// ParseError reads the provider's error body format (nil = the
	// {"error":{"code","message"}} shape of the fake).
	ParseError ErrorBodyParser
	Clock      pipeline.Clock
	Logger     *slog.Logger
}

// Caller sends single HTTP exchanges to a real provider and classifies
// their failures exactly like HTTP does (see the package documentation): a
// billable request is sent at most once, because it has no GetBody and no
// Idempotency-Key header, so net/http's Transport never considers it
// replayable (Request.isReplayable), and because it gets a connection of
// its own, so there is no stale keep-alive connection it could be retried
// on. Safe for concurrent use.
type Caller struct {
	cfg                CallerConfig
	client, billClient *http.Client
	own                []*http.Transport
}

// NewCaller builds a Caller.
func NewCaller(cfg CallerConfig) *Caller {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = pipeline.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ParseError == nil {
		cfg.ParseError = parseFakeError
	}
	c := &Caller{cfg: cfg}
	if cfg.Client != nil {
		a, b := *cfg.Client, *cfg.Client
		c.client, c.billClient = &a, &b
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.IdleConnTimeout = 30 * time.Second
		bill := tr.Clone()
		bill.DisableKeepAlives = true
		c.own = []*http.Transport{tr, bill}
		c.client, c.billClient = &http.Client{Transport: tr}, &http.Client{Transport: bill}
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.client.CheckRedirect, c.billClient.CheckRedirect = noRedirect, noRedirect
	return c
}

// Close releases idle connections of the transports NewCaller made.
func (c *Caller) Close() error {
	for _, tr := range c.own {
		tr.CloseIdleConnections()
	}
	return nil
}

// Logger is the Caller's logger.
func (c *Caller) Logger() *slog.Logger { return c.cfg.Logger }

// Request is one exchange.
type Request struct {
	// Op names the operation in CallError.Op (pipeline.OpImage, ...).
	Op string
	// Read marks a request that bills nothing (a status poll, a download):
	// every transport failure and 5xx is then not_sent with CodePollFailed.
	Read   bool
	Method string
	URL    *url.URL
	// Body is sent as is with Content-Type application/json (nil = none).
	Body   []byte
	Header http.Header
	// OK lists the statuses that are answers (none = 200).
	OK []int
	// GoneCode and GoneOutcome classify a 404 or 410 (empty = the generic
	// classification: rejected, CodeNotFound or for reads CodeJobNotFound).
	GoneCode    string
	GoneOutcome pipeline.CallOutcome
	// Unit is logged with failures.
	Unit string
}

// Response is a successful exchange. Body read errors are classified like
// call errors; Close ends the exchange's deadline and must be called.
type Response struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
}

// Do sends r once and returns the answer if its status is in r.OK; any
// other answer or failure is a *pipeline.CallError (or the caller's own
// cancellation, which is not).
func (c *Caller) Do(ctx context.Context, r Request) (*Response, error) {
	tr := &traceState{}
	if ctx.Err() != nil {
		return nil, c.canceled(ctx, r, nil)
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout, errCallTimeout)
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { tr.gotConn.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { tr.wrote.Store(true) },
	})
	req, err := http.NewRequestWithContext(callCtx, r.Method, r.URL.String(), nil)
	if err != nil {
		cancel()
		return nil, c.fail(r, &pipeline.CallError{Op: r.Op, Outcome: pipeline.OutcomeRejected, Code: CodeInvalidCall,
			Cause: fmt.Errorf("%w: %v", pipeline.ErrInvalidInput, err)})
	}
	for k, vs := range r.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	// Whatever the header set says, a billable request never carries the
	// headers that make net/http consider it replayable.
	if !r.Read {
		req.Header.Del("Idempotency-Key")
		req.Header.Del("X-Idempotency-Key")
	}
	if r.Body != nil {
		req.Body = io.NopCloser(bytes.NewReader(r.Body))
		req.ContentLength = int64(len(r.Body))
		req.GetBody = nil // never rewindable: the transport cannot resend it
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "edgepipe-provider/1")
	// The traceparent of ctx's span (the pipeline's provider call span);
	// nothing without one.
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	client := c.client
	if !r.Read {
		client = c.billClient
	}
	resp, err := client.Do(req) //nolint:bodyclose // statusError closes it, or the returned Response owns it
	if err != nil {
		cancel()
		return nil, c.fail(r, c.transportError(ctx, r, tr, 0, err))
	}
	ok := len(r.OK) == 0 && resp.StatusCode == http.StatusOK
	for _, s := range r.OK {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		ce := c.statusError(r, resp)
		cancel()
		return nil, c.fail(r, ce)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header,
		Body: &callerBody{c: c, r: r, parent: ctx, tr: tr, rc: resp.Body, status: resp.StatusCode, done: cancel}}, nil
}

// ReadAll reads a response body of at most limit bytes whole and closes
// it. A longer body is a bad response; a broken one is classified.
func (c *Caller) ReadAll(r Request, resp *Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err // already classified by callerBody
	}
	if int64(len(b)) > limit {
		return nil, c.BadResponse(r, resp.Status, fmt.Errorf("answer exceeds %d bytes", limit))
	}
	return b, nil
}

// DecodeJSON reads a JSON answer of at most limit bytes into v.
func (c *Caller) DecodeJSON(r Request, resp *Response, limit int64, v any) error {
	if ct := resp.Header.Get("Content-Type"); !mediaTypeIs(ct, "application/json") {
		resp.Body.Close()
		return c.BadResponse(r, resp.Status, fmt.Errorf("content type %q, want application/json", sanitize(ct, 80)))
	}
	b, err := c.ReadAll(r, resp, limit)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return c.BadResponse(r, resp.Status, fmt.Errorf("malformed JSON answer: %w", err))
	}
	return nil
}

// BadResponse is an answer the adapter cannot use: unknown for a billable
// call (the provider answered, so it may have billed), not_sent for a read.
func (c *Caller) BadResponse(r Request, status int, cause error) error {
	o := pipeline.OutcomeUnknown
	if r.Read {
		o = pipeline.OutcomeNotSent
	}
	return c.fail(r, &pipeline.CallError{Op: r.Op, Outcome: o, HTTPStatus: status, Code: CodeBadResponse, Cause: cause})
}

// Fail logs a CallError built by an adapter and returns it.
func (c *Caller) Fail(r Request, ce *pipeline.CallError) error { return c.fail(r, ce) }

// The log record needs no context: fail is a leaf that only logs.
//
//nolint:contextcheck // logging with context.Background, nothing is canceled
func (c *Caller) fail(r Request, err error) error {
	var ce *pipeline.CallError
	if errors.As(err, &ce) {
		level := slog.LevelWarn
		if r.Read {
			level = slog.LevelDebug
		}
		c.cfg.Logger.Log(context.Background(), level, "provider call failed", "op", r.Op, "unit", r.Unit,
			"outcome", ce.Outcome, "code", ce.Code, "http_status", ce.HTTPStatus, "err", ce.Cause)
	}
	return err
}

// statusError classifies an answer whose status is not in r.OK and closes
// its body. It follows HTTP.statusError, plus: 408 (Workers AI's inference
// timeout, code 3007) is unknown for a billable call, since the model may
// have run and been billed; 404/410 take r.GoneCode when set.
func (c *Caller) statusError(r Request, resp *http.Response) *pipeline.CallError {
	re := c.readErrorBody(resp)
	ce := &pipeline.CallError{Op: r.Op, HTTPStatus: resp.StatusCode, Cause: re}
	st := resp.StatusCode
	switch {
	case st == http.StatusTooManyRequests:
		now := c.cfg.Clock.Now()
		if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			now = d
		}
		ce.Outcome, ce.Code, ce.RetryAfter = pipeline.OutcomeRateLimited, CodeRateLimited, ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	case r.Read && (st >= 500 || st == http.StatusRequestTimeout):
		ce.Outcome, ce.Code = pipeline.OutcomeNotSent, CodePollFailed
	case st >= 500:
		ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeServerError
	case st == http.StatusRequestTimeout:
		ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeTimeout
	case (st == http.StatusNotFound || st == http.StatusGone) && r.GoneCode != "":
		ce.Outcome, ce.Code = r.GoneOutcome, r.GoneCode
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeUnauthorized
	case st == http.StatusNotFound:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeNotFound
		if r.Read {
			ce.Code = CodeJobNotFound
		}
	case st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge ||
		st == http.StatusUnsupportedMediaType || st == http.StatusUnprocessableEntity:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeRejectedInput
	case st >= 400:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeRejected
	default: // 1xx, 3xx (redirects are not followed), an unexpected 2xx
		ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeBadResponse
		if r.Read {
			ce.Outcome = pipeline.OutcomeNotSent
		}
	}
	return ce
}

func (c *Caller) readErrorBody(resp *http.Response) *ResponseError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	re := &ResponseError{Status: resp.StatusCode}
	if code, msg := c.cfg.ParseError(b); code != "" || msg != "" {
		re.ProviderCode, re.Message = sanitize(code, 64), sanitize(msg, maxCauseRunes)
	} else {
		re.Message = sanitize(string(b), maxCauseRunes)
	}
	return re
}

func parseFakeError(b []byte) (string, string) {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) != nil {
		return "", ""
	}
	return body.Error.Code, body.Error.Message
}

// transportError is HTTP.transportError for a Caller: no connection →
// not_sent; a connection → unknown (timeout or connection lost); reads are
// always not_sent.
func (c *Caller) transportError(parent context.Context, r Request, tr *traceState, status int, err error) error {
	if parent.Err() != nil {
		return c.canceled(parent, r, tr)
	}
	ce := &pipeline.CallError{Op: r.Op, HTTPStatus: status, Cause: &TransportError{
		Connected: tr.gotConn.Load(), Written: tr.wrote.Load(), Err: err}}
	switch {
	case r.Read:
		ce.Outcome, ce.Code = pipeline.OutcomeNotSent, CodePollFailed
	case !tr.gotConn.Load():
		ce.Outcome, ce.Code = pipeline.OutcomeNotSent, CodeUnreachable
	case isTimeout(err):
		ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeTimeout
	default:
		ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeConnectionLost
	}
	return ce
}

func (c *Caller) canceled(parent context.Context, r Request, tr *traceState) error {
	err := parent.Err()
	cause := context.Cause(parent)
	msg := "provider " + r.Op + ": canceled before the request was sent"
	if !r.Read && tr != nil && tr.gotConn.Load() {
		msg = "provider " + r.Op + ": canceled after the request may have reached the provider"
		c.cfg.Logger.Warn("provider call canceled after the request may have been sent", "op", r.Op, "unit", r.Unit, "err", cause)
	}
	if cause != nil && cause != err { //nolint:errorlint // identity: do not print the same error twice
		return fmt.Errorf("%s: %w (%w)", msg, err, cause)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// callerBody classifies read errors of a successful answer's body.
type callerBody struct {
	c      *Caller
	r      Request
	parent context.Context
	tr     *traceState
	rc     io.ReadCloser
	status int
	done   context.CancelFunc
	once   sync.Once
}

func (b *callerBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.c.fail(b.r, b.c.transportError(b.parent, b.r, b.tr, b.status, err))
	}
	return n, err
}

func (b *callerBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.done)
	return err
}

// ValidExternalID reports whether id can be put in a URL path segment as is
// (1–256 RFC 3986 unreserved characters, not "." or ".."). Adapters check
// provider job ids with it before using or returning them.
func ValidExternalID(id string) bool { return validJobID(id) }

// MediaTypeIs compares a Content-Type header with want, ignoring parameters
// and case.
func MediaTypeIs(header, want string) bool { return mediaTypeIs(header, want) }

// ParseBaseURL reads an adapter's API root (raw, or def when empty): an
// absolute http(s) URL without credentials or query, its path without a
// trailing slash. env names the setting in the error.
func ParseBaseURL(raw, def, env string) (*url.URL, error) {
	if raw == "" {
		raw = def
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.User != nil || base.RawQuery != "" {
		return nil, fmt.Errorf("%w: %s must be an absolute http(s) URL without credentials or query, e.g. %s", pipeline.ErrInvalidInput, env, def)
	}
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawPath = ""
	return base, nil
}

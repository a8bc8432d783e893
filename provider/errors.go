package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"edgepipe/pipeline"
)

// Codes of the *pipeline.CallError values this package returns. They are a
// closed set of fixed strings, safe to show to a job's owner; whatever the
// provider said goes to Cause instead.
const (
	// CodeUnreachable: no connection to the provider was obtained (refused,
	// DNS, TLS, timeout while connecting); the request was not sent.
	CodeUnreachable = "provider_unreachable"
	// CodeTimeout: the call timed out after the request may have been sent.
	CodeTimeout = "provider_timeout"
	// CodeConnectionLost: the connection failed after the request may have
	// been sent (reset, EOF, truncated body).
	CodeConnectionLost = "provider_connection_lost"
	// CodeServerError: a 5xx answer to a billable call.
	CodeServerError = "provider_server_error"
	// CodeRateLimited: 429; RetryAfter says when to come back.
	CodeRateLimited = "provider_rate_limited"
	// CodeRejectedInput: 400, 413, 415 or 422: the provider refused the
	// request as given.
	CodeRejectedInput = "provider_rejected_input"
	// CodeIdempotencyConflict: 422 because the idempotency key was already
	// used with a different body; the caller's key derivation is wrong.
	CodeIdempotencyConflict = "provider_idempotency_conflict"
	// CodeUnauthorized: 401 or 403.
	CodeUnauthorized = "provider_unauthorized"
	// CodeNotFound: 404 on a billable call (no such endpoint).
	CodeNotFound = "provider_not_found"
	// CodeRejected: any other 4xx.
	CodeRejected = "provider_rejected"
	// CodeBadResponse: a 2xx (or 3xx) answer this client cannot use: wrong
	// content type, malformed JSON, missing or invalid job id.
	CodeBadResponse = "provider_bad_response"
	// CodePollFailed: a read of a video job (status or content) failed in
	// transport or with a 5xx. Reads bill nothing, so the outcome is
	// not_sent: a repeated read cannot pay twice.
	CodePollFailed = "provider_poll_failed"
	// CodeJobNotFound: the provider does not know the video job id.
	CodeJobNotFound = "provider_job_not_found"
	// CodeVideoNotReady: the video content was asked for before the job
	// succeeded; poll again.
	CodeVideoNotReady = "provider_video_not_ready"
	// CodeJobFailed: the video job failed (content of a failed job, or an
	// unrecognised failure code in its status).
	CodeJobFailed = "provider_job_failed"
	// CodeGenerationFailed: the provider could not generate the video.
	CodeGenerationFailed = "provider_generation_failed"
	// CodeRenderFailed: the provider could not render the video.
	CodeRenderFailed = "provider_render_failed"
	// CodeInvalidCall: the call was refused here, before anything was sent
	// (empty unit id, invalid header value or job id); a caller bug.
	CodeInvalidCall = "provider_invalid_call"
	// CodeIdempotencyKeyMissing: an idempotent_verified operation was called
	// without meta.IdempotencyKey. It is refused before sending: the
	// contract lets the pipeline retry it, which without a key would pay
	// twice.
	CodeIdempotencyKeyMissing = "provider_idempotency_key_missing"
)

// Retry-After bounds.
const (
	// DefaultRetryAfter is used when a 429 has no usable Retry-After.
	DefaultRetryAfter = time.Second
	// MaxRetryAfter caps what a provider can ask for, so a bogus header
	// cannot park a job for days; it equals the pipeline's backoff cap.
	MaxRetryAfter = 10 * time.Minute
)

// ErrIdempotencyKeyMissing is the Cause of a CodeIdempotencyKeyMissing error.
var ErrIdempotencyKeyMissing = errors.New("provider: idempotency key required by the operation's contract")

// ResponseError is the Cause of a CallError built from a non-2xx answer: the
// status and what the provider said, for logs only.
type ResponseError struct {
	Status int
	// ProviderCode is the error.code of the provider's JSON error body, if
	// any. Only compared against known values, never shown.
	ProviderCode string
	// Message is the provider's message (or the start of a non-JSON body),
	// truncated and stripped of control characters.
	Message string
}

func (e *ResponseError) Error() string {
	s := "http " + strconv.Itoa(e.Status)
	if e.ProviderCode != "" {
		s += " " + strconv.Quote(e.ProviderCode)
	}
	if e.Message != "" {
		s += ": " + strconv.Quote(e.Message)
	}
	return s
}

// maxErrorBody bounds how much of an error answer is read; maxJSONBody
// bounds a JSON success answer (a job id and a status).
const (
	maxErrorBody  = 64 << 10
	maxJSONBody   = 64 << 10
	maxCauseRunes = 512
)

// ParseRetryAfter turns a Retry-After header value into a delay: either
// delta-seconds or an HTTP date, the latter measured from now (pass the
// response's Date when it has one, so a skewed local clock does not
// matter). An absent or invalid value gives DefaultRetryAfter; a date in the
// past gives 0; everything is capped at MaxRetryAfter. It never returns a
// negative duration.
func ParseRetryAfter(value string, now time.Time) time.Duration {
	v := strings.TrimSpace(value)
	if v == "" {
		return DefaultRetryAfter
	}
	if isDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(MaxRetryAfter/time.Second) { // only overflow fails here
			return MaxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return DefaultRetryAfter
	}
	d := t.Sub(now) // saturates instead of overflowing
	switch {
	case d < 0:
		return 0
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// retryAfter reads Retry-After from a response, dating an HTTP date from the
// response's own Date header when it has one.
func (h *HTTP) retryAfter(resp *http.Response) time.Duration {
	now := h.cfg.Clock.Now()
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		now = d
	}
	return ParseRetryAfter(resp.Header.Get("Retry-After"), now)
}

// statusError classifies a non-success answer and closes its body.
func (h *HTTP) statusError(c *call, resp *http.Response) *pipeline.CallError {
	re := readErrorBody(resp)
	ce := &pipeline.CallError{Op: c.op, HTTPStatus: resp.StatusCode, Cause: re}
	st := resp.StatusCode
	switch {
	case st == http.StatusTooManyRequests:
		// The provider says it did not process the request.
		ce.Outcome, ce.Code, ce.RetryAfter = pipeline.OutcomeRateLimited, CodeRateLimited, h.retryAfter(resp)
	case st >= 500:
		if c.read {
			ce.Outcome, ce.Code = pipeline.OutcomeNotSent, CodePollFailed
		} else {
			// A 5xx says nothing reliable about whether the call was
			// committed before the error (the fake's after_commit fault is
			// exactly that), so it is unknown.
			ce.Outcome, ce.Code = pipeline.OutcomeUnknown, CodeServerError
		}
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeUnauthorized
	case st == http.StatusNotFound:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeNotFound
		if c.read {
			ce.Code = CodeJobNotFound
		}
	case st == http.StatusConflict && c.read && re.ProviderCode == "not_ready":
		ce.Outcome, ce.Code = pipeline.OutcomeNotSent, CodeVideoNotReady
	case st == http.StatusConflict && c.read && re.ProviderCode == "job_failed":
		ce.Outcome, ce.Code = pipeline.OutcomeFailed, CodeJobFailed
	case st == http.StatusUnprocessableEntity && re.ProviderCode == "idempotency_key_reused":
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeIdempotencyConflict
	case st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge ||
		st == http.StatusUnsupportedMediaType || st == http.StatusUnprocessableEntity:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeRejectedInput
	case st >= 400:
		ce.Outcome, ce.Code = pipeline.OutcomeRejected, CodeRejected
	default: // 1xx that net/http passed on, 3xx (redirects are not followed), an unexpected 2xx
		ce.Outcome, ce.Code = h.badOutcome(c), CodeBadResponse
	}
	return ce
}

// badOutcome is the outcome of an answer this client cannot use. A billable
// call got an answer, so the provider may well have committed and billed it:
// unknown, which stops a sync call for a human instead of paying again. A
// read can simply be repeated.
func (h *HTTP) badOutcome(c *call) pipeline.CallOutcome {
	if c.read {
		return pipeline.OutcomeNotSent
	}
	return pipeline.OutcomeUnknown
}

func (h *HTTP) badResponse(c *call, status int, cause error) *pipeline.CallError {
	return &pipeline.CallError{Op: c.op, Outcome: h.badOutcome(c), HTTPStatus: status, Code: CodeBadResponse, Cause: cause}
}

// readErrorBody reads at most maxErrorBody of an error answer, drains a
// little more so the connection can be reused, and closes the body. A read
// failure just leaves the message short: the status already decided.
func readErrorBody(resp *http.Response) *ResponseError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	re := &ResponseError{Status: resp.StatusCode}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Error.Code != "" || body.Error.Message != "") {
		re.ProviderCode = sanitize(body.Error.Code, 64)
		re.Message = sanitize(body.Error.Message, maxCauseRunes)
	} else {
		re.Message = sanitize(string(b), maxCauseRunes)
	}
	return re
}

// sanitize keeps provider text fit for a one-line log: printable runes only,
// at most n of them.
func sanitize(s string, n int) string {
	var b strings.Builder
	count := 0
	for _, r := range s {
		if count == n {
			b.WriteString("...")
			break
		}
		if !unicode.IsPrint(r) {
			r = ' '
		}
		b.WriteRune(r)
		count++
	}
	return strings.TrimSpace(b.String())
}

// TransportError is the Cause of a CallError for an exchange that broke off.
// Connected and Written record what net/http reported (httptrace GotConn and
// WroteRequest) when the error was seen; only Connected decides the outcome.
type TransportError struct {
	Connected, Written bool
	Err                error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("connected=%t written=%t: %v", e.Connected, e.Written, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// errCallTimeout is the cause of a call's own deadline (Config.Timeout), to
// tell it from the caller's.
var errCallTimeout = errors.New("provider call timed out")

// transportError classifies a failure of the exchange itself (no response,
// or a response body that broke off). parent is the caller's context.
//
// Whether the request may have reached the provider is decided by one
// synchronous fact: did net/http hand us a connection (httptrace GotConn)?
// GotConn runs in the goroutine that sends, before the request is given to
// the connection's writer, so when Do returns it has either fired or never
// will for this request. httptrace's WroteRequest is not enough on its own:
// it fires before the transport flushes its buffer (so "wrote" does not mean
// "on the wire"), and it runs in the connection's write goroutine, which may
// still be writing when Do has already returned on a timeout (so "not yet
// wrote" does not mean "never will"). Therefore: no connection → not_sent;
// connection → unknown. That errs only towards unknown, the safe side.
func (h *HTTP) transportError(parent context.Context, c *call, tr *traceState, status int, err error) error {
	if perr := parent.Err(); perr != nil {
		return h.canceled(parent, c, tr)
	}
	ce := &pipeline.CallError{Op: c.op, HTTPStatus: status, Cause: &TransportError{
		Connected: tr.gotConn.Load(), Written: tr.wrote.Load(), Err: err}}
	switch {
	case c.read:
		// A read bills nothing: repeating it is always safe.
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

// canceled wraps the caller's cancellation. It is not a CallError: the
// pipeline must see that it was stopped, not that the provider failed. When
// a billable request may already have been sent the message says so and a
// warning is logged, because the unit's intent row is then the only record
// that the call may have been paid for.
func (h *HTTP) canceled(parent context.Context, c *call, tr *traceState) error {
	err := parent.Err()
	cause := context.Cause(parent)
	maybeSent := !c.read && tr != nil && tr.gotConn.Load()
	msg := "provider " + c.op + ": canceled before the request was sent"
	if maybeSent {
		msg = "provider " + c.op + ": canceled after the request may have reached the provider"
		h.log.Warn("provider call canceled after the request may have been sent", "op", c.op, "unit", c.unit, "err", cause)
	}
	if cause != nil && cause != err { //nolint:errorlint // identity: do not print the same error twice
		return fmt.Errorf("%s: %w (%w)", msg, err, cause)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errCallTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

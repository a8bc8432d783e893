package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"edgepipe/api"
	"edgepipe/internal/termtext"
)

// Sentinel errors. An *APIError matches them with errors.Is by its
// problem code, or by its HTTP status when the answer was not problem+json
// (a proxy's page): check errors.Is(err, client.ErrNotFound), and use
// errors.As with *APIError for the details.
var (
	// ErrUnauthorized: the token is missing, wrong, or not an operator
	// token for an admin call (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrAdminDisabled: the server has no operator token configured.
	ErrAdminDisabled = errors.New("operator API disabled")
	// ErrNotFound: no such job or dead letter for this token (404). A job
	// of another tenant is indistinguishable from a missing one.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the server refused the request as invalid (400); the
	// APIError's Problem.Errors name the fields.
	ErrInvalid = errors.New("invalid request")
	// ErrIdempotencyKeyReused: the Idempotency-Key was used before for a
	// different request (422).
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrConflict: the resource's state does not allow the request (409).
	// ErrJobTerminal, ErrInvalidTransition, ErrVersionUnbound,
	// ErrInstanceIDTaken and ErrDeadLetterSettled are the specific cases;
	// each also matches ErrConflict.
	ErrConflict          = errors.New("conflict")
	ErrJobTerminal       = errors.New("job already finished")
	ErrInvalidTransition = errors.New("job status does not allow this")
	ErrVersionUnbound    = errors.New("workflow version not bound")
	ErrInstanceIDTaken   = errors.New("instance id already in use")
	ErrDeadLetterSettled = errors.New("dead letter already redriven or discarded")
	// ErrResultNotReady: the job has no result (yet); it matches
	// ErrConflict too.
	ErrResultNotReady = errors.New("no result yet")
	// ErrTooLarge: the request body exceeds the server's limit (413).
	ErrTooLarge = errors.New("request too large")
	// ErrUnavailable: the server is busy or down (503, 502, 504, 429);
	// retrying later may help.
	ErrUnavailable = errors.New("service unavailable")
	// ErrServer: the server failed (any other 5xx).
	ErrServer = errors.New("server error")
)

// codeSentinels maps a problem code to its sentinel(s).
var codeSentinels = map[string][]error{
	"unauthorized":            {ErrUnauthorized},
	"admin_disabled":          {ErrAdminDisabled},
	"not_found":               {ErrNotFound},
	"validation_failed":       {ErrInvalid},
	"invalid_input":           {ErrInvalid},
	"invalid_instance_id":     {ErrInvalid},
	"idempotency_key_missing": {ErrInvalid},
	"idempotency_key_invalid": {ErrInvalid},
	"idempotency_key_reused":  {ErrIdempotencyKeyReused},
	"job_terminal":            {ErrJobTerminal, ErrConflict},
	"invalid_transition":      {ErrInvalidTransition, ErrConflict},
	"version_unbound":         {ErrVersionUnbound, ErrConflict},
	"dead_letter_settled":     {ErrDeadLetterSettled, ErrConflict},
	"instance_id_taken":       {ErrInstanceIDTaken, ErrConflict},
	"already_exists":          {ErrConflict},
	"lease_lost":              {ErrConflict},
	"result_not_ready":        {ErrResultNotReady, ErrConflict},
	"payload_too_large":       {ErrTooLarge},
	"unavailable":             {ErrUnavailable},
	"internal_error":          {ErrServer},
}

// statusSentinel is the sentinel of an answer by its status alone.
func statusSentinel(status int) error {
	switch status {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusBadRequest:
		return ErrInvalid
	case http.StatusUnprocessableEntity:
		return ErrIdempotencyKeyReused
	case http.StatusConflict:
		return ErrConflict
	case http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ErrUnavailable
	}
	if status >= 500 {
		return ErrServer
	}
	return nil
}

// APIError is an error answer (4xx or 5xx) of the API.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Problem is the problem+json body; zero when the body was not one.
	Problem api.Problem
	// Text is the start of a body that was not a problem (a proxy's
	// page), as received.
	Text string
	// RetryAfter is the Retry-After header, when the server sent one.
	RetryAfter string
}

// Error is one printable line: the server's title, detail (or field
// errors) and code. Every piece is cleaned of control characters.
func (e *APIError) Error() string { return FormatProblem(e.Status, e.Problem, e.Text) }

// Is matches the package's sentinel errors.
func (e *APIError) Is(target error) bool {
	if e.Problem.Code != "" {
		for _, s := range codeSentinels[e.Problem.Code] {
			if s == target {
				return true
			}
		}
		if _, known := codeSentinels[e.Problem.Code]; known {
			return false
		}
	}
	s := statusSentinel(e.Status)
	return s != nil && s == target
}

// Temporary reports whether repeating the request later may succeed.
func (e *APIError) Temporary() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests
}

// Limits of what is read from an error answer and shown from it.
const (
	maxErrorBody   = 64 << 10
	maxFieldErrors = 5
	maxPartLen     = 300
)

// readAPIError reads an error answer. Only bodies that say they are
// problem+json (or JSON) are parsed as a problem.
func readAPIError(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == api.ProblemContentType || mt == "application/json" {
		if json.Unmarshal(body, &e.Problem) == nil && (e.Problem.Code != "" || e.Problem.Title != "") {
			return e
		}
		e.Problem = api.Problem{}
	}
	e.Text = string(body)
	return e
}

// FormatProblem makes the one-line text of an error answer:
//
//	<title>: <detail> (<code>)
//	The request is invalid: scenes[0].duration_ms: must be …; options.fps: … (validation_failed)
//	Internal error: an internal error occurred; it has been logged (internal_error, request id abc)
//	HTTP 502 Bad Gateway: <start of the body>
//
// Field errors replace the detail (which only says "see errors"). Every
// piece comes from the server, so control characters are removed and each
// piece is shortened: the result is always a single printable line.
func FormatProblem(status int, p api.Problem, text string) string {
	clean := termtext.Clean
	if p.Code == "" && p.Title == "" {
		head := fmt.Sprintf("HTTP %d", status)
		if st := http.StatusText(status); st != "" {
			head += " " + st
		}
		if t := clean(text, 200); t != "" && !looksLikeHTML(text) {
			return head + ": " + t
		}
		return head
	}
	title := clean(p.Title, maxPartLen)
	if title == "" {
		title = http.StatusText(status)
		if title == "" {
			title = fmt.Sprintf("HTTP %d", status)
		}
	}
	detail := clean(p.Detail, maxPartLen)
	if len(p.Errors) > 0 {
		parts := make([]string, 0, min(len(p.Errors), maxFieldErrors)+1)
		for i, fe := range p.Errors {
			if i == maxFieldErrors {
				parts = append(parts, fmt.Sprintf("and %d more", len(p.Errors)-maxFieldErrors))
				break
			}
			f, m := clean(fe.Field, 100), clean(fe.Message, 200)
			switch {
			case f == "":
				parts = append(parts, m)
			case m == "":
				parts = append(parts, f)
			default:
				parts = append(parts, f+": "+m)
			}
		}
		detail = strings.Join(parts, "; ")
	}
	var b strings.Builder
	b.WriteString(title)
	if detail != "" {
		b.WriteString(": ")
		b.WriteString(detail)
	}
	var tags []string
	if c := clean(p.Code, 64); c != "" {
		tags = append(tags, c)
	} else {
		tags = append(tags, fmt.Sprintf("HTTP %d", status))
	}
	if rid := clean(p.RequestID, 64); rid != "" {
		tags = append(tags, "request id "+rid)
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(tags, ", "))
	return b.String()
}

func looksLikeHTML(s string) bool {
	t := strings.ToLower(strings.TrimSpace(s))
	return strings.HasPrefix(t, "<!doctype") || strings.HasPrefix(t, "<html")
}

// transportError keeps the URL (not secret, but noisy) out of connection
// errors while saying what was tried. Cancellation and deadlines come back
// as the context's own error.
func transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if errors.Is(ue.Err, context.Canceled) || errors.Is(ue.Err, context.DeadlineExceeded) {
			return ue.Err
		}
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Host
		}
		return &TransportError{Host: host, Err: innermost(ue.Err)}
	}
	return err
}

// TransportError: the server could not be reached, or the connection
// broke; the request may or may not have arrived.
type TransportError struct {
	Host string
	Err  error
}

func (e *TransportError) Error() string { return fmt.Sprintf("cannot reach %s: %v", e.Host, e.Err) }
func (e *TransportError) Unwrap() error { return e.Err }

// innermost drops the "dial tcp 127.0.0.1:1:" prefixes from net errors,
// which repeat the address already named.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

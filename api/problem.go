package api

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
)

// ProblemContentType is the media type of every error body (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTypePrefix + code is a problem's type URI: stable, and not a link
// anyone has to keep alive.
const problemTypePrefix = "urn:edgepipe:problem:"

// Problem is an error answer. Handlers return one for errors that are about
// the request itself; sentinel errors from the store are turned into one by
// problemFor. Every field is safe to show the caller.
type Problem struct {
	Type      string                `json:"type"`
	Title     string                `json:"title"`
	Status    int                   `json:"status"`
	Code      string                `json:"code"`
	Detail    string                `json:"detail,omitempty"`
	RequestID string                `json:"request_id,omitempty"`
	Errors    []pipeline.FieldError `json:"errors,omitempty"`

	header http.Header
	cause  error // logged for 5xx, never sent
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

func (p *Problem) Unwrap() error { return p.cause }

// problem makes a Problem; code doubles as the type's last segment.
func problem(status int, code, detail string) *Problem {
	return &Problem{Type: problemTypePrefix + code, Title: titleOf(code, status), Status: status, Code: code, Detail: detail}
}

// withHeader adds a response header (WWW-Authenticate, Retry-After, …).
func (p *Problem) withHeader(k, v string) *Problem {
	if p.header == nil {
		p.header = http.Header{}
	}
	p.header.Add(k, v)
	return p
}

var titles = map[string]string{
	"unauthorized":            "Missing or invalid credentials",
	"admin_disabled":          "Operator API is disabled",
	"csrf_failed":             "Form token missing or wrong",
	"not_found":               "Not found",
	"method_not_allowed":      "Method not allowed",
	"validation_failed":       "The request is invalid",
	"invalid_input":           "The request is invalid",
	"idempotency_key_missing": "Idempotency-Key header required",
	"idempotency_key_invalid": "Idempotency-Key header invalid",
	"idempotency_key_reused":  "Idempotency key reused with a different request",
	"payload_too_large":       "Request body too large",
	"unsupported_media_type":  "Unsupported content type",
	"job_terminal":            "The job has already finished",
	"invalid_transition":      "The job is not in a status that allows this",
	"lease_lost":              "The job changed hands",
	"already_exists":          "Already exists",
	"instance_id_taken":       "Instance id already in use",
	"invalid_instance_id":     "Instance id can never be valid",
	"range_not_satisfiable":   "Range not satisfiable",
	"precondition_failed":     "Precondition failed",
	"request_timeout":         "Request took too long to arrive",
	"version_unbound":         "Workflow version not bound",
	"result_not_ready":        "No result yet",
	"unavailable":             "Service unavailable",
	"internal_error":          "Internal error",
}

func titleOf(code string, status int) string {
	if t, ok := titles[code]; ok {
		return t
	}
	return http.StatusText(status)
}

// problemFor maps any error to the Problem sent for it: the one place where
// errors become status codes. Unknown errors are a 500 with a generic
// detail; their text goes to the log only.
func problemFor(err error) *Problem {
	var (
		p  *Problem
		ve *pipeline.ValidationError
		he *echo.HTTPError
		me *http.MaxBytesError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &me):
		return problem(http.StatusRequestEntityTooLarge, "payload_too_large", "the request body exceeds the size limit")
	case errors.As(err, &ve):
		q := problem(http.StatusBadRequest, "validation_failed", "the request has invalid fields; see errors")
		q.Errors = ve.Fields
		return q
	case errors.Is(err, pipeline.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no such resource")
	case errors.Is(err, pipeline.ErrIdempotencyReused):
		return problem(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was already used for a different request; use a new key for a new request")
	case errors.Is(err, pipeline.ErrTerminal):
		return problem(http.StatusConflict, "job_terminal", "the job has already finished and cannot change")
	case errors.Is(err, pipeline.ErrInvalidTransition):
		return problem(http.StatusConflict, "invalid_transition", "the job's current status does not allow this")
	case errors.Is(err, pipeline.ErrLeaseLost):
		return problem(http.StatusConflict, "lease_lost", "the job changed hands; retry the request")
	case errors.Is(err, pipeline.ErrAlreadyExists):
		return problem(http.StatusConflict, "already_exists", "the resource already exists")
	case errors.Is(err, pipeline.ErrInvalidInput):
		// Messages wrapping ErrInvalidInput are written for the caller.
		return problem(http.StatusBadRequest, "invalid_input", strings.TrimPrefix(err.Error(), pipeline.ErrInvalidInput.Error()+": "))
	case errors.As(err, &he):
		return echoProblem(he)
	}
	q := problem(http.StatusInternalServerError, "internal_error", "an internal error occurred; it has been logged")
	if errors.Is(err, context.DeadlineExceeded) {
		q = problem(http.StatusServiceUnavailable, "unavailable", "the service is busy; retry shortly").withHeader("Retry-After", "1")
	}
	q.cause = err
	return q
}

func echoProblem(he *echo.HTTPError) *Problem {
	switch he.Code {
	case http.StatusNotFound:
		return problem(http.StatusNotFound, "not_found", "no such resource")
	case http.StatusMethodNotAllowed:
		return problem(http.StatusMethodNotAllowed, "method_not_allowed", "this method is not allowed here")
	case http.StatusRequestEntityTooLarge:
		return problem(http.StatusRequestEntityTooLarge, "payload_too_large", "the request body exceeds the size limit")
	case http.StatusUnsupportedMediaType:
		return problem(he.Code, "unsupported_media_type", "unsupported content type")
	case http.StatusUnauthorized:
		return problem(he.Code, "unauthorized", "missing or invalid credentials")
	}
	if he.Code >= 400 && he.Code < 500 {
		return problem(he.Code, "invalid_input", http.StatusText(he.Code))
	}
	q := problem(http.StatusInternalServerError, "internal_error", "an internal error occurred; it has been logged")
	q.cause = he
	return q
}

// problemFor is problemFor for a request: when the router found no handler
// (echo's 404 or 405), a path some route serves with other methods is a
// wrong method, 405 with Allow, not a missing resource.
func (s *Server) problemFor(c echo.Context, err error) *Problem {
	p := problemFor(err)
	var he *echo.HTTPError
	if (p.Status != http.StatusNotFound && p.Status != http.StatusMethodNotAllowed) || !errors.As(err, &he) {
		return p
	}
	r := c.Request()
	allow := s.allowed(r.URL.Path)
	if len(allow) == 0 || slices.Contains(allow, r.Method) {
		return p
	}
	c.Response().Header().Del(echo.HeaderAllow) // echo's own, if it set one
	list := strings.Join(allow, ", ")
	return problem(http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here; use "+list).
		withHeader(echo.HeaderAllow, list)
}

// handleError is the echo HTTPErrorHandler.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		// A stream already started (SSE, a download): nothing can be said
		// to the client any more.
		s.log.Debug("error after the response started", "path", c.Path(), "err", err)
		return
	}
	if c.Request().Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away; nobody is left to answer or to alarm.
		s.log.Debug("client gone", "path", c.Path())
		return
	}
	p := s.problemFor(c, err)
	rid := c.Response().Header().Get(echo.HeaderXRequestID)
	if p.Status >= 500 {
		// A copy: Problems returned by handlers may be shared values.
		q := *p
		q.RequestID = rid
		p = &q
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "status", p.Status,
			"request_id", rid, "err", err)
	}
	h := c.Response().Header()
	for k, vs := range p.header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(p.Status)
		return
	}
	if isForm(c.Request()) && strings.HasPrefix(c.Request().URL.Path, "/v1/admin/") || htmlPageError(c.Request(), p.Status) {
		// A browser posted an operator form, or asked an operator page for
		// something wrong: answer with a page, not JSON.
		h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
		h.Set("Cache-Control", "no-store")
		c.Response().WriteHeader(p.Status)
		_ = errorPage.Execute(c.Response(), p)
		return
	}
	b, _ := json.Marshal(p)
	h.Set(echo.HeaderContentType, ProblemContentType)
	_ = c.Blob(p.Status, ProblemContentType, b)
}

// htmlPageError reports an error a browser gets on an operator page (GET
// /admin, /admin/jobs/{id}) that is the request's fault (a bad filter, an
// unknown job). Authentication failures keep their problem body: the
// browser shows its login prompt for them.
func htmlPageError(r *http.Request, status int) bool {
	return r.Method == http.MethodGet && (status == http.StatusBadRequest || status == http.StatusNotFound) &&
		(r.URL.Path == "/admin" || strings.HasPrefix(r.URL.Path, "/admin/"))
}

func isForm(r *http.Request) bool {
	ct := r.Header.Get(echo.HeaderContentType)
	return r.Method == http.MethodPost && strings.HasPrefix(strings.ToLower(ct), echo.MIMEApplicationForm)
}

var errorPage = template.Must(template.New("error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font:15px/1.5 system-ui,sans-serif;margin:3rem auto;max-width:40rem;color:#222}
.code{font-family:monospace;color:#a00}</style></head>
<body><h1>{{.Status}} — {{.Title}}</h1><p>{{.Detail}}</p><p class="code">{{.Code}}</p>
{{range .Errors}}<p>{{.Field}}: {{.Message}}</p>{{end}}
<p><a href="/admin">Back to the operations page</a></p></body></html>`))

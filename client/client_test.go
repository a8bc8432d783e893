package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"

	"edgepipe/api"
	"edgepipe/pipeline"
)

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no token", Config{BaseURL: "http://h"}, "no token"},
		{"token with a space", Config{BaseURL: "http://h", Token: "a b"}, "printable ASCII"},
		{"ftp", Config{BaseURL: "ftp://h", Token: "t"}, "want http(s)://"},
		{"credentials", Config{BaseURL: "http://u:p@h", Token: "t"}, "without credentials"},
		{"query", Config{BaseURL: "http://h/?a=1", Token: "t"}, "without credentials or query"},
		{"no host", Config{BaseURL: "http:///x", Token: "t"}, "want http(s)://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEndpointEscapesIDs(t *testing.T) {
	t.Parallel()
	c, err := New(Config{BaseURL: "http://h:1/prefix/", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"v1-abc":      "http://h:1/prefix/v1/jobs/v1-abc",
		"../admin":    "http://h:1/prefix/v1/jobs/..%2Fadmin",
		"a?b#c":       "http://h:1/prefix/v1/jobs/a%3Fb%23c",
		"with space":  "http://h:1/prefix/v1/jobs/with%20space",
		"v2-x_y-Z_09": "http://h:1/prefix/v1/jobs/v2-x_y-Z_09",
	} {
		if got := c.endpoint(nil, "v1", "jobs", id); got != want {
			t.Errorf("endpoint(%q) = %s, want %s", id, got, want)
		}
	}
}

// TestJobsAgainstTheAPI: submit, replay, a reused key, an invalid body,
// get, another tenant's job, list with a filter and a cursor, cancel.
func TestJobsAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	c := s.client(t, tokAcme)

	sub, err := c.Submit(ctx, "key-1", board(2))
	if err != nil {
		t.Fatal(err)
	}
	j := sub.Job
	if sub.Replayed || !strings.HasPrefix(j.ID, "v1-") || j.Status != pipeline.StatusPending {
		t.Fatalf("submitted %+v", sub)
	}
	if h := s.requests("/v1/jobs")[0].Header; h.Get("Idempotency-Key") != "key-1" || h.Get("Authorization") != "Bearer "+tokAcme ||
		h.Get("Content-Type") != "application/json" || h.Get("User-Agent") != "edgepipe-client" {
		t.Errorf("submission headers %v", h)
	}
	// The same request as raw bytes is a replay.
	raw, _ := json.Marshal(board(2))
	again, err := c.Submit(ctx, "key-1", raw)
	if err != nil || !again.Replayed || again.Job.ID != j.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	_, err = c.Submit(ctx, "key-1", board(3))
	var ae *APIError
	if !errors.Is(err, ErrIdempotencyKeyReused) || !errors.As(err, &ae) || ae.Status != 422 || ae.Problem.Code != "idempotency_key_reused" {
		t.Fatalf("reused key: %v", err)
	}
	bad := board(1)
	bad["options"] = map[string]any{"fps": 7}
	_, err = c.Submit(ctx, "key-2", bad)
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ae) || !hasField(ae.Problem, "options.fps") {
		t.Fatalf("invalid body: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "The request is invalid: options.fps: ") {
		t.Errorf("one-line error: %s", err)
	}
	if _, err := c.Submit(ctx, "", board(1)); err == nil || !strings.Contains(err.Error(), "Idempotency-Key is required") {
		t.Errorf("empty key: %v", err)
	}
	if _, err := c.Submit(ctx, "a\nb", board(1)); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
		t.Errorf("key with a newline: %v", err)
	}

	got, err := c.Get(ctx, j.ID)
	if err != nil || got.ID != j.ID || got.Links.Events != "/v1/jobs/"+j.ID+"/events" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.client(t, tokGlobex).Get(ctx, j.ID); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
		t.Fatalf("another tenant's job: %v", err)
	}
	if _, err := s.client(t, "tok-wrong-0123456789abcdef").Get(ctx, j.ID); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}

	second := mustSubmit(t, c, "key-3", board(1))
	page, err := c.List(ctx, ListOptions{Limit: 1})
	if err != nil || len(page.Jobs) != 1 || page.NextCursor == nil {
		t.Fatalf("first page: %+v %v", page, err)
	}
	rest, err := c.List(ctx, ListOptions{Limit: 1, Cursor: *page.NextCursor})
	if err != nil || len(rest.Jobs) != 1 || rest.Jobs[0].ID == page.Jobs[0].ID {
		t.Fatalf("second page: %+v %v", rest, err)
	}

	canceled, err := c.Cancel(ctx, second.ID)
	if err != nil || canceled.Status != pipeline.StatusCanceled {
		t.Fatalf("cancel: %+v %v", canceled, err)
	}
	l, err := c.List(ctx, ListOptions{Statuses: []Status{pipeline.StatusCanceled}})
	if err != nil || len(l.Jobs) != 1 || l.Jobs[0].ID != second.ID {
		t.Fatalf("canceled jobs: %+v %v", l, err)
	}
	if _, err := c.List(ctx, ListOptions{Statuses: []Status{"bogus"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad status filter: %v", err)
	}
	if _, err := c.Result(ctx, j.ID); !errors.Is(err, ErrResultNotReady) || !errors.Is(err, ErrConflict) {
		t.Fatalf("result of a pending job: %v", err)
	}
}

func TestTransportError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there any more
	c, err := New(Config{BaseURL: "http://" + addr, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "v1-x")
	var te *TransportError
	if !errors.As(err, &te) || te.Host != addr || !strings.HasPrefix(err.Error(), "cannot reach "+addr+": ") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "/v1/jobs") {
		t.Errorf("the URL is in the message: %s", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "v1-x"); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
}

// TestAPIErrorIs: the sentinels by problem code, and by status when the
// body was not a problem.
func TestAPIErrorIs(t *testing.T) {
	t.Parallel()
	all := []error{ErrUnauthorized, ErrAdminDisabled, ErrNotFound, ErrInvalid, ErrIdempotencyKeyReused, ErrConflict,
		ErrJobTerminal, ErrInvalidTransition, ErrVersionUnbound, ErrInstanceIDTaken, ErrResultNotReady, ErrTooLarge,
		ErrUnavailable, ErrServer}
	for _, tc := range []struct {
		status int
		code   string
		want   []error
	}{
		{401, "unauthorized", []error{ErrUnauthorized}},
		{404, "admin_disabled", []error{ErrAdminDisabled}},
		{404, "not_found", []error{ErrNotFound}},
		{400, "validation_failed", []error{ErrInvalid}},
		{400, "invalid_instance_id", []error{ErrInvalid}},
		{400, "idempotency_key_missing", []error{ErrInvalid}},
		{422, "idempotency_key_reused", []error{ErrIdempotencyKeyReused}},
		{409, "job_terminal", []error{ErrJobTerminal, ErrConflict}},
		{409, "invalid_transition", []error{ErrInvalidTransition, ErrConflict}},
		{409, "version_unbound", []error{ErrVersionUnbound, ErrConflict}},
		{409, "instance_id_taken", []error{ErrInstanceIDTaken, ErrConflict}},
		{409, "result_not_ready", []error{ErrResultNotReady, ErrConflict}},
		{409, "some_new_conflict", []error{ErrConflict}},
		{413, "payload_too_large", []error{ErrTooLarge}},
		{503, "unavailable", []error{ErrUnavailable}},
		{500, "internal_error", []error{ErrServer}},
		{404, "", []error{ErrNotFound}},
		{502, "", []error{ErrUnavailable}},
		{429, "", []error{ErrUnavailable}},
		{500, "", []error{ErrServer}},
		{418, "", nil},
	} {
		e := &APIError{Status: tc.status, Problem: api.Problem{Code: tc.code}}
		for _, s := range all {
			want := false
			for _, w := range tc.want {
				want = want || errors.Is(w, s)
			}
			if got := errors.Is(fmt.Errorf("wrapped: %w", e), s); got != want {
				t.Errorf("%d %q: errors.Is(%v) = %v, want %v", tc.status, tc.code, s, got, want)
			}
		}
	}
	if !(&APIError{Status: 503}).Temporary() || !(&APIError{Status: 429}).Temporary() || (&APIError{Status: 409}).Temporary() {
		t.Error("Temporary")
	}
}

func TestFormatProblem(t *testing.T) {
	t.Parallel()
	fields := func(n int) []pipeline.FieldError {
		var out []pipeline.FieldError
		for i := range n {
			out = append(out, pipeline.FieldError{Field: fmt.Sprintf("scenes[%d].duration_ms", i), Message: "must be between 500 and 30000"})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		status int
		p      api.Problem
		text   string
		want   string
	}{
		{"title detail code", 409, api.Problem{Title: "The job has already finished", Code: "job_terminal",
			Detail: "the job has already finished and cannot change"},
			"", "The job has already finished: the job has already finished and cannot change (job_terminal)"},
		{"field errors replace the detail", 400, api.Problem{Title: "The request is invalid", Code: "validation_failed",
			Detail: "the request has invalid fields; see errors", Errors: []pipeline.FieldError{
				{Field: "options.fps", Message: "must be one of 24, 25, 30"}, {Field: "scenes", Message: "needs at least 1 scene"}}},
			"", "The request is invalid: options.fps: must be one of 24, 25, 30; scenes: needs at least 1 scene (validation_failed)"},
		{"many field errors are cut", 400, api.Problem{Title: "The request is invalid", Code: "validation_failed", Errors: fields(7)},
			"", "The request is invalid: scenes[0].duration_ms: must be between 500 and 30000; scenes[1].duration_ms: must be between 500 and 30000; " +
				"scenes[2].duration_ms: must be between 500 and 30000; scenes[3].duration_ms: must be between 500 and 30000; " +
				"scenes[4].duration_ms: must be between 500 and 30000; and 2 more (validation_failed)"},
		{"field without message", 400, api.Problem{Title: "Bad", Code: "validation_failed", Errors: []pipeline.FieldError{{Field: "body"}}},
			"", "Bad: body (validation_failed)"},
		{"request id on 5xx", 500, api.Problem{Title: "Internal error", Code: "internal_error",
			Detail: "an internal error occurred; it has been logged", RequestID: "req-42"},
			"", "Internal error: an internal error occurred; it has been logged (internal_error, request id req-42)"},
		{"no detail", 401, api.Problem{Title: "Missing or invalid credentials", Code: "unauthorized"},
			"", "Missing or invalid credentials (unauthorized)"},
		{"no title", 404, api.Problem{Code: "not_found", Detail: "no such resource"},
			"", "Not Found: no such resource (not_found)"},
		{"no code", 418, api.Problem{Title: "Teapot"}, "", "Teapot (HTTP 418)"},
		{"not a problem", 502, api.Problem{}, "upstream connect error\nor disconnect", "HTTP 502 Bad Gateway: upstream connect error or disconnect"},
		{"an HTML page is not shown", 502, api.Problem{}, "<!DOCTYPE html><html><body>nginx</body></html>", "HTTP 502 Bad Gateway"},
		{"empty body", 503, api.Problem{}, "", "HTTP 503 Service Unavailable"},
		{"unknown status", 599, api.Problem{}, "", "HTTP 599"},
		{"control characters are removed", 400, api.Problem{Title: "Bad\x1b[31m\r\nthing", Code: "x\ny",
			Detail: "evil\x1b]0;title\x07 text\u2028more"}, "", "Bad [31m thing: evil ]0;title text more (x y)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatProblem(tc.status, tc.p, tc.text); got != tc.want {
				t.Errorf("FormatProblem =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

func TestReadAPIError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ctype, body, want string
	}{
		{"problem+json", api.ProblemContentType, `{"title":"Not found","code":"not_found","detail":"no such resource","status":404}`,
			"Not found: no such resource (not_found)"},
		{"charset parameter", api.ProblemContentType + "; charset=utf-8", `{"title":"Not found","code":"not_found"}`, "Not found (not_found)"},
		{"JSON that is not a problem", "application/json", `{"message":"nope"}`, `HTTP 404 Not Found: {"message":"nope"}`},
		{"text", "text/plain", "404 page not found\n", "HTTP 404 Not Found: 404 page not found"},
		{"problem-looking text is not parsed", "text/plain", `{"title":"X","code":"y"}`, `HTTP 404 Not Found: {"title":"X","code":"y"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", tc.ctype)
			rec.Header().Set("Retry-After", "3")
			rec.WriteHeader(404)
			rec.WriteString(tc.body)
			e := readAPIError(rec.Result())
			if e.Status != 404 || e.RetryAfter != "3" {
				t.Fatalf("err = %#v", e)
			}
			if e.Error() != tc.want {
				t.Errorf("got %q, want %q", e.Error(), tc.want)
			}
		})
	}
}

// FuzzFormatProblem: whatever a server sends, the error is one printable
// line of bounded length.
func FuzzFormatProblem(f *testing.F) {
	f.Add(400, `{"title":"The request is invalid","code":"validation_failed","errors":[{"field":"a","message":"b"}]}`)
	f.Add(500, "\x1b[2J<html>")
	f.Add(404, `{"title":"\u2028\u0085x","detail":"\r\n","code":"\t"}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		var p api.Problem
		_ = json.Unmarshal([]byte(body), &p)
		s := FormatProblem(status, p, body)
		if s == "" || len(s) > 8000 {
			t.Fatalf("length %d", len(s))
		}
		for _, r := range s {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("control character %U in %q", r, s)
			}
		}
	})
}

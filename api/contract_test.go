package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// The API tests hold every request they send and every answer they get to
// api/openapi.yaml, through kin-openapi: an answer with a status, header or
// body the document does not declare fails the test that got it, so the
// document cannot drift from the handlers (see testEnv.do).

var contract struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

func init() {
	// Event streams and the operations page are text; kin-openapi
	// decodes only text/plain as such.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	// /metrics in the formats a scraper may negotiate.
	openapi3filter.RegisterBodyDecoder("application/openmetrics-text", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/vnd.google.protobuf", openapi3filter.FileBodyDecoder)
}

// loadContract parses and validates openapi.yaml once per test binary.
func loadContract() (*openapi3.T, routers.Router, error) {
	contract.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(openAPIDoc)
		if err != nil {
			contract.err = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			contract.err = err
			return
		}
		contract.doc = doc
		contract.router, contract.err = legacy.NewRouter(doc)
	})
	return contract.doc, contract.router, contract.err
}

// TestOpenAPIIsValid: the served document is valid OpenAPI 3.1 for a real
// validator, not only well-formed YAML.
func TestOpenAPIIsValid(t *testing.T) {
	t.Parallel()
	doc, _, err := loadContract()
	if err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.Paths.Len() < 10 {
		t.Fatalf("version %s, %d paths", doc.OpenAPI, doc.Paths.Len())
	}
	// The schemas are not merely present: the Job schema refuses a job
	// without its links (a stray key once ended its property list early).
	job := doc.Components.Schemas["Job"].Value
	for _, p := range []string{"requires_action", "error", "result", "links"} {
		if _, ok := job.Properties[p]; !ok {
			t.Errorf("Job schema lacks property %s", p)
		}
	}
	if len(job.Properties) != len(job.Required) {
		t.Errorf("Job has %d properties and %d required ones: %v", len(job.Properties), len(job.Required), job.Required)
	}
}

// checkContract validates one exchange against openapi.yaml.
func checkContract(t testing.TB, r *http.Request, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	// Errorf only: this also runs on server goroutines (checked).
	_, router, err := loadContract()
	if err != nil {
		t.Errorf("openapi.yaml: %v", err)
		return
	}
	vr := r.Clone(context.Background())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(vr)
	if err != nil {
		// Not an operation of the document: only the router's own
		// answers are allowed (unknown path, wrong method, OPTIONS,
		// authentication that comes first).
		if !slices.Contains([]int{401, 404, 405, 204}, w.Code) {
			t.Errorf("contract: %s %s is no documented operation (%v) but answered %d", r.Method, r.URL.Path, err, w.Code)
		}
		return
	}
	exercised.add(r.Method, route.Path, w.Code)
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && w.Code < 400 {
		t.Errorf("contract: %s %s answered %d to a request the document says is invalid: %v", r.Method, r.URL.Path, w.Code, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: w.Code, Header: w.Header(), Options: opts}
	out.SetBodyBytes(w.Body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("contract: %s %s → %d does not match openapi.yaml: %v", r.Method, r.URL.Path, w.Code, err)
	}
	checkHeadersDocumented(t, route, r, w)
	if w.Code == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), ProblemContentType) {
		// Every 400 says which field, parameter or header is wrong.
		var p Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || len(p.Errors) == 0 {
			t.Errorf("contract: %s %s → 400 %s without errors[]", r.Method, r.URL.Path, p.Code)
		}
		for _, f := range p.Errors {
			if f.Field == "" || f.Message == "" {
				t.Errorf("contract: %s %s → 400 with an empty field error %+v", r.Method, r.URL.Path, f)
			}
		}
	}
}

// Headers a client must act on are declared for the status that sends them.
var significantHeaders = []string{"Allow", "Location", "Retry-After", "Content-Range", "WWW-Authenticate", "Idempotent-Replayed", "ETag"}

func checkHeadersDocumented(t testing.TB, route *routers.Route, r *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	resp := route.Operation.Responses.Status(w.Code)
	if resp == nil || resp.Value == nil {
		return // reported by ValidateResponse
	}
	for _, h := range significantHeaders {
		if w.Header().Get(h) == "" {
			continue
		}
		if _, ok := resp.Value.Headers[h]; !ok {
			t.Errorf("contract: %s %s → %d sends %s, which openapi.yaml does not declare for that status", r.Method, route.Path, w.Code, h)
		}
	}
}

// checked is e.h with every exchange validated like testEnv.do does, for
// tests that need a real server (streams, timeouts). The response is
// passed through as it is written (flushes included) and recorded on the
// side.
func (e *testEnv) checked(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// What the API would have seen: let it answer that.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		} else {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rec := httptest.NewRecorder()
		tw := &teeWriter{ResponseWriter: w, rec: rec}
		e.h.ServeHTTP(tw, r)
		if !tw.wrote {
			rec.WriteHeader(http.StatusOK)
		}
		rec.Result() // snapshots the headers
		checkContract(t, r, body, rec)
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// teeWriter writes through to the client and records what it wrote.
type teeWriter struct {
	http.ResponseWriter
	rec   *httptest.ResponseRecorder
	wrote bool
}

func (w *teeWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		for k, v := range w.Header() {
			w.rec.Header()[k] = v
		}
		w.rec.WriteHeader(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.rec.Write(p)
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// exercised records which documented (operation, status) pairs the tests
// produced, for TestMain's coverage check.
var exercised = &statusLog{seen: map[string]bool{}}

type statusLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *statusLog) add(method, path string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[strings.ToLower(method)+" "+path+" "+strconv.Itoa(status)] = true
}

// notExercised are documented answers no test provokes, each with why.
var notExercised = map[string]string{}

// unexercised lists the documented (operation, status) pairs that no test
// produced and that notExercised does not explain.
func unexercised() ([]string, error) {
	doc, _, err := loadContract()
	if err != nil {
		return nil, err
	}
	exercised.mu.Lock()
	defer exercised.mu.Unlock()
	var out []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				k := strings.ToLower(method) + " " + path + " " + status
				if !exercised.seen[k] && notExercised[k] == "" {
					out = append(out, k)
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// TestMain runs the tests, then — when the whole package ran — checks that
// every status openapi.yaml documents for an operation was produced by some
// test and validated against the document: the route coverage test
// extended to statuses.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.fuzz").Value.String() == "" &&
		flag.Lookup("test.skip").Value.String() == "" {
		missing, err := unexercised()
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "status coverage:", err)
			code = 1
		case len(missing) > 0:
			fmt.Fprintf(os.Stderr, "status coverage: openapi.yaml documents %d answers no test produced (test them, or say why in notExercised):\n  %s\n",
				len(missing), strings.Join(missing, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

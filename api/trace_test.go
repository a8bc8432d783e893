package api

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"edgepipe/internal/tracing"
)

// A submission's well-formed traceparent is stored on its job (in
// canonical form); a malformed one is ignored: accepted, not stored.
func TestSubmitStoresTraceParent(t *testing.T) {
	t.Parallel()
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name, header, want string
	}{
		{"valid", valid, valid},
		{"none", "", ""},
		{"malformed", "00-not-a-trace-01", ""},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hdr := submitHeaders(tokAcme, "k-"+tt.name)
			if tt.header != "" {
				hdr[HeaderTraceParent] = tt.header
			}
			w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs", body: validBody, hdr: hdr})
			if w.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", w.Code, w.Body)
			}
			res := decode[JobResource](t, w)
			j, err := e.store.GetJob(context.Background(), ak(res.ID))
			if err != nil {
				t.Fatal(err)
			}
			if j.TraceParent != tt.want {
				t.Errorf("stored traceparent %q, want %q", j.TraceParent, tt.want)
			}
		})
	}
}

// With a TracerProvider the API makes a server span per request, named by
// method and route (not the raw path), in the caller's trace; the job
// keeps the submission's server span, which attempts link to.
func TestServerSpansNamedByRoute(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, func(c *Config) { c.TracerProvider = tp })
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	hdr := submitHeaders(tokAcme, "k-span")
	hdr[HeaderTraceParent] = parent
	res := decode[JobResource](t, e.do(t, req{method: http.MethodPost, path: "/v1/jobs", body: validBody, hdr: hdr}))
	if w := e.get(t, tokAcme, jobPath(res.ID)); w.Code != http.StatusOK {
		t.Fatalf("get: %d", w.Code)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if s := spans[0]; s.Name != "POST /v1/jobs" || s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("submission span %q parent %s/%s; want POST /v1/jobs under the caller's span", s.Name, s.Parent.TraceID(), s.Parent.SpanID())
	}
	if s := spans[1]; s.Name != "GET /v1/jobs/:id" {
		t.Errorf("read span %q, want GET /v1/jobs/:id", s.Name)
	}
	j, err := e.store.GetJob(context.Background(), ak(res.ID))
	if err != nil {
		t.Fatal(err)
	}
	if want := tracing.TraceParent(spans[0].SpanContext); j.TraceParent != want {
		t.Errorf("stored traceparent %q, want the submission span's %q", j.TraceParent, want)
	}
}

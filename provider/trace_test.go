package provider_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
	"edgepipe/provider"
)

// Both request paths (the HTTP adapter and the real providers' Caller)
// send the traceparent of the context's span, and none without one.
func TestRequestsCarryTraceParent(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := trace.ContextWithSpanContext(context.Background(), tracing.SpanContext(tp))
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"span", traced, tp},
		{"none", context.Background(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, got := recorder(t)
			h, err := provider.New(provider.Config{BaseURL: base})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.GenerateImage(tt.ctx, pipeline.CallMeta{UnitID: "j/0", IdempotencyKey: "ep-k"}, pipeline.ImageRequest{Prompt: "p", Width: 64, Height: 64}); err != nil {
				t.Fatal(err)
			}
			c := provider.NewCaller(provider.CallerConfig{Timeout: 5 * time.Second})
			defer c.Close()
			u, err := url.Parse(base + "v1/videos/vid_1")
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(tt.ctx, provider.Request{Op: "video_status", Read: true, Method: http.MethodGet, URL: u})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := got()
			if len(seen) != 2 {
				t.Fatalf("%d requests, want 2", len(seen))
			}
			for _, s := range seen {
				if v := s.header.Get("traceparent"); v != tt.want {
					t.Errorf("%s %s: traceparent %q, want %q", s.method, s.path, v, tt.want)
				}
			}
		})
	}
}

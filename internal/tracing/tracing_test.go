package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestParseTraceParent(t *testing.T) {
	t.Parallel()
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"valid", valid, valid, true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"empty", "", "", false},
		{"garbage", "not-a-traceparent", "", false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", false},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01", "", false},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseTraceParent(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseTraceParent(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestOrDefaultsToNoop(t *testing.T) {
	t.Parallel()
	if _, ok := Or(nil).(noop.TracerProvider); !ok {
		t.Errorf("Or(nil) = %T, want noop.TracerProvider", Or(nil))
	}
	tp := noop.NewTracerProvider()
	if Or(tp) != tp {
		t.Error("Or(tp) did not return tp")
	}
}

// TraceParent writes what the propagator writes.
func TestTraceParentMatchesPropagator(t *testing.T) {
	t.Parallel()
	for _, tp := range []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"} {
		sc := SpanContext(tp)
		c := propagation.MapCarrier{}
		Propagator.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), c)
		if got := TraceParent(sc); got != tp || got != c.Get("traceparent") {
			t.Errorf("TraceParent(%s) = %q, propagator %q", tp, got, c.Get("traceparent"))
		}
	}
	if got := TraceParent(trace.SpanContext{}); got != "" {
		t.Errorf("TraceParent(invalid) = %q, want empty", got)
	}
}

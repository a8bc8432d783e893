// Package tracing holds what every traced package of edgepipe shares: the
// default (noop) TracerProvider of a config that names none, and the
// validation of a submitted W3C traceparent. It reads no environment and
// sets no global: internal/app builds the real provider from the OTEL_*
// variables (internal/app/config.go) and injects it.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Or returns tp, or the noop TracerProvider when tp is nil: the default of
// every config struct's TracerProvider field, defined once here.
func Or(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// Propagator is the W3C Trace Context propagator (traceparent and
// tracestate) edgepipe accepts and sends.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// ParseTraceParent validates a W3C traceparent header value and returns it
// in canonical form with ok true; a malformed value (or a valid one with an
// all-zero trace or span id) returns "", false. W3C Trace Context says a
// malformed traceparent is ignored, not refused.
func ParseTraceParent(v string) (canonical string, ok bool) {
	sc := SpanContext(v)
	if !sc.IsValid() {
		return "", false
	}
	return TraceParent(sc), true
}

// TraceParent is sc as a W3C traceparent, version 00, as Propagator
// writes it ("" for an invalid sc).
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + (sc.TraceFlags() & trace.FlagsSampled).String()
}

// SpanContext is the remote span context a traceparent names; an empty or
// malformed value gives the zero (invalid) SpanContext.
func SpanContext(traceParent string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := Propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceParent})
	return trace.SpanContextFromContext(ctx)
}

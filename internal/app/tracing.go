package app

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracing is the process's TracerProvider (nil when tracing is off: every
// part then uses the noop provider, internal/tracing.Or) and how to flush
// and stop it.
type tracing struct {
	provider trace.TracerProvider
	shutdown func(context.Context) error
}

// openTracing builds the OTLP exporter and TracerProvider cfg asks for
// (TracingConfig, from the OTEL_* settings). The exporter reads its own
// OTEL_EXPORTER_OTLP_* settings (endpoint, headers, timeout, TLS); the
// resource takes OTEL_RESOURCE_ATTRIBUTES, and service.name is
// cfg.ServiceName.
func openTracing(ctx context.Context, cfg TracingConfig) (tracing, error) {
	off := tracing{shutdown: func(context.Context) error { return nil }}
	if cfg.Provider != nil {
		return tracing{provider: cfg.Provider, shutdown: off.shutdown}, nil
	}
	if !cfg.Enabled {
		return off, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch cfg.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return off, fmt.Errorf("tracing: otlp exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	if err != nil {
		return off, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tracing{provider: tp, shutdown: tp.Shutdown}, nil
}

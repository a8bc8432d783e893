package app

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing is off unless asked for, by OTEL_TRACES_EXPORTER=otlp or an OTLP
// endpoint; none and OTEL_SDK_DISABLED win; the protocol and service name
// follow the OTEL_* settings.
func TestTracingSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		env         map[string]string
		want        TracingConfig
		wantErrName string
	}{
		{"default off", nil, TracingConfig{Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, TracingConfig{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			TracingConfig{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"traces endpoint, grpc, name", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "render-farm"},
			TracingConfig{Enabled: true, Protocol: ProtocolGRPC, ServiceName: "render-farm"}, ""},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			TracingConfig{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"none wins over endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			TracingConfig{Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
			TracingConfig{Protocol: ProtocolHTTP, ServiceName: "edgepipe"}, ""},
		{"unsupported exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, TracingConfig{}, "OTEL_TRACES_EXPORTER"},
		{"unsupported protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, TracingConfig{}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"bad disabled", map[string]string{"OTEL_SDK_DISABLED": "maybe"}, TracingConfig{}, "OTEL_SDK_DISABLED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parse(func(k string) string { return tt.env[k] })
			if tt.wantErrName != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErrName+":") {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrName)
				}
				return
			}
			if err != nil || c.Tracing != tt.want {
				t.Fatalf("tracing %+v, %v; want %+v", c.Tracing, err, tt.want)
			}
		})
	}
}

// Off, tracing builds nothing (every part uses the noop provider); on, an
// SDK provider that Close-style shutdown flushes. No collector is needed:
// nothing is exported before the shutdown, which sends nothing.
func TestOpenTracing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	off, err := openTracing(ctx, TracingConfig{Protocol: ProtocolHTTP, ServiceName: "edgepipe"})
	if err != nil || off.provider != nil || off.shutdown(ctx) != nil {
		t.Fatalf("off: provider %v, %v", off.provider, err)
	}
	for _, p := range []string{ProtocolHTTP, ProtocolGRPC} {
		on, err := openTracing(ctx, TracingConfig{Enabled: true, Protocol: p, ServiceName: "edgepipe"})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, ok := on.provider.(*sdktrace.TracerProvider); !ok {
			t.Errorf("%s: provider %T, want the SDK's", p, on.provider)
		}
		if err := on.shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", p, err)
		}
	}
}

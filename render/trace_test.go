package render

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func spanAttr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Every ffmpeg process is a span naming the command and its purpose, with
// its exit code: 0 and no error for a clip made, non-zero and an error for
// one ffmpeg refused; a join is one too.
func TestProcessSpans(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := newTestRenderer(t, func(c *Config) { c.TracerProvider = tp })
	fx := getFixtures(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.wav")
	if err := os.WriteFile(garbage, []byte("not audio"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := filepath.Join(dir, "good.mov")
	if err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, "", good); err != nil {
		t.Fatal(err)
	}
	if err := r.SceneFromImage(ctx, fx.image, garbage, 400, "", filepath.Join(dir, "bad.mov")); err == nil {
		t.Fatal("a scene with garbage audio was made")
	}
	if _, err := r.Join(ctx, []string{good}, io.Discard); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		purpose string
		failed  bool
	}{{"scene", false}, {"scene", true}, {"join", false}}
	spans := exp.GetSpans()
	if len(spans) != len(tests) {
		t.Fatalf("%d spans, want %d", len(spans), len(tests))
	}
	for i, tt := range tests {
		s := spans[i]
		code := spanAttr(s, AttrExitCode).AsInt64()
		if s.Name != SpanProcess || spanAttr(s, AttrCommand).AsString() != "ffmpeg" || spanAttr(s, AttrPurpose).AsString() != tt.purpose {
			t.Errorf("span %d: %s command %q purpose %q; want %s ffmpeg %q", i, s.Name,
				spanAttr(s, AttrCommand).AsString(), spanAttr(s, AttrPurpose).AsString(), SpanProcess, tt.purpose)
		}
		if (code != 0) != tt.failed || (s.Status.Code == codes.Error) != tt.failed {
			t.Errorf("span %d (%s): exit code %d status %v; want failed=%v", i, tt.purpose, code, s.Status.Code, tt.failed)
		}
	}
}

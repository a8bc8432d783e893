package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// endedSpan runs mark on a fresh span of an in-memory tracer and returns
// the span as it was exported.
func endedSpan(t *testing.T, mark func(trace.Span)) sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	_, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t").Start(context.Background(), "s")
	mark(span)
	span.End() // a no-op when mark ended it
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	return ended[0]
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (string, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.String(), true
		}
	}
	return "", false
}

// An attempt's span says how it ended: its outcome, the outcome's error
// code only when there is one, and status Error for all but a success;
// an attempt interrupted before an outcome is an Error with no outcome.
func TestEndAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		o         Outcome
		err       error
		outcome   string // "" = no outcome attribute
		code      string // "" = no error code attribute
		errStatus bool
	}{
		{"succeeded", Outcome{Status: StatusSucceeded}, nil, "succeeded", "", false},
		{"failed", Outcome{Status: StatusFailed, ErrorCode: "invalid_input"}, nil, "failed", "invalid_input", true},
		{"retry without a code", Outcome{Status: StatusRetryWait}, nil, "retry_wait", "", true},
		{"interrupted", Outcome{}, errors.New("lease lost"), "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := endedSpan(t, func(sp trace.Span) { endAttempt(sp, tc.o, tc.err) })
			if got, ok := attrOf(s, AttrOutcome); got != tc.outcome || ok != (tc.outcome != "") {
				t.Errorf("outcome attribute %q (set %v), want %q", got, ok, tc.outcome)
			}
			if got, ok := attrOf(s, AttrErrorCode); got != tc.code || ok != (tc.code != "") {
				t.Errorf("error code attribute %q (set %v), want %q", got, ok, tc.code)
			}
			if (s.Status().Code == codes.Error) != tc.errStatus {
				t.Errorf("status %v, want Error: %v", s.Status(), tc.errStatus)
			}
		})
	}
}

// failSpan marks a span failed with the error's class code and safe
// message, never its cause; no error leaves the span as it was.
func TestFailSpan(t *testing.T) {
	t.Parallel()
	s := endedSpan(t, func(sp trace.Span) { failSpan(sp, nil) })
	if _, ok := attrOf(s, AttrErrorCode); ok || s.Status().Code != codes.Unset {
		t.Errorf("failSpan(nil) marked the span: %v %v", s.Attributes(), s.Status())
	}
	err := &ClassifiedError{Class: ClassTransient, Code: "render_failed", Message: "joining the scenes failed",
		Cause: errors.New("/secret/path/clip.mp4: broken pipe")}
	s = endedSpan(t, func(sp trace.Span) { failSpan(sp, err) })
	if got, _ := attrOf(s, AttrErrorCode); got != "render_failed" {
		t.Errorf("error code %q, want render_failed", got)
	}
	if st := s.Status(); st.Code != codes.Error || st.Description != "joining the scenes failed" {
		t.Errorf("status %v, want Error with the safe message only", st)
	}
}

// readingStore reads a put's body to its end, then answers err.
type readingStore struct {
	ObjectStore
	err error
}

func (s readingStore) Put(_ context.Context, key string, r io.Reader, _ PutOptions) (ObjectInfo, error) {
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: key, Size: n}, s.err
}

// An upload's span names the key, the kind and the bytes sent, and is an
// Error exactly when the put failed.
func TestObjectWritePutSpan(t *testing.T) {
	t.Parallel()
	for _, putErr := range []error{nil, errors.New("connection reset by peer")} {
		t.Run(fmt.Sprint(putErr), func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			w := &objectWrite{
				Objects: readingStore{err: putErr},
				Key:     "units/j/1/image.png",
				Kind:    "image",
				Tracer:  sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t"),
			}
			hr := &hashingReader{r: strings.NewReader("twelve bytes"), h: sha256.New()}
			if _, err := w.put(t.Context(), hr); !errors.Is(err, putErr) {
				t.Fatalf("put = %v, want %v", err, putErr)
			}
			ended := rec.Ended()
			if len(ended) != 1 || ended[0].Name() != SpanUpload {
				t.Fatalf("ended spans %v, want one %s", ended, SpanUpload)
			}
			s := ended[0]
			for k, want := range map[attribute.Key]string{AttrObjectKey: w.Key, AttrObjectKind: "image", AttrObjectBytes: "12"} {
				if got, _ := attrOf(s, k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if (s.Status().Code == codes.Error) != (putErr != nil) {
				t.Errorf("status %v after put error %v", s.Status(), putErr)
			}
		})
	}
}

package pipeline_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

// headerRecorder is a provider transport that keeps the traceparent of
// every request it sends.
type headerRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Header.Get("traceparent"))
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *headerRecorder) traceParents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// spanTree indexes exported spans by span id and by parent.
type spanTree struct {
	spans    tracetest.SpanStubs
	children map[trace.SpanID][]tracetest.SpanStub
}

func newSpanTree(spans tracetest.SpanStubs) spanTree {
	t := spanTree{spans: spans, children: map[trace.SpanID][]tracetest.SpanStub{}}
	for _, s := range spans {
		t.children[s.Parent.SpanID()] = append(t.children[s.Parent.SpanID()], s)
	}
	return t
}

func (t spanTree) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range t.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (t spanTree) childrenNamed(parent tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range t.children[parent.SpanContext.SpanID()] {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// One job fails once at the provider and succeeds on retry: each attempt
// is a new root linked to the submission's span context, attempt 1 is an
// error, and stages, units and provider calls hang below their attempt
// with their attributes; each provider request carried the traceparent of
// its call span.
func TestAttemptSpansLinkToSubmission(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rec := &headerRecorder{}
	h := newHarnessWith(t, func(pc *provider.Config) { pc.Client = &http.Client{Transport: rec} },
		withFaults("image:before_commit=1", 1), withConfig(func(ec *pipeline.EngineConfig) { ec.TracerProvider = tp }))

	const submitted = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sb, err := board(img("a red fox", "hello", 1000)).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.store.CreateJob(context.Background(), pipeline.NewJob{ID: "v1-traced", Tenant: "acme",
		Operation: pipeline.OperationRenderVideo, IdempotencyKey: "k-traced", RequestFingerprint: pipeline.Fingerprint(pipeline.OperationRenderVideo, sb, ""),
		Input: sb.Canonical(), Version: "v1", Queue: "render-v1", TraceParent: submitted}); err != nil {
		t.Fatal(err)
	}
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
		t.Fatalf("attempt 1: %s, %v; want retry_wait", o.Status, err)
	}
	if err := h.fake.SetFaults(fake.Faults{}); err != nil {
		t.Fatal(err)
	}
	h.drain(3)
	if j := h.job("v1-traced"); j.Status != pipeline.StatusSucceeded || j.Attempts != 2 {
		t.Fatalf("job %s after %d attempts, want succeeded after 2", j.Status, j.Attempts)
	}

	tree := newSpanTree(exp.GetSpans())
	attempts := tree.named(pipeline.SpanAttempt)
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	link := tracing.SpanContext(submitted)
	for i, a := range attempts {
		n := i + 1
		checkAttemptSpan(t, a, n, link)
		checkAttemptChildren(t, tree, a, n)
	}
	checkRequestTraceParents(t, tree, rec.traceParents())
}

func checkAttemptSpan(t *testing.T, a tracetest.SpanStub, n int, link trace.SpanContext) {
	t.Helper()
	if a.Parent.IsValid() || a.SpanKind != trace.SpanKindConsumer {
		t.Errorf("attempt %d: parent %v kind %v; want a new root of kind consumer", n, a.Parent.SpanID(), a.SpanKind)
	}
	if a.SpanContext.TraceID() == link.TraceID() {
		t.Errorf("attempt %d runs in the submission's trace; want a trace of its own", n)
	}
	if len(a.Links) != 1 || a.Links[0].SpanContext.TraceID() != link.TraceID() || a.Links[0].SpanContext.SpanID() != link.SpanID() {
		t.Errorf("attempt %d links %+v; want one link to the submission %s/%s", n, a.Links, link.TraceID(), link.SpanID())
	}
	for k, want := range map[attribute.Key]attribute.Value{
		pipeline.AttrJobID: attribute.StringValue("v1-traced"), pipeline.AttrTenant: attribute.StringValue("acme"),
		pipeline.AttrWorkflowVersion: attribute.StringValue("v1"), pipeline.AttrAttempt: attribute.IntValue(n),
	} {
		if got := attr(a, k); got != want {
			t.Errorf("attempt %d: %s = %v, want %v", n, k, got.String(), want.String())
		}
	}
	wantStatus, wantOutcome := codes.Error, string(pipeline.StatusRetryWait)
	if n == 2 {
		wantStatus, wantOutcome = codes.Unset, string(pipeline.StatusSucceeded)
	}
	if a.Status.Code != wantStatus || attr(a, pipeline.AttrOutcome).AsString() != wantOutcome {
		t.Errorf("attempt %d: status %v outcome %q; want %v %q", n, a.Status.Code, attr(a, pipeline.AttrOutcome).AsString(), wantStatus, wantOutcome)
	}
}

// checkAttemptChildren follows attempt n's tree: its stages, the execute
// stage's unit, the unit's provider calls and uploads.
func checkAttemptChildren(t *testing.T, tree spanTree, a tracetest.SpanStub, n int) {
	t.Helper()
	wantStages := []string{pipeline.StagePrepare, pipeline.StageExecute}
	if n == 2 {
		wantStages = append(wantStages, pipeline.StageApply, pipeline.StageFinalize)
	}
	var stages []string
	for _, s := range tree.children[a.SpanContext.SpanID()] {
		stages = append(stages, attr(s, pipeline.AttrStage).AsString())
	}
	if slices.Sort(stages); !slices.Equal(stages, slices.Sorted(slices.Values(wantStages))) {
		t.Fatalf("attempt %d: stage children %v, want %v", n, stages, wantStages)
	}
	exec := tree.childrenNamed(a, pipeline.SpanStage+"."+pipeline.StageExecute)[0]
	units := tree.childrenNamed(exec, pipeline.SpanUnit)
	if len(units) != 1 || attr(units[0], pipeline.AttrScene).AsInt64() != 0 || attr(units[0], pipeline.AttrUnitKind).AsString() != "image" {
		t.Fatalf("attempt %d: %d unit spans under execute, want one of scene 0, kind image", n, len(units))
	}
	calls := tree.childrenNamed(units[0], pipeline.SpanProvider)
	wantCalls := map[string]string{pipeline.OpImage: pipeline.CallAmbiguous}
	if n == 2 {
		wantCalls = map[string]string{pipeline.OpImage: pipeline.CallSucceeded, pipeline.OpSpeech: pipeline.CallSucceeded}
	}
	if len(calls) != len(wantCalls) {
		t.Fatalf("attempt %d: %d provider calls under the unit, want %d", n, len(calls), len(wantCalls))
	}
	for _, c := range calls {
		op := attr(c, pipeline.AttrOp).AsString()
		status := attr(c, pipeline.AttrCallStatus).AsString()
		if status != wantCalls[op] || attr(c, pipeline.AttrProvider).AsString() == "" || attr(c, pipeline.AttrContract).AsString() == "" {
			t.Errorf("attempt %d: %s call: provider %q contract %q status %q; want status %q", n, op,
				attr(c, pipeline.AttrProvider).AsString(), attr(c, pipeline.AttrContract).AsString(), status, wantCalls[op])
		}
		ambiguous := status == pipeline.CallAmbiguous
		if attr(c, pipeline.AttrAmbiguous).AsBool() != ambiguous || (c.Status.Code == codes.Error) != (status != pipeline.CallSucceeded) {
			t.Errorf("attempt %d: %s call: ambiguous %v span status %v", n, op, attr(c, pipeline.AttrAmbiguous).AsBool(), c.Status.Code)
		}
	}
	if n == 2 {
		uploads := tree.childrenNamed(units[0], pipeline.SpanUpload)
		if len(uploads) != 2 || attr(uploads[0], pipeline.AttrObjectKey).AsString() == "" || attr(uploads[0], pipeline.AttrObjectBytes).AsInt64() <= 0 {
			t.Errorf("attempt 2: %d uploads under the unit; want 2 with key and bytes", len(uploads))
		}
	}
}

// checkRequestTraceParents: every provider request (not the reads of a
// video job: there are none here) carried the traceparent of one provider
// call span, in its attempt's trace.
func checkRequestTraceParents(t *testing.T, tree spanTree, sent []string) {
	t.Helper()
	attempts := map[trace.TraceID]bool{}
	for _, a := range tree.named(pipeline.SpanAttempt) {
		attempts[a.SpanContext.TraceID()] = true
	}
	calls := map[trace.SpanID]tracetest.SpanStub{}
	for _, c := range tree.named(pipeline.SpanProvider) {
		calls[c.SpanContext.SpanID()] = c
	}
	if len(sent) != len(calls) {
		t.Fatalf("%d provider requests, %d provider call spans", len(sent), len(calls))
	}
	for _, tp := range sent {
		sc := tracing.SpanContext(tp)
		c, ok := calls[sc.SpanID()]
		if !ok || c.SpanContext.TraceID() != sc.TraceID() || !attempts[sc.TraceID()] {
			t.Errorf("request traceparent %q names no provider call span", tp)
		}
	}
}

package pipeline

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
)

// TracerName is the instrumentation scope of the pipeline's spans.
const TracerName = "edgepipe/pipeline"

// Span names and attribute keys of the pipeline (README "Tracing").
const (
	SpanAttempt  = "edgepipe.attempt"
	SpanStage    = "edgepipe.stage"
	SpanUnit     = "edgepipe.unit"
	SpanProvider = "edgepipe.provider_call"
	SpanUpload   = "edgepipe.upload"

	AttrJobID           = attribute.Key("edgepipe.job.id")
	AttrTenant          = attribute.Key("edgepipe.tenant")
	AttrWorkflowVersion = attribute.Key("edgepipe.workflow.version")
	AttrAttempt         = attribute.Key("edgepipe.attempt")
	AttrOutcome         = attribute.Key("edgepipe.outcome.status")
	AttrErrorCode       = attribute.Key("edgepipe.error.code")
	AttrStage           = attribute.Key("edgepipe.stage")
	AttrScene           = attribute.Key("edgepipe.unit.scene")
	AttrUnitKind        = attribute.Key("edgepipe.unit.kind")
	AttrProvider        = attribute.Key("edgepipe.provider")
	AttrOp              = attribute.Key("edgepipe.provider.op")
	AttrContract        = attribute.Key("edgepipe.provider.contract")
	AttrCallStatus      = attribute.Key("edgepipe.provider.call_status")
	AttrAmbiguous       = attribute.Key("edgepipe.provider.ambiguous")
	AttrObjectKey       = attribute.Key("edgepipe.object.key")
	AttrObjectKind      = attribute.Key("edgepipe.object.kind")
	AttrObjectBytes     = attribute.Key("edgepipe.object.bytes")
)

// tracerOr is t, or the noop tracer for a dependency struct built without
// one (tests that call a stage directly).
func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return tracing.Or(nil).Tracer(TracerName)
	}
	return t
}

// startAttempt starts an attempt's span: a new root (an attempt may run
// hours after the submission, and a retry is not part of the request that
// submitted the job) linked to the submission's span context, as River's
// otelriver does. A job submitted without a valid traceparent has no link.
func startAttempt(ctx context.Context, t trace.Tracer, c Claimed) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrJobID.String(c.Job.ID), AttrTenant.String(c.Job.Tenant),
			AttrWorkflowVersion.String(c.Job.Version), AttrAttempt.Int(c.Lease.Attempt)),
	}
	if sc := tracing.SpanContext(c.Job.TraceParent); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return tracerOr(t).Start(ctx, SpanAttempt, opts...)
}

// endAttempt records how the attempt ended on its span and ends it: the
// outcome's status and error code, and status Error for anything but a
// success (an undecided attempt, err != nil, included).
func endAttempt(span trace.Span, o Outcome, err error) {
	defer span.End()
	if err != nil {
		span.SetStatus(codes.Error, "attempt interrupted")
		return
	}
	span.SetAttributes(AttrOutcome.String(string(o.Status)))
	if o.ErrorCode != "" {
		span.SetAttributes(AttrErrorCode.String(o.ErrorCode))
	}
	if o.Status != StatusSucceeded {
		span.SetStatus(codes.Error, o.ErrorCode)
	}
}

// failSpan marks span failed with err's safe parts only (its class code
// and safe message, never a cause that may quote a provider or a path).
func failSpan(span trace.Span, err error) {
	if err == nil {
		return
	}
	ce := Classify(err)
	span.SetAttributes(AttrErrorCode.String(ce.Code))
	span.SetStatus(codes.Error, ce.Message)
}

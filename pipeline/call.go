package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The billing protocol. Every request that may be billed — whatever the
// operation, whatever the provider — goes through beginCall and ends in
// paidCall.failed or in keepPaid (a synchronous answer) / a recorded
// external id (an asynchronous submission), so the rule "per (job, scene,
// op) at most one billed call unless the contract is idempotent" lives in
// one place (docs/design.md §6).

// paidCall is one provider request between its intent row and its outcome.
type paidCall struct {
	u        *unitRun
	id       int64 // the intent row
	op       string
	provider string // ProviderName, for the latency metric
	contract Contract
	meta     CallMeta
	// ctx is what the request and the recording of its outcome run under
	// (callContext): a paid request is not torn down by a sibling.
	ctx context.Context
	// rate is the rate limiter's slot the call holds until done.
	rate rateSlot
	// span is the call's span (SpanProvider), the parent of the request
	// (ctx carries it, so an HTTP adapter sends its traceparent); end
	// ends it, after recorded set the call's status on it.
	span trace.Span
}

// beginCall is the pre-send protocol, in this order: the contract against
// the audit trail (mayCall), the before_provider_call failpoint, the wait
// for the shared rate limit's token (waitRate: not an attempt, no row), the
// cancellation check, the intent row, the after_provider_intent failpoint,
// and the last look before sending (stopBeforeSend). The caller ends a
// returned call with done.
func (u *unitRun) beginCall(ctx context.Context, op string, contract Contract) (_ *paidCall, err error) {
	if err := u.mayCall(ctx, op, contract); err != nil {
		return nil, err
	}
	meta := CallMeta{UnitID: u.unitID()}
	// The key goes with every request of an operation declared
	// idempotent_verified, proven or not: its adapter requires one, and a
	// key costs nothing. Only a proven contract lets a retry rely on it.
	if contract == ContractIdempotentVerified || u.d.Providers.Contract(op) == ContractIdempotentVerified {
		meta.IdempotencyKey = u.idempotencyKey(op)
	}
	if err := callFP(ctx, u.d.Failpoint, "before_provider_call"); err != nil {
		return nil, err
	}
	p := u.d.Providers
	provider := ProviderName(p, op)
	slot, err := u.waitRate(ctx, provider, op)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			u.releaseRate(ctx, &slot)
		}
	}()
	if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
		return nil, err
	}
	id, err := u.d.Store.RecordIntent(ctx, u.a.lease, ProviderCall{Scene: u.unit.Scene, Op: op, Provider: provider,
		Model: p.Model(op), Contract: contract, IdempotencyKey: meta.IdempotencyKey})
	if err != nil {
		return nil, storeErr(err)
	}
	if err := callFP(ctx, u.d.Failpoint, "after_provider_intent"); err != nil {
		return nil, err
	}
	if err := u.stopBeforeSend(ctx, id, op); err != nil {
		return nil, err
	}
	_, span := tracerOr(u.d.Tracer).Start(ctx, SpanProvider, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrProvider.String(provider), AttrOp.String(op), AttrContract.String(string(contract))))
	return &paidCall{u: u, id: id, op: op, provider: provider, contract: contract, meta: meta,
		ctx: trace.ContextWithSpan(u.callContext(ctx, contract), span), rate: slot, span: span}, nil
}

// recorded puts the call's recorded status on its span: an error unless
// it succeeded, and whether it is ambiguous (may have been billed without
// a result).
func (c *paidCall) recorded(status string) {
	c.span.SetAttributes(AttrCallStatus.String(status), AttrAmbiguous.Bool(status == CallAmbiguous))
	if status != CallSucceeded {
		c.span.SetStatus(codes.Error, status)
	}
}

// end ends the call's span (the caller defers it next to done).
func (c *paidCall) end() { c.span.End() }

// done gives back the call's rate-limit slot (once; later calls do
// nothing).
func (c *paidCall) done() { c.u.releaseRate(c.ctx, &c.rate) }

// send runs the request under the call's context. A panic inside the
// adapter is recovered into an unknown outcome: the request may have been
// sent and billed, so the contract decides (a sync call goes to review).
func (c *paidCall) send(fn func(ctx context.Context) error) (err error) {
	start := c.u.d.Clock.Now()
	defer func() { c.u.d.Metrics.ProviderLatency(c.provider, c.op, c.u.d.Clock.Now().Sub(start)) }()
	defer func() {
		if r := recover(); r != nil {
			c.u.a.log.Error("provider adapter panicked", "op", c.op, "call", c.id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = &CallError{Op: c.op, Outcome: OutcomeUnknown, Code: "provider_adapter_panic", Cause: fmt.Errorf("panic: %v", r)}
		}
	}()
	return fn(c.ctx)
}

// failed records the call's failure and classifies it (callFailed); a 429
// also pauses the call's shared bucket (pauseRate).
func (c *paidCall) failed(err error) error {
	c.u.pauseRate(c.ctx, c.rate, c.op, err)
	c.done()
	status, err := c.u.callFailed(c.ctx, c.id, c.op, c.contract, err)
	c.recorded(status)
	return err
}

// contract is the contract op runs under now: the provider's declared one,
// except that idempotent_verified needs a fresh proof (EffectiveContract).
// It is looked up before every call, so a proof recorded or expired while
// the worker runs counts from the next call on.
func (u *unitRun) contract(ctx context.Context, op string) (Contract, error) {
	p := u.d.Providers
	declared := p.Contract(op)
	switch {
	case declared != ContractIdempotentVerified:
		return declared, nil
	case u.d.Proofs == nil:
		return ProofFallback, nil // no proofs to read: fail closed
	}
	latest, err := u.d.Proofs.LatestProof(ctx, &LatestProofParams{Provider: ProviderName(p, op), Op: op, Model: p.Model(op),
		Endpoint: ProviderEndpoint(p, op)})
	found := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", storeErr(err)
	}
	c, _ := EffectiveContract(declared, latest, found, u.d.Clock.Now(), cmp.Or(u.d.ProofMaxAge, DefaultProofMaxAge))
	return c, nil
}

// idempotencyKey is stable for a (job, scene, operation): every retry of the
// unit sends the same key, which is what lets an idempotent-verified provider
// deduplicate it.
func (u *unitRun) idempotencyKey(op string) string {
	return "ep-" + hashParts("idem", u.a.job.ID, strconv.Itoa(u.unit.Scene), op)[:40]
}

func (u *unitRun) unitID() string { return u.a.job.ID + "/" + strconv.Itoa(u.unit.Scene) }

// mayCall applies the contract to the audit trail: if an earlier call for
// this (job, scene, op) may have been billed and the contract does not let
// us repeat it safely, stop and ask a human.
func (u *unitRun) mayCall(ctx context.Context, op string, contract Contract) error {
	prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, op)
	if err != nil {
		return storeErr(err)
	}
	for _, c := range prior {
		if c.Status == CallSucceeded && !u.a.job.InfraSince.IsZero() && contract != ContractIdempotentVerified {
			// Answered while the object store was down (the job waits for
			// storage): the answer sits in the spool of the worker that
			// received it, which stages it once the store is back
			// (FlushSpool). Wait for that on the infrastructure budget
			// rather than ask a human to pay again.
			return infraErr("answer_not_staged_yet", fmt.Sprintf("scene %d's paid %s is kept by another worker until the object store takes it; waiting for it", u.unit.Scene+1, op), nil)
		}
		if c.MayHaveBilled() && contract != ContractIdempotentVerified {
			return &ClassifiedError{Class: ClassAmbiguous, Code: "provider_outcome_unknown",
				Message: fmt.Sprintf("an earlier attempt may already have paid for scene %d's %s and its result was not stored; an operator must decide whether to pay again", u.unit.Scene+1, op)}
		}
	}
	return nil
}

// callContext is the context a provider request runs under once its intent
// is recorded. A sibling's failure stops this unit from starting anything
// new, but a request that cannot be repeated safely is not torn down in
// flight: aborting it cannot undo the charge, it only throws the paid result
// away and leaves the call ambiguous, which parks the job for a human. Such a
// request runs to its own end (the adapter's timeout) under the attempt's
// context, which shutdown past its deadline and a lost lease still cancel;
// its answer is staged and recorded, and the next attempt stores it instead
// of paying again. A request the provider deduplicates is simply abandoned.
func (u *unitRun) callContext(ctx context.Context, contract Contract) context.Context {
	if contract == ContractIdempotentVerified || u.attemptCtx == nil {
		return ctx
	}
	return u.attemptCtx
}

// stopBeforeSend is the last look before a request leaves: if the stage
// failed (or the job was stopped) while the intent was being written, the
// request is not sent and the intent is closed as not_sent, so no later
// attempt mistakes it for a call that may have been billed.
func (u *unitRun) stopBeforeSend(ctx context.Context, id int64, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	u.d.Metrics.ProviderCall(op, CallNotSent)
	// A failure to close the intent rides along (errors.Join drops a nil).
	ferr := u.d.Store.FinishCall(context.WithoutCancel(ctx), &FinishCallParams{ID: id, Status: CallNotSent, HTTPStatus: 0, ErrorCode: "interrupted_before_send", ExternalID: ""})
	return errors.Join(err, storeErr(ferr))
}

// callFailed records a failed call in the audit trail and classifies it by
// the operation's contract (docs/design.md §6), and returns the status it
// recorded.
func (u *unitRun) callFailed(ctx context.Context, id int64, op string, contract Contract, err error) (string, error) {
	status, httpStatus, code := CallAmbiguous, 0, "provider_error"
	var ce *CallError
	switch {
	case ctx.Err() != nil:
		// Our side gave up (a sibling failed, the job was canceled, the
		// worker is stopping) while the request may have been in flight: it
		// may have been billed. The error chain may even carry another
		// call's CallError (errgroup cancels with the first error as the
		// cause), so it must not be read as this call's outcome.
		code = "interrupted"
	case errors.As(err, &ce) && ce.Op == op:
		httpStatus, code = ce.HTTPStatus, ce.Code
		switch ce.Outcome {
		case OutcomeNotSent:
			status = CallNotSent
		case OutcomeRateLimited, OutcomeRejected:
			status = CallFailed
		}
	}
	u.d.Metrics.ProviderCall(op, status)
	// The call's class decides the outcome; a failure to record it rides
	// along (errors.Join drops a nil).
	ferr := u.d.Store.FinishCall(context.WithoutCancel(ctx), &FinishCallParams{ID: id, Status: status, HTTPStatus: httpStatus, ErrorCode: code, ExternalID: ""})
	return status, errors.Join(classifyCall(ctx, op, contract, err), storeErr(ferr))
}

// classifyCall is the §6 table: what a failed call means for the job.
func classifyCall(ctx context.Context, op string, contract Contract, err error) error {
	if ctx.Err() != nil {
		return ctx.Err() // canceled or shutting down: not this provider's doing
	}
	var ce *CallError
	if !errors.As(err, &ce) || ce.Op != op {
		return &ClassifiedError{Class: ClassAmbiguous, Code: "provider_error", Message: "the " + op + " provider failed in an unexpected way", Cause: err}
	}
	switch ce.Outcome {
	case OutcomeNotSent:
		return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider could not be reached; nothing was sent", Cause: err}
	case OutcomeRateLimited:
		return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider asked us to slow down", RetryAfter: ce.RetryAfter, Cause: err}
	case OutcomeRejected:
		return &ClassifiedError{Class: ClassPermanent, Code: ce.Code, Message: "the " + op + " provider refused the request", Cause: err}
	case OutcomeUnknown:
		if contract == ContractIdempotentVerified {
			return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider did not answer; it deduplicates, so the call is repeated with the same key", Cause: err}
		}
		if ce.Code == "local_disk_error" {
			return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider's answer arrived (and was billed) but this worker could not keep it on disk; an operator must decide whether to pay again", Cause: err}
		}
		return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider may have processed the request but did not answer; retrying could pay twice, so an operator must decide", Cause: err}
	default:
		return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider reported a failure; an operator must decide", Cause: err}
	}
}

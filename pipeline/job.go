package pipeline

import (
	"encoding/json"
	"fmt"
	"time"
)

// Job is the persisted record that decides what happens (docs/design.md §1.2): a queue
// message only wakes a worker, which then acts on this.
type Job struct {
	// ID is the internal job key (JobKey): what every other record and
	// every operator tool refers to. Tenants never see it.
	ID string
	// InstanceID is the caller-visible id, unique per tenant: what the
	// job's owner addresses it by, and what routing reads the version from.
	InstanceID         string
	Tenant             string
	Operation          string
	IdempotencyKey     string
	RequestFingerprint string
	Input              json.RawMessage // the request as accepted
	FrozenInput        json.RawMessage // set once by prepare; nil before
	Version            string          // from the id prefix; never changes
	Queue              string
	Status             Status
	StatusChangedAt    time.Time
	CreatedAt          time.Time
	UpdatedAt          time.Time
	Attempts           int
	NextRunAt          time.Time // zero unless retry_wait
	AttemptID          string
	LeaseOwner         string
	LeaseExpiresAt     time.Time
	Stage              string
	UnitsTotal         int
	UnitsDone          int
	LastErrorClass     ErrorClass
	LastErrorCode      string
	LastErrorMessage   string // safe text only
	RequiresAction     bool
	CancelRequestedAt  time.Time
	ResultKey          string
	WebhookURL         string
	// InfraFailures counts attempts that ended on a failure of edgepipe's own
	// infrastructure (object store, database, local disk); they do not use
	// up the retry policy's attempts (docs/design.md §6).
	InfraFailures int
	// InfraSince is when the current run of infrastructure failures began
	// (zero when the last attempt ended otherwise): the infrastructure
	// retry window is measured from it. While it is set and the job waits
	// in retry_wait, the job is "waiting for storage".
	InfraSince time.Time
	// Decision is the last operator decision taken on the job while it was
	// in needs_review (zero Kind when there was none).
	Decision JobDecision
	// TraceParent is the W3C traceparent the job was submitted under
	// (empty when none, or a malformed one, came with it): every attempt's
	// span links to it.
	TraceParent string
}

// JobDecision is an operator's decision on a job: what, who, why, when.
type JobDecision struct {
	Kind     ReviewDecision
	Operator string
	Reason   string
	At       time.Time
}

// WaitingForInfra reports whether the job is backing off because edgepipe's
// own infrastructure failed, not because of anything the job did.
func (j Job) WaitingForInfra() bool {
	return j.Status == StatusRetryWait && !j.InfraSince.IsZero()
}

// Lease is an attempt's hold on a job. Every write the attempt makes carries
// it, and the store applies the write only while the job's current attempt id
// is this one and the lease has not expired.
type Lease struct {
	JobID     string
	AttemptID string
	Owner     string
	Attempt   int // 1-based attempt number
	ExpiresAt time.Time
}

// Outcome is how an attempt ends: the next status and what to record with it.
type Outcome struct {
	Status         Status
	NextRunAt      time.Time // retry_wait
	ErrorClass     ErrorClass
	ErrorCode      string
	ErrorMessage   string // safe text only
	RequiresAction bool
	Reason         string // dead-letter reason
	ResultKey      string // succeeded
	// Infra marks an attempt that ended on an infrastructure failure: the
	// store counts it in Job.InfraFailures and starts Job.InfraSince.
	Infra bool
}

// OutcomeFor turns a retry decision and the error that caused it into an
// Outcome carrying only the error's safe parts.
func OutcomeFor(d Decision, ce *ClassifiedError) Outcome {
	o := Outcome{Status: d.Status, NextRunAt: d.NextRunAt, RequiresAction: d.RequiresAction, Reason: d.Reason}
	if ce != nil {
		o.ErrorClass, o.ErrorCode, o.ErrorMessage = ce.Class, ce.Code, ce.Message
		o.Infra = ce.Infra && d.Status == StatusRetryWait
	}
	return o
}

// EventDetail adds to detail (a new map when nil) what a status event
// records of o: the error code, the dead-letter reason, that the job waits
// for infrastructure, and when it runs next. Every job store writes the
// status event of a settle with it, so the timelines read the same.
func (o Outcome) EventDetail(detail map[string]any) map[string]any {
	if detail == nil {
		detail = map[string]any{}
	}
	if o.ErrorCode != "" {
		detail["error_code"] = o.ErrorCode
	}
	if o.Reason != "" {
		detail["reason"] = o.Reason
	}
	if o.Infra {
		detail["waiting_for"] = "infrastructure"
	}
	if !o.NextRunAt.IsZero() {
		detail["next_run_at"] = o.NextRunAt.UTC()
	}
	return detail
}

// SettleRefused is the error of a settle whose conditional write matched
// no row: the job is no longer in status from or, for an attempt
// (attemptID set), the attempt lost its lease (a *FenceError).
func SettleRefused(jobID string, from Status, attemptID string) error {
	if attemptID != "" {
		return &FenceError{JobID: jobID, AttemptID: attemptID, Op: "finish"}
	}
	return fmt.Errorf("%w: job %s is no longer %s", ErrInvalidTransition, jobID, from)
}

// Event is one row of a job's append-only history.
type Event struct {
	ID         int64
	JobID      string
	At         time.Time
	Kind       string
	FromStatus Status
	ToStatus   Status
	AttemptID  string
	Detail     json.RawMessage
}

// AuditEvent is an event together with its job's instance id, for checks
// that compare a job's history with the version its id routes to.
type AuditEvent struct {
	Event
	InstanceID string
}

// Event kinds.
const (
	EventCreated         = "created"
	EventStatus          = "status"
	EventCancelRequested = "cancel_requested"
	EventRedriven        = "redriven"
	EventDecision        = "decision"
	// EventDeadLetterDiscarded records an operator discarding a job's dead
	// letter; the job stays dead_lettered.
	EventDeadLetterDiscarded = "dead_letter_discarded"
	EventStageStarted        = "stage_started"
	EventStageFinished       = "stage_finished"
	EventUnitGenerated       = "unit_generated"
	EventUnitReused          = "unit_reused"
	EventUnitSubmitted       = "unit_submitted"
	// EventCallWaived records, per call, that an operator's retry accepted
	// paying for it again (the audit of that decision).
	EventCallWaived = "call_waived"
	// EventAttemptPanicked records a panic recovered inside an attempt.
	EventAttemptPanicked = "attempt_panicked"
)

// DeadLetter is a job parked for an operator.
type DeadLetter struct {
	ID              int64
	JobID           string
	Queue           string
	Reason          string
	Detail          string
	DeadLetteredAt  time.Time
	RedrivenAt      time.Time
	RedrivenToQueue string
	// DiscardedAt is when an operator discarded it (zero when not), by
	// DiscardedBy, because of DiscardReason. A dead letter is settled by a
	// redrive or a discard, never both.
	DiscardedAt   time.Time
	DiscardedBy   string
	DiscardReason string
	// Tenant, InstanceID and Version are the job's, for filters and for
	// routing a redrive (the version is the instance id's prefix).
	Tenant     string
	InstanceID string
	Version    string
}

// Settled reports whether the dead letter was redriven or discarded.
func (d DeadLetter) Settled() bool { return !d.RedrivenAt.IsZero() || !d.DiscardedAt.IsZero() }

// CheckOpen refuses to settle a dead letter twice: nil while it is open, an
// ErrInvalidTransition saying how it was settled otherwise.
func (d DeadLetter) CheckOpen() error {
	if how := d.SettledAs(); how != "" {
		return fmt.Errorf("%w: dead letter %d was already %s", ErrInvalidTransition, d.ID, how)
	}
	return nil
}

// SettledAs says how the dead letter was settled: "redriven", "discarded",
// or "" while it is open.
func (d DeadLetter) SettledAs() string {
	switch {
	case !d.RedrivenAt.IsZero():
		return "redriven"
	case !d.DiscardedAt.IsZero():
		return "discarded"
	}
	return ""
}

// CheckDiscardReason validates an operator's reason for discarding a dead
// letter: required, at most MaxOperatorReason bytes.
func CheckDiscardReason(reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: a discard needs a reason", ErrInvalidInput)
	}
	if len(reason) > MaxOperatorReason {
		return fmt.Errorf("%w: reason is longer than %d bytes", ErrInvalidInput, MaxOperatorReason)
	}
	return nil
}

// DeadLetterFilter selects open dead letters for bulk redrive and discard.
// Empty fields match everything; OlderThan matches dead letters recorded
// at or before that time (so "older than 0s" selects every one).
type DeadLetterFilter struct {
	Reason    string
	Version   string
	Tenant    string
	OlderThan time.Time
}

// Empty reports whether the filter selects every open dead letter.
func (f DeadLetterFilter) Empty() bool {
	return f.Reason == "" && f.Version == "" && f.Tenant == "" && f.OlderThan.IsZero()
}

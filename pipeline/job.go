package pipeline

import (
	"encoding/json"
	"time"
)

// Job is the persisted record that decides what happens (DESIGN §1.2): a queue
// message only wakes a worker, which then acts on this.
type Job struct {
	ID                 string
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
}

// OutcomeFor turns a retry decision and the error that caused it into an
// Outcome carrying only the error's safe parts.
func OutcomeFor(d Decision, ce *ClassifiedError) Outcome {
	o := Outcome{Status: d.Status, NextRunAt: d.NextRunAt, RequiresAction: d.RequiresAction, Reason: d.Reason}
	if ce != nil {
		o.ErrorClass, o.ErrorCode, o.ErrorMessage = ce.Class, ce.Code, ce.Message
	}
	return o
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

// Event kinds.
const (
	EventCreated         = "created"
	EventStatus          = "status"
	EventCancelRequested = "cancel_requested"
	EventRedriven        = "redriven"
	EventDecision        = "decision"
	EventStageStarted    = "stage_started"
	EventStageFinished   = "stage_finished"
	EventUnitGenerated   = "unit_generated"
	EventUnitReused      = "unit_reused"
	EventUnitSubmitted   = "unit_submitted"
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
}

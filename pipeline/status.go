package pipeline

import (
	"fmt"
	"slices"
)

// Status is a job's place in its life cycle. The set is closed: ParseStatus
// refuses anything else, and the database has a CHECK constraint on the same
// list.
type Status string

const (
	StatusPending      Status = "pending"
	StatusRunning      Status = "running"
	StatusRetryWait    Status = "retry_wait"
	StatusNeedsReview  Status = "needs_review"
	StatusSucceeded    Status = "succeeded"
	StatusFailed       Status = "failed"
	StatusCanceled     Status = "canceled"
	StatusDeadLettered Status = "dead_lettered"
)

// AllStatuses lists every status in a stable order (for metrics and docs).
var AllStatuses = []Status{
	StatusPending, StatusRunning, StatusRetryWait, StatusNeedsReview,
	StatusSucceeded, StatusFailed, StatusCanceled, StatusDeadLettered,
}

// ParseStatus turns a string into a Status, refusing anything outside the set.
func ParseStatus(s string) (Status, error) {
	st := Status(s)
	if !slices.Contains(AllStatuses, st) {
		return "", fmt.Errorf("%w: unknown status %q", ErrInvalidInput, s)
	}
	return st, nil
}

// Terminal reports whether nothing but an operator redrive (of dead_lettered)
// may ever move the job again.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCanceled, StatusDeadLettered:
		return true
	}
	return false
}

// Final reports whether the job is over for good: succeeded, failed or
// canceled. dead_lettered is terminal but not final (an operator may redrive
// it), and needs_review waits for a decision: what a later attempt could
// still use (a staged paid answer, a spooled one) must be kept for both.
func (s Status) Final() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCanceled:
		return true
	}
	return false
}

// Settled reports whether the job waits for nobody but a human: a terminal
// status or needs_review. docs/design.md §9.4: every accepted job ends settled.
func (s Status) Settled() bool { return s.Terminal() || s == StatusNeedsReview }

// transitions is the one table of allowed status changes. Everything that
// changes a job's status calls CheckTransition with it, and the database
// carries the same table in a trigger (storage/sqlite migration 0001) as a
// second wall. running → running is the lease takeover of a stalled attempt.
var transitions = map[Status][]Status{
	StatusPending: {
		StatusRunning,      // a worker claimed it
		StatusCanceled,     // canceled before any work
		StatusDeadLettered, // unbound version, poison message
	},
	StatusRunning: {
		StatusRunning,      // lease expired and another worker took over
		StatusPending,      // released by a worker shutting down
		StatusRetryWait,    // transient failure, backoff scheduled
		StatusNeedsReview,  // ambiguous failure: a human must decide
		StatusSucceeded,    // finalize stored the render
		StatusFailed,       // permanent failure
		StatusCanceled,     // cancellation honoured at a boundary
		StatusDeadLettered, // retries exhausted, poison message
	},
	StatusRetryWait: {
		StatusRunning,      // backoff elapsed, claimed again
		StatusCanceled,     // canceled while waiting
		StatusDeadLettered, // poison message, unbound after a redeploy
	},
	StatusNeedsReview: {
		StatusPending,  // operator decided: retry
		StatusFailed,   // operator decided: fail
		StatusCanceled, // the owner canceled it
	},
	StatusDeadLettered: {
		StatusPending, // operator redrive
	},
	StatusSucceeded: nil,
	StatusFailed:    nil,
	StatusCanceled:  nil,
}

// CheckTransition returns nil when from → to is in the table, and a
// *TransitionError (matching ErrInvalidTransition, and ErrTerminal when from is
// terminal) otherwise.
func CheckTransition(from, to Status) error {
	allowed, known := transitions[from]
	if known && slices.Contains(allowed, to) {
		return nil
	}
	return &TransitionError{From: from, To: to}
}

// Transitions returns a copy of the table, for documentation, the database
// trigger test and the admin page.
func Transitions() map[Status][]Status {
	out := make(map[Status][]Status, len(transitions))
	for k, v := range transitions {
		out[k] = slices.Clone(v)
	}
	return out
}

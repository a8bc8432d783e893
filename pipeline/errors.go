package pipeline

import (
	"errors"
	"fmt"
)

// Sentinels. Drivers translate their own errors into these once, at their
// boundary; the HTTP layer maps them to status codes in one place.
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalidInput      = errors.New("invalid input")
	ErrInvalidTransition = errors.New("invalid status transition")
	ErrTerminal          = errors.New("job is in a terminal status")
	ErrLeaseLost         = errors.New("lease lost")
	ErrIdempotencyReused = errors.New("idempotency key reused with a different request")
	ErrAlreadyExists     = errors.New("already exists")
	ErrClaimConflict     = errors.New("object key is being deleted by another attempt")
	ErrCanceled          = errors.New("job canceled")
)

// TransitionError says which status change was refused.
type TransitionError struct {
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("invalid status transition %s → %s", e.From, e.To)
}

// Is makes a refused move out of a terminal status match ErrTerminal as well
// as ErrInvalidTransition.
func (e *TransitionError) Is(target error) bool {
	switch target {
	case ErrInvalidTransition:
		return true
	case ErrTerminal:
		return e.From.Terminal()
	}
	return false
}

// FenceError is returned when an attempt writes after it lost its lease: the
// lease expired and was taken over, or the job moved on without it. The write
// was not applied.
type FenceError struct {
	JobID     string
	AttemptID string
	Op        string
}

func (e *FenceError) Error() string {
	return fmt.Sprintf("%s: attempt %s no longer holds the lease on job %s", e.Op, e.AttemptID, e.JobID)
}

func (e *FenceError) Unwrap() error { return ErrLeaseLost }

package pipeline

import (
	"errors"
	"fmt"
	"time"
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
	// ErrClaimTakenOver: ObjectLedger.ClaimObject found the key's cleanup
	// dead (see StaleDeleteAfter) and gave it to the caller, who now holds
	// the key's 'deleting' claim: delete the object, FinishAbandon, claim
	// again.
	ErrClaimTakenOver = errors.New("object key's abandoned cleanup was taken over")
)

// StaleDeleteAfter is how old a 'deleting' claim of a dead attempt must be
// before the next writer of the key takes its cleanup over: longer than any
// delete the dead attempt may still have in flight (abandon bounds its
// deletes to deleteTries × deleteTimeout, well below this).
const StaleDeleteAfter = 2 * time.Minute

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

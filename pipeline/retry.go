package pipeline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrorClass is what a failure means for the next status (DESIGN §6). The
// class, not the error text, decides.
type ErrorClass string

const (
	// ClassTransient: certainly not billed or safely retryable; back off and
	// run again.
	ClassTransient ErrorClass = "transient"
	// ClassPermanent: bad input or no permission; retrying cannot help.
	ClassPermanent ErrorClass = "permanent"
	// ClassAmbiguous: the request may have reached a provider that does not
	// dedupe; retrying could pay twice, so a human decides.
	ClassAmbiguous ErrorClass = "ambiguous"
	// ClassCanceled: the owner asked to stop.
	ClassCanceled ErrorClass = "canceled"
)

// ClassifiedError carries an error's class and the safe code and message that
// may be shown to the job's owner. Cause is for logs only: it never reaches
// the API, the queue or the event log.
type ClassifiedError struct {
	Class      ErrorClass
	Code       string        // stable, machine-readable, e.g. "provider_timeout"
	Message    string        // safe, human-readable
	RetryAfter time.Duration // provider-declared earliest retry (429), 0 if none
	Cause      error
}

func (e *ClassifiedError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s (%s): %s: %v", e.Code, e.Class, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s (%s): %s", e.Code, e.Class, e.Message)
}

func (e *ClassifiedError) Unwrap() error { return e.Cause }

// Classify finds the ClassifiedError in err's chain. An error nobody
// classified is treated as ambiguous: when in doubt, stop (DESIGN §1.1).
func Classify(err error) *ClassifiedError {
	var ce *ClassifiedError
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, ErrCanceled) {
		return &ClassifiedError{Class: ClassCanceled, Code: "canceled", Message: "the job was canceled", Cause: err}
	}
	return &ClassifiedError{Class: ClassAmbiguous, Code: "internal_error", Message: "an unexpected error stopped the job; an operator must decide", Cause: err}
}

// RetryPolicy is exponential backoff with full jitter, a cap and a maximum
// number of attempts. The defaults follow Cloudflare Workflows' step defaults
// (5 attempts, exponential).
type RetryPolicy struct {
	Base        time.Duration
	Cap         time.Duration
	MaxAttempts int
	// Rand returns a float in [0,1). nil uses a process-wide source.
	Rand func() float64
}

// DefaultRetryPolicy: 5 attempts, 10 s base doubling up to 10 min.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: 10 * time.Second, Cap: 10 * time.Minute, MaxAttempts: 5}
}

// Validate refuses a policy that could never retry sensibly.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("%w: retry base must be positive, got %s", ErrInvalidInput, p.Base)
	case p.Cap < p.Base:
		return fmt.Errorf("%w: retry cap %s is below base %s", ErrInvalidInput, p.Cap, p.Base)
	case p.MaxAttempts < 1:
		return fmt.Errorf("%w: max attempts must be at least 1, got %d", ErrInvalidInput, p.MaxAttempts)
	}
	return nil
}

var (
	randMu sync.Mutex
	rnd    = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15))
)

func (p RetryPolicy) rand() float64 {
	if p.Rand != nil {
		return p.Rand()
	}
	randMu.Lock()
	defer randMu.Unlock()
	return rnd.Float64()
}

// Ceiling is the upper bound of the backoff after the given attempt
// (1-based): min(Cap, Base·2^(attempt-1)).
func (p RetryPolicy) Ceiling(attempt int) time.Duration {
	attempt = max(attempt, 1)
	d := p.Base
	for i := 1; i < attempt; i++ {
		if d > p.Cap/2 {
			return p.Cap
		}
		d *= 2
	}
	return min(d, p.Cap)
}

// Backoff draws a full-jitter delay in [0, Ceiling(attempt)].
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	return time.Duration(p.rand() * float64(c+1))
}

// Decision is what the policy says a failed attempt leads to.
type Decision struct {
	Status         Status
	NextRunAt      time.Time // set for retry_wait
	Reason         string    // dead-letter reason, e.g. "retries_exhausted"
	RequiresAction bool
}

// Decide maps a failed attempt to the next status. attempts is the number of
// attempts made so far, including the one that just failed.
func (p RetryPolicy) Decide(ce *ClassifiedError, attempts int, now time.Time) Decision {
	switch ce.Class {
	case ClassTransient:
		if attempts >= p.MaxAttempts {
			return Decision{Status: StatusDeadLettered, Reason: ReasonRetriesExhausted, RequiresAction: true}
		}
		delay := max(p.Backoff(attempts), ce.RetryAfter)
		return Decision{Status: StatusRetryWait, NextRunAt: now.Add(delay)}
	case ClassPermanent:
		return Decision{Status: StatusFailed}
	case ClassCanceled:
		return Decision{Status: StatusCanceled}
	default: // ambiguous and anything unknown: stop and ask
		return Decision{Status: StatusNeedsReview, RequiresAction: true}
	}
}

// Dead-letter reasons.
const (
	ReasonRetriesExhausted = "retries_exhausted"
	ReasonUnboundVersion   = "unbound_version"
	ReasonPoison           = "poison"
)

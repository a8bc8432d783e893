package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// ErrorClass is what a failure means for the next status (docs/design.md §6). The
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
	// Infra marks a transient failure of edgepipe's own infrastructure
	// (object store, database, local disk): not the job's fault, so it
	// backs off on the infrastructure budget (RetryPolicy.InfraWindow)
	// instead of using up the job's attempts.
	Infra bool
	Cause error
}

// infraErr is a transient failure of edgepipe's own infrastructure.
func infraErr(code, msg string, cause error) *ClassifiedError {
	return &ClassifiedError{Class: ClassTransient, Infra: true, Code: code, Message: msg, Cause: cause}
}

func (e *ClassifiedError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s (%s): %s: %v", e.Code, e.Class, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s (%s): %s", e.Code, e.Class, e.Message)
}

func (e *ClassifiedError) Unwrap() error { return e.Cause }

// Classify finds the ClassifiedError in err's chain. An error nobody
// classified is treated as ambiguous: when in doubt, stop (docs/design.md §1.1).
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
	// InfraWindow is how long a job may keep failing on edgepipe's own
	// infrastructure (ClassifiedError.Infra) before it is dead-lettered
	// with ReasonInfraUnavailable; such failures never count against
	// MaxAttempts. Zero means DefaultInfraWindow.
	InfraWindow time.Duration
	// InfraCap caps the backoff between infrastructure retries, so a job
	// resumes soon after the store is back. Zero means DefaultInfraCap.
	InfraCap time.Duration
	// Rand returns a float in [0,1). nil uses a process-wide source.
	Rand func() float64
}

// Defaults of the infrastructure budget (EDGEPIPE_INFRA_RETRY_WINDOW).
const (
	DefaultInfraWindow = time.Hour
	DefaultInfraCap    = time.Minute
)

// DefaultRetryPolicy: 5 attempts, 10 s base doubling up to 10 min; an hour
// of infrastructure retries at most a minute apart.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: 10 * time.Second, Cap: 10 * time.Minute, MaxAttempts: 5,
		InfraWindow: DefaultInfraWindow, InfraCap: DefaultInfraCap}
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
	case p.InfraWindow < 0:
		return fmt.Errorf("%w: infrastructure retry window must not be negative, got %s", ErrInvalidInput, p.InfraWindow)
	case p.InfraCap < 0:
		return fmt.Errorf("%w: infrastructure retry cap must not be negative, got %s", ErrInvalidInput, p.InfraCap)
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

// DecideAttempt maps a failed attempt of job j to the next status. An
// infrastructure failure backs off on its own budget (decideInfra); any
// other failure is judged by Decide on the attempts that did not end on the
// infrastructure, so an outage never uses up the job's attempts.
func (p RetryPolicy) DecideAttempt(ce *ClassifiedError, j Job, attempt int, now time.Time) Decision {
	if ce.Class == ClassTransient && ce.Infra {
		return p.decideInfra(ce, j.InfraFailures+1, j.InfraSince, now)
	}
	return p.Decide(ce, max(attempt-j.InfraFailures, 1), now)
}

// decideInfra is the infrastructure budget: exponential full-jitter backoff
// from Base, capped at InfraCap, for InfraWindow from the first failure of
// the current run (since; zero means this one). The last retry is placed at
// the window's end rather than beyond it; after the window the job is
// dead-lettered (ReasonInfraUnavailable), which an operator can redrive.
func (p RetryPolicy) decideInfra(ce *ClassifiedError, failures int, since, now time.Time) Decision {
	window, capD := cmp.Or(p.InfraWindow, DefaultInfraWindow), cmp.Or(p.InfraCap, DefaultInfraCap)
	if since.IsZero() {
		since = now
	}
	end := since.Add(window)
	if !now.Before(end) {
		return Decision{Status: StatusDeadLettered, Reason: ReasonInfraUnavailable, RequiresAction: true}
	}
	ip := p
	ip.Cap = max(min(capD, p.Cap), p.Base)
	delay := max(ip.Backoff(failures), ce.RetryAfter)
	next := now.Add(delay)
	if next.After(end) {
		next = end
	}
	return Decision{Status: StatusRetryWait, NextRunAt: next}
}

// Dead-letter reasons.
const (
	// ReasonInfraUnavailable: edgepipe's own infrastructure (object store,
	// database, local disk) kept failing for the whole infrastructure
	// retry window.
	ReasonInfraUnavailable = "infrastructure_unavailable"
	ReasonRetriesExhausted = "retries_exhausted"
	ReasonUnboundVersion   = "unbound_version"
	ReasonPoison           = "poison"
)

// DeadLetterClass is the error class a job dead-lettered for reason carries
// (permanent: no retry can succeed until an operator acts), "" for no
// reason. Every job store records it the same way.
func DeadLetterClass(reason string) string {
	if reason == "" {
		return ""
	}
	return string(ClassPermanent)
}

// UnboundVersionOutcome is how a job whose workflow version no live process
// binds is settled: dead-lettered, asking for an operator, with the
// reason's class and message. Every job store's sweep of unbound versions
// uses it, with UnboundVersionDetail as the dead letter's detail.
func UnboundVersionOutcome() Outcome {
	return Outcome{
		Status: StatusDeadLettered, Reason: ReasonUnboundVersion, RequiresAction: true,
		ErrorClass: ClassPermanent, ErrorCode: ReasonUnboundVersion, ErrorMessage: DeadLetterMessage(ReasonUnboundVersion),
	}
}

// UnboundVersionDetail is the operator-facing detail of an unbound-version
// dead letter: the version and the versions live processes do bind.
func UnboundVersionDetail(version string, live []string) string {
	return fmt.Sprintf("no live process binds %s (live: %s)", version, strings.Join(live, ","))
}

// DeadLetterMessage is the safe text a job dead-lettered for reason shows
// its owner, "" for no reason.
func DeadLetterMessage(reason string) string {
	switch reason {
	case "":
		return ""
	case ReasonUnboundVersion:
		return "this deployment serves no binding for the job's workflow version; an operator can redrive it once the version is bound"
	case ReasonPoison:
		return "the job's message was delivered too many times without completing; an operator must look at it"
	case ReasonRetriesExhausted:
		return "the job failed on every allowed attempt; an operator can redrive it"
	case ReasonInfraUnavailable:
		return "edgepipe's own storage kept failing for the whole infrastructure retry window; an operator can redrive the job once it is healthy"
	}
	return "the job was moved to the dead-letter queue"
}

package pipeline

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Contract is what a provider operation promises about a request that may
// have reached it (docs/design.md §6). It is declared per operation before any retry
// code runs, and it alone decides whether a failed call may be repeated.
type Contract string

const (
	// ContractSync: request and result in one exchange, no deduplication.
	// A failure after the request may have been sent is ambiguous: no
	// automatic retry, the unit and job go to needs_review.
	ContractSync Contract = "sync"
	// ContractAsyncPollable: the provider returns an external job id that is
	// persisted before anything else; recovery polls that id and never
	// resubmits.
	ContractAsyncPollable Contract = "async_pollable"
	// ContractIdempotentVerified: the server honours an idempotency key, as
	// proven by a test against it (not read in its docs); a retry reuses the
	// same key.
	ContractIdempotentVerified Contract = "idempotent_verified"
	// ContractFailClosed: anything else or unknown. No retry after a send;
	// a human decides.
	ContractFailClosed Contract = "fail_closed"
)

// Provider operations. Each has exactly one contract.
const (
	OpImage       = "image"
	OpSpeech      = "speech"
	OpVideoSubmit = "video_submit"
)

// CallOutcome is what a failed provider call tells about billing.
type CallOutcome string

const (
	// OutcomeNotSent: the request certainly did not reach the provider
	// (connection refused, DNS failure, nothing written). Safe to retry.
	OutcomeNotSent CallOutcome = "not_sent"
	// OutcomeRejected: the provider refused the input or the credentials
	// (4xx other than 429). Retrying cannot help.
	OutcomeRejected CallOutcome = "rejected"
	// OutcomeRateLimited: the provider declared it did not process the
	// request (429) and when to come back.
	OutcomeRateLimited CallOutcome = "rate_limited"
	// OutcomeUnknown: the request may have been processed and billed
	// (timeout, reset, 5xx after sending).
	OutcomeUnknown CallOutcome = "unknown"
	// OutcomeFailed: an asynchronous job the provider accepted ended failed.
	OutcomeFailed CallOutcome = "failed"
)

// CallError is a failed provider call. Code and the outcome are safe to
// show; Cause may hold raw provider text and is for logs only.
type CallError struct {
	Op         string
	Outcome    CallOutcome
	HTTPStatus int
	RetryAfter time.Duration
	Code       string // e.g. provider_timeout, provider_rejected_input
	Cause      error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("provider %s: %s (%s, http %d): %v", e.Op, e.Code, e.Outcome, e.HTTPStatus, e.Cause)
}

func (e *CallError) Unwrap() error { return e.Cause }

// Media is a provider's output, streamed: the caller stores it and closes it.
type Media struct {
	Body        io.ReadCloser
	ContentType string
}

// ImageRequest asks for a still image.
type ImageRequest struct {
	Prompt        string
	Width, Height int
	Model         string
}

// SpeechRequest asks for narration audio.
type SpeechRequest struct {
	Text       string
	Voice      string
	SampleRate int
}

// VideoRequest asks for a video clip.
type VideoRequest struct {
	Prompt        string
	DurationMS    int
	Width, Height int
	FPS           int
}

// VideoState is an asynchronous video job's state.
type VideoState struct {
	Done      bool   // succeeded: content can be fetched
	Failed    bool   // the provider gave up; Code says why
	Code      string // safe code of a failure
	Retryable bool   // the provider says a new submission could succeed
}

// CallMeta identifies a call for the provider's own records and ours.
type CallMeta struct {
	// UnitID is the (job, scene) the call is billed against.
	UnitID string
	// IdempotencyKey is sent only to operations whose contract is
	// idempotent_verified; it is stable across retries of the same unit.
	IdempotencyKey string
}

// Providers is the only door to external generation services. The execute
// stage gets one; apply and finalize get none (their dependency structs have
// no field of this type, which a test checks).
// OpNamer is implemented by a Providers that routes operations to
// different providers (provider.Routed): the name of op's own provider goes
// into op's object keys and intent rows, so changing one operation's
// provider does not change another's keys.
type OpNamer interface {
	ProviderName(op string) string
}

// ProviderName is the name of the provider serving op: OpNamer's answer
// when p routes per operation, p.Name() otherwise.
func ProviderName(p Providers, op string) string {
	if n, ok := p.(OpNamer); ok {
		if name := n.ProviderName(op); name != "" {
			return name
		}
	}
	return p.Name()
}

// EndpointNamer is implemented by a Providers that can say where it sends
// op's requests (an API base URL, "in-process" for edgepipe's own fake):
// the identity a probe's proof is recorded and looked up under.
type EndpointNamer interface {
	Endpoint(op string) string
}

// UnnamedEndpoint is the endpoint of a Providers that names none.
const UnnamedEndpoint = "unnamed"

// ProviderEndpoint is where p sends op's requests: EndpointNamer's answer,
// or UnnamedEndpoint.
func ProviderEndpoint(p Providers, op string) string {
	if n, ok := p.(EndpointNamer); ok {
		if e := n.Endpoint(op); e != "" {
			return e
		}
	}
	return UnnamedEndpoint
}

type Providers interface {
	// Name identifies the provider set (for the intent log).
	Name() string
	// Contract returns the declared contract of op (OpImage, ...).
	// Unknown operations must return ContractFailClosed.
	Contract(op string) Contract
	// Model returns the model id used for op (part of deterministic keys).
	Model(op string) string
	GenerateImage(ctx context.Context, meta CallMeta, req ImageRequest) (Media, error)
	Synthesize(ctx context.Context, meta CallMeta, req SpeechRequest) (Media, error)
	// SubmitVideo starts an asynchronous job and returns its external id.
	SubmitVideo(ctx context.Context, meta CallMeta, req VideoRequest) (string, error)
	// VideoStatus and FetchVideo read an existing job; they bill nothing and
	// may be retried freely.
	VideoStatus(ctx context.Context, externalID string) (VideoState, error)
	FetchVideo(ctx context.Context, externalID string) (Media, error)
}

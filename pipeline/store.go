package pipeline

import (
	"context"
	"encoding/json"
	"time"
)

// Store is what the worker and the stages need from the job store (the
// SQLite driver implements it). Every method that takes a Lease is fenced:
// it fails with a *FenceError, writing nothing, once the attempt lost it.
type Store interface {
	Fetch(ctx context.Context, p *FetchParams) ([]Claimed, FetchStats, error)
	Heartbeat(ctx context.Context, lease Lease, leaseFor time.Duration) (Lease, error)
	Finish(ctx context.Context, lease Lease, o Outcome) error
	Release(ctx context.Context, lease Lease) error
	CancelRequested(ctx context.Context, jobID string) (bool, error)
	GetJob(ctx context.Context, id string) (Job, error)

	FreezeInput(ctx context.Context, lease Lease, frozen json.RawMessage, unitsTotal int) (json.RawMessage, error)
	StageFinished(ctx context.Context, lease Lease, stage string, unitsDone int, detail map[string]any) error
	AppendEvent(ctx context.Context, lease Lease, kind string, detail any) error

	PlanUnits(ctx context.Context, lease Lease, units []Unit) error
	Units(ctx context.Context, jobID string) ([]Unit, error)
	UpdateUnit(ctx context.Context, lease Lease, scene int, up UnitUpdate) error

	RecordIntent(ctx context.Context, lease Lease, c ProviderCall) (int64, error)
	FinishCall(ctx context.Context, p *FinishCallParams) error
	// ProviderCalls returns a job's provider calls in order, of one scene
	// or of AllScenes, of one operation or of every one (op "").
	ProviderCalls(ctx context.Context, jobID string, scene int, op string) ([]ProviderCall, error)
	// SetCallStaged points a call row at the staged copy of its answer.
	SetCallStaged(ctx context.Context, p *SetCallStagedParams) error
	// CommitStaged records an answer staged outside an attempt (FlushSpool).
	CommitStaged(ctx context.Context, p *CommitStagedParams) error
	// StagedAnswers lists staged answers (of one job, or of final jobs).
	StagedAnswers(ctx context.Context, p *StagedAnswersParams) ([]Asset, error)

	ObjectLedger
}

// ObjectLedger is the database side of the object write protocol (docs/design.md §7).
type ObjectLedger interface {
	GetAsset(ctx context.Context, key string) (Asset, error)
	ClaimObject(ctx context.Context, lease Lease, key string) error
	CommitAsset(ctx context.Context, lease Lease, a Asset) error
	AbandonClaim(ctx context.Context, attemptID, key string) (deleteObject bool, err error)
	FinishAbandon(ctx context.Context, attemptID, key string) error
	// ReleaseStaged deletes a staged answer's asset row and leaves a
	// 'deleting' claim for p.Owner until FinishAbandon.
	ReleaseStaged(ctx context.Context, p *ReleaseStagedParams) (released bool, err error)
}

// NewJob is a job as submitted.
type NewJob struct {
	// ID is the internal job key; the API sets it to JobKey(Tenant,
	// InstanceID).
	ID string
	// InstanceID is the caller-visible id, unique per tenant. Empty means
	// ID (WithDefaults): jobs created outside the API, by tests and bulk
	// tools, are addressed by one id.
	InstanceID         string
	Tenant             string
	Operation          string
	IdempotencyKey     string
	RequestFingerprint string
	Input              json.RawMessage
	Version            string
	// Queue the job's message goes to. Empty together with DeadLetterReason
	// when routing decided the job cannot run in this deployment.
	Queue string
	// DeadLetterReason, when set, stores the job directly as dead_lettered
	// (e.g. unbound_version) instead of enqueuing it.
	DeadLetterReason string
	DeadLetterDetail string
	// DeadLetterQueue is the queue the job would have gone to, kept on the
	// dead letter for the operator.
	DeadLetterQueue string
	WebhookURL      string
	// TraceParent is the submission's W3C traceparent, already validated
	// (tracing.ParseTraceParent); empty stores NULL.
	TraceParent string
}

// WithDefaults returns nj with what it may leave out filled in: an empty
// InstanceID is the ID.
func (nj NewJob) WithDefaults() NewJob {
	if nj.InstanceID == "" {
		nj.InstanceID = nj.ID
	}
	return nj
}

// ListFilter selects jobs for ListJobs.
type ListFilter struct {
	Tenant string // required unless AllTenants
	// AllTenants is for operators.
	AllTenants     bool
	Statuses       []Status
	RequiresAction bool
	// Version keeps jobs of one workflow version (v1, v2, ...).
	Version string
	// CreatedBefore and CreatedAfter bound the creation time (either may be
	// zero): the operator's age filter.
	CreatedBefore time.Time
	CreatedAfter  time.Time
	// After is the cursor: the (created_at, id) of the last job of the
	// previous page, as returned in ListPage.Next.
	After Cursor
	Limit int
}

// Cursor is an opaque position in a listing ordered by (created_at, id).
type Cursor struct {
	CreatedAtMS int64
	// ID is the last job's instance id in a tenant's listing (instance ids
	// are unique per tenant, and the cursor goes back to that tenant), its
	// internal key in an all-tenants listing.
	ID string
}

// Page cuts a listing read with one row more than f.Limit (a store asks
// for Limit+1 so that it knows whether another page follows) to its page,
// and returns the cursor of the next page: zero when there is none, else
// the last job's creation time and the id f's listing pages by (see
// Cursor).
func (f ListFilter) Page(jobs []Job) ([]Job, Cursor) {
	if len(jobs) <= f.Limit {
		return jobs, Cursor{}
	}
	jobs = jobs[:f.Limit]
	last := jobs[len(jobs)-1]
	next := Cursor{CreatedAtMS: last.CreatedAt.UnixMilli(), ID: last.InstanceID}
	if f.AllTenants {
		next.ID = last.ID
	}
	return jobs, next
}

// Claimed is a job a worker now holds a lease on. Job carries what an
// attempt reads: its keys (ID, InstanceID, Tenant, Operation, Version,
// Queue), Status (running), the claim's lease (AttemptID, Attempts,
// LeaseOwner, LeaseExpiresAt, UpdatedAt), StatusChangedAt, CreatedAt,
// Input and FrozenInput, InfraFailures and InfraSince, CancelRequestedAt,
// WebhookURL and TraceParent. A driver may leave the rest zero (the SQLite
// driver does: decoding the whole row is a third of a claim's cost); read
// the job (GetJob) for its whole record.
type Claimed struct {
	Job        Job
	Lease      Lease
	MessageID  int64
	Deliveries int
}

// ReviewDecision is an operator's answer to a job in needs_review.
type ReviewDecision string

const (
	DecisionRetry ReviewDecision = "retry"
	DecisionFail  ReviewDecision = "fail"
)

// Asset is the record of an object that was fully written: it exists only
// after the object does (docs/design.md §7).
type Asset struct {
	Key              string
	JobID            string
	Kind             string // image | speech | video | render | staged
	SizeBytes        int64
	SHA256           string
	ContentType      string
	DurationMS       int // renders: the storyboard's length
	CreatedByAttempt string
	CreatedAt        time.Time
}

// Unit statuses.
const (
	UnitPlanned     = "planned"
	UnitSubmitted   = "submitted" // an async job is running at the provider
	UnitGenerated   = "generated"
	UnitFailed      = "failed"
	UnitNeedsReview = "needs_review"
)

// Unit is one scene's work and its stored results.
type Unit struct {
	JobID         string
	Scene         int
	Kind          string // image | video
	UnitKey       string // hash of the frozen inputs that determine the scene
	Status        string
	ExternalJobID string
	// Artifacts maps an artifact name (image, speech, video) to the key of
	// its stored object. An entry exists only after the asset row does.
	Artifacts map[string]string
	UpdatedAt time.Time
}

// Provider call statuses (the billing audit trail).
const (
	CallIntent    = "intent"    // written before the request is sent
	CallSucceeded = "succeeded" // the provider answered with a result
	CallNotSent   = "not_sent"  // certainly never reached the provider
	CallFailed    = "failed"    // refused (4xx, 429) or the async job failed: not billed for a result
	CallAmbiguous = "ambiguous" // may have been processed and billed
	CallWaived    = "waived"    // an operator chose to pay again after this call's unknown outcome
)

// ProviderCall is one row of the billing audit trail.
type ProviderCall struct {
	ID             int64
	JobID          string
	Scene          int
	Op             string
	Provider       string
	Model          string // the model asked for (provider-specific)
	Contract       Contract
	IdempotencyKey string
	AttemptID      string
	Status         string
	ExternalJobID  string
	HTTPStatus     int
	ErrorCode      string
	IntendedAt     time.Time
	FinishedAt     time.Time
	// StagedKey is the staging key of the call's answer once it was staged
	// (docs/design.md §6); it stays as history after the staged copy was
	// released.
	StagedKey string
}

// KindStaged is the asset kind of a staged provider answer: a paid result
// kept in the object store under StagingKey until the asset made from it
// exists or the job is final.
const KindStaged = "staged"

// FinishCallParams are Store.FinishCall's: how provider call ID ended.
type FinishCallParams struct {
	ID         int64
	Status     string // CallSucceeded, CallNotSent, CallFailed or CallAmbiguous
	HTTPStatus int
	ErrorCode  string // safe code of a failure
	ExternalID string // an asynchronous job's id at the provider
}

// SetCallStagedParams are Store.SetCallStaged's.
type SetCallStagedParams struct {
	CallID int64
	Key    string // an asset of kind KindStaged
}

// CommitStagedParams are Store.CommitStaged's: the asset (of kind
// KindStaged, fully written under StagingKey) holding call CallID's answer.
type CommitStagedParams struct {
	CallID int64
	Asset  Asset
}

// ReleaseStagedParams are ObjectLedger.ReleaseStaged's.
type ReleaseStagedParams struct {
	Key string
	// Owner names the releaser in the 'deleting' claim (an attempt id, or
	// the sweeper's run id); FinishAbandon(Owner, Key) ends it.
	Owner string
}

// StagedAnswersParams select staged answers: JobID's, or with
// FinalJobsOnly those of jobs that are over for good (JobID optional).
type StagedAnswersParams struct {
	JobID         string
	FinalJobsOnly bool
	Limit         int // default 1000
}

// DecideParams are a job store's Decide: an operator's decision on job
// JobID in needs_review (retry or fail), recorded with who and why.
type DecideParams struct {
	JobID    string
	Decision ReviewDecision
	Operator string
	Reason   string // optional, at most 1000 bytes (CheckDecisionReason)
}

// RedriveParams are a job store's Redrive: send the job of dead letter
// DeadLetterID back to Queue (its own version's), recorded as Operator's.
type RedriveParams struct {
	DeadLetterID int64
	Queue        string
	Operator     string
}

// DiscardDeadLetterParams are a job store's DiscardDeadLetter: settle dead
// letter DeadLetterID without redriving it, recorded with who and why.
type DiscardDeadLetterParams struct {
	DeadLetterID int64
	Operator     string
	Reason       string // required (CheckDiscardReason)
}

// MayHaveBilled reports whether the call may have been processed (and paid
// for) by the provider.
func (c ProviderCall) MayHaveBilled() bool {
	switch c.Status {
	case CallIntent, CallSucceeded, CallAmbiguous:
		return true
	}
	return false
}

// Finished pairs an attempt's lease with its outcome for a batch completer
// (the job stores' FinishMany, like River's).
type Finished struct {
	Lease   Lease
	Outcome Outcome
}

// FetchParams are Store.Fetch's: claim up to Max visible messages of
// Queue for Owner, each with a lease of LeaseFor.
type FetchParams struct {
	Queue    string
	Owner    string
	Max      int
	LeaseFor time.Duration
	// TenantMaxRunning, when positive, is how many jobs of one tenant may
	// be running with a live lease at once, counted over every queue and
	// every process in the claim's own transaction (docs/design.md §5). A
	// ready job of a tenant at the limit is not claimed: its message stays
	// visible, with its delivery count untouched, and the claim moves on to
	// other tenants' messages. 0 is no limit.
	TenantMaxRunning int
}

// FetchStats says what a Fetch did besides claiming.
type FetchStats struct {
	Claimed      int
	AckedSettled int // messages for settled jobs, acked and ignored
	Deferred     int // job leased by a live attempt or still in backoff
	DeadLettered int // poison
	// TenantLimited counts ready jobs the claim read and left on the queue
	// because their tenant had no slot left under
	// FetchParams.TenantMaxRunning. A tenant already at its limit when a
	// page is read is left out by the query itself and not counted.
	TenantLimited int
}

// UnitUpdate changes a unit; empty fields are left as they are, and
// Artifacts are merged into the stored ones.
type UnitUpdate struct {
	Status        string
	ExternalJobID string
	Artifacts     map[string]string
}

// ObjectClaim is an attempt's ownership row on an object key.
type ObjectClaim struct {
	Key       string
	AttemptID string
	JobID     string
	State     string // writing | deleting
	ClaimedAt time.Time
}

// BilledCallGroup counts, for one (job, scene, operation, contract), the
// provider calls that may have been billed (the checker's view of §9.3).
type BilledCallGroup struct {
	JobID    string
	Scene    int
	Op       string
	Contract Contract
	Count    int
}

// WebhookDelivery is one webhook outbox row: a notification for one
// settled job. The webhook package delivers it; a Store persists it.
type WebhookDelivery struct {
	ID      int64
	JobID   string
	EventID int64 // the job event that settled it
	URL     string
	Payload []byte // the JSON body, signed as is
	// Attempts counts the times the delivery was claimed, including the
	// current claim: a claimed delivery may have been sent.
	Attempts int
	// Status is pending, delivered or failed.
	Status    string
	LastError string // safe text: a status code or an error class
	CreatedAt time.Time
	// LeaseUntil is when the current claim expires; the store uses it as
	// the claim's fencing token.
	LeaseUntil  time.Time
	DeliveredAt time.Time
}

// Webhook delivery statuses.
const (
	WebhookPending   = "pending"
	WebhookDelivered = "delivered"
	WebhookFailed    = "failed"
)

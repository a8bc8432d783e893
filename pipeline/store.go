package pipeline

import (
	"encoding/json"
	"time"
)

// NewJob is a job as submitted.
type NewJob struct {
	ID                 string
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
}

// ListFilter selects jobs for ListJobs.
type ListFilter struct {
	Tenant string // required unless AllTenants
	// AllTenants is for operators.
	AllTenants     bool
	Statuses       []Status
	RequiresAction bool
	// After is the cursor: the (created_at, id) of the last job of the
	// previous page, as returned in ListPage.Next.
	After Cursor
	Limit int
}

// Cursor is an opaque position in a listing ordered by (created_at, id).
type Cursor struct {
	CreatedAtMS int64
	ID          string
}

// Claimed is a job a worker now holds a lease on.
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
// after the object does (DESIGN §7).
type Asset struct {
	Key              string
	JobID            string
	Kind             string // image | speech | video | render
	SizeBytes        int64
	SHA256           string
	ContentType      string
	DurationMS       int // renders: the storyboard's length
	CreatedByAttempt string
	CreatedAt        time.Time
}

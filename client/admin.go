package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// The operator calls need a Client made with the operator token
// (EDGEPIPE_ADMIN_TOKEN on the server).

// AdminJobs is GET /v1/admin/jobs: jobs of every tenant that need an
// operator (needs_review, and dead letters that asked for one), newest
// first. Statuses narrows the list further.
func (c *Client) AdminJobs(ctx context.Context, o ListOptions) (AdminJobList, error) {
	var l AdminJobList
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint(o.query(), "v1", "admin", "jobs"), nil, nil, &l)
	return l, err
}

// JobStory is GET /v1/admin/jobs/{id}: any tenant's job with its attempts,
// provider calls (with their billing status), objects, operators'
// decisions and events (ErrNotFound for an unknown job).
func (c *Client) JobStory(ctx context.Context, id string) (JobStory, error) {
	var st JobStory
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint(nil, "v1", "admin", "jobs", id), nil, nil, &st)
	return st, err
}

// Decision is an operator's decision on a job in needs_review.
type Decision string

// The decisions an operator can take.
const (
	// DecisionRetry runs the job again; what was paid for is reused.
	DecisionRetry Decision = "retry"
	// DecisionFail fails the job for good.
	DecisionFail Decision = "fail"
)

// Decide is POST /v1/admin/jobs/{id}/decision for a job in needs_review
// (ErrInvalidTransition, or ErrJobTerminal, otherwise). reason, when not
// empty, is sent as the decision's "reason" and recorded with it (the
// job's Decision); an older server that does not record reasons refuses it
// as an unknown field (ErrInvalid) rather than drop it.
func (c *Client) Decide(ctx context.Context, id string, d Decision, reason string) (AdminJob, error) {
	body := map[string]string{"decision": string(d)}
	if reason != "" {
		body["reason"] = reason
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return AdminJob{}, err
	}
	var j AdminJob
	_, err = c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "admin", "jobs", id, "decision"), nil, raw, &j)
	return j, err
}

// DeadLetterOptions select a page of dead letters.
type DeadLetterOptions struct {
	// IncludeRedriven lists dead letters already redriven too.
	IncludeRedriven bool
	// After continues below this dead letter id (a page's NextAfter).
	After int64
	// Limit is the page size, 1 to 500 (the server's default when 0).
	Limit int
}

// DeadLetters is GET /v1/admin/dead-letters, newest first.
func (c *Client) DeadLetters(ctx context.Context, o DeadLetterOptions) (DeadLetterList, error) {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.IncludeRedriven {
		q.Set("include_redriven", "true")
	}
	if o.After > 0 {
		q.Set("after", strconv.FormatInt(o.After, 10))
	}
	var l DeadLetterList
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint(q, "v1", "admin", "dead-letters"), nil, nil, &l)
	return l, err
}

// Redrive is POST /v1/admin/dead-letters/{id}/redrive: the job goes back
// to its own version's queue. A version still not bound is refused
// (ErrVersionUnbound) and nothing changes.
func (c *Client) Redrive(ctx context.Context, deadLetterID int64) (AdminJob, error) {
	var j AdminJob
	// The API wants a JSON (or form) content type even though it ignores
	// the body: that is what keeps cross-site form posts out.
	_, err := c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "admin", "dead-letters", strconv.FormatInt(deadLetterID, 10), "redrive"),
		nil, []byte("{}"), &j)
	return j, err
}

// DiscardDeadLetter is POST /v1/admin/dead-letters/{id}/discard: the dead
// letter is settled without a redrive (its job stays dead_lettered) and
// the discard is audited with reason, which is required. A dead letter
// already redriven or discarded is refused (ErrDeadLetterSettled).
func (c *Client) DiscardDeadLetter(ctx context.Context, deadLetterID int64, reason string) (DeadLetter, error) {
	raw, err := json.Marshal(map[string]string{"reason": reason})
	if err != nil {
		return DeadLetter{}, err
	}
	var d DeadLetter
	_, err = c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "admin", "dead-letters", strconv.FormatInt(deadLetterID, 10), "discard"),
		nil, raw, &d)
	return d, err
}

// BulkOptions tune a bulk redrive or discard.
type BulkOptions struct {
	// Limit is how many dead letters one call acts on, oldest first (1 to
	// 500; the server's default, 100, when 0). The result's More says
	// whether more match.
	Limit int
	// DryRun reports what would be done and changes nothing.
	DryRun bool
}

type bulkBody struct {
	Filter DeadLetterFilter `json:"filter"`
	Reason string           `json:"reason,omitempty"`
	Limit  int              `json:"limit,omitempty"`
	DryRun bool             `json:"dry_run,omitempty"`
}

func (c *Client) bulk(ctx context.Context, action string, b bulkBody) (DeadLetterBulkResult, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return DeadLetterBulkResult{}, err
	}
	var r DeadLetterBulkResult
	_, err = c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "admin", "dead-letters", action), nil, raw, &r)
	return r, err
}

// RedriveDeadLetters is POST /v1/admin/dead-letters/redrive: every open
// dead letter f selects (at least one field; OlderThan "0s" selects all)
// is redriven, oldest first, up to the limit; those whose version is still
// not bound are skipped. The result says how many and which.
func (c *Client) RedriveDeadLetters(ctx context.Context, f DeadLetterFilter, o BulkOptions) (DeadLetterBulkResult, error) {
	return c.bulk(ctx, "redrive", bulkBody{Filter: f, Limit: o.Limit, DryRun: o.DryRun})
}

// DiscardDeadLetters is POST /v1/admin/dead-letters/discard: every open
// dead letter f selects is discarded with reason (required), oldest first,
// up to the limit. The result says how many and which.
func (c *Client) DiscardDeadLetters(ctx context.Context, f DeadLetterFilter, reason string, o BulkOptions) (DeadLetterBulkResult, error) {
	return c.bulk(ctx, "discard", bulkBody{Filter: f, Reason: reason, Limit: o.Limit, DryRun: o.DryRun})
}

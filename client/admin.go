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
// empty, is sent as the decision's "reason"; a server that does not record
// reasons refuses it as an unknown field (ErrInvalid) rather than drop it.
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

// Package client is the Go client of edgepipe's HTTP API: submit a
// storyboard, read and list jobs, follow a job's event stream (Server-Sent
// Events, resumed with Last-Event-ID across dropped connections), cancel,
// download the result, and the operator calls (jobs needing review and
// their decision, dead letters and their redrive).
//
// Error answers (application/problem+json) come back as *APIError, which
// matches this package's sentinels with errors.Is:
//
//	job, err := c.Get(ctx, id)
//	if errors.Is(err, client.ErrNotFound) { … }
//
// The wire types are the api package's own (aliased here), so the client
// and the server cannot drift apart.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
)

// Wire types of the API.
type (
	// Job is a job resource (GET /v1/jobs/{id}).
	Job = api.JobResource
	// JobList is a page of jobs.
	JobList = api.JobList
	// Event is one event of a job's log, as its event stream sends it.
	Event = api.EventMessage
	// AdminJob is a job as an operator sees it.
	AdminJob = api.AdminJob
	// AdminJobList is a page of jobs that need an operator.
	AdminJobList = api.AdminJobList
	// JobStory is one job's whole story for an operator: attempts,
	// provider calls, objects, decisions and events.
	JobStory = api.AdminJobStory
	// DeadLetter is a dead-letter queue entry.
	DeadLetter = api.DeadLetter
	// DeadLetterList is a page of dead letters.
	DeadLetterList = api.DeadLetterList
	// JobDecision is an operator's recorded decision on a job.
	JobDecision = api.Decision
	// DeadLetterFilter selects open dead letters for a bulk redrive or
	// discard.
	DeadLetterFilter = api.DeadLetterFilter
	// DeadLetterBulkResult answers a bulk redrive or discard.
	DeadLetterBulkResult = api.DeadLetterBulkResult
	// DeadLetterBulkItem is one dead letter's outcome in a bulk call.
	DeadLetterBulkItem = api.DeadLetterBulkItem
	// Problem is an error answer's body.
	Problem = api.Problem
	// Status is a job status.
	Status = pipeline.Status
)

// Defaults of Config.
const (
	DefaultRequestTimeout    = 30 * time.Second
	DefaultReconnectDelay    = 500 * time.Millisecond
	DefaultReconnectMax      = 10 * time.Second
	DefaultStreamIdle        = 45 * time.Second
	DefaultMaxStreamFailures = 20
	// maxJSONBody bounds a JSON answer (a page of 500 jobs fits easily).
	maxJSONBody = 16 << 20
)

// Config configures a Client.
type Config struct {
	// BaseURL is the server, http(s)://host[:port][/prefix].
	BaseURL string
	// Token is sent as "Authorization: Bearer <token>": a tenant token,
	// or the operator token for the admin calls.
	Token string
	// Transport is the HTTP transport; nil means a clone of
	// http.DefaultTransport with a response-header timeout of
	// RequestTimeout.
	Transport http.RoundTripper
	// UserAgent is sent with every request (default "edgepipe-client").
	UserAgent string
	// RequestTimeout bounds each request that is not a stream or a
	// download (default 30s).
	RequestTimeout time.Duration
	// ReconnectDelay is the first pause before Follow reconnects a dropped
	// event stream; it doubles up to ReconnectMax (defaults 500ms, 10s).
	ReconnectDelay time.Duration
	ReconnectMax   time.Duration
	// StreamIdle is how long an event stream may stay silent (the server
	// sends a keep-alive comment every 15s) before Follow drops it and
	// reconnects (default 45s).
	StreamIdle time.Duration
	// MaxStreamFailures is how many connections in a row may end without
	// an event before Follow gives up (default 20).
	MaxStreamFailures int
}

// Client talks to one edgepipe server with one token. It is safe for
// concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client
}

// New checks cfg and makes a Client.
func New(cfg Config) (*Client, error) {
	base, err := ParseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, errors.New("client: no token")
	}
	if strings.IndexFunc(cfg.Token, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return nil, errors.New("token: must be printable ASCII without spaces")
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "edgepipe-client"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.RequestTimeout, DefaultRequestTimeout)
	def(&cfg.ReconnectDelay, DefaultReconnectDelay)
	def(&cfg.ReconnectMax, DefaultReconnectMax)
	def(&cfg.StreamIdle, DefaultStreamIdle)
	if cfg.MaxStreamFailures <= 0 {
		cfg.MaxStreamFailures = DefaultMaxStreamFailures
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = cfg.RequestTimeout
		tr = t
	}
	hc := &http.Client{
		Transport: tr,
		// Only the result download redirects (to a presigned URL). The
		// presigned URL carries its own credentials; sending ours along
		// would leak the token to the object store and make S3 refuse
		// the request for having two kinds of authentication.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			req.Header.Del("Authorization")
			return nil
		},
	}
	return &Client{cfg: cfg, base: base, http: hc}, nil
}

// ParseBaseURL checks a server URL: http or https, a host, no credentials,
// query or fragment. A trailing slash is dropped.
func ParseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port][/prefix] without credentials or query", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// endpoint is the URL of an API path below the base URL. Segments are
// escaped, so an id can never reach another route.
func (c *Client) endpoint(q url.Values, segments ...string) string {
	var b strings.Builder
	b.WriteString(c.base.String())
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	if len(q) > 0 {
		b.WriteByte('?')
		b.WriteString(q.Encode())
	}
	return b.String()
}

// request sends one request with the token. A 4xx/5xx answer is returned as
// an *APIError (the body consumed and closed).
func (c *Client) request(ctx context.Context, method, target string, hdr http.Header, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// doJSON sends a request (body, when not nil, is JSON) and decodes a 2xx
// JSON answer into out. It returns the answer's header.
func (c *Client) doJSON(ctx context.Context, method, target string, hdr http.Header, body []byte, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Accept", "application/json")
	if body != nil {
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.request(ctx, method, target, hdr, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out == nil {
		return resp.Header, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return resp.Header, fmt.Errorf("%s %s: unreadable answer (HTTP %d): %w", method, pathOf(target), resp.StatusCode, transportError(err))
	}
	return resp.Header, nil
}

func pathOf(target string) string {
	if u, err := url.Parse(target); err == nil {
		return u.EscapedPath()
	}
	return target
}

// Submitted is the answer to a submission.
type Submitted struct {
	Job Job
	// Replayed: the key was used before for the same request, and Job is
	// the job that request created (Idempotent-Replayed: true).
	Replayed bool
}

// Submit is POST /v1/jobs. key is the Idempotency-Key (required: the same
// key with the same body returns the same job). body is the request: a
// []byte or json.RawMessage is sent as it is, anything else is encoded as
// JSON.
func (c *Client) Submit(ctx context.Context, key string, body any) (Submitted, error) {
	if key == "" {
		return Submitted{}, errors.New("submit: an Idempotency-Key is required")
	}
	if len(key) > api.MaxIdempotencyKeyLen || strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		// The server's rule; checked here because net/http would refuse a
		// control character with a confusing error of its own.
		return Submitted{}, fmt.Errorf("submit: the Idempotency-Key must be 1 to %d printable ASCII characters", api.MaxIdempotencyKeyLen)
	}
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case json.RawMessage:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return Submitted{}, fmt.Errorf("submit: %w", err)
		}
	}
	hdr := http.Header{}
	hdr.Set(api.HeaderIdempotencyKey, key)
	var s Submitted
	h, err := c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "jobs"), hdr, raw, &s.Job)
	if err != nil {
		return Submitted{}, err
	}
	s.Replayed = h.Get(api.HeaderIdempotentReplayed) == "true"
	return s, nil
}

// Get is GET /v1/jobs/{id}.
func (c *Client) Get(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint(nil, "v1", "jobs", id), nil, nil, &j)
	return j, err
}

// ListOptions select a page of jobs.
type ListOptions struct {
	// Statuses keeps jobs in any of these statuses (all when empty).
	Statuses []Status
	// Limit is the page size, 1 to 500 (the server's default when 0).
	Limit int
	// Cursor continues after the page whose NextCursor it is.
	Cursor string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	for _, s := range o.Statuses {
		q.Add("status", string(s))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// List is GET /v1/jobs: the token's jobs, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (JobList, error) {
	var l JobList
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint(o.query(), "v1", "jobs"), nil, nil, &l)
	return l, err
}

// Cancel is POST /v1/jobs/{id}/cancellation. A job nobody works on is
// canceled at once; a running one stops at its next boundary.
func (c *Client) Cancel(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.doJSON(ctx, http.MethodPost, c.endpoint(nil, "v1", "jobs", id, "cancellation"), nil, nil, &j)
	return j, err
}

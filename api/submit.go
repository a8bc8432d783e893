package api

import (
	"crypto/rand"
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/webhook"
)

// Submission headers.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	// HeaderTraceParent is the W3C Trace Context header a submission may
	// carry (optional; stored on the job when well formed).
	HeaderTraceParent = "traceparent"
	// MaxIdempotencyKeyLen is the longest accepted Idempotency-Key.
	MaxIdempotencyKeyLen = 255
)

// submitRequest is the body of POST /v1/jobs: the storyboard's fields plus
// the envelope. Unknown fields are refused (at every level), so a typo
// cannot silently fall back to a default.
type submitRequest struct {
	Operation  string           `json:"operation"`
	Title      string           `json:"title"`
	Scenes     []pipeline.Scene `json:"scenes"`
	Options    pipeline.Options `json:"options"`
	InstanceID *string          `json:"instance_id"`
	WebhookURL *string          `json:"webhook_url"`
}

// submit is POST /v1/jobs. The checks run cheapest and least revealing
// first: token (middleware), content type, key, body size, body. Nothing is
// written before all of them passed.
func (s *Server) submit(c echo.Context) error {
	r := c.Request()
	if err := requireJSON(r); err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := readBody(r.Body)
	if err != nil {
		return err // *http.MaxBytesError → 413, a timeout → 408
	}
	req, sb, err := decodeSubmission(body)
	if err != nil {
		return err
	}
	tenant := tenantOf(c)
	nj, err := s.newJob(c, tenant, key, req, sb)
	if err != nil {
		return err
	}
	nj.TraceParent = submissionTraceParent(r)
	// The store group-commits concurrent submissions (one commit for many,
	// each in its own savepoint), and returns only once this one is durable.
	job, created, err := s.cfg.Store.CreateJob(r.Context(), nj)
	if errors.Is(err, pipeline.ErrAlreadyExists) && req.InstanceID != nil {
		// Only the caller's own jobs can take an id: ids are unique per
		// tenant, so another tenant's use of it changes no answer here.
		return problem(http.StatusConflict, "instance_id_taken", "another of your jobs already uses this instance_id; choose another or leave it out")
	}
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set(echo.HeaderLocation, jobPath(job.InstanceID))
	if created {
		s.cfg.Metrics.submission("created")
	} else {
		s.cfg.Metrics.submission("replayed")
		h.Set(HeaderIdempotentReplayed, "true")
	}
	return c.JSON(http.StatusAccepted, s.resource(c, job, false))
}

// requireJSON refuses any body that does not say it is UTF-8 JSON.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get(echo.HeaderContentType)
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != echo.MIMEApplicationJSON {
		return problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "send the body as Content-Type: application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be UTF-8 JSON")
	}
	return nil
}

// idempotencyKey returns the request's Idempotency-Key: exactly one header,
// 1–255 printable ASCII characters.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values(HeaderIdempotencyKey)
	switch {
	case len(vs) == 0 || (len(vs) == 1 && vs[0] == ""):
		return "", headerProblem("idempotency_key_missing",
			"send an Idempotency-Key header (1 to 255 printable ASCII characters) so a retried submission cannot create a second job",
			"is required")
	case len(vs) > 1:
		return "", headerProblem("idempotency_key_invalid", "send exactly one Idempotency-Key header", "is repeated; send it once")
	}
	k := vs[0]
	if len(k) > MaxIdempotencyKeyLen || !printable(k) {
		return "", headerProblem("idempotency_key_invalid",
			"the Idempotency-Key must be 1 to 255 printable ASCII characters", "must be 1 to 255 printable ASCII characters")
	}
	return k, nil
}

// headerProblem is a 400 about the Idempotency-Key header, which errors[]
// names like a field.
func headerProblem(code, detail, msg string) *Problem {
	p := problem(http.StatusBadRequest, code, detail)
	p.Errors = []pipeline.FieldError{{Field: HeaderIdempotencyKey, Message: msg}}
	return p
}

// decodeSubmission parses the body strictly and validates every field,
// returning all problems at once.
func decodeSubmission(body []byte) (submitRequest, pipeline.Storyboard, error) {
	var req submitRequest
	if err := decodeStrictJSON(body, &req); err != nil {
		return req, pipeline.Storyboard{}, err
	}
	var fields []pipeline.FieldError
	switch req.Operation {
	case pipeline.OperationRenderVideo:
	case "":
		fields = append(fields, pipeline.FieldError{Field: "operation", Message: "is required; the only operation is render_video"})
	default:
		fields = append(fields, pipeline.FieldError{Field: "operation", Message: "is unknown; the only operation is render_video"})
	}
	sb, err := pipeline.Storyboard{Title: req.Title, Scenes: req.Scenes, Options: req.Options}.Normalize()
	var ve *pipeline.ValidationError
	if errors.As(err, &ve) {
		fields = append(fields, ve.Fields...)
	} else if err != nil {
		return req, sb, err
	}
	var idErr error
	if req.InstanceID != nil {
		// A malformed version prefix (V2-x, v02-x, v2-) can never become
		// valid, so it is refused here instead of being accepted and
		// dead-lettered where nothing could clear it. A well-formed prefix
		// of a version this deployment does not bind (v3-x) is accepted
		// and dead-lettered as unbound_version by newJob: binding the
		// version later makes it redrivable.
		if _, err := routing.ParseInstanceID(*req.InstanceID); err != nil {
			idErr = err
			fields = append(fields, pipeline.FieldError{Field: "instance_id", Message: instanceIDReason(err)})
		}
	}
	if req.WebhookURL != nil {
		if _, err := webhook.ParseURL(*req.WebhookURL); err != nil {
			fields = append(fields, pipeline.FieldError{Field: "webhook_url", Message: urlReason(err)})
		}
	}
	if idErr != nil {
		// Its own code, so a client can tell "this id can never work"
		// from the other field errors; errors[] still lists every field.
		p := problem(http.StatusBadRequest, "invalid_instance_id", instanceIDReason(idErr)+". "+InstanceIDRule+".")
		p.Errors = fields
		return req, sb, p
	}
	if len(fields) > 0 {
		return req, sb, &pipeline.ValidationError{Fields: fields}
	}
	return req, sb, nil
}

// InstanceIDRule is the grammar of an instance_id, in words: the detail of
// every invalid_instance_id problem ends with it.
const InstanceIDRule = "An instance id is an optional version prefix 'v' + 1 to 4 digits without a leading zero + '-' " +
	"(lowercase, e.g. v2-), then at least one of A-Z a-z 0-9 _ - starting with a letter, digit or '_'; at most 64 bytes in all"

// instanceIDReason is routing's explanation without the sentinel's prefix.
func instanceIDReason(err error) string {
	return strings.TrimPrefix(err.Error(), pipeline.ErrInvalidInput.Error()+": ")
}

func fieldError(field, msg string) error {
	return &pipeline.ValidationError{Fields: []pipeline.FieldError{{Field: field, Message: msg}}}
}

func urlReason(err error) string {
	var ue *webhook.URLError
	if errors.As(err, &ue) {
		return ue.Reason
	}
	return "is not acceptable"
}

// newJob decides the job's instance id (the caller's, or a new one), its
// internal key (pipeline.JobKey: instance ids are unique per tenant only),
// version and queue. The fingerprint covers
// the operation, the canonical storyboard and the caller's instance_id (it
// pins both the id and the version), so the same key with the same body but
// another instance_id is a different request: 422.
func (s *Server) newJob(c echo.Context, tenant, key string, req submitRequest, sb pipeline.Storyboard) (pipeline.NewJob, error) {
	pinned := ""
	if req.InstanceID != nil {
		pinned = *req.InstanceID
	}
	nj := pipeline.NewJob{
		Tenant:         tenant,
		Operation:      req.Operation,
		IdempotencyKey: key,
	}
	canonical := sb.Canonical()
	nj.RequestFingerprint, nj.Input = pipeline.FingerprintCanonical(req.Operation, canonical, pinned), canonical
	if req.WebhookURL != nil {
		// Resolved now as well as at every delivery: refusing early tells
		// the caller, the dial guard stops a name re-pointed later.
		if _, err := webhook.CheckURL(c.Request().Context(), s.cfg.Resolver, *req.WebhookURL, s.cfg.AllowPrivateWebhooks); err != nil {
			return nj, fieldError("webhook_url", urlReason(err))
		}
		nj.WebhookURL = *req.WebhookURL
	}
	if pinned != "" {
		nj.InstanceID = pinned
	} else {
		id, err := s.cfg.Router.NewID(tenant, key, newIDBody(s.cfg.Clock.Now()))
		if err != nil {
			return nj, err
		}
		nj.InstanceID = id
	}
	nj.ID = pipeline.JobKey(tenant, nj.InstanceID)
	d := s.route(c.Request().Context(), nj.InstanceID)
	nj.Version = d.Version
	if d.DeadLetter {
		// Accepted but never run here: the job is visible to its owner as
		// dead_lettered (unbound_version) until an operator binds the
		// version and redrives it. Never a fallback to another version.
		nj.DeadLetterReason, nj.DeadLetterDetail = d.Reason, d.Detail
		if d.Version != "" {
			nj.DeadLetterQueue = routing.QueueName(d.Version)
		}
	} else {
		nj.Queue = d.Queue
	}
	return nj, nil
}

// submissionTraceParent is the span context every attempt's span links to:
// with tracing on, the submission's own server span (otelhttp's, a child of
// the caller's traceparent when there was one); with tracing off, the
// caller's W3C traceparent header. A malformed header is ignored (W3C Trace
// Context), never refused and never stored.
func submissionTraceParent(r *http.Request) string {
	if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() && !sc.IsRemote() {
		return tracing.TraceParent(sc)
	}
	tp, _ := tracing.ParseTraceParent(r.Header.Get(HeaderTraceParent)) //nolint:contextcheck // parsing a header value needs no request context
	return tp
}

// newIDBody is the id body of a new job submitted at now (the server's
// clock): a ULID, the millisecond of submission then 80 bits from
// crypto/rand, 26 characters of Crockford base32. So one version's ids
// sort by submission millisecond (in random order within one), which is
// for the job store more than for people: each index on job ids (the
// jobs' key, the tenant's instance ids, each table that references a job)
// takes a version's new ids at one insertion point, where a random body
// dirtied a random page of each, and a group commit writes every dirty
// page. Measured with `edgepipe bench api` on SQLite, COMMIT's CPU went
// from 48 to 24 µs a job.
func newIDBody(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), rand.Reader).String() // crypto/rand never fails
}

package api

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// JobResource is the public view of a job. It carries only safe fields: the
// error is the job's stable code and safe message, never a raw error, and
// nothing about leases, workers or queues.
type JobResource struct {
	ID                string          `json:"id"`
	Operation         string          `json:"operation"`
	Version           string          `json:"version"`
	Status            pipeline.Status `json:"status"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	StatusChangedAt   time.Time       `json:"status_changed_at"`
	Attempts          int             `json:"attempts"`
	NextRetryAt       *time.Time      `json:"next_retry_at"`
	CancelRequestedAt *time.Time      `json:"cancel_requested_at"`
	Progress          Progress        `json:"progress"`
	RequiresAction    bool            `json:"requires_action"`
	// WaitingFor is "storage" while the job backs off because edgepipe's
	// own infrastructure (object store, database, local disk) failed; such
	// retries do not use up its attempts. WaitingSince is when that began.
	WaitingFor   *string    `json:"waiting_for"`
	WaitingSince *time.Time `json:"waiting_since"`
	Error        *JobError  `json:"error"`
	Result       *Result    `json:"result"`
	// Decision is the last decision an operator took on the job while it
	// was in needs_review; null when none was taken.
	Decision *Decision `json:"decision"`
	Links    Links     `json:"links"`
}

// Decision is an operator's decision on a job: retry or fail, who took it,
// why (empty when no reason was given) and when.
type Decision struct {
	Decision pipeline.ReviewDecision `json:"decision"`
	Operator string                  `json:"operator"`
	Reason   string                  `json:"reason"`
	At       time.Time               `json:"at"`
}

// Progress is how far the job got: units are scenes.
type Progress struct {
	UnitsTotal int    `json:"units_total"`
	UnitsDone  int    `json:"units_done"`
	Stage      string `json:"stage"`
}

// JobError is the last error's safe parts.
type JobError struct {
	Class   pipeline.ErrorClass `json:"class,omitempty"`
	Code    string              `json:"code"`
	Message string              `json:"message"`
}

// Result describes the rendered MP4. Bytes, SHA256 and DurationMS come from
// the asset record and are omitted in listings.
type Result struct {
	Key        string `json:"key"`
	Bytes      int64  `json:"bytes,omitempty"`
	SHA256     string `json:"sha256,omitempty"`
	DurationMS int    `json:"duration_ms,omitempty"`
	// URL downloads the result: a presigned URL when the object store
	// makes them, else the API's result endpoint.
	URL string `json:"url,omitempty"`
}

// Links are the job's related resources; cancel only while the job can
// still be canceled, result only once there is one.
type Links struct {
	Self   string `json:"self"`
	Events string `json:"events"`
	Cancel string `json:"cancel,omitempty"`
	Result string `json:"result,omitempty"`
}

func jobPath(id string) string { return "/v1/jobs/" + id }

// maxJobKeyLen is the longest internal job key (pipeline.JobKey of the
// longest instance id): what operator routes and cursors accept.
const maxJobKeyLen = routing.MaxIDLen + pipeline.JobKeySuffixLen

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// resource builds the public view of j. Unless brief, it looks the result's
// asset up (and presigns its URL when the store can).
func (s *Server) resource(c echo.Context, j pipeline.Job, brief bool) JobResource {
	// The tenant knows its job by the instance id only (docs/design.md §3).
	self := jobPath(j.InstanceID)
	r := JobResource{
		ID: j.InstanceID, Operation: j.Operation, Version: j.Version, Status: j.Status,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, StatusChangedAt: j.StatusChangedAt,
		Attempts: j.Attempts, NextRetryAt: timePtr(j.NextRunAt), CancelRequestedAt: timePtr(j.CancelRequestedAt),
		Progress:       Progress{UnitsTotal: j.UnitsTotal, UnitsDone: j.UnitsDone, Stage: j.Stage},
		RequiresAction: j.RequiresAction,
		Links:          Links{Self: self, Events: self + "/events"},
	}
	if j.WaitingForInfra() {
		storage := "storage"
		r.WaitingFor, r.WaitingSince = &storage, timePtr(j.InfraSince)
	}
	if j.LastErrorCode != "" || j.LastErrorMessage != "" {
		r.Error = &JobError{Class: j.LastErrorClass, Code: j.LastErrorCode, Message: j.LastErrorMessage}
	}
	if j.Decision.Kind != "" {
		r.Decision = &Decision{Decision: j.Decision.Kind, Operator: j.Decision.Operator, Reason: j.Decision.Reason, At: j.Decision.At}
	}
	if !j.Status.Terminal() {
		r.Links.Cancel = self + "/cancellation"
	}
	if j.Status == pipeline.StatusSucceeded && j.ResultKey != "" {
		r.Links.Result = self + "/result"
		r.Result = &Result{Key: j.ResultKey, URL: r.Links.Result}
		if !brief {
			s.describeResult(c, r.Result)
		}
	}
	return r
}

func (s *Server) describeResult(c echo.Context, res *Result) {
	ctx := c.Request().Context()
	a, err := s.cfg.Store.GetAsset(ctx, res.Key)
	if err != nil {
		// The job still reads fine without the details; the operator
		// needs to know an asset row is missing (docs/design.md §1.4).
		s.log.Error("result asset lookup failed", "key", res.Key, "err", err)
		return
	}
	res.Bytes, res.SHA256, res.DurationMS = a.SizeBytes, a.SHA256, a.DurationMS
	if p, ok := s.cfg.Objects.(Presigner); ok {
		if u, err := p.PresignGet(ctx, res.Key, s.cfg.PresignTTL); err == nil {
			res.URL = u
		} else {
			s.log.Warn("presign result", "key", res.Key, "err", err)
		}
	}
}

// loadJob returns the caller's job by its instance id; ids are unique per
// tenant, so another tenant's job with the same id is not even looked at.
func (s *Server) loadJob(c echo.Context) (pipeline.Job, error) {
	id := c.Param("id")
	if id == "" || len(id) > routing.MaxIDLen {
		return pipeline.Job{}, pipeline.ErrNotFound
	}
	return s.cfg.Store.GetTenantJob(c.Request().Context(), tenantOf(c), id)
}

// getJob is GET /v1/jobs/{id}.
func (s *Server) getJob(c echo.Context) error {
	j, err := s.loadJob(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, s.resource(c, j, false))
}

// cancel is POST /v1/jobs/{id}/cancellation: it records the request (a job
// nobody is working on is canceled at once; a running one at its next
// boundary) and answers 202 with the job. Repeating it is harmless: a job
// that is already canceled answers 202 with the job as well. Only a job that
// ended otherwise (succeeded, failed, dead_lettered) answers 409.
func (s *Server) cancel(c echo.Context) error {
	id := c.Param("id")
	if id == "" || len(id) > routing.MaxIDLen {
		return pipeline.ErrNotFound
	}
	ctx := c.Request().Context()
	j, err := s.cfg.Store.RequestCancel(ctx, tenantOf(c), id)
	var te *pipeline.TransitionError
	if errors.As(err, &te) && te.From == pipeline.StatusCanceled {
		// The store refuses to move a terminal job, rightly; for the
		// caller the cancel they asked for has happened.
		j, err = s.cfg.Store.GetTenantJob(ctx, tenantOf(c), id)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, s.resource(c, j, true))
}

// JobList is a page of jobs.
type JobList struct {
	Jobs       []JobResource `json:"jobs"`
	NextCursor *string       `json:"next_cursor"`
}

// listJobs is GET /v1/jobs?status=&limit=&cursor=.
func (s *Server) listJobs(c echo.Context) error {
	f, err := listFilter(c)
	if err != nil {
		return err
	}
	f.Tenant = tenantOf(c)
	jobs, next, err := s.cfg.Store.ListJobs(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := JobList{Jobs: make([]JobResource, 0, len(jobs))}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, s.resource(c, j, true))
	}
	if next.ID != "" {
		cur := encodeCursor(next)
		out.NextCursor = &cur
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, out)
}

// MaxPageSize is the largest limit a listing accepts.
const MaxPageSize = 500

// listFilter reads status (repeatable or comma-separated), limit and cursor.
func listFilter(c echo.Context) (pipeline.ListFilter, error) {
	var f pipeline.ListFilter
	var fields []pipeline.FieldError
	q := c.QueryParams()
	for _, v := range q["status"] {
		for part := range strings.SplitSeq(v, ",") {
			st, err := pipeline.ParseStatus(strings.TrimSpace(part))
			if err != nil {
				fields = append(fields, pipeline.FieldError{Field: "status", Message: "must be one of pending, running, retry_wait, needs_review, succeeded, failed, canceled, dead_lettered"})
				break
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	f.Limit = 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			fields = append(fields, pipeline.FieldError{Field: "limit", Message: "must be a whole number from 1 to 500"})
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil {
			fields = append(fields, pipeline.FieldError{Field: "cursor", Message: "is not a cursor this API returned"})
		}
		f.After = cur
	}
	if len(fields) > 0 {
		return f, &pipeline.ValidationError{Fields: fields}
	}
	return f, nil
}

var cursorEncoding = base64.RawURLEncoding

func encodeCursor(c pipeline.Cursor) string {
	return cursorEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAtMS, 10) + "." + c.ID))
}

var errBadCursor = errors.New("bad cursor")

func decodeCursor(s string) (pipeline.Cursor, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil {
		return pipeline.Cursor{}, errBadCursor
	}
	msPart, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(msPart, 10, 64)
	if !ok || err != nil || n < 0 || id == "" || len(id) > maxJobKeyLen {
		return pipeline.Cursor{}, errBadCursor
	}
	return pipeline.Cursor{CreatedAtMS: n, ID: id}, nil
}

package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// checkReason returns what is wrong with an operator's reason, "" if
// nothing. The reason is shown to operators and, for a failed job, to the
// job's owner, so it is plain text on one line.
func checkReason(r string, required bool) string {
	switch {
	case r == "" && required:
		return "is required: say why"
	case len(r) > pipeline.MaxOperatorReason:
		return fmt.Sprintf("must be at most %d bytes", pipeline.MaxOperatorReason)
	case !utf8.ValidString(r):
		return "must be UTF-8 text"
	case strings.TrimSpace(r) != r:
		return "must not start or end with spaces"
	case strings.ContainsFunc(r, unicode.IsControl):
		return "must be one line of text without control characters"
	}
	return ""
}

// adminDiscard is POST /v1/admin/dead-letters/{id}/discard with {"reason":
// "..."}: the dead letter is settled without a redrive (audited as a
// dead_letter_discarded event on its job), the job stays dead_lettered and
// stops asking for an operator. A dead letter already redriven or
// discarded answers 409 dead_letter_settled.
func (s *Server) adminDiscard(c echo.Context) error {
	form, err := adminPost(c)
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if form {
		body.Reason = strings.TrimSpace(c.FormValue("reason"))
	} else if err := decodeStrict(c.Request().Body, &body); err != nil {
		return err
	}
	if msg := checkReason(body.Reason, true); msg != "" {
		return fieldError("reason", msg)
	}
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return pipeline.ErrNotFound
	}
	ctx := c.Request().Context()
	d, err := s.cfg.Store.GetDeadLetter(ctx, id)
	if err != nil {
		return err
	}
	if d.Settled() {
		return settledProblem(d)
	}
	d, err = s.cfg.Store.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: id, Operator: operatorOf(c), Reason: body.Reason})
	if err != nil {
		return err
	}
	s.log.Info("operator discard", "dead_letter", id, "job", d.JobID, "operator", operatorOf(c), "reason", body.Reason)
	if form {
		return backToPage(c, fmt.Sprintf("Dead letter %d: discarded.", id))
	}
	return c.JSON(http.StatusOK, s.deadLetter(ctx, d))
}

func settledProblem(d pipeline.DeadLetter) error {
	return problem(http.StatusConflict, "dead_letter_settled", fmt.Sprintf("dead letter %d was already %s", d.ID, d.SettledAs()))
}

// DeadLetterFilter selects open dead letters for a bulk redrive or
// discard. At least one field is required; older_than "0s" selects every
// open dead letter.
type DeadLetterFilter struct {
	// Reason is the dead letter's reason (unbound_version, poison, ...).
	Reason string `json:"reason,omitempty"`
	// Version is the job's workflow version (v1, v2, ...).
	Version string `json:"version,omitempty"`
	// Tenant is the job's tenant.
	Tenant string `json:"tenant,omitempty"`
	// OlderThan selects dead letters recorded longer ago than this: a Go
	// duration ("90m", "72h") or whole days ("7d").
	OlderThan string `json:"older_than,omitempty"`
}

// DeadLetterBulkRequest is the body of the bulk redrive and discard.
type DeadLetterBulkRequest struct {
	Filter DeadLetterFilter `json:"filter"`
	// Reason is why the dead letters are discarded (required by discard,
	// refused by redrive).
	Reason string `json:"reason,omitempty"`
	// Limit is how many dead letters one call acts on, oldest first (1 to
	// 500, default 100); More in the answer says whether to call again.
	Limit int `json:"limit,omitempty"`
	// DryRun reports what would be done and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// DeadLetterBulkResult answers a bulk redrive or discard: how many dead
// letters matched, how many were acted on, and each one's outcome.
type DeadLetterBulkResult struct {
	Action  string `json:"action"` // redrive | discard
	DryRun  bool   `json:"dry_run"`
	Matched int    `json:"matched"`
	// Done counts dead letters redriven or discarded (in a dry run, that
	// would be); Skipped the others, each with its code.
	Done    int                  `json:"done"`
	Skipped int                  `json:"skipped"`
	More    bool                 `json:"more"`
	Items   []DeadLetterBulkItem `json:"items"`
}

// DeadLetterBulkItem is one dead letter's outcome in a bulk call.
type DeadLetterBulkItem struct {
	DeadLetterID int64  `json:"dead_letter_id"`
	JobID        string `json:"job_id"` // the internal job key
	InstanceID   string `json:"instance_id"`
	Tenant       string `json:"tenant"`
	Version      string `json:"version"`
	Reason       string `json:"reason"`
	// Outcome is redriven, discarded, would_redrive, would_discard or
	// skipped.
	Outcome string `json:"outcome"`
	// Code says why a dead letter was skipped: version_unbound (redrive of
	// a version still not bound) or dead_letter_settled (settled by
	// someone else meanwhile).
	Code string `json:"code,omitempty"`
}

// Bulk outcomes.
const (
	outcomeRedriven     = "redriven"
	outcomeDiscarded    = "discarded"
	outcomeWouldRedrive = "would_redrive"
	outcomeWouldDiscard = "would_discard"
	outcomeSkipped      = "skipped"
)

// parseAge reads a Go duration or whole days ("7d").
func parseAge(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 36500 {
			return 0, errors.New("bad days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errors.New("bad duration")
	}
	return d, nil
}

// bulkRequest reads and checks a bulk body (JSON or the operations page's
// form) into a store filter.
func (s *Server) bulkRequest(c echo.Context, discard bool) (req DeadLetterBulkRequest, f pipeline.DeadLetterFilter, form bool, err error) {
	form, err = adminPost(c)
	if err != nil {
		return req, f, form, err
	}
	if form {
		req.Filter = DeadLetterFilter{Reason: c.FormValue("filter_reason"), Version: c.FormValue("filter_version"),
			Tenant: strings.TrimSpace(c.FormValue("filter_tenant")), OlderThan: strings.TrimSpace(c.FormValue("filter_older_than"))}
		req.Reason = strings.TrimSpace(c.FormValue("reason"))
		req.DryRun = c.FormValue("dry_run") == "true"
	} else if err := decodeStrict(c.Request().Body, &req); err != nil {
		return req, f, form, err
	}
	var fields []pipeline.FieldError
	bad := func(field, msg string) { fields = append(fields, pipeline.FieldError{Field: field, Message: msg}) }
	fl := req.Filter
	if fl.Reason != "" && !slices.Contains(deadLetterReasons, fl.Reason) {
		bad("filter.reason", "must be one of "+strings.Join(deadLetterReasons, ", "))
	}
	if fl.Version != "" {
		if err := routing.ValidateVersion(fl.Version); err != nil {
			bad("filter.version", "must be a workflow version such as v1 or v2")
		}
	}
	if len(fl.Tenant) > 64 || !printable(fl.Tenant) {
		bad("filter.tenant", "must be a tenant name (printable, at most 64 bytes)")
	}
	if fl.OlderThan != "" {
		age, err := parseAge(fl.OlderThan)
		if err != nil {
			bad("filter.older_than", `must be a duration such as "90m", "72h" or "7d"`)
		}
		f.OlderThan = s.cfg.Clock.Now().Add(-age)
	}
	if fl == (DeadLetterFilter{}) {
		bad("filter", `give at least one of reason, version, tenant, older_than (older_than "0s" selects every open dead letter)`)
	}
	if discard {
		if msg := checkReason(req.Reason, true); msg != "" {
			bad("reason", msg)
		}
	} else if req.Reason != "" {
		bad("reason", "is only for discard")
	}
	if req.Limit == 0 {
		req.Limit = 100
	}
	if req.Limit < 1 || req.Limit > MaxPageSize {
		bad("limit", "must be a whole number from 1 to 500")
	}
	if len(fields) > 0 {
		return req, f, form, &pipeline.ValidationError{Fields: fields}
	}
	f.Reason, f.Version, f.Tenant = fl.Reason, fl.Version, fl.Tenant
	return req, f, form, nil
}

// adminBulkRedrive is POST /v1/admin/dead-letters/redrive with a filter:
// every matching open dead letter (oldest first, up to limit) is redriven
// like one redriven by id; one whose version is still not bound is skipped
// (version_unbound). The answer says how many and which.
func (s *Server) adminBulkRedrive(c echo.Context) error { return s.adminBulk(c, false) }

// adminBulkDiscard is POST /v1/admin/dead-letters/discard with a filter and
// a reason: every matching open dead letter (oldest first, up to limit) is
// discarded like one discarded by id.
func (s *Server) adminBulkDiscard(c echo.Context) error { return s.adminBulk(c, true) }

func (s *Server) adminBulk(c echo.Context, discard bool) error {
	req, f, form, err := s.bulkRequest(c, discard)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	dls, more, err := s.cfg.Store.FindDeadLetters(ctx, f, req.Limit)
	if err != nil {
		return err
	}
	out := DeadLetterBulkResult{Action: "redrive", DryRun: req.DryRun, Matched: len(dls), More: more, Items: make([]DeadLetterBulkItem, 0, len(dls))}
	if discard {
		out.Action = "discard"
	}
	op := operatorOf(c)
	for _, d := range dls {
		it := DeadLetterBulkItem{DeadLetterID: d.ID, JobID: d.JobID, InstanceID: d.InstanceID, Tenant: d.Tenant, Version: d.Version, Reason: d.Reason}
		var err error
		switch {
		case discard && req.DryRun:
			it.Outcome = outcomeWouldDiscard
		case discard:
			if _, err = s.cfg.Store.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: d.ID, Operator: op, Reason: req.Reason}); err == nil {
				it.Outcome = outcomeDiscarded
			}
		default:
			route := s.route(ctx, d.InstanceID) // the version is the instance id's prefix
			switch {
			case route.DeadLetter:
				it.Outcome, it.Code = outcomeSkipped, "version_unbound"
			case req.DryRun:
				it.Outcome = outcomeWouldRedrive
			default:
				if _, err = s.cfg.Store.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: d.ID, Queue: route.Queue, Operator: op}); err == nil {
					it.Outcome = outcomeRedriven
				}
			}
		}
		if errors.Is(err, pipeline.ErrInvalidTransition) {
			// Settled by someone else since it was listed.
			it.Outcome, it.Code, err = outcomeSkipped, "dead_letter_settled", nil
		}
		if err != nil {
			return err
		}
		if it.Outcome == outcomeSkipped {
			out.Skipped++
		} else {
			out.Done++
		}
		out.Items = append(out.Items, it)
	}
	s.log.Info("operator bulk "+out.Action, "operator", op, "matched", out.Matched, "done", out.Done, "skipped", out.Skipped,
		"dry_run", req.DryRun, "reason", req.Reason)
	if form {
		verb := map[bool]string{false: "Redrove", true: "Discarded"}[discard]
		if req.DryRun {
			verb = map[bool]string{false: "Would redrive", true: "Would discard"}[discard]
		}
		msg := fmt.Sprintf("%s %d dead letters; skipped %d.", verb, out.Done, out.Skipped)
		if more {
			msg += " More match: repeat."
		}
		return backToPage(c, msg)
	}
	return c.JSON(http.StatusOK, out)
}

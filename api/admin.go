package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// AdminJob is a job that needs an operator, with what they need to decide.
// Operators address jobs by their internal key (docs/design.md §3): id and
// job_id are that key; instance_id is the id the tenant knows, and links
// are the tenant's paths.
type AdminJob struct {
	JobResource
	JobID      string              `json:"job_id"`
	InstanceID string              `json:"instance_id"`
	Tenant     string              `json:"tenant"`
	ErrorClass pipeline.ErrorClass `json:"error_class"`
	HasResult  bool                `json:"has_result"`
}

// AdminJobList is a page of jobs needing action.
type AdminJobList struct {
	Jobs       []AdminJob `json:"jobs"`
	NextCursor *string    `json:"next_cursor"`
}

// DeadLetter is the operator's view of a dead letter. Bound says whether
// the job's version is served now, i.e. whether a redrive can succeed.
type DeadLetter struct {
	ID int64 `json:"id"`
	// JobID is the job's internal key, InstanceID the id its tenant
	// knows it by.
	JobID           string     `json:"job_id"`
	InstanceID      string     `json:"instance_id"`
	Queue           string     `json:"queue"`
	Reason          string     `json:"reason"`
	Detail          string     `json:"detail"`
	DeadLetteredAt  time.Time  `json:"dead_lettered_at"`
	RedrivenAt      *time.Time `json:"redriven_at"`
	RedrivenToQueue string     `json:"redriven_to_queue,omitempty"`
	// DiscardedAt is when an operator discarded it (DiscardedBy, because of
	// DiscardReason); a dead letter is redriven or discarded, never both,
	// and its job stays dead_lettered after a discard.
	DiscardedAt   *time.Time `json:"discarded_at"`
	DiscardedBy   string     `json:"discarded_by,omitempty"`
	DiscardReason string     `json:"discard_reason,omitempty"`
	// Tenant and Version are the job's.
	Tenant  string `json:"tenant"`
	Version string `json:"version"`
	Bound   bool   `json:"bound"`
}

// DeadLetterList is a page of dead letters.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextAfter   *int64       `json:"next_after"`
}

func (s *Server) adminJob(c echo.Context, j pipeline.Job) AdminJob {
	r := s.resource(c, j, true)
	r.ID = j.ID
	return AdminJob{JobResource: r, JobID: j.ID, InstanceID: j.InstanceID, Tenant: j.Tenant, ErrorClass: j.LastErrorClass, HasResult: j.ResultKey != ""}
}

func (s *Server) deadLetter(ctx context.Context, d pipeline.DeadLetter) DeadLetter {
	return DeadLetter{ID: d.ID, JobID: d.JobID, InstanceID: d.InstanceID, Queue: d.Queue, Reason: d.Reason, Detail: d.Detail,
		DeadLetteredAt: d.DeadLetteredAt, RedrivenAt: timePtr(d.RedrivenAt), RedrivenToQueue: d.RedrivenToQueue,
		DiscardedAt: timePtr(d.DiscardedAt), DiscardedBy: d.DiscardedBy, DiscardReason: d.DiscardReason,
		Tenant: d.Tenant, Version: d.Version,
		Bound: !s.route(ctx, d.InstanceID).DeadLetter}
}

// adminJobs is GET /v1/admin/jobs: jobs of every tenant that need a human
// (needs_review, and dead letters that asked for one), newest first.
func (s *Server) adminJobs(c echo.Context) error {
	f, err := listFilter(c)
	if err != nil {
		return err
	}
	f.AllTenants, f.RequiresAction = true, true
	jobs, next, err := s.cfg.Store.ListJobs(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := AdminJobList{Jobs: make([]AdminJob, 0, len(jobs))}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, s.adminJob(c, j))
	}
	if next.ID != "" {
		cur := encodeCursor(next)
		out.NextCursor = &cur
	}
	return c.JSON(http.StatusOK, out)
}

// adminPost checks an operator POST's content type: a form from the
// operations page (its CSRF token was checked by requireAdmin) or JSON.
// Anything else is refused, because text/plain and multipart bodies are what
// a cross-site page can make a browser send, Basic credentials included,
// without a CORS preflight.
func adminPost(c echo.Context) (form bool, err error) {
	if isForm(c.Request()) {
		return true, nil
	}
	return false, requireJSON(c.Request())
}

// bodyless reports an operator POST without a body and without a
// Content-Type (curl -X POST), which an endpoint whose body is optional
// accepts. A browser can send such a request cross-site without a CORS
// preflight, carrying the operator's Basic credentials, so one whose Origin
// is another site's is not bodyless: it must be the CSRF-checked form.
func bodyless(r *http.Request) bool {
	if r.ContentLength != 0 || r.Header.Get(echo.HeaderContentType) != "" || len(r.TransferEncoding) > 0 {
		return false
	}
	if o := r.Header.Get(echo.HeaderOrigin); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	return true
}

// adminDecide is POST /v1/admin/jobs/{id}/decision with {"decision":
// "retry"|"fail", "reason": optional text} for a job in needs_review (409
// otherwise). The decision, the operator and the reason are recorded on the
// job and in its decision event.
func (s *Server) adminDecide(c echo.Context) error {
	form, err := adminPost(c)
	if err != nil {
		return err
	}
	var body struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	if form {
		body.Decision, body.Reason = c.FormValue("decision"), strings.TrimSpace(c.FormValue("reason"))
	} else if err := decodeStrict(c.Request().Body, &body); err != nil {
		return err
	}
	d := pipeline.ReviewDecision(body.Decision)
	var fields []pipeline.FieldError
	if d != pipeline.DecisionRetry && d != pipeline.DecisionFail {
		fields = append(fields, pipeline.FieldError{Field: "decision", Message: "must be retry or fail"})
	}
	if msg := checkReason(body.Reason, false); msg != "" {
		fields = append(fields, pipeline.FieldError{Field: "reason", Message: msg})
	}
	if len(fields) > 0 {
		return &pipeline.ValidationError{Fields: fields}
	}
	id := c.Param("id")
	if id == "" || len(id) > maxJobKeyLen {
		return pipeline.ErrNotFound
	}
	j, err := s.cfg.Store.Decide(c.Request().Context(), &pipeline.DecideParams{JobID: id, Decision: d, Operator: operatorOf(c), Reason: body.Reason})
	if err != nil {
		return err
	}
	s.log.Info("operator decision", "job", j.ID, "decision", d, "operator", operatorOf(c), "reason", body.Reason)
	if form {
		return backToPage(c, fmt.Sprintf("Job %s: %s recorded.", j.ID, d))
	}
	return c.JSON(http.StatusOK, s.adminJob(c, j))
}

// adminDeadLetters is GET /v1/admin/dead-letters?include_redriven=&after=&limit=.
func (s *Server) adminDeadLetters(c echo.Context) error {
	q := c.QueryParams()
	var fields []pipeline.FieldError
	incl := false
	if v := q.Get("include_redriven"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fields = append(fields, pipeline.FieldError{Field: "include_redriven", Message: "must be true or false"})
		}
		incl = b
	}
	after := int64(0)
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			fields = append(fields, pipeline.FieldError{Field: "after", Message: "must be a dead letter id"})
		}
		after = n
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			fields = append(fields, pipeline.FieldError{Field: "limit", Message: "must be a whole number from 1 to 500"})
		}
		limit = n
	}
	if len(fields) > 0 {
		return &pipeline.ValidationError{Fields: fields}
	}
	dls, err := s.cfg.Store.ListDeadLetters(c.Request().Context(), incl, after, limit)
	if err != nil {
		return err
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(dls))}
	for _, d := range dls {
		out.DeadLetters = append(out.DeadLetters, s.deadLetter(c.Request().Context(), d))
	}
	if len(dls) == limit {
		last := dls[len(dls)-1].ID
		out.NextAfter = &last
	}
	return c.JSON(http.StatusOK, out)
}

// adminRedrive is POST /v1/admin/dead-letters/{id}/redrive. The job's id is
// routed again, so it can only ever go back to its own version's queue; a
// version this deployment still does not serve is refused (409
// version_unbound) and nothing changes.
func (s *Server) adminRedrive(c echo.Context) error {
	// The body, if any, is ignored: the dead letter says everything. So
	// none at all, without a Content-Type, is fine too, unless a browser
	// sent it from another origin (see bodyless).
	form := false
	if !bodyless(c.Request()) {
		var err error
		if form, err = adminPost(c); err != nil {
			return err
		}
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
	route := s.route(ctx, d.InstanceID)
	if route.DeadLetter {
		return problem(http.StatusConflict, "version_unbound",
			"the job's workflow version is not bound in this deployment (EDGEPIPE_BINDINGS); bind it, then redrive")
	}
	j, err := s.cfg.Store.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: id, Queue: route.Queue, Operator: operatorOf(c)})
	if err != nil {
		return err
	}
	s.log.Info("operator redrive", "dead_letter", id, "job", j.ID, "queue", route.Queue, "operator", operatorOf(c))
	if form {
		return backToPage(c, fmt.Sprintf("Dead letter %d: job %s redriven to %s.", id, j.ID, route.Queue))
	}
	return c.JSON(http.StatusOK, s.adminJob(c, j))
}

// decodeStrict decodes one JSON object, refusing unknown fields and
// trailing data.
func decodeStrict(r io.Reader, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeStrictJSON(b, v)
}

// backToPage answers a form post with a redirect to the operations page,
// which shows msg.
func backToPage(c echo.Context, msg string) error {
	return c.Redirect(http.StatusSeeOther, "/admin?done="+url.QueryEscape(msg))
}

// doneMessage matches exactly the messages backToPage is given (job ids
// there are internal keys: an instance id, maybe with .t and a tenant hash).
var doneMessage = regexp.MustCompile(`^(Job [A-Za-z0-9_-]{1,64}(\.t[0-9a-f]{16})?: (retry|fail) recorded\.` +
	`|Dead letter [0-9]{1,19}: job [A-Za-z0-9_-]{1,64}(\.t[0-9a-f]{16})? redriven to [A-Za-z0-9_-]{1,80}\.` +
	`|Dead letter [0-9]{1,19}: discarded\.` +
	`|(Redrove|Discarded|Would redrive|Would discard) [0-9]{1,4} dead letters; skipped [0-9]{1,4}\.( More match: repeat\.)?)$`)

// adminPageData feeds templates/admin.html.
type adminPageData struct {
	Now         time.Time
	Done        string
	CSRF        string
	Counts      []statusCount
	NeedYou     int
	Jobs        []AdminJob
	MoreJobs    bool
	DeadLetters []DeadLetter
	MoreDL      bool
	// Settled are recently redriven or discarded dead letters.
	Settled []DeadLetter
	// Decisions are the latest operator decisions.
	Decisions []AdminJob
	Reasons   []string
	Bindings  string
	// Filter is the job list's filter as given; Listed the jobs it
	// selects (all tenants, newest first), MoreListed whether more match.
	Filter     adminFilter
	Statuses   []pipeline.Status
	Listed     []AdminJob
	MoreListed bool
	// Proofs are the probes' latest proofs; ProofMaxAge is how long one
	// is trusted; ProofsErr says they could not be read.
	Proofs      []proofRow
	ProofMaxAge time.Duration
	ProofsErr   bool
	// Operations say under which contract each routed operation runs.
	Operations []operationRow
}

// operationRow is a routed operation and the contract it runs under now.
type operationRow struct {
	RoutedOperation
	Effective pipeline.Contract
	Why       string
	Unproven  bool
}

// proofRow is one proof on the operations page: Trusted when it lets its
// operation run as idempotent_verified now.
type proofRow struct {
	pipeline.Proof
	Trusted bool
}

// adminFilter is the operations page's job filter, as query parameters.
type adminFilter struct {
	Tenant, Status, Version, OlderThan, NewerThan string
}

// listedRows is how many jobs the page's filtered list shows.
const listedRows = 100

// pageFilter reads the operations page's job filter: tenant, status,
// version, and the age bounds older_than and newer_than (a Go duration or
// whole days, "7d"). Every field is optional; all given must match.
func pageFilter(c echo.Context, now time.Time) (pipeline.ListFilter, adminFilter, error) {
	q := c.QueryParams()
	af := adminFilter{Tenant: strings.TrimSpace(q.Get("tenant")), Status: q.Get("status"), Version: strings.TrimSpace(q.Get("version")),
		OlderThan: strings.TrimSpace(q.Get("older_than")), NewerThan: strings.TrimSpace(q.Get("newer_than"))}
	f := pipeline.ListFilter{AllTenants: true, Limit: listedRows}
	var fields []pipeline.FieldError
	if af.Tenant != "" {
		if len(af.Tenant) > 200 || !printable(af.Tenant) {
			fields = append(fields, pipeline.FieldError{Field: "tenant", Message: "must be a tenant name"})
		}
		f.AllTenants, f.Tenant = false, af.Tenant
	}
	if af.Status != "" {
		st, err := pipeline.ParseStatus(af.Status)
		if err != nil {
			fields = append(fields, pipeline.FieldError{Field: "status", Message: "must be one of pending, running, retry_wait, needs_review, succeeded, failed, canceled, dead_lettered"})
		}
		f.Statuses = []pipeline.Status{st}
	}
	if af.Version != "" {
		if err := routing.ValidateVersion(af.Version); err != nil {
			fields = append(fields, pipeline.FieldError{Field: "version", Message: "must be a workflow version such as v1"})
		}
		f.Version = af.Version
	}
	for _, b := range []struct {
		field, v string
		set      *time.Time
	}{{"older_than", af.OlderThan, &f.CreatedBefore}, {"newer_than", af.NewerThan, &f.CreatedAfter}} {
		if b.v == "" {
			continue
		}
		age, err := parseAge(b.v)
		if err != nil {
			fields = append(fields, pipeline.FieldError{Field: b.field, Message: `must be a duration such as "90m", "72h" or "7d"`})
			continue
		}
		*b.set = now.Add(-age)
	}
	if len(fields) > 0 {
		return f, af, &pipeline.ValidationError{Fields: fields}
	}
	return f, af, nil
}

type statusCount struct {
	Status pipeline.Status
	N      int
	Alert  bool
}

// adminPage is GET /admin: one server-rendered page showing what needs a
// human — jobs in needs_review with retry/fail buttons, open dead letters
// with redrive buttons — under the counts by status, and below them the
// jobs of every tenant filtered by tenant, status, version and age, each
// linked to its story (GET /admin/jobs/{id}).
func (s *Server) adminPage(c echo.Context) error {
	ctx := c.Request().Context()
	filter, af, err := pageFilter(c, s.cfg.Clock.Now())
	if err != nil {
		return err
	}
	counts, err := s.cfg.Store.CountByStatus(ctx)
	if err != nil {
		return err
	}
	const pageRows = 200
	jobs, next, err := s.cfg.Store.ListJobs(ctx, pipeline.ListFilter{AllTenants: true, RequiresAction: true, Limit: pageRows})
	if err != nil {
		return err
	}
	dls, err := s.cfg.Store.ListDeadLetters(ctx, false, 0, pageRows)
	if err != nil {
		return err
	}
	done := c.QueryParam("done")
	if !doneMessage.MatchString(done) {
		done = "" // only messages backToPage wrote: a crafted link cannot put words on the page
	}
	data := adminPageData{Now: s.cfg.Clock.Now(), Done: done, CSRF: s.csrf,
		MoreJobs: next.ID != "", MoreDL: len(dls) == pageRows, Bindings: s.cfg.Router.Config().Bindings.String()}
	for _, st := range pipeline.AllStatuses {
		alert := (st == pipeline.StatusNeedsReview || st == pipeline.StatusDeadLettered) && counts[st] > 0
		data.Counts = append(data.Counts, statusCount{Status: st, N: counts[st], Alert: alert})
	}
	for _, j := range jobs {
		// Dead-lettered jobs are acted on through their dead letter below.
		if j.Status == pipeline.StatusDeadLettered {
			continue
		}
		data.Jobs = append(data.Jobs, s.adminJob(c, j))
	}
	for _, d := range dls {
		data.DeadLetters = append(data.DeadLetters, s.deadLetter(c.Request().Context(), d))
	}
	data.NeedYou = len(data.Jobs) + len(data.DeadLetters)
	const recentRows = 20
	all, err := s.cfg.Store.ListDeadLetters(ctx, true, 0, pageRows)
	if err != nil {
		return err
	}
	for _, d := range all {
		if d.Settled() && len(data.Settled) < recentRows {
			data.Settled = append(data.Settled, s.deadLetter(ctx, d))
		}
	}
	decided, err := s.cfg.Store.RecentDecisions(ctx, recentRows)
	if err != nil {
		return err
	}
	for _, j := range decided {
		data.Decisions = append(data.Decisions, s.adminJob(c, j))
	}
	data.Reasons = deadLetterReasons
	data.Filter, data.Statuses = af, pipeline.AllStatuses
	listed, nextListed, err := s.cfg.Store.ListJobs(ctx, filter)
	if err != nil {
		return err
	}
	for _, j := range listed {
		data.Listed = append(data.Listed, s.adminJob(c, j))
	}
	data.MoreListed = nextListed.ID != ""
	s.proofSection(ctx, &data)
	return s.renderPage(c, "admin.html", data)
}

// proofSection fills the page's provider contracts: the contract each
// routed operation runs under now and the latest proofs. Proofs that
// cannot be read cost this section, not the page: the operator still
// needs the rest of it.
func (s *Server) proofSection(ctx context.Context, data *adminPageData) {
	data.ProofMaxAge = cmp.Or(s.cfg.ProofMaxAge, pipeline.DefaultProofMaxAge)
	for _, o := range s.cfg.Operations {
		row := operationRow{RoutedOperation: o, Effective: o.Declared, Why: "declared"}
		if o.Declared == pipeline.ContractIdempotentVerified {
			latest, err := s.cfg.Store.LatestProof(ctx, &pipeline.LatestProofParams{Provider: o.Provider, Op: o.Op, Model: o.Model, Endpoint: o.Endpoint})
			if err != nil && !errors.Is(err, pipeline.ErrNotFound) {
				s.log.Warn("operations page: proofs unreadable", "err", err)
				data.ProofsErr = true
				row.Effective, row.Why = pipeline.ProofFallback, "proofs unreadable"
			} else {
				row.Effective, row.Why = pipeline.EffectiveContract(o.Declared, latest, err == nil, data.Now, data.ProofMaxAge)
			}
			row.Unproven = row.Effective != o.Declared
		}
		data.Operations = append(data.Operations, row)
	}
	proofs, err := s.cfg.Store.ListProofs(ctx, &pipeline.ListProofsParams{})
	if err != nil {
		s.log.Warn("operations page: proofs unreadable", "err", err)
		data.ProofsErr = true
		return
	}
	for _, p := range proofs {
		data.Proofs = append(data.Proofs, proofRow{Proof: p, Trusted: p.Fresh(data.Now, data.ProofMaxAge)})
	}
}

var templateFuncs = template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			return "in " + (-d).String()
		}
		return d.String() + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"detail": detailText,
	// took is how long a call took (its finish after its intent), "—"
	// while it has not finished.
	"took": func(start time.Time, end *time.Time) string {
		if end == nil {
			return "—"
		}
		return end.Sub(start).Round(time.Millisecond).String()
	},
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
}

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
)

// AdminJobStory is one job's whole story for an operator (GET
// /v1/admin/jobs/{id} and the page GET /admin/jobs/{id}): the job, its
// attempts, every provider call with its contract and billing status, its
// objects, the operators' decisions, and the event log they are read from.
type AdminJobStory struct {
	Job AdminJob `json:"job"`
	// Queue is the job's queue (empty for a job dead-lettered at submission).
	Queue     string          `json:"queue"`
	Attempts  []StoryAttempt  `json:"attempts"`
	Calls     []StoryCall     `json:"provider_calls"`
	Assets    []StoryAsset    `json:"assets"`
	Claims    []StoryClaim    `json:"claims"`
	Decisions []StoryDecision `json:"decisions"`
	Events    []StoryEvent    `json:"events"`
	// MoreEvents says the job has more events than are shown (the first
	// pipeline.DefaultStoryEvents are); attempts and decisions are read
	// from the events shown.
	MoreEvents bool `json:"more_events"`
}

// StoryAttempt is one attempt, reconstructed from the job's events: the
// claim that started it (worker, attempt number), the stage events that
// name its workflow version, and the status event that ended it.
type StoryAttempt struct {
	Number int    `json:"number"`
	ID     string `json:"id"`
	// Worker is the lease owner that claimed the job.
	Worker    string     `json:"worker"`
	Version   string     `json:"version"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// LeaseExpiresAt is the live attempt's lease; null once it ended.
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// Outcome is the status the attempt ended in (retry_wait,
	// needs_review, succeeded, failed, canceled, dead_lettered, or pending
	// when its worker gave the job back); running while it holds a live
	// lease; lease_expired when its lease ran out and nobody took the job
	// over yet; lease_lost when another attempt (or the queue's poison
	// rule) took the job over without this one finishing; unknown when
	// the page shows only the job's first events and this attempt's end
	// is past them.
	Outcome   string `json:"outcome"`
	ErrorCode string `json:"error_code,omitempty"`
	// ProviderCalls counts the audit rows this attempt wrote.
	ProviderCalls int `json:"provider_calls"`
}

// Attempt outcomes that are not statuses.
const (
	outcomeRunning      = "running"
	outcomeLeaseExpired = "lease_expired"
	outcomeLeaseLost    = "lease_lost"
	outcomeUnknown      = "unknown"
)

// StoryCall is one row of the billing audit trail.
type StoryCall struct {
	ID       int64             `json:"id"`
	Scene    int               `json:"scene"`
	Op       string            `json:"op"`
	Provider string            `json:"provider"`
	Model    string            `json:"model"`
	Contract pipeline.Contract `json:"contract"`
	// Status is the row's status: intent, succeeded, not_sent, failed,
	// ambiguous or waived.
	Status string `json:"status"`
	// Billing says what the status means for the bill: billed
	// (succeeded), maybe_billed (intent or ambiguous: the provider may
	// have processed it), not_billed (failed or not_sent), or waived (an
	// operator's retry accepted paying for it again).
	Billing        string     `json:"billing"`
	AttemptID      string     `json:"attempt_id"`
	HTTPStatus     int        `json:"http_status"`
	ErrorCode      string     `json:"error_code"`
	ExternalJobID  string     `json:"external_job_id"`
	IdempotencyKey string     `json:"idempotency_key"`
	IntendedAt     time.Time  `json:"intended_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	StagedKey      string     `json:"staged_key"`
}

// Billing statuses of a provider call.
const (
	billingBilled      = "billed"
	billingMaybeBilled = "maybe_billed"
	billingNotBilled   = "not_billed"
	billingWaived      = "waived"
)

func billingOf(status string) string {
	switch status {
	case pipeline.CallSucceeded:
		return billingBilled
	case pipeline.CallWaived:
		return billingWaived
	case pipeline.CallFailed, pipeline.CallNotSent:
		return billingNotBilled
	}
	return billingMaybeBilled
}

// StoryAsset is a stored object of the job.
type StoryAsset struct {
	Key              string    `json:"key"`
	Kind             string    `json:"kind"`
	SizeBytes        int64     `json:"size_bytes"`
	SHA256           string    `json:"sha256"`
	ContentType      string    `json:"content_type"`
	CreatedByAttempt string    `json:"created_by_attempt"`
	CreatedAt        time.Time `json:"created_at"`
}

// StoryClaim is an open claim of an attempt on an object key (writing, or
// deleting while an abandoned object is removed).
type StoryClaim struct {
	Key       string    `json:"key"`
	AttemptID string    `json:"attempt_id"`
	State     string    `json:"state"`
	ClaimedAt time.Time `json:"claimed_at"`
}

// StoryDecision is an operator's action on the job: a decision on a
// needs_review job (retry or fail), a redrive or a discard of its dead
// letter.
type StoryDecision struct {
	Action   string    `json:"action"`
	Operator string    `json:"operator"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	EventID  int64     `json:"event_id"`
	// Note says what else the action did or concerned: the dead letter
	// and queue of a redrive or discard.
	Note string `json:"note,omitempty"`
	// WaivedCalls are the provider calls a retry accepted paying for
	// again (their call_waived events).
	WaivedCalls []int64 `json:"waived_calls"`
}

// StoryEvent is one row of the job's event log, with its whole detail
// (operators see the worker and operator names the public stream hides).
type StoryEvent struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Kind      string          `json:"kind"`
	From      pipeline.Status `json:"from,omitempty"`
	To        pipeline.Status `json:"to,omitempty"`
	AttemptID string          `json:"attempt_id,omitempty"`
	Detail    map[string]any  `json:"detail"`
}

// jobStory reads job id's story and builds the operator's view of it.
func (s *Server) jobStory(c echo.Context) (AdminJobStory, error) {
	id := c.Param("id")
	if id == "" || len(id) > maxJobKeyLen {
		return AdminJobStory{}, pipeline.ErrNotFound
	}
	st, err := s.cfg.Store.JobStory(c.Request().Context(), &pipeline.JobStoryParams{JobID: id})
	if err != nil {
		return AdminJobStory{}, err
	}
	out := AdminJobStory{Job: s.adminJob(c, st.Job), Queue: st.Job.Queue, MoreEvents: st.MoreEvents,
		Attempts: []StoryAttempt{}, Calls: []StoryCall{}, Assets: []StoryAsset{}, Claims: []StoryClaim{},
		Decisions: []StoryDecision{}, Events: make([]StoryEvent, 0, len(st.Events))}
	for _, e := range st.Events {
		d := map[string]any{}
		_ = json.Unmarshal(e.Detail, &d) // written by the store as a JSON object
		out.Events = append(out.Events, StoryEvent{ID: e.ID, At: e.At, Kind: e.Kind, From: e.FromStatus, To: e.ToStatus, AttemptID: e.AttemptID, Detail: d})
	}
	out.Attempts = attemptsOf(st.Job, out.Events, st.MoreEvents, s.cfg.Clock.Now())
	out.Decisions = decisionsOf(out.Events)
	for _, k := range st.Calls {
		out.Calls = append(out.Calls, StoryCall{ID: k.ID, Scene: k.Scene, Op: k.Op, Provider: k.Provider, Model: k.Model,
			Contract: k.Contract, Status: k.Status, Billing: billingOf(k.Status), AttemptID: k.AttemptID,
			HTTPStatus: k.HTTPStatus, ErrorCode: k.ErrorCode, ExternalJobID: k.ExternalJobID, IdempotencyKey: k.IdempotencyKey,
			IntendedAt: k.IntendedAt, FinishedAt: timePtr(k.FinishedAt), StagedKey: k.StagedKey})
		for i := range out.Attempts {
			if out.Attempts[i].ID == k.AttemptID {
				out.Attempts[i].ProviderCalls++
			}
		}
	}
	for _, a := range st.Assets {
		out.Assets = append(out.Assets, StoryAsset{Key: a.Key, Kind: a.Kind, SizeBytes: a.SizeBytes, SHA256: a.SHA256,
			ContentType: a.ContentType, CreatedByAttempt: a.CreatedByAttempt, CreatedAt: a.CreatedAt})
	}
	for _, cl := range st.Claims {
		out.Claims = append(out.Claims, StoryClaim{Key: cl.Key, AttemptID: cl.AttemptID, State: cl.State, ClaimedAt: cl.ClaimedAt})
	}
	return out, nil
}

// attemptsOf reconstructs the attempts from the events: a status event to
// running with an attempt id starts one (its detail names the worker and
// the attempt number), a stage_started event names its workflow version,
// and a status event out of running ends it — with its own attempt id, in
// the status it reached; without, or by another attempt's claim, as
// lease_lost.
//
// With truncated (only the job's first events are shown), an attempt still
// open at the last shown event ended after it, unless the job is running on
// it now: its outcome is unknown, never "running".
func attemptsOf(j pipeline.Job, evs []StoryEvent, truncated bool, now time.Time) []StoryAttempt {
	out := []StoryAttempt{}
	open := -1 // index of the attempt that has not ended
	end := func(at time.Time, outcome, code string) {
		if open < 0 {
			return
		}
		a := &out[open]
		a.EndedAt, a.Outcome, a.ErrorCode = &at, outcome, code
		open = -1
	}
	for _, e := range evs {
		switch {
		case e.Kind == pipeline.EventStatus && e.To == pipeline.StatusRunning && e.AttemptID != "":
			end(e.At, outcomeLeaseLost, "") // a takeover of an expired lease
			out = append(out, StoryAttempt{Number: intOf(e.Detail["attempt"]), ID: e.AttemptID, Worker: stringOf(e.Detail["owner"]),
				Version: j.Version, StartedAt: e.At, Outcome: outcomeRunning})
			open = len(out) - 1
		case e.Kind == pipeline.EventStageStarted && open >= 0 && e.AttemptID == out[open].ID:
			if v := stringOf(e.Detail["workflow"]); v != "" {
				out[open].Version = v
			}
		case e.Kind == pipeline.EventStatus && e.From == pipeline.StatusRunning && e.To != pipeline.StatusRunning:
			if open >= 0 && e.AttemptID == out[open].ID {
				end(e.At, string(e.To), stringOf(e.Detail["error_code"]))
			} else {
				end(e.At, outcomeLeaseLost, "")
			}
		}
	}
	if open >= 0 {
		a := &out[open]
		switch {
		case j.Status == pipeline.StatusRunning && j.AttemptID == a.ID:
			a.LeaseExpiresAt = timePtr(j.LeaseExpiresAt)
			if !j.LeaseExpiresAt.After(now) {
				a.Outcome = outcomeLeaseExpired
			}
		case truncated:
			a.Outcome = outcomeUnknown
		}
	}
	return out
}

// decisionsOf lists the operators' actions recorded in the events.
func decisionsOf(evs []StoryEvent) []StoryDecision {
	out := []StoryDecision{}
	for _, e := range evs {
		d := StoryDecision{Operator: stringOf(e.Detail["operator"]), At: e.At, EventID: e.ID, WaivedCalls: []int64{}}
		switch e.Kind {
		case pipeline.EventDecision:
			d.Action, d.Reason = stringOf(e.Detail["decision"]), stringOf(e.Detail["reason"])
		case pipeline.EventRedriven:
			d.Action = "redrive"
			d.Note = fmt.Sprintf("dead letter %d (%s) redriven to %s", intOf(e.Detail["dead_letter_id"]),
				stringOf(e.Detail["reason"]), stringOf(e.Detail["queue"]))
		case pipeline.EventDeadLetterDiscarded:
			d.Action, d.Reason = "discard", stringOf(e.Detail["reason"])
			d.Note = fmt.Sprintf("dead letter %d (%s) discarded", intOf(e.Detail["dead_letter_id"]), stringOf(e.Detail["dead_letter_reason"]))
		case pipeline.EventCallWaived:
			// Written by the retry decision just before, in its transaction.
			if n := len(out); n > 0 && out[n-1].Action == string(pipeline.DecisionRetry) {
				out[n-1].WaivedCalls = append(out[n-1].WaivedCalls, int64(intOf(e.Detail["call_id"])))
			}
			continue
		default:
			continue
		}
		out = append(out, d)
	}
	return out
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

// intOf reads a JSON number (decoded as float64).
func intOf(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// adminJobStoryJSON is GET /v1/admin/jobs/{id}.
func (s *Server) adminJobStoryJSON(c echo.Context) error {
	st, err := s.jobStory(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, st)
}

// storyPageData feeds templates/story.html.
type storyPageData struct {
	Now   time.Time
	CSRF  string
	Story AdminJobStory
}

// adminStoryPage is GET /admin/jobs/{id}: the job's story as a
// server-rendered page (no JavaScript, nothing loaded from elsewhere).
func (s *Server) adminStoryPage(c echo.Context) error {
	st, err := s.jobStory(c)
	if err != nil {
		return err
	}
	return s.renderPage(c, "story.html", storyPageData{Now: s.cfg.Clock.Now(), CSRF: s.csrf, Story: st})
}

// renderPage executes one of the operator page templates and answers with
// it, with the headers every operator page carries.
func (s *Server) renderPage(c echo.Context, name string, data any) error {
	var buf bytes.Buffer
	if err := s.pages.ExecuteTemplate(&buf, name, data); err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// detailText shows an event's detail as key=value pairs in key order.
func detailText(d map[string]any) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		// The template escapes the text; JSON's own HTML escaping would
		// show \u003c for every <.
		var v bytes.Buffer
		enc := json.NewEncoder(&v)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(d[k])
		b.WriteString(k + "=" + strings.Trim(strings.TrimSpace(v.String()), `"`))
	}
	return b.String()
}

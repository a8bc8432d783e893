package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"edgepipe/pipeline"
)

// settle moves jobID from status `from` to o.Status inside tx: the one place a
// status is written after a job exists. It checks the transition table, makes
// the UPDATE conditional on the status it read (and on attemptID when the
// caller is an attempt), appends the event, keeps the queue message in step
// and writes the webhook delivery.
func settle(ctx context.Context, tx *wtx, now int64, jobID string, from pipeline.Status, attemptID string, o pipeline.Outcome, detail map[string]any) error {
	if err := pipeline.CheckTransition(from, o.Status); err != nil {
		return err
	}
	// The conditional UPDATE is the transaction's first write, so a fenced
	// or raced caller fails having written nothing (FinishMany relies on it).
	q := `UPDATE jobs SET status = ?, status_changed_at = ?, updated_at = ?, next_run_at = ?,
		lease_owner = NULL, lease_expires_at = NULL, requires_action = ?,
		last_error_class = ?, last_error_code = ?, last_error_message = ?,
		result_key = coalesce(?, result_key),
		infra_failures = infra_failures + ?,
		infra_since = CASE WHEN ? = 1 THEN coalesce(infra_since, ?) WHEN ? = 1 THEN infra_since ELSE NULL END
		WHERE id = ? AND status = ?`
	// An infrastructure failure counts in infra_failures and starts (or
	// continues) the run measured by infra_since; a release (a worker
	// stopping gives the job back) leaves the run as it is, so restarts
	// during an outage cannot stretch the window; any other outcome ends
	// the run (docs/design.md §6).
	release := from == pipeline.StatusRunning && o.Status == pipeline.StatusPending
	args := []any{string(o.Status), now, now, nullMS(o.NextRunAt), boolInt(o.RequiresAction),
		string(o.ErrorClass), o.ErrorCode, o.ErrorMessage, nullString(o.ResultKey),
		boolInt(o.Infra), boolInt(o.Infra), now, boolInt(release), jobID, string(from)}
	if attemptID != "" {
		q += ` AND attempt_id = ? AND lease_expires_at > ?`
		args = append(args, attemptID, now)
	}
	var queue string
	hook := webhookJob{ID: jobID}
	err := tx.QueryRowContext(ctx, q+` RETURNING queue, webhook_url, instance_id`, args...).Scan(&queue, &hook.URL, &hook.InstanceID)
	if errors.Is(err, sql.ErrNoRows) {
		return pipeline.SettleRefused(jobID, from, attemptID)
	}
	if err != nil {
		return err
	}
	evID, err := appendEvent(ctx, tx, now, jobID, pipeline.EventStatus, from, o.Status, attemptID, o.EventDetail(detail))
	if err != nil {
		return err
	}
	switch o.Status {
	case pipeline.StatusRetryWait:
		err = ensureMessage(ctx, tx, now, queue, jobID, ms(o.NextRunAt), false)
	case pipeline.StatusPending:
		err = ensureMessage(ctx, tx, now, queue, jobID, now, from == pipeline.StatusRunning)
	case pipeline.StatusDeadLettered:
		if err = deleteMessages(ctx, tx, jobID); err == nil && attemptID != "" {
			// An attempt that gives up (retries exhausted) records the dead
			// letter here; poison records its own row with more detail.
			_, err = insertDeadLetter(ctx, tx, now, jobID, queue, o.Reason, o.ErrorCode)
		}
	default:
		if o.Status.Settled() {
			err = deleteMessages(ctx, tx, jobID)
		}
	}
	if err != nil {
		return err
	}
	return enqueueWebhook(ctx, tx, now, hook, evID, o.Status)
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Finish ends the attempt holding lease with outcome o: the job's status
// changes, its message is acked (settled), rescheduled (retry_wait) or made
// visible again (pending), and a dead letter is recorded for dead_lettered,
// all in one transaction. A lost lease is a *pipeline.FenceError and nothing
// is written.
func (s *Store) Finish(ctx context.Context, lease pipeline.Lease, o pipeline.Outcome) error {
	return s.inTx(ctx, func(tx *wtx) error { return s.finishTx(ctx, tx, s.now(), lease, o) })
}

func (s *Store) finishTx(ctx context.Context, tx *wtx, now int64, lease pipeline.Lease, o pipeline.Outcome) error {
	if o.Status == pipeline.StatusRetryWait && o.NextRunAt.IsZero() {
		return fmt.Errorf("%w: retry_wait needs a next run time", pipeline.ErrInvalidInput)
	}
	if o.Status == pipeline.StatusDeadLettered {
		if o.Reason == "" {
			return fmt.Errorf("%w: dead_lettered needs a reason", pipeline.ErrInvalidInput)
		}
		if o.ErrorMessage == "" {
			o.ErrorMessage = pipeline.DeadLetterMessage(o.Reason)
		}
		if o.ErrorCode == "" {
			o.ErrorCode = o.Reason
		}
	}
	return settle(ctx, tx, now, lease.JobID, pipeline.StatusRunning, lease.AttemptID, o, map[string]any{"attempt": lease.Attempt})
}

// Finished pairs a lease with its outcome for FinishMany.
type Finished = pipeline.Finished

// FinishMany finishes several attempts in one transaction (a batch completer,
// like River's). Each result is independent: errs[i] is the error of fs[i]
// (a fenced-out attempt does not stop the others). The returned error is for
// the transaction as a whole.
func (s *Store) FinishMany(ctx context.Context, fs []Finished) (errs []error, err error) {
	err = s.inTx(ctx, func(tx *wtx) error {
		errs = make([]error, len(fs))
		now := s.now()
		var bulk []int
		for i, f := range fs {
			if bulkSettles(f.Outcome) {
				bulk = append(bulk, i)
				continue
			}
			// A refused item has written nothing (settle's first write is
			// its conditional UPDATE), so no savepoint is needed.
			ferr := s.finishTx(ctx, tx, now, f.Lease, f.Outcome)
			var fe *pipeline.FenceError
			var te *pipeline.TransitionError
			if ferr != nil && !errors.As(ferr, &fe) && !errors.As(ferr, &te) && !errors.Is(ferr, pipeline.ErrInvalidInput) {
				return ferr // a database error: fail the batch
			}
			errs[i] = ferr
		}
		return s.settleBulk(ctx, tx, now, fs, bulk, errs)
	})
	return errs, err
}

// bulkSettles says whether an outcome can take the bulk path: it settles the
// job (no message to reschedule, no dead letter to write), is not an
// infrastructure failure (settle counts those in infra_failures) and has no
// next run time (settle writes it; the bulk statement clears next_run_at).
func bulkSettles(o pipeline.Outcome) bool {
	switch o.Status {
	case pipeline.StatusSucceeded, pipeline.StatusFailed, pipeline.StatusCanceled, pipeline.StatusNeedsReview:
		return !o.Infra && o.NextRunAt.IsZero()
	}
	return false
}

// bulkItem is one outcome of a bulk settle, as the statement reads it from
// its JSON batch.
type bulkItem struct {
	Job            string  `json:"j"`
	Attempt        string  `json:"a"`
	Status         string  `json:"s"`
	ErrClass       string  `json:"c"`
	ErrCode        string  `json:"e"`
	ErrMsg         string  `json:"m"`
	ResultKey      *string `json:"k"`
	RequiresAction int     `json:"r"`
}

// bulkLease names an attempt in a bulk settle.
type bulkLease struct{ job, attempt string }

// bulkItems turns the outcomes fs[idx] into the bulk statement's batch:
// items[k] finishes fs[of[k]]. An outcome refused before the statement
// (not a transition from running, or the same attempt twice in the batch)
// gets its error in errs instead.
func bulkItems(fs []Finished, idx []int, errs []error) (items []bulkItem, of []int) {
	items = make([]bulkItem, 0, len(idx))
	of = make([]int, 0, len(idx))
	seen := make(map[bulkLease]bool, len(idx))
	for _, i := range idx {
		f := fs[i]
		if err := pipeline.CheckTransition(pipeline.StatusRunning, f.Outcome.Status); err != nil {
			errs[i] = err
			continue
		}
		l := bulkLease{f.Lease.JobID, f.Lease.AttemptID}
		if seen[l] {
			// The same attempt finished twice in one batch: the first
			// settles the job and the second finds it settled, as with
			// two Finish calls (one statement would pick either).
			errs[i] = pipeline.SettleRefused(l.job, pipeline.StatusRunning, l.attempt)
			continue
		}
		seen[l] = true
		it := bulkItem{Job: l.job, Attempt: l.attempt, Status: string(f.Outcome.Status),
			ErrClass: string(f.Outcome.ErrorClass), ErrCode: f.Outcome.ErrorCode, ErrMsg: f.Outcome.ErrorMessage,
			RequiresAction: boolInt(f.Outcome.RequiresAction)}
		if f.Outcome.ResultKey != "" {
			it.ResultKey = &f.Outcome.ResultKey
		}
		items = append(items, it)
		of = append(of, i)
	}
	return items, of
}

// settleBulk is settle for many attempts at once, in a handful of
// statements whatever the batch size: one fenced UPDATE … FROM json_each of
// every job, their events as multi-row inserts, one delete of their
// messages, and the webhooks of the few jobs that have one. It writes
// exactly what settle would.
func (s *Store) settleBulk(ctx context.Context, tx *wtx, now int64, fs []Finished, idx []int, errs []error) error {
	if len(idx) == 0 {
		return nil
	}
	items, of := bulkItems(fs, idx, errs)
	if len(items) == 0 {
		return nil
	}
	arg, err := json.Marshal(items)
	if err != nil {
		return err
	}
	// The batch drives the join and jobs is reached through its primary
	// key per element: the unary + keeps the planner off jobs_status and
	// jobs_tenant_running, through which it would match the whole batch
	// against every running job (TestWriteQueryPlansUseIndexes holds the
	// plan to it). The fence is per row: a lost lease leaves its job alone.
	rows, err := tx.QueryContext(ctx, `UPDATE jobs SET status = f.value ->> 's', status_changed_at = ?1, updated_at = ?1,
		next_run_at = NULL, lease_owner = NULL, lease_expires_at = NULL, requires_action = f.value ->> 'r',
		last_error_class = f.value ->> 'c', last_error_code = f.value ->> 'e', last_error_message = f.value ->> 'm',
		result_key = coalesce(f.value ->> 'k', jobs.result_key), infra_since = NULL
		FROM json_each(?2) AS f
		WHERE jobs.id = f.value ->> 'j' AND jobs.attempt_id = f.value ->> 'a' AND +jobs.status = 'running' AND +jobs.lease_expires_at > ?1
		RETURNING jobs.id, jobs.attempt_id, jobs.instance_id, jobs.webhook_url`, now, string(arg))
	if err != nil {
		return err
	}
	done := make(map[bulkLease]webhookJob, len(items))
	for rows.Next() {
		var hook webhookJob
		var attempt string
		if err := rows.Scan(&hook.ID, &attempt, &hook.InstanceID, &hook.URL); err != nil {
			rows.Close()
			return err
		}
		done[bulkLease{hook.ID, attempt}] = hook
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	evs := make([]statusEvent, 0, len(done))
	ids := make([]string, 0, len(done))
	for k, it := range items {
		i := of[k]
		if _, ok := done[bulkLease{it.Job, it.Attempt}]; !ok {
			errs[i] = pipeline.SettleRefused(it.Job, pipeline.StatusRunning, it.Attempt)
			continue
		}
		d, err := attemptDetail(fs[i].Outcome, fs[i].Lease.Attempt)
		if err != nil {
			return err
		}
		evs = append(evs, statusEvent{job: it.Job, attemptID: it.Attempt, from: pipeline.StatusRunning,
			to: pipeline.Status(it.Status), detail: d})
		ids = append(ids, it.Job)
	}
	return recordSettled(ctx, tx, now, evs, ids, done)
}

// recordSettled writes what a bulk settle leaves besides the job rows: the
// status events evs, the deletion of the settled jobs' (ids) queue
// messages, and a webhook delivery for each job in done that has one.
func recordSettled(ctx context.Context, tx *wtx, now int64, evs []statusEvent, ids []string, done map[bulkLease]webhookJob) error {
	if len(evs) == 0 {
		return nil
	}
	if err := insertStatusEvents(ctx, tx, now, evs); err != nil {
		return err
	}
	idArg, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM queue_messages WHERE job_id IN (SELECT value FROM json_each(?))`, string(idArg)); err != nil {
		return err
	}
	for _, e := range evs {
		hook := done[bulkLease{e.job, e.attemptID}]
		if hook.URL == "" {
			continue
		}
		var evID int64
		if err := tx.QueryRowContext(ctx, `SELECT max(id) FROM job_events WHERE job_id = ?`, e.job).Scan(&evID); err != nil {
			return err
		}
		if err := enqueueWebhook(ctx, tx, now, hook, evID, e.to); err != nil {
			return err
		}
	}
	return nil
}

// attemptDetail is the detail settle records for an attempt's outcome
// (Outcome.EventDetail with the attempt), without a map for the common
// case of an outcome that adds nothing.
func attemptDetail(o pipeline.Outcome, attempt int) (string, error) {
	d := o.EventDetail(nil)
	if len(d) == 0 {
		return `{"attempt":` + strconv.Itoa(attempt) + `}`, nil
	}
	d["attempt"] = attempt
	b, err := json.Marshal(d)
	return string(b), err
}

// Release gives a job back without counting the attempt as failed (a worker
// shutting down): running → pending, visible again at once.
func (s *Store) Release(ctx context.Context, lease pipeline.Lease) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "release"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET attempts = max(attempts - 1, 0) WHERE id = ?`, lease.JobID); err != nil {
			return err
		}
		return settle(ctx, tx, now, lease.JobID, pipeline.StatusRunning, lease.AttemptID,
			pipeline.Outcome{Status: pipeline.StatusPending}, map[string]any{"released": true, "attempt": lease.Attempt})
	})
}

// RequestCancel records the owner's cancellation. A job nobody is working on
// (pending, retry_wait, needs_review) is canceled at once; a running job keeps
// the request and its attempt honours it at the next boundary. A terminal
// job refuses with an error matching pipeline.ErrTerminal. A tenant names
// its job by instance id (unique per tenant); tenant "" names it by internal
// key, without an ownership check (operators).
func (s *Store) RequestCancel(ctx context.Context, tenant, id string) (pipeline.Job, error) {
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		q, args := `SELECT `+jobColumns+` FROM jobs WHERE tenant = ? AND instance_id = ?`, []any{tenant, id}
		if tenant == "" {
			q, args = `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, []any{id}
		}
		j, err := scanJob(tx.QueryRowContext(ctx, q, args...))
		if err != nil {
			return err
		}
		jobID := j.ID
		if j.Status.Terminal() {
			return &pipeline.TransitionError{From: j.Status, To: pipeline.StatusCanceled}
		}
		if j.CancelRequestedAt.IsZero() {
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested_at = ?, updated_at = ? WHERE id = ?`, now, now, jobID); err != nil {
				return err
			}
			if _, err := appendEvent(ctx, tx, now, jobID, pipeline.EventCancelRequested, "", "", "", nil); err != nil {
				return err
			}
		}
		if j.Status != pipeline.StatusRunning {
			if err := settle(ctx, tx, now, jobID, j.Status, "", pipeline.Outcome{
				Status: pipeline.StatusCanceled, ErrorClass: pipeline.ClassCanceled, ErrorCode: "canceled",
				ErrorMessage: "the job was canceled by its owner",
			}, nil); err != nil {
				return err
			}
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, jobID))
		return err
	})
	return job, err
}

// CancelRequested reports whether the job's owner asked to stop. Attempts
// check it before every expensive boundary.
func (s *Store) CancelRequested(ctx context.Context, jobID string) (bool, error) {
	var at sql.NullInt64
	err := s.read.QueryRowContext(ctx, `SELECT cancel_requested_at FROM jobs WHERE id = ?`, jobID).Scan(&at)
	if err != nil {
		return false, translate(err)
	}
	return at.Valid, nil
}

// Decide applies an operator's decision to a job in needs_review: retry puts
// it back on its queue (pending), fail ends it (failed). It records it: the
// decision event carries the operator and reason (optional), and the job
// row keeps the decision (what, who, why, when) so that the job no longer
// reads as waiting for one. A failed job's message says who failed it and
// why instead of asking for a decision.
func (s *Store) Decide(ctx context.Context, p *pipeline.DecideParams) (pipeline.Job, error) {
	jobID, d, operator, reason := p.JobID, p.Decision, p.Operator, p.Reason
	if err := pipeline.CheckDecisionReason(reason); err != nil {
		return pipeline.Job{}, err
	}
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, jobID))
		if err != nil {
			return err
		}
		o, ev, err := pipeline.DecisionOutcome(j, d, operator, reason)
		if err != nil {
			return err
		}
		if _, err := appendEvent(ctx, tx, now, jobID, pipeline.EventDecision, "", "", "", ev); err != nil {
			return err
		}
		// Recorded while the job is still needs_review: a failed job is
		// immutable once settled.
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET decision = ?, decided_by = ?, decision_reason = ?, decided_at = ? WHERE id = ?`,
			string(d), operator, reason, now, jobID); err != nil {
			return err
		}
		if d == pipeline.DecisionRetry {
			// The operator accepts paying again for calls whose outcome is
			// unknown, and for answered sync calls whose result was never
			// stored (its spool is gone); without this, the next attempt
			// would stop at the same call forever. The rows stay, marked,
			// as the audit of that decision; a spool still on disk is used
			// all the same.
			if err := waiveForRetry(ctx, tx, now, jobID, operator); err != nil {
				return err
			}
		}
		if err := settle(ctx, tx, now, jobID, j.Status, "", o, map[string]any{"decision": d}); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, jobID))
		return err
	})
	return job, err
}

// RecentDecisions returns the jobs operators decided on, latest decision
// first, at most limit (1 to 500; default 50).
func (s *Store) RecentDecisions(ctx context.Context, limit int) ([]pipeline.Job, error) {
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	rows, err := s.read.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE decided_at IS NOT NULL ORDER BY decided_at DESC, id LIMIT ?`, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, translate(rows.Err())
}

// qWaiveForRetry marks the calls an operator's retry waives: every call of
// the job whose outcome is unknown; every answered image or speech call
// whose artifact the scene's unit does not hold and whose answer is not
// staged (a unit's result_json maps artifact name to key, and those
// artifacts are named like their operations; a staged answer is used, not
// paid for again); and the video submission of a unit whose external job
// failed (its id can only ever be polled to the same failure). Any other
// answered video submission is never waived: its external id is polled, not
// paid for again.
const qWaiveForRetry = `UPDATE provider_calls SET status = 'waived'
	WHERE job_id = ?1 AND (status IN ('intent','ambiguous')
		OR (status = 'succeeded' AND operation IN ('image','speech')
			AND NOT EXISTS (SELECT 1 FROM assets a WHERE a.object_key = provider_calls.staged_key)
			AND NOT EXISTS (
			SELECT 1 FROM units u WHERE u.job_id = provider_calls.job_id AND u.scene_index = provider_calls.scene_index
				AND json_extract(u.result_json, '$.' || provider_calls.operation) IS NOT NULL))
		OR (status = 'succeeded' AND operation = 'video_submit' AND external_job_id <> '' AND EXISTS (
			SELECT 1 FROM units u WHERE u.job_id = provider_calls.job_id AND u.scene_index = provider_calls.scene_index
				AND u.status = 'failed' AND u.external_job_id = provider_calls.external_job_id)))
	RETURNING id, scene_index, operation`

// waiveForRetry applies qWaiveForRetry, records one call_waived event per
// waived call (who decided, which call), and puts units whose external job
// failed back to planned without their external id, so the next attempt
// submits exactly once more.
func waiveForRetry(ctx context.Context, tx *wtx, now int64, jobID, operator string) error {
	rows, err := tx.QueryContext(ctx, qWaiveForRetry, jobID)
	if err != nil {
		return err
	}
	type waived struct {
		id    int64
		scene int
		op    string
	}
	var ws []waived
	for rows.Next() {
		var w waived
		if err := rows.Scan(&w.id, &w.scene, &w.op); err != nil {
			rows.Close()
			return err
		}
		ws = append(ws, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, w := range ws {
		if _, err := appendEvent(ctx, tx, now, jobID, pipeline.EventCallWaived, "", "", "",
			map[string]any{"call_id": w.id, "scene": w.scene, "op": w.op, "operator": operator}); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE units SET status = 'planned', external_job_id = '', updated_at = ?2
		WHERE job_id = ?1 AND status = 'failed' AND external_job_id <> ''`, jobID, now)
	return err
}

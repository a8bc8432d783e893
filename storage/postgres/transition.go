package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// settle moves jobID from status `from` to o.Status inside tx: the one place a
// status is written after a job exists (as in storage/sqlite). It checks the
// transition table, makes the UPDATE conditional on the status it read (and
// on attemptID and a live lease when the caller is an attempt) — which also
// takes the job's row lock before the event is appended — then appends the
// event, keeps the queue message in step and writes the webhook delivery.
func settle(ctx context.Context, tx pgx.Tx, now int64, jobID string, from pipeline.Status, attemptID string, o pipeline.Outcome, detail map[string]any) error {
	if err := pipeline.CheckTransition(from, o.Status); err != nil {
		return err
	}
	// An infrastructure failure counts in infra_failures and starts (or
	// continues) the run measured by infra_since; a release leaves the run
	// as it is; any other outcome ends it (docs/design.md §6).
	release := from == pipeline.StatusRunning && o.Status == pipeline.StatusPending
	q := `UPDATE jobs SET status = $1, status_changed_at = $2, updated_at = $2, next_run_at = $3,
		lease_owner = NULL, lease_expires_at = NULL, requires_action = $4,
		last_error_class = $5, last_error_code = $6, last_error_message = $7,
		result_key = coalesce($8, result_key),
		infra_failures = infra_failures + $9,
		infra_since = CASE WHEN $9 = 1 THEN coalesce(infra_since, $2) WHEN $10 THEN infra_since ELSE NULL END
		WHERE id = $11 AND status = $12`
	args := []any{string(o.Status), now, nullMS(o.NextRunAt), boolInt(o.RequiresAction),
		string(o.ErrorClass), o.ErrorCode, o.ErrorMessage, nullString(o.ResultKey),
		boolInt(o.Infra), release, jobID, string(from)}
	if attemptID != "" {
		q += ` AND attempt_id = $13 AND lease_expires_at > $2`
		args = append(args, attemptID)
	}
	var queue string
	hook := webhookJob{ID: jobID}
	err := tx.QueryRow(ctx, q+` RETURNING queue, webhook_url, instance_id`, args...).Scan(&queue, &hook.URL, &hook.InstanceID)
	if errors.Is(err, pgx.ErrNoRows) {
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
		if err = ensureMessage(ctx, tx, now, queue, jobID, now, from == pipeline.StatusRunning); err == nil {
			err = notifyQueue(ctx, tx, queue)
		}
	case pipeline.StatusDeadLettered:
		if err = deleteMessages(ctx, tx, jobID); err == nil && attemptID != "" {
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

// Finish ends the attempt holding lease with outcome o, in one transaction.
// A lost lease is a *pipeline.FenceError and nothing is written.
func (s *Store) Finish(ctx context.Context, lease pipeline.Lease, o pipeline.Outcome) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return finishTx(ctx, tx, s.now(), lease, o) })
}

// Release gives a job back without counting the attempt as failed (a worker
// shutting down): running → pending, visible again at once.
func (s *Store) Release(ctx context.Context, lease pipeline.Lease) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "release"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET attempts = greatest(attempts - 1, 0) WHERE id = $1`, lease.JobID); err != nil {
			return err
		}
		return settle(ctx, tx, now, lease.JobID, pipeline.StatusRunning, lease.AttemptID,
			pipeline.Outcome{Status: pipeline.StatusPending}, map[string]any{"released": true, "attempt": lease.Attempt})
	})
}

// lockJob reads a job and locks its row until the transaction ends.
func lockJob(ctx context.Context, tx pgx.Tx, jobID, tenant string) (pipeline.Job, error) {
	if tenant != "" { // a tenant names its job by instance id (unique per tenant)
		return scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND instance_id = $2 FOR UPDATE`, tenant, jobID))
	}
	return scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1 FOR UPDATE`, jobID))
}

// RequestCancel records the owner's cancellation. A job nobody is working on
// (pending, retry_wait, needs_review) is canceled at once; a running job keeps
// the request and its attempt honours it at the next boundary. A terminal
// job refuses with an error matching pipeline.ErrTerminal. A tenant names
// its job by instance id (unique per tenant); tenant "" names it by internal
// key, without an ownership check (operators).
func (s *Store) RequestCancel(ctx context.Context, tenant, id string) (pipeline.Job, error) {
	var job pipeline.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		j, err := lockJob(ctx, tx, id, tenant)
		if err != nil {
			return err
		}
		jobID := j.ID
		if j.Status.Terminal() {
			return &pipeline.TransitionError{From: j.Status, To: pipeline.StatusCanceled}
		}
		if j.CancelRequestedAt.IsZero() {
			if _, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested_at = $1, updated_at = $1 WHERE id = $2`, now, jobID); err != nil {
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
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, jobID))
		return err
	})
	return job, err
}

// CancelRequested reports whether the job's owner asked to stop.
func (s *Store) CancelRequested(ctx context.Context, jobID string) (bool, error) {
	var at *int64
	if err := s.pool.QueryRow(ctx, `SELECT cancel_requested_at FROM jobs WHERE id = $1`, jobID).Scan(&at); err != nil {
		return false, translate(err)
	}
	return at != nil, nil
}

// Decide applies an operator's decision to a job in needs_review and
// records it (what, who, why, when): retry puts it back on its queue
// (pending) and waives the calls the operator agrees to pay again for, fail
// ends it (failed).
func (s *Store) Decide(ctx context.Context, p *pipeline.DecideParams) (pipeline.Job, error) {
	jobID, d, operator, reason := p.JobID, p.Decision, p.Operator, p.Reason
	if err := pipeline.CheckDecisionReason(reason); err != nil {
		return pipeline.Job{}, err
	}
	var job pipeline.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		j, err := lockJob(ctx, tx, jobID, "")
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
		if _, err := tx.Exec(ctx, `UPDATE jobs SET decision = $1, decided_by = $2, decision_reason = $3, decided_at = $4 WHERE id = $5`,
			string(d), operator, reason, now, jobID); err != nil {
			return err
		}
		if d == pipeline.DecisionRetry {
			if err := waiveForRetry(ctx, tx, now, jobID, operator); err != nil {
				return err
			}
		}
		if err := settle(ctx, tx, now, jobID, j.Status, "", o, map[string]any{"decision": d}); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, jobID))
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
	return collectJobs(s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs WHERE decided_at IS NOT NULL
		ORDER BY decided_at DESC, id LIMIT $1`, limit))
}

// qWaiveForRetry is storage/sqlite's qWaiveForRetry in Postgres: every
// call of the job whose outcome is unknown; every answered image or speech
// call whose artifact the unit does not hold and whose answer is not
// staged; the video submission of a unit whose external job failed.
const qWaiveForRetry = `UPDATE provider_calls SET status = 'waived'
	WHERE job_id = $1 AND (status IN ('intent','ambiguous')
		OR (status = 'succeeded' AND operation IN ('image','speech')
			AND NOT EXISTS (SELECT 1 FROM assets a WHERE a.object_key = provider_calls.staged_key)
			AND NOT EXISTS (
			SELECT 1 FROM units u WHERE u.job_id = provider_calls.job_id AND u.scene_index = provider_calls.scene_index
				AND (u.result_json ->> provider_calls.operation) IS NOT NULL))
		OR (status = 'succeeded' AND operation = 'video_submit' AND external_job_id <> '' AND EXISTS (
			SELECT 1 FROM units u WHERE u.job_id = provider_calls.job_id AND u.scene_index = provider_calls.scene_index
				AND u.status = 'failed' AND u.external_job_id = provider_calls.external_job_id)))
	RETURNING id, scene_index, operation`

func waiveForRetry(ctx context.Context, tx pgx.Tx, now int64, jobID, operator string) error {
	type waived struct {
		id    int64
		scene int
		op    string
	}
	var ws []waived
	if err := eachRow(tx.Query(ctx, qWaiveForRetry, jobID))(func(r pgx.Rows) error {
		var w waived
		if err := r.Scan(&w.id, &w.scene, &w.op); err != nil {
			return err
		}
		ws = append(ws, w)
		return nil
	}); err != nil {
		return err
	}
	// RETURNING has no order; the events follow the calls'.
	for i := 1; i < len(ws); i++ {
		for k := i; k > 0 && ws[k].id < ws[k-1].id; k-- {
			ws[k], ws[k-1] = ws[k-1], ws[k]
		}
	}
	for _, w := range ws {
		if _, err := appendEvent(ctx, tx, now, jobID, pipeline.EventCallWaived, "", "", "",
			map[string]any{"call_id": w.id, "scene": w.scene, "op": w.op, "operator": operator}); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE units SET status = 'planned', external_job_id = '', updated_at = $2
		WHERE job_id = $1 AND status = 'failed' AND external_job_id <> ''`, jobID, now)
	return err
}

// Finished pairs a lease with its outcome for FinishMany.
type Finished = pipeline.Finished

// FinishMany finishes several attempts in one transaction (a batch
// completer, like River's). Each result is independent: errs[i] is the
// error of fs[i] (a fenced-out attempt does not stop the others); the
// returned error is the transaction's. Outcomes that settle the job take a
// bulk path of four statements for the whole batch; the others are settled
// one by one. A refused item has written nothing: its refusal is decided
// before, or by, its conditional UPDATE, which aborts nothing.
func (s *Store) FinishMany(ctx context.Context, fs []Finished) (errs []error, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		errs = make([]error, len(fs))
		now := s.now()
		var bulk []int
		for i, f := range fs {
			if bulkSettles(f.Outcome) {
				bulk = append(bulk, i)
				continue
			}
			ferr := finishTx(ctx, tx, now, f.Lease, f.Outcome)
			var fe *pipeline.FenceError
			var te *pipeline.TransitionError
			if ferr != nil && !errors.As(ferr, &fe) && !errors.As(ferr, &te) && !errors.Is(ferr, pipeline.ErrInvalidInput) {
				return ferr
			}
			errs[i] = ferr
		}
		return settleBulk(ctx, tx, now, fs, bulk, errs)
	})
	return errs, err
}

// finishTx is Finish inside a transaction.
func finishTx(ctx context.Context, tx pgx.Tx, now int64, lease pipeline.Lease, o pipeline.Outcome) error {
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

// bulkSettles says whether an outcome can take the bulk path: it settles
// the job (no message to reschedule, no dead letter to write).
func bulkSettles(o pipeline.Outcome) bool {
	switch o.Status {
	case pipeline.StatusSucceeded, pipeline.StatusFailed, pipeline.StatusCanceled, pipeline.StatusNeedsReview:
		return true
	}
	return false
}

// settleBulk is settle for many attempts at once: one fenced UPDATE of
// every job (which takes their row locks), their events, their acks, and
// the webhooks of the few jobs that have one. It writes exactly what settle
// would.
func settleBulk(ctx context.Context, tx pgx.Tx, now int64, fs []Finished, idx []int, errs []error) error {
	var (
		jobs, atts, sts, classes, codes, msgs, results, details []string
		actions                                                 []int32
		pos                                                     = map[string]int{}
	)
	for _, i := range idx {
		f := fs[i]
		if err := pipeline.CheckTransition(pipeline.StatusRunning, f.Outcome.Status); err != nil {
			errs[i] = err
			continue
		}
		detail := map[string]any{"attempt": f.Lease.Attempt}
		if f.Outcome.ErrorCode != "" {
			detail["error_code"] = f.Outcome.ErrorCode
		}
		d, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		if _, twice := pos[f.Lease.JobID]; twice {
			errs[i] = fmt.Errorf("%w: job %s is twice in one batch", pipeline.ErrInvalidInput, f.Lease.JobID)
			continue
		}
		pos[f.Lease.JobID] = i
		jobs, atts, sts = append(jobs, f.Lease.JobID), append(atts, f.Lease.AttemptID), append(sts, string(f.Outcome.Status))
		classes, codes, msgs = append(classes, string(f.Outcome.ErrorClass)), append(codes, f.Outcome.ErrorCode), append(msgs, f.Outcome.ErrorMessage)
		results, details = append(results, f.Outcome.ResultKey), append(details, string(d))
		actions = append(actions, int32(boolInt(f.Outcome.RequiresAction)))
	}
	if len(jobs) == 0 {
		return nil
	}
	done := map[string]webhookJob{}
	if err := eachRow(tx.Query(ctx, `UPDATE jobs SET status = u.status, status_changed_at = $1, updated_at = $1,
		next_run_at = NULL, lease_owner = NULL, lease_expires_at = NULL, requires_action = u.action,
		last_error_class = u.class, last_error_code = u.code, last_error_message = u.msg,
		result_key = coalesce(nullif(u.result, ''), jobs.result_key), infra_since = NULL
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[])
			AS u(job, att, status, class, code, msg, result, action)
		WHERE jobs.id = u.job AND jobs.attempt_id = u.att AND jobs.status = 'running' AND jobs.lease_expires_at > $1
		RETURNING jobs.id, jobs.instance_id, jobs.webhook_url`, now, jobs, atts, sts, classes, codes, msgs, results, actions))(func(r pgx.Rows) error {
		var hook webhookJob
		if err := r.Scan(&hook.ID, &hook.InstanceID, &hook.URL); err != nil {
			return err
		}
		done[hook.ID] = hook
		return nil
	}); err != nil {
		return err
	}
	var evJobs, evSts, evAtts, evDetails, acked []string
	for k, id := range jobs {
		if _, ok := done[id]; !ok {
			i := pos[id]
			errs[i] = &pipeline.FenceError{JobID: id, AttemptID: fs[i].Lease.AttemptID, Op: "finish"}
			continue
		}
		evJobs, evSts, evAtts, evDetails = append(evJobs, id), append(evSts, sts[k]), append(evAtts, atts[k]), append(evDetails, details[k])
		acked = append(acked, id)
	}
	if len(acked) == 0 {
		return nil
	}
	evIDs := map[string]int64{}
	if err := eachRow(tx.Query(ctx, `INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
		SELECT e.job, $1, 'status', 'running', e.status, e.att, e.detail::json
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e(job, status, att, detail, n)
		ORDER BY e.n RETURNING job_id, id`, now, evJobs, evSts, evAtts, evDetails))(func(r pgx.Rows) error {
		var job string
		var id int64
		if err := r.Scan(&job, &id); err != nil {
			return err
		}
		evIDs[job] = id
		return nil
	}); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM queue_messages WHERE job_id = ANY($1::text[])`, acked); err != nil {
		return err
	}
	for k, id := range evJobs {
		if hook := done[id]; hook.URL != "" {
			if err := enqueueWebhook(ctx, tx, now, hook, evIDs[id], pipeline.Status(evSts[k])); err != nil {
				return err
			}
		}
	}
	return nil
}

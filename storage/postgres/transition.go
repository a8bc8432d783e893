package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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
	if settlesLikeBulk(o) {
		fs := []Finished{{Lease: lease, Outcome: o}}
		errs, done, err := s.finishBulkOnly(ctx, fs)
		if err != nil {
			return err
		}
		if done {
			return errs[0]
		}
		// The job has a webhook: settleBulk writes its delivery too, in a
		// transaction (one statement fewer than settle's).
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			errs = make([]error, 1)
			return settleBulk(ctx, tx, s.now(), fs, []int{0}, errs)
		})
		if err != nil {
			return err
		}
		return errs[0]
	}
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
		return scanJob(tx.QueryRow(ctx, qTenantJob+` FOR UPDATE`, tenant, jobID))
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
// returned error is the transaction's. Outcomes that settle the job, and
// that the bulk statement records in full (settlesLikeBulk), take a bulk
// path of one statement for the whole batch (qSettleBulk); the others are
// settled one by one. A batch of bulk outcomes only, none of whose jobs
// has a webhook, is that one statement and nothing else (finishBulkOnly). A
// refused item has written nothing: its refusal is decided before, or by,
// its conditional UPDATE, which aborts nothing.
func (s *Store) FinishMany(ctx context.Context, fs []Finished) (errs []error, err error) {
	if !slices.ContainsFunc(fs, func(f Finished) bool { return !settlesLikeBulk(f.Outcome) }) {
		errs, done, err := s.finishBulkOnly(ctx, fs)
		if err != nil || done {
			return errs, err
		}
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		errs = make([]error, len(fs))
		now := s.now()
		var bulk []int
		for i, f := range fs {
			if settlesLikeBulk(f.Outcome) {
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

// finishBulkOnly settles fs, whose outcomes all take the bulk path, in one
// statement outside an explicit transaction (one round trip instead of
// BEGIN, the statement and COMMIT): qSettleBulk guarded, so that it writes
// nothing when one of the jobs has a webhook, whose outbox row needs the
// event id and is written by settleBulk in a transaction. done false means
// exactly that: nothing was written, the caller settles fs its other way.
func (s *Store) finishBulkOnly(ctx context.Context, fs []Finished) (errs []error, done bool, err error) {
	errs = make([]error, len(fs))
	idx := make([]int, len(fs))
	for i := range idx {
		idx[i] = i
	}
	b, err := newBulkBatch(fs, idx, errs)
	if err != nil || len(b.jobs) == 0 {
		return errs, err == nil, err
	}
	var (
		settled []settledJob
		hooked  bool
	)
	if err := s.retrying(ctx, func() error {
		var err error
		settled, hooked, err = b.run(ctx, s.pool, s.now(), true)
		return err
	}); err != nil {
		return nil, false, err
	}
	if hooked {
		return nil, false, nil
	}
	b.fence(fs, settled, errs)
	return errs, true, nil
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

// settlesLikeBulk says whether the bulk path writes for o exactly what
// settle does, so Finish may take it: a bulk outcome without what only
// settle records (an infrastructure failure's count, a next run time, a
// reason in the event).
func settlesLikeBulk(o pipeline.Outcome) bool {
	return bulkSettles(o) && !o.Infra && o.NextRunAt.IsZero() && o.Reason == ""
}

// settleBulk is settle for many attempts at once: one statement
// (qSettleBulk) that makes the fenced UPDATE of every job (which takes
// their row locks), appends their events and acks their messages, then the
// webhooks of the few jobs that have one. It writes exactly what settle
// would.
func settleBulk(ctx context.Context, tx pgx.Tx, now int64, fs []Finished, idx []int, errs []error) error {
	b, err := newBulkBatch(fs, idx, errs)
	if err != nil || len(b.jobs) == 0 {
		return err
	}
	settled, _, err := b.run(ctx, tx, now, false)
	if err != nil {
		return err
	}
	b.fence(fs, settled, errs)
	for _, j := range settled {
		if err := enqueueWebhook(ctx, tx, now, j.hook, j.eventID, j.status); err != nil {
			return err
		}
	}
	return nil
}

// bulkBatch is the arguments of qSettleBulk, one entry per attempt, and
// where each came from in the caller's batch.
type bulkBatch struct {
	jobs, atts, sts, classes, codes, msgs, results, details []string
	actions                                                 []int32
	pos                                                     map[string]int
}

// newBulkBatch collects fs[idx...] for qSettleBulk. An item refused before
// the database (a transition the table forbids, a job twice in the batch)
// gets its error in errs and is left out.
func newBulkBatch(fs []Finished, idx []int, errs []error) (*bulkBatch, error) {
	b := &bulkBatch{pos: map[string]int{}}
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
			return nil, err
		}
		if _, twice := b.pos[f.Lease.JobID]; twice {
			errs[i] = fmt.Errorf("%w: job %s is twice in one batch", pipeline.ErrInvalidInput, f.Lease.JobID)
			continue
		}
		b.pos[f.Lease.JobID] = i
		b.jobs, b.atts, b.sts = append(b.jobs, f.Lease.JobID), append(b.atts, f.Lease.AttemptID), append(b.sts, string(f.Outcome.Status))
		b.classes, b.codes, b.msgs = append(b.classes, string(f.Outcome.ErrorClass)), append(b.codes, f.Outcome.ErrorCode), append(b.msgs, f.Outcome.ErrorMessage)
		b.results, b.details = append(b.results, f.Outcome.ResultKey), append(b.details, string(d))
		b.actions = append(b.actions, int32(boolInt(f.Outcome.RequiresAction)))
	}
	return b, nil
}

// qSettleBulk settles a bulkBatch in one statement: upd is the fenced
// UPDATE of every job, ev their status events in batch order, del the acks
// of their messages. With $11 true it is guarded: when one of the jobs has
// a webhook (webhook_url never changes once the job exists, so the read
// cannot go stale) nothing is written and the first column says so; a
// caller in a transaction passes false and writes the webhooks itself. The
// rows are the settled jobs in batch order, after a first row that is there
// even when none was settled (NULLs after the first column); only a job
// with a webhook has its event id (what its delivery needs). As in
// claimCTEs, the rows are also named by "= ANY(…)" so that the planner
// reaches them by key; the settled ids are compared in queue_messages.job_id's
// collation (jobs.id's is "C"), or the index on job_id does not apply and
// the DELETE reads the whole table. The webhook guard looks each job up by
// its key, one at a time (LIMIT 1 keeps the planner from turning it into a
// join): written as id = ANY(…) with a filter on webhook_url, a planner without
// statistics read the whole jobs table on every settle. The fence on status
// and lease is a CASE, as in claimCTEs: written as status = 'running' AND
// lease_expires_at > $1 it matched the partial index of running jobs (and
// the status index), which a planner without statistics takes for a few
// rows, and the generic plan of the cached statement read every running
// job and matched the whole batch against each one in a nested loop —
// 150 ms a settle of 500 with 1,000 jobs running, most of a burn-down's
// time (TestSettlePlanWithoutStatistics holds both plans to about as many
// rows as settled).
const qSettleBulk = `WITH u AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[], $10::text[])
		WITH ORDINALITY AS u(job, att, status, class, code, msg, result, action, detail, n)
), hooks AS (
	SELECT $11::bool AND EXISTS (SELECT 1 FROM u, LATERAL (SELECT 1 FROM jobs WHERE jobs.id = u.job AND jobs.webhook_url <> '' LIMIT 1) h) AS found
), upd AS (
	UPDATE jobs SET status = u.status, status_changed_at = $1, updated_at = $1,
		next_run_at = NULL, lease_owner = NULL, lease_expires_at = NULL, requires_action = u.action,
		last_error_class = u.class, last_error_code = u.code, last_error_message = u.msg,
		result_key = coalesce(nullif(u.result, ''), jobs.result_key), infra_since = NULL
	FROM u
	WHERE jobs.id = u.job AND jobs.id = ANY($2::text[]) AND jobs.attempt_id = u.att
	  AND CASE jobs.status WHEN 'running' THEN jobs.lease_expires_at > $1 ELSE false END
	  AND NOT (SELECT found FROM hooks)
	RETURNING jobs.id, jobs.instance_id, jobs.webhook_url, u.status, u.att, u.detail, u.n
), ev AS (
	INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
	SELECT upd.id, $1, 'status', 'running', upd.status, upd.att, upd.detail::json
	FROM upd ORDER BY upd.n
	RETURNING job_id, id
), del AS (
	DELETE FROM queue_messages WHERE job_id = ANY(ARRAY(SELECT id COLLATE "default" FROM upd))
)
SELECT hooks.found, upd.id, upd.instance_id, upd.webhook_url, upd.status,
	CASE WHEN upd.webhook_url <> '' THEN (SELECT ev.id FROM ev WHERE ev.job_id = upd.id) END
FROM hooks LEFT JOIN upd ON true
ORDER BY upd.n`

// settledJob is a job qSettleBulk settled; eventID is set only for a job
// with a webhook.
type settledJob struct {
	hook    webhookJob
	status  pipeline.Status
	eventID int64
}

// run executes qSettleBulk (guarded or not) and returns the settled jobs in
// batch order, and whether the guard stopped it.
func (b *bulkBatch) run(ctx context.Context, q dbtx, now int64, guard bool) (settled []settledJob, hooked bool, err error) {
	err = eachRow(q.Query(ctx, qSettleBulk, now, b.jobs, b.atts, b.sts, b.classes, b.codes, b.msgs, b.results, b.actions,
		b.details, guard))(func(r pgx.Rows) error {
		var (
			id, instanceID, url, status *string
			eventID                     *int64
		)
		if err := r.Scan(&hooked, &id, &instanceID, &url, &status, &eventID); err != nil || id == nil {
			return err
		}
		j := settledJob{hook: webhookJob{ID: *id, InstanceID: str(instanceID), URL: str(url)}, status: pipeline.Status(str(status))}
		if eventID != nil {
			j.eventID = *eventID
		}
		settled = append(settled, j)
		return nil
	})
	return settled, hooked, err
}

// fence gives every attempt of b that qSettleBulk did not settle its
// *pipeline.FenceError.
func (b *bulkBatch) fence(fs []Finished, settled []settledJob, errs []error) {
	done := make(map[string]bool, len(settled))
	for _, j := range settled {
		done[j.hook.ID] = true
	}
	for _, id := range b.jobs {
		if !done[id] {
			i := b.pos[id]
			errs[i] = &pipeline.FenceError{JobID: id, AttemptID: fs[i].Lease.AttemptID, Op: "finish"}
		}
	}
}

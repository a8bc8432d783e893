package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"edgepipe/pipeline"
)

// settle moves jobID from status `from` to o.Status inside tx: the one place a
// status is written after a job exists. It checks the transition table, makes
// the UPDATE conditional on the status it read (and on attemptID when the
// caller is an attempt), appends the event, keeps the queue message in step
// and writes the webhook delivery.
func settle(ctx context.Context, tx *sql.Tx, now int64, jobID string, from pipeline.Status, attemptID string, o pipeline.Outcome, detail map[string]any) error {
	if err := pipeline.CheckTransition(from, o.Status); err != nil {
		return err
	}
	q := `UPDATE jobs SET status = ?, status_changed_at = ?, updated_at = ?, next_run_at = ?,
		lease_owner = NULL, lease_expires_at = NULL, requires_action = ?,
		last_error_class = ?, last_error_code = ?, last_error_message = ?,
		result_key = coalesce(?, result_key)
		WHERE id = ? AND status = ?`
	args := []any{string(o.Status), now, now, nullMS(o.NextRunAt), boolInt(o.RequiresAction),
		string(o.ErrorClass), o.ErrorCode, o.ErrorMessage, nullString(o.ResultKey), jobID, string(from)}
	if attemptID != "" {
		q += ` AND attempt_id = ? AND lease_expires_at > ?`
		args = append(args, attemptID, now)
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		if attemptID != "" {
			return &pipeline.FenceError{JobID: jobID, AttemptID: attemptID, Op: "finish"}
		}
		return fmt.Errorf("%w: job %s is no longer %s", pipeline.ErrInvalidTransition, jobID, from)
	}
	if detail == nil {
		detail = map[string]any{}
	}
	if o.ErrorCode != "" {
		detail["error_code"] = o.ErrorCode
	}
	if o.Reason != "" {
		detail["reason"] = o.Reason
	}
	if !o.NextRunAt.IsZero() {
		detail["next_run_at"] = o.NextRunAt.UTC()
	}
	evID, err := appendEvent(ctx, tx, now, jobID, pipeline.EventStatus, from, o.Status, attemptID, detail)
	if err != nil {
		return err
	}
	var queue, webhook string
	if err := tx.QueryRowContext(ctx, `SELECT queue, webhook_url FROM jobs WHERE id = ?`, jobID).Scan(&queue, &webhook); err != nil {
		return err
	}
	switch o.Status {
	case pipeline.StatusRetryWait:
		err = ensureMessage(ctx, tx, now, queue, jobID, ms(o.NextRunAt), false)
	case pipeline.StatusPending:
		err = ensureMessage(ctx, tx, now, queue, jobID, now, from == pipeline.StatusRunning)
	default:
		if o.Status.Settled() {
			err = deleteMessages(ctx, tx, jobID)
		}
	}
	if err != nil {
		return err
	}
	return enqueueWebhook(ctx, tx, now, jobID, webhook, evID, o.Status)
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Finish ends the attempt holding lease with outcome o: the job's status
// changes, its message is acked (settled), rescheduled (retry_wait) or made
// visible again (pending), and a dead letter is recorded for dead_lettered,
// all in one transaction. A lost lease is a *pipeline.FenceError and nothing
// is written.
func (s *Store) Finish(ctx context.Context, lease pipeline.Lease, o pipeline.Outcome) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.finishTx(ctx, tx, s.now(), lease, o) })
}

func (s *Store) finishTx(ctx context.Context, tx *sql.Tx, now int64, lease pipeline.Lease, o pipeline.Outcome) error {
	if o.Status == pipeline.StatusRetryWait && o.NextRunAt.IsZero() {
		return fmt.Errorf("%w: retry_wait needs a next run time", pipeline.ErrInvalidInput)
	}
	if o.Status == pipeline.StatusDeadLettered && o.Reason == "" {
		return fmt.Errorf("%w: dead_lettered needs a reason", pipeline.ErrInvalidInput)
	}
	if err := checkFence(ctx, tx, now, lease, "finish"); err != nil {
		return err
	}
	if o.Status == pipeline.StatusDeadLettered {
		var queue string
		if err := tx.QueryRowContext(ctx, `SELECT queue FROM jobs WHERE id = ?`, lease.JobID).Scan(&queue); err != nil {
			return err
		}
		if _, err := insertDeadLetter(ctx, tx, now, lease.JobID, queue, o.Reason, o.ErrorCode); err != nil {
			return err
		}
		if o.ErrorMessage == "" {
			o.ErrorMessage = deadLetterMessage(o.Reason)
		}
	}
	return settle(ctx, tx, now, lease.JobID, pipeline.StatusRunning, lease.AttemptID, o, map[string]any{"attempt": lease.Attempt})
}

// Finished pairs a lease with its outcome for FinishMany.
type Finished struct {
	Lease   pipeline.Lease
	Outcome pipeline.Outcome
}

// FinishMany finishes several attempts in one transaction (a batch completer,
// like River's). Each result is independent: errs[i] is the error of fs[i]
// (a fenced-out attempt does not stop the others). The returned error is for
// the transaction as a whole.
func (s *Store) FinishMany(ctx context.Context, fs []Finished) (errs []error, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		errs = make([]error, len(fs))
		now := s.now()
		for i, f := range fs {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT finish_one`); err != nil {
				return err
			}
			ferr := s.finishTx(ctx, tx, now, f.Lease, f.Outcome)
			if ferr != nil {
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO finish_one`); err != nil {
					return err
				}
				var fe *pipeline.FenceError
				var te *pipeline.TransitionError
				if !errors.As(ferr, &fe) && !errors.As(ferr, &te) && !errors.Is(ferr, pipeline.ErrInvalidInput) {
					return ferr // a database error: fail the batch
				}
			}
			errs[i] = ferr
			if _, err := tx.ExecContext(ctx, `RELEASE finish_one`); err != nil {
				return err
			}
		}
		return nil
	})
	return errs, err
}

// Release gives a job back without counting the attempt as failed (a worker
// shutting down): running → pending, visible again at once.
func (s *Store) Release(ctx context.Context, lease pipeline.Lease) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
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
// job refuses with an error matching pipeline.ErrTerminal. tenant "" skips
// the ownership check (operators).
func (s *Store) RequestCancel(ctx context.Context, tenant, jobID string) (pipeline.Job, error) {
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ? AND (? = '' OR tenant = ?)`, jobID, tenant, tenant))
		if err != nil {
			return err
		}
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

// Decision is an operator's answer to a job in needs_review.
type Decision string

const (
	DecisionRetry Decision = "retry"
	DecisionFail  Decision = "fail"
)

// Decide applies an operator's decision to a job in needs_review: retry puts
// it back on its queue (pending), fail ends it (failed).
func (s *Store) Decide(ctx context.Context, jobID string, d Decision, operator string) (pipeline.Job, error) {
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, jobID))
		if err != nil {
			return err
		}
		var o pipeline.Outcome
		switch d {
		case DecisionRetry:
			o = pipeline.Outcome{Status: pipeline.StatusPending}
		case DecisionFail:
			o = pipeline.Outcome{Status: pipeline.StatusFailed, ErrorClass: j.LastErrorClass, ErrorCode: j.LastErrorCode,
				ErrorMessage: j.LastErrorMessage}
		default:
			return fmt.Errorf("%w: decision must be retry or fail, got %q", pipeline.ErrInvalidInput, d)
		}
		if j.Status != pipeline.StatusNeedsReview {
			return &pipeline.TransitionError{From: j.Status, To: o.Status}
		}
		if _, err := appendEvent(ctx, tx, now, jobID, pipeline.EventDecision, "", "", "", map[string]any{"decision": d, "operator": operator}); err != nil {
			return err
		}
		if err := settle(ctx, tx, now, jobID, j.Status, "", o, map[string]any{"decision": d}); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, jobID))
		return err
	})
	return job, err
}

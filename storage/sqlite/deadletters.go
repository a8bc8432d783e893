package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"edgepipe/pipeline"
)

func insertDeadLetter(ctx context.Context, tx *wtx, now int64, jobID, queue, reason, detail string) (int64, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO dead_letters (job_id, queue, reason, detail, dead_lettered_at) VALUES (?, ?, ?, ?, ?)`,
		jobID, queue, reason, detail, now)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

const deadLetterColumns = `d.id, d.job_id, d.queue, d.reason, d.detail, d.dead_lettered_at, d.redriven_at, coalesce(d.redriven_to_queue, ''),
	d.discarded_at, d.discarded_by, d.discard_reason, j.tenant, j.instance_id, j.workflow_version`

// deadLetterFrom joins each dead letter to its job (tenant, instance id and
// version).
const deadLetterFrom = ` FROM dead_letters AS d JOIN jobs AS j ON j.id = d.job_id`

// openDeadLetter is the condition of a dead letter neither redriven nor
// discarded.
const openDeadLetter = `d.redriven_at IS NULL AND d.discarded_at IS NULL`

func scanDeadLetter(r rowScanner) (pipeline.DeadLetter, error) {
	var d pipeline.DeadLetter
	var at int64
	var redriven, discarded sql.NullInt64
	if err := r.Scan(&d.ID, &d.JobID, &d.Queue, &d.Reason, &d.Detail, &at, &redriven, &d.RedrivenToQueue,
		&discarded, &d.DiscardedBy, &d.DiscardReason, &d.Tenant, &d.InstanceID, &d.Version); err != nil {
		return d, translate(err)
	}
	d.DeadLetteredAt, d.RedrivenAt, d.DiscardedAt = fromMS(at), timeOf(redriven), timeOf(discarded)
	return d, nil
}

// ListDeadLetters returns dead letters, newest first; open ones only unless
// includeSettled (then redriven and discarded ones too). afterID > 0
// continues below that id.
func (s *Store) ListDeadLetters(ctx context.Context, includeSettled bool, afterID int64, limit int) ([]pipeline.DeadLetter, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	q := `SELECT ` + deadLetterColumns + deadLetterFrom + ` WHERE (? OR (` + openDeadLetter + `)) AND (? = 0 OR d.id < ?) ORDER BY d.id DESC LIMIT ?`
	return s.queryDeadLetters(ctx, s.read, q, includeSettled, afterID, afterID, limit)
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func (s *Store) queryDeadLetters(ctx context.Context, db querier, q string, args ...any) ([]pipeline.DeadLetter, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, translate(rows.Err())
}

// FindDeadLetters returns the open dead letters f selects, oldest first, at
// most limit (1 to 500; default 100), and whether more match.
func (s *Store) FindDeadLetters(ctx context.Context, f pipeline.DeadLetterFilter, limit int) ([]pipeline.DeadLetter, bool, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	older := int64(0)
	if !f.OlderThan.IsZero() {
		older = ms(f.OlderThan)
	}
	q := `SELECT ` + deadLetterColumns + deadLetterFrom + ` WHERE ` + openDeadLetter + `
		AND (?1 = '' OR d.reason = ?1) AND (?2 = '' OR j.workflow_version = ?2) AND (?3 = '' OR j.tenant = ?3)
		AND (?4 = 0 OR d.dead_lettered_at <= ?4)
		ORDER BY d.id LIMIT ?5`
	dls, err := s.queryDeadLetters(ctx, s.read, q, f.Reason, f.Version, f.Tenant, older, limit+1)
	if err != nil {
		return nil, false, err
	}
	if len(dls) > limit {
		return dls[:limit], true, nil
	}
	return dls, false, nil
}

// GetDeadLetter returns one dead letter.
func (s *Store) GetDeadLetter(ctx context.Context, id int64) (pipeline.DeadLetter, error) {
	return scanDeadLetter(s.read.QueryRowContext(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = ?`, id))
}

// CountDeadLetters returns open dead letters (neither redriven nor
// discarded) by reason (for /metrics).
func (s *Store) CountDeadLetters(ctx context.Context) (map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT d.reason, count(*) FROM dead_letters AS d WHERE `+openDeadLetter+` GROUP BY d.reason`)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, translate(err)
		}
		out[r] = n
	}
	return out, translate(rows.Err())
}

// Redrive sends a dead-lettered job back to queue (decided by the caller's
// router from the job's id, so it is always its own version's queue) exactly
// once: the dead letter is marked redriven, the job goes dead_lettered →
// pending with its attempts reset, and one message is enqueued, in one
// transaction. Redriving the same dead letter again fails with
// pipeline.ErrInvalidTransition and changes nothing.
func (s *Store) Redrive(ctx context.Context, p *pipeline.RedriveParams) (pipeline.Job, error) {
	deadLetterID, queue, operator := p.DeadLetterID, p.Queue, p.Operator
	if queue == "" {
		return pipeline.Job{}, fmt.Errorf("%w: redrive needs a queue", pipeline.ErrInvalidInput)
	}
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		d, err := scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = ?`, deadLetterID))
		if err != nil {
			return err
		}
		if err := d.CheckOpen(); err != nil {
			return err
		}
		var st, version string
		if err := tx.QueryRowContext(ctx, `SELECT status, workflow_version FROM jobs WHERE id = ?`, d.JobID).Scan(&st, &version); err != nil {
			return err
		}
		if queue != "render-"+version {
			// A job only ever runs on its own version's queue (docs/design.md §4).
			return fmt.Errorf("%w: job %s is %s and can only be redriven to render-%s, not %s", pipeline.ErrInvalidInput, d.JobID, version, version, queue)
		}
		if pipeline.Status(st) != pipeline.StatusDeadLettered {
			return &pipeline.TransitionError{From: pipeline.Status(st), To: pipeline.StatusPending}
		}
		res, err := tx.ExecContext(ctx, `UPDATE dead_letters SET redriven_at = ?, redriven_to_queue = ? WHERE id = ? AND redriven_at IS NULL AND discarded_at IS NULL`,
			now, queue, deadLetterID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: dead letter %d was already settled", pipeline.ErrInvalidTransition, deadLetterID)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET queue = ?, attempts = 0, infra_failures = 0, attempt_id = NULL WHERE id = ?`, queue, d.JobID); err != nil {
			return err
		}
		if _, err := appendEvent(ctx, tx, now, d.JobID, pipeline.EventRedriven, "", "", "",
			map[string]any{"dead_letter_id": deadLetterID, "queue": queue, "operator": operator, "reason": d.Reason}); err != nil {
			return err
		}
		if err := settle(ctx, tx, now, d.JobID, pipeline.StatusDeadLettered, "", pipeline.Outcome{Status: pipeline.StatusPending}, nil); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, d.JobID))
		return err
	})
	return job, err
}

// DiscardDeadLetter settles a dead letter without redriving it: the dead
// letter is marked discarded (when, by whom, why), its job stays
// dead_lettered but no longer asks for an operator, and a
// dead_letter_discarded event records it, in one transaction. A reason is
// required. Discarding a settled dead letter fails with
// pipeline.ErrInvalidTransition and changes nothing.
func (s *Store) DiscardDeadLetter(ctx context.Context, p *pipeline.DiscardDeadLetterParams) (pipeline.DeadLetter, error) {
	deadLetterID, operator, reason := p.DeadLetterID, p.Operator, p.Reason
	if err := pipeline.CheckDiscardReason(reason); err != nil {
		return pipeline.DeadLetter{}, err
	}
	var out pipeline.DeadLetter
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		d, err := scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = ?`, deadLetterID))
		if err != nil {
			return err
		}
		if err := d.CheckOpen(); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE dead_letters SET discarded_at = ?, discarded_by = ?, discard_reason = ?
			WHERE id = ? AND redriven_at IS NULL AND discarded_at IS NULL`, now, operator, reason, deadLetterID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: dead letter %d was already settled", pipeline.ErrInvalidTransition, deadLetterID)
		}
		// The status does not change (terminal stays terminal); the job just
		// stops asking for a human, unless another of its dead letters is
		// still open.
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET requires_action = 0, updated_at = ?1
			WHERE id = ?2 AND status = 'dead_lettered' AND NOT EXISTS (
				SELECT 1 FROM dead_letters AS d WHERE d.job_id = ?2 AND `+openDeadLetter+`)`, now, d.JobID); err != nil {
			return err
		}
		if _, err := appendEvent(ctx, tx, now, d.JobID, pipeline.EventDeadLetterDiscarded, "", "", "",
			map[string]any{"dead_letter_id": deadLetterID, "operator": operator, "reason": reason, "dead_letter_reason": d.Reason}); err != nil {
			return err
		}
		out, err = scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = ?`, deadLetterID))
		return err
	})
	return out, err
}

// PurgeSettledDeadLetters deletes dead letters that were redriven or
// discarded before cutoff (retention), returning how many. Open dead
// letters are never deleted, and neither are jobs or their events, which
// keep the history (the redriven and dead_letter_discarded events).
func (s *Store) PurgeSettledDeadLetters(ctx context.Context, cutoff time.Time) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM dead_letters WHERE redriven_at < ?1 OR discarded_at < ?1`, ms(cutoff))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

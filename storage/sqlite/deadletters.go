package sqlite

import (
	"context"
	"database/sql"
	"fmt"

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

const deadLetterColumns = `id, job_id, queue, reason, detail, dead_lettered_at, redriven_at, coalesce(redriven_to_queue, '')`

func scanDeadLetter(r rowScanner) (pipeline.DeadLetter, error) {
	var d pipeline.DeadLetter
	var at int64
	var redriven sql.NullInt64
	if err := r.Scan(&d.ID, &d.JobID, &d.Queue, &d.Reason, &d.Detail, &at, &redriven, &d.RedrivenToQueue); err != nil {
		return d, translate(err)
	}
	d.DeadLetteredAt, d.RedrivenAt = fromMS(at), timeOf(redriven)
	return d, nil
}

// ListDeadLetters returns dead letters, newest first; open ones only unless
// includeRedriven. afterID > 0 continues below that id.
func (s *Store) ListDeadLetters(ctx context.Context, includeRedriven bool, afterID int64, limit int) ([]pipeline.DeadLetter, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	q := `SELECT ` + deadLetterColumns + ` FROM dead_letters WHERE (? OR redriven_at IS NULL) AND (? = 0 OR id < ?) ORDER BY id DESC LIMIT ?`
	rows, err := s.read.QueryContext(ctx, q, includeRedriven, afterID, afterID, limit)
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

// GetDeadLetter returns one dead letter.
func (s *Store) GetDeadLetter(ctx context.Context, id int64) (pipeline.DeadLetter, error) {
	return scanDeadLetter(s.read.QueryRowContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE id = ?`, id))
}

// CountDeadLetters returns open dead letters by reason (for /metrics).
func (s *Store) CountDeadLetters(ctx context.Context) (map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT reason, count(*) FROM dead_letters WHERE redriven_at IS NULL GROUP BY reason`)
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
func (s *Store) Redrive(ctx context.Context, deadLetterID int64, queue, operator string) (pipeline.Job, error) {
	if queue == "" {
		return pipeline.Job{}, fmt.Errorf("%w: redrive needs a queue", pipeline.ErrInvalidInput)
	}
	var job pipeline.Job
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		d, err := scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE id = ?`, deadLetterID))
		if err != nil {
			return err
		}
		if !d.RedrivenAt.IsZero() {
			return fmt.Errorf("%w: dead letter %d was already redriven", pipeline.ErrInvalidTransition, deadLetterID)
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
		res, err := tx.ExecContext(ctx, `UPDATE dead_letters SET redriven_at = ?, redriven_to_queue = ? WHERE id = ? AND redriven_at IS NULL`,
			now, queue, deadLetterID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: dead letter %d was already redriven", pipeline.ErrInvalidTransition, deadLetterID)
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

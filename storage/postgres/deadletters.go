package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

func insertDeadLetter(ctx context.Context, tx dbtx, now int64, jobID, queue, reason, detail string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO dead_letters (job_id, queue, reason, detail, dead_lettered_at) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		jobID, queue, reason, detail, now).Scan(&id)
	return id, err
}

const deadLetterColumns = `d.id, d.job_id, d.queue, d.reason, d.detail, d.dead_lettered_at, d.redriven_at, coalesce(d.redriven_to_queue, ''),
	d.discarded_at, d.discarded_by, d.discard_reason, j.tenant, j.instance_id, j.workflow_version`

const deadLetterFrom = ` FROM dead_letters AS d JOIN jobs AS j ON j.id = d.job_id`

const openDeadLetter = `d.redriven_at IS NULL AND d.discarded_at IS NULL`

func scanDeadLetter(r pgx.Row) (pipeline.DeadLetter, error) {
	var d pipeline.DeadLetter
	var at int64
	var redriven, discarded *int64
	if err := r.Scan(&d.ID, &d.JobID, &d.Queue, &d.Reason, &d.Detail, &at, &redriven, &d.RedrivenToQueue,
		&discarded, &d.DiscardedBy, &d.DiscardReason, &d.Tenant, &d.InstanceID, &d.Version); err != nil {
		return d, translate(err)
	}
	d.DeadLetteredAt, d.RedrivenAt, d.DiscardedAt = fromMS(at), timeOf(redriven), timeOf(discarded)
	return d, nil
}

func queryDeadLetters(ctx context.Context, db dbtx, q string, args ...any) ([]pipeline.DeadLetter, error) {
	var out []pipeline.DeadLetter
	err := eachRow(db.Query(ctx, q, args...))(func(r pgx.Rows) error {
		d, err := scanDeadLetter(r)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// ListDeadLetters returns dead letters, newest first; open ones only unless
// includeSettled. afterID > 0 continues below that id.
func (s *Store) ListDeadLetters(ctx context.Context, includeSettled bool, afterID int64, limit int) ([]pipeline.DeadLetter, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	return queryDeadLetters(ctx, s.pool, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE ($1 OR (`+openDeadLetter+`))
		AND ($2::bigint = 0 OR d.id < $2) ORDER BY d.id DESC LIMIT $3`, planEachCall, includeSettled, afterID, limit)
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
	dls, err := queryDeadLetters(ctx, s.pool, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE `+openDeadLetter+`
		AND ($1::text = '' OR d.reason = $1) AND ($2::text = '' OR j.workflow_version = $2) AND ($3::text = '' OR j.tenant = $3)
		AND ($4::bigint = 0 OR d.dead_lettered_at <= $4)
		ORDER BY d.id LIMIT $5`, planEachCall, f.Reason, f.Version, f.Tenant, older, limit+1)
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
	return scanDeadLetter(s.pool.QueryRow(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = $1`, id))
}

// CountDeadLetters returns open dead letters by reason (for /metrics).
func (s *Store) CountDeadLetters(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := eachRow(s.pool.Query(ctx, `SELECT d.reason, count(*) FROM dead_letters AS d WHERE `+openDeadLetter+` GROUP BY d.reason`))(func(r pgx.Rows) error {
		var reason string
		var n int
		if err := r.Scan(&reason, &n); err != nil {
			return err
		}
		out[reason] = n
		return nil
	})
	return out, err
}

// lockDeadLetter reads a dead letter and locks it and its job, in that
// order (every path that locks both does so in this order).
func lockDeadLetter(ctx context.Context, tx pgx.Tx, id int64) (pipeline.DeadLetter, error) {
	return scanDeadLetter(tx.QueryRow(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = $1 FOR UPDATE OF d, j`, id))
}

// Redrive sends a dead-lettered job back to queue (its own version's)
// exactly once, in one transaction; see storage/sqlite's Redrive.
func (s *Store) Redrive(ctx context.Context, p *pipeline.RedriveParams) (pipeline.Job, error) {
	deadLetterID, queue, operator := p.DeadLetterID, p.Queue, p.Operator
	if queue == "" {
		return pipeline.Job{}, fmt.Errorf("%w: redrive needs a queue", pipeline.ErrInvalidInput)
	}
	var job pipeline.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		d, err := lockDeadLetter(ctx, tx, deadLetterID)
		if err != nil {
			return err
		}
		if err := d.CheckOpen(); err != nil {
			return err
		}
		var st string
		if err := tx.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, d.JobID).Scan(&st); err != nil {
			return err
		}
		if queue != "render-"+d.Version {
			return fmt.Errorf("%w: job %s is %s and can only be redriven to render-%s, not %s", pipeline.ErrInvalidInput, d.JobID, d.Version, d.Version, queue)
		}
		if pipeline.Status(st) != pipeline.StatusDeadLettered {
			return &pipeline.TransitionError{From: pipeline.Status(st), To: pipeline.StatusPending}
		}
		tag, err := tx.Exec(ctx, `UPDATE dead_letters SET redriven_at = $1, redriven_to_queue = $2 WHERE id = $3 AND `+
			`redriven_at IS NULL AND discarded_at IS NULL`, now, queue, deadLetterID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: dead letter %d was already settled", pipeline.ErrInvalidTransition, deadLetterID)
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET queue = $1, attempts = 0, infra_failures = 0, attempt_id = NULL WHERE id = $2`, queue, d.JobID); err != nil {
			return err
		}
		if _, err := appendEvent(ctx, tx, now, d.JobID, pipeline.EventRedriven, "", "", "",
			map[string]any{"dead_letter_id": deadLetterID, "queue": queue, "operator": operator, "reason": d.Reason}); err != nil {
			return err
		}
		if err := settle(ctx, tx, now, d.JobID, pipeline.StatusDeadLettered, "", pipeline.Outcome{Status: pipeline.StatusPending}, nil); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, d.JobID))
		return err
	})
	return job, err
}

// DiscardDeadLetter settles a dead letter without redriving it; see
// storage/sqlite's DiscardDeadLetter.
func (s *Store) DiscardDeadLetter(ctx context.Context, p *pipeline.DiscardDeadLetterParams) (pipeline.DeadLetter, error) {
	deadLetterID, operator, reason := p.DeadLetterID, p.Operator, p.Reason
	if err := pipeline.CheckDiscardReason(reason); err != nil {
		return pipeline.DeadLetter{}, err
	}
	var out pipeline.DeadLetter
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		d, err := lockDeadLetter(ctx, tx, deadLetterID)
		if err != nil {
			return err
		}
		if err := d.CheckOpen(); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE dead_letters SET discarded_at = $1, discarded_by = $2, discard_reason = $3
			WHERE id = $4 AND redriven_at IS NULL AND discarded_at IS NULL`, now, operator, reason, deadLetterID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: dead letter %d was already settled", pipeline.ErrInvalidTransition, deadLetterID)
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET requires_action = 0, updated_at = $1
			WHERE id = $2 AND status = 'dead_lettered' AND NOT EXISTS (
				SELECT 1 FROM dead_letters AS d WHERE d.job_id = $2 AND `+openDeadLetter+`)`, now, d.JobID); err != nil {
			return err
		}
		if _, err := appendEvent(ctx, tx, now, d.JobID, pipeline.EventDeadLetterDiscarded, "", "", "",
			map[string]any{"dead_letter_id": deadLetterID, "operator": operator, "reason": reason, "dead_letter_reason": d.Reason}); err != nil {
			return err
		}
		out, err = scanDeadLetter(tx.QueryRow(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+` WHERE d.id = $1`, deadLetterID))
		return err
	})
	return out, err
}

// PurgeSettledDeadLetters deletes dead letters redriven or discarded before
// cutoff (retention); open dead letters, jobs and events are never deleted.
func (s *Store) PurgeSettledDeadLetters(ctx context.Context, cutoff time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM dead_letters WHERE redriven_at < $1 OR discarded_at < $1`, ms(cutoff))
	if err != nil {
		return 0, translate(err)
	}
	return int(tag.RowsAffected()), nil
}

package sqlite

import (
	"context"
	"errors"
	"fmt"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// SetCallStaged points provider call p.CallID at the staged copy of its
// answer (an asset of kind pipeline.KindStaged). Not fenced, like
// FinishCall: the audit trail records where a paid answer is, whichever
// attempt stored it.
func (s *Store) SetCallStaged(ctx context.Context, p *pipeline.SetCallStagedParams) error {
	if p == nil || p.CallID <= 0 || p.Key == "" {
		return fmt.Errorf("%w: set call staged needs a call id and a key", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx *wtx) error {
		var kind string
		if err := tx.QueryRowContext(ctx, `SELECT kind FROM assets WHERE object_key = ?`, p.Key).Scan(&kind); err != nil {
			if err := translate(err); errors.Is(err, pipeline.ErrNotFound) {
				return fmt.Errorf("%w: staged answer %s has no asset row", pipeline.ErrInvalidInput, p.Key)
			}
			return err
		}
		if kind != pipeline.KindStaged {
			return fmt.Errorf("%w: %s is a %s asset, not a staged answer", pipeline.ErrInvalidInput, p.Key, kind)
		}
		res, err := tx.ExecContext(ctx, `UPDATE provider_calls SET staged_key = ? WHERE id = ?`, p.Key, p.CallID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: provider call %d", pipeline.ErrNotFound, p.CallID)
		}
		return nil
	})
}

// ReleaseStaged begins removing a staged answer that is no longer needed:
// in one transaction it deletes the staged asset row and records a
// 'deleting' claim for p.Owner, which keeps the key out of the sweeper's
// and any writer's hands until FinishAbandon(p.Owner, key) after the object
// was deleted. released=false means there was no staged asset under the key
// (already released). The call rows keep their staged_key as history.
func (s *Store) ReleaseStaged(ctx context.Context, p *pipeline.ReleaseStagedParams) (released bool, err error) {
	if p == nil || p.Key == "" || p.Owner == "" {
		return false, fmt.Errorf("%w: release staged needs a key and an owner", pipeline.ErrInvalidInput)
	}
	err = s.inTx(ctx, func(tx *wtx) error {
		released = false
		var jobID string
		err := tx.QueryRowContext(ctx, `DELETE FROM assets WHERE object_key = ? AND kind = ? RETURNING job_id`, p.Key, pipeline.KindStaged).Scan(&jobID)
		if err != nil {
			if errors.Is(translate(err), pipeline.ErrNotFound) {
				return nil
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
			VALUES (?, ?, ?, 'deleting', ?) ON CONFLICT (object_key, attempt_id) DO UPDATE SET state = 'deleting', claimed_at = excluded.claimed_at`,
			p.Key, p.Owner, jobID, s.now()); err != nil {
			return err
		}
		released = true
		return nil
	})
	return released, err
}

// StagedAnswers lists staged answers: those of p.JobID, or with
// p.FinalJobsOnly those of every job that is over for good (succeeded,
// failed, canceled), which nothing can use any more (the sweeper releases
// them). At most p.Limit rows (default 1000).
func (s *Store) StagedAnswers(ctx context.Context, p *pipeline.StagedAnswersParams) ([]pipeline.Asset, error) {
	limit := 1000
	if p != nil && p.Limit > 0 {
		limit = p.Limit
	}
	q := `SELECT ` + assetColumns + ` FROM assets WHERE kind = ?1 AND job_id = ?2 ORDER BY object_key LIMIT ?3`
	var jobID string
	if p != nil {
		jobID = p.JobID
	}
	if p != nil && p.FinalJobsOnly {
		q = `SELECT ` + sqlcols.Prefixed("a.", assetColumns) + ` FROM assets a JOIN jobs j ON j.id = a.job_id
			WHERE a.kind = ?1 AND j.status IN ('succeeded','failed','canceled') AND (?2 = '' OR a.job_id = ?2)
			ORDER BY a.object_key LIMIT ?3`
	} else if jobID == "" {
		return nil, fmt.Errorf("%w: staged answers of which job?", pipeline.ErrInvalidInput)
	}
	rows, err := s.read.QueryContext(ctx, q, pipeline.KindStaged, jobID, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.Asset
	for rows.Next() {
		a, err := scanAsset(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, translate(rows.Err())
}

// CommitStaged records an answer that a worker staged outside an attempt
// (Engine.FlushSpool: it was kept in that worker's spool while the object
// store was down): in one transaction the staged asset row is written and
// the call row pointed at it. Refused for a job that is over for good
// (nothing may use the answer any more) and for an asset of other content.
// Not fenced: no attempt owns the write; the staging key is the call's
// alone, and the sweeper leaves staging keys of live jobs alone.
func (s *Store) CommitStaged(ctx context.Context, p *pipeline.CommitStagedParams) error {
	if p == nil || p.CallID <= 0 {
		return fmt.Errorf("%w: commit staged needs a call id", pipeline.ErrInvalidInput)
	}
	a := p.Asset
	if len(a.SHA256) != 64 || a.SizeBytes < 0 || a.Key == "" || a.ContentType == "" || a.Kind != pipeline.KindStaged {
		return fmt.Errorf("%w: a staged asset needs a key, a content type, a size and a SHA-256", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx *wtx) error {
		var jobID, status string
		if err := tx.QueryRowContext(ctx, `SELECT c.job_id, j.status FROM provider_calls c JOIN jobs j ON j.id = c.job_id WHERE c.id = ?`,
			p.CallID).Scan(&jobID, &status); err != nil {
			return translate(err)
		}
		if pipeline.Status(status).Final() {
			return &pipeline.TransitionError{From: pipeline.Status(status), To: pipeline.Status(status)}
		}
		existing, err := scanAsset(tx.QueryRowContext(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key = ?`, a.Key))
		switch {
		case err == nil:
			if existing.SHA256 != a.SHA256 || existing.SizeBytes != a.SizeBytes {
				return fmt.Errorf("%w: asset %s has other content", pipeline.ErrAlreadyExists, a.Key)
			}
		case errors.Is(err, pipeline.ErrNotFound):
			if _, err := tx.ExecContext(ctx, `INSERT INTO assets (object_key, job_id, kind, size_bytes, sha256, content_type,
				duration_ms, created_by_attempt, created_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)`,
				a.Key, jobID, a.Kind, a.SizeBytes, a.SHA256, a.ContentType, a.CreatedByAttempt, s.now()); err != nil {
				return err
			}
		default:
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE provider_calls SET staged_key = ? WHERE id = ?`, a.Key, p.CallID)
		return err
	})
}

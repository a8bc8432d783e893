package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// SetCallStaged points provider call p.CallID at the staged copy of its
// answer (an asset of kind pipeline.KindStaged). Not fenced, like FinishCall.
func (s *Store) SetCallStaged(ctx context.Context, p *pipeline.SetCallStagedParams) error {
	if p == nil || p.CallID <= 0 || p.Key == "" {
		return fmt.Errorf("%w: set call staged needs a call id and a key", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockKey(ctx, tx, p.Key); err != nil {
			return err
		}
		var kind string
		if err := tx.QueryRow(ctx, `SELECT kind FROM assets WHERE object_key = $1`, p.Key).Scan(&kind); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: staged answer %s has no asset row", pipeline.ErrInvalidInput, p.Key)
			}
			return err
		}
		if kind != pipeline.KindStaged {
			return fmt.Errorf("%w: %s is a %s asset, not a staged answer", pipeline.ErrInvalidInput, p.Key, kind)
		}
		tag, err := tx.Exec(ctx, `UPDATE provider_calls SET staged_key = $1 WHERE id = $2`, p.Key, p.CallID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: provider call %d", pipeline.ErrNotFound, p.CallID)
		}
		return nil
	})
}

// ReleaseStaged deletes a staged answer's asset row and records a
// 'deleting' claim for p.Owner until FinishAbandon, in one transaction.
func (s *Store) ReleaseStaged(ctx context.Context, p *pipeline.ReleaseStagedParams) (released bool, err error) {
	if p == nil || p.Key == "" || p.Owner == "" {
		return false, fmt.Errorf("%w: release staged needs a key and an owner", pipeline.ErrInvalidInput)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		released = false
		if err := lockKey(ctx, tx, p.Key); err != nil {
			return err
		}
		var jobID string
		err := tx.QueryRow(ctx, `DELETE FROM assets WHERE object_key = $1 AND kind = $2 RETURNING job_id`, p.Key, pipeline.KindStaged).Scan(&jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := upsertDeleting(ctx, tx, p.Key, p.Owner, &jobID, s.now()); err != nil {
			return err
		}
		released = true
		return nil
	})
	return released, err
}

// StagedAnswers lists staged answers: those of p.JobID, or with
// p.FinalJobsOnly those of every job over for good. At most p.Limit rows
// (default 1000).
func (s *Store) StagedAnswers(ctx context.Context, p *pipeline.StagedAnswersParams) ([]pipeline.Asset, error) {
	limit := 1000
	if p != nil && p.Limit > 0 {
		limit = p.Limit
	}
	q := `SELECT ` + assetColumns + ` FROM assets WHERE kind = $1 AND job_id = $2 ORDER BY object_key COLLATE "C" LIMIT $3`
	var jobID string
	if p != nil {
		jobID = p.JobID
	}
	if p != nil && p.FinalJobsOnly {
		q = `SELECT ` + sqlcols.Prefixed("a.", assetColumns) + ` FROM assets a JOIN jobs j ON j.id = a.job_id
			WHERE a.kind = $1 AND j.status IN ('succeeded','failed','canceled') AND ($2::text = '' OR a.job_id = $2)
			ORDER BY a.object_key COLLATE "C" LIMIT $3`
	} else if jobID == "" {
		return nil, fmt.Errorf("%w: staged answers of which job?", pipeline.ErrInvalidInput)
	}
	var out []pipeline.Asset
	err := eachRow(s.pool.Query(ctx, q, planEachCall, pipeline.KindStaged, jobID, limit))(func(r pgx.Rows) error {
		a, err := scanAsset(r)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// CommitStaged records an answer a worker staged outside an attempt
// (Engine.FlushSpool): the staged asset row and the call's pointer to it,
// in one transaction. Refused for a job over for good.
func (s *Store) CommitStaged(ctx context.Context, p *pipeline.CommitStagedParams) error {
	if p == nil || p.CallID <= 0 {
		return fmt.Errorf("%w: commit staged needs a call id", pipeline.ErrInvalidInput)
	}
	a := p.Asset
	if len(a.SHA256) != 64 || a.SizeBytes < 0 || a.Key == "" || a.ContentType == "" || a.Kind != pipeline.KindStaged {
		return fmt.Errorf("%w: a staged asset needs a key, a content type, a size and a SHA-256", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var jobID, status string
		// The job's row lock keeps it from settling (and its staged
		// answers from being released as final) while this commits.
		if err := tx.QueryRow(ctx, `SELECT c.job_id, j.status FROM provider_calls c JOIN jobs j ON j.id = c.job_id
			WHERE c.id = $1 FOR SHARE OF j`, p.CallID).Scan(&jobID, &status); err != nil {
			return err
		}
		if pipeline.Status(status).Final() {
			return &pipeline.TransitionError{From: pipeline.Status(status), To: pipeline.Status(status)}
		}
		if err := lockKey(ctx, tx, a.Key); err != nil {
			return err
		}
		if err := insertAsset(ctx, tx, a, jobID, a.CreatedByAttempt, 0, s.now()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE provider_calls SET staged_key = $1 WHERE id = $2`, a.Key, p.CallID)
		return err
	})
}

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// JobStory reads everything the store holds about one job (by jobs.id) in
// one read-only REPEATABLE READ transaction, so the job row, its events, its
// provider calls and its objects are of the same moment. A missing job is
// pipeline.ErrNotFound.
func (s *Store) JobStory(ctx context.Context, p *pipeline.JobStoryParams) (pipeline.JobStory, error) {
	var st pipeline.JobStory
	limit := p.MaxEvents
	if limit <= 0 {
		limit = pipeline.DefaultStoryEvents
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return st, translate(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if st.Job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, p.JobID)); err != nil {
		return st, err
	}
	if st.Events, err = collect(ctx, tx, scanEvent, `SELECT `+eventColumns+` FROM job_events WHERE job_id = $1 ORDER BY id LIMIT $2`,
		p.JobID, limit+1); err != nil {
		return st, err
	}
	if len(st.Events) > limit {
		st.Events, st.MoreEvents = st.Events[:limit], true
	}
	if st.Calls, err = collect(ctx, tx, scanCall, `SELECT `+callColumns+` FROM provider_calls WHERE job_id = $1 ORDER BY id`,
		p.JobID); err != nil {
		return st, err
	}
	if st.Assets, err = collect(ctx, tx, scanAsset, `SELECT `+assetColumns+` FROM assets WHERE job_id = $1 ORDER BY object_key`,
		p.JobID); err != nil {
		return st, err
	}
	st.Claims, err = collect(ctx, tx, scanClaim, `SELECT object_key, attempt_id, job_id, state, claimed_at
		FROM object_claims WHERE job_id = $1 ORDER BY object_key, attempt_id`, p.JobID)
	return st, err
}

func scanClaim(r pgx.Row) (pipeline.ObjectClaim, error) {
	var c pipeline.ObjectClaim
	var at int64
	var job *string
	if err := r.Scan(&c.Key, &c.AttemptID, &job, &c.State, &at); err != nil {
		return c, translate(err)
	}
	c.JobID, c.ClaimedAt = str(job), fromMS(at)
	return c, nil
}

// collect runs a query on db and scans every row with scan.
func collect[T any](ctx context.Context, db dbtx, scan func(pgx.Row) (T, error), q string, args ...any) ([]T, error) {
	var out []T
	err := eachRow(db.Query(ctx, q, args...))(func(r pgx.Rows) error {
		v, err := scan(r)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

package sqlite

import (
	"context"
	"database/sql"

	"edgepipe/pipeline"
)

// JobStory reads everything the store holds about one job (by jobs.id) in
// one read transaction, so the job row, its events, its provider calls and
// its objects are of the same moment. Each part is one indexed SELECT on
// job_id. A missing job is pipeline.ErrNotFound.
func (s *Store) JobStory(ctx context.Context, p *pipeline.JobStoryParams) (pipeline.JobStory, error) {
	var st pipeline.JobStory
	limit := p.MaxEvents
	if limit <= 0 {
		limit = pipeline.DefaultStoryEvents
	}
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return st, translate(err)
	}
	defer func() { _ = tx.Rollback() }()
	if st.Job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, p.JobID)); err != nil {
		return st, err
	}
	if st.Events, err = collect(ctx, tx, scanEvent, `SELECT `+eventColumns+`
		FROM job_events WHERE job_id = ? ORDER BY id LIMIT ?`, p.JobID, limit+1); err != nil {
		return st, err
	}
	if len(st.Events) > limit {
		st.Events, st.MoreEvents = st.Events[:limit], true
	}
	if st.Calls, err = collect(ctx, tx, scanCall, `SELECT `+callColumns+` FROM provider_calls
		WHERE job_id = ? ORDER BY id`, p.JobID); err != nil {
		return st, err
	}
	if st.Assets, err = collect(ctx, tx, scanAsset, `SELECT `+assetColumns+` FROM assets
		WHERE job_id = ? ORDER BY object_key`, p.JobID); err != nil {
		return st, err
	}
	st.Claims, err = collect(ctx, tx, scanClaim, `SELECT object_key, attempt_id, job_id, state, claimed_at
		FROM object_claims WHERE job_id = ? ORDER BY object_key, attempt_id`, p.JobID)
	return st, err
}

func scanClaim(r rowScanner) (pipeline.ObjectClaim, error) {
	var c pipeline.ObjectClaim
	var at int64
	if err := r.Scan(&c.Key, &c.AttemptID, &c.JobID, &c.State, &at); err != nil {
		return c, translate(err)
	}
	c.ClaimedAt = fromMS(at)
	return c, nil
}

// collect runs a query and scans every row with scan.
func collect[T any](ctx context.Context, db querier, scan func(rowScanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, translate(rows.Err())
}

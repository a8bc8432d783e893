package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"edgepipe/pipeline"
)

// PlanUnits records one unit per scene, once: units that exist keep their
// state and results, so planning again on a later attempt changes nothing.
func (s *Store) PlanUnits(ctx context.Context, lease pipeline.Lease, units []pipeline.Unit) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "plan units"); err != nil {
			return err
		}
		for _, u := range units {
			if u.JobID != lease.JobID {
				return fmt.Errorf("%w: unit of job %s planned under job %s's lease", pipeline.ErrInvalidInput, u.JobID, lease.JobID)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO units (job_id, scene_index, kind, unit_key, status, updated_by_attempt, updated_at)
				VALUES (?, ?, ?, ?, 'planned', ?, ?) ON CONFLICT (job_id, scene_index) DO NOTHING`,
				u.JobID, u.Scene, u.Kind, u.UnitKey, lease.AttemptID, now); err != nil {
				return err
			}
		}
		return nil
	})
}

const unitColumns = `job_id, scene_index, kind, unit_key, status, external_job_id, result_json, updated_at`

func scanUnit(r rowScanner) (pipeline.Unit, error) {
	var u pipeline.Unit
	var result string
	var at int64
	if err := r.Scan(&u.JobID, &u.Scene, &u.Kind, &u.UnitKey, &u.Status, &u.ExternalJobID, &result, &at); err != nil {
		return u, translate(err)
	}
	u.UpdatedAt = fromMS(at)
	u.Artifacts = map[string]string{}
	if err := json.Unmarshal([]byte(result), &u.Artifacts); err != nil {
		return u, fmt.Errorf("sqlite: unit %s/%d has unreadable results: %w", u.JobID, u.Scene, err)
	}
	return u, nil
}

// Units returns a job's units in scene order.
func (s *Store) Units(ctx context.Context, jobID string) ([]pipeline.Unit, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+unitColumns+` FROM units WHERE job_id = ? ORDER BY scene_index`, jobID)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.Unit
	for rows.Next() {
		u, err := scanUnit(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, translate(rows.Err())
}

// UpdateUnit records a unit's progress for the attempt holding lease: its
// status, an async provider's external job id, and artifacts (merged into
// the ones already stored). An artifact may only name an object that has an
// asset row; that is checked here, in the same transaction.
func (s *Store) UpdateUnit(ctx context.Context, lease pipeline.Lease, scene int, up pipeline.UnitUpdate) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "update unit"); err != nil {
			return err
		}
		for name, key := range up.Artifacts {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM assets WHERE object_key = ?`, key).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%w: artifact %s of unit %s/%d names %s, which has no asset row", pipeline.ErrInvalidInput, name, lease.JobID, scene, key)
			}
		}
		arts := []byte("{}") // json_patch with 'null' would erase the stored artifacts
		if len(up.Artifacts) > 0 {
			var err error
			if arts, err = json.Marshal(up.Artifacts); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE units SET
			status = CASE WHEN ?1 = '' THEN status ELSE ?1 END,
			external_job_id = CASE WHEN ?2 = '' THEN external_job_id ELSE ?2 END,
			result_json = json_patch(result_json, ?3),
			updated_by_attempt = ?4, updated_at = ?5
			WHERE job_id = ?6 AND scene_index = ?7`, up.Status, up.ExternalJobID, string(arts), lease.AttemptID, now, lease.JobID, scene)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: unit %s/%d", pipeline.ErrNotFound, lease.JobID, scene)
		}
		return nil
	})
}

// RecordIntent writes the audit row of a provider call before it is sent,
// fenced by the lease: a zombie attempt cannot start a billed call.
func (s *Store) RecordIntent(ctx context.Context, lease pipeline.Lease, c pipeline.ProviderCall) (int64, error) {
	var id int64
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "record provider intent"); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO provider_calls (job_id, scene_index, operation, provider, model, contract,
			idempotency_key, attempt_id, status, intended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'intent', ?)`,
			lease.JobID, c.Scene, c.Op, c.Provider, c.Model, string(c.Contract), c.IdempotencyKey, lease.AttemptID, now)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	return id, err
}

// FinishCall records how a provider call ended. It is not fenced: the audit
// trail must record what happened at the provider even when the attempt that
// made the call has since lost its lease.
func (s *Store) FinishCall(ctx context.Context, p *pipeline.FinishCallParams) error {
	if p == nil {
		return fmt.Errorf("%w: finish call needs its parameters", pipeline.ErrInvalidInput)
	}
	id, status, httpStatus, errorCode, externalID := p.ID, p.Status, p.HTTPStatus, p.ErrorCode, p.ExternalID
	switch status {
	case pipeline.CallSucceeded, pipeline.CallNotSent, pipeline.CallFailed, pipeline.CallAmbiguous:
	default:
		return fmt.Errorf("%w: provider call cannot finish as %q", pipeline.ErrInvalidInput, status)
	}
	return s.inTx(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE provider_calls SET status = ?, http_status = ?, error_code = ?,
			external_job_id = CASE WHEN ? = '' THEN external_job_id ELSE ? END, finished_at = ?
			WHERE id = ? AND status = 'intent'`, status, httpStatus, errorCode, externalID, externalID, s.now(), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: provider call %d is not an open intent", pipeline.ErrInvalidTransition, id)
		}
		return nil
	})
}

const callColumns = `id, job_id, scene_index, operation, provider, contract, idempotency_key, attempt_id, status,
	external_job_id, http_status, error_code, intended_at, finished_at, staged_key, model`

func scanCall(r rowScanner) (pipeline.ProviderCall, error) {
	var c pipeline.ProviderCall
	var contract string
	var intended int64
	var finished nullInt
	if err := r.Scan(&c.ID, &c.JobID, &c.Scene, &c.Op, &c.Provider, &contract, &c.IdempotencyKey, &c.AttemptID,
		&c.Status, &c.ExternalJobID, &c.HTTPStatus, &c.ErrorCode, &intended, &finished, &c.StagedKey, &c.Model); err != nil {
		return c, translate(err)
	}
	c.Contract, c.IntendedAt, c.FinishedAt = pipeline.Contract(contract), fromMS(intended), timeOf(finished.NullInt64)
	return c, nil
}

// ProviderCalls returns a job's audit trail in order; scene < 0 means all
// scenes, op "" all operations.
func (s *Store) ProviderCalls(ctx context.Context, jobID string, scene int, op string) ([]pipeline.ProviderCall, error) {
	return s.queryCalls(ctx, `SELECT `+callColumns+` FROM provider_calls
		WHERE job_id = ? AND (? < 0 OR scene_index = ?) AND (? = '' OR operation = ?) ORDER BY id`,
		jobID, scene, scene, op, op)
}

// queryCalls runs a query selecting callColumns.
func (s *Store) queryCalls(ctx context.Context, q string, args ...any) ([]pipeline.ProviderCall, error) {
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.ProviderCall
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, translate(rows.Err())
}

// qCountBilledCalls reads only the provider_calls_status_op index
// (migration 0002).
const qCountBilledCalls = `SELECT operation, count(*) FROM provider_calls
	WHERE status IN ('intent','succeeded','ambiguous') GROUP BY operation`

// CountBilledCalls counts provider calls that may have been billed, by
// operation (for /metrics and the consistency checker).
func (s *Store) CountBilledCalls(ctx context.Context) (map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, qCountBilledCalls)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var op string
		var n int
		if err := rows.Scan(&op, &n); err != nil {
			return nil, translate(err)
		}
		out[op] = n
	}
	return out, translate(rows.Err())
}

package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// PlanUnits records one unit per scene, once: units that exist keep their
// state and results.
func (s *Store) PlanUnits(ctx context.Context, lease pipeline.Lease, units []pipeline.Unit) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "plan units"); err != nil {
			return err
		}
		for _, u := range units {
			if u.JobID != lease.JobID {
				return fmt.Errorf("%w: unit of job %s planned under job %s's lease", pipeline.ErrInvalidInput, u.JobID, lease.JobID)
			}
		}
		scenes := make([]int32, len(units))
		kinds := make([]string, len(units))
		keys := make([]string, len(units))
		for i, u := range units {
			scenes[i], kinds[i], keys[i] = int32(u.Scene), u.Kind, u.UnitKey
		}
		_, err := tx.Exec(ctx, `INSERT INTO units (job_id, scene_index, kind, unit_key, status, updated_by_attempt, updated_at)
			SELECT $1, u.scene, u.kind, u.key, 'planned', $2, $3 FROM unnest($4::int[], $5::text[], $6::text[]) AS u(scene, kind, key)
			ON CONFLICT (job_id, scene_index) DO NOTHING`, lease.JobID, lease.AttemptID, now, scenes, kinds, keys)
		return err
	})
}

const unitColumns = `job_id, scene_index, kind, unit_key, status, external_job_id, result_json::text, updated_at`

func scanUnit(r pgx.Row) (pipeline.Unit, error) {
	var u pipeline.Unit
	var result string
	var at int64
	if err := r.Scan(&u.JobID, &u.Scene, &u.Kind, &u.UnitKey, &u.Status, &u.ExternalJobID, &result, &at); err != nil {
		return u, translate(err)
	}
	u.UpdatedAt = fromMS(at)
	u.Artifacts = map[string]string{}
	if err := json.Unmarshal([]byte(result), &u.Artifacts); err != nil {
		return u, fmt.Errorf("postgres: unit %s/%d has unreadable results: %w", u.JobID, u.Scene, err)
	}
	return u, nil
}

// Units returns a job's units in scene order.
func (s *Store) Units(ctx context.Context, jobID string) ([]pipeline.Unit, error) {
	var out []pipeline.Unit
	err := eachRow(s.pool.Query(ctx, `SELECT `+unitColumns+` FROM units WHERE job_id = $1 ORDER BY scene_index`, jobID))(func(r pgx.Rows) error {
		u, err := scanUnit(r)
		if err != nil {
			return err
		}
		out = append(out, u)
		return nil
	})
	return out, err
}

// UpdateUnit records a unit's progress for the attempt holding lease. An
// artifact may only name an object that has an asset row, checked in the
// same transaction.
func (s *Store) UpdateUnit(ctx context.Context, lease pipeline.Lease, scene int, up pipeline.UnitUpdate) error {
	arts := []byte("{}")
	if len(up.Artifacts) > 0 {
		var err error
		if arts, err = json.Marshal(up.Artifacts); err != nil {
			return err
		}
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "update unit"); err != nil {
			return err
		}
		for name, key := range up.Artifacts {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM assets WHERE object_key = $1`, key).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%w: artifact %s of unit %s/%d names %s, which has no asset row", pipeline.ErrInvalidInput, name, lease.JobID, scene, key)
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE units SET
			status = CASE WHEN $1 = '' THEN status ELSE $1 END,
			external_job_id = CASE WHEN $2 = '' THEN external_job_id ELSE $2 END,
			result_json = result_json || $3::jsonb,
			updated_by_attempt = $4, updated_at = $5
			WHERE job_id = $6 AND scene_index = $7`, up.Status, up.ExternalJobID, string(arts), lease.AttemptID, now, lease.JobID, scene)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: unit %s/%d", pipeline.ErrNotFound, lease.JobID, scene)
		}
		return nil
	})
}

// RecordIntent writes the audit row of a provider call before it is sent,
// fenced by the lease: a zombie attempt cannot start a billed call.
func (s *Store) RecordIntent(ctx context.Context, lease pipeline.Lease, c pipeline.ProviderCall) (int64, error) {
	var id int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "record provider intent"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO provider_calls (job_id, scene_index, operation, provider, model, contract,
			idempotency_key, attempt_id, status, intended_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'intent', $9) RETURNING id`,
			lease.JobID, c.Scene, c.Op, c.Provider, c.Model, string(c.Contract), c.IdempotencyKey, lease.AttemptID, now).Scan(&id)
	})
	return id, err
}

// FinishCall records how a provider call ended. Not fenced: the audit trail
// records what happened at the provider even after the attempt lost its
// lease.
func (s *Store) FinishCall(ctx context.Context, p *pipeline.FinishCallParams) error {
	if p == nil {
		return fmt.Errorf("%w: finish call needs its parameters", pipeline.ErrInvalidInput)
	}
	switch p.Status {
	case pipeline.CallSucceeded, pipeline.CallNotSent, pipeline.CallFailed, pipeline.CallAmbiguous:
	default:
		return fmt.Errorf("%w: provider call cannot finish as %q", pipeline.ErrInvalidInput, p.Status)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE provider_calls SET status = $1, http_status = $2, error_code = $3,
		external_job_id = CASE WHEN $4 = '' THEN external_job_id ELSE $4 END, finished_at = $5
		WHERE id = $6 AND status = 'intent'`, p.Status, p.HTTPStatus, p.ErrorCode, p.ExternalID, s.now(), p.ID)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: provider call %d is not an open intent", pipeline.ErrInvalidTransition, p.ID)
	}
	return nil
}

const callColumns = `id, job_id, scene_index, operation, provider, contract, idempotency_key, attempt_id, status,
	external_job_id, http_status, error_code, intended_at, finished_at, staged_key, model`

func scanCall(r pgx.Row) (pipeline.ProviderCall, error) {
	var c pipeline.ProviderCall
	var contract string
	var intended int64
	var finished *int64
	if err := r.Scan(&c.ID, &c.JobID, &c.Scene, &c.Op, &c.Provider, &contract, &c.IdempotencyKey, &c.AttemptID,
		&c.Status, &c.ExternalJobID, &c.HTTPStatus, &c.ErrorCode, &intended, &finished, &c.StagedKey, &c.Model); err != nil {
		return c, translate(err)
	}
	c.Contract, c.IntendedAt, c.FinishedAt = pipeline.Contract(contract), fromMS(intended), timeOf(finished)
	return c, nil
}

// ProviderCalls returns a job's audit trail in order; scene < 0 means all
// scenes, op "" all operations.
func (s *Store) ProviderCalls(ctx context.Context, jobID string, scene int, op string) ([]pipeline.ProviderCall, error) {
	return s.queryCalls(ctx, `SELECT `+callColumns+` FROM provider_calls
		WHERE job_id = $1 AND ($2::int < 0 OR scene_index = $2) AND ($3::text = '' OR operation = $3) ORDER BY id`,
		jobID, scene, op)
}

func (s *Store) queryCalls(ctx context.Context, q string, args ...any) ([]pipeline.ProviderCall, error) {
	var out []pipeline.ProviderCall
	err := eachRow(s.pool.Query(ctx, q, args...))(func(r pgx.Rows) error {
		c, err := scanCall(r)
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// CountBilledCalls counts provider calls that may have been billed, by
// operation (for /metrics and the consistency checker).
func (s *Store) CountBilledCalls(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := eachRow(s.pool.Query(ctx, `SELECT operation, count(*) FROM provider_calls
		WHERE status IN ('intent','succeeded','ambiguous') GROUP BY operation`))(func(r pgx.Rows) error {
		var op string
		var n int
		if err := r.Scan(&op, &n); err != nil {
			return err
		}
		out[op] = n
		return nil
	})
	return out, err
}

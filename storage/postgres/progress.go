package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// FreezeInput stores the canonical input every later attempt uses, once:
// a job that has one keeps it.
func (s *Store) FreezeInput(ctx context.Context, lease pipeline.Lease, frozen json.RawMessage, unitsTotal int) (json.RawMessage, error) {
	var out json.RawMessage
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "freeze input"); err != nil {
			return err
		}
		var cur *string
		if err := tx.QueryRow(ctx, `SELECT frozen_input_json FROM jobs WHERE id = $1`, lease.JobID).Scan(&cur); err != nil {
			return err
		}
		if cur != nil {
			out = json.RawMessage(*cur)
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET frozen_input_json = $1, units_total = $2, updated_at = $3 WHERE id = $4`,
			string(frozen), unitsTotal, now, lease.JobID); err != nil {
			return err
		}
		out = frozen
		return nil
	})
	return out, err
}

// StageFinished records that stage really finished and how many units are
// done, with an event.
func (s *Store) StageFinished(ctx context.Context, lease pipeline.Lease, stage string, unitsDone int, detail map[string]any) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "stage finished"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET stage = $1, units_done = $2, updated_at = $3 WHERE id = $4`,
			stage, unitsDone, now, lease.JobID); err != nil {
			return err
		}
		d := map[string]any{}
		for k, v := range detail {
			d[k] = v
		}
		d["stage"] = stage
		d["units_done"] = unitsDone
		_, err := appendEvent(ctx, tx, now, lease.JobID, pipeline.EventStageFinished, "", "", lease.AttemptID, d)
		return err
	})
}

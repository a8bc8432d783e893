package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"edgepipe/pipeline"
)

// FreezeInput stores the canonical input that every later attempt uses, once:
// if the job already has a frozen input it is returned unchanged, so a retry
// can never see a different storyboard than the first attempt did.
func (s *Store) FreezeInput(ctx context.Context, lease pipeline.Lease, frozen json.RawMessage, unitsTotal int) (json.RawMessage, error) {
	var out json.RawMessage
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "freeze input"); err != nil {
			return err
		}
		var cur sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT frozen_input_json FROM jobs WHERE id = ?`, lease.JobID).Scan(&cur); err != nil {
			return err
		}
		if cur.Valid {
			out = json.RawMessage(cur.String)
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET frozen_input_json = ?, units_total = ?, updated_at = ? WHERE id = ?`,
			string(frozen), unitsTotal, now, lease.JobID); err != nil {
			return err
		}
		out = frozen
		return nil
	})
	return out, err
}

// StageFinished records that stage really finished (its work returned
// without error) and how many units are done, with an event. Called only
// after the stage's work returned, never from a deferred function, so a
// failed stage can never be recorded as finished.
func (s *Store) StageFinished(ctx context.Context, lease pipeline.Lease, stage string, unitsDone int, detail map[string]any) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "stage finished"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET stage = ?, units_done = ?, updated_at = ? WHERE id = ?`,
			stage, unitsDone, now, lease.JobID); err != nil {
			return err
		}
		if detail == nil {
			detail = map[string]any{}
		}
		detail["stage"] = stage
		detail["units_done"] = unitsDone
		_, err := appendEvent(ctx, tx, now, lease.JobID, pipeline.EventStageFinished, "", "", lease.AttemptID, detail)
		return err
	})
}

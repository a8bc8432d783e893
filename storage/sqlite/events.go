package sqlite

import (
	"context"
	"encoding/json"

	"edgepipe/pipeline"
)

func appendEvent(ctx context.Context, tx *wtx, now int64, jobID, kind string, from, to pipeline.Status, attemptID string, detail any) (int64, error) {
	d := "{}"
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return 0, err
		}
		d = string(b)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, jobID, now, kind, string(from), string(to), attemptID, d)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// Events returns a job's events with id > afterID, oldest first, at most limit
// (default 1000).
func (s *Store) Events(ctx context.Context, jobID string, afterID int64, limit int) ([]pipeline.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	return collect(ctx, s.read, scanEvent, `SELECT `+eventColumns+`
		FROM job_events WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?`, jobID, afterID, limit)
}

const eventColumns = `id, job_id, at, kind, from_status, to_status, attempt_id, detail_json`

func scanEvent(r rowScanner) (pipeline.Event, error) {
	var e pipeline.Event
	var at int64
	var from, to, detail string
	if err := r.Scan(&e.ID, &e.JobID, &at, &e.Kind, &from, &to, &e.AttemptID, &detail); err != nil {
		return e, translate(err)
	}
	e.At, e.FromStatus, e.ToStatus, e.Detail = fromMS(at), pipeline.Status(from), pipeline.Status(to), json.RawMessage(detail)
	return e, nil
}

// AppendEvent records a non-status event (stage or unit progress) for the
// attempt holding lease; it is fenced like every other attempt write.
func (s *Store) AppendEvent(ctx context.Context, lease pipeline.Lease, kind string, detail any) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "append event"); err != nil {
			return err
		}
		_, err := appendEvent(ctx, tx, now, lease.JobID, kind, "", "", lease.AttemptID, detail)
		return err
	})
}

// enqueueWebhook writes an outbox delivery for a settled job, in the
// transaction that settled it.
func enqueueWebhook(ctx context.Context, tx *wtx, now int64, jobID, url string, eventID int64, status pipeline.Status) error {
	if url == "" || !status.Settled() {
		return nil
	}
	payload, err := json.Marshal(map[string]any{"job_id": jobID, "status": status, "event_id": eventID, "at": fromMS(now)})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO webhook_outbox (job_id, event_id, url, payload_json, next_attempt_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, jobID, eventID, url, string(payload), now, now)
	return err
}

package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// appendEvent appends one job event. Callers hold the job's row lock (see
// the package doc): that keeps a job's event ids in commit order.
func appendEvent(ctx context.Context, tx dbtx, now int64, jobID, kind string, from, to pipeline.Status, attemptID string, detail any) (int64, error) {
	d := "{}"
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return 0, err
		}
		d = string(b)
	}
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
		VALUES ($1, $2, $3, $4, $5, $6, $7::text::json) RETURNING id`, jobID, now, kind, string(from), string(to), attemptID, d).Scan(&id)
	return id, err
}

func scanEvent(r pgx.Row) (pipeline.Event, error) {
	var e pipeline.Event
	var at int64
	var from, to, detail string
	if err := r.Scan(&e.ID, &e.JobID, &at, &e.Kind, &from, &to, &e.AttemptID, &detail); err != nil {
		return e, translate(err)
	}
	e.At, e.FromStatus, e.ToStatus, e.Detail = fromMS(at), pipeline.Status(from), pipeline.Status(to), json.RawMessage(detail)
	return e, nil
}

const eventColumns = `id, job_id, at, kind, from_status, to_status, attempt_id, detail_json::text`

// Events returns a job's events with id > afterID, oldest first, at most limit
// (default 1000).
func (s *Store) Events(ctx context.Context, jobID string, afterID int64, limit int) ([]pipeline.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []pipeline.Event
	err := eachRow(s.pool.Query(ctx, `SELECT `+eventColumns+` FROM job_events WHERE job_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		jobID, afterID, limit))(func(r pgx.Rows) error {
		e, err := scanEvent(r)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// AppendEvent records a non-status event for the attempt holding lease,
// fenced like every other attempt write.
func (s *Store) AppendEvent(ctx context.Context, lease pipeline.Lease, kind string, detail any) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "append event"); err != nil {
			return err
		}
		_, err := appendEvent(ctx, tx, now, lease.JobID, kind, "", "", lease.AttemptID, detail)
		return err
	})
}

// webhookJob is what a webhook delivery needs of its job: the internal key
// the outbox row references, the instance id the payload names (the only
// id the job's owner knows), and the URL.
type webhookJob struct {
	ID, InstanceID, URL string
}

// enqueueWebhook writes an outbox delivery for a settled job, in the
// transaction that settled it.
func enqueueWebhook(ctx context.Context, tx dbtx, now int64, j webhookJob, eventID int64, status pipeline.Status) error {
	if j.URL == "" || !status.Settled() {
		return nil
	}
	payload, err := json.Marshal(map[string]any{"job_id": j.InstanceID, "status": status, "event_id": eventID, "at": fromMS(now)})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO webhook_outbox (job_id, event_id, url, payload_json, next_attempt_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, j.ID, eventID, j.URL, string(payload), now)
	return err
}

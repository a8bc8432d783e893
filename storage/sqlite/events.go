package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

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

// webhookJob is what a webhook delivery needs of its job: the internal key
// the outbox row references, the instance id the payload names (the only
// id the job's owner knows), and the URL.
type webhookJob struct {
	ID, InstanceID, URL string
}

// enqueueWebhook writes an outbox delivery for a settled job, in the
// transaction that settled it.
func enqueueWebhook(ctx context.Context, tx *wtx, now int64, j webhookJob, eventID int64, status pipeline.Status) error {
	if j.URL == "" || !status.Settled() {
		return nil
	}
	payload, err := json.Marshal(map[string]any{"job_id": j.InstanceID, "status": status, "event_id": eventID, "at": fromMS(now)})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO webhook_outbox (job_id, event_id, url, payload_json, next_attempt_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, j.ID, eventID, j.URL, string(payload), now, now)
	return err
}

// statusEvent is one status event of a batch (claims, bulk settles).
type statusEvent struct {
	job, attemptID string
	from, to       pipeline.Status
	detail         string // JSON, built in Go
}

// eventChunks are the row counts of the multi-row event inserts: a batch is
// cut greedily into these sizes, so the statement cache holds five texts
// instead of one per batch size, and a 500-job batch takes eight statements.
// 128 rows bind 641 parameters, under SQLite's oldest limit of 999.
var eventChunks = [...]int{128, 64, 16, 4, 1}

// eventInserts[i] is the INSERT of eventChunks[i] rows: ?1 is the time,
// each row binds job, from, to, attempt and detail.
var eventInserts = func() (qs [len(eventChunks)]string) {
	for i, n := range eventChunks {
		var b strings.Builder
		b.WriteString(`INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json) VALUES `)
		for r := range n {
			if r > 0 {
				b.WriteByte(',')
			}
			p := 2 + 5*r
			fmt.Fprintf(&b, "(?%d, ?1, 'status', ?%d, ?%d, ?%d, ?%d)", p, p+1, p+2, p+3, p+4)
		}
		qs[i] = b.String()
	}
	return qs
}()

// insertStatusEvents appends evs, in order, as a few multi-row inserts.
func insertStatusEvents(ctx context.Context, tx *wtx, now int64, evs []statusEvent) error {
	args := make([]any, 0, 1+5*eventChunks[0])
	for len(evs) > 0 {
		c := 0
		for eventChunks[c] > len(evs) {
			c++
		}
		n := eventChunks[c]
		args = append(args[:0], now)
		for _, e := range evs[:n] {
			args = append(args, e.job, string(e.from), string(e.to), e.attemptID, e.detail)
		}
		if _, err := tx.ExecContext(ctx, eventInserts[c], args...); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

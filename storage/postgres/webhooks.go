package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// The webhook outbox, the dispatcher's side (enqueueWebhook writes rows in
// the transaction that settles a job). Only webhook_outbox is written here.

const maxWebhookError = 200

const webhookColumns = `id, job_id, event_id, url, payload_json, attempts, status, last_error, created_at,
	next_attempt_at, delivered_at`

func scanWebhook(r pgx.Row) (pipeline.WebhookDelivery, error) {
	var (
		d               pipeline.WebhookDelivery
		payload         string
		created, nextAt int64
		delivered       *int64
	)
	if err := r.Scan(&d.ID, &d.JobID, &d.EventID, &d.URL, &payload, &d.Attempts, &d.Status, &d.LastError,
		&created, &nextAt, &delivered); err != nil {
		return d, translate(err)
	}
	d.Payload = []byte(payload)
	d.CreatedAt, d.LeaseUntil, d.DeliveredAt = fromMS(created), fromMS(nextAt), timeOf(delivered)
	return d, nil
}

// ClaimWebhooks leases up to limit pending deliveries whose next attempt is
// due, oldest due first; rows another dispatcher is claiming are skipped
// (SKIP LOCKED). The new next_attempt_at is the claim's fencing token.
func (s *Store) ClaimWebhooks(ctx context.Context, limit int, lease time.Duration) ([]pipeline.WebhookDelivery, error) {
	if limit <= 0 || lease < time.Millisecond {
		return nil, fmt.Errorf("%w: claiming webhooks needs a positive limit and lease", pipeline.ErrInvalidInput)
	}
	var out []pipeline.WebhookDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		now := s.now()
		return eachRow(tx.Query(ctx, `UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = $1
			WHERE id IN (SELECT id FROM webhook_outbox WHERE status = 'pending' AND next_attempt_at <= $2
			             ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
			RETURNING `+webhookColumns, now+lease.Milliseconds(), now, limit))(func(r pgx.Rows) error {
			d, err := scanWebhook(r)
			if err != nil {
				return err
			}
			out = append(out, d)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b pipeline.WebhookDelivery) int { return int(a.ID - b.ID) })
	return out, nil
}

// MarkWebhookDelivered records that the receiver acknowledged d, only while
// d's claim is the current one (otherwise pipeline.ErrLeaseLost).
func (s *Store) MarkWebhookDelivered(ctx context.Context, d pipeline.WebhookDelivery) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_outbox SET status = 'delivered', delivered_at = $1, last_error = ''
		WHERE id = $2 AND status = 'pending' AND next_attempt_at = $3`, s.now(), d.ID, ms(d.LeaseUntil))
	if err != nil {
		return translate(err)
	}
	return claimHeld(tag.RowsAffected(), d)
}

// MarkWebhookFailed records a failed attempt of d: pending again from next,
// or failed for good when next is zero. Fenced like MarkWebhookDelivered.
func (s *Store) MarkWebhookFailed(ctx context.Context, d pipeline.WebhookDelivery, lastError string, next time.Time) error {
	lastError = clipWebhookText(lastError, maxWebhookError)
	status, nextAt := pipeline.WebhookPending, ms(next)
	if next.IsZero() {
		status, nextAt = pipeline.WebhookFailed, s.now()
	}
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_outbox SET status = $1, next_attempt_at = $2, last_error = $3
		WHERE id = $4 AND status = 'pending' AND next_attempt_at = $5`, status, nextAt, lastError, d.ID, ms(d.LeaseUntil))
	if err != nil {
		return translate(err)
	}
	return claimHeld(tag.RowsAffected(), d)
}

func claimHeld(n int64, d pipeline.WebhookDelivery) error {
	if n != 1 {
		return fmt.Errorf("%w: webhook delivery %d is no longer claimed by this dispatcher", pipeline.ErrLeaseLost, d.ID)
	}
	return nil
}

// WebhookDeliveries returns a job's deliveries, oldest first.
func (s *Store) WebhookDeliveries(ctx context.Context, jobID string) ([]pipeline.WebhookDelivery, error) {
	var out []pipeline.WebhookDelivery
	err := eachRow(s.pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhook_outbox WHERE job_id = $1 ORDER BY id`, jobID))(func(r pgx.Rows) error {
		d, err := scanWebhook(r)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// CountWebhooks counts deliveries by status (for /metrics).
func (s *Store) CountWebhooks(ctx context.Context) (map[string]int, error) {
	out := map[string]int{pipeline.WebhookPending: 0, pipeline.WebhookDelivered: 0, pipeline.WebhookFailed: 0}
	err := eachRow(s.pool.Query(ctx, `SELECT status, count(*) FROM webhook_outbox GROUP BY status`))(func(r pgx.Rows) error {
		var st string
		var n int
		if err := r.Scan(&st, &n); err != nil {
			return err
		}
		out[st] = n
		return nil
	})
	return out, err
}

func clipWebhookText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"edgepipe/pipeline"
)

// The webhook outbox. enqueueWebhook (events.go) writes a row in the
// transaction that settles a job; these methods are the dispatcher's side.
// They write only webhook_outbox, so no delivery outcome can change a job.
// (The Store satisfies webhook.Store; webhooks_test.go asserts it, since
// this driver imports only pipeline.)

// maxWebhookError caps the stored last_error; the dispatcher only ever
// passes short safe texts, this keeps a careless caller from bloating rows.
const maxWebhookError = 200

const webhookColumns = `id, job_id, event_id, url, payload_json, attempts, status, last_error, created_at,
	next_attempt_at, delivered_at`

func scanWebhook(r rowScanner) (pipeline.WebhookDelivery, error) {
	var (
		d               pipeline.WebhookDelivery
		payload         string
		created, nextAt int64
		delivered       sql.NullInt64
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
// due, oldest due first. The claim moves next_attempt_at to now+lease, so
// another dispatcher does not see them until the lease ends, and counts the
// attempt (a claimed delivery may have been sent). The new next_attempt_at
// is the claim's fencing token (Delivery.LeaseUntil): a later claim always
// sets a later one.
func (s *Store) ClaimWebhooks(ctx context.Context, limit int, lease time.Duration) ([]pipeline.WebhookDelivery, error) {
	if limit <= 0 || lease < time.Millisecond {
		return nil, fmt.Errorf("%w: claiming webhooks needs a positive limit and lease", pipeline.ErrInvalidInput)
	}
	var out []pipeline.WebhookDelivery
	err := s.inTx(ctx, func(tx *wtx) error {
		out = out[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = ?1
			WHERE id IN (SELECT id FROM webhook_outbox WHERE status = 'pending' AND next_attempt_at <= ?2
			             ORDER BY next_attempt_at, id LIMIT ?3)
			RETURNING `+webhookColumns, now+lease.Milliseconds(), now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanWebhook(rows)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, translate(err)
	}
	slices.SortFunc(out, func(a, b pipeline.WebhookDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// MarkWebhookDelivered records that the receiver acknowledged d. It applies
// only while d's claim is the current one; otherwise the error matches
// pipeline.ErrLeaseLost and nothing changes.
func (s *Store) MarkWebhookDelivered(ctx context.Context, d pipeline.WebhookDelivery) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		res, err := tx.ExecContext(ctx, `UPDATE webhook_outbox SET status = 'delivered', delivered_at = ?, last_error = ''
			WHERE id = ? AND status = 'pending' AND next_attempt_at = ?`, now, d.ID, ms(d.LeaseUntil))
		if err != nil {
			return err
		}
		return claimHeld(res, d)
	})
}

// MarkWebhookFailed records a failed attempt of d with a safe error text:
// pending again from next, or failed for good when next is zero. Fenced like
// MarkWebhookDelivered.
func (s *Store) MarkWebhookFailed(ctx context.Context, d pipeline.WebhookDelivery, lastError string, next time.Time) error {
	lastError = clipWebhookText(lastError, maxWebhookError)
	return s.inTx(ctx, func(tx *wtx) error {
		status, nextAt := pipeline.WebhookPending, ms(next)
		if next.IsZero() {
			status, nextAt = pipeline.WebhookFailed, s.now()
		}
		res, err := tx.ExecContext(ctx, `UPDATE webhook_outbox SET status = ?, next_attempt_at = ?, last_error = ?
			WHERE id = ? AND status = 'pending' AND next_attempt_at = ?`, status, nextAt, lastError, d.ID, ms(d.LeaseUntil))
		if err != nil {
			return err
		}
		return claimHeld(res, d)
	})
}

func claimHeld(res sql.Result, d pipeline.WebhookDelivery) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: webhook delivery %d is no longer claimed by this dispatcher", pipeline.ErrLeaseLost, d.ID)
	}
	return nil
}

// WebhookDeliveries returns a job's deliveries, oldest first (operators and
// tests).
func (s *Store) WebhookDeliveries(ctx context.Context, jobID string) ([]pipeline.WebhookDelivery, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+webhookColumns+` FROM webhook_outbox WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.WebhookDelivery
	for rows.Next() {
		d, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, translate(rows.Err())
}

// CountWebhooks counts deliveries by status (for /metrics).
func (s *Store) CountWebhooks(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, st := range []string{pipeline.WebhookPending, pipeline.WebhookDelivered, pipeline.WebhookFailed} {
		var n int
		// One indexed count per status instead of a GROUP BY over the table.
		if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM webhook_outbox WHERE status = ?`, st).Scan(&n); err != nil {
			return nil, translate(err)
		}
		out[st] = n
	}
	return out, nil
}

// clipWebhookText cuts s to at most n bytes on a rune boundary.
func clipWebhookText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

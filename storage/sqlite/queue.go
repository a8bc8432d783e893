package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"edgepipe/pipeline"
)

// enqueue puts a message for jobID on queue, visible from visibleAt.
func enqueue(ctx context.Context, tx *wtx, now int64, queue, jobID string, visibleAt int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (job_id) DO UPDATE SET queue = excluded.queue, visible_at = min(visible_at, excluded.visible_at)`,
		queue, jobID, now, visibleAt)
	if err == nil && visibleAt <= now {
		tx.madeVisible(queue)
	}
	return err
}

// ensureMessage makes sure the job has exactly one message on queue, visible
// at visibleAt. keepCount keeps the delivery count (a released job was not
// processed, so its deliveries still count toward poison); otherwise the count
// restarts because the attempt ended properly.
func ensureMessage(ctx context.Context, tx *wtx, now int64, queue, jobID string, visibleAt int64, keepCount bool) error {
	q := `UPDATE queue_messages SET queue = ?, visible_at = ?, delivery_count = 0 WHERE job_id = ?`
	if keepCount {
		q = `UPDATE queue_messages SET queue = ?, visible_at = ? WHERE job_id = ?`
	}
	res, err := tx.ExecContext(ctx, q, queue, visibleAt, jobID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		if visibleAt <= now {
			tx.madeVisible(queue)
		}
		return nil
	}
	return enqueue(ctx, tx, now, queue, jobID, visibleAt)
}

func deleteMessages(ctx context.Context, tx *wtx, jobID string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM queue_messages WHERE job_id = ?`, jobID)
	return err
}

// Fetch receives up to max visible messages from queue and claims their jobs
// for owner with a lease of leaseFor, all in one transaction. Messages whose
// job is settled are acked and ignored; messages whose job is still leased or
// backing off are hidden until then; a message delivered MaxDeliveries times
// without an ack is moved to the dead-letter queue as poison. With
// p.TenantMaxRunning, a ready job of a tenant at the limit is left on the
// queue untouched and the claim reads on (see fetchPages).
func (s *Store) Fetch(ctx context.Context, p *pipeline.FetchParams) ([]pipeline.Claimed, pipeline.FetchStats, error) {
	var (
		out   []pipeline.Claimed
		stats pipeline.FetchStats
	)
	if p == nil {
		return nil, stats, fmt.Errorf("%w: fetch needs its parameters", pipeline.ErrInvalidInput)
	}
	if p.Max <= 0 || p.LeaseFor <= 0 || p.Owner == "" || p.TenantMaxRunning < 0 {
		return nil, stats, fmt.Errorf("%w: fetch needs an owner, a positive batch size and lease, and a tenant limit of 0 or more", pipeline.ErrInvalidInput)
	}
	err := s.inTx(ctx, func(tx *wtx) error {
		stats = pipeline.FetchStats{}
		now := s.now()
		claims, err := s.fetchPages(ctx, tx, now, p, &stats)
		if err != nil {
			return err
		}
		out, err = claimJobs(ctx, tx, now, p.Owner, now+p.LeaseFor.Milliseconds(), claims)
		stats.Claimed = len(out)
		return err
	})
	if err != nil {
		return nil, pipeline.FetchStats{}, err
	}
	return out, stats, nil
}

// fetchPages reads candidates page by page (pipeline.FetchPages) and
// returns the jobs to claim. The write transaction is SQLite's only writer,
// so the running counts triage reads cannot change under it: no two claims
// can both see a tenant one below its limit.
func (s *Store) fetchPages(ctx context.Context, tx *wtx, now int64, p *pipeline.FetchParams, stats *pipeline.FetchStats) ([]claimArg, error) {
	return pipeline.FetchPages(p, func(pg pipeline.FetchPage) ([]candidate, error) {
		return fetchCandidates(ctx, tx, p.Queue, now, pg)
	}, func(cands []candidate, slots *pipeline.TenantSlots) ([]claimArg, error) {
		return s.triage(ctx, tx, now, p.Queue, cands, stats, slots)
	}, candidate.position)
}

// position is the candidate's place in the queue's order.
func (c candidate) position() (visibleAt, msgID int64) { return c.visibleAt, c.msgID }

// candidate is a visible message and the state of its job.
type candidate struct {
	msgID      int64
	visibleAt  int64
	jobID      string
	tenant     string
	deliveries int
	status     pipeline.Status
	leaseExp   sql.NullInt64
	nextRun    sql.NullInt64
}

// claimArg is one job to claim: its message, the status it is claimed
// from, and the delivery the claim makes.
type claimArg struct {
	JobID      string
	MsgID      int64
	From       string
	Deliveries int
}

// fetchCandidates reads one page of visible messages with their jobs'
// state, oldest first.
func fetchCandidates(ctx context.Context, tx *wtx, queue string, now int64, pg pipeline.FetchPage) ([]candidate, error) {
	full, err := json.Marshal(pg.Full)
	if err != nil {
		return nil, err
	}
	// The tenant filter is an early cut, read from the partial index
	// jobs_tenant_running; triage's count (TenantSlots) is what decides.
	rows, err := tx.QueryContext(ctx, `SELECT m.id, m.visible_at, m.job_id, j.tenant, m.delivery_count, j.status, j.lease_expires_at, j.next_run_at
		FROM queue_messages m JOIN jobs j ON j.id = m.job_id
		WHERE m.queue = ?1 AND m.visible_at <= ?2 AND (m.visible_at > ?4 OR (m.visible_at = ?4 AND m.id > ?5))
		  AND j.tenant NOT IN (SELECT value FROM json_each(?6))
		  AND (?7 = 0 OR (SELECT count(*) FROM jobs r WHERE r.tenant = j.tenant AND r.status = 'running' AND r.lease_expires_at > ?2) < ?7)
		ORDER BY m.visible_at, m.id LIMIT ?3`, queue, now, pg.Want, pg.AfterAt, pg.AfterID, string(full), pg.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cands []candidate
	seen := map[string]bool{}
	for rows.Next() {
		var c candidate
		var st string
		if err := rows.Scan(&c.msgID, &c.visibleAt, &c.jobID, &c.tenant, &c.deliveries, &st, &c.leaseExp, &c.nextRun); err != nil {
			return nil, err
		}
		if seen[c.jobID] { // the unique index makes this impossible; never claim a job twice anyway
			continue
		}
		seen[c.jobID] = true
		c.status = pipeline.Status(st)
		cands = append(cands, c)
	}
	return cands, rows.Err()
}

// runningOf counts tenant's jobs running with a live lease (an expired
// lease does not count: its job is claimable again).
func runningOf(ctx context.Context, tx *wtx, tenant string, now int64) func() (int, bool, error) {
	return func() (int, bool, error) {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE tenant = ? AND status = 'running' AND lease_expires_at > ?`,
			tenant, now).Scan(&n)
		return n, err == nil, err
	}
}

// triage decides each candidate: a settled job's message is acked, a job
// still leased or backing off is hidden until then, a message delivered
// too often is poison, a job whose tenant has no slot left stays on the
// queue as it is (no delivery counted); the rest are returned to be claimed.
func (s *Store) triage(ctx context.Context, tx *wtx, now int64, queue string, cands []candidate, stats *pipeline.FetchStats, slots *pipeline.TenantSlots) ([]claimArg, error) {
	var claims []claimArg
	var acks []int64
	for _, c := range cands {
		switch {
		case c.status.Settled():
			acks = append(acks, c.msgID)
			stats.AckedSettled++
			continue
		case c.status == pipeline.StatusRunning && c.leaseExp.Valid && c.leaseExp.Int64 > now:
			if _, err := tx.ExecContext(ctx, `UPDATE queue_messages SET visible_at = ? WHERE id = ?`, c.leaseExp.Int64, c.msgID); err != nil {
				return nil, err
			}
			stats.Deferred++
			continue
		case c.status == pipeline.StatusRetryWait && c.nextRun.Valid && c.nextRun.Int64 > now:
			if _, err := tx.ExecContext(ctx, `UPDATE queue_messages SET visible_at = ? WHERE id = ?`, c.nextRun.Int64, c.msgID); err != nil {
				return nil, err
			}
			stats.Deferred++
			continue
		}
		if c.deliveries >= s.cfg.MaxDeliveries {
			if err := s.poison(ctx, tx, now, queue, c.jobID, c.status, c.deliveries); err != nil {
				return nil, err
			}
			stats.DeadLettered++
			continue
		}
		if err := pipeline.CheckTransition(c.status, pipeline.StatusRunning); err != nil {
			return nil, err // unreachable with the cases above; the table stays the one authority
		}
		if ok, err := slots.Take(c.tenant, runningOf(ctx, tx, c.tenant, now)); err != nil {
			return nil, err
		} else if !ok {
			stats.TenantLimited++
			continue
		}
		claims = append(claims, claimArg{JobID: c.jobID, MsgID: c.msgID, From: string(c.status), Deliveries: c.deliveries + 1})
	}
	if len(acks) > 0 {
		b, _ := json.Marshal(acks)
		if _, err := tx.ExecContext(ctx, `DELETE FROM queue_messages WHERE id IN (SELECT value FROM json_each(?))`, string(b)); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// claimColumns are what a claim returns: what an attempt reads of its job
// (see pipeline.Claimed). The rest of the row is the same for every claim
// (status, lease) or not the worker's business, and is not decoded.
const claimColumns = `id, instance_id, tenant, operation, workflow_version, queue, status_changed_at, created_at,
	attempts, attempt_id, input_json, frozen_input_json, infra_failures, infra_since, cancel_requested_at, webhook_url, trace_parent`

// scanClaimed reads claimColumns into a job leased to owner until leaseExp
// at now.
func scanClaimed(r rowScanner, now int64, owner string, leaseExp int64) (pipeline.Job, error) {
	var (
		j                         pipeline.Job
		statusAt, createdAt       int64
		attemptID, traceParent    sql.NullString
		frozen                    sql.NullString
		input                     string
		infraSince, cancelRequest sql.NullInt64
	)
	if err := r.Scan(&j.ID, &j.InstanceID, &j.Tenant, &j.Operation, &j.Version, &j.Queue, &statusAt, &createdAt,
		&j.Attempts, &attemptID, &input, &frozen, &j.InfraFailures, &infraSince, &cancelRequest, &j.WebhookURL, &traceParent); err != nil {
		return pipeline.Job{}, translate(err)
	}
	j.Status = pipeline.StatusRunning
	j.StatusChangedAt, j.CreatedAt, j.UpdatedAt = fromMS(statusAt), fromMS(createdAt), fromMS(now)
	j.AttemptID, j.LeaseOwner, j.LeaseExpiresAt = attemptID.String, owner, fromMS(leaseExp)
	j.Input = json.RawMessage(input)
	if frozen.Valid {
		j.FrozenInput = json.RawMessage(frozen.String)
	}
	j.InfraSince, j.CancelRequestedAt = timeOf(infraSince), timeOf(cancelRequest)
	j.TraceParent = traceParent.String
	return j, nil
}

// claimJobs claims the triaged jobs in bulk — a handful of statements per
// batch instead of several per job — and returns those it got.
func claimJobs(ctx context.Context, tx *wtx, now int64, owner string, leaseExp int64, claims []claimArg) ([]pipeline.Claimed, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.JobID
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	// The claim itself: one conditional UPDATE that re-checks status and
	// lease expiry, with a fresh random attempt id per job. The unary +
	// keeps the planner on the primary key: through jobs_status it would
	// scan every pending job.
	rows, err := tx.QueryContext(ctx, `UPDATE jobs SET status = 'running',
		status_changed_at = CASE WHEN status = 'running' THEN status_changed_at ELSE ?1 END,
		updated_at = ?1, attempts = attempts + 1, next_run_at = NULL,
		attempt_id = 'att_' || lower(hex(randomblob(12))), lease_owner = ?2, lease_expires_at = ?3
		WHERE id IN (SELECT value FROM json_each(?4))
		  AND (+status IN ('pending','retry_wait') OR (+status = 'running' AND lease_expires_at <= ?1))
		RETURNING `+claimColumns, now, owner, leaseExp, string(arg))
	if err != nil {
		return nil, err
	}
	claimed := make(map[string]pipeline.Job, len(claims))
	for rows.Next() {
		j, err := scanClaimed(rows, now, owner, leaseExp)
		if err != nil {
			rows.Close()
			return nil, err
		}
		claimed[j.ID] = j
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	ownerJSON, err := json.Marshal(owner)
	if err != nil {
		return nil, err
	}
	out := make([]pipeline.Claimed, 0, len(claimed))
	msgs := make([]int64, 0, len(claimed))
	evs := make([]statusEvent, 0, len(claimed))
	for _, c := range claims {
		j, ok := claimed[c.JobID]
		if !ok {
			continue
		}
		out = append(out, pipeline.Claimed{
			Job:        j,
			Lease:      pipeline.Lease{JobID: j.ID, AttemptID: j.AttemptID, Owner: owner, Attempt: j.Attempts, ExpiresAt: fromMS(leaseExp)},
			MessageID:  c.MsgID,
			Deliveries: c.Deliveries,
		})
		msgs = append(msgs, c.MsgID)
		evs = append(evs, statusEvent{job: j.ID, attemptID: j.AttemptID, from: pipeline.Status(c.From), to: pipeline.StatusRunning,
			detail: `{"attempt":` + strconv.Itoa(j.Attempts) + `,"owner":` + string(ownerJSON) + `,"delivery":` + strconv.Itoa(c.Deliveries) + `}`})
	}
	// Only the claimed jobs' messages: a delivery is counted for a claim
	// that happened, and each message hides until its lease expires.
	msgArg, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE queue_messages SET delivery_count = delivery_count + 1,
		visible_at = ?1, last_delivered_at = ?2 WHERE id IN (SELECT value FROM json_each(?3))`,
		leaseExp, now, string(msgArg)); err != nil {
		return nil, err
	}
	if err := insertStatusEvents(ctx, tx, now, evs); err != nil {
		return nil, err
	}
	return out, nil
}

// poison dead-letters a job whose message keeps coming back unacked.
func (s *Store) poison(ctx context.Context, tx *wtx, now int64, queue, jobID string, from pipeline.Status, deliveries int) error {
	detail := fmt.Sprintf("delivered %d times without completing", deliveries)
	if _, err := insertDeadLetter(ctx, tx, now, jobID, queue, pipeline.ReasonPoison, detail); err != nil {
		return err
	}
	return settle(ctx, tx, now, jobID, from, "", pipeline.Outcome{
		Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonPoison, RequiresAction: true,
		ErrorCode: pipeline.ReasonPoison, ErrorMessage: pipeline.DeadLetterMessage(pipeline.ReasonPoison),
	}, map[string]any{"reason": pipeline.ReasonPoison, "deliveries": deliveries})
}

// Ack removes a message. Acking a message that is gone is not an error: it
// may have been acked by the transaction that settled its job.
func (s *Store) Ack(ctx context.Context, messageID int64) error {
	return s.inTx(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM queue_messages WHERE id = ?`, messageID)
		return err
	})
}

// Enqueue adds a message for an existing job (operators and tests; normal
// submission enqueues inside CreateJob).
func (s *Store) Enqueue(ctx context.Context, queue, jobID string, delay time.Duration) error {
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		return enqueue(ctx, tx, now, queue, jobID, now+delay.Milliseconds())
	})
}

// QueueDepth counts messages on a queue, and how many are visible now.
func (s *Store) QueueDepth(ctx context.Context, queue string) (total, visible int, err error) {
	err = s.read.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(visible_at <= ?), 0) FROM queue_messages WHERE queue = ?`,
		s.now(), queue).Scan(&total, &visible)
	return total, visible, translate(err)
}

// Heartbeat extends the lease (and the message's invisibility) of a live
// attempt. A lost lease is a *pipeline.FenceError: the attempt must stop.
func (s *Store) Heartbeat(ctx context.Context, lease pipeline.Lease, leaseFor time.Duration) (pipeline.Lease, error) {
	err := s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		exp := now + leaseFor.Milliseconds()
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND attempt_id = ?
			AND status = 'running' AND lease_expires_at > ?`, exp, lease.JobID, lease.AttemptID, now)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &pipeline.FenceError{JobID: lease.JobID, AttemptID: lease.AttemptID, Op: "heartbeat"}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE queue_messages SET visible_at = ? WHERE job_id = ?`, exp, lease.JobID); err != nil {
			return err
		}
		lease.ExpiresAt = fromMS(exp)
		return nil
	})
	return lease, err
}

// checkFence fails with a *pipeline.FenceError unless lease is still the
// job's live lease. Called inside the write transaction, so nothing can take
// the lease over between the check and the write.
func checkFence(ctx context.Context, tx *wtx, now int64, lease pipeline.Lease, op string) error {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE id = ? AND attempt_id = ? AND status = 'running'
		AND lease_expires_at > ?`, lease.JobID, lease.AttemptID, now).Scan(&n)
	if err != nil {
		return err
	}
	if n != 1 {
		return &pipeline.FenceError{JobID: lease.JobID, AttemptID: lease.AttemptID, Op: op}
	}
	return nil
}

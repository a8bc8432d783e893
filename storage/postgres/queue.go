package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// enqueue puts a message for jobID on queue, visible from visibleAt (one
// message per job: a second wake-up is merged into the first).
func enqueue(ctx context.Context, tx dbtx, now int64, queue, jobID string, visibleAt int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (job_id) DO UPDATE SET queue = excluded.queue,
		visible_at = least(queue_messages.visible_at, excluded.visible_at)`,
		queue, jobID, now, visibleAt)
	return err
}

// ensureMessage makes sure the job has exactly one message on queue, visible
// at visibleAt. keepCount keeps the delivery count (a released job was not
// processed, so its deliveries still count toward poison).
func ensureMessage(ctx context.Context, tx dbtx, now int64, queue, jobID string, visibleAt int64, keepCount bool) error {
	q := `UPDATE queue_messages SET queue = $1, visible_at = $2, delivery_count = 0 WHERE job_id = $3`
	if keepCount {
		q = `UPDATE queue_messages SET queue = $1, visible_at = $2 WHERE job_id = $3`
	}
	tag, err := tx.Exec(ctx, q, queue, visibleAt, jobID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return enqueue(ctx, tx, now, queue, jobID, visibleAt)
}

func deleteMessages(ctx context.Context, tx dbtx, jobID string) error {
	_, err := tx.Exec(ctx, `DELETE FROM queue_messages WHERE job_id = $1`, jobID)
	return err
}

// Fetch receives up to Max visible messages of Queue and claims their jobs
// for Owner with a lease of LeaseFor, all in one transaction. Messages and
// their jobs are locked FOR UPDATE SKIP LOCKED: a row another worker (or an
// attempt's write) holds is skipped, not waited for, so concurrent fetchers
// never block each other and never take the same job. Messages of settled
// jobs are acked; jobs still leased or backing off are hidden until then; a
// message delivered MaxDeliveries times without an ack is poison. With
// TenantMaxRunning, a ready job of a tenant at the limit is left on the
// queue untouched and the claim reads on (pipeline.FetchPages, runningOf).
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out, stats = nil, pipeline.FetchStats{}
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

// candidate is a visible message and the state of its job.
type candidate struct {
	msgID      int64
	visibleAt  int64
	jobID      string
	tenant     string
	deliveries int
	status     pipeline.Status
	leaseExp   *int64
	nextRun    *int64
}

// fetchPages reads candidates page by page (pipeline.FetchPages) and
// returns the jobs to claim.
func (s *Store) fetchPages(ctx context.Context, tx pgx.Tx, now int64, p *pipeline.FetchParams, stats *pipeline.FetchStats) ([]claimArg, error) {
	return pipeline.FetchPages(p, func(pg pipeline.FetchPage) ([]candidate, error) {
		return fetchCandidates(ctx, tx, p.Queue, now, pg)
	}, func(cands []candidate, slots *pipeline.TenantSlots) ([]claimArg, error) {
		return s.triage(ctx, tx, now, p.Queue, cands, stats, slots)
	}, candidate.position)
}

// position is the candidate's place in the queue's order.
func (c candidate) position() (visibleAt, msgID int64) { return c.visibleAt, c.msgID }

type claimArg struct {
	jobID      string
	msgID      int64
	from       pipeline.Status
	deliveries int
}

func fetchCandidates(ctx context.Context, tx pgx.Tx, queue string, now int64, pg pipeline.FetchPage) ([]candidate, error) {
	// The tenant filter is an early cut, read from the partial index
	// jobs_tenant_running under this statement's snapshot; runningOf's count,
	// under the tenant's lock, is what decides.
	rows, err := tx.Query(ctx, `SELECT m.id, m.visible_at, m.job_id, j.tenant, m.delivery_count, j.status, j.lease_expires_at, j.next_run_at
		FROM queue_messages m JOIN jobs j ON j.id = m.job_id
		WHERE m.queue = $1 AND m.visible_at <= $2 AND (m.visible_at, m.id) > ($4::bigint, $5::bigint)
		  AND j.tenant <> ALL($6::text[])
		  AND ($7::int = 0 OR (SELECT count(*) FROM jobs r WHERE r.tenant = j.tenant AND r.status = 'running' AND r.lease_expires_at > $2) < $7::int)
		ORDER BY m.visible_at, m.id LIMIT $3
		FOR UPDATE OF m, j SKIP LOCKED`, queue, now, pg.Want, pg.AfterAt, pg.AfterID, pg.Full, pg.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cands []candidate
	for rows.Next() {
		var c candidate
		var st string
		if err := rows.Scan(&c.msgID, &c.visibleAt, &c.jobID, &c.tenant, &c.deliveries, &st, &c.leaseExp, &c.nextRun); err != nil {
			return nil, err
		}
		c.status = pipeline.Status(st)
		cands = append(cands, c)
	}
	return cands, rows.Err()
}

// runningOf counts tenant's jobs running with a live lease (an expired lease
// does not count: its job is claimable again), under the tenant's claim lock.
//
// Why a lock: under READ COMMITTED two workers claiming different jobs of one
// tenant at once (SKIP LOCKED hands them different rows) would both count
// the tenant's running jobs before either committed, both see N-1, and both
// claim: N+1 running. So every claim that gives the tenant a job first takes
// a transaction-scoped advisory lock on the tenant, held until its commit,
// and only then counts, in a statement of its own: READ COMMITTED takes a
// new snapshot per statement, so the count sees every claim committed
// before the lock was granted (in one statement with the lock, the snapshot
// could predate the other claim's commit). An advisory lock rather than a
// row lock because there is no tenants table to lock, and a lock on one of
// the tenant's job rows would not cover the jobs created after it. It is
// tried, not waited for (pg_try_advisory_xact_lock): another worker holding
// it is claiming for that tenant right now, so this Fetch leaves the tenant
// out and claims other tenants' jobs — like SKIP LOCKED, fetchers never wait
// for each other, and two fetchers that reach the same tenants in different
// orders cannot deadlock. Only claims add running jobs, and every claim
// under a limit takes the lock, so the count cannot grow behind it.
func runningOf(ctx context.Context, tx pgx.Tx, tenant string, now int64) func() (int, bool, error) {
	return func() (int, bool, error) {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 7))`, "tenant:"+tenant).Scan(&locked); err != nil || !locked {
			return 0, false, err
		}
		var n int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = $1 AND status = 'running' AND lease_expires_at > $2`,
			tenant, now).Scan(&n)
		return n, err == nil, err
	}
}

func (s *Store) triage(ctx context.Context, tx pgx.Tx, now int64, queue string, cands []candidate, stats *pipeline.FetchStats, slots *pipeline.TenantSlots) ([]claimArg, error) {
	var claims []claimArg
	var acks []int64
	for _, c := range cands {
		switch {
		case c.status.Settled():
			acks = append(acks, c.msgID)
			stats.AckedSettled++
			continue
		case c.status == pipeline.StatusRunning && c.leaseExp != nil && *c.leaseExp > now:
			if _, err := tx.Exec(ctx, `UPDATE queue_messages SET visible_at = $1 WHERE id = $2`, *c.leaseExp, c.msgID); err != nil {
				return nil, err
			}
			stats.Deferred++
			continue
		case c.status == pipeline.StatusRetryWait && c.nextRun != nil && *c.nextRun > now:
			if _, err := tx.Exec(ctx, `UPDATE queue_messages SET visible_at = $1 WHERE id = $2`, *c.nextRun, c.msgID); err != nil {
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
			return nil, err
		}
		// No slot: the message stays as it is, visible, its delivery not
		// counted, for a Fetch after one of the tenant's jobs ends.
		if ok, err := slots.Take(c.tenant, runningOf(ctx, tx, c.tenant, now)); err != nil {
			return nil, err
		} else if !ok {
			stats.TenantLimited++
			continue
		}
		claims = append(claims, claimArg{jobID: c.jobID, msgID: c.msgID, from: c.status, deliveries: c.deliveries + 1})
	}
	if len(acks) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM queue_messages WHERE id = ANY($1::bigint[])`, acks); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// claimJobs claims the triaged jobs in three statements per batch: the
// conditional UPDATE that gives each a fresh attempt id and lease, the
// messages' delivery count, and the status events.
func claimJobs(ctx context.Context, tx pgx.Tx, now int64, owner string, leaseExp int64, claims []claimArg) ([]pipeline.Claimed, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	ids := make([]string, len(claims))
	atts := make([]string, len(claims))
	msgs := make([]int64, len(claims))
	for i, c := range claims {
		ids[i], atts[i], msgs[i] = c.jobID, newAttemptID(), c.msgID
	}
	claimed := map[string]pipeline.Job{}
	err := eachRow(tx.Query(ctx, `UPDATE jobs SET status = 'running',
		status_changed_at = CASE WHEN jobs.status = 'running' THEN jobs.status_changed_at ELSE $1 END,
		updated_at = $1, attempts = jobs.attempts + 1, next_run_at = NULL,
		attempt_id = c.att, lease_owner = $2, lease_expires_at = $3
		FROM unnest($4::text[], $5::text[]) AS c(id, att)
		WHERE jobs.id = c.id
		  AND (jobs.status IN ('pending','retry_wait') OR (jobs.status = 'running' AND jobs.lease_expires_at <= $1))
		RETURNING `+sqlcols.Prefixed("jobs.", jobColumns), now, owner, leaseExp, ids, atts))(func(r pgx.Rows) error {
		j, err := scanJob(r)
		if err != nil {
			return err
		}
		claimed[j.ID] = j
		return nil
	})
	if err != nil {
		return nil, err
	}
	var (
		out                   []pipeline.Claimed
		evJobs, evFrom, evAtt []string
		evDetail              []string
		gotMsgs               []int64
	)
	for _, c := range claims {
		j, ok := claimed[c.jobID]
		if !ok {
			continue
		}
		d, _ := json.Marshal(map[string]any{"attempt": j.Attempts, "owner": owner, "delivery": c.deliveries})
		evJobs, evFrom, evAtt, evDetail = append(evJobs, j.ID), append(evFrom, string(c.from)), append(evAtt, j.AttemptID), append(evDetail, string(d))
		gotMsgs = append(gotMsgs, c.msgID)
		out = append(out, pipeline.Claimed{
			Job:        j,
			Lease:      pipeline.Lease{JobID: j.ID, AttemptID: j.AttemptID, Owner: owner, Attempt: j.Attempts, ExpiresAt: fromMS(leaseExp)},
			MessageID:  c.msgID,
			Deliveries: c.deliveries,
		})
	}
	if len(out) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE queue_messages SET delivery_count = delivery_count + 1,
		visible_at = $1, last_delivered_at = $2 WHERE id = ANY($3::bigint[])`, leaseExp, now, gotMsgs); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
		SELECT e.job, $1, 'status', e.from_status, 'running', e.att, e.detail::json
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e(job, from_status, att, detail, n)
		ORDER BY e.n`, now, evJobs, evFrom, evAtt, evDetail); err != nil {
		return nil, err
	}
	return out, nil
}

// poison dead-letters a job whose message keeps coming back unacked.
func (s *Store) poison(ctx context.Context, tx pgx.Tx, now int64, queue, jobID string, from pipeline.Status, deliveries int) error {
	detail := fmt.Sprintf("delivered %d times without completing", deliveries)
	if _, err := insertDeadLetter(ctx, tx, now, jobID, queue, pipeline.ReasonPoison, detail); err != nil {
		return err
	}
	return settle(ctx, tx, now, jobID, from, "", pipeline.Outcome{
		Status: pipeline.StatusDeadLettered, Reason: pipeline.ReasonPoison, RequiresAction: true,
		ErrorCode: pipeline.ReasonPoison, ErrorMessage: pipeline.DeadLetterMessage(pipeline.ReasonPoison),
	}, map[string]any{"reason": pipeline.ReasonPoison, "deliveries": deliveries})
}

// Ack removes a message. Acking a message that is gone is not an error.
func (s *Store) Ack(ctx context.Context, messageID int64) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM queue_messages WHERE id = $1`, messageID)
	return translate(err)
}

// Enqueue adds a message for an existing job (operators and tests).
func (s *Store) Enqueue(ctx context.Context, queue, jobID string, delay time.Duration) error {
	now := s.now()
	return translate(enqueue(ctx, s.pool, now, queue, jobID, now+delay.Milliseconds()))
}

// QueueDepth counts messages on a queue, and how many are visible now.
func (s *Store) QueueDepth(ctx context.Context, queue string) (total, visible int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE visible_at <= $1) FROM queue_messages WHERE queue = $2`,
		s.now(), queue).Scan(&total, &visible)
	return total, visible, translate(err)
}

// Heartbeat extends the lease (and the message's invisibility) of a live
// attempt. A lost lease is a *pipeline.FenceError: the attempt must stop.
func (s *Store) Heartbeat(ctx context.Context, lease pipeline.Lease, leaseFor time.Duration) (pipeline.Lease, error) {
	out := lease
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		exp := now + leaseFor.Milliseconds()
		tag, err := tx.Exec(ctx, `UPDATE jobs SET lease_expires_at = $1 WHERE id = $2 AND attempt_id = $3
			AND status = 'running' AND lease_expires_at > $4`, exp, lease.JobID, lease.AttemptID, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return &pipeline.FenceError{JobID: lease.JobID, AttemptID: lease.AttemptID, Op: "heartbeat"}
		}
		if _, err := tx.Exec(ctx, `UPDATE queue_messages SET visible_at = $1 WHERE job_id = $2`, exp, lease.JobID); err != nil {
			return err
		}
		out.ExpiresAt = fromMS(exp)
		return nil
	})
	if err != nil {
		return lease, err
	}
	return out, nil
}

// checkFence fails with a *pipeline.FenceError unless lease is still the
// job's live lease, and locks the job row until the transaction ends, so
// nothing can take the lease over between this check and the writes after
// it (and the job's events stay in commit order).
func checkFence(ctx context.Context, tx pgx.Tx, now int64, lease pipeline.Lease, op string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM jobs WHERE id = $1 AND attempt_id = $2 AND status = 'running'
		AND lease_expires_at > $3 FOR UPDATE`, lease.JobID, lease.AttemptID, now).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return &pipeline.FenceError{JobID: lease.JobID, AttemptID: lease.AttemptID, Op: op}
	}
	return err
}

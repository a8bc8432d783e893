package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	if p.TenantMaxRunning == 0 {
		out, plain, err := s.fetchPlain(ctx, p)
		if err != nil {
			return nil, pipeline.FetchStats{}, err
		}
		if plain {
			return out, pipeline.FetchStats{Claimed: len(out)}, nil
		}
		// A candidate needs triage (an ack, a deferral, a poison message):
		// fetchPlain wrote nothing, and the transaction below does it all.
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
	var acks []string
	for _, c := range cands {
		switch {
		case c.status.Settled():
			acks = append(acks, c.jobID)
			stats.AckedSettled++
			continue
		case c.status == pipeline.StatusRunning && c.leaseExp != nil && *c.leaseExp > now:
			if _, err := tx.Exec(ctx, `UPDATE queue_messages SET visible_at = $1 WHERE job_id = $2`, *c.leaseExp, c.jobID); err != nil {
				return nil, err
			}
			stats.Deferred++
			continue
		case c.status == pipeline.StatusRetryWait && c.nextRun != nil && *c.nextRun > now:
			if _, err := tx.Exec(ctx, `UPDATE queue_messages SET visible_at = $1 WHERE job_id = $2`, *c.nextRun, c.jobID); err != nil {
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
		if _, err := tx.Exec(ctx, `DELETE FROM queue_messages WHERE job_id = ANY($1::text[])`, acks); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// claimCTEs claim the jobs of a CTE named claims (job_id, msg_id,
// deliveries, from_status, att, n), in one statement with the rest of a
// Fetch: upd is the conditional UPDATE that gives each job its fresh
// attempt id (att) and lease, msgs counts the delivery on each claimed
// job's message, and ev appends the status events in claim order (n).
// Every claim in one statement saves a round trip per part, which is most
// of a claim's cost (bench/riverref, "Where edgepipe's time goes"). The
// rows to write are also named by "= ANY(ARRAY(…))", as the separate
// statements named them by array parameters: the planner then reaches
// them through the primary key whatever it estimates for the CTEs, rather
// than by a hash join over a scan of the whole table; and the status a job
// may be claimed from is checked by a CASE, which no index serves, so that
// a planner without statistics does not read the whole status index
// (every pending job) to intersect it with those keys.
// Parameters: $1 now, $2 owner, $3 lease expiry, $4 the owner as JSON text
// (encoding/json's, so the event detail is byte for byte what
// json.Marshal(map{attempt, delivery, owner}) gives: keys sorted, integers
// as digits).
var claimCTEs = `upd AS (
	UPDATE jobs SET status = 'running',
		status_changed_at = CASE WHEN jobs.status = 'running' THEN jobs.status_changed_at ELSE $1 END,
		updated_at = $1, attempts = jobs.attempts + 1, next_run_at = NULL,
		attempt_id = c.att, lease_owner = $2, lease_expires_at = $3
	FROM claims c
	WHERE jobs.id = c.job_id AND jobs.id = ANY(ARRAY(SELECT job_id FROM claims))
	  AND CASE jobs.status WHEN 'pending' THEN true WHEN 'retry_wait' THEN true
		WHEN 'running' THEN jobs.lease_expires_at <= $1 ELSE false END
	RETURNING c.n, c.msg_id, c.deliveries, c.from_status, ` + sqlcols.Prefixed("jobs.", claimColumns) + `
), msgs AS (
	UPDATE queue_messages SET delivery_count = delivery_count + 1, visible_at = $3, last_delivered_at = $1
	WHERE job_id = ANY(ARRAY(SELECT id COLLATE "default" FROM upd))
), ev AS (
	INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
	SELECT upd.id, $1, 'status', upd.from_status, 'running', upd.attempt_id,
		('{"attempt":' || upd.attempts || ',"delivery":' || upd.deliveries || ',"owner":' || $4::text || '}')::json
	FROM upd ORDER BY upd.n
)`

// qClaimTriaged claims the jobs triage picked ($5…$9: job ids, message
// ids, delivery counts including this one, statuses read, attempt ids).
var qClaimTriaged = `WITH claims AS (
	SELECT * FROM unnest($5::text[], $6::bigint[], $7::int[], $8::text[], $9::text[])
		WITH ORDINALITY AS c(job_id, msg_id, deliveries, from_status, att, n)
), ` + claimCTEs + `
SELECT upd.msg_id, upd.deliveries, ` + sqlcols.Prefixed("upd.", claimColumns) + ` FROM upd ORDER BY upd.n`

// claimJobs claims the triaged jobs in one statement (claimCTEs).
func claimJobs(ctx context.Context, tx pgx.Tx, now int64, owner string, leaseExp int64, claims []claimArg) ([]pipeline.Claimed, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	ownerJSON, err := json.Marshal(owner)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(claims))
	msgs := make([]int64, len(claims))
	delivs := make([]int32, len(claims))
	froms := make([]string, len(claims))
	for i, c := range claims {
		ids[i], msgs[i], delivs[i], froms[i] = c.jobID, c.msgID, int32(c.deliveries), string(c.from)
	}
	var out []pipeline.Claimed
	err = eachRow(tx.Query(ctx, qClaimTriaged, now, owner, leaseExp, string(ownerJSON),
		ids, msgs, delivs, froms, newAttemptIDs(len(claims))))(func(r pgx.Rows) error {
		c, err := scanClaimed(r, now, owner, leaseExp)
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimColumns are what a claim returns: what an attempt reads of its job
// (pipeline.Claimed; storetest's ClaimCarriesWhatAttemptsRead), the same
// as the sqlite driver's. The rest of the row is the same for every claim
// (status, lease) or not the worker's business, and is neither sent nor
// decoded: half of jobColumns, for up to Max rows a claim.
const claimColumns = `id, instance_id, tenant, operation, workflow_version, queue, status_changed_at, created_at,
	attempts, attempt_id, input_json, frozen_input_json, infra_failures, infra_since, cancel_requested_at, webhook_url, trace_parent`

// claimColumnCount is how many columns claimColumns names.
var claimColumnCount = strings.Count(claimColumns, ",") + 1

// scanClaimed scans a claimed job: its message id, its delivery count,
// then claimColumns, after len(pre) other columns; the job was leased to
// owner until leaseExp at now.
func scanClaimed(r pgx.Row, now int64, owner string, leaseExp int64, pre ...any) (pipeline.Claimed, error) {
	var (
		j                         pipeline.Job
		msgID                     int64
		deliveries                int
		statusAt, createdAt       int64
		attemptID, traceParent    *string
		frozen                    *string
		input                     string
		infraSince, cancelRequest *int64
	)
	if err := r.Scan(append(pre, &msgID, &deliveries, &j.ID, &j.InstanceID, &j.Tenant, &j.Operation, &j.Version, &j.Queue,
		&statusAt, &createdAt, &j.Attempts, &attemptID, &input, &frozen, &j.InfraFailures, &infraSince, &cancelRequest,
		&j.WebhookURL, &traceParent)...); err != nil {
		return pipeline.Claimed{}, translate(err)
	}
	j.Status = pipeline.StatusRunning
	j.StatusChangedAt, j.CreatedAt, j.UpdatedAt = fromMS(statusAt), fromMS(createdAt), fromMS(now)
	j.AttemptID, j.LeaseOwner, j.LeaseExpiresAt = str(attemptID), owner, fromMS(leaseExp)
	j.Input = json.RawMessage(input)
	if frozen != nil {
		j.FrozenInput = json.RawMessage(*frozen)
	}
	j.InfraSince, j.CancelRequestedAt = timeOf(infraSince), timeOf(cancelRequest)
	j.TraceParent = str(traceParent)
	return pipeline.Claimed{
		Job:        j,
		Lease:      pipeline.Lease{JobID: j.ID, AttemptID: j.AttemptID, Owner: owner, Attempt: j.Attempts, ExpiresAt: fromMS(leaseExp)},
		MessageID:  msgID,
		Deliveries: deliveries,
	}, nil
}

// qFetchPlain is a Fetch without a tenant limit in one statement: cand
// reads and locks up to Max visible messages, then their jobs (FOR UPDATE
// SKIP LOCKED, as fetchCandidates does; a message whose job another
// transaction holds is not claimed here: plain is then false, and the
// transaction path, which locks before it limits, claims past it). The messages are taken
// first, by themselves, so that the LIMIT cuts before the join whatever
// the planner knows: on a table without statistics (a new database, a
// burst since the last ANALYZE) the join-then-limit form was planned as
// "join every visible message to its job, sort, lock the first Max" —
// 10,000 job lookups to claim 200, five times the buffer reads of the
// same claim with statistics (TestFetchPlanWithoutStatistics). plain says whether every one of
// them is a job triage would simply claim (pending; retry_wait whose next
// run is due; running whose lease is gone; delivered fewer than
// MaxDeliveries times), and only then are they claimed (claimCTEs). When
// one is not — a settled job's message to ack, a deferral, a poison message
// — the statement writes nothing and says so (its first column is false),
// so Fetch does it all in a transaction with triage. The first row is
// there even when nothing was claimed; a row without a claim has NULLs
// after the first column.
// $5 queue, $6 Max, $7 MaxDeliveries, $8 Max fresh attempt ids.
var qFetchPlain = `WITH msg AS MATERIALIZED (
	SELECT id, visible_at, job_id, delivery_count FROM queue_messages
	WHERE queue = $5 AND visible_at <= $1
	ORDER BY visible_at, id LIMIT $6
	FOR UPDATE SKIP LOCKED
), cand AS MATERIALIZED (
	SELECT m.id, m.visible_at, m.job_id, m.delivery_count, j.status, j.lease_expires_at, j.next_run_at
	FROM msg m
	JOIN LATERAL (SELECT status, lease_expires_at, next_run_at FROM jobs WHERE jobs.id = m.job_id
		FOR UPDATE SKIP LOCKED) j ON true
), plain AS (
	SELECT (SELECT count(*) FROM cand) = (SELECT count(*) FROM msg)
	AND NOT EXISTS (SELECT 1 FROM cand WHERE NOT (cand.delivery_count < $7 AND (cand.status = 'pending'
		OR (cand.status = 'retry_wait' AND (cand.next_run_at IS NULL OR cand.next_run_at <= $1))
		OR (cand.status = 'running' AND (cand.lease_expires_at IS NULL OR cand.lease_expires_at <= $1))))) AS ok
), claims AS (
	SELECT num.job_id, num.id AS msg_id, num.delivery_count + 1 AS deliveries, num.status AS from_status, a.att, num.n
	FROM (SELECT cand.*, row_number() OVER (ORDER BY cand.visible_at, cand.id) AS n FROM cand) AS num
	JOIN unnest($8::text[]) WITH ORDINALITY AS a(att, n) ON a.n = num.n
	WHERE (SELECT ok FROM plain)
), ` + claimCTEs + `
SELECT plain.ok, upd.n, upd.msg_id, upd.deliveries, ` + sqlcols.Prefixed("upd.", claimColumns) + `
FROM plain LEFT JOIN upd ON true ORDER BY upd.n`

// fetchPlain runs qFetchPlain: Fetch's one-round-trip path when no tenant
// limit applies. plain false means it wrote nothing, because a candidate
// needs triage.
func (s *Store) fetchPlain(ctx context.Context, p *pipeline.FetchParams) (out []pipeline.Claimed, plain bool, err error) {
	ownerJSON, err := json.Marshal(p.Owner)
	if err != nil {
		return nil, false, err
	}
	atts := newAttemptIDs(p.Max)
	skip := make([]any, 4+claimColumnCount) // the first pass reads the flag and whether the row has a claim
	err = s.retrying(ctx, func() error {
		out, plain = nil, false
		now := s.now()
		leaseExp := now + p.LeaseFor.Milliseconds()
		return eachRow(s.claims.Query(ctx, qFetchPlain, now, p.Owner, leaseExp, string(ownerJSON),
			p.Queue, p.Max, s.cfg.MaxDeliveries, atts))(func(r pgx.Rows) error {
			var n *int64
			skip[0], skip[1] = &plain, &n
			if err := r.Scan(skip...); err != nil || n == nil {
				return err
			}
			c, err := scanClaimed(r, now, p.Owner, leaseExp, nil, nil)
			if err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	if err != nil {
		return nil, false, err
	}
	return out, plain, nil
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
// Messages are keyed by their job (migration 0009), so this reads the
// queue's table to find the id: only tests call it; the workers' acks go
// by job.
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

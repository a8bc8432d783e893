package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

const jobColumns = `id, tenant, operation, idempotency_key, request_fingerprint, input_json, frozen_input_json,
	workflow_version, queue, status, status_changed_at, created_at, updated_at, attempts, next_run_at,
	attempt_id, lease_owner, lease_expires_at, stage, units_total, units_done, last_error_class,
	last_error_code, last_error_message, requires_action, cancel_requested_at, result_key, webhook_url,
	infra_failures, infra_since, decision, decided_by, decision_reason, decided_at, instance_id, trace_parent`

func scanJob(r pgx.Row) (pipeline.Job, error) { return scanJobAfter(r) }

// scanJobAfter scans a row whose jobColumns follow len(pre) other columns,
// scanned into pre (a nil skips one).
func scanJobAfter(r pgx.Row, pre ...any) (pipeline.Job, error) {
	var (
		j                                    pipeline.Job
		frozen, attemptID, owner, resultKey  *string
		traceParent                          *string
		status, errClass, decision, input    string
		statusAt, createdAt, updatedAt       int64
		nextRun, leaseExp, cancelAt, infraAt *int64
		decidedAt                            *int64
		requiresAction                       int
	)
	err := r.Scan(append(pre, &j.ID, &j.Tenant, &j.Operation, &j.IdempotencyKey, &j.RequestFingerprint, &input, &frozen,
		&j.Version, &j.Queue, &status, &statusAt, &createdAt, &updatedAt, &j.Attempts, &nextRun,
		&attemptID, &owner, &leaseExp, &j.Stage, &j.UnitsTotal, &j.UnitsDone, &errClass,
		&j.LastErrorCode, &j.LastErrorMessage, &requiresAction, &cancelAt, &resultKey, &j.WebhookURL,
		&j.InfraFailures, &infraAt, &decision, &j.Decision.Operator, &j.Decision.Reason, &decidedAt, &j.InstanceID, &traceParent)...)
	if err != nil {
		return pipeline.Job{}, translate(err)
	}
	j.Input = json.RawMessage(input)
	if frozen != nil {
		j.FrozenInput = json.RawMessage(*frozen)
	}
	j.Status = pipeline.Status(status)
	j.StatusChangedAt, j.CreatedAt, j.UpdatedAt = fromMS(statusAt), fromMS(createdAt), fromMS(updatedAt)
	j.NextRunAt, j.LeaseExpiresAt, j.CancelRequestedAt = timeOf(nextRun), timeOf(leaseExp), timeOf(cancelAt)
	j.InfraSince = timeOf(infraAt)
	j.AttemptID, j.LeaseOwner, j.ResultKey = str(attemptID), str(owner), str(resultKey)
	j.TraceParent = str(traceParent)
	j.LastErrorClass = pipeline.ErrorClass(errClass)
	j.RequiresAction = requiresAction == 1
	j.Decision.Kind, j.Decision.At = pipeline.ReviewDecision(decision), timeOf(decidedAt)
	return j, nil
}

func collectJobs(rows pgx.Rows, err error) ([]pipeline.Job, error) {
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, translate(rows.Err())
}

// CreateJob inserts a job and, in the same transaction, its queue message (or
// its dead letter). If the tenant already used the idempotency key for this
// operation, it returns the existing job with created=false when the
// fingerprints match, and an error matching pipeline.ErrIdempotencyReused when
// they do not. Concurrent calls share one commit (groupcommit.go).
func (s *Store) CreateJob(ctx context.Context, nj pipeline.NewJob) (job pipeline.Job, created bool, err error) {
	nj = nj.WithDefaults()
	if err := validateNewJob(nj); err != nil {
		return pipeline.Job{}, false, err
	}
	return s.group.Submit(ctx, nj)
}

// CreateJobs inserts many jobs in one transaction (bulk submission and
// benchmarks); each follows CreateJob's rules, and the first error rolls the
// whole batch back.
func (s *Store) CreateJobs(ctx context.Context, njs []pipeline.NewJob) error {
	njs = slices.Clone(njs)
	for i := range njs {
		njs[i] = njs[i].WithDefaults()
		if err := validateNewJob(njs[i]); err != nil {
			return err
		}
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		// Queued jobs go out as one pipelined batch, the rest one by one.
		b := &pgx.Batch{}
		var queued []pipeline.NewJob
		for _, nj := range njs {
			if nj.DeadLetterReason != "" {
				if _, _, err := s.createJobTx(ctx, tx, now, nj); err != nil {
					return fmt.Errorf("job %s: %w", nj.ID, err)
				}
				continue
			}
			if len(nj.Input) == 0 {
				nj.Input = json.RawMessage("{}")
			}
			b.Queue(qCreateQueued, queuedArgs(nj, now)...)
			queued = append(queued, nj)
		}
		if len(queued) == 0 {
			return nil
		}
		inserted := make([]int, len(queued))
		br := tx.SendBatch(ctx, b)
		for i, nj := range queued {
			if err := br.QueryRow().Scan(&inserted[i]); err != nil {
				_ = br.Close()
				return fmt.Errorf("job %s: %w", nj.ID, translate(err))
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		later := laterInBatch(queued, inserted)
		for i, nj := range queued {
			if inserted[i] == 0 { // the key was used (a replay, or refused), or the instance id is taken
				if _, _, err := notInserted(ctx, tx, nj, later(i)); err != nil {
					return fmt.Errorf("job %s: %w", nj.ID, err)
				}
			}
		}
		notified := map[string]bool{}
		for _, nj := range queued {
			if !notified[nj.Queue] {
				notified[nj.Queue] = true
				if err := notifyQueue(ctx, tx, nj.Queue); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func validateNewJob(nj pipeline.NewJob) error {
	if nj.ID == "" || nj.InstanceID == "" || nj.Tenant == "" || nj.Operation == "" || nj.IdempotencyKey == "" || nj.RequestFingerprint == "" {
		return fmt.Errorf("%w: job id, instance id, tenant, operation, idempotency key and fingerprint are required", pipeline.ErrInvalidInput)
	}
	if (nj.Queue == "") == (nj.DeadLetterReason == "") {
		return fmt.Errorf("%w: a new job needs exactly one of a queue or a dead-letter reason", pipeline.ErrInvalidInput)
	}
	return nil
}

// qCreateQueued inserts a job that goes to a queue, its created event and
// its message in one statement, so a group of submissions is one pipelined
// round trip. The job's keys are arbitrated by its key row (job_keys,
// migration 0007, written by jobs' insert trigger), and the statement first
// tells the trigger to skip a job whose key is held rather than raise
// (skipKeyConflicts): a concurrent submission with the same idempotency
// key, the same instance id of the tenant or the same job key waits for
// the first and inserts nothing (never a unique violation, which would
// abort a group commit's whole transaction), as ON CONFLICT DO NOTHING
// does for jobs' primary key; the caller then tells which from the winner
// (notInserted), the key first, as storage/sqlite does. The arbiters are
// found through job_keys' unique indexes themselves, so
// the cost of a submission does not depend on how many jobs the tenant
// has. (An earlier "WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE tenant = $2
// AND instance_id = $12)" was free to use the non-unique jobs_tenant_created
// index, and the generic plan cached while the table was empty did: every
// submission read the tenant's whole range, 3.7 ms each at 5,000 jobs.
// TestCreatePlanWithoutStatistics.)
const qCreateQueued = `WITH ins AS (
	INSERT INTO jobs (id, tenant, operation, idempotency_key, request_fingerprint, input_json, workflow_version,
		queue, status, status_changed_at, created_at, updated_at, webhook_url, instance_id, trace_parent)
	SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, 'pending',
		$9::bigint, $9::bigint, $9::bigint, $10::text, $12::text, $13::text
	FROM ` + skipKeyConflicts + `
	ON CONFLICT DO NOTHING
	RETURNING id),
ev AS (
	INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
	SELECT id, $9, 'created', '', 'pending', '', $11::text::json FROM ins),
msg AS (
	INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at)
	SELECT $8, id, $9, $9 FROM ins)
SELECT count(*) FROM ins`

// skipKeyConflicts is a one-row FROM item that, before the statement
// inserts its first job, tells jobs' insert trigger (migration 0007) to
// skip a job whose key another job holds instead of raising
// unique_violation, for the rest of the transaction: the store answers
// such a submission itself (notInserted). Set in the statement, not on
// the connection, so that it holds through a transaction-pooling proxy.
// set_config is volatile, so the planner neither drops nor defers it.
const skipKeyConflicts = `(SELECT set_config('edgepipe.key_conflict', 'skip', true)) AS skip_key_conflicts`

func createdDetail(nj pipeline.NewJob) string {
	b, _ := json.Marshal(map[string]any{"version": nj.Version, "queue": nj.Queue})
	return string(b)
}

func queuedArgs(nj pipeline.NewJob, now int64) []any {
	return []any{nj.ID, nj.Tenant, nj.Operation, nj.IdempotencyKey, nj.RequestFingerprint, string(nj.Input),
		nj.Version, nj.Queue, now, nj.WebhookURL, createdDetail(nj), nj.InstanceID, nullString(nj.TraceParent)}
}

// createJobTx inserts one job inside tx.
func (s *Store) createJobTx(ctx context.Context, tx pgx.Tx, now int64, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	if len(nj.Input) == 0 {
		nj.Input = json.RawMessage("{}")
	}
	if nj.DeadLetterReason != "" {
		return s.createDeadLetteredTx(ctx, tx, now, nj)
	}
	var n int
	if err := notifyQueue(ctx, tx, nj.Queue); err != nil {
		return pipeline.Job{}, false, err
	}
	if err := tx.QueryRow(ctx, qCreateQueued, queuedArgs(nj, now)...).Scan(&n); err != nil {
		return pipeline.Job{}, false, translate(err)
	}
	if n == 0 {
		return notInserted(ctx, tx, nj, nil)
	}
	return builtJob(nj, now), true, nil
}

// findByKey resolves a submission whose key is already used: the existing
// job when the fingerprints match, ErrIdempotencyReused otherwise.
func findByKey(ctx context.Context, q dbtx, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	existing, err := scanJob(q.QueryRow(ctx, qJobByKey, nj.Tenant, nj.Operation, nj.IdempotencyKey))
	if err != nil {
		return pipeline.Job{}, false, err
	}
	if existing.RequestFingerprint != nj.RequestFingerprint {
		return pipeline.Job{}, false, &reusedKeyError{id: existing.ID}
	}
	return existing, false, nil
}

// notInserted resolves a submission that inserted nothing: its key was
// used (findByKey: a replay or ErrIdempotencyReused), or else the tenant
// already holds its instance id (ErrAlreadyExists), or else another job
// holds its job key (an internal clash, not the caller's doing).
//
// later reports whether a job id was inserted by a later statement of the
// same pipelined batch (nil: none was): such a row did not exist at nj's
// turn, so it is no reason (each unique index has one holder, so the
// holder found is either the reason or a later row, never hiding an
// earlier one).
func notInserted(ctx context.Context, q dbtx, nj pipeline.NewJob, later func(id string) bool) (pipeline.Job, bool, error) {
	if later == nil {
		later = func(string) bool { return false }
	}
	j, created, err := findByKey(ctx, q, nj)
	var reused *reusedKeyError
	switch {
	case err == nil && later(j.ID), errors.As(err, &reused) && later(reused.id):
	case !errors.Is(err, pipeline.ErrNotFound):
		return j, created, err
	}
	var holder string
	err = q.QueryRow(ctx, qInstanceHolder, nj.Tenant, nj.InstanceID).Scan(&holder)
	switch {
	case err == nil && !later(holder):
		return pipeline.Job{}, false, fmt.Errorf("%w: instance id %s is taken", pipeline.ErrAlreadyExists, nj.InstanceID)
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return pipeline.Job{}, false, translate(err)
	}
	// Two tenants whose job keys collide, or a caller that reused an internal
	// key: that says nothing about this tenant's ids (docs/design.md §3).
	return pipeline.Job{}, false, fmt.Errorf("postgres: job key %s is held by another job: %w", nj.ID, ErrConstraint)
}

// laterInBatch returns, for the k-th statement of a pipelined batch of
// inserts (jobs[k], inserted[k] its rows), the later func of notInserted:
// whether a job id was inserted by a statement after the k-th.
func laterInBatch(jobs []pipeline.NewJob, inserted []int) func(k int) func(string) bool {
	madeAt := make(map[string]int, len(jobs))
	for k, nj := range jobs {
		if inserted[k] == 1 {
			madeAt[nj.ID] = k
		}
	}
	return func(k int) func(string) bool {
		return func(id string) bool { at, ok := madeAt[id]; return ok && at > k }
	}
}

// reusedKeyError is findByKey's ErrIdempotencyReused, with the id of the
// job that holds the key.
type reusedKeyError struct{ id string }

func (e *reusedKeyError) Error() string {
	return fmt.Sprintf("%s (job %s)", pipeline.ErrIdempotencyReused, e.id)
}

func (e *reusedKeyError) Unwrap() error { return pipeline.ErrIdempotencyReused }

// createDeadLetteredTx stores a job that cannot run here directly as
// dead_lettered, with both its events, its dead letter and its webhook.
func (s *Store) createDeadLetteredTx(ctx context.Context, tx pgx.Tx, now int64, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	var id string
	err := tx.QueryRow(ctx, `INSERT INTO jobs (id, tenant, operation, idempotency_key, request_fingerprint,
		input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at, webhook_url,
		last_error_class, last_error_code, last_error_message, requires_action, instance_id, trace_parent)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, 'dead_lettered',
			$9::bigint, $9::bigint, $9::bigint, $10::text, $11::text, $12::text, $13::text, 1, $14::text, $15::text
		FROM `+skipKeyConflicts+`
		ON CONFLICT DO NOTHING RETURNING id`, // as qCreateQueued: the key row and the primary key arbitrate
		nj.ID, nj.Tenant, nj.Operation, nj.IdempotencyKey, nj.RequestFingerprint, string(nj.Input),
		nj.Version, nj.Queue, now, nj.WebhookURL,
		pipeline.DeadLetterClass(nj.DeadLetterReason), nj.DeadLetterReason, pipeline.DeadLetterMessage(nj.DeadLetterReason), nj.InstanceID, nullString(nj.TraceParent)).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return notInserted(ctx, tx, nj, nil)
	case err != nil:
		return pipeline.Job{}, false, translate(err)
	}
	if _, err := appendEvent(ctx, tx, now, nj.ID, pipeline.EventCreated, "", pipeline.StatusPending, "",
		map[string]any{"version": nj.Version, "queue": nj.Queue}); err != nil {
		return pipeline.Job{}, false, err
	}
	evID, err := appendEvent(ctx, tx, now, nj.ID, pipeline.EventStatus, pipeline.StatusPending, pipeline.StatusDeadLettered, "",
		map[string]any{"reason": nj.DeadLetterReason})
	if err != nil {
		return pipeline.Job{}, false, err
	}
	if _, err := insertDeadLetter(ctx, tx, now, nj.ID, nj.DeadLetterQueue, nj.DeadLetterReason, nj.DeadLetterDetail); err != nil {
		return pipeline.Job{}, false, err
	}
	if err := enqueueWebhook(ctx, tx, now, webhookJob{nj.ID, nj.InstanceID, nj.WebhookURL}, evID, pipeline.StatusDeadLettered); err != nil {
		return pipeline.Job{}, false, err
	}
	return builtJob(nj, now), true, nil
}

// builtJob is the row just inserted, built instead of read back.
func builtJob(nj pipeline.NewJob, now int64) pipeline.Job {
	status := pipeline.StatusPending
	if nj.DeadLetterReason != "" {
		status = pipeline.StatusDeadLettered
	}
	t := fromMS(now)
	return pipeline.Job{ID: nj.ID, InstanceID: nj.InstanceID, Tenant: nj.Tenant, Operation: nj.Operation, IdempotencyKey: nj.IdempotencyKey,
		RequestFingerprint: nj.RequestFingerprint, Input: nj.Input, Version: nj.Version, Queue: nj.Queue, Status: status,
		StatusChangedAt: t, CreatedAt: t, UpdatedAt: t, WebhookURL: nj.WebhookURL, TraceParent: nj.TraceParent,
		LastErrorClass: pipeline.ErrorClass(pipeline.DeadLetterClass(nj.DeadLetterReason)), LastErrorCode: nj.DeadLetterReason,
		LastErrorMessage: pipeline.DeadLetterMessage(nj.DeadLetterReason), RequiresAction: nj.DeadLetterReason != ""}
}

// GetJob returns a job by id.
func (s *Store) GetJob(ctx context.Context, id string) (pipeline.Job, error) {
	return scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
}

// GetTenantJob returns tenant's job by its instance id (the unique index
// job_keys_tenant_instance). Instance ids are unique per tenant, so another
// tenant's job with the same id is simply not this tenant's: the answer is
// exactly that of a missing one.
func (s *Store) GetTenantJob(ctx context.Context, tenant, instanceID string) (pipeline.Job, error) {
	return scanJob(s.pool.QueryRow(ctx, qTenantJob, tenant, instanceID))
}

// The lookups of a job by its keys read the job's key row (migration
// 0007): jobs itself has no index on its keys, and a lookup there would
// read the table, or the tenant's whole range of jobs_tenant_created
// (TestKeyLookupsReadJobKeys).
const (
	// qInstanceHolder is the internal key of tenant $1's job $2.
	qInstanceHolder = `SELECT job_id FROM job_keys WHERE tenant = $1 AND instance_id = $2`
	// qTenantJob is tenant $1's job $2 (lockJob adds FOR UPDATE).
	qTenantJob = `SELECT ` + jobColumns + ` FROM jobs WHERE id = (` + qInstanceHolder + `)`
	// qJobByKey is tenant $1's job of operation $2 with idempotency key $3.
	qJobByKey = `SELECT ` + jobColumns + ` FROM jobs WHERE id =
		(SELECT job_id FROM job_keys WHERE tenant = $1 AND operation = $2 AND idempotency_key = $3)`
)

// planEachCall runs a listing as an unnamed statement, planned with its
// values on every call, instead of as a cached prepared statement (pgx's
// default), whose plan Postgres may make generic after five runs. A
// listing's filters are optional (an empty parameter meaning "any", a
// status set or none), and a generic plan cannot tell which are set: it
// reads the listing's order index newest-first and filters. On 200,000
// succeeded jobs (analyzed), listing the failed ones took 26 ms that way,
// reading every row, against 0.03 ms (0.5 ms to plan) for the plan made
// for "failed", by the status index. pgx still caches the statement's
// description, so it is one round trip. (A database or role set to
// plan_cache_mode = force_generic_plan defeats this.)
const planEachCall = pgx.QueryExecModeCacheDescribe

// ListJobs returns jobs newest first, at most Limit (default 50, max 500),
// and the cursor of the next page (zero when there is none).
func (s *Store) ListJobs(ctx context.Context, f pipeline.ListFilter) ([]pipeline.Job, pipeline.Cursor, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	q, args, err := listJobsQuery(f)
	if err != nil {
		return nil, pipeline.Cursor{}, err
	}
	jobs, err := collectJobs(s.pool.Query(ctx, q, append([]any{planEachCall}, args...)...))
	if err != nil {
		return nil, pipeline.Cursor{}, err
	}
	jobs, next := f.Page(jobs)
	return jobs, next, nil
}

// listJobsQuery is ListJobs' statement for f (its Limit set) and its
// arguments, in one of three shapes (TestListingsReadInIndexOrder).
//
// A listing of one status, or of the jobs needing action, reads jobs:
// jobs_status (status, created_at, id) holds one status newest first, and
// jobs_attention the few jobs needing action. A tenant's listing of one
// status walks that status newest first until the page holds the tenant's
// jobs: a status the tenant rarely has but others have often costs a walk
// of the others' jobs in it (the price of keeping a (tenant, status) index
// off every claim and settle), and its next page inside a group of jobs
// created in one millisecond reads the group again (the index breaks ties
// by internal key, the tenant's cursor by instance id).
//
// A listing of several statuses takes a page from each status's range and
// keeps the newest of them: at most a page a status is read and sorted,
// however the statuses are spread.
//
// Every other listing reads job_keys in order (migration 0008: the
// tenant's or every job newest first, on columns that never change, so a
// job's updates do not write into them) and each job by its primary key
// until the page is full.
//
// The shape is chosen here, not by the planner: joined on the creation
// time as well as the key, so that either table's order served, the
// planner took the two conditions as independent, expected a handful of
// rows from the join, and read and sorted every job for a page.
func listJobsQuery(f pipeline.ListFilter) (string, []any, error) {
	if !f.AllTenants && f.Tenant == "" {
		return "", nil, fmt.Errorf("%w: listing needs a tenant", pipeline.ErrInvalidInput)
	}
	var statuses []string
	for _, st := range f.Statuses {
		if !slices.Contains(statuses, string(st)) {
			statuses = append(statuses, string(st))
		}
	}
	// j. names jobs' columns in every shape; t. is the table in order,
	// job_keys (k) or jobs (j).
	from, t, id := `job_keys k JOIN jobs j ON j.id = k.job_id`, "k.", "k.job_id"
	if len(statuses) > 0 || f.RequiresAction {
		from, t, id = `jobs j`, "j.", "j.id"
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where string
	if !f.AllTenants {
		where += ` AND ` + t + `tenant = ` + arg(f.Tenant)
		// A tenant's listing pages by instance id (unique per tenant,
		// and the id the tenant knows); the operators' by internal key.
		id = t + "instance_id"
	}
	if f.RequiresAction {
		where += ` AND j.requires_action = 1`
	}
	if f.Version != "" {
		where += ` AND j.workflow_version = ` + arg(f.Version)
	}
	if !f.CreatedBefore.IsZero() {
		where += ` AND ` + t + `created_at <= ` + arg(ms(f.CreatedBefore))
	}
	if !f.CreatedAfter.IsZero() {
		where += ` AND ` + t + `created_at >= ` + arg(ms(f.CreatedAfter))
	}
	if f.After.ID != "" {
		where += ` AND (` + t + `created_at, ` + id + `) < (` + arg(f.After.CreatedAtMS) + `::bigint, ` + arg(f.After.ID) + `::text)`
	}
	limit := arg(f.Limit + 1)
	order := func(t, id string) string {
		return ` ORDER BY ` + t + `created_at DESC, ` + id + ` DESC LIMIT ` + limit
	}
	// page is the statement of one page: of one status when byStatus
	// (the empty status too, which matches no job, as on SQLite).
	page := func(byStatus bool, status string) string {
		q := `SELECT ` + listColumns + ` FROM ` + from + ` WHERE true` + where
		if byStatus {
			// An equality, not ANY: only an equality on the index's
			// first column leaves its order by creation time to the rest.
			q += ` AND j.status = ` + arg(status)
		}
		return q + order(t, id)
	}
	switch len(statuses) {
	case 0:
		return page(false, ""), args, nil
	case 1:
		return page(true, statuses[0]), args, nil
	}
	pages := make([]string, len(statuses))
	for i, st := range statuses {
		pages[i] = `(` + page(true, st) + `)`
	}
	return `SELECT * FROM (` + strings.Join(pages, ` UNION ALL `) + `) j` + order("j.", "j."+strings.TrimPrefix(id, t)), args, nil
}

// listColumns are jobColumns of the listing's jobs (j).
var listColumns = sqlcols.Prefixed("j.", jobColumns)

// CountByStatus returns how many jobs are in each status (for /metrics).
func (s *Store) CountByStatus(ctx context.Context) (map[pipeline.Status]int, error) {
	out := map[pipeline.Status]int{}
	err := eachRow(s.pool.Query(ctx, `SELECT status, count(*) FROM jobs GROUP BY status`))(func(r pgx.Rows) error {
		var st string
		var n int
		if err := r.Scan(&st, &n); err != nil {
			return err
		}
		out[pipeline.Status(st)] = n
		return nil
	})
	return out, err
}

// eachRow turns a query's result into an iterator that closes the rows and
// translates errors.
func eachRow(rows pgx.Rows, err error) func(fn func(pgx.Rows) error) error {
	return func(fn func(pgx.Rows) error) error {
		if err != nil {
			return translate(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(rows); err != nil {
				return translate(err)
			}
		}
		return translate(rows.Err())
	}
}

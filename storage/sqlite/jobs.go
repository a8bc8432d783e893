package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"edgepipe/pipeline"
)

const jobColumns = `id, tenant, operation, idempotency_key, request_fingerprint, input_json, frozen_input_json,
	workflow_version, queue, status, status_changed_at, created_at, updated_at, attempts, next_run_at,
	attempt_id, lease_owner, lease_expires_at, stage, units_total, units_done, last_error_class,
	last_error_code, last_error_message, requires_action, cancel_requested_at, result_key, webhook_url,
	infra_failures, infra_since, decision, decided_by, decision_reason, decided_at, instance_id, trace_parent`

type rowScanner interface{ Scan(dest ...any) error }

func scanJob(r rowScanner) (pipeline.Job, error) {
	var (
		j                                    pipeline.Job
		frozen, attemptID, owner, resultKey  sql.NullString
		traceParent                          sql.NullString
		status, errClass                     string
		statusAt, createdAt, updatedAt       int64
		nextRun, leaseExp, cancelAt, infraAt sql.NullInt64
		decision                             string
		decidedAt                            sql.NullInt64
		input                                string
		requiresAction                       int
	)
	err := r.Scan(&j.ID, &j.Tenant, &j.Operation, &j.IdempotencyKey, &j.RequestFingerprint, &input, &frozen,
		&j.Version, &j.Queue, &status, &statusAt, &createdAt, &updatedAt, &j.Attempts, &nextRun,
		&attemptID, &owner, &leaseExp, &j.Stage, &j.UnitsTotal, &j.UnitsDone, &errClass,
		&j.LastErrorCode, &j.LastErrorMessage, &requiresAction, &cancelAt, &resultKey, &j.WebhookURL,
		&j.InfraFailures, &infraAt, &decision, &j.Decision.Operator, &j.Decision.Reason, &decidedAt, &j.InstanceID, &traceParent)
	if err != nil {
		return pipeline.Job{}, translate(err)
	}
	j.Input = json.RawMessage(input)
	if frozen.Valid {
		j.FrozenInput = json.RawMessage(frozen.String)
	}
	j.Status = pipeline.Status(status)
	j.StatusChangedAt, j.CreatedAt, j.UpdatedAt = fromMS(statusAt), fromMS(createdAt), fromMS(updatedAt)
	j.NextRunAt, j.LeaseExpiresAt, j.CancelRequestedAt = timeOf(nextRun), timeOf(leaseExp), timeOf(cancelAt)
	j.InfraSince = timeOf(infraAt)
	j.AttemptID, j.LeaseOwner, j.ResultKey = attemptID.String, owner.String, resultKey.String
	j.TraceParent = traceParent.String
	j.LastErrorClass = pipeline.ErrorClass(errClass)
	j.RequiresAction = requiresAction == 1
	j.Decision.Kind, j.Decision.At = pipeline.ReviewDecision(decision), timeOf(decidedAt)
	return j, nil
}

// CreateJob inserts a job and, in the same transaction, its queue message (or
// its dead letter). If the tenant already used the idempotency key for this
// operation, it returns the existing job with created=false when the
// fingerprints match, and an error matching pipeline.ErrIdempotencyReused when
// they do not.
func (s *Store) CreateJob(ctx context.Context, nj pipeline.NewJob) (job pipeline.Job, created bool, err error) {
	nj = nj.WithDefaults()
	if err := validateNewJob(nj); err != nil {
		return pipeline.Job{}, false, err
	}
	return s.group.Submit(ctx, nj)
}

// CreateJobs inserts many jobs in one transaction (bulk submission and the
// burn-down benchmark); each follows CreateJob's rules, and the first error
// rolls the whole batch back.
func (s *Store) CreateJobs(ctx context.Context, njs []pipeline.NewJob) error {
	njs = slices.Clone(njs)
	for i := range njs {
		njs[i] = njs[i].WithDefaults()
		if err := validateNewJob(njs[i]); err != nil {
			return err
		}
	}
	return s.inTx(ctx, func(tx *wtx) error {
		res, err := s.createJobsTx(ctx, tx, s.now(), njs, false)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.err != nil {
				return fmt.Errorf("job %s: %w", njs[i].ID, r.err)
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

// created is what createJobsTx says of one new job: the job (when read
// back), whether this call created it, and a refusal of that job alone.
type created struct {
	job     pipeline.Job
	created bool
	err     error
}

// insertChunk is the largest number of rows one multi-row statement of
// createJobsTx carries: a group is written in chunks of powers of two up
// to it, so a handful of statement texts (and prepared statements) serve
// every group size.
const insertChunk = 256

// chunks splits n into sizes of powers of two, largest first, none above
// insertChunk: 300 → 256, 32, 8, 4.
func chunks(n int) []int {
	var out []int
	for n > 0 {
		k := insertChunk
		for k > n {
			k /= 2
		}
		out = append(out, k)
		n -= k
	}
	return out
}

// rowsSQL is head followed by k copies of the parenthesized row, comma
// separated, and tail.
func rowsSQL(head, row, tail string, k int) string {
	var b strings.Builder
	b.Grow(len(head) + k*(len(row)+1) + len(tail))
	b.WriteString(head)
	for i := range k {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	b.WriteString(tail)
	return b.String()
}

// The multi-row statements of createJobsTx, one text per chunk size.
var (
	insertJobsSQL     = map[int]string{}
	insertCreatedSQL  = map[int]string{}
	insertMessagesSQL = map[int]string{}
)

func init() {
	for k := 1; k <= insertChunk; k *= 2 {
		// Without a conflict target every unique index of jobs arbitrates
		// (the idempotency key, the tenant's instance id, the job key).
		insertJobsSQL[k] = rowsSQL(`INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key, request_fingerprint,
		input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at, webhook_url,
		last_error_class, last_error_code, last_error_message, requires_action, trace_parent) VALUES `,
			`(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, ` ON CONFLICT DO NOTHING RETURNING id, tenant, operation, idempotency_key, instance_id`, k)
		insertCreatedSQL[k] = rowsSQL(`INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json) VALUES `,
			`(?,?,'`+pipeline.EventCreated+`','','`+string(pipeline.StatusPending)+`','',?)`, ``, k)
		insertMessagesSQL[k] = rowsSQL(`INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at) VALUES `,
			`(?,?,?,?)`, ` ON CONFLICT (job_id) DO UPDATE SET queue = excluded.queue, visible_at = min(visible_at, excluded.visible_at)`, k)
	}
}

// createJobsTx inserts new jobs — a commit group or a bulk submission —
// with one multi-row statement per table and chunk instead of three
// statements a job: the jobs, then the created events, then the queue
// messages (a job dead-lettered at submission gets its status event, dead
// letter and webhook one by one instead of a message; that is rare). A row
// not inserted, which met a unique index, is looked into afterwards in
// the order the checks always had (notInserted), so each job gets the
// answer it would get alone: rows are inserted in njs's order, so a job
// conflicts only with earlier ones, as if each were its own statement.
// readBack returns the stored rows (bulk inserts skip building them).
// A refusal (refusedAlone) is that job's; any other error fails them all.
func (s *Store) createJobsTx(ctx context.Context, tx *wtx, now int64, njs []pipeline.NewJob, readBack bool) ([]created, error) {
	out := make([]created, len(njs))
	statuses := make([]pipeline.Status, len(njs))
	inserted := make(map[rowKey]bool, len(njs))
	args := make([]any, 0, 19*min(len(njs), insertChunk))
	off := 0
	for _, k := range chunks(len(njs)) {
		args = args[:0]
		for i := off; i < off+k; i++ {
			nj := &njs[i]
			if len(nj.Input) == 0 {
				nj.Input = json.RawMessage("{}")
			}
			statuses[i] = pipeline.StatusPending
			if nj.DeadLetterReason != "" {
				statuses[i] = pipeline.StatusDeadLettered
			}
			args = append(args, nj.ID, nj.InstanceID, nj.Tenant, nj.Operation, nj.IdempotencyKey, nj.RequestFingerprint, string(nj.Input),
				nj.Version, nj.Queue, string(statuses[i]), now, now, now, nj.WebhookURL,
				pipeline.DeadLetterClass(nj.DeadLetterReason), nj.DeadLetterReason, pipeline.DeadLetterMessage(nj.DeadLetterReason), boolInt(nj.DeadLetterReason != ""),
				nullString(nj.TraceParent))
		}
		rows, err := tx.QueryContext(ctx, insertJobsSQL[k], args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var r rowKey
			if err := rows.Scan(&r.id, &r.tenant, &r.operation, &r.idempotencyKey, &r.instanceID); err != nil {
				rows.Close()
				return nil, err
			}
			inserted[r] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		off += k
	}
	// Which request a row is: the first in order with its job key and
	// idempotency key (a later one with the same met the unique indexes;
	// one with the same job key alone may be the one inserted, when an
	// earlier one met the idempotency index).
	var made, deadLettered []int
	madeAt := make(map[string]int, len(njs))
	for i := range njs {
		if r := keyOf(njs[i]); inserted[r] {
			delete(inserted, r)
			out[i].created = true
			made = append(made, i)
			madeAt[njs[i].ID] = i
			if njs[i].DeadLetterReason != "" {
				deadLettered = append(deadLettered, i)
			}
		}
	}
	for i := range njs {
		if out[i].created {
			continue
		}
		// A row a later request of the group inserted was not there when
		// this one's met a unique index: it is not the reason.
		later := func(id string) bool { j, ok := madeAt[id]; return ok && j > i }
		existing, err := s.notInserted(ctx, tx, njs[i], later)
		if err != nil && !refusedAlone(err) {
			return nil, err
		}
		out[i] = created{job: existing, err: err}
	}
	if err := insertCreated(ctx, tx, now, njs, made); err != nil {
		return nil, err
	}
	for _, i := range deadLettered {
		nj := njs[i]
		evID, err := appendEvent(ctx, tx, now, nj.ID, pipeline.EventStatus, pipeline.StatusPending, pipeline.StatusDeadLettered, "",
			map[string]any{"reason": nj.DeadLetterReason})
		if err != nil {
			return nil, err
		}
		if _, err := insertDeadLetter(ctx, tx, now, nj.ID, nj.DeadLetterQueue, nj.DeadLetterReason, nj.DeadLetterDetail); err != nil {
			return nil, err
		}
		if err := enqueueWebhook(ctx, tx, now, webhookJob{nj.ID, nj.InstanceID, nj.WebhookURL}, evID, pipeline.StatusDeadLettered); err != nil {
			return nil, err
		}
	}
	if err := insertMessages(ctx, tx, now, njs, made); err != nil {
		return nil, err
	}
	if !readBack {
		return out, nil
	}
	// The rows are exactly what was just inserted; build them instead of
	// reading them back (this runs inside the commit).
	t := fromMS(now)
	for _, i := range made {
		nj := njs[i]
		out[i].job = pipeline.Job{ID: nj.ID, InstanceID: nj.InstanceID, Tenant: nj.Tenant, Operation: nj.Operation, IdempotencyKey: nj.IdempotencyKey,
			RequestFingerprint: nj.RequestFingerprint, Input: nj.Input, Version: nj.Version, Queue: nj.Queue, Status: statuses[i],
			StatusChangedAt: t, CreatedAt: t, UpdatedAt: t, WebhookURL: nj.WebhookURL, TraceParent: nj.TraceParent,
			LastErrorClass: pipeline.ErrorClass(pipeline.DeadLetterClass(nj.DeadLetterReason)), LastErrorCode: nj.DeadLetterReason, LastErrorMessage: pipeline.DeadLetterMessage(nj.DeadLetterReason), RequiresAction: nj.DeadLetterReason != ""}
	}
	return out, nil
}

// rowKey tells the rows of one multi-row insert apart: no two inserted
// rows share a job id or an idempotency key.
type rowKey struct{ id, tenant, operation, idempotencyKey, instanceID string }

func keyOf(nj pipeline.NewJob) rowKey {
	return rowKey{nj.ID, nj.Tenant, nj.Operation, nj.IdempotencyKey, nj.InstanceID}
}

// insertCreated appends the created event of each job njs[i], i in idx,
// in chunks; the detail is appendEvent's for the same event.
func insertCreated(ctx context.Context, tx *wtx, now int64, njs []pipeline.NewJob, idx []int) error {
	return execChunks(ctx, tx, insertCreatedSQL, idx, 3, func(args []any, i int) []any {
		return append(args, njs[i].ID, now, createdDetail(njs[i]))
	})
}

// execChunks runs, for the rows idx in chunks (chunks), the statement
// sqls[k] of a chunk of k rows, with the perRow arguments add appends for
// each row.
func execChunks(ctx context.Context, tx *wtx, sqls map[int]string, idx []int, perRow int, add func(args []any, i int) []any) error {
	args := make([]any, 0, perRow*min(len(idx), insertChunk))
	off := 0
	for _, k := range chunks(len(idx)) {
		args = args[:0]
		for _, i := range idx[off : off+k] {
			args = add(args, i)
		}
		if _, err := tx.ExecContext(ctx, sqls[k], args...); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// createdDetail is the detail of a job's created event: its version and
// queue, as JSON with sorted keys.
func createdDetail(nj pipeline.NewJob) string {
	b, err := json.Marshal(struct {
		Queue   string `json:"queue"`
		Version string `json:"version"`
	}{nj.Queue, nj.Version})
	if err != nil { // two strings always marshal
		panic(err)
	}
	return string(b)
}

// insertMessages puts each job njs[i], i in idx, that has a queue (not
// dead-lettered) on it, visible now, in chunks, as enqueue does one by one.
func insertMessages(ctx context.Context, tx *wtx, now int64, njs []pipeline.NewJob, idx []int) error {
	queued := make([]int, 0, len(idx))
	for _, i := range idx {
		if njs[i].DeadLetterReason == "" {
			queued = append(queued, i)
		}
	}
	if err := execChunks(ctx, tx, insertMessagesSQL, queued, 4, func(args []any, i int) []any {
		return append(args, njs[i].Queue, njs[i].ID, now, now)
	}); err != nil {
		return err
	}
	for _, i := range queued {
		tx.madeVisible(njs[i].Queue)
	}
	return nil
}

// notInserted says why nj's row was not inserted (ON CONFLICT DO NOTHING):
// its idempotency key is stored — the same request (the stored job, a
// replay) or another one (ErrIdempotencyReused) —, the tenant's instance id
// is taken (ErrAlreadyExists), or its job key is held by another job
// (errJobKeyHeld).
// later reports whether a job id was inserted by a later request of the
// same multi-row insert: such a row did not exist at nj's turn, so it is
// no reason (each unique index has one holder, so the holder found is
// either the reason or a later row, and never hides an earlier one).
func (s *Store) notInserted(ctx context.Context, tx *wtx, nj pipeline.NewJob, later func(id string) bool) (pipeline.Job, error) {
	existing, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE tenant = ? AND operation = ? AND idempotency_key = ?`, nj.Tenant, nj.Operation, nj.IdempotencyKey))
	if err == nil && later(existing.ID) {
		err = pipeline.ErrNotFound
	}
	switch {
	case err == nil:
		if existing.RequestFingerprint != nj.RequestFingerprint {
			return pipeline.Job{}, fmt.Errorf("%w (job %s)", pipeline.ErrIdempotencyReused, existing.ID)
		}
		return existing, nil
	case !errors.Is(err, pipeline.ErrNotFound):
		return pipeline.Job{}, err
	}
	var taken string
	err = tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE tenant = ? AND instance_id = ?`, nj.Tenant, nj.InstanceID).Scan(&taken)
	if err = translate(err); err == nil && later(taken) {
		err = pipeline.ErrNotFound
	}
	switch {
	case err == nil:
		return pipeline.Job{}, fmt.Errorf("%w: instance id %s is taken", pipeline.ErrAlreadyExists, nj.InstanceID)
	case !errors.Is(err, pipeline.ErrNotFound):
		return pipeline.Job{}, err
	}
	err = tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE id = ?`, nj.ID).Scan(&taken)
	switch err = translate(err); {
	case err == nil:
		return pipeline.Job{}, fmt.Errorf("sqlite: job key %s: %w", nj.ID, errJobKeyHeld)
	case errors.Is(err, pipeline.ErrNotFound):
		// jobs has no other unique index: a row left out must have met one.
		return pipeline.Job{}, fmt.Errorf("sqlite: job %s was not inserted and no unique index holds it", nj.ID)
	}
	return pipeline.Job{}, err
}

// errJobKeyHeld: the job key (pipeline.JobKey) of a submission is held by
// another job — two tenants whose keys collide, or a caller that chose the
// key itself. It says nothing about the tenant's ids, so it is not
// ErrAlreadyExists (docs/design.md §3); it is a constraint error of that
// request alone, as in storage/postgres.
var errJobKeyHeld = fmt.Errorf("%w: job key held by another job", ErrConstraint)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// GetJob returns a job by id.
func (s *Store) GetJob(ctx context.Context, id string) (pipeline.Job, error) {
	return scanJob(s.read.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
}

// GetTenantJob returns tenant's job by its instance id (the unique index
// jobs_tenant_instance). Instance ids are unique per tenant, so another
// tenant's job with the same id is simply not this tenant's: the answer is
// exactly that of a missing one.
func (s *Store) GetTenantJob(ctx context.Context, tenant, instanceID string) (pipeline.Job, error) {
	return scanJob(s.read.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = ? AND instance_id = ?`, tenant, instanceID))
}

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
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, pipeline.Cursor{}, translate(err)
	}
	defer rows.Close()
	var jobs []pipeline.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, pipeline.Cursor{}, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, pipeline.Cursor{}, translate(err)
	}
	jobs, next := f.Page(jobs)
	return jobs, next, nil
}

// listJobsQuery is ListJobs' statement and its arguments for f (Limit
// already set). A page is read in the order of an index (migration 0011;
// TestListingsReadInIndexOrder): by the status index when one status is
// asked for across tenants, jobs_tenant_created for a tenant, jobs_created
// for the operators' listing. The jobs needing action are the exception:
// jobs_attention holds only them, and the page sorts them (few by nature).
func listJobsQuery(f pipeline.ListFilter) (string, []any, error) {
	q := `SELECT ` + jobColumns + ` FROM jobs WHERE 1=1`
	var args []any
	// For the jobs needing action, the unary + keeps the status and
	// created_at terms off their indexes: the planner would otherwise
	// range-scan jobs_created from a cursor down through every older job,
	// or read and sort every job of the statuses asked for, to fill a page
	// of the few in jobs_attention. A unary + also drops the column's
	// affinity, so the answers stay the same only while these parameters
	// are bound as they are: statuses as strings, times as int64
	// milliseconds (a time.Time or a text timestamp would compare
	// differently on this path alone).
	status, created := "status", "created_at"
	if f.RequiresAction {
		status, created = "+status", "+created_at"
	}
	if !f.AllTenants {
		if f.Tenant == "" {
			return "", nil, fmt.Errorf("%w: listing needs a tenant", pipeline.ErrInvalidInput)
		}
		q += ` AND tenant = ?`
		args = append(args, f.Tenant)
	}
	if len(f.Statuses) > 0 {
		q += ` AND ` + status + ` IN (` + placeholders(len(f.Statuses)) + `)` //nolint:gosec // G202: only a column name and "?" placeholders are concatenated
		for _, st := range f.Statuses {
			args = append(args, string(st))
		}
	}
	if f.RequiresAction {
		q += ` AND requires_action = 1`
	}
	if f.Version != "" {
		q += ` AND workflow_version = ?`
		args = append(args, f.Version)
	}
	if !f.CreatedBefore.IsZero() {
		q += ` AND ` + created + ` <= ?`
		args = append(args, ms(f.CreatedBefore))
	}
	if !f.CreatedAfter.IsZero() {
		q += ` AND ` + created + ` >= ?`
		args = append(args, ms(f.CreatedAfter))
	}
	// A tenant's listing pages by instance id (unique per tenant, and the
	// id the tenant knows); the operators' listing by internal key.
	idCol := "instance_id"
	if f.AllTenants {
		idCol = "id"
	}
	if f.After.ID != "" {
		// (created_at, id) < the cursor's, written so that created_at
		// bounds an index range: as "created_at < ? OR (created_at = ?
		// AND …)" the planner read both halves through the index and
		// sorted every job before the cursor.
		q += ` AND ` + created + ` <= ? AND (created_at < ? OR ` + idCol + ` < ?)`
		args = append(args, f.After.CreatedAtMS, f.After.CreatedAtMS, f.After.ID)
	}
	q += ` ORDER BY created_at DESC, ` + idCol + ` DESC LIMIT ?`
	args = append(args, f.Limit+1)
	return q, args, nil
}

// qCountByStatus reads only the jobs_status index (migration 0002; 0011
// widened it, and it still covers the count).
const qCountByStatus = `SELECT status, count(*) FROM jobs GROUP BY status`

// CountByStatus returns how many jobs are in each status (for /metrics).
func (s *Store) CountByStatus(ctx context.Context) (map[pipeline.Status]int, error) {
	rows, err := s.read.QueryContext(ctx, qCountByStatus)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[pipeline.Status]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, translate(err)
		}
		out[pipeline.Status(st)] = n
	}
	return out, translate(rows.Err())
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	b := make([]byte, 0, 2*n)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '?')
	}
	return string(b)
}

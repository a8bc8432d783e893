package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"edgepipe/internal/groupcommit"
	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// commitGroup is the group committer's commit (internal/groupcommit runs
// the loop): the group runs in one transaction and commits once, and a
// request's own refusal (idempotency mismatch, taken id) leaves the others
// untouched.
func (s *Store) commitGroup(batch []groupcommit.Request) {
	res := make([]groupcommit.Response, len(batch))
	err := s.inTx(context.Background(), func(tx *wtx) error {
		now := s.now()
		// The shared transaction must not run under one caller's ctx: a
		// canceled statement makes SQLite roll back the whole group.
		if !slices.ContainsFunc(batch, needsOneByOne) {
			return s.createQueuedGroup(context.Background(), tx, now, batch, res)
		}
		for i, r := range batch {
			if r.Ctx.Err() != nil {
				res[i].Err = r.Ctx.Err()
				continue
			}
			// No savepoint per request: the refusals a request can meet (a
			// reused key, a taken id, a job key held by another job) happen
			// before or at its first write, which SQLite undoes alone;
			// anything else fails the group, and every request in it gets
			// the error.
			job, created, err := s.createJobTx(context.Background(), tx, now, r.Job, true)
			if err != nil && !refusedAlone(err) {
				return err
			}
			res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
		}
		return nil
	})
	for i, r := range batch {
		if err != nil {
			res[i] = groupcommit.Response{Err: err}
		}
		r.Resp <- res[i]
	}
}

// refusedAlone says whether err is one request's refusal, which leaves
// the rest of its group to commit.
func refusedAlone(err error) bool {
	return errors.Is(err, pipeline.ErrIdempotencyReused) || errors.Is(err, pipeline.ErrAlreadyExists) || errors.Is(err, errJobKeyHeld)
}

// errJobKeyHeld: the job key (pipeline.JobKey) of a submission is held by
// another job — two tenants whose keys collide, or a caller that chose the
// key itself. It says nothing about the tenant's ids, so it is not
// ErrAlreadyExists (docs/design.md §3); it is a constraint error of that
// request alone, as in storage/postgres.
var errJobKeyHeld = fmt.Errorf("%w: job key held by another job", ErrConstraint)

// needsOneByOne says whether r's group goes one request at a time
// (createJobTx) rather than as one set (createQueuedGroup): a job that is
// dead-lettered at once (rare: an unbound version), or one with a text
// that is not valid UTF-8, which JSON — the set's encoding — cannot carry
// byte for byte.
func needsOneByOne(r groupcommit.Request) bool {
	nj := r.Job
	return nj.DeadLetterReason != "" || !utf8.Valid(nj.Input) || !allValidUTF8(nj.ID, nj.InstanceID, nj.Tenant,
		nj.Operation, nj.IdempotencyKey, nj.RequestFingerprint, nj.Version, nj.Queue, nj.WebhookURL, nj.TraceParent)
}

func allValidUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// The statements of createQueuedGroup: each takes the whole group as one
// JSON array (json_each), so a group of any size is the same five
// statements, prepared once (stmtCache), instead of five a submission.
// (Six: the group's job keys are read too.)
var (
	// qGroupKeys: the jobs that already hold one of the group's
	// idempotency keys ([tenant, operation, key] per request).
	qGroupKeys = `SELECT ` + sqlcols.Prefixed("jobs.", jobColumns) + ` FROM json_each(?1) AS k
		JOIN jobs ON jobs.tenant = k.value->>0 AND jobs.operation = k.value->>1 AND jobs.idempotency_key = k.value->>2`
	// qGroupInstances: the group's instance ids the tenants already hold
	// ([tenant, instance id] per request).
	qGroupInstances = `SELECT jobs.tenant, jobs.instance_id FROM json_each(?1) AS k
		JOIN jobs ON jobs.tenant = k.value->>0 AND jobs.instance_id = k.value->>1`
	// qGroupIDs: the group's job keys other jobs already hold.
	qGroupIDs = `SELECT jobs.id FROM json_each(?1) AS k JOIN jobs ON jobs.id = k.value`
	// qGroupInsertJobs inserts the new jobs, pending, in request order
	// (one array per job, as createQueuedGroup builds them; ORDER BY key
	// says so, though json_each already yields the array in order).
	qGroupInsertJobs = `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key, request_fingerprint,
		input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at, webhook_url,
		last_error_class, last_error_code, last_error_message, requires_action, trace_parent)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, value->>8,
			'pending', ?2, ?2, ?2, value->>9, '', '', '', 0, value->>10
		FROM json_each(?1) ORDER BY key`
	// qGroupInsertEvents appends their created events, in request order
	// ([job id, detail] per job), so event ids grow as the jobs were
	// submitted.
	qGroupInsertEvents = `INSERT INTO job_events (job_id, at, kind, from_status, to_status, attempt_id, detail_json)
		SELECT value->>0, ?2, 'created', '', 'pending', '', value->>1 FROM json_each(?1) ORDER BY key`
	// qGroupInsertMessages enqueues them, visible now ([queue, job id] per
	// job). A new job has no message yet, so there is nothing to merge
	// (enqueue's ON CONFLICT).
	qGroupInsertMessages = `INSERT INTO queue_messages (queue, job_id, enqueued_at, visible_at)
		SELECT value->>0, value->>1, ?2, ?2 FROM json_each(?1) ORDER BY key`
)

// createQueuedGroup is createJobTx for a group of queued submissions, with
// the same answers request by request, in order: a key already used —
// stored, or by an earlier request of the group — is a replay (that job,
// created false) or ErrIdempotencyReused; else an instance id the tenant
// holds (likewise) is ErrAlreadyExists; else the job is created, with its
// created event and its message. A request whose caller has gone is left
// out. Any other error fails the group.
func (s *Store) createQueuedGroup(ctx context.Context, tx *wtx, now int64, batch []groupcommit.Request, res []groupcommit.Response) error {
	type instance struct{ tenant, id string }
	keyArgs := make([][3]string, 0, len(batch))
	instArgs := make([][2]string, 0, len(batch))
	for _, r := range batch {
		keyArgs = append(keyArgs, [3]string{r.Job.Tenant, r.Job.Operation, r.Job.IdempotencyKey})
		instArgs = append(instArgs, [2]string{r.Job.Tenant, r.Job.InstanceID})
	}
	keysJSON, err := json.Marshal(keyArgs)
	if err != nil {
		return err
	}
	instsJSON, err := json.Marshal(instArgs)
	if err != nil {
		return err
	}
	byKey := map[[3]string]pipeline.Job{}
	rows, err := collect(ctx, tx, scanJob, qGroupKeys, string(keysJSON))
	if err != nil {
		return err
	}
	for _, j := range rows {
		byKey[[3]string{j.Tenant, j.Operation, j.IdempotencyKey}] = j
	}
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.Job.ID
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	heldIDs, err := collect(ctx, tx, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, qGroupIDs, string(idsJSON))
	if err != nil {
		return err
	}
	for _, id := range heldIDs {
		held[id] = true
	}
	taken := map[instance]bool{}
	insts, err := collect(ctx, tx, func(r rowScanner) (instance, error) {
		var in instance
		return in, r.Scan(&in.tenant, &in.id)
	}, qGroupInstances, string(instsJSON))
	if err != nil {
		return err
	}
	for _, in := range insts {
		taken[in] = true
	}
	var jobRows, eventRows, messageRows [][]any
	for i, r := range batch {
		if r.Ctx.Err() != nil {
			res[i].Err = r.Ctx.Err()
			continue
		}
		nj := r.Job
		if len(nj.Input) == 0 {
			nj.Input = json.RawMessage("{}")
		}
		if existing, ok := byKey[keyArgs[i]]; ok {
			if existing.RequestFingerprint != nj.RequestFingerprint {
				res[i].Err = fmt.Errorf("%w (job %s)", pipeline.ErrIdempotencyReused, existing.ID)
				continue
			}
			// A replay of an earlier request of the group gets its own
			// copy of the input, as one read back from the store would.
			existing.Input = slices.Clone(existing.Input)
			res[i].Job = existing
			continue
		}
		if taken[instance{nj.Tenant, nj.InstanceID}] {
			res[i].Err = fmt.Errorf("%w: instance id %s is taken", pipeline.ErrAlreadyExists, nj.InstanceID)
			continue
		}
		if held[nj.ID] {
			res[i].Err = fmt.Errorf("sqlite: job key %s: %w", nj.ID, errJobKeyHeld)
			continue
		}
		job := builtJob(nj, now)
		byKey[keyArgs[i]], taken[instance{nj.Tenant, nj.InstanceID}], held[nj.ID] = job, true, true
		res[i] = groupcommit.Response{Job: job, Created: true}
		var traceParent any
		if nj.TraceParent != "" {
			traceParent = nj.TraceParent
		}
		jobRows = append(jobRows, []any{nj.ID, nj.InstanceID, nj.Tenant, nj.Operation, nj.IdempotencyKey, nj.RequestFingerprint,
			string(nj.Input), nj.Version, nj.Queue, nj.WebhookURL, traceParent})
		detail, err := json.Marshal(map[string]any{"version": nj.Version, "queue": nj.Queue})
		if err != nil {
			return err
		}
		eventRows = append(eventRows, []any{nj.ID, string(detail)})
		messageRows = append(messageRows, []any{nj.Queue, nj.ID})
	}
	if len(jobRows) == 0 {
		return nil
	}
	for _, st := range []struct {
		q    string
		rows [][]any
	}{{qGroupInsertJobs, jobRows}, {qGroupInsertEvents, eventRows}, {qGroupInsertMessages, messageRows}} {
		arg, err := json.Marshal(st.rows)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, st.q, string(arg), now); err != nil {
			return err
		}
	}
	for _, m := range messageRows {
		tx.madeVisible(m[0].(string))
	}
	return nil
}

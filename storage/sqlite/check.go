package sqlite

import (
	"context"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// Read-only queries for the consistency checker (edgepipe check).

// BilledCallGroups returns every (job, scene, op, contract) with more than
// one possibly billed call.
func (s *Store) BilledCallGroups(ctx context.Context) ([]pipeline.BilledCallGroup, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT job_id, scene_index, operation, contract, count(*)
		FROM provider_calls WHERE status IN ('intent','succeeded','ambiguous')
		GROUP BY job_id, scene_index, operation, contract HAVING count(*) > 1 ORDER BY job_id, scene_index`)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []pipeline.BilledCallGroup
	for rows.Next() {
		var g pipeline.BilledCallGroup
		var contract string
		if err := rows.Scan(&g.JobID, &g.Scene, &g.Op, &contract, &g.Count); err != nil {
			return nil, translate(err)
		}
		g.Contract = pipeline.Contract(contract)
		out = append(out, g)
	}
	return out, translate(rows.Err())
}

// EachJob calls fn for every job in id order.
func (s *Store) EachJob(ctx context.Context, fn func(pipeline.Job) error) error {
	rows, err := s.read.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs ORDER BY id`)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return err
		}
		if err := fn(j); err != nil {
			return err
		}
	}
	return translate(rows.Err())
}

// EachAuditEvent calls fn for every event `edgepipe check` audits (created,
// status, redrive, and stage starts, which name the workflow that ran),
// ordered by job and then by event id, each with its job's instance id
// (which carries the version prefix the job must run on).
func (s *Store) EachAuditEvent(ctx context.Context, fn func(pipeline.AuditEvent) error) error {
	rows, err := s.read.QueryContext(ctx, `SELECT e.id, e.job_id, e.at, e.kind, e.from_status, e.to_status, e.attempt_id, e.detail_json,
		coalesce(j.instance_id, '')
		FROM job_events AS e LEFT JOIN jobs AS j ON j.id = e.job_id
		WHERE e.kind IN ('created','status','redriven','stage_started') ORDER BY e.job_id, e.id`)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var e pipeline.AuditEvent
		var at int64
		var from, to, detail string
		if err := rows.Scan(&e.ID, &e.JobID, &at, &e.Kind, &from, &to, &e.AttemptID, &detail, &e.InstanceID); err != nil {
			return translate(err)
		}
		e.At, e.FromStatus, e.ToStatus, e.Detail = fromMS(at), pipeline.Status(from), pipeline.Status(to), []byte(detail)
		if err := fn(e); err != nil {
			return err
		}
	}
	return translate(rows.Err())
}

// ExecForTest runs raw SQL on the writer. Only tests of other packages use
// it, to break the database on purpose.
func (s *Store) ExecForTest(ctx context.Context, q string) error {
	return s.inTx(ctx, func(tx *wtx) error {
		_, err := tx.tx.ExecContext(ctx, q)
		return err
	})
}

// WaivedCalls counts, per unit id ("job/scene") and operation, the calls an
// operator waived (chose to pay again after): the checker allows that many
// extra bills in a provider's ledger.
func (s *Store) WaivedCalls(ctx context.Context) (map[string]map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT job_id || '/' || scene_index, operation, count(*) FROM provider_calls
		WHERE status = 'waived' GROUP BY job_id, scene_index, operation`)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var unit, op string
		var n int
		if err := rows.Scan(&unit, &op, &n); err != nil {
			return nil, translate(err)
		}
		if out[unit] == nil {
			out[unit] = map[string]int{}
		}
		out[unit][op] = n
	}
	return out, translate(rows.Err())
}

// qUnkeptAnswers finds paid answers that are neither an asset nor staged:
// answered calls (a synchronous answer, or a downloaded video) of jobs that
// settled somewhere other than failed or canceled, whose staged copy has no
// asset row and whose scene's unit does not hold the artifact made from
// them. Jobs still in flight are left out: their answer may be on its way
// to the store.
var qUnkeptAnswers = `SELECT ` + sqlcols.Prefixed("c.", callColumns) + `
	FROM provider_calls c JOIN jobs j ON j.id = c.job_id
	WHERE c.status = 'succeeded'
	  AND j.status IN ('succeeded','needs_review','dead_lettered')
	  AND (c.operation IN ('image','speech') OR c.staged_key <> '')
	  AND NOT (c.staged_key <> '' AND EXISTS (SELECT 1 FROM assets a WHERE a.object_key = c.staged_key))
	  AND NOT EXISTS (SELECT 1 FROM units u WHERE u.job_id = c.job_id AND u.scene_index = c.scene_index
	        AND json_extract(u.result_json, '$.' || CASE c.operation WHEN 'video_submit' THEN 'video' ELSE c.operation END) IS NOT NULL)
	ORDER BY c.id`

// UnkeptAnswers returns the provider calls whose paid answer is kept
// nowhere durable (invariant 3's second half).
func (s *Store) UnkeptAnswers(ctx context.Context) ([]pipeline.ProviderCall, error) {
	return s.queryCalls(ctx, qUnkeptAnswers)
}

package postgres

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/jackc/pgx/v5"

	"edgepipe/internal/sqlcols"
	"edgepipe/pipeline"
)

// Read-only queries for the consistency checker (edgepipe check).

// BilledCallGroups returns every (job, scene, op, contract) with more than
// one possibly billed call.
func (s *Store) BilledCallGroups(ctx context.Context) ([]pipeline.BilledCallGroup, error) {
	var out []pipeline.BilledCallGroup
	err := eachRow(s.pool.Query(ctx, `SELECT job_id, scene_index, operation, contract, count(*)
		FROM provider_calls WHERE status IN ('intent','succeeded','ambiguous')
		GROUP BY job_id, scene_index, operation, contract HAVING count(*) > 1
		ORDER BY job_id COLLATE "C", scene_index, operation, contract`))(func(r pgx.Rows) error {
		var g pipeline.BilledCallGroup
		var contract string
		if err := r.Scan(&g.JobID, &g.Scene, &g.Op, &contract, &g.Count); err != nil {
			return err
		}
		g.Contract = pipeline.Contract(contract)
		out = append(out, g)
		return nil
	})
	return out, err
}

// EachJob calls fn for every job in id order. It reads in pages, so a slow
// fn holds no connection.
func (s *Store) EachJob(ctx context.Context, fn func(pipeline.Job) error) error {
	after := ""
	for {
		page, err := collectJobs(s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id COLLATE "C" > $1
			ORDER BY id COLLATE "C" LIMIT 500`, after))
		if err != nil {
			return err
		}
		for _, j := range page {
			if err := fn(j); err != nil {
				return err
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// EachAuditEvent calls fn for every event `edgepipe check` audits (created,
// status, redrive, and stage starts), ordered by job and then by event id,
// each with its job's instance id (which carries the version prefix the job
// must run on).
func (s *Store) EachAuditEvent(ctx context.Context, fn func(pipeline.AuditEvent) error) error {
	afterJob, afterID := "", int64(0)
	for {
		var page []pipeline.AuditEvent
		err := eachRow(s.pool.Query(ctx, `SELECT e.id, e.job_id, e.at, e.kind, e.from_status, e.to_status, e.attempt_id,
			e.detail_json::text, coalesce(j.instance_id, '')
			FROM job_events AS e LEFT JOIN jobs AS j ON j.id = e.job_id
			WHERE e.kind IN ('created','status','redriven','stage_started') AND (e.job_id COLLATE "C", e.id) > ($1, $2)
			ORDER BY e.job_id COLLATE "C", e.id LIMIT 1000`, afterJob, afterID))(func(r pgx.Rows) error {
			var e pipeline.AuditEvent
			var at int64
			var from, to, detail string
			if err := r.Scan(&e.ID, &e.JobID, &at, &e.Kind, &from, &to, &e.AttemptID, &detail, &e.InstanceID); err != nil {
				return translate(err)
			}
			e.At, e.FromStatus, e.ToStatus, e.Detail = fromMS(at), pipeline.Status(from), pipeline.Status(to), json.RawMessage(detail)
			page = append(page, e)
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(page) < 1000 {
			return nil
		}
		afterJob, afterID = page[len(page)-1].JobID, page[len(page)-1].ID
	}
}

// WaivedCalls counts, per unit id ("job/scene") and operation, the calls an
// operator waived.
func (s *Store) WaivedCalls(ctx context.Context) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	err := eachRow(s.pool.Query(ctx, `SELECT job_id, scene_index, operation, count(*) FROM provider_calls
		WHERE status = 'waived' GROUP BY job_id, scene_index, operation`))(func(r pgx.Rows) error {
		var job, op string
		var scene, n int
		if err := r.Scan(&job, &scene, &op, &n); err != nil {
			return err
		}
		unit := job + "/" + strconv.Itoa(scene)
		if out[unit] == nil {
			out[unit] = map[string]int{}
		}
		out[unit][op] = n
		return nil
	})
	return out, err
}

// qUnkeptAnswers is storage/sqlite's: paid answers that are neither an
// asset nor staged, of jobs settled anywhere but failed or canceled.
var qUnkeptAnswers = `SELECT ` + sqlcols.Prefixed("c.", callColumns) + `
	FROM provider_calls c JOIN jobs j ON j.id = c.job_id
	WHERE c.status = 'succeeded'
	  AND j.status IN ('succeeded','needs_review','dead_lettered')
	  AND (c.operation IN ('image','speech') OR c.staged_key <> '')
	  AND NOT (c.staged_key <> '' AND EXISTS (SELECT 1 FROM assets a WHERE a.object_key = c.staged_key))
	  AND NOT EXISTS (SELECT 1 FROM units u WHERE u.job_id = c.job_id AND u.scene_index = c.scene_index
	        AND (u.result_json ->> CASE c.operation WHEN 'video_submit' THEN 'video' ELSE c.operation END) IS NOT NULL)
	ORDER BY c.id`

// UnkeptAnswers returns the provider calls whose paid answer is kept
// nowhere durable (invariant 3's second half).
func (s *Store) UnkeptAnswers(ctx context.Context) ([]pipeline.ProviderCall, error) {
	return s.queryCalls(ctx, qUnkeptAnswers)
}

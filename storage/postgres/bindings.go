package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// AnnounceBindings records (or refreshes) which workflow versions process
// p.ProcessID binds, with a heartbeat of now.
func (s *Store) AnnounceBindings(ctx context.Context, p *pipeline.AnnounceBindingsParams) error {
	if p == nil || p.ProcessID == "" || p.Role == "" {
		return fmt.Errorf("%w: announce bindings needs a process id and a role", pipeline.ErrInvalidInput)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO process_bindings (process_id, role, versions, started_at, heartbeat_at)
		VALUES ($1, $2, $3, $4, $4) ON CONFLICT (process_id) DO UPDATE SET role = excluded.role,
		versions = excluded.versions, heartbeat_at = excluded.heartbeat_at`, p.ProcessID, p.Role, strings.Join(p.Versions, ","), s.now())
	return translate(err)
}

// WithdrawBindings removes a stopping process's bindings.
func (s *Store) WithdrawBindings(ctx context.Context, processID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM process_bindings WHERE process_id = $1`, processID)
	return translate(err)
}

// LiveBindings returns the versions bound by processes whose heartbeat is
// newer than p.Since, sorted, each once.
func (s *Store) LiveBindings(ctx context.Context, p *pipeline.LiveBindingsParams) ([]string, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: live bindings needs a cut-off", pipeline.ErrInvalidInput)
	}
	var out []string
	err := eachRow(s.pool.Query(ctx, `SELECT versions FROM process_bindings WHERE heartbeat_at > $1`, ms(p.Since)))(func(r pgx.Rows) error {
		var vs string
		if err := r.Scan(&vs); err != nil {
			return err
		}
		for _, v := range strings.Split(vs, ",") {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// DeadLetterUnserved moves jobs that wait for a version no live process
// binds to the dead-letter queue (unbound_version); see storage/sqlite's.
// Jobs another transaction holds are skipped this round (SKIP LOCKED).
func (s *Store) DeadLetterUnserved(ctx context.Context, p *pipeline.DeadLetterUnservedParams) (int, error) {
	if p == nil || len(p.Live) == 0 || p.IdleSince.IsZero() {
		return 0, fmt.Errorf("%w: dead-lettering unserved jobs needs the live bindings and a cut-off", pipeline.ErrInvalidInput)
	}
	n := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		n = 0
		now := s.now()
		type victim struct{ id, status, queue, version string }
		var vs []victim
		if err := eachRow(tx.Query(ctx, `SELECT id, status, queue, workflow_version FROM jobs
			WHERE workflow_version <> ALL($1::text[]) AND updated_at < $2
			  AND (status IN ('pending','retry_wait') OR (status = 'running' AND lease_expires_at <= $3))
			ORDER BY id FOR UPDATE SKIP LOCKED`, p.Live, ms(p.IdleSince), now))(func(r pgx.Rows) error {
			var v victim
			if err := r.Scan(&v.id, &v.status, &v.queue, &v.version); err != nil {
				return err
			}
			vs = append(vs, v)
			return nil
		}); err != nil {
			return err
		}
		for _, v := range vs {
			detail := pipeline.UnboundVersionDetail(v.version, p.Live)
			if _, err := insertDeadLetter(ctx, tx, now, v.id, v.queue, pipeline.ReasonUnboundVersion, detail); err != nil {
				return err
			}
			if err := settle(ctx, tx, now, v.id, pipeline.Status(v.status), "", pipeline.UnboundVersionOutcome(), nil); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

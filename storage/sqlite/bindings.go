package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"edgepipe/pipeline"
)

// AnnounceBindings records (or refreshes) which workflow versions process
// p.ProcessID binds, with a heartbeat of now.
func (s *Store) AnnounceBindings(ctx context.Context, p *pipeline.AnnounceBindingsParams) error {
	if p == nil || p.ProcessID == "" || p.Role == "" {
		return fmt.Errorf("%w: announce bindings needs a process id and a role", pipeline.ErrInvalidInput)
	}
	versions := strings.Join(p.Versions, ",")
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		_, err := tx.ExecContext(ctx, `INSERT INTO process_bindings (process_id, role, versions, started_at, heartbeat_at)
			VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (process_id) DO UPDATE SET role = excluded.role,
			versions = excluded.versions, heartbeat_at = excluded.heartbeat_at`, p.ProcessID, p.Role, versions, now)
		return err
	})
}

// WithdrawBindings removes a stopping process's bindings.
func (s *Store) WithdrawBindings(ctx context.Context, processID string) error {
	return s.inTx(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM process_bindings WHERE process_id = ?`, processID)
		return err
	})
}

// LiveBindings returns the versions bound by processes whose heartbeat is
// newer than p.Since, sorted, each once.
func (s *Store) LiveBindings(ctx context.Context, p *pipeline.LiveBindingsParams) ([]string, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: live bindings needs a cut-off", pipeline.ErrInvalidInput)
	}
	rows, err := s.read.QueryContext(ctx, `SELECT versions FROM process_bindings WHERE heartbeat_at > ?`, ms(p.Since))
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var vs string
		if err := rows.Scan(&vs); err != nil {
			return nil, translate(err)
		}
		for _, v := range strings.Split(vs, ",") {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	slices.Sort(out)
	return out, nil
}

// DeadLetterUnserved moves jobs that wait for a version no live process
// binds to the dead-letter queue (unbound_version), instead of leaving them
// waiting for a worker that may never come: jobs pending, in retry_wait, or
// running on an expired lease, whose version is not in p.Live and that
// have not changed since p.IdleSince. p.Live must be the deployment's live
// bindings (never empty: an empty set would condemn every job). An
// operator can redrive them once the version is bound. Returns how many it
// moved.
func (s *Store) DeadLetterUnserved(ctx context.Context, p *pipeline.DeadLetterUnservedParams) (int, error) {
	if p == nil || len(p.Live) == 0 || p.IdleSince.IsZero() {
		return 0, fmt.Errorf("%w: dead-lettering unserved jobs needs the live bindings and a cut-off", pipeline.ErrInvalidInput)
	}
	live, err := json.Marshal(p.Live)
	if err != nil {
		return 0, err
	}
	n := 0
	err = s.inTx(ctx, func(tx *wtx) error {
		n = 0
		now := s.now()
		rows, err := tx.QueryContext(ctx, `SELECT id, status, queue, workflow_version FROM jobs
			WHERE workflow_version NOT IN (SELECT value FROM json_each(?1)) AND updated_at < ?2
			  AND (status IN ('pending','retry_wait') OR (status = 'running' AND lease_expires_at <= ?3))`,
			string(live), ms(p.IdleSince), now)
		if err != nil {
			return err
		}
		type victim struct{ id, status, queue, version string }
		var vs []victim
		for rows.Next() {
			var v victim
			if err := rows.Scan(&v.id, &v.status, &v.queue, &v.version); err != nil {
				rows.Close()
				return err
			}
			vs = append(vs, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
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

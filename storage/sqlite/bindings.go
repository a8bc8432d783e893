package sqlite

import (
	"context"
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

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"edgepipe/pipeline"
)

// Proofs of idempotency (pipeline.ProofStore): one row per probe, never
// changed, in provider_proofs. The latest of a (provider, op, model,
// endpoint) is the one recorded last, the greatest id: proved_at is the
// probing host's own date, and a host whose clock is behind (or a year
// ahead) must not keep an older verdict in force.

const proofColumns = `id, provider, op, model, endpoint, verdict, calls, detail, proved_at`

// RecordProof implements pipeline.ProofStore.
func (s *Store) RecordProof(ctx context.Context, p *pipeline.RecordProofParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	pr := p.Proof
	var id int64
	err := s.inTx(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO provider_proofs (provider, op, model, endpoint, verdict, calls, detail, proved_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, pr.Provider, pr.Op, pr.Model, pr.Endpoint, string(pr.Verdict), pr.Calls, pr.Detail, ms(pr.ProvedAt))
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, translate(err)
	}
	return id, nil
}

// LatestProof implements pipeline.ProofStore.
func (s *Store) LatestProof(ctx context.Context, p *pipeline.LatestProofParams) (pipeline.Proof, error) {
	if err := p.Validate(); err != nil {
		return pipeline.Proof{}, err
	}
	pr, err := scanProof(s.read.QueryRowContext(ctx, `SELECT `+proofColumns+` FROM provider_proofs
		WHERE provider = ? AND op = ? AND model = ? AND endpoint = ? ORDER BY id DESC LIMIT 1`, p.Provider, p.Op, p.Model, p.Endpoint))
	if errors.Is(err, sql.ErrNoRows) {
		return pipeline.Proof{}, fmt.Errorf("%w: no proof of %s %s %s at %s", pipeline.ErrNotFound, p.Provider, p.Op, p.Model, p.Endpoint)
	}
	return pr, translate(err)
}

// ListProofs implements pipeline.ProofStore.
func (s *Store) ListProofs(ctx context.Context, p *pipeline.ListProofsParams) ([]pipeline.Proof, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT `+proofColumns+` FROM (
			SELECT `+proofColumns+`, row_number() OVER (PARTITION BY provider, op, model, endpoint ORDER BY id DESC) AS rn
			FROM provider_proofs)
		WHERE rn = 1 ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := []pipeline.Proof{}
	for rows.Next() {
		pr, err := scanProof(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, pr)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return out, nil
}

func scanProof(r interface{ Scan(...any) error }) (pipeline.Proof, error) {
	var pr pipeline.Proof
	var verdict string
	var at int64
	if err := r.Scan(&pr.ID, &pr.Provider, &pr.Op, &pr.Model, &pr.Endpoint, &verdict, &pr.Calls, &pr.Detail, &at); err != nil {
		return pipeline.Proof{}, err
	}
	pr.Verdict, pr.ProvedAt = pipeline.ProofVerdict(verdict), fromMS(at)
	return pr, nil
}

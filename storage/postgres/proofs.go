package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// Proofs of idempotency (pipeline.ProofStore): one row per probe, never
// changed, in provider_proofs; see storage/sqlite's for why the latest is
// the greatest id.

const proofColumns = `id, provider, op, model, endpoint, verdict, calls, detail, proved_at`

// RecordProof implements pipeline.ProofStore.
func (s *Store) RecordProof(ctx context.Context, p *pipeline.RecordProofParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	pr := p.Proof
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO provider_proofs (provider, op, model, endpoint, verdict, calls, detail, proved_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		pr.Provider, pr.Op, pr.Model, pr.Endpoint, string(pr.Verdict), pr.Calls, pr.Detail, ms(pr.ProvedAt)).Scan(&id)
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
	pr, err := scanProof(s.pool.QueryRow(ctx, `SELECT `+proofColumns+` FROM provider_proofs
		WHERE provider = $1 AND op = $2 AND model = $3 AND endpoint = $4 ORDER BY id DESC LIMIT 1`, p.Provider, p.Op, p.Model, p.Endpoint))
	if errors.Is(err, pgx.ErrNoRows) {
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
	out := []pipeline.Proof{}
	err = eachRow(s.pool.Query(ctx, `SELECT `+proofColumns+` FROM (
			SELECT DISTINCT ON (provider, op, model, endpoint) `+proofColumns+` FROM provider_proofs
			ORDER BY provider, op, model, endpoint, id DESC) latest
		ORDER BY id DESC LIMIT $1`, limit))(func(r pgx.Rows) error {
		pr, err := scanProof(r)
		if err != nil {
			return err
		}
		out = append(out, pr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func scanProof(r pgx.Row) (pipeline.Proof, error) {
	var pr pipeline.Proof
	var verdict string
	var at int64
	if err := r.Scan(&pr.ID, &pr.Provider, &pr.Op, &pr.Model, &pr.Endpoint, &verdict, &pr.Calls, &pr.Detail, &at); err != nil {
		return pipeline.Proof{}, err
	}
	pr.Verdict, pr.ProvedAt = pipeline.ProofVerdict(verdict), fromMS(at)
	return pr, nil
}

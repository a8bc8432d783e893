package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// Rate limits shared by every process on every machine (docs/design.md
// §6): pipeline.TakeRate and pipeline.PauseRate decide, rateTx persists,
// all in one transaction holding the bucket's row lock (INSERT … ON
// CONFLICT DO NOTHING, then SELECT … FOR UPDATE), so concurrent takers of
// one bucket serialise and never hand out more than it holds.

// TakeRateToken implements pipeline.RateLimitStore.
func (s *Store) TakeRateToken(ctx context.Context, p *pipeline.TakeRateTokenParams) (pipeline.RateGrant, error) {
	if err := p.Validate(); err != nil {
		return pipeline.RateGrant{}, err
	}
	var g pipeline.RateGrant
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		g, err = pipeline.TakeRate(ctx, rateTx{tx}, p, fromMS(s.now()))
		return err
	})
	return g, err
}

// ReleaseRateSlot implements pipeline.RateLimitStore.
func (s *Store) ReleaseRateSlot(ctx context.Context, p *pipeline.ReleaseRateSlotParams) error {
	if p == nil {
		return nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM rate_slots WHERE id = $1`, p.SlotID)
	return translate(err)
}

// PauseRateBucket implements pipeline.RateLimitStore.
func (s *Store) PauseRateBucket(ctx context.Context, p *pipeline.PauseRateBucketParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		return pipeline.PauseRate(ctx, rateTx{tx}, p, fromMS(s.now()))
	})
}

// rateTx is pipeline.RateBucketTx on a transaction.
type rateTx struct{ tx pgx.Tx }

func (r rateTx) LockBucket(ctx context.Context, l pipeline.RateLimit, fresh pipeline.RateBucket) (pipeline.RateBucket, error) {
	if _, err := r.tx.Exec(ctx, `INSERT INTO rate_buckets (provider, op, micro_tokens, refilled_at, paused_until)
		VALUES ($1, $2, $3, $4, 0) ON CONFLICT (provider, op) DO NOTHING`, l.Provider, l.Op, fresh.MicroTokens, ms(fresh.RefilledAt)); err != nil {
		return pipeline.RateBucket{}, err
	}
	var tokens, refilled, paused int64
	err := r.tx.QueryRow(ctx, `SELECT micro_tokens, refilled_at, paused_until FROM rate_buckets WHERE provider = $1 AND op = $2 FOR UPDATE`,
		l.Provider, l.Op).Scan(&tokens, &refilled, &paused)
	return pipeline.RateBucket{MicroTokens: tokens, RefilledAt: fromMS(refilled), PausedUntil: fromMS(paused)}, err
}

func (r rateTx) SaveBucket(ctx context.Context, l pipeline.RateLimit, b pipeline.RateBucket) error {
	_, err := r.tx.Exec(ctx, `UPDATE rate_buckets SET micro_tokens = $1, refilled_at = $2, paused_until = $3 WHERE provider = $4 AND op = $5`,
		b.MicroTokens, ms(b.RefilledAt), ms(b.PausedUntil), l.Provider, l.Op)
	return err
}

func (r rateTx) LiveSlots(ctx context.Context, l pipeline.RateLimit, now time.Time) (pipeline.RateSlots, error) {
	if _, err := r.tx.Exec(ctx, `DELETE FROM rate_slots WHERE provider = $1 AND op = $2 AND expires_at <= $3`, l.Provider, l.Op, ms(now)); err != nil {
		return pipeline.RateSlots{}, err
	}
	var n int
	var next *int64
	err := r.tx.QueryRow(ctx, `SELECT count(*), min(expires_at) FROM rate_slots WHERE provider = $1 AND op = $2`, l.Provider, l.Op).Scan(&n, &next)
	return pipeline.RateSlots{Active: n, NextExpiry: timeOf(next)}, err
}

func (r rateTx) AddSlot(ctx context.Context, l pipeline.RateLimit, holder string, now, expires time.Time) (int64, error) {
	var id int64
	err := r.tx.QueryRow(ctx, `INSERT INTO rate_slots (provider, op, holder, acquired_at, expires_at) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		l.Provider, l.Op, holder, ms(now), ms(expires)).Scan(&id)
	return id, err
}

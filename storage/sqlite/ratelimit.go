package sqlite

import (
	"context"
	"database/sql"
	"time"

	"edgepipe/pipeline"
)

// Rate limits shared by every process on the database (docs/design.md §6):
// pipeline.TakeRate and pipeline.PauseRate decide, rateTx persists, all in
// one write transaction (BEGIN IMMEDIATE: the one writer holds the bucket).

// TakeRateToken implements pipeline.RateLimitStore.
func (s *Store) TakeRateToken(ctx context.Context, p *pipeline.TakeRateTokenParams) (pipeline.RateGrant, error) {
	if err := p.Validate(); err != nil {
		return pipeline.RateGrant{}, err
	}
	var g pipeline.RateGrant
	err := s.inTx(ctx, func(tx *wtx) error {
		var err error
		g, err = pipeline.TakeRate(ctx, rateTx{tx}, p, fromMS(s.now()))
		return err
	})
	return g, translate(err)
}

// ReleaseRateSlot implements pipeline.RateLimitStore.
func (s *Store) ReleaseRateSlot(ctx context.Context, p *pipeline.ReleaseRateSlotParams) error {
	if p == nil {
		return nil
	}
	return s.inTx(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM rate_slots WHERE id = ?`, p.SlotID)
		return err
	})
}

// PauseRateBucket implements pipeline.RateLimitStore.
func (s *Store) PauseRateBucket(ctx context.Context, p *pipeline.PauseRateBucketParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return translate(s.inTx(ctx, func(tx *wtx) error {
		return pipeline.PauseRate(ctx, rateTx{tx}, p, fromMS(s.now()))
	}))
}

// rateTx is pipeline.RateBucketTx on a write transaction.
type rateTx struct{ tx *wtx }

func (r rateTx) LockBucket(ctx context.Context, l pipeline.RateLimit, fresh pipeline.RateBucket) (pipeline.RateBucket, error) {
	if _, err := r.tx.ExecContext(ctx, `INSERT INTO rate_buckets (provider, op, micro_tokens, refilled_at, paused_until)
		VALUES (?, ?, ?, ?, 0) ON CONFLICT (provider, op) DO NOTHING`, l.Provider, l.Op, fresh.MicroTokens, ms(fresh.RefilledAt)); err != nil {
		return pipeline.RateBucket{}, err
	}
	var tokens, refilled, paused int64
	err := r.tx.QueryRowContext(ctx, `SELECT micro_tokens, refilled_at, paused_until FROM rate_buckets WHERE provider = ? AND op = ?`,
		l.Provider, l.Op).Scan(&tokens, &refilled, &paused)
	return pipeline.RateBucket{MicroTokens: tokens, RefilledAt: fromMS(refilled), PausedUntil: fromMS(paused)}, err
}

func (r rateTx) SaveBucket(ctx context.Context, l pipeline.RateLimit, b pipeline.RateBucket) error {
	_, err := r.tx.ExecContext(ctx, `UPDATE rate_buckets SET micro_tokens = ?, refilled_at = ?, paused_until = ? WHERE provider = ? AND op = ?`,
		b.MicroTokens, ms(b.RefilledAt), ms(b.PausedUntil), l.Provider, l.Op)
	return err
}

func (r rateTx) LiveSlots(ctx context.Context, l pipeline.RateLimit, now time.Time) (pipeline.RateSlots, error) {
	if _, err := r.tx.ExecContext(ctx, `DELETE FROM rate_slots WHERE provider = ? AND op = ? AND expires_at <= ?`, l.Provider, l.Op, ms(now)); err != nil {
		return pipeline.RateSlots{}, err
	}
	var n int
	var next sql.NullInt64
	err := r.tx.QueryRowContext(ctx, `SELECT count(*), min(expires_at) FROM rate_slots WHERE provider = ? AND op = ?`, l.Provider, l.Op).Scan(&n, &next)
	return pipeline.RateSlots{Active: n, NextExpiry: timeOf(next)}, err
}

func (r rateTx) AddSlot(ctx context.Context, l pipeline.RateLimit, holder string, now, expires time.Time) (int64, error) {
	res, err := r.tx.ExecContext(ctx, `INSERT INTO rate_slots (provider, op, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		l.Provider, l.Op, holder, ms(now), ms(expires))
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

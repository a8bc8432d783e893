package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueStats reports, for every queue holding messages, how many it holds,
// how many are ready and how long the oldest ready one has waited (0 when
// none is ready), measured against the store's clock.
func (s *Store) QueueStats(ctx context.Context, fn func(queue string, messages, ready int, oldestReadyAge time.Duration)) error {
	now := s.now()
	return eachRow(s.pool.Query(ctx, `SELECT queue, count(*), count(*) FILTER (WHERE visible_at <= $1),
		min(visible_at) FILTER (WHERE visible_at <= $1) FROM queue_messages GROUP BY queue`, now))(func(r pgx.Rows) error {
		var (
			queue           string
			messages, ready int
			oldest          *int64
		)
		if err := r.Scan(&queue, &messages, &ready, &oldest); err != nil {
			return err
		}
		var age time.Duration
		if oldest != nil && *oldest < now {
			age = time.Duration(now-*oldest) * time.Millisecond
		}
		fn(queue, messages, ready, age)
		return nil
	})
}

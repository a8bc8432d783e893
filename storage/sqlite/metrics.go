package sqlite

import (
	"context"
	"time"
)

// qQueueStats reads the queue_messages_ready index (queue, visible_at, id):
// per queue, every message, those visible now, and the earliest time one of
// those became visible.
const qQueueStats = `SELECT queue, count(*), coalesce(sum(visible_at <= ?1), 0),
	min(CASE WHEN visible_at <= ?1 THEN visible_at END)
	FROM queue_messages GROUP BY queue`

// QueueStats reports, for every queue holding messages, how many it holds,
// how many are ready (visible now) and how long the oldest ready one has
// waited for a worker (0 when none is ready). For /metrics, read at scrape
// time; the age is measured against the store's clock, the one that set
// visible_at.
func (s *Store) QueueStats(ctx context.Context, fn func(queue string, messages, ready int, oldestReadyAge time.Duration)) error {
	now := s.now()
	rows, err := s.read.QueryContext(ctx, qQueueStats, now)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			queue           string
			messages, ready int
			oldest          *int64
		)
		if err := rows.Scan(&queue, &messages, &ready, &oldest); err != nil {
			return translate(err)
		}
		var age time.Duration
		if oldest != nil && *oldest < now {
			age = time.Duration(now-*oldest) * time.Millisecond
		}
		fn(queue, messages, ready, age)
	}
	return translate(rows.Err())
}

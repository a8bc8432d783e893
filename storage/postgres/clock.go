package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dbClock is the store's default clock: this machine's clock corrected by
// its measured offset from the database server's. Every lease, backoff and
// visibility time is a store time, and processes on several machines must
// agree on them: with each process's own clock, one running a few seconds
// ahead would take over live leases early (fencing keeps that safe, but it
// wastes work). The offset is measured when the store opens and again in
// the background at most every resync (one SELECT, half its round trip
// taken as the transit time); a failed measurement keeps the last offset.
// Now never waits for the database: it may be called inside a transaction.
type dbClock struct {
	pool   *pgxpool.Pool
	resync time.Duration
	offset atomic.Int64 // nanoseconds to add to the local clock
	mu     sync.Mutex
	last   time.Time // local time of the last measurement started
}

func newDBClock(ctx context.Context, pool *pgxpool.Pool, resync time.Duration) *dbClock {
	c := &dbClock{pool: pool, resync: resync, last: time.Now()}
	c.measure(ctx)
	return c
}

// Now is the database server's time, as well as this process knows it.
func (c *dbClock) Now() time.Time {
	now := time.Now()
	c.mu.Lock()
	due := now.Sub(c.last) >= c.resync
	if due {
		c.last = now
	}
	c.mu.Unlock()
	if due {
		go c.measure(context.Background())
	}
	return now.Add(time.Duration(c.offset.Load()))
}

func (c *dbClock) measure(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	var server time.Time
	if err := c.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		return
	}
	end := time.Now()
	mid := start.Add(end.Sub(start) / 2)
	c.offset.Store(int64(server.Sub(mid)))
}

package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"edgepipe/internal/burndown"
	"edgepipe/internal/cmalloc"
	"edgepipe/pipeline"
)

// BenchmarkBurnDown has the shape of River's burn-down benchmark: insert N
// no-op jobs, then a producer fetches (claims) them in batches, a pool of
// workers runs them, and a batching completer marks them succeeded, until the
// queue is empty. Every job is durably recorded (WAL, synchronous=NORMAL):
// status change, event and ack commit together.
//
//	go test ./storage/sqlite -run '^$' -bench BurnDown -benchtime 20000x
func BenchmarkBurnDown(b *testing.B) {
	// The C allocator as the edgepipe program sets it (internal/cmalloc);
	// make bench tunes both sides alike.
	cmalloc.Tune(os.Getenv("GLIBC_TUNABLES"), os.Getenv("MALLOC_TRIM_THRESHOLD_"))
	for _, workers := range []int{100} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { burnDown(b, workers) })
	}
}

func burnDown(b *testing.B, workers int) {
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n := b.N

	insertStart := time.Now()
	const insertBatch = 1000
	batch := make([]pipeline.NewJob, 0, insertBatch)
	for i := range n {
		id := fmt.Sprintf("v1-%09d", i)
		batch = append(batch, pipeline.NewJob{ID: id, Tenant: "bench", Operation: "noop", IdempotencyKey: id,
			RequestFingerprint: id, Version: "v1", Queue: "render-v1"})
		if len(batch) == insertBatch || i == n-1 {
			if err := s.CreateJobs(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	insertDur := time.Since(insertStart)

	b.ResetTimer()
	start := time.Now()
	done := burn(ctx, b, s, workers, n)
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("completed %d of %d", done, n)
	}
	var left int
	if err := s.read.QueryRow(`SELECT count(*) FROM jobs WHERE status <> 'succeeded'`).Scan(&left); err != nil || left != 0 {
		b.Fatalf("%d jobs not succeeded (%v)", left, err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(n)/insertDur.Seconds(), "inserts/s")
}

// burn runs the burn-down loop on s until n jobs completed.
func burn(ctx context.Context, b *testing.B, s *Store, workers, n int) int {
	return burndown.Run(ctx, b, n, workers,
		func(ctx context.Context, max int) ([]pipeline.Claimed, error) {
			cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "bench", Max: max, LeaseFor: time.Minute})
			return cs, err
		},
		func(c pipeline.Claimed) Finished {
			return Finished{Lease: c.Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}}
		},
		func(ctx context.Context, batch []Finished) int {
			errs, err := s.FinishMany(ctx, batch)
			if err != nil {
				b.Error(err)
			}
			done := 0
			for _, e := range errs {
				if e != nil {
					b.Error(e)
				} else {
					done++
				}
			}
			return done
		})
}

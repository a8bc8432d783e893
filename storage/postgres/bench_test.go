//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/internal/burndown"
	"edgepipe/pipeline"
)

// BenchmarkBurnDown is storage/sqlite's BenchmarkBurnDown on Postgres (the
// shape of River's burn-down): insert N no-op jobs, then a producer claims
// them in batches, workers run them, and a batching completer
// (FinishMany) marks them succeeded until the queue is empty.
//
//	eval "$(scripts/postgres.sh start)"
//	go test -tags postgres ./storage/postgres -run '^$' -bench BurnDown -benchtime 20000x
func BenchmarkBurnDown(b *testing.B) {
	ctx := context.Background()
	url := newDatabase(b)
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n := b.N
	insertStart := time.Now()
	batch := make([]pipeline.NewJob, 0, 1000)
	for i := range n {
		id := fmt.Sprintf("v1-%09d", i)
		batch = append(batch, pipeline.NewJob{ID: id, Tenant: "bench", Operation: "noop", IdempotencyKey: id,
			RequestFingerprint: id, Version: "v1", Queue: "render-v1"})
		if len(batch) == cap(batch) || i == n-1 {
			if err := s.CreateJobs(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	insertDur := time.Since(insertStart)
	b.ResetTimer()
	start := time.Now()
	done := burn(ctx, b, s, 100, n)
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("completed %d of %d", done, n)
	}
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status <> 'succeeded'`).Scan(&left); err != nil || left != 0 {
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

// BenchmarkSubmit measures durable submissions: 64 concurrent CreateJob
// calls, each returning only once its job, event and message committed.
// Group commit sends a group's inserts as one pipelined batch.
func BenchmarkSubmit(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: newDatabase(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var next atomic.Int64
	b.SetParallelism(32) // 32 × GOMAXPROCS submitters
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("v1-s%09d", next.Add(1))
			if _, _, err := s.CreateJob(ctx, pipeline.NewJob{ID: id, Tenant: "bench", Operation: "noop", IdempotencyKey: id,
				RequestFingerprint: id, Version: "v1", Queue: "render-v1"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
}

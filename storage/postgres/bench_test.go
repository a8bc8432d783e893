//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func burn(ctx context.Context, b *testing.B, s *Store, workers, n int) int {
	const fetchBatch, completeBatch = 200, 500
	work := make(chan pipeline.Claimed, 2*fetchBatch)
	completions := make(chan Finished, 2*fetchBatch)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				completions <- Finished{Lease: c.Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}}
			}
		}()
	}
	completed := make(chan int)
	go func() {
		total := 0
		pending := make([]Finished, 0, completeBatch)
		flush := func() {
			if len(pending) == 0 {
				return
			}
			errs, err := s.FinishMany(ctx, pending)
			if err != nil {
				b.Error(err)
			}
			for _, e := range errs {
				if e != nil {
					b.Error(e)
				} else {
					total++
				}
			}
			pending = pending[:0]
		}
		for f := range completions {
			pending = append(pending, f)
		drain:
			for len(pending) < completeBatch {
				select {
				case f, ok := <-completions:
					if !ok {
						break drain
					}
					pending = append(pending, f)
				default:
					break drain
				}
			}
			flush()
		}
		flush()
		completed <- total
	}()
	for fetched := 0; fetched < n; {
		cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "bench", Max: fetchBatch, LeaseFor: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(cs) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		fetched += len(cs)
		for _, c := range cs {
			work <- c
		}
	}
	close(work)
	wg.Wait()
	close(completions)
	return <-completed
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

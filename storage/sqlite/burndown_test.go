package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// burn runs the producer → workers → completer loop until n jobs completed.
func burn(ctx context.Context, b *testing.B, s *Store, workers, n int) int {
	const fetchBatch = 200
	const completeBatch = 500
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
	go func() { // batching completer
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
	fetched := 0
	for fetched < n {
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

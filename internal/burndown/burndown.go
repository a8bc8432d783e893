// Package burndown is the loop of edgepipe's queue burn-down benchmarks
// (storage/sqlite, storage/postgres, bench/sqliteceiling), in the shape of
// River's own burn-down (`river bench`): one producer claims jobs in
// batches, a pool of workers runs each (a no-op), and one batching
// completer settles them. One loop, so the benchmarks that are compared
// side by side differ only in the queue under them.
package burndown

import (
	"context"
	"sync"
	"testing"
	"time"
)

// FetchBatch is how many jobs the producer claims at a time, and
// CompleteBatch how many outcomes the completer settles at once at most.
const (
	FetchBatch    = 200
	CompleteBatch = 500
)

// Run claims with fetch until n jobs were claimed (waiting a millisecond
// when it gets none), has workers goroutines turn each claim into an
// outcome with run, and settles the outcomes with complete, which is given
// what is pending, up to CompleteBatch, and says how many it settled. It
// returns the total settled. A fetch error fails tb at once; complete
// reports its own errors on tb.
func Run[C, F any](ctx context.Context, tb testing.TB, n, workers int,
	fetch func(ctx context.Context, max int) ([]C, error),
	run func(C) F,
	complete func(ctx context.Context, batch []F) int,
) int {
	work := make(chan C, 2*FetchBatch)
	completions := make(chan F, 2*FetchBatch)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range work {
				completions <- run(c)
			}
		})
	}
	completed := make(chan int)
	go func() { // the batching completer
		total := 0
		pending := make([]F, 0, CompleteBatch)
		flush := func() {
			if len(pending) > 0 {
				total += complete(ctx, pending)
				pending = pending[:0]
			}
		}
		for f := range completions {
			pending = append(pending, f)
		drain:
			for len(pending) < CompleteBatch {
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
		cs, err := fetch(ctx, FetchBatch)
		if err != nil {
			tb.Fatal(err)
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

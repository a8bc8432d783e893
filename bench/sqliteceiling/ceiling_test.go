package sqliteceiling

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"edgepipe/internal/burndown"
	"edgepipe/internal/cmalloc"
)

// BenchmarkCeiling has the shape of storage/sqlite's BenchmarkBurnDown:
// insert N jobs, then a producer claims them 200 at a time, 100 workers
// "run" them, and a completer marks them done in batches of up to 500,
// until every job is done.
//
//	go test ./bench/sqliteceiling -run '^$' -bench Ceiling -benchtime 20000x
func BenchmarkCeiling(b *testing.B) {
	// The C allocator as the edgepipe program sets it (internal/cmalloc);
	// make bench tunes both sides alike.
	cmalloc.Tune(os.Getenv("GLIBC_TUNABLES"), os.Getenv("MALLOC_TRIM_THRESHOLD_"))
	ctx := context.Background()
	q, err := Open(ctx, filepath.Join(b.TempDir(), "ceiling.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	n := b.N
	if err := q.Insert(ctx, n, time.Now().UnixMilli()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	done := burn(ctx, b, q, 100, n)
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("completed %d of %d", done, n)
	}
	if left, err := q.Left(ctx); err != nil || left != 0 {
		b.Fatalf("%d jobs not done (%v)", left, err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
}

// burn runs the burn-down loop on q until n jobs are done.
func burn(ctx context.Context, b *testing.B, q *Queue, workers, n int) int {
	const owner = "bench"
	return burndown.Run(ctx, b, n, workers,
		func(ctx context.Context, max int) ([]Lease, error) {
			now := time.Now().UnixMilli()
			return q.Claim(ctx, owner, max, now, now+time.Minute.Milliseconds())
		},
		func(l Lease) Lease { return l },
		func(ctx context.Context, batch []Lease) int {
			k, err := q.Done(ctx, owner, batch, time.Now().UnixMilli())
			if err != nil {
				b.Error(err)
			}
			return k
		})
}

// A completion whose lease is no longer the job's (another attempt took
// it) must change nothing: the fence is part of what the ceiling costs.
func TestDoneIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Insert(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Claim(ctx, "w", 3, 1, 2)
	if err != nil || len(ls) != 3 {
		t.Fatalf("claim: %v %v", ls, err)
	}
	stale := ls[1]
	stale.Attempt++
	for _, c := range []struct {
		name  string
		owner string
		ls    []Lease
		want  int
	}{
		{"wrong attempt", "w", []Lease{stale}, 0},
		{"wrong owner", "x", ls[:1], 0},
		{"own leases", "w", ls, 3},
		{"already done", "w", ls, 0},
	} {
		got, err := q.Done(ctx, c.owner, c.ls, 3)
		if err != nil || got != c.want {
			t.Errorf("%s: done %d (%v), want %d", c.name, got, err, c.want)
		}
	}
	if left, err := q.Left(ctx); err != nil || left != 0 {
		t.Fatalf("%d left (%v)", left, err)
	}
}

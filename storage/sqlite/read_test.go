package sqlite

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkReads measures the read pool's hot statements, the ones an API
// answers and an event stream polls with: a job by its tenant's id, and
// its events after a cursor. Each statement text is prepared once per read
// connection (readStmtCache); without the cache every call re-parses it.
//
//	go test ./storage/sqlite -run '^$' -bench Reads
func BenchmarkReads(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, "", nil)
	const jobs = 100
	for i := range jobs {
		mustCreate(b, s, newJob(fmt.Sprintf("v1-r%03d", i)))
	}
	b.Run("GetTenantJob", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.GetTenantJob(ctx, "acme", fmt.Sprintf("v1-r%03d", i%jobs)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Events", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.Events(ctx, fmt.Sprintf("v1-r%03d", i%jobs), 0, 100); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// The read pool keeps its statements prepared (readStmtCache): a read the
// API repeats does not parse its statement again. Observed through Go
// allocations, which are deterministic where time is not: re-preparing a
// job read allocates the statement and every column's name and type anew
// (167 allocations a call against 53 with the cache, go-sqlite3 v1.14.53).
// Not parallel: testing.AllocsPerRun counts the whole program's
// allocations.
func TestReadPoolReusesStatements(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", nil)
	mustCreate(t, s, newJob("v1-r1"))
	read := func() {
		if _, err := s.GetTenantJob(ctx, "acme", "v1-r1"); err != nil {
			t.Fatal(err)
		}
	}
	read() // prepares it on the connection the pool hands out next
	if n := testing.AllocsPerRun(50, read); n > 100 {
		t.Errorf("a repeated job read allocates %.0f times: its statement is prepared on every call", n)
	}
}

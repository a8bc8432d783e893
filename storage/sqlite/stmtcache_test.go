package sqlite

import (
	"testing"
	"time"

	"edgepipe/pipeline"
)

// cacheState returns how many statement texts were asked for, how many are
// prepared on the pool, and how many wait to be.
func cacheState(s *Store) (seen, prepared, pending int) {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	return len(s.stmts.seen), len(s.stmts.stmts), len(s.stmts.pending)
}

// Every write statement is prepared on the pool once, after the first
// transaction that used it, and reused by later ones (the burn-down
// throughput depends on it).
func TestStatementsPreparedOnceAndReused(t *testing.T) {
	t.Parallel()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-s1"))
	// The pool prepares right after the transaction; allow it a moment.
	deadline := time.Now().Add(5 * time.Second)
	var seen, prepared, pending int
	for {
		seen, prepared, pending = cacheState(s)
		if (prepared == seen && pending == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if seen == 0 || prepared != seen || pending != 0 {
		t.Fatalf("after the first create: %d statements seen, %d prepared, %d pending; want all prepared", seen, prepared, pending)
	}
	before := map[string]any{}
	s.stmts.mu.Lock()
	for q, st := range s.stmts.stmts {
		before[q] = st
	}
	s.stmts.mu.Unlock()

	mustCreate(t, s, newJob("v1-s2"))
	seen2, prepared2, pending2 := cacheState(s)
	if seen2 != seen || prepared2 != prepared || pending2 != 0 {
		t.Fatalf("the same write again: %d seen, %d prepared, %d pending; want %d, %d, 0", seen2, prepared2, pending2, seen, prepared)
	}
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	for q, st := range s.stmts.stmts {
		if before[q] != any(st) {
			t.Errorf("statement re-prepared: %.60s", q)
		}
	}
}

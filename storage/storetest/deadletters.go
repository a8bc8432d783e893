package storetest

import (
	"context"
	"testing"

	"edgepipe/pipeline"
)

// The page size is clamped to 1..500, 100 when out of range; a caller's
// limit inside the range is honoured exactly.
func testListDeadLettersLimit(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	deadLettered(t, s, 3)
	tests := []struct {
		limit, want int
	}{
		{-1, 3}, {0, 3}, {1, 1}, {2, 2}, {3, 3}, {500, 3}, {501, 3},
	}
	for _, tt := range tests {
		dls, err := s.ListDeadLetters(ctx, false, 0, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != tt.want {
			t.Errorf("ListDeadLetters(limit=%d) returned %d, want %d", tt.limit, len(dls), tt.want)
		}
	}
	// Newest first, and afterID continues below the last one seen.
	first, err := s.ListDeadLetters(ctx, false, 0, 2)
	if err != nil || len(first) != 2 || first[0].ID <= first[1].ID {
		t.Fatalf("first page %+v, %v", first, err)
	}
	rest, err := s.ListDeadLetters(ctx, false, first[1].ID, 2)
	if err != nil || len(rest) != 1 || rest[0].ID >= first[1].ID {
		t.Fatalf("second page %+v, %v", rest, err)
	}
}

// A limit above 500 is not honoured: the page falls back to 100 rows.
func testListDeadLettersLimitCeiling(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	deadLettered(t, s, 101)
	for _, tt := range []struct{ limit, want int }{{500, 101}, {501, 100}, {0, 100}, {101, 101}} {
		dls, err := s.ListDeadLetters(ctx, false, 0, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != tt.want {
			t.Errorf("ListDeadLetters(limit=%d) returned %d, want %d", tt.limit, len(dls), tt.want)
		}
	}
}

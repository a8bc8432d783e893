package sqlite

// Tests written from surviving mutants of `make mutation` (gremlins): each
// pins a behaviour that a mutated comparison changed without any other test
// noticing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// deadLettered creates n jobs stored directly as dead letters, ids v2-dl000….
func deadLettered(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		nj := newJob(fmt.Sprintf("v2-dl%03d", i))
		nj.Version, nj.Queue = "v2", ""
		nj.DeadLetterReason, nj.DeadLetterQueue, nj.DeadLetterDetail = pipeline.ReasonUnboundVersion, "render-v2", "v2 is not bound"
		mustCreate(t, s, nj)
	}
}

// The page size is clamped to 1..500, 100 when out of range; a caller's
// limit inside the range is honoured exactly.
func TestListDeadLettersLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
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
func TestListDeadLettersLimitCeiling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
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

// If the dead-letter row cannot be written, the whole submission is rolled
// back: no job exists without its dead letter.
func TestDeadLetterInsertFailureRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	if err := s.ExecForTest(ctx, `CREATE TRIGGER refuse_dead_letters BEFORE INSERT ON dead_letters
		BEGIN SELECT RAISE(ABORT, 'dead letters refused'); END`); err != nil {
		t.Fatal(err)
	}
	nj := newJob("v2-refused")
	nj.Version, nj.Queue = "v2", ""
	nj.DeadLetterReason, nj.DeadLetterQueue = pipeline.ReasonUnboundVersion, "render-v2"
	if _, _, err := s.CreateJob(ctx, nj); err == nil {
		t.Fatal("CreateJob succeeded although its dead letter could not be written")
	}
	if _, err := s.GetJob(ctx, "v2-refused"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("GetJob after the failed submission: %v, want ErrNotFound", err)
	}
}

// An event's detail is stored as given; no detail is stored as {}.
func TestAppendEventDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-ev"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.AppendEvent(ctx, c.Lease, pipeline.EventUnitGenerated, map[string]any{"scene": 2, "name": "image"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, c.Lease, pipeline.EventStageStarted, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "v1-ev", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs {
		if e.AttemptID == c.Lease.AttemptID && e.FromStatus == "" {
			got[e.Kind] = string(e.Detail)
		}
	}
	var detail map[string]any
	if err := json.Unmarshal([]byte(got[pipeline.EventUnitGenerated]), &detail); err != nil {
		t.Fatalf("unit_generated detail %q: %v", got[pipeline.EventUnitGenerated], err)
	}
	if detail["scene"] != float64(2) || detail["name"] != "image" {
		t.Errorf("unit_generated detail = %v, want scene 2, name image", detail)
	}
	if got[pipeline.EventStageStarted] != "{}" {
		t.Errorf("stage_started detail = %q, want {}", got[pipeline.EventStageStarted])
	}
}

var _ = time.Second

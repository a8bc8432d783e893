package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"edgepipe/pipeline"
)

// FreezeInput stores the first input it is given and returns it, then keeps
// returning that one: a retry can never see another storyboard.
func testFreezeInputOnce(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-f"))
	c := fetchOne(t, s, "render-v1", "w")
	first := json.RawMessage(`{"title":"first","scenes":3}`)
	got, err := s.FreezeInput(ctx, c.Lease, first, 3)
	if err != nil || string(got) != string(first) {
		t.Fatalf("first FreezeInput = %s, %v; want %s", got, err, first)
	}
	got, err = s.FreezeInput(ctx, c.Lease, json.RawMessage(`{"title":"second"}`), 9)
	if err != nil || string(got) != string(first) {
		t.Fatalf("second FreezeInput = %s, %v; want the first input %s", got, err, first)
	}
	j, err := s.GetJob(ctx, "v1-f")
	if err != nil {
		t.Fatal(err)
	}
	if string(j.FrozenInput) != string(first) || j.UnitsTotal != 3 {
		t.Fatalf("job frozen input %s, units total %d; want %s, 3", j.FrozenInput, j.UnitsTotal, first)
	}
}

// StageFinished records the stage and units done on the job, with an event
// carrying both.
func testStageFinishedRecorded(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-st"))
	c := fetchOne(t, s, "render-v1", "w1")
	if err := s.StageFinished(ctx, c.Lease, pipeline.StageExecute, 2, map[string]any{"reused": 1}); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, "v1-st")
	if err != nil {
		t.Fatal(err)
	}
	if j.Stage != pipeline.StageExecute || j.UnitsDone != 2 {
		t.Fatalf("job stage %q units done %d, want execute, 2", j.Stage, j.UnitsDone)
	}
	evs, err := s.Events(ctx, "v1-st", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var detail map[string]any
	for _, e := range evs {
		if e.Kind == pipeline.EventStageFinished {
			if err := json.Unmarshal(e.Detail, &detail); err != nil {
				t.Fatal(err)
			}
		}
	}
	if detail["stage"] != pipeline.StageExecute || detail["units_done"] != float64(2) || detail["reused"] != float64(1) {
		t.Fatalf("stage_finished detail %v", detail)
	}
}

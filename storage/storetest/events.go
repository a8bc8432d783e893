package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"edgepipe/pipeline"
)

// An event's detail is stored as given; no detail is stored as {}.
func testAppendEventDetail(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
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

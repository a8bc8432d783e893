package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func TestFinishManyIsolatesFencedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := pipeline.NewManualClock(t0)
	s := openTest(t, "", clock)
	mustCreate(t, s, newJob("v1-a"))
	mustCreate(t, s, newJob("v1-b"))
	cs, _, _ := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 2, LeaseFor: time.Minute})
	if len(cs) != 2 {
		t.Fatal(len(cs))
	}
	stale := cs[1].Lease
	stale.AttemptID = "att_bogus"
	errs, err := s.FinishMany(ctx, []Finished{
		{Lease: cs[0].Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}},
		{Lease: stale, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}},
	})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], pipeline.ErrLeaseLost) {
		t.Fatalf("errs %v err %v", errs, err)
	}
	if statusOf(t, s, "v1-a") != pipeline.StatusSucceeded || statusOf(t, s, "v1-b") != pipeline.StatusRunning {
		t.Fatal("batch results not independent")
	}
}

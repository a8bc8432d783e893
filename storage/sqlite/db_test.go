package sqlite

import (
	"context"
	"errors"
	"testing"

	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed (the committer's own lifecycle is tested in
// internal/groupcommit).
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-before"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.group.Started() {
		t.Fatal("Close returned with the group committer's service running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
}

package sqlite

import (
	"context"
	"errors"
	"testing"

	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed.
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, "", pipeline.NewManualClock(t0))
	mustCreate(t, s, newJob("v1-before")) // starts the committer
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.group.done:
	default:
		t.Fatal("Close returned with the group committer still running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
}

//go:build postgres

package postgres

import (
	"context"
	"errors"
	"testing"

	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed (as storage/sqlite's TestCloseStopsGroupCommitter;
// the committer's own lifecycle is tested in internal/groupcommit).
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), pipeline.NewManualClock(t0))
	if !s.group.Started() {
		t.Fatal("Open returned with the group committer not running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-before")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.group.Started() {
		t.Fatal("Close returned with the group committer's service running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

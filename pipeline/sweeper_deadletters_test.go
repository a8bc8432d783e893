package pipeline_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/storage/fs"
)

// Each sweep deletes dead letters settled longer than the retention ago
// (default 30 days); open ones stay, a dry run and a negative retention
// delete nothing.
func TestSweeperPurgesSettledDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clock := pipeline.NewManualClock(time.Now())
	st := openStore(t, filepath.Join(dir, "db"), clock)
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "o")})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"v2-a", "v2-b", "v2-c"} {
		if _, _, err := st.CreateJob(ctx, pipeline.NewJob{ID: id, Tenant: "t", Operation: "o", IdempotencyKey: id, RequestFingerprint: "f",
			Version: "v2", DeadLetterReason: pipeline.ReasonUnboundVersion, DeadLetterQueue: "render-v2"}); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := st.ListDeadLetters(ctx, false, 0, 0)
	if err != nil || len(dls) != 3 {
		t.Fatalf("%+v %v", dls, err)
	}
	if _, err := st.DiscardDeadLetter(ctx, &pipeline.DiscardDeadLetterParams{DeadLetterID: dls[0].ID, Operator: "op", Reason: "not wanted"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Redrive(ctx, &pipeline.RedriveParams{DeadLetterID: dls[1].ID, Queue: "render-v2", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	sweep := func(dry bool, retention time.Duration) int {
		t.Helper()
		sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: st, Objects: objs, Clock: clock, DryRun: dry,
			DeadLetters: st, DeadLetterRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sw.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.DeadLettersPurged
	}
	clock.Advance(29 * 24 * time.Hour)
	if n := sweep(false, 0); n != 0 {
		t.Fatalf("purged %d within the default retention", n)
	}
	clock.Advance(2 * 24 * time.Hour)
	if n := sweep(true, 0); n != 0 {
		t.Fatalf("dry run purged %d", n)
	}
	if n := sweep(false, -1); n != 0 {
		t.Fatalf("negative retention purged %d", n)
	}
	if n := sweep(false, 0); n != 2 {
		t.Fatalf("purged %d, want the 2 settled ones", n)
	}
	if all, _ := st.ListDeadLetters(ctx, true, 0, 0); len(all) != 1 || all[0].ID != dls[2].ID {
		t.Fatalf("left %+v, want only the open one", all)
	}
}

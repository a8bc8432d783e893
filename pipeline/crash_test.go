package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"edgepipe/check"
	"edgepipe/pipeline"
	"edgepipe/provider/fake"
)

// Crash points of the object write protocol (issue: after claim, mid-upload,
// after upload before asset row, after asset row before job update). Each
// attempt dies at the point, the next attempt finishes the job, and after
// the sweeper runs the database and the object store agree: no asset row
// without its identical object, no object without an asset row or live
// claim, nothing billed twice.
func TestCrashPointsLeaveNothingDangling(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		point string
		nth   int // which time the point is reached: 1 = scene 0's image, 2 = its speech
	}{
		{"after_claim_object", 1}, {"after_claim_object", 2}, {"mid_upload", 1},
		{"after_upload_before_asset", 1}, {"after_upload_before_asset", 2}, {"after_upload_before_asset", 5},
		{"after_asset_before_unit", 2}, {"after_asset_before_status", 1}, {"before_finish", 1},
	} {
		point := c.point
		t.Run(fmt.Sprintf("%s#%d", c.point, c.nth), func(t *testing.T) {
			t.Parallel()
			// One unit at a time, so the whole attempt freezes at the point
			// like a killed process (no sibling keeps working behind it).
			h := newHarness(t, func(ec *pipeline.EngineConfig, _ *fake.Config) { ec.UnitConcurrency = 1 })
			ctx := context.Background()
			h.submit("v1-crash", board(img("a", "one", 700), img("b", "two", 700)))
			h.crashAt("render-v1", point, c.nth)
			h.clock.Advance(2 * time.Minute)
			h.drain(10)
			if j := h.job("v1-crash"); j.Status != pipeline.StatusSucceeded {
				t.Fatalf("after the crash at %s the job ended %s (%s)", point, j.Status, j.LastErrorCode)
			}
			if b := h.fake.Ledger().Billed; b.Speech != 2 {
				t.Fatalf("speech billed %d times for 2 scenes", b.Speech)
			}
			// Orphans of the crashed attempt are older than the grace period
			// once the clock moves past it.
			h.clock.Advance(2 * time.Hour)
			sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: h.store, Objects: h.objs, Grace: time.Hour, Clock: h.clock})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := sw.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := check.Run(ctx, check.Config{Store: h.store, Objects: h.objs, Clock: h.clock, RequireSettled: true,
				LedgerURL: h.fake.BaseURL() + "/ledger"})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Clean() {
				t.Fatalf("after sweeping %+v: violations %+v", rep, r.Violations)
			}
			if r.Assets == 0 || r.Objects != r.Assets {
				t.Fatalf("assets %d objects %d", r.Assets, r.Objects)
			}
		})
	}
}

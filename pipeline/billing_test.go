package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"edgepipe/pipeline"
)

// The billing invariant (docs/design.md §9.3): with the fake providers injecting
// every fault kind, 50 jobs of 3–6 scenes run to the end with retries, and
// for every (job, scene) the ledger shows at most one billed call to a
// non-idempotent provider and exactly one video submit per finished async
// unit. A sync call that failed after the provider committed it sends the
// job to needs_review instead of being retried.
func TestBillingInvariantUnderFaults(t *testing.T) {
	t.Parallel()
	jobs := 50
	if testing.Short() {
		jobs = 12
	}
	spec := "*:before_commit=0.06,*:after_commit=0.06,*:drop=0.06,*:rate_limit=0.06,*:latency=3ms@0.2,video:async_fail=0.08"
	h := newHarness(t, withFaults(spec, 42))
	rng := rand.New(rand.NewPCG(1, 2))
	type unitRef struct {
		job   string
		scene int
		video bool
		voice bool
	}
	var refs []unitRef
	for j := range jobs {
		id := fmt.Sprintf("v%d-bill%02d", 1+j%2, j)
		n := 3 + rng.IntN(4)
		var scenes []pipeline.Scene
		for s := range n {
			narr := ""
			if rng.IntN(4) != 0 {
				narr = fmt.Sprintf("narration %d of job %d", s, j)
			}
			video := haveFFmpeg() && rng.IntN(5) == 0
			if video {
				scenes = append(scenes, vid(fmt.Sprintf("motion %d/%d", j, s), narr, 600))
			} else {
				scenes = append(scenes, img(fmt.Sprintf("still %d/%d", j, s), narr, 600))
			}
			refs = append(refs, unitRef{job: id, scene: s, video: video, voice: narr != ""})
		}
		h.submit(id, board(scenes...))
	}
	attempts := h.drain(jobs * 20)

	ctx := context.Background()
	led := h.fake.Ledger()
	statuses := map[pipeline.Status]int{}
	for j := range jobs {
		id := fmt.Sprintf("v%d-bill%02d", 1+j%2, j)
		st := h.job(id).Status
		statuses[st]++
		if !st.Settled() {
			t.Errorf("job %s ended %s", id, st)
		}
	}
	var speechBilled, videoBilled, imageBilled int64
	for _, r := range refs {
		unit := fmt.Sprintf("%s/%d", r.job, r.scene)
		c := led.ByUnit[unit]
		speechBilled += c.Speech
		videoBilled += c.Video
		imageBilled += c.Image
		if c.Speech > 1 {
			cs, _ := h.store.ProviderCalls(ctx, r.job, r.scene, pipeline.OpSpeech)
			t.Errorf("%s: speech (sync) billed %d times; audit %+v", unit, c.Speech, cs)
		}
		if c.Video > 1 {
			t.Errorf("%s: video submitted %d times", unit, c.Video)
		}
		if c.Image > 1 {
			t.Errorf("%s: image billed %d times despite its idempotency key", unit, c.Image)
		}
		job := h.job(r.job)
		if job.Status == pipeline.StatusSucceeded {
			if r.video && c.Video != 1 {
				t.Errorf("%s: succeeded job's video unit has %d submits, want exactly 1", unit, c.Video)
			}
			if r.voice && c.Speech != 1 {
				t.Errorf("%s: succeeded job's speech billed %d times, want 1", unit, c.Speech)
			}
		}
		// A sync call that may have been billed and left no result must
		// have stopped the job for a human, never been retried.
		calls, err := h.store.ProviderCalls(ctx, r.job, r.scene, pipeline.OpSpeech)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range calls {
			if call.Status == pipeline.CallAmbiguous && job.Status != pipeline.StatusNeedsReview && job.Status != pipeline.StatusCanceled {
				t.Errorf("%s: speech call ended ambiguous but the job is %s", unit, job.Status)
			}
		}
		billedRows := 0
		for _, call := range calls {
			if call.MayHaveBilled() {
				billedRows++
			}
		}
		if billedRows > 1 {
			t.Errorf("%s: audit trail shows %d possibly billed speech calls", unit, billedRows)
		}
	}
	t.Logf("jobs=%d units=%d attempts=%d statuses=%v billed: image=%d speech=%d video=%d (ledger totals %+v, injected %v)",
		jobs, len(refs), attempts, statuses, imageBilled, speechBilled, videoBilled, led.Billed, led.Injected)
	if statuses[pipeline.StatusSucceeded] == 0 || statuses[pipeline.StatusNeedsReview] == 0 {
		t.Errorf("the fault mix should produce both successes and reviews: %v", statuses)
	}
}

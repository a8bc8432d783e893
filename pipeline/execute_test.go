package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// concurrencyProbe counts image calls in flight. Each call waits (up to
// 300 ms) for one more call than the limit to join it, so a loose limit is
// seen for certain and a correct one costs 300 ms per round.
type concurrencyProbe struct {
	limit         int32
	inFlight, max atomic.Int32
}

func (p *concurrencyProbe) before(ctx context.Context, op, _ string) error {
	if op != pipeline.OpImage {
		return nil
	}
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			break
		}
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for p.inFlight.Load() <= p.limit && time.Now().Before(deadline) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// UnitConcurrency bounds the scenes generated at once; zero means 4.
func TestEngineUnitConcurrency(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		configured int
		limit      int32
	}{
		{"configured 2", 2, 2},
		{"default", 0, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probe := &concurrencyProbe{limit: tt.limit}
			h := newHarness(t,
				withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = tt.configured }),
				withProviders(func(pipeline.Providers) pipeline.Providers { return &hookProviders{before: probe.before} }))
			var scenes []pipeline.Scene
			for i := range 8 {
				scenes = append(scenes, img(strings.Repeat("x", i+1), "", 600))
			}
			h.submit("v1-conc", board(scenes...))
			if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusSucceeded {
				t.Fatalf("attempt: %+v, %v", o, err)
			}
			if got := probe.max.Load(); got > tt.limit || got < 2 {
				t.Fatalf("%d image calls ran at once, want between 2 and %d", got, tt.limit)
			}
		})
	}
}

// Every generated unit leaves a unit_generated event, and every artifact
// found already stored (by an equal scene of another job, or as an object
// a crashed attempt uploaded) leaves a unit_reused event naming it: the
// history explains why nothing was paid for.
func TestEngineUnitEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	sb := board(img("a harbour", "the harbour at dawn", 700), img("a boat", "", 700))
	h.submit("v1-first", sb)
	h.drain(5)
	if n := len(unitEvents(t, h, "v1-first", pipeline.EventUnitGenerated)); n != 2 {
		t.Fatalf("first job: %d unit_generated events, want 2", n)
	}
	if n := len(unitEvents(t, h, "v1-first", pipeline.EventUnitReused)); n != 0 {
		t.Fatalf("first job: %d unit_reused events, want 0", n)
	}
	billed := h.fake.Ledger().Billed

	// The same scenes again: all three artifacts are found by key.
	h.submit("v1-second", sb)
	h.drain(5)
	if st := h.job("v1-second").Status; st != pipeline.StatusSucceeded {
		t.Fatalf("second job ended %s", st)
	}
	if after := h.fake.Ledger().Billed; after != billed {
		t.Fatalf("the second job paid again: %+v then %+v", billed, after)
	}
	reused := map[string]int{}
	for _, d := range unitEvents(t, h, "v1-second", pipeline.EventUnitReused) {
		reused[fmt.Sprint(d["scene"], "/", d["artifact"])]++
	}
	if want := map[string]int{"0/image": 1, "0/speech": 1, "1/image": 1}; fmt.Sprint(reused) != fmt.Sprint(want) {
		t.Fatalf("second job reused %v, want %v", reused, want)
	}
	if n := len(unitEvents(t, h, "v1-second", pipeline.EventUnitGenerated)); n != 2 {
		t.Fatalf("second job: %d unit_generated events, want 2", n)
	}

	// An attempt dies after uploading its image but before the asset row
	// (the second upload: the first stages the provider's answer): the next
	// attempt adopts the object and says so.
	h.submit("v1-adopt", board(img("a lighthouse at night", "", 700)))
	h.crashAt("render-v1", "after_upload_before_asset", 2)
	h.clock.Advance(2 * time.Minute)
	h.drain(5)
	var adopted int
	for _, d := range unitEvents(t, h, "v1-adopt", pipeline.EventUnitReused) {
		if d["adopted"] == true && d["artifact"] == pipeline.ArtifactImage {
			adopted++
		}
	}
	if adopted != 1 {
		t.Fatalf("adopting job: %d adopted unit_reused events, want 1", adopted)
	}
}

// stallProviders submits videos that never finish, moving the manual clock
// by step on every status poll.
type stallProviders struct {
	pipeline.Providers
	clock atomic.Pointer[pipeline.ManualClock]
	step  time.Duration
	polls atomic.Int32
	fail  bool // every status poll fails
}

func (p *stallProviders) setInner(in pipeline.Providers) { p.Providers = in }

func (p *stallProviders) SubmitVideo(context.Context, pipeline.CallMeta, pipeline.VideoRequest) (string, error) {
	return "stalled-video", nil
}

func (p *stallProviders) VideoStatus(context.Context, string) (pipeline.VideoState, error) {
	if p.polls.Add(1) > 20 || p.fail {
		return pipeline.VideoState{}, errPollLimit
	}
	p.clock.Load().Advance(p.step)
	return pipeline.VideoState{}, nil
}

func (p *stallProviders) FetchVideo(context.Context, string) (pipeline.Media, error) {
	return pipeline.Media{Body: io.NopCloser(strings.NewReader(""))}, errors.New("never done")
}

// errPollLimit ends a run that polls far past any expected deadline quickly,
// as a poll failure the test then reports, instead of letting it spin.
var errPollLimit = errors.New("poll limit reached")

// An async video that does not finish within VideoTimeout (by the engine's
// clock) ends the attempt as transient provider_job_slow; unset, the
// timeout is 10 minutes.
func TestEngineVideoTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		timeout   time.Duration
		wantPolls int32
	}{
		// Polls at +1m, +2m (not after the deadline), +3m (after): 3.
		{"configured 2m", 2 * time.Minute, 3},
		{"default 10m", 0, 11},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sp := &stallProviders{step: time.Minute}
			h := newHarness(t,
				withConfig(func(ec *pipeline.EngineConfig) { ec.VideoTimeout = tt.timeout }),
				withProviders(func(pipeline.Providers) pipeline.Providers { return sp }))
			sp.clock.Store(h.clock)
			h.submit("v1-stall", board(vid("slow clouds", "", 600)))
			_, o := runOnce(t, h)
			if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_job_slow" {
				t.Fatalf("outcome %+v, want retry_wait provider_job_slow", o)
			}
			if got := sp.polls.Load(); got != tt.wantPolls {
				t.Fatalf("%d status polls before giving up, want %d", got, tt.wantPolls)
			}
		})
	}
}

// Status polls that keep failing end the attempt after five in a row as a
// transient provider_poll_failed (the next attempt polls the same job).
func TestEngineVideoPollFailures(t *testing.T) {
	t.Parallel()
	sp := &stallProviders{step: time.Second, fail: true}
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return sp }))
	sp.clock.Store(h.clock)
	h.submit("v1-pollfail", board(vid("unreadable status", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_poll_failed" {
		t.Fatalf("outcome %+v, want retry_wait provider_poll_failed", o)
	}
	if n := sp.polls.Load(); n != 5 {
		t.Fatalf("%d polls, want 5", n)
	}
}

// unreadableVideoStatus fails every status read of a video job while down
// is set: the provider's status endpoint is out.
type unreadableVideoStatus struct {
	pipeline.Providers
	down atomic.Bool
}

func (u *unreadableVideoStatus) setInner(in pipeline.Providers) { u.Providers = in }

func (u *unreadableVideoStatus) VideoStatus(ctx context.Context, ext string) (pipeline.VideoState, error) {
	if u.down.Load() {
		return pipeline.VideoState{}, errors.New("503 Service Unavailable")
	}
	return u.Providers.VideoStatus(ctx, ext)
}

// An attempt that submitted a video and recorded its external id on the
// unit, but could not read its status, leaves it to the next attempt. That
// attempt polls the same job, pays nothing, and keeps the video as the
// answer of the call that paid for it: staged under that call's key and
// recorded on its row, where a crash before the asset finds it.
func TestPolledVideoIsTheAnswerOfItsCall(t *testing.T) {
	t.Parallel()
	needFFmpeg(t, "ffmpeg not installed: the fake video provider needs it")
	status := &unreadableVideoStatus{}
	status.down.Store(true)
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return status }))
	const id = "v1-polled"
	h.submit(id, board(vid("clouds", "", 600)))
	if o := attemptWhenDue(t, h); o.Status != pipeline.StatusRetryWait || o.ErrorCode != "provider_poll_failed" {
		t.Fatalf("attempt 1: %+v, want retry_wait on provider_poll_failed", o)
	}
	units, err := h.store.Units(context.Background(), id)
	if err != nil || len(units) != 1 || units[0].ExternalJobID == "" {
		t.Fatalf("units after attempt 1 %+v, %v; want the video's external id recorded", units, err)
	}
	status.down.Store(false)
	if o := attemptWhenDue(t, h); o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt 2: %+v, want succeeded", o)
	}
	if n := h.fake.Ledger().Billed.Video; n != 1 {
		t.Fatalf("video billed %d times, want 1", n)
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpVideoSubmit)
	if err != nil || len(calls) != 1 {
		t.Fatalf("video calls %+v, %v; want one", calls, err)
	}
	if want := fmt.Sprintf("-%s-%d", pipeline.OpVideoSubmit, calls[0].ID); !strings.HasSuffix(calls[0].StagedKey, want) {
		t.Fatalf("video call staged at %q, want a key ending %q", calls[0].StagedKey, want)
	}
}

package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// quickVideo is an async provider whose jobs are done at once.
type quickVideo struct{ pipeline.Providers }

func (p *quickVideo) setInner(in pipeline.Providers) { p.Providers = in }

func (p *quickVideo) SubmitVideo(context.Context, pipeline.CallMeta, pipeline.VideoRequest) (string, error) {
	return "quick-1", nil
}

func (p *quickVideo) VideoStatus(context.Context, string) (pipeline.VideoState, error) {
	return pipeline.VideoState{Done: true}, nil
}

func (p *quickVideo) FetchVideo(context.Context, string) (pipeline.Media, error) {
	return pipeline.Media{Body: io.NopCloser(strings.NewReader("QUICK-VIDEO-BYTES")), ContentType: "video/mp4"}, nil
}

// The render is built from every scene's stored artifacts, whole, with the
// workflow's captions: v2 captions a narrated scene with its narration and
// a silent one with a blank cue. (The stub renderer writes the first 64
// bytes of each input and "ms|caption" into each clip.)
func TestApplyRendersStoredArtifactsWithCaptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return &quickVideo{} }))
	h.submit("v2-render", board(
		img("a red door", "hello there", 700),
		img("a blue door", "", 800),
		vid("a door opening", "", 900),
	))
	if _, o, err := h.attempt("render-v2", true); err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt: %+v, %v", o, err)
	}
	j := h.job("v2-render")
	rc, _, err := h.objs.Get(ctx, j.ResultKey, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	render, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"700|hello there", "800| ", "900| ", "QUICK-VIDEO-BYTES"} {
		if !bytes.Contains(render, []byte(want)) {
			t.Errorf("render lacks %q", want)
		}
	}
	units, err := h.store.Units(ctx, "v2-render")
	if err != nil || len(units) != 3 {
		t.Fatalf("units %+v, %v", units, err)
	}
	for _, u := range units[:2] {
		for _, name := range []string{pipeline.ArtifactImage, pipeline.ArtifactSpeech} {
			key, ok := u.Artifacts[name]
			if !ok {
				continue
			}
			rc, _, err := h.objs.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if head := b[:min(len(b), 64)]; len(head) < 2 || !bytes.Contains(render, head) {
				t.Errorf("render lacks the first bytes of scene %d's %s", u.Scene, name)
			}
		}
	}
}

// brokenRenderer fails like a full disk would: a plain error, no class.
type brokenRenderer struct{ stubRenderer }

func (brokenRenderer) SceneFromImage(context.Context, string, string, int, string, string) error {
	return errors.New("write clip: no space left on device")
}

// A render that fails without a class (a full disk) is retried: apply
// cannot reach a provider, so nothing can be paid twice by repeating it.
func TestEngineRenderFailureIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return brokenRenderer{}, nil }))
	h.submit("v1-fullrender", board(img("a dune", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "render_failed" || o.RequiresAction || o.ErrorMessage != "scene 1 could not be rendered" {
		t.Fatalf("outcome %+v, want retry_wait render_failed", o)
	}
}

// gatedRenderer holds every clip until released, counting the clips in
// flight; the clip of scene failScene (1-based; 0 none) fails and the one
// of scene panicScene panics, each once every other clip is held.
type gatedRenderer struct {
	stubRenderer
	mu                    sync.Mutex
	inFlight, most        int
	reached               chan int // in-flight counts, as they grow
	release               chan struct{}
	stopped               atomic.Int32 // clips ended by their context
	failScene, panicScene int
}

func (r *gatedRenderer) SceneFromImage(ctx context.Context, img, audio string, ms int, caption, out string) error {
	scene := 0
	if _, err := fmt.Sscanf(filepath.Base(out), "clip%03d.mov", &scene); err != nil {
		return err
	}
	scene++
	switch scene {
	case r.failScene:
		r.waitHeld(3)
		return errors.New("ffmpeg exited 1")
	case r.panicScene:
		r.waitHeld(3)
		panic("renderer bug")
	}
	r.mu.Lock()
	r.inFlight++
	r.most = max(r.most, r.inFlight)
	n := r.inFlight
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	select {
	case r.reached <- n:
	default:
	}
	select {
	case <-r.release:
		return r.stubRenderer.SceneFromImage(ctx, img, audio, ms, caption, out)
	case <-ctx.Done():
		r.stopped.Add(1)
		return ctx.Err()
	case <-time.After(20 * time.Second):
		return errors.New("held for 20 s: neither released nor stopped")
	}
}

// waitHeld waits (10 s at most) until n clips are held.
func (r *gatedRenderer) waitHeld(n int) {
	for range 10_000 {
		r.mu.Lock()
		held := r.inFlight
		r.mu.Unlock()
		if held >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func newGatedRenderer() *gatedRenderer {
	return &gatedRenderer{reached: make(chan int, 64), release: make(chan struct{})}
}

func fourScenes() pipeline.Storyboard {
	return board(img("a fjord", "", 600), img("a glacier", "", 600), img("a moraine", "", 600), img("a tarn", "", 600))
}

// Clips render in parallel, never more at once than ClipConcurrency.
func TestApplyRendersClipsInParallelUpToTheBound(t *testing.T) {
	t.Parallel()
	gr := newGatedRenderer()
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return gr, nil }),
		withConfig(func(ec *pipeline.EngineConfig) { ec.ClipConcurrency = 2 }))
	h.submit("v1-parallel", fourScenes())
	done := make(chan pipeline.Outcome, 1)
	go func() { _, o := runOnce(t, h); done <- o }()
	for n := 0; n < 2; {
		n = within(t, gr.reached, "two clips rendering at once")
	}
	time.Sleep(50 * time.Millisecond) // a third clip would start now if unbounded
	close(gr.release)
	if o := within(t, done, "the attempt"); o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v", o)
	}
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if gr.most != 2 {
		t.Fatalf("at most %d clips rendered at once, want 2 (ClipConcurrency)", gr.most)
	}
}

// The first clip that fails stops the others (their context ends, as
// their ffmpeg processes would be killed) and is the attempt's error; a
// clip that panics is recovered like any panic of an attempt.
func TestApplyFailingClipStopsTheOthers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		fail     int
		panics   int
		wantCode string
		wantMsg  string
	}{
		{"scene 3 fails", 3, 0, "render_failed", "scene 3 could not be rendered"},
		{"scene 2 panics", 0, 2, "internal_panic", "edgepipe hit an internal error; the attempt is retried"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			gr := newGatedRenderer()
			gr.failScene, gr.panicScene = c.fail, c.panics
			h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return gr, nil }),
				withConfig(func(ec *pipeline.EngineConfig) { ec.ClipConcurrency = 4 }))
			h.submit("v1-clipfails", fourScenes())
			_, o := runOnce(t, h) // returns only if the failure ended the held clips
			if o.Status != pipeline.StatusRetryWait || o.ErrorCode != c.wantCode || o.ErrorMessage != c.wantMsg {
				t.Fatalf("outcome %+v; want retry_wait %s %q", o, c.wantCode, c.wantMsg)
			}
			if n := gr.stopped.Load(); n != 3 {
				t.Fatalf("%d of the 3 held clips saw their context end, want all", n)
			}
		})
	}
}

// brokenJoinRenderer's join dies after the first bytes reached the upload,
// as ffmpeg does when a clip is unreadable.
type brokenJoinRenderer struct{ stubRenderer }

func (brokenJoinRenderer) JoinTo(_ context.Context, _ []string, w io.Writer) error {
	if _, err := w.Write([]byte("partial mp4 bytes")); err != nil {
		return err
	}
	return errors.New("ffmpeg: invalid data found when processing input")
}

// A join that fails mid-upload is reported as the render failing (retried),
// and the half-written object is abandoned, not kept.
func TestEngineJoinFailureMidUpload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return brokenJoinRenderer{}, nil }))
	h.submit("v1-badjoin", board(img("a reef", "", 600)))
	_, o := runOnce(t, h)
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "render_failed" || o.ErrorMessage != "joining the scenes failed" {
		t.Fatalf("outcome %+v, want retry_wait render_failed (joining the scenes failed)", o)
	}
	n := 0
	if err := h.store.ListAssets(context.Background(), func(a pipeline.Asset) error {
		if a.Kind == "render" {
			n++
		}
		return nil
	}); err != nil || n != 0 {
		t.Fatalf("%d render assets, %v; want none", n, err)
	}
}

// countingRenderer counts the clips it makes and the joins it runs.
type countingRenderer struct {
	stubRenderer
	clips, joins *atomic.Int32
}

func (r countingRenderer) SceneFromImage(ctx context.Context, img, audio string, ms int, caption, out string) error {
	r.clips.Add(1)
	return r.stubRenderer.SceneFromImage(ctx, img, audio, ms, caption, out)
}

func (r countingRenderer) JoinTo(ctx context.Context, clips []string, w io.Writer) error {
	r.joins.Add(1)
	return r.stubRenderer.JoinTo(ctx, clips, w)
}

// A job that repeats a finished storyboard (same tenant, version and media)
// skips apply: its render key is known after execute, the render is stored,
// so no clip is made and nothing is joined; the apply stage records that it
// was skipped and the job ends on the stored render.
func TestApplySkippedWhenRenderStored(t *testing.T) {
	t.Parallel()
	cr := countingRenderer{clips: new(atomic.Int32), joins: new(atomic.Int32)}
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return cr, nil }))
	sb := board(img("a lighthouse", "the keeper", 600), img("a storm", "", 600))
	ctx := context.Background()

	h.submit("v1-first", sb)
	c1, o1 := runOnce(t, h)
	if o1.Status != pipeline.StatusSucceeded || cr.clips.Load() != 2 || cr.joins.Load() != 1 {
		t.Fatalf("first job: %+v, %d clips, %d joins; want succeeded, 2, 1", o1, cr.clips.Load(), cr.joins.Load())
	}
	if err := h.store.Finish(ctx, c1.Lease, o1); err != nil {
		t.Fatal(err)
	}

	h.submit("v1-again", sb)
	_, o2 := runOnce(t, h)
	if o2.Status != pipeline.StatusSucceeded || o2.ResultKey != o1.ResultKey {
		t.Fatalf("repeat: %+v, want succeeded on %s", o2, o1.ResultKey)
	}
	if cr.clips.Load() != 2 || cr.joins.Load() != 1 {
		t.Errorf("repeat rendered again: %d clips, %d joins in all, want 2 and 1", cr.clips.Load(), cr.joins.Load())
	}
	evs, err := h.store.Events(ctx, "v1-again", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	skipped := false
	for _, e := range evs {
		if e.Kind == pipeline.EventStageFinished && bytes.Contains(e.Detail, []byte(`"stage":"apply"`)) {
			skipped = bytes.Contains(e.Detail, []byte(`"skipped":"render_stored"`))
		}
	}
	if !skipped {
		t.Error("the repeat's apply stage does not say it was skipped")
	}

	// Another tenant's identical storyboard is not the same render.
	if _, _, err := h.store.CreateJob(ctx, pipeline.NewJob{ID: "v1-other", Tenant: "globex", Operation: pipeline.OperationRenderVideo,
		IdempotencyKey: "k-other", RequestFingerprint: "f", Input: mustNormalize(t, sb).Canonical(), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	if _, o3 := runOnce(t, h); o3.Status != pipeline.StatusSucceeded || o3.ResultKey == o1.ResultKey || cr.joins.Load() != 2 {
		t.Errorf("other tenant: %+v after %d joins; want its own render, joined", o3, cr.joins.Load())
	}
}

func mustNormalize(t *testing.T, sb pipeline.Storyboard) pipeline.Storyboard {
	t.Helper()
	n, err := sb.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A clip's panic, carried back to the attempt, is recorded as the attempt's
// panic (the event) and logged with the stack of the clip's goroutine,
// where the bug is, not only the attempt's.
func TestApplyClipPanicKeepsItsStack(t *testing.T) {
	t.Parallel()
	gr := newGatedRenderer()
	gr.panicScene = 2
	var buf syncBuffer
	h := newHarness(t, withRenderers(func(context.Context, int, int, int) (pipeline.Renderer, error) { return gr, nil }),
		withConfig(func(ec *pipeline.EngineConfig) {
			ec.ClipConcurrency = 4
			ec.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
		}))
	const id = "v1-clippanic"
	h.submit(id, fourScenes())
	if _, o := runOnce(t, h); o.ErrorCode != "internal_panic" {
		t.Fatalf("outcome %+v, want internal_panic", o)
	}
	if len(unitEvents(t, h, id, pipeline.EventAttemptPanicked)) == 0 {
		t.Fatal("no attempt_panicked event")
	}
	out := buf.String()
	if !strings.Contains(out, "renderer bug") || !strings.Contains(out, "gatedRenderer).SceneFromImage") {
		t.Fatalf("log %q lacks the panic and the clip goroutine's stack", out)
	}
}

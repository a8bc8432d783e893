package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

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

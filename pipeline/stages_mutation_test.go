package pipeline_test

import (
	"bytes"
	"context"
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

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// noAssets is a ledger that holds no asset: every other method is left
// unimplemented (the embedded nil interface panics if one is reached).
type noAssets struct{ ObjectLedger }

func (noAssets) GetAsset(context.Context, string) (Asset, error) { return Asset{}, ErrNotFound }

type keyOnlyRenderer struct{}

func (keyOnlyRenderer) SceneFromImage(context.Context, string, string, int, string, string) error {
	return errors.New("not used")
}
func (keyOnlyRenderer) NormalizeVideo(context.Context, string, string, int, string, string) error {
	return errors.New("not used")
}
func (keyOnlyRenderer) JoinTo(context.Context, []string, io.Writer) error {
	return errors.New("not used")
}
func (keyOnlyRenderer) AlignDurations(ms []int) []int { return ms }
func (keyOnlyRenderer) Fingerprint() string           { return "k" }

// A render that was stored when apply was skipped and is gone by finalize
// (clips nil) fails the attempt transiently, so the next one renders: it
// never joins nothing into an object.
func TestFinalizeWithoutClipsWhenRenderVanished(t *testing.T) {
	t.Parallel()
	a := &attempt{job: Job{ID: "v1-x", Tenant: "acme"}, workflow: Workflow{Version: "v1"},
		units: []Unit{{Artifacts: map[string]string{ArtifactImage: "media/x"}}}}
	_, err := finalize(context.Background(), FinalizeDeps{Ledger: noAssets{}, Renderer: keyOnlyRenderer{}}, a, nil)
	var ce *ClassifiedError
	if !errors.As(err, &ce) || ce.Class != ClassTransient || ce.Code != "render_missing" {
		t.Fatalf("err = %v, want a transient render_missing", err)
	}
	if renderStored(context.Background(), noAssets{}, a, keyOnlyRenderer{}) {
		t.Error("renderStored with no asset = true")
	}
}

// The render key is known before any clip is made: it changes with every
// input that changes the render (tenant, version, renderer, each medium).
func TestAttemptRenderKey(t *testing.T) {
	t.Parallel()
	base := func() *attempt {
		return &attempt{job: Job{Tenant: "acme"}, workflow: Workflow{Version: "v1"},
			units: []Unit{{Artifacts: map[string]string{ArtifactImage: "i0", ArtifactSpeech: "s0"}}, {Artifacts: map[string]string{ArtifactVideo: "v1"}}}}
	}
	k0 := attemptRenderKey(base(), keyOnlyRenderer{})
	if k0 != attemptRenderKey(base(), keyOnlyRenderer{}) {
		t.Fatal("the render key is not deterministic")
	}
	for name, change := range map[string]func(*attempt){
		"tenant":  func(a *attempt) { a.job.Tenant = "bob" },
		"version": func(a *attempt) { a.workflow.Version = "v2" },
		"image":   func(a *attempt) { a.units[0].Artifacts[ArtifactImage] = "i1" },
		"speech":  func(a *attempt) { a.units[0].Artifacts[ArtifactSpeech] = "s1" },
		"video":   func(a *attempt) { a.units[1].Artifacts[ArtifactVideo] = "v9" },
	} {
		a := base()
		change(a)
		if attemptRenderKey(a, keyOnlyRenderer{}) == k0 {
			t.Errorf("changing the %s leaves the render key unchanged", name)
		}
	}
	if got := fmt.Sprint(attemptRenderKey(base(), keyOnlyRenderer{})); got[:len(PrefixRenders)] != PrefixRenders {
		t.Errorf("render key %q outside %s", got, PrefixRenders)
	}
}

// chunks is a reader that answers each Read with the next of its chunks,
// an empty chunk as a read of 0 bytes and no error (which io.Reader
// allows), and io.EOF when they run out.
type chunks [][]byte

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	*c = (*c)[1:]
	return n, nil
}

// The "mid_upload" failpoint fires once, on the first read that carried
// bytes: not on a read of nothing before them (the upload has not started)
// nor at the end of the stream (it would be "after upload"), and the bytes
// of the read it fires on are still handed on, with the error.
func TestFailpointReaderFiresAfterTheFirstBytes(t *testing.T) {
	t.Parallel()
	boom := errors.New("crash here")
	var fired []int // the read each firing happened on
	read := 0
	src := chunks{{}, []byte("abc"), {}, []byte("de")}
	f := &failpointReader{r: &src, ctx: context.Background(), name: "mid_upload",
		fp: func(_ context.Context, name string) error {
			if name != "mid_upload" {
				t.Errorf("failpoint name %q", name)
			}
			fired = append(fired, read)
			return boom
		}}
	buf := make([]byte, 8)
	type result struct {
		n      int
		failed bool
	}
	want := []result{{0, false}, {3, true}, {0, false}, {2, false}, {0, false}}
	for i, w := range want {
		read = i
		n, err := f.Read(buf)
		var se *sourceError
		failed := errors.As(err, &se) && errors.Is(err, boom)
		if n != w.n || failed != w.failed {
			t.Errorf("read %d = (%d, %v), want %d bytes, failpoint error %v", i, n, err, w.n, w.failed)
		}
	}
	if fmt.Sprint(fired) != "[1]" {
		t.Errorf("the failpoint fired on reads %v, want once, on read 1 (the first with bytes)", fired)
	}
	// Without a failpoint the reader only passes the bytes on.
	src = chunks{[]byte("xyz")}
	plain := &failpointReader{r: &src, ctx: context.Background(), name: "mid_upload"}
	if n, err := plain.Read(buf); n != 3 || err != nil {
		t.Errorf("without a failpoint: (%d, %v), want 3 bytes, no error", n, err)
	}
}

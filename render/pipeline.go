package render

import (
	"context"
	"fmt"
	"io"
	"sync"

	"edgepipe/pipeline"
)

// JoinTo is Join for callers that compute size and hash themselves
// (pipeline.Renderer).
func (r *Renderer) JoinTo(ctx context.Context, clipPaths []string, w io.Writer) error {
	_, err := r.Join(ctx, clipPaths, w)
	return err
}

// Fingerprint is ClipFingerprint under pipeline.Renderer's name.
func (r *Renderer) Fingerprint() string { return r.ClipFingerprint() }

var _ pipeline.Renderer = (*Renderer)(nil)

// Factory returns a pipeline.RendererFactory that makes one Renderer per
// output geometry from base, a Renderer New made (so its binaries were
// found, run and checked for their encoders, once, at start-up). A new
// geometry costs no process: it is base's configuration at another size
// and frame rate, validated, with base's resolved binaries and versions.
// So no job waits for ffmpeg's -version and -encoders probes, nor for
// another job's under the factory's lock.
func Factory(base *Renderer) pipeline.RendererFactory {
	var mu sync.Mutex
	cache := map[string]*Renderer{}
	return func(_ context.Context, width, height, fps int) (pipeline.Renderer, error) {
		k := fmt.Sprintf("%dx%d@%d", width, height, fps)
		mu.Lock()
		defer mu.Unlock()
		if r, ok := cache[k]; ok {
			return r, nil
		}
		r, err := base.withGeometry(width, height, fps)
		if err != nil {
			return nil, err
		}
		cache[k] = r
		return r, nil
	}
}

// withGeometry is r at another output size and frame rate.
func (r *Renderer) withGeometry(width, height, fps int) (*Renderer, error) {
	cfg := r.cfg
	cfg.Width, cfg.Height, cfg.FPS = width, height, fps
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := *r // the checked binaries, their versions, the logger and tracer
	g.cfg = cfg
	g.made = newMadeClips() // a clip of another geometry is not one of these
	return &g, nil
}

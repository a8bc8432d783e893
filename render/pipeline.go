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
// output geometry from base (binaries are checked once per geometry).
func Factory(base Config) pipeline.RendererFactory {
	var mu sync.Mutex
	cache := map[string]*Renderer{}
	return func(ctx context.Context, width, height, fps int) (pipeline.Renderer, error) {
		k := fmt.Sprintf("%dx%d@%d", width, height, fps)
		mu.Lock()
		defer mu.Unlock()
		if r, ok := cache[k]; ok {
			return r, nil
		}
		cfg := base
		cfg.Width, cfg.Height, cfg.FPS = width, height, fps
		r, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		cache[k] = r
		return r, nil
	}
}

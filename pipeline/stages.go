package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// CancelChecker is the one store method apply and finalize need besides the
// object ledger.
type CancelChecker interface {
	CancelRequested(ctx context.Context, jobID string) (bool, error)
}

// ApplyDeps is everything the apply stage may use: stored objects and the
// renderer. It has no Providers field, and TestLaterStagesCannotReachProviders
// checks no field can hold one, so apply cannot pay for anything.
type ApplyDeps struct {
	Cancel   CancelChecker
	Objects  ObjectStore
	Renderer Renderer
	// Concurrency bounds the clips rendered at once (at least 1).
	Concurrency int
}

// FinalizeDeps is everything finalize may use. Like ApplyDeps it cannot reach
// a provider.
type FinalizeDeps struct {
	Cancel    CancelChecker
	Ledger    ObjectLedger
	Objects   ObjectStore
	Renderer  Renderer
	Failpoint Failpoint
	Metrics   Metrics
	Tracer    trace.Tracer // the upload's span (nil: none)
}

// apply builds one clip per scene from the stored media, in the attempt's
// scratch directory, up to d.Concurrency at once, and returns their paths in
// scene order. The first clip that fails stops the others (their ffmpeg
// processes are killed with the context) and is the error. A panic in a
// clip's goroutine is carried back and raised again in the caller's, where
// the attempt recovers it as it would any other.
func apply(ctx context.Context, d ApplyDeps, a *attempt) ([]string, error) {
	if err := checkCancel(ctx, d.Cancel, a.job.ID); err != nil {
		return nil, err
	}
	durations := make([]int, len(a.board.Scenes))
	for i, s := range a.board.Scenes {
		durations[i] = s.DurationMS
	}
	aligned := d.Renderer.AlignDurations(durations)
	clips := make([]string, len(a.units))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(d.Concurrency, 1))
	var (
		mu      sync.Mutex
		crashed any // the first clip's panic, with its stack
	)
	for i := range a.units {
		g.Go(func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if crashed == nil {
						crashed = fmt.Sprintf("%v\n%s", r, debug.Stack())
					}
					mu.Unlock()
					err = errClipPanicked
				}
			}()
			if err := gctx.Err(); err != nil {
				return err // a sibling failed: no download, no ffmpeg
			}
			clips[i], err = applyScene(gctx, d, a, i, aligned[i])
			return err
		})
	}
	err := g.Wait()
	if crashed != nil {
		panic(crashed)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return clips, nil
}

// errClipPanicked stops a clip's siblings when it panicked.
var errClipPanicked = errors.New("a clip's renderer panicked")

// applyScene builds scene i's clip.
func applyScene(ctx context.Context, d ApplyDeps, a *attempt, i, durationMS int) (string, error) {
	u := a.units[i]
	scene := a.board.Scenes[i]
	caption := ""
	if a.workflow.Captions {
		caption = scene.Narration
		if caption == "" {
			caption = " " // an empty cue keeps every clip's stream layout equal
		}
	}
	audio := ""
	if key, ok := u.Artifacts[ArtifactSpeech]; ok {
		p, err := download(ctx, d.Objects, key, filepath.Join(a.tmp, fmt.Sprintf("scene%03d.wav", i)))
		if err != nil {
			return "", err
		}
		audio = p
	}
	out := filepath.Join(a.tmp, fmt.Sprintf("clip%03d.mov", i))
	var err error
	if key, ok := u.Artifacts[ArtifactVideo]; ok {
		var src string
		if src, err = download(ctx, d.Objects, key, filepath.Join(a.tmp, fmt.Sprintf("scene%03d.mp4", i))); err != nil {
			return "", err
		}
		err = d.Renderer.NormalizeVideo(ctx, src, audio, durationMS, caption, out)
	} else if key, ok := u.Artifacts[ArtifactImage]; ok {
		var src string
		if src, err = download(ctx, d.Objects, key, filepath.Join(a.tmp, fmt.Sprintf("scene%03d.png", i))); err != nil {
			return "", err
		}
		err = d.Renderer.SceneFromImage(ctx, src, audio, durationMS, caption, out)
	} else {
		return "", fmt.Errorf("apply: unit %d of job %s has no visual", i, a.job.ID)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if diskFull(err) {
			return "", infraErr("local_disk_error", "the worker's scratch disk is full", err)
		}
		return "", &ClassifiedError{Class: ClassTransient, Code: "render_failed", Message: fmt.Sprintf("scene %d could not be rendered", i+1), Cause: err}
	}
	return out, nil
}

func download(ctx context.Context, objs ObjectStore, key, path string) (string, error) {
	rc, _, err := objs.Get(ctx, key, 0, -1)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			// An artifact recorded on a unit always has an asset row, and an
			// asset row always has its object: this is an invariant breach.
			return "", &ClassifiedError{Class: ClassAmbiguous, Code: "object_missing", Message: "a stored scene result is missing from object storage", Cause: err}
		}
		return "", infraErr("object_store_error", "object storage did not answer", err)
	}
	if err := spoolTo(path, rc); err != nil {
		return "", infraErr("object_store_error", "object storage download broke off", err)
	}
	return path, nil
}

// attemptRenderKey is the key the attempt's render is stored under: known
// once every scene's media is (after execute), before any clip is made.
func attemptRenderKey(a *attempt, r Renderer) string {
	var arts []string
	for _, u := range a.units {
		for _, name := range []string{ArtifactImage, ArtifactVideo, ArtifactSpeech} {
			if k, ok := u.Artifacts[name]; ok {
				arts = append(arts, name+"="+k)
			}
		}
	}
	return RenderKey(a.job.Tenant, a.workflow.Version, a.board.Canonical(), r.Fingerprint(), arts)
}

// renderStored reports whether the attempt's render is already stored (an
// asset row, so the object is whole): a job that repeats a finished
// storyboard with the same media then skips apply — no clip, no ffmpeg
// process — and finalize reuses the render. A store error is not an answer,
// so it reports false and the attempt renders as usual.
func renderStored(ctx context.Context, l ObjectLedger, a *attempt, r Renderer) bool {
	_, err := l.GetAsset(ctx, attemptRenderKey(a, r))
	return err == nil
}

// finalize joins the clips and streams the render into object storage under
// its deterministic key, by the write protocol; an existing render of the
// same frozen input is reused.
//
// clips is nil when apply was skipped because the render existed
// (renderStored); if it vanished since, the attempt fails transiently and
// the next one renders.
func finalize(ctx context.Context, d FinalizeDeps, a *attempt, clips []string) (string, error) {
	key := attemptRenderKey(a, d.Renderer)
	if _, err := d.Ledger.GetAsset(ctx, key); err == nil {
		return key, nil
	}
	if clips == nil {
		return "", &ClassifiedError{Class: ClassTransient, Code: "render_missing",
			Message: "the stored render this job reuses disappeared; the next attempt renders it again"}
	}
	if _, adopted, err := adoptObject(ctx, renderWrite(d, a, key)); err != nil {
		return "", err
	} else if adopted {
		return key, nil
	}
	if err := callFP(ctx, d.Failpoint, "before_upload"); err != nil {
		return "", err
	}
	if err := checkCancel(ctx, d.Cancel, a.job.ID); err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	joinCtx, stopJoin := context.WithCancel(ctx)
	defer stopJoin()
	var joinErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A panicking renderer must not take the process down: it fails
		// the join (and so the upload), with its stack for the log.
		defer func() {
			if r := recover(); r != nil {
				joinErr = fmt.Errorf("renderer panicked: %v\n%s", r, debug.Stack())
				pw.CloseWithError(joinErr)
			}
		}()
		joinErr = d.Renderer.JoinTo(joinCtx, clips, pw)
		pw.CloseWithError(joinErr)
	}()
	src := &failpointReader{r: sourceReader{r: pr}, ctx: ctx, fp: d.Failpoint, name: "mid_upload"}
	asset, reused, err := writeObject(ctx, renderWrite(d, a, key), src)
	// Whatever happened to the upload, ffmpeg must not outlive it.
	pr.CloseWithError(errors.New("upload finished"))
	stopJoin()
	wg.Wait()
	if err != nil {
		var se *sourceError
		if errors.As(err, &se) && joinErr != nil && ctx.Err() == nil {
			return "", errors.Join(&ClassifiedError{Class: ClassTransient, Code: "render_failed", Message: "joining the scenes failed", Cause: joinErr}, err)
		}
		return "", err
	}
	if !reused { // a render some other attempt stored was not written again
		d.Metrics.BytesUploaded("render", asset.SizeBytes)
	}
	if err := callFP(ctx, d.Failpoint, "after_asset_before_status"); err != nil {
		return "", err
	}
	return key, nil
}

// failpointReader fires a failpoint once, after the first bytes went
// through: the crash matrix's "mid-upload".
type failpointReader struct {
	r     io.Reader
	ctx   context.Context
	fp    Failpoint
	name  string
	fired bool
}

func (f *failpointReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && !f.fired && f.fp != nil {
		f.fired = true
		if ferr := f.fp(f.ctx, f.name); ferr != nil {
			return n, &sourceError{err: ferr}
		}
	}
	return n, err
}

// renderWrite is the object write of a job's render under key.
func renderWrite(d FinalizeDeps, a *attempt, key string) *objectWrite {
	return &objectWrite{Ledger: d.Ledger, Objects: d.Objects, Lease: a.lease, Failpoint: d.Failpoint, Tracer: d.Tracer,
		Key: key, Kind: "render", ContentType: "video/mp4", DurationMS: a.board.TotalMS()}
}

package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// ExecuteDeps is everything the execute stage may use. It is the only stage
// given a Providers.
type ExecuteDeps struct {
	Store        Store
	Objects      ObjectStore
	Providers    Providers
	Clock        Clock
	Concurrency  int
	PollInterval time.Duration
	VideoTimeout time.Duration
	Failpoint    Failpoint
	Metrics      Metrics
	// Rate is the shared rate limiter (no Limits: none).
	Rate RateLimits
	// SpoolDir keeps paid provider results until they are stored; it
	// outlives attempts, so a worker that died between paying and storing
	// recovers the result on its next attempt instead of paying again.
	SpoolDir string
	// SpoolPatience is how long a received (paid) answer is held in memory
	// while its spool file cannot be written (a full disk), before the
	// call is given up as paid-but-lost.
	SpoolPatience time.Duration
	// Proofs holds the probes' proofs an idempotent_verified operation
	// needs (EffectiveContract); without it none runs as such.
	Proofs ProofReader
	// ProofMaxAge is how long a proof is trusted.
	ProofMaxAge time.Duration
	// Tracer makes the unit, provider-call and upload spans (nil: none).
	Tracer trace.Tracer
}

// Artifact names within a unit.
const (
	ArtifactImage  = "image"
	ArtifactSpeech = "speech"
	ArtifactVideo  = "video"
)

// Speech parameters edgepipe asks for (part of the speech artifact key).
const (
	speechVoice      = "narrator"
	speechSampleRate = 48000
)

// execute generates every unit that has no stored result yet, in parallel
// with a bound. The first error cancels the siblings and is returned (an
// errgroup: no helper here may swallow an error). A unit whose result is
// stored is never sent to a provider again.
func execute(ctx context.Context, d ExecuteDeps, a *attempt) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(d.Concurrency, 1))
	for i := range a.units {
		if a.units[i].Status == UnitGenerated {
			continue
		}
		g.Go(func() (err error) {
			// A panic in a unit's goroutine would take the whole process
			// down (no caller can recover it): recover it here.
			defer func() {
				if r := recover(); r != nil {
					err = recovered(ctx, a.log, d.Store, a.lease, a.units[i].Scene, r)
				}
			}()
			return runUnit(gctx, ctx, d, a, i)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	units, err := d.Store.Units(ctx, a.job.ID)
	if err != nil {
		return storeErr(err)
	}
	for _, u := range units {
		if u.Status != UnitGenerated {
			return fmt.Errorf("execute: unit %d of job %s ended %s without an error", u.Scene, a.job.ID, u.Status)
		}
	}
	a.units = units
	return nil
}

// unitRun is one scene's generation within an attempt.
type unitRun struct {
	d     ExecuteDeps
	a     *attempt
	scene Scene
	unit  Unit
	// attemptCtx is the attempt's context, which a sibling's failure does
	// not cancel (the ctx the unit runs under does): see callContext.
	attemptCtx context.Context
}

// runUnit generates scene i in a span of its own (SpanUnit).
func runUnit(ctx, attemptCtx context.Context, d ExecuteDeps, a *attempt, i int) (err error) {
	u := &unitRun{d: d, a: a, scene: a.board.Scenes[i], unit: a.units[i], attemptCtx: attemptCtx}
	ctx, span := tracerOr(d.Tracer).Start(ctx, SpanUnit, trace.WithAttributes(AttrScene.Int(u.unit.Scene), AttrUnitKind.String(u.scene.Kind())))
	defer func() {
		failSpan(span, err)
		span.End()
	}()
	visual := ArtifactImage
	if u.scene.Kind() == "video" {
		visual = ArtifactVideo
	}
	needed := []string{visual}
	if u.scene.Narration != "" {
		needed = append(needed, ArtifactSpeech)
	}
	for _, name := range needed {
		if err := u.ensure(ctx, name); err != nil {
			return err
		}
	}
	if err := d.Store.UpdateUnit(ctx, a.lease, i, UnitUpdate{Status: UnitGenerated}); err != nil {
		return storeErr(err)
	}
	return storeErr(d.Store.AppendEvent(ctx, a.lease, EventUnitGenerated, map[string]any{"scene": i, "kind": u.scene.Kind()}))
}

// key returns the deterministic object key of an artifact of this scene.
func (u *unitRun) key(name string) (key, op, contentType string) {
	p, w, h := u.d.Providers, 0, 0
	w, h = u.a.board.Options.Size()
	switch name {
	case ArtifactImage:
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, ProviderName(p, OpImage), p.Model(OpImage), OpImage,
			fmt.Sprintf("%dx%d", w, h), u.scene.ImagePrompt, "png"), OpImage, "image/png"
	case ArtifactSpeech:
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, ProviderName(p, OpSpeech), p.Model(OpSpeech), OpSpeech,
			speechVoice+"/"+strconv.Itoa(speechSampleRate), u.scene.Narration, "wav"), OpSpeech, "audio/wav"
	default:
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, ProviderName(p, OpVideoSubmit), p.Model(OpVideoSubmit), OpVideoSubmit,
			fmt.Sprintf("%dx%d@%d/%dms", w, h, u.a.board.Options.FPS, u.scene.DurationMS), u.scene.VideoPrompt, "mp4"), OpVideoSubmit, "video/mp4"
	}
}

// ensure makes sure artifact name is stored and recorded on the unit,
// reusing whatever already exists — the asset, an orphaned object at its
// key, a paid answer an earlier attempt staged or spooled — and paying a
// provider only when the contract allows it.
func (u *unitRun) ensure(ctx context.Context, name string) error {
	key, op, contentType := u.key(name)
	if existing := u.unit.Artifacts[name]; existing == key {
		return u.reused(ctx, name, "", false)
	}
	if _, err := u.d.Store.GetAsset(ctx, key); err == nil {
		// Stored by an earlier attempt (or an equal scene): no provider call.
		return u.reused(ctx, name, key, false)
	} else if !errors.Is(err, ErrNotFound) {
		return storeErr(err)
	}
	if _, adopted, err := adoptObject(ctx, u.write(key, name, contentType)); err != nil {
		return err
	} else if adopted {
		return u.reused(ctx, name, key, true)
	}
	ans, err := u.paidAnswer(ctx, op)
	if err != nil {
		return err
	}
	if ans == nil {
		if name == ArtifactVideo {
			ans, err = u.video(ctx)
		} else {
			ans, err = u.syncCall(ctx, op)
		}
		if err != nil {
			return err
		}
	}
	if err := u.store(ctx, ans, key, name, contentType); err != nil {
		return err
	}
	if err := callFP(ctx, u.d.Failpoint, "after_asset_before_unit"); err != nil {
		return err
	}
	if err := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Artifacts: map[string]string{name: key}}); err != nil {
		return storeErr(err)
	}
	// The asset made from the answer exists and the unit names it: the
	// staged and spooled copies have served their purpose.
	u.discard(ctx, ans)
	return nil
}

// reused records that artifact name needs no provider call; setKey, when
// not empty, is recorded on the unit first.
func (u *unitRun) reused(ctx context.Context, name, setKey string, adopted bool) error {
	u.d.Metrics.UnitReused(name)
	if setKey != "" {
		if err := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Artifacts: map[string]string{name: setKey}}); err != nil {
			return storeErr(err)
		}
	}
	detail := map[string]any{"scene": u.unit.Scene, "artifact": name}
	if adopted {
		detail["adopted"] = true
	}
	return storeErr(u.d.Store.AppendEvent(ctx, u.a.lease, EventUnitReused, detail))
}

// syncCall makes one synchronous provider call and keeps its answer
// (keepPaid) before anything else happens.
func (u *unitRun) syncCall(ctx context.Context, op string) (*answer, error) {
	p := u.d.Providers
	contract, err := u.contract(ctx, op)
	if err != nil {
		return nil, err
	}
	call, err := u.beginCall(ctx, op, contract)
	if err != nil {
		return nil, err
	}
	defer call.end()
	defer call.done()
	w, h := u.a.board.Options.Size()
	var m Media
	err = call.send(func(ctx context.Context) (err error) {
		switch op {
		case OpImage:
			m, err = p.GenerateImage(ctx, call.meta, ImageRequest{Prompt: u.scene.ImagePrompt, Width: w, Height: h, Model: p.Model(OpImage)})
		case OpSpeech:
			m, err = p.Synthesize(ctx, call.meta, SpeechRequest{Text: u.scene.Narration, Voice: speechVoice, SampleRate: speechSampleRate})
		default:
			err = fmt.Errorf("no synchronous operation %q", op)
		}
		return err
	})
	if err != nil {
		return nil, call.failed(err)
	}
	// The answer is read whole before anything touches a disk or the
	// object store, so that a local failure (a full disk, a store outage)
	// cannot be mistaken for a broken answer.
	body, err := readAnswer(m.Body, maxAnswer)
	call.done() // the exchange is over: keeping the answer needs no slot
	if err != nil {
		// The provider answered and then the stream broke: it may well have
		// billed us for a result we do not have.
		return nil, call.failed(&CallError{Op: op, Outcome: OutcomeUnknown, Code: "provider_connection_lost", Cause: err})
	}
	return u.keepPaid(call, body) //nolint:contextcheck // keepPaid runs under call.ctx, which beginCall derived from ctx
}

// video runs the asynchronous contract: submit once and persist the
// external id before waiting; any later attempt polls that id and never
// resubmits. The finished video is staged the moment it is downloaded (the
// provider deletes its outputs after a while).
func (u *unitRun) video(ctx context.Context) (*answer, error) {
	p := u.d.Providers
	contract, err := u.contract(ctx, OpVideoSubmit)
	if err != nil {
		return nil, err
	}
	ext, callID, err := u.submittedVideo(ctx)
	if err != nil {
		return nil, err
	}
	if ext == "" {
		if contract != ContractAsyncPollable {
			return nil, &ClassifiedError{Class: ClassAmbiguous, Code: "provider_contract_unknown", Message: "the video provider's contract is not known; edgepipe will not call it without a human"}
		}
		if ext, callID, err = u.submitVideo(ctx, contract); err != nil {
			return nil, err
		}
	}
	deadline := u.d.Clock.Now().Add(u.d.VideoTimeout)
	pollErrors := 0
	for {
		if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
			return nil, err
		}
		st, err := p.VideoStatus(ctx, ext)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if pollErrors++; pollErrors >= 5 {
				return nil, &ClassifiedError{Class: ClassTransient, Code: "provider_poll_failed", Message: "the video provider's status could not be read; polling resumes on the next attempt", Cause: err}
			}
		case st.Failed:
			// The unit is marked failed with its external id kept, so an
			// operator's retry knows to waive this submission and submit
			// once more (the id can only ever be polled to this failure).
			if err := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Status: UnitFailed}); err != nil {
				return nil, storeErr(err)
			}
			return nil, &ClassifiedError{Class: ClassAmbiguous, Code: "provider_job_failed", Message: "the video provider reported the generation failed; an operator must decide whether to pay for another"}
		case st.Done:
			return u.fetchVideo(ctx, ext, callID)
		default:
			pollErrors = 0
		}
		if u.d.Clock.Now().After(deadline) {
			return nil, &ClassifiedError{Class: ClassTransient, Code: "provider_job_slow", Message: "the video provider has not finished; polling resumes on the next attempt"}
		}
		if err := sleepCtx(ctx, u.d.PollInterval); err != nil {
			return nil, err
		}
	}
}

// submittedVideo finds the external job an earlier attempt submitted for
// this unit, and the call row that paid for it. A waived submission (its
// job failed and an operator chose to pay for another) is not one.
func (u *unitRun) submittedVideo(ctx context.Context) (ext string, callID int64, err error) {
	ext = u.unit.ExternalJobID
	prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, OpVideoSubmit)
	if err != nil {
		return "", 0, storeErr(err)
	}
	for _, c := range prior {
		if c.ExternalJobID == "" || c.Status == CallWaived {
			continue
		}
		if ext == "" || c.ExternalJobID == ext {
			ext, callID = c.ExternalJobID, c.ID
		}
	}
	return ext, callID, nil
}

// submitVideo submits the unit's video once; the external id is persisted
// before anything else happens: from then on the job can only ever be
// recovered by polling it.
func (u *unitRun) submitVideo(ctx context.Context, contract Contract) (string, int64, error) {
	p := u.d.Providers
	call, err := u.beginCall(ctx, OpVideoSubmit, contract)
	if err != nil {
		return "", 0, err
	}
	defer call.end()
	defer call.done()
	w, h := u.a.board.Options.Size()
	var ext string
	err = call.send(func(ctx context.Context) (err error) {
		ext, err = p.SubmitVideo(ctx, call.meta, VideoRequest{Prompt: u.scene.VideoPrompt,
			DurationMS: u.scene.DurationMS, Width: w, Height: h, FPS: u.a.board.Options.FPS})
		return err
	})
	if err != nil {
		return "", 0, call.failed(err)
	}
	call.done()
	// sctx is call.ctx, which beginCall derived from ctx: contextcheck cannot
	// follow a context kept in a struct (the nolints below).
	sctx := call.ctx
	u.d.Metrics.ProviderCall(OpVideoSubmit, CallSucceeded)
	call.recorded(CallSucceeded)
	if err := u.d.Store.FinishCall(context.WithoutCancel(sctx), &FinishCallParams{ID: call.id, Status: CallSucceeded, HTTPStatus: 202, ErrorCode: "", ExternalID: ext}); err != nil { //nolint:contextcheck // sctx is derived from ctx
		return "", 0, storeErr(err)
	}
	if err := callFP(sctx, u.d.Failpoint, "after_provider_response"); err != nil { //nolint:contextcheck // sctx is derived from ctx
		return "", 0, err
	}
	if err := u.d.Store.UpdateUnit(sctx, u.a.lease, u.unit.Scene, UnitUpdate{Status: UnitSubmitted, ExternalJobID: ext}); err != nil { //nolint:contextcheck // sctx is derived from ctx
		return "", 0, storeErr(err)
	}
	if err := u.d.Store.AppendEvent(sctx, u.a.lease, EventUnitSubmitted, map[string]any{"scene": u.unit.Scene}); err != nil { //nolint:contextcheck // sctx is derived from ctx
		return "", 0, storeErr(err)
	}
	return ext, call.id, nil
}

// fetchVideo downloads a finished video straight into its staging key.
func (u *unitRun) fetchVideo(ctx context.Context, ext string, callID int64) (*answer, error) {
	m, err := u.d.Providers.FetchVideo(ctx, ext)
	var ce *CallError
	if err != nil && ctx.Err() == nil && errors.As(err, &ce) && ce.Outcome == OutcomeFailed {
		// The provider no longer has the output (it deletes outputs after a
		// while): it can only be had by paying for another. The unit is
		// marked failed, so an operator's retry waives this submission.
		if uerr := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Status: UnitFailed}); uerr != nil {
			return nil, storeErr(uerr)
		}
		return nil, &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the video provider no longer has the finished video; an operator must decide whether to pay for another", Cause: err}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ClassifiedError{Class: ClassTransient, Code: "provider_fetch_failed", Message: "the finished video could not be downloaded; it will be fetched again, not regenerated", Cause: err}
	}
	defer m.Body.Close()
	ans := &answer{callID: callID}
	if err := u.stage(ctx, ans, OpVideoSubmit, sourceReader{r: m.Body}); err != nil {
		var se *sourceError
		if errors.As(err, &se) {
			return nil, &ClassifiedError{Class: ClassTransient, Code: "provider_fetch_failed", Message: "the finished video download broke off; it will be fetched again, not regenerated", Cause: err}
		}
		return nil, err
	}
	return ans, nil
}

// maxAnswer bounds a synchronous answer (an image, a narration) held in
// memory; a provider sending more is treated like a broken answer.
const maxAnswer = 256 << 20

// readAnswer reads a synchronous answer of at most limit bytes whole.
func readAnswer(body io.ReadCloser, limit int) ([]byte, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("answer larger than %d bytes", limit)
	}
	return b, nil
}

// spoolBackoff is the wait before retry n (0-based) of a failed spool
// write: 100 ms doubling, at most 2 s.
func spoolBackoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n, 5), 2*time.Second)
}

// keepAnswer spools a paid answer, retrying a failing local write with
// backoff for up to SpoolPatience: the answer cannot be had again without
// paying again, so it is worth waiting for space.
func (u *unitRun) keepAnswer(ctx context.Context, path string, body []byte) error {
	deadline := time.Now().Add(u.d.SpoolPatience)
	for n := 0; ; n++ {
		err := spoolTo(path, io.NopCloser(bytes.NewReader(body)))
		wait := spoolBackoff(n)
		if err == nil || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		if serr := sleepCtx(ctx, wait); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// spoolTo writes body to path through a temporary file and a rename, so a
// file at path is always complete.
func spoolTo(path string, body io.ReadCloser) error {
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

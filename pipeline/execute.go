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
	"strings"
	"time"

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
	// SpoolDir keeps paid provider results until they are stored; it
	// outlives attempts, so a worker that died between paying and storing
	// recovers the result on its next attempt instead of paying again.
	SpoolDir string
	// SpoolPatience is how long a received (paid) answer is held in memory
	// while its spool file cannot be written (a full disk), before the
	// call is given up as paid-but-lost.
	SpoolPatience time.Duration
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
		g.Go(func() error { return runUnit(gctx, ctx, d, a, i) })
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

func runUnit(ctx, attemptCtx context.Context, d ExecuteDeps, a *attempt, i int) error {
	u := &unitRun{d: d, a: a, scene: a.board.Scenes[i], unit: a.units[i], attemptCtx: attemptCtx}
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
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, p.Name(), p.Model(OpImage), OpImage,
			fmt.Sprintf("%dx%d", w, h), u.scene.ImagePrompt, "png"), OpImage, "image/png"
	case ArtifactSpeech:
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, p.Name(), p.Model(OpSpeech), OpSpeech,
			speechVoice+"/"+strconv.Itoa(speechSampleRate), u.scene.Narration, "wav"), OpSpeech, "audio/wav"
	default:
		return ArtifactKey(u.a.job.Tenant, u.a.workflow.Version, p.Name(), p.Model(OpVideoSubmit), OpVideoSubmit,
			fmt.Sprintf("%dx%d@%d/%dms", w, h, u.a.board.Options.FPS, u.scene.DurationMS), u.scene.VideoPrompt, "mp4"), OpVideoSubmit, "video/mp4"
	}
}

// ensure makes sure artifact name is stored and recorded on the unit,
// reusing whatever already exists, and paying a provider only when the
// contract allows it.
func (u *unitRun) ensure(ctx context.Context, name string) error {
	key, op, contentType := u.key(name)
	if existing := u.unit.Artifacts[name]; existing == key {
		u.d.Metrics.UnitReused(name)
		return storeErr(u.d.Store.AppendEvent(ctx, u.a.lease, EventUnitReused, map[string]any{"scene": u.unit.Scene, "artifact": name}))
	}
	if _, err := u.d.Store.GetAsset(ctx, key); err == nil {
		// Stored by an earlier attempt (or an equal scene): no provider call.
		u.d.Metrics.UnitReused(name)
		if err := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Artifacts: map[string]string{name: key}}); err != nil {
			return storeErr(err)
		}
		return storeErr(u.d.Store.AppendEvent(ctx, u.a.lease, EventUnitReused, map[string]any{"scene": u.unit.Scene, "artifact": name}))
	} else if !errors.Is(err, ErrNotFound) {
		return storeErr(err)
	}
	if _, adopted, err := adoptObject(ctx, u.d.Store, u.d.Objects, u.a.lease, key, name, contentType, 0); err != nil {
		return err
	} else if adopted {
		u.d.Metrics.UnitReused(name)
		if err := u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Artifacts: map[string]string{name: key}}); err != nil {
			return storeErr(err)
		}
		return storeErr(u.d.Store.AppendEvent(ctx, u.a.lease, EventUnitReused, map[string]any{"scene": u.unit.Scene, "artifact": name, "adopted": true}))
	}
	// A paid result that an earlier attempt received but did not store is
	// still on this worker's disk if that attempt died here: store it
	// instead of paying again.
	spool, err := u.paidSpool(ctx, op)
	if err != nil {
		return err
	}
	if spool != "" {
		// fall through to storing it
	} else if name == ArtifactVideo {
		spool, err = u.video(ctx)
	} else {
		spool, err = u.syncCall(ctx, op, name)
	}
	if err != nil {
		return err
	}
	if err := u.store(ctx, spool, key, name, contentType); err != nil {
		return err
	}
	if strings.HasPrefix(spool, u.d.SpoolDir) && u.d.SpoolDir != "" {
		_ = os.Remove(spool) // stored: the object is the copy now
	}
	if err := callFP(ctx, u.d.Failpoint, "after_asset_before_unit"); err != nil {
		return err
	}
	return storeErr(u.d.Store.UpdateUnit(ctx, u.a.lease, u.unit.Scene, UnitUpdate{Artifacts: map[string]string{name: key}}))
}

// spoolPath is where the paid result of provider call id is kept until it is
// stored: under SpoolDir (which outlives the attempt) when set, else in the
// attempt's scratch directory.
func (u *unitRun) spoolPath(callID int64) string {
	if u.d.SpoolDir == "" {
		return filepath.Join(u.a.tmp, fmt.Sprintf("call-%d", callID))
	}
	return filepath.Join(u.d.SpoolDir, safeName(u.a.job.ID), fmt.Sprintf("call-%d", callID))
}

// paidSpool finds a complete spooled result of an earlier succeeded call for
// this unit's op (spoolTo publishes by rename, so a file there is whole).
func (u *unitRun) paidSpool(ctx context.Context, op string) (string, error) {
	if u.d.SpoolDir == "" {
		return "", nil
	}
	prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, op)
	if err != nil {
		return "", storeErr(err)
	}
	for i := len(prior) - 1; i >= 0; i-- {
		// An intent row whose spool file exists was answered too: the
		// worker died between publishing the spool (a rename, so the file
		// is whole) and recording the answer.
		// A waived row's spool is just as whole: the operator agreed to pay
		// again if need be, not to throw away an answer already here.
		if st := prior[i].Status; st != CallSucceeded && st != CallIntent && st != CallWaived {
			continue
		}
		p := u.spoolPath(prior[i].ID)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", nil
}

// safeName keeps a job id to a file-name-safe form (ids are validated long
// before; this only guarantees the path shape).
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// store writes a spooled artifact with the object protocol, retrying a
// transient object-store failure a few times within the attempt: the
// provider was already paid, so the result is worth a little patience.
func (u *unitRun) store(ctx context.Context, spool, key, kind, contentType string) error {
	var last error
	for try := range 3 {
		if try > 0 {
			if err := sleepCtx(ctx, time.Duration(try*try)*200*time.Millisecond); err != nil {
				return err
			}
		}
		f, err := os.Open(spool)
		if err != nil {
			return &ClassifiedError{Class: ClassTransient, Code: "local_disk_error", Message: "the worker lost a spooled result", Cause: err}
		}
		_, _, err = writeObject(ctx, u.d.Store, u.d.Objects, u.a.lease, u.d.Failpoint, key, kind, contentType, 0, f)
		f.Close()
		if err == nil {
			return nil
		}
		last = err
		var ce *ClassifiedError
		if !errors.As(err, &ce) || ce.Class != ClassTransient {
			return err
		}
	}
	return last
}

// idempotencyKey is stable for a (job, scene, operation): every retry of the
// unit sends the same key, which is what lets an idempotent-verified provider
// deduplicate it.
func (u *unitRun) idempotencyKey(op string) string {
	return "ep-" + hashParts("idem", u.a.job.ID, strconv.Itoa(u.unit.Scene), op)[:40]
}

func (u *unitRun) unitID() string { return u.a.job.ID + "/" + strconv.Itoa(u.unit.Scene) }

// mayCall applies the contract to the audit trail: if an earlier call for
// this (job, scene, op) may have been billed and the contract does not let
// us repeat it safely, stop and ask a human.
func (u *unitRun) mayCall(ctx context.Context, op string, contract Contract) error {
	prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, op)
	if err != nil {
		return storeErr(err)
	}
	for _, c := range prior {
		if c.MayHaveBilled() && contract != ContractIdempotentVerified {
			return &ClassifiedError{Class: ClassAmbiguous, Code: "provider_outcome_unknown",
				Message: fmt.Sprintf("an earlier attempt may already have paid for scene %d's %s and its result was not stored; an operator must decide whether to pay again", u.unit.Scene+1, op)}
		}
	}
	return nil
}

// callContext is the context a provider request runs under once its intent
// is recorded. A sibling's failure stops this unit from starting anything
// new, but a request that cannot be repeated safely is not torn down in
// flight: aborting it cannot undo the charge, it only throws the paid result
// away and leaves the call ambiguous, which parks the job for a human. Such a
// request runs to its own end (the adapter's timeout) under the attempt's
// context, which shutdown past its deadline and a lost lease still cancel;
// its result is spooled and recorded, and the next attempt stores it instead
// of paying again. A request the provider deduplicates is simply abandoned.
func (u *unitRun) callContext(ctx context.Context, contract Contract) context.Context {
	// Without a SpoolDir the answer would live in the attempt's scratch
	// directory, which is gone before a next attempt could use it.
	if contract == ContractIdempotentVerified || u.attemptCtx == nil || u.d.SpoolDir == "" {
		return ctx
	}
	return u.attemptCtx
}

// stopBeforeSend is the last look before a request leaves: if the stage
// failed (or the job was stopped) while the intent was being written, the
// request is not sent and the intent is closed as not_sent, so no later
// attempt mistakes it for a call that may have been billed.
func (u *unitRun) stopBeforeSend(ctx context.Context, id int64, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	u.d.Metrics.ProviderCall(op, CallNotSent)
	// A failure to close the intent rides along (errors.Join drops a nil).
	ferr := u.d.Store.FinishCall(context.WithoutCancel(ctx), id, CallNotSent, 0, "interrupted_before_send", "")
	return errors.Join(err, storeErr(ferr))
}

// syncCall makes one synchronous provider call and spools its media.
func (u *unitRun) syncCall(ctx context.Context, op, name string) (string, error) {
	p := u.d.Providers
	contract := p.Contract(op)
	if err := u.mayCall(ctx, op, contract); err != nil {
		return "", err
	}
	meta := CallMeta{UnitID: u.unitID()}
	if contract == ContractIdempotentVerified {
		meta.IdempotencyKey = u.idempotencyKey(op)
	}
	if err := callFP(ctx, u.d.Failpoint, "before_provider_call"); err != nil {
		return "", err
	}
	if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
		return "", err
	}
	id, err := u.d.Store.RecordIntent(ctx, u.a.lease, ProviderCall{Scene: u.unit.Scene, Op: op, Provider: p.Name(),
		Contract: contract, IdempotencyKey: meta.IdempotencyKey})
	if err != nil {
		return "", storeErr(err)
	}
	if err := callFP(ctx, u.d.Failpoint, "after_provider_intent"); err != nil {
		return "", err
	}
	if err := u.stopBeforeSend(ctx, id, op); err != nil {
		return "", err
	}
	ctx = u.callContext(ctx, contract)
	w, h := u.a.board.Options.Size()
	var m Media
	switch op {
	case OpImage:
		m, err = p.GenerateImage(ctx, meta, ImageRequest{Prompt: u.scene.ImagePrompt, Width: w, Height: h, Model: p.Model(OpImage)})
	case OpSpeech:
		m, err = p.Synthesize(ctx, meta, SpeechRequest{Text: u.scene.Narration, Voice: speechVoice, SampleRate: speechSampleRate})
	default:
		err = fmt.Errorf("no synchronous operation %q", op)
	}
	if err != nil {
		return "", u.callFailed(ctx, id, op, contract, err)
	}
	// The answer is read whole before anything touches the disk, so that a
	// local failure (a full disk) cannot be mistaken for a broken answer and
	// does not lose what was paid for: the bytes wait in memory while the
	// spool write is retried.
	body, err := readAnswer(m.Body, maxAnswer)
	if err != nil {
		// The provider answered and then the stream broke: it may well have
		// billed us for a result we do not have.
		return "", u.callFailed(ctx, id, op, contract, &CallError{Op: op, Outcome: OutcomeUnknown, Code: "provider_connection_lost", Cause: err})
	}
	spool := u.spoolPath(id)
	if err := u.keepAnswer(ctx, spool, body); err != nil {
		// Received and billed, but this worker could not keep it.
		return "", u.callFailed(ctx, id, op, contract, &CallError{Op: op, Outcome: OutcomeUnknown, Code: "local_disk_error", Cause: err})
	}
	if err := callFP(ctx, u.d.Failpoint, "after_provider_response"); err != nil {
		return "", err
	}
	u.d.Metrics.ProviderCall(op, CallSucceeded)
	if err := u.d.Store.FinishCall(context.WithoutCancel(ctx), id, CallSucceeded, 200, "", ""); err != nil {
		return "", storeErr(err)
	}
	return spool, nil
}

// callFailed records a failed call in the audit trail and classifies it by
// the operation's contract (DESIGN §6).
func (u *unitRun) callFailed(ctx context.Context, id int64, op string, contract Contract, err error) error {
	status, httpStatus, code := CallAmbiguous, 0, "provider_error"
	var ce *CallError
	switch {
	case ctx.Err() != nil:
		// Our side gave up (a sibling failed, the job was canceled, the
		// worker is stopping) while the request may have been in flight: it
		// may have been billed. The error chain may even carry another
		// call's CallError (errgroup cancels with the first error as the
		// cause), so it must not be read as this call's outcome.
		code = "interrupted"
	case errors.As(err, &ce) && ce.Op == op:
		httpStatus, code = ce.HTTPStatus, ce.Code
		switch ce.Outcome {
		case OutcomeNotSent:
			status = CallNotSent
		case OutcomeRateLimited, OutcomeRejected:
			status = CallFailed
		}
	}
	u.d.Metrics.ProviderCall(op, status)
	// The call's class decides the outcome; a failure to record it rides
	// along (errors.Join drops a nil).
	ferr := u.d.Store.FinishCall(context.WithoutCancel(ctx), id, status, httpStatus, code, "")
	return errors.Join(classifyCall(ctx, op, contract, err), storeErr(ferr))
}

// classifyCall is the §6 table: what a failed call means for the job.
func classifyCall(ctx context.Context, op string, contract Contract, err error) error {
	if ctx.Err() != nil {
		return ctx.Err() // canceled or shutting down: not this provider's doing
	}
	var ce *CallError
	if !errors.As(err, &ce) || ce.Op != op {
		return &ClassifiedError{Class: ClassAmbiguous, Code: "provider_error", Message: "the " + op + " provider failed in an unexpected way", Cause: err}
	}
	switch ce.Outcome {
	case OutcomeNotSent:
		return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider could not be reached; nothing was sent", Cause: err}
	case OutcomeRateLimited:
		return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider asked us to slow down", RetryAfter: ce.RetryAfter, Cause: err}
	case OutcomeRejected:
		return &ClassifiedError{Class: ClassPermanent, Code: ce.Code, Message: "the " + op + " provider refused the request", Cause: err}
	case OutcomeUnknown:
		if contract == ContractIdempotentVerified {
			return &ClassifiedError{Class: ClassTransient, Code: ce.Code, Message: "the " + op + " provider did not answer; it deduplicates, so the call is repeated with the same key", Cause: err}
		}
		if ce.Code == "local_disk_error" {
			return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider's answer arrived (and was billed) but this worker could not keep it on disk; an operator must decide whether to pay again", Cause: err}
		}
		return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider may have processed the request but did not answer; retrying could pay twice, so an operator must decide", Cause: err}
	default:
		return &ClassifiedError{Class: ClassAmbiguous, Code: ce.Code, Message: "the " + op + " provider reported a failure; an operator must decide", Cause: err}
	}
}

// video runs the asynchronous contract: submit once and persist the
// external id before waiting; any later attempt polls that id and never
// resubmits.
func (u *unitRun) video(ctx context.Context) (string, error) {
	p := u.d.Providers
	contract := p.Contract(OpVideoSubmit)
	ext := u.unit.ExternalJobID
	if ext == "" {
		prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, OpVideoSubmit)
		if err != nil {
			return "", storeErr(err)
		}
		for _, c := range prior {
			if c.ExternalJobID != "" {
				ext = c.ExternalJobID
			}
		}
	}
	if ext == "" {
		if contract != ContractAsyncPollable {
			return "", &ClassifiedError{Class: ClassAmbiguous, Code: "provider_contract_unknown", Message: "the video provider's contract is not known; edgepipe will not call it without a human"}
		}
		if err := u.mayCall(ctx, OpVideoSubmit, contract); err != nil {
			return "", err
		}
		if err := callFP(ctx, u.d.Failpoint, "before_provider_call"); err != nil {
			return "", err
		}
		if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
			return "", err
		}
		id, err := u.d.Store.RecordIntent(ctx, u.a.lease, ProviderCall{Scene: u.unit.Scene, Op: OpVideoSubmit, Provider: p.Name(), Contract: contract})
		if err != nil {
			return "", storeErr(err)
		}
		if err := callFP(ctx, u.d.Failpoint, "after_provider_intent"); err != nil {
			return "", err
		}
		if err := u.stopBeforeSend(ctx, id, OpVideoSubmit); err != nil {
			return "", err
		}
		// Submitted, the id is what a later attempt recovers by; see
		// callContext for why a sibling's failure does not cut this short.
		sctx := u.callContext(ctx, contract)
		w, h := u.a.board.Options.Size()
		ext, err = p.SubmitVideo(sctx, CallMeta{UnitID: u.unitID()}, VideoRequest{Prompt: u.scene.VideoPrompt,
			DurationMS: u.scene.DurationMS, Width: w, Height: h, FPS: u.a.board.Options.FPS})
		if err != nil {
			return "", u.callFailed(sctx, id, OpVideoSubmit, contract, err)
		}
		// The id is persisted before anything else happens: from here on
		// the job can only ever be recovered by polling it.
		u.d.Metrics.ProviderCall(OpVideoSubmit, CallSucceeded)
		if err := u.d.Store.FinishCall(context.WithoutCancel(sctx), id, CallSucceeded, 202, "", ext); err != nil {
			return "", storeErr(err)
		}
		if err := callFP(sctx, u.d.Failpoint, "after_provider_response"); err != nil {
			return "", err
		}
		if err := u.d.Store.UpdateUnit(sctx, u.a.lease, u.unit.Scene, UnitUpdate{Status: UnitSubmitted, ExternalJobID: ext}); err != nil {
			return "", storeErr(err)
		}
		if err := u.d.Store.AppendEvent(sctx, u.a.lease, EventUnitSubmitted, map[string]any{"scene": u.unit.Scene}); err != nil {
			return "", storeErr(err)
		}
	}
	deadline := u.d.Clock.Now().Add(u.d.VideoTimeout)
	pollErrors := 0
	for {
		if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
			return "", err
		}
		st, err := p.VideoStatus(ctx, ext)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			if pollErrors++; pollErrors >= 5 {
				return "", &ClassifiedError{Class: ClassTransient, Code: "provider_poll_failed", Message: "the video provider's status could not be read; polling resumes on the next attempt", Cause: err}
			}
		case st.Failed:
			return "", &ClassifiedError{Class: ClassAmbiguous, Code: "provider_job_failed", Message: "the video provider reported the generation failed; an operator must decide whether to pay for another"}
		case st.Done:
			m, err := p.FetchVideo(ctx, ext)
			if err != nil {
				if ctx.Err() != nil {
					return "", ctx.Err()
				}
				return "", &ClassifiedError{Class: ClassTransient, Code: "provider_fetch_failed", Message: "the finished video could not be downloaded; it will be fetched again, not regenerated", Cause: err}
			}
			spool := filepath.Join(u.a.tmp, fmt.Sprintf("scene%03d-video", u.unit.Scene))
			if err := spoolTo(spool, m.Body); err != nil {
				return "", &ClassifiedError{Class: ClassTransient, Code: "provider_fetch_failed", Message: "the finished video download broke off; it will be fetched again, not regenerated", Cause: err}
			}
			return spool, nil
		default:
			pollErrors = 0
		}
		if u.d.Clock.Now().After(deadline) {
			return "", &ClassifiedError{Class: ClassTransient, Code: "provider_job_slow", Message: "the video provider has not finished; polling resumes on the next attempt"}
		}
		if err := sleepCtx(ctx, u.d.PollInterval); err != nil {
			return "", err
		}
	}
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

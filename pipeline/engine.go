package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
)

// Renderer turns stored media into clips and joins them (render.Renderer,
// through render.Factory, which checks the binaries once at start-up). It
// is a pure function of its inputs: no provider.
type Renderer interface {
	SceneFromImage(ctx context.Context, imagePath, audioPath string, durationMS int, caption, outPath string) error
	NormalizeVideo(ctx context.Context, videoPath, audioPath string, durationMS int, caption, outPath string) error
	// JoinTo writes the joined render as fragmented MP4 to w, streaming.
	JoinTo(ctx context.Context, clipPaths []string, w io.Writer) error
	// AlignDurations rounds scene lengths to whole frames without drift.
	AlignDurations(durationsMS []int) []int
	// Fingerprint identifies the output format (part of render keys).
	Fingerprint() string
}

// RendererFactory returns a Renderer for one output geometry.
type RendererFactory func(ctx context.Context, width, height, fps int) (Renderer, error)

// Workflow is one bound workflow version.
type Workflow struct {
	Version string
	// Captions adds a mov_text caption track built from the narration
	// (v2), so ffprobe tells the versions apart.
	Captions bool
}

// Workflows are the implementations edgepipe ships. A deployment binds a
// subset (routing.Bindings); the rest do not run here.
var Workflows = map[string]Workflow{
	"v1": {Version: "v1"},
	"v2": {Version: "v2", Captions: true},
}

// Failpoint is called at the named boundaries of an attempt. It is nil in
// production builds' default configuration (no cost); the failpoint package
// installs one when EDGEPIPE_FAILPOINTS is set.
type Failpoint func(ctx context.Context, name string) error

// EngineConfig wires the stages.
type EngineConfig struct {
	Store     Store
	Objects   ObjectStore
	Providers Providers
	Renderers RendererFactory
	Retry     RetryPolicy
	Clock     Clock
	Logger    *slog.Logger
	// UnitConcurrency bounds scenes generated in parallel
	// (DefaultUnitConcurrency).
	UnitConcurrency int
	// ClipConcurrency bounds the clips of one job rendered at once
	// (DefaultClipConcurrency).
	ClipConcurrency int
	// TempDir holds scene clips of an attempt.
	TempDir string
	// SpoolDir keeps paid provider results until stored (see ExecuteDeps).
	SpoolDir string
	// SpoolPatience: see ExecuteDeps (default 30s).
	SpoolPatience time.Duration
	// VideoPollInterval and VideoTimeout drive async video jobs.
	VideoPollInterval time.Duration
	VideoTimeout      time.Duration
	Failpoint         Failpoint
	Metrics           Metrics
	// RateLimits are the provider limits every worker shares (none when
	// it has no Limits).
	RateLimits RateLimits
	// Proofs are the probes' proofs: an operation declared
	// idempotent_verified runs as such only with a fresh one, and as
	// ProofFallback otherwise (EffectiveContract); nil reads none, so every
	// such operation runs as ProofFallback. TrustDeclared trusts every
	// declared contract, for embedders and tests that prove their
	// providers otherwise.
	Proofs ProofReader
	// ProofMaxAge is how long a proof is trusted (DefaultProofMaxAge).
	ProofMaxAge time.Duration
	// TracerProvider makes the attempt, stage, unit, provider-call and
	// upload spans (README "Tracing"); nil is the noop provider.
	TracerProvider trace.TracerProvider
}

// Metrics receives counters (api.Metrics implements it); nil discards.
type Metrics interface {
	ProviderCall(op, status string)
	BytesUploaded(kind string, n int64)
	StageDuration(stage string, d time.Duration)
	UnitReused(kind string)
	RetryScheduled(code string)
	// ProviderLatency observes how long a provider request took, sent to
	// its answer or failure, by provider name and operation.
	ProviderLatency(provider, op string, d time.Duration)
	// JobSettled observes a job its attempt left settled (Status.Settled):
	// the time from submission to now, and the attempts it took.
	JobSettled(version string, status Status, sinceSubmitted time.Duration, attempts int)
}

type nopMetrics struct{}

func (nopMetrics) ProviderCall(string, string)                   {}
func (nopMetrics) BytesUploaded(string, int64)                   {}
func (nopMetrics) StageDuration(string, time.Duration)           {}
func (nopMetrics) UnitReused(string)                             {}
func (nopMetrics) RetryScheduled(string)                         {}
func (nopMetrics) ProviderLatency(string, string, time.Duration) {}
func (nopMetrics) JobSettled(string, Status, time.Duration, int) {}

func (c *EngineConfig) setDefaults() {
	if c.Retry.MaxAttempts == 0 {
		c.Retry = DefaultRetryPolicy()
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.UnitConcurrency == 0 {
		c.UnitConcurrency = DefaultUnitConcurrency
	}
	if c.ClipConcurrency == 0 {
		c.ClipConcurrency = DefaultClipConcurrency()
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.VideoPollInterval == 0 {
		c.VideoPollInterval = 100 * time.Millisecond
	}
	if c.VideoTimeout == 0 {
		c.VideoTimeout = 10 * time.Minute
	}
	if c.SpoolPatience == 0 {
		c.SpoolPatience = 30 * time.Second
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	c.TracerProvider = tracing.Or(c.TracerProvider)
	c.RateLimits.setDefaults()
}

// Validate reports missing parts.
func (c EngineConfig) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("engine: no store")
	case c.Objects == nil:
		return errors.New("engine: no object store")
	case c.Providers == nil:
		return errors.New("engine: no providers")
	case c.Renderers == nil:
		return errors.New("engine: no renderer")
	case c.UnitConcurrency < 1:
		return errors.New("engine: unit concurrency must be at least 1")
	case c.ClipConcurrency < 1:
		return errors.New("engine: clip concurrency must be at least 1")
	}
	if err := c.RateLimits.Validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return c.Retry.Validate()
}

// DefaultUnitConcurrency is how many scenes of one job are generated at
// once unless configured (EDGEPIPE_UNIT_CONCURRENCY).
const DefaultUnitConcurrency = 4

// DefaultClipConcurrency is how many clips of one job are rendered at once
// unless configured (EDGEPIPE_CLIP_CONCURRENCY): the CPUs this process may
// use (GOMAXPROCS, which follows a container's CPU limit), at most 64.
// Fewer clips than CPUs leave cores idle while short clips start and end;
// libx264 threads inside each process use the rest.
func DefaultClipConcurrency() int { return min(runtime.GOMAXPROCS(0), 64) }

// Engine runs one attempt of a job through the four stages.
type Engine struct {
	cfg    EngineConfig
	tracer trace.Tracer
}

// NewEngine validates cfg and returns an Engine.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, tracer: cfg.TracerProvider.Tracer(TracerName)}, nil
}

// attempt is the state one run of a job carries between stages.
type attempt struct {
	job      Job
	lease    Lease
	workflow Workflow
	board    Storyboard
	units    []Unit
	tmp      string
	log      *slog.Logger
}

// Stage names, in order.
const (
	StagePrepare  = "prepare"
	StageExecute  = "execute"
	StageApply    = "apply"
	StageFinalize = "finalize"
)

// Run executes the attempt and returns how it ended; the caller (the worker)
// records the outcome with Store.Finish. An error return means the outcome
// could not be decided (the lease was lost, the worker is stopping: the
// context's cause says which): nothing must be recorded. A panic anywhere in
// the attempt is recovered into a classified failure (see recovered), with
// its stack in the log and a safe message on the job. The attempt is one
// span (startAttempt) with a child per stage, unit, provider call and
// upload.
func (e *Engine) Run(ctx context.Context, c Claimed) (Outcome, error) {
	ctx, span := startAttempt(ctx, e.tracer, c)
	o, err := e.run(ctx, c)
	endAttempt(span, o, err)
	return o, err
}

func (e *Engine) run(ctx context.Context, c Claimed) (o Outcome, err error) {
	wf, ok := Workflows[c.Job.Version]
	if !ok {
		// The worker only consumes bound versions' queues; a job of another
		// version here is a routing bug. Park it, never run it as another
		// version.
		return Outcome{Status: StatusDeadLettered, Reason: ReasonUnboundVersion, ErrorClass: ClassPermanent, ErrorCode: ReasonUnboundVersion,
			ErrorMessage: "this deployment has no implementation of the job's workflow version", RequiresAction: true}, nil
	}
	log := e.cfg.Logger.With("job", c.Job.ID, "attempt", c.Lease.AttemptID, "version", wf.Version)
	defer func() {
		if r := recover(); r != nil {
			o, err = e.outcome(c, recovered(ctx, log, e.cfg.Store, c.Lease, AllScenes, r)), nil
		}
	}()
	tmp, err := os.MkdirTemp(e.cfg.TempDir, "edgepipe-"+c.Lease.AttemptID+"-")
	if err != nil {
		return e.outcome(c, infraErr("local_disk_error", "the worker could not create scratch space", err)), nil
	}
	defer os.RemoveAll(tmp)
	a := &attempt{job: c.Job, lease: c.Lease, workflow: wf, tmp: tmp, log: log}

	resultKey, err := e.runStages(ctx, a)
	if err == nil {
		return Outcome{Status: StatusSucceeded, ResultKey: resultKey}, nil
	}
	var fe *FenceError
	if errors.As(err, &fe) {
		return Outcome{}, err
	}
	if ctx.Err() != nil && !errors.Is(err, ErrCanceled) {
		// The worker is shutting down or lost the lease: not the job's fault.
		return Outcome{}, fmt.Errorf("attempt interrupted: %w", context.Cause(ctx))
	}
	a.log.Warn("attempt failed", "err", err)
	return e.outcome(c, err), nil
}

// AllScenes, given as the scene of ProviderCalls (and of recovered), means
// every scene of the job.
const AllScenes = -1

// recovered turns a panic inside an attempt (or, scene >= 0, inside one
// unit's goroutine) into a classified failure. If a provider call of the
// attempt (for that scene) is still open (its intent row written, its
// outcome not), the request may have been sent and billed: the call is
// recorded as ambiguous and the job goes to review. Otherwise nothing was
// paid for and the attempt is retried (it counts: a panic that repeats ends
// in the dead-letter queue, not in a loop).
func recovered(ctx context.Context, log *slog.Logger, st Store, lease Lease, scene int, r any) *ClassifiedError {
	log.Error("attempt panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	bg := context.WithoutCancel(ctx)
	_ = st.AppendEvent(bg, lease, EventAttemptPanicked, map[string]any{"attempt": lease.Attempt})
	calls, err := st.ProviderCalls(bg, lease.JobID, scene, "")
	if err != nil {
		return &ClassifiedError{Class: ClassAmbiguous, Code: "internal_panic", Message: "edgepipe hit an internal error while a provider call may have been in flight; an operator must decide", Cause: err}
	}
	open := false
	for _, c := range calls {
		if c.AttemptID == lease.AttemptID && c.Status == CallIntent {
			open = true
			_ = st.FinishCall(bg, &FinishCallParams{ID: c.ID, Status: CallAmbiguous, HTTPStatus: 0, ErrorCode: "internal_panic", ExternalID: ""})
		}
	}
	if open {
		return &ClassifiedError{Class: ClassAmbiguous, Code: "internal_panic", Message: "edgepipe hit an internal error while a provider call may have been in flight; an operator must decide", Cause: fmt.Errorf("panic: %v", r)}
	}
	return &ClassifiedError{Class: ClassTransient, Code: "internal_panic", Message: "edgepipe hit an internal error; the attempt is retried", Cause: fmt.Errorf("panic: %v", r)}
}

// PruneSpool removes the spool directories of jobs that are over for good
// (Status.Final) by a path that did not pass through this worker's Forget:
// an operator failing a job under review, a cancellation of a waiting job,
// another worker finishing it. dead_lettered, needs_review and every live
// status keep their spool (a redrive or retry uses it); a directory whose
// job is not found is kept too, since nothing proves it unneeded. It
// returns how many directories it removed.
func (e *Engine) PruneSpool(ctx context.Context) (int, error) {
	if e.cfg.SpoolDir == "" {
		return 0, nil
	}
	entries, err := os.ReadDir(e.cfg.SpoolDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune spool: %w", err)
	}
	n := 0
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		j, err := e.spoolJob(ctx, ent.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("prune spool: %w", err)
		}
		if !j.Status.Final() || safeName(j.ID) != ent.Name() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(e.cfg.SpoolDir, ent.Name())); err != nil {
			return n, fmt.Errorf("prune spool: %w", err)
		}
		n++
	}
	return n, nil
}

// Forget drops what was kept for a job that is over for good
// (Status.Final): its spooled answers on this worker and its staged answers
// in the object store, which nothing can use any more. A job that may
// resume (dead_lettered, needs_review) must keep both; Forget refuses it.
// A failure only delays the cleanup (the sweeper releases staged answers
// of final jobs too), so it is returned for the log.
func (e *Engine) Forget(ctx context.Context, jobID string, status Status) error {
	if !status.Final() {
		return nil
	}
	if e.cfg.SpoolDir != "" {
		_ = os.RemoveAll(filepath.Join(e.cfg.SpoolDir, safeName(jobID)))
	}
	return ReleaseFinalStaged(ctx, e.cfg.Store, e.cfg.Objects, "forget-"+jobID, jobID)
}

// ReleaseFinalStaged releases the staged answers of a final job (jobID), or
// with jobID empty those of every final job: the worker calls it when it
// finishes a job, the sweeper for jobs that ended elsewhere.
func ReleaseFinalStaged(ctx context.Context, st interface {
	StagedAnswers(ctx context.Context, p *StagedAnswersParams) ([]Asset, error)
	ObjectLedger
}, objs ObjectStore, owner, jobID string) error {
	staged, err := st.StagedAnswers(ctx, &StagedAnswersParams{JobID: jobID, FinalJobsOnly: true})
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range staged {
		errs = append(errs, releaseStaged(ctx, st, objs, owner, a.Key))
	}
	return errors.Join(errs...)
}

func (e *Engine) outcome(c Claimed, err error) Outcome {
	ce := Classify(err)
	d := e.cfg.Retry.DecideAttempt(ce, c.Job, c.Lease.Attempt, e.cfg.Clock.Now())
	if d.Status == StatusRetryWait {
		e.cfg.Metrics.RetryScheduled(ce.Code)
	}
	return OutcomeFor(d, ce)
}

// runStages is prepare → execute → apply → finalize. Each stage's progress is
// recorded only after the stage's work returned without error (stage), and
// not by a deferred call, so a failed or still-running stage can never be
// flushed as finished (the seed's lost-flush bug).
func (e *Engine) runStages(ctx context.Context, a *attempt) (string, error) {
	if err := e.fail(ctx, "after_claim"); err != nil {
		return "", err
	}
	if err := e.stage(ctx, a, StagePrepare, func(ctx context.Context) (map[string]any, error) {
		return nil, prepare(ctx, e.cfg.Store, a)
	}); err != nil {
		return "", err
	}
	if err := e.stage(ctx, a, StageExecute, func(ctx context.Context) (map[string]any, error) {
		return nil, execute(ctx, e.executeDeps(), a)
	}); err != nil {
		return "", err
	}
	if err := e.fail(ctx, "after_execute"); err != nil {
		return "", err
	}
	w, h := a.board.Options.Size()
	r, err := e.cfg.Renderers(ctx, w, h, a.board.Options.FPS)
	if err != nil {
		return "", &ClassifiedError{Class: ClassTransient, Code: "renderer_unavailable", Message: "the renderer could not start", Cause: err}
	}
	var clips []string
	if err := e.stage(ctx, a, StageApply, func(ctx context.Context) (map[string]any, error) {
		if renderStored(ctx, e.cfg.Store, a, r) {
			return map[string]any{"skipped": "render_stored"}, nil
		}
		var err error
		clips, err = apply(ctx, ApplyDeps{Cancel: e.cfg.Store, Objects: e.cfg.Objects, Renderer: r, Concurrency: e.cfg.ClipConcurrency}, a)
		return nil, localErr(err)
	}); err != nil {
		return "", err
	}
	var key string
	if err := e.stage(ctx, a, StageFinalize, func(ctx context.Context) (map[string]any, error) {
		var err error
		key, err = finalize(ctx, FinalizeDeps{Cancel: e.cfg.Store, Ledger: e.cfg.Store, Objects: e.cfg.Objects, Renderer: r,
			Failpoint: e.cfg.Failpoint, Metrics: e.cfg.Metrics, Tracer: e.tracer}, a, clips)
		if err != nil {
			return nil, localErr(err)
		}
		return map[string]any{"result_key": key}, nil
	}); err != nil {
		return "", err
	}
	if err := e.fail(ctx, "before_finish"); err != nil {
		return "", err
	}
	return key, nil
}

// stage runs one stage's work in a span of its own (SpanStage), between
// its stage_started event and the record of its progress with detail, and
// observes its duration.
func (e *Engine) stage(ctx context.Context, a *attempt, name string, work func(ctx context.Context) (detail map[string]any, err error)) (err error) {
	start := e.cfg.Clock.Now()
	ctx, span := e.tracer.Start(ctx, SpanStage+"."+name, trace.WithAttributes(AttrStage.String(name)))
	defer func() {
		failSpan(span, err)
		span.End()
	}()
	if err = e.stageStarted(ctx, a, name); err != nil {
		return err
	}
	detail, err := work(ctx)
	if err != nil {
		return err
	}
	if err = e.cfg.Store.StageFinished(ctx, a.lease, name, doneUnits(a.units), detail); err != nil {
		return storeErr(err)
	}
	e.cfg.Metrics.StageDuration(name, e.cfg.Clock.Now().Sub(start))
	return nil
}

// executeDeps is what the execute stage gets of the engine's config.
func (e *Engine) executeDeps() ExecuteDeps {
	return ExecuteDeps{
		Store: e.cfg.Store, Objects: e.cfg.Objects, Providers: e.cfg.Providers, Clock: e.cfg.Clock,
		Concurrency: e.cfg.UnitConcurrency, PollInterval: e.cfg.VideoPollInterval, VideoTimeout: e.cfg.VideoTimeout,
		Failpoint: e.cfg.Failpoint, Metrics: e.cfg.Metrics, SpoolDir: e.cfg.SpoolDir, SpoolPatience: e.cfg.SpoolPatience,
		Rate: e.cfg.RateLimits, Proofs: e.cfg.Proofs, ProofMaxAge: e.cfg.ProofMaxAge, Tracer: e.tracer,
	}
}

// stageStarted records that the attempt entered a stage, and with which
// workflow implementation: the job's version says what should run, this
// says what did, which is what `edgepipe check` holds against the id prefix
// (docs/design.md §9, invariant 5).
func (e *Engine) stageStarted(ctx context.Context, a *attempt, stage string) error {
	return storeErr(e.cfg.Store.AppendEvent(ctx, a.lease, EventStageStarted, map[string]any{"stage": stage, "workflow": a.workflow.Version}))
}

// localErr classifies what apply and finalize fail with. Those stages have
// no provider (they cannot pay for anything), so a failure there — a full
// disk, a clip ffmpeg could not read, a store hiccup — is safe to retry.
func localErr(err error) error {
	var ce *ClassifiedError
	var fe *FenceError
	if err == nil || errors.As(err, &ce) || errors.As(err, &fe) || errors.Is(err, ErrCanceled) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if diskFull(err) {
		return infraErr("local_disk_error", "the worker's scratch disk is full", err)
	}
	return &ClassifiedError{Class: ClassTransient, Code: "render_failed", Message: "the render could not be built; it is retried", Cause: err}
}

// diskFull reports a full (or over-quota) local disk: edgepipe's own
// infrastructure, not the job's fault, so it backs off on the
// infrastructure budget (docs/design.md §6).
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (e *Engine) fail(ctx context.Context, name string) error {
	if e.cfg.Failpoint == nil {
		return nil
	}
	return e.cfg.Failpoint(ctx, name)
}

func doneUnits(us []Unit) int {
	n := 0
	for _, u := range us {
		if u.Status == UnitGenerated {
			n++
		}
	}
	return n
}

// checkCancel is called before every expensive boundary.
func checkCancel(ctx context.Context, st interface {
	CancelRequested(context.Context, string) (bool, error)
}, jobID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := st.CancelRequested(ctx, jobID)
	if err != nil {
		return infraErr("store_unavailable", "the job store did not answer", err)
	}
	if req {
		return ErrCanceled
	}
	return nil
}

// prepare freezes the input and plans one unit per scene. Idempotent: a
// later attempt gets the frozen copy back and the existing units.
func prepare(ctx context.Context, st Store, a *attempt) error {
	board, err := DecodeStoryboard(a.job.Input)
	if a.job.FrozenInput != nil {
		board, err = DecodeStoryboard(a.job.FrozenInput)
	}
	if err != nil {
		return &ClassifiedError{Class: ClassPermanent, Code: "invalid_input", Message: "the job's storyboard is not valid", Cause: err}
	}
	frozen, err := st.FreezeInput(ctx, a.lease, board.Canonical(), len(board.Scenes))
	if err != nil {
		return storeErr(err)
	}
	if board, err = DecodeStoryboard(frozen); err != nil {
		return &ClassifiedError{Class: ClassPermanent, Code: "invalid_input", Message: "the job's frozen storyboard is not valid", Cause: err}
	}
	a.board = board
	planned := make([]Unit, len(board.Scenes))
	for i, s := range board.Scenes {
		planned[i] = Unit{JobID: a.job.ID, Scene: i, Kind: s.Kind(), UnitKey: UnitKey(a.job.Tenant, a.workflow.Version, s, board.Options)}
	}
	if err := st.PlanUnits(ctx, a.lease, planned); err != nil {
		return storeErr(err)
	}
	units, err := st.Units(ctx, a.job.ID)
	if err != nil {
		return storeErr(err)
	}
	if len(units) != len(board.Scenes) {
		return fmt.Errorf("prepare: job %s has %d units for %d scenes", a.job.ID, len(units), len(board.Scenes))
	}
	a.units = units
	return nil
}

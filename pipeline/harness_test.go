package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// harness wires the real store, object directory, fake provider server and
// HTTP adapter around an Engine, with a manual clock for leases and backoff.
type harness struct {
	t      *testing.T
	clock  *pipeline.ManualClock
	store  *sqlite.Store
	objs   *fs.Store
	fake   *fake.Server
	prov   pipeline.Providers
	engine *pipeline.Engine
	cfg    pipeline.EngineConfig
	fp     *failpoints
}

type harnessOpt func(*pipeline.EngineConfig, *fake.Config)

func withFaults(spec string, seed uint64) harnessOpt {
	return func(_ *pipeline.EngineConfig, fc *fake.Config) {
		f, err := fake.ParseFaults(spec)
		if err != nil {
			panic(err)
		}
		fc.Faults, fc.Seed = f, seed
	}
}

func withRenderers(r pipeline.RendererFactory) harnessOpt {
	return func(ec *pipeline.EngineConfig, _ *fake.Config) { ec.Renderers = r }
}

func withProviders(wrap func(pipeline.Providers) pipeline.Providers) harnessOpt {
	return func(ec *pipeline.EngineConfig, _ *fake.Config) { ec.Providers = wrap(ec.Providers) }
}

func newHarness(t *testing.T, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessWith(t, nil, opts...)
}

// newHarnessWith is newHarness whose provider adapter's config pc may
// change (nil: none) before the adapter is built.
func newHarnessWith(t *testing.T, pc func(*provider.Config), opts ...harnessOpt) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	h := &harness{t: t, clock: pipeline.NewManualClock(t0), fp: &failpoints{}}
	var err error
	h.store = openStore(t, filepath.Join(dir, "db.sqlite"), h.clock)
	h.objs, err = fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	fc := fake.Config{Seed: 1, VideoProcessing: -1, CacheDir: filepath.Join(dir, "fake"), Logger: debugLogger(t)}
	ec := pipeline.EngineConfig{
		Store: h.store, Objects: h.objs, Renderers: stubRenderers, Clock: h.clock,
		Retry:   pipeline.RetryPolicy{Base: time.Second, Cap: 10 * time.Second, MaxAttempts: 5},
		TempDir: dir, SpoolDir: filepath.Join(dir, "spool"), UnitConcurrency: 3, VideoPollInterval: 5 * time.Millisecond, Logger: testLogger(t),
		Failpoint: h.fp.fire, Proofs: pipeline.TrustDeclared{Clock: h.clock},
	}
	for _, o := range opts {
		o(&ec, &fc)
	}
	h.fake, err = fake.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	base, err := h.fake.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.fake.Close() })
	pcfg := provider.Config{BaseURL: base, Timeout: 5 * time.Second}
	if pc != nil {
		pc(&pcfg)
	}
	hp, err := provider.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	if ec.Providers == nil {
		ec.Providers = hp
	} else {
		ec.Providers = wrapInner(ec.Providers, hp)
	}
	h.prov = ec.Providers
	h.cfg = ec
	h.engine, err = pipeline.NewEngine(ec)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// migrated is a database the store's migrations ran on once per test
// binary; openStore copies it instead of migrating every harness's store
// again (the migrations were a quarter of the package's test CPU).
var migrated struct {
	once sync.Once
	path string
	err  error
}

// openStore opens a store at path, a copy of the migrated database, on
// clock; it is closed when the test ends.
func openStore(t *testing.T, path string, clock pipeline.Clock) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	migrated.once.Do(func() {
		dir, err := os.MkdirTemp("", "edgepipe-pipeline-migrated-")
		if err != nil {
			migrated.err = err
			return
		}
		templateDirs = append(templateDirs, dir)
		migrated.path = filepath.Join(dir, "db.sqlite")
		st, err := sqlite.Open(ctx, sqlite.Config{Path: migrated.path})
		if err == nil {
			// Close checkpoints the WAL into the file: the file alone is
			// the whole database.
			err = st.Close()
		}
		migrated.err = err
	})
	if migrated.err != nil {
		t.Fatalf("migrating the template database: %v", migrated.err)
	}
	b, err := os.ReadFile(migrated.path)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: path, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// templateDirs are removed when the test binary ends (TestMain).
var templateDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range templateDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// parkForReview claims queue's next job once its lease has lapsed and
// settles it in needs_review, as an ambiguity elsewhere in the job would.
func (h *harness) parkForReview(queue string) {
	h.t.Helper()
	ctx := context.Background()
	h.clock.Advance(2 * time.Minute)
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: queue, Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		h.t.Fatalf("fetch %v %d", err, len(cs))
	}
	if err := h.store.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, ErrorClass: pipeline.ClassAmbiguous,
		ErrorCode: "test", ErrorMessage: "parked", RequiresAction: true}); err != nil {
		h.t.Fatal(err)
	}
}

// submit creates a job the way the API does.
func (h *harness) submit(id string, sb pipeline.Storyboard) pipeline.Job {
	h.t.Helper()
	return h.submitFor("acme", id, sb)
}

// submitFor submits tenant's job id (the internal key is id).
func (h *harness) submitFor(tenant, id string, sb pipeline.Storyboard) pipeline.Job {
	h.t.Helper()
	sb, err := sb.Normalize()
	if err != nil {
		h.t.Fatal(err)
	}
	version := "v1"
	if len(id) > 3 && id[:3] == "v2-" {
		version = "v2"
	}
	j, created, err := h.store.CreateJob(context.Background(), pipeline.NewJob{
		ID: id, Tenant: tenant, Operation: pipeline.OperationRenderVideo, IdempotencyKey: "k-" + id,
		RequestFingerprint: pipeline.Fingerprint(pipeline.OperationRenderVideo, sb, ""), Input: sb.Canonical(),
		Version: version, Queue: "render-" + version,
	})
	if err != nil || !created {
		h.t.Fatalf("submit %s: %v", id, err)
	}
	return j
}

// attempt claims one job from queue and runs it; finish decides whether the
// outcome is recorded (false simulates a crash after the run).
func (h *harness) attempt(queue string, finish bool) (pipeline.Claimed, pipeline.Outcome, error) {
	h.t.Helper()
	ctx := context.Background()
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: queue, Owner: "test-worker", Max: 1, LeaseFor: time.Minute})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(cs) == 0 {
		return pipeline.Claimed{}, pipeline.Outcome{}, errNothing
	}
	rctx, cancel := context.WithTimeout(ctx, attemptDeadline)
	defer cancel()
	o, err := h.engine.Run(rctx, cs[0])
	if err == nil && finish {
		if ferr := h.store.Finish(ctx, cs[0].Lease, o); ferr != nil {
			h.t.Fatalf("finish %s: %v", cs[0].Job.ID, ferr)
		}
	}
	return cs[0], o, err
}

var errNothing = errors.New("nothing to fetch")

// attemptDeadline bounds one harness attempt: a bug that makes the engine
// loop or block fails its test quickly instead of hanging the package
// (which mutation testing could only score as a timeout).
const attemptDeadline = 30 * time.Second

// within waits for ch like <-ch, but fails the test instead of hanging when
// the code under test never gets there.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// drain runs attempts on every queue, moving the clock past backoffs and
// dead leases, until no job is left to run.
func (h *harness) drain(maxAttempts int) int {
	h.t.Helper()
	n := 0
	for n < maxAttempts {
		progressed := false
		for _, q := range []string{"render-v1", "render-v2"} {
			_, _, err := h.attempt(q, true)
			if errors.Is(err, errNothing) {
				continue
			}
			if err != nil {
				h.t.Fatalf("attempt: %v", err)
			}
			n++
			progressed = true
		}
		if !progressed {
			var pending int
			total, _, _ := h.store.QueueDepth(context.Background(), "render-v1")
			total2, _, _ := h.store.QueueDepth(context.Background(), "render-v2")
			pending = total + total2
			if pending == 0 {
				return n
			}
			h.clock.Advance(15 * time.Second)
		}
	}
	h.t.Fatalf("jobs still running after %d attempts", maxAttempts)
	return n
}

func (h *harness) job(id string) pipeline.Job {
	h.t.Helper()
	j, err := h.store.GetJob(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

// failpoints lets a test act at a named boundary.
type failpoints struct {
	mu sync.Mutex
	at map[string]func(context.Context) error
}

func (f *failpoints) set(name string, fn func(context.Context) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]func(context.Context) error{}
	}
	if fn == nil {
		delete(f.at, name)
	} else {
		f.at[name] = fn
	}
}

func (f *failpoints) fire(ctx context.Context, name string) error {
	f.mu.Lock()
	fn := f.at[name]
	f.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(ctx)
}

// once returns a failpoint action that fails only the first time.
func once(err error) func(context.Context) error {
	var mu sync.Mutex
	done := false
	return func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return nil
		}
		done = true
		return err
	}
}

var errCrash = errors.New("simulated crash")

// stubRenderers renders without ffmpeg: clips are the concatenated inputs,
// the join their concatenation. Billing and storage tests need no video.
func stubRenderers(context.Context, int, int, int) (pipeline.Renderer, error) {
	return stubRenderer{}, nil
}

type stubRenderer struct{}

func (stubRenderer) SceneFromImage(_ context.Context, img, audio string, ms int, caption, out string) error {
	return stubClip(out, img, audio, fmt.Sprintf("%d|%s", ms, caption))
}

func (stubRenderer) NormalizeVideo(_ context.Context, video, audio string, ms int, caption, out string) error {
	return stubClip(out, video, audio, fmt.Sprintf("%d|%s", ms, caption))
}

func stubClip(out string, ins ...string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, in := range ins[:len(ins)-1] {
		if in == "" {
			continue
		}
		b, err := os.ReadFile(in)
		if err != nil {
			return err
		}
		f.Write(b[:min(len(b), 64)])
	}
	_, err = f.WriteString(ins[len(ins)-1])
	return err
}

func (stubRenderer) JoinTo(_ context.Context, clips []string, w io.Writer) error {
	for _, c := range clips {
		b, err := os.ReadFile(c)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func (stubRenderer) AlignDurations(ms []int) []int { return ms }
func (stubRenderer) Fingerprint() string           { return "stub" }

// needFFmpeg skips a test that needs ffmpeg where it is missing, except in
// CI (CI set), where a suite that cannot run is a failure, not a skip.
func needFFmpeg(t *testing.T, why string) {
	t.Helper()
	if haveFFmpeg() {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("ffmpeg/ffprobe not installed and CI is set: %s", why)
	}
	t.Skip(why)
}

func haveFFmpeg() bool {
	_, e1 := exec.LookPath("ffmpeg")
	_, e2 := exec.LookPath("ffprobe")
	return e1 == nil && e2 == nil
}

// wrapInner lets a test wrapper built before the real adapter existed reach
// it: wrappers embed *innerRef and get the adapter set here.
func wrapInner(wrapper, inner pipeline.Providers) pipeline.Providers {
	if s, ok := wrapper.(interface{ setInner(pipeline.Providers) }); ok {
		s.setInner(inner)
	}
	return wrapper
}

// hookProviders delegates to the real adapter, calling before(op, scene)
// first; a test uses it to block, fail or observe individual calls.
type hookProviders struct {
	pipeline.Providers
	before func(ctx context.Context, op, unitID string) error
}

func (p *hookProviders) setInner(in pipeline.Providers) { p.Providers = in }

func (p *hookProviders) GenerateImage(ctx context.Context, m pipeline.CallMeta, r pipeline.ImageRequest) (pipeline.Media, error) {
	if err := p.before(ctx, pipeline.OpImage, m.UnitID); err != nil {
		return pipeline.Media{}, err
	}
	return p.Providers.GenerateImage(ctx, m, r)
}

func (p *hookProviders) Synthesize(ctx context.Context, m pipeline.CallMeta, r pipeline.SpeechRequest) (pipeline.Media, error) {
	if err := p.before(ctx, pipeline.OpSpeech, m.UnitID); err != nil {
		return pipeline.Media{}, err
	}
	return p.Providers.Synthesize(ctx, m, r)
}

func (p *hookProviders) SubmitVideo(ctx context.Context, m pipeline.CallMeta, r pipeline.VideoRequest) (string, error) {
	if err := p.before(ctx, pipeline.OpVideoSubmit, m.UnitID); err != nil {
		return "", err
	}
	return p.Providers.SubmitVideo(ctx, m, r)
}

func board(scenes ...pipeline.Scene) pipeline.Storyboard {
	return pipeline.Storyboard{Title: "test", Scenes: scenes, Options: pipeline.Options{Resolution: "640x360", FPS: 25}}
}

func img(prompt, narration string, ms int) pipeline.Scene {
	return pipeline.Scene{ImagePrompt: prompt, Narration: narration, DurationMS: ms}
}

func vid(prompt, narration string, ms int) pipeline.Scene {
	return pipeline.Scene{VideoPrompt: prompt, Narration: narration, DurationMS: ms}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func debugLogger(t *testing.T) *slog.Logger {
	if os.Getenv("EDGEPIPE_TEST_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// crashAt runs one attempt that freezes at failpoint point, the way a killed
// process stops: no error path, no cleanup, nothing recorded after it. The
// frozen attempt is released (and fenced out) when the test ends.
func (h *harness) crashAt(queue, point string, nth int) {
	h.t.Helper()
	hit := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	hits := 0
	h.fp.set(point, func(ctx context.Context) error {
		mu.Lock()
		hits++
		fired := hits == nth
		mu.Unlock()
		if !fired {
			return nil
		}
		close(hit)
		<-release
		return errCrash
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: queue, Owner: "doomed-worker", Max: 1, LeaseFor: time.Minute})
		if err != nil || len(cs) == 0 {
			return
		}
		_, _ = h.engine.Run(ctx, cs[0])
	}()
	h.t.Cleanup(func() { close(release); <-done })
	select {
	case <-hit:
	case <-done:
		h.t.Fatalf("the attempt never reached failpoint %s", point)
	case <-time.After(20 * time.Second):
		h.t.Fatalf("timed out waiting for failpoint %s", point)
	}
	h.fp.set(point, nil)
}

var errTransientFP = &pipeline.ClassifiedError{Class: pipeline.ClassTransient, Code: "test_transient", Message: "injected"}

// runOnce claims the job on render-v1 with a long lease (so a test may move
// the clock by minutes) and runs one attempt without recording its outcome.
func runOnce(t *testing.T, h *harness) (pipeline.Claimed, pipeline.Outcome) {
	t.Helper()
	ctx := context.Background()
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "test-worker", Max: 1, LeaseFor: time.Hour})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %d claimed, %v", len(cs), err)
	}
	rctx, cancel := context.WithTimeout(ctx, attemptDeadline)
	defer cancel()
	o, err := h.engine.Run(rctx, cs[0])
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return cs[0], o
}

func withConfig(f func(*pipeline.EngineConfig)) harnessOpt {
	return func(ec *pipeline.EngineConfig, _ *fake.Config) { f(ec) }
}

// unitEvents returns the detail of every event of kind for job id.
func unitEvents(t *testing.T, h *harness, id, kind string) []map[string]any {
	t.Helper()
	evs, err := h.store.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range evs {
		if e.Kind != kind {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatalf("%s detail %s: %v", kind, e.Detail, err)
		}
		out = append(out, d)
	}
	return out
}

// spoolFiles lists the files left in a job's spool directory.
func spoolFiles(t *testing.T, h *harness, id string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(h.cfg.SpoolDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

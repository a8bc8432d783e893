package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/sync/errgroup"

	"edgepipe/client"
	"edgepipe/internal/app"
	"edgepipe/pipeline"
	"edgepipe/render"
)

// renderBench is one bench render run: what ran end to end, and where.
type renderBench struct {
	dir     string
	jobs    int
	workers int
	scenes  int
	a       *app.App
	boards  []pipeline.Storyboard
	keys    []string // the jobs' internal keys, in board order
	// spans records the deployment's spans when --stages is given.
	spans *tracetest.SpanRecorder
}

// benchRender runs N distinct storyboards end to end through a real
// deployment in this process (HTTP API, workers, SQLite, local object
// store, in-process fake providers, real ffmpeg), then the same ffmpeg work
// by hand in the same run: each job's stored scene media rendered into
// clips by the same renderer (the same commands), clips in parallel up to
// the cores, joined into a file, as many jobs at once as there were
// workers. It prints both times and their ratio.
func benchRender(ctx context.Context, args []string) error {
	return benchRenderTo(ctx, args, os.Stdout)
}

// benchRenderTo is benchRender printing to w.
func benchRenderTo(ctx context.Context, args []string, w io.Writer) error {
	fs := newFlags("bench render", "[N] [--workers 2] [--scenes 4] [--stages] [--cpuprofile FILE]", "End-to-end renders against the same ffmpeg work by hand; see edgepipe bench --help.")
	workers := fs.Int("workers", 2, "jobs run at once (EDGEPIPE_WORKERS) and by hand")
	scenes := fs.Int("scenes", 4, "scenes per storyboard (a still image and a narration each)")
	stages := fs.Bool("stages", false, "also print where the attempts' time went (their OpenTelemetry spans, recorded in memory)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this process from the deployment's start-up to the last success to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := 1
	if fs.NArg() > 0 { // N, then perhaps flags after it
		var err error
		if n, err = strconv.Atoi(fs.Arg(0)); err != nil || n < 1 || n > 500 {
			return fmt.Errorf("bench render: N must be a whole number from 1 to 500, got %q", fs.Arg(0))
		}
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("bench render: unexpected argument %q", fs.Arg(0))
		}
	}
	if *workers < 1 || *workers > 64 || *scenes < 1 || *scenes > 20 {
		return errors.New("bench render: --workers must be 1..64 and --scenes 1..20")
	}
	dir, err := os.MkdirTemp("", "edgepipe-bench-render-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &renderBench{dir: dir, jobs: n, workers: *workers, scenes: *scenes}
	if *stages {
		b.spans = tracetest.NewSpanRecorder()
	}
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	e2e, e2eCPU, err := b.endToEnd(ctx)
	if b.a != nil {
		defer b.a.Close()
	}
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	byHand, handCPU, err := b.byHand(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "bench render: %d jobs x %d scenes, %d workers, clips %d at once, load average %s\n"+
		"  edgepipe, submit to last succeeded: %8.2fs  (CPU: ffmpeg %.2fs, edgepipe's process %.2fs)\n"+
		"  same ffmpeg work by hand:           %8.2fs  (CPU: ffmpeg %.2fs, this process %.2fs)\n"+
		"  ratio edgepipe / by hand:           %8.2fx\n",
		n, *scenes, *workers, pipeline.DefaultClipConcurrency(), loadAverage(),
		e2e.Seconds(), e2eCPU.children.Seconds(), e2eCPU.self.Seconds(),
		byHand.Seconds(), handCPU.children.Seconds(), handCPU.self.Seconds(),
		e2e.Seconds()/byHand.Seconds())
	if err != nil || b.spans == nil {
		return err
	}
	return printStages(w, b.spans.Ended())
}

// stageSpans are the spans --stages sums, in the order printed: the
// attempt, its stages, and the work inside them (the README's
// Observability section lists each span).
var stageSpans = []string{"edgepipe.attempt", "edgepipe.stage.prepare", "edgepipe.stage.execute", "edgepipe.stage.apply",
	"edgepipe.stage.finalize", "edgepipe.unit", "edgepipe.provider_call", "edgepipe.upload", "edgepipe.render.process"}

// printStages prints, per span name, how many spans ended and their summed
// time. Spans that run side by side (units, clips) add up to more than
// the wall time they took.
func printStages(w io.Writer, spans []sdktrace.ReadOnlySpan) error {
	count := map[string]int{}
	total := map[string]time.Duration{}
	for _, s := range spans {
		count[s.Name()]++
		total[s.Name()] += s.EndTime().Sub(s.StartTime())
	}
	if _, err := fmt.Fprintf(w, "  where the attempts' time went (spans, summed; side-by-side spans add up):\n"); err != nil {
		return err
	}
	for _, name := range stageSpans {
		if _, err := fmt.Fprintf(w, "    %-26s %5d  %9.2fs\n", name, count[name], total[name].Seconds()); err != nil {
			return err
		}
	}
	return nil
}

// endToEnd submits the storyboards over HTTP and waits until every job
// succeeded; the time runs from the first submission to the last success
// (the time the deployment recorded it, to the millisecond), and so does
// the CPU it returns (the deployment's start-up, renderer
// set-up included, is neither timed nor counted).
func (b *renderBench) endToEnd(ctx context.Context) (_ time.Duration, _ cpuTimes, err error) {
	env := map[string]string{
		"EDGEPIPE_DATA_DIR": filepath.Join(b.dir, "data"), "EDGEPIPE_ADDR": "127.0.0.1:0",
		"EDGEPIPE_WORKERS": strconv.Itoa(b.workers), "EDGEPIPE_TOKENS": benchAPIToken + ":bench",
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := app.FromEnv(func(k string) string { return env[k] }, environ)
	if err != nil {
		return 0, cpuTimes{}, err
	}
	if b.spans != nil {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
		defer tp.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // in memory: nothing to flush
		cfg.Tracing.Provider = tp
	}
	log := slog.New(slog.DiscardHandler)
	if b.a, err = app.Open(ctx, cfg, log); err != nil {
		return 0, cpuTimes{}, err
	}
	parts, err := b.a.Build(ctx, true, false, b.workers)
	if err != nil {
		return 0, cpuTimes{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- parts.Run(runCtx, log, 30*time.Second) }()
	defer func() {
		// The deployment's own failure (a service that did not start or
		// stop) is the bench's error unless it already has one.
		stop()
		if rerr := <-ran; rerr != nil && err == nil {
			err = fmt.Errorf("bench render: the deployment: %w", rerr)
		}
	}()
	c, err := client.New(client.Config{BaseURL: "http://" + parts.Listener.Addr().String(), Token: benchAPIToken})
	if err != nil {
		return 0, cpuTimes{}, err
	}
	cpu0, start := cpuNow(), time.Now()
	ids := make([]string, b.jobs)
	for i := range b.jobs {
		sb := benchBoard(i, b.scenes)
		body := struct {
			Operation string `json:"operation"`
			pipeline.Storyboard
		}{pipeline.OperationRenderVideo, sb}
		s, err := c.Submit(ctx, fmt.Sprintf("bench-render-%d", i), body)
		if err != nil {
			return 0, cpuTimes{}, fmt.Errorf("submit job %d: %w", i, err)
		}
		ids[i] = s.Job.ID
		b.boards = append(b.boards, sb)
		b.keys = append(b.keys, pipeline.JobKey("bench", s.Job.ID))
	}
	end, err := awaitSucceeded(ctx, c, ids)
	if err != nil {
		return 0, cpuTimes{}, err
	}
	return end.Sub(start), cpuNow().since(cpu0), nil
}

// pollEvery is how often awaitSucceeded asks for a job: seldom, since the
// poller shares the machine with the renders it times, and how soon it
// sees a success is not part of the time (the job's own
// status_changed_at is).
const pollEvery = 50 * time.Millisecond

// awaitSucceeded polls until every job succeeded (or one settled
// otherwise), and returns when the last of them succeeded, as the
// deployment recorded it.
func awaitSucceeded(ctx context.Context, c *client.Client, ids []string) (time.Time, error) {
	var last time.Time
	left := append([]string(nil), ids...)
	for len(left) > 0 {
		j, err := c.Get(ctx, left[0])
		if err != nil {
			return time.Time{}, err
		}
		switch {
		case j.Status == pipeline.StatusSucceeded:
			if j.StatusChangedAt.After(last) {
				last = j.StatusChangedAt
			}
			left = left[1:]
			continue
		case j.Status.Settled():
			return time.Time{}, fmt.Errorf("job %s ended %s", j.ID, j.Status)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
	return last, nil
}

// benchBoard is storyboard i: distinct prompts and narrations, so no job
// reuses another's media or render.
func benchBoard(i, scenes int) pipeline.Storyboard {
	sb := pipeline.Storyboard{Title: fmt.Sprintf("bench render %d", i)}
	for s := range scenes {
		sb.Scenes = append(sb.Scenes, pipeline.Scene{
			ImagePrompt: fmt.Sprintf("a lighthouse at dusk, plate %d of board %d", s, i),
			Narration:   fmt.Sprintf("scene %d of board %d: the lamp turns over the water", s, i),
			DurationMS:  2000,
		})
	}
	return sb
}

// byHand runs the jobs' ffmpeg work again without edgepipe: the stored
// media are copied out and the renderers set up first (not timed, nor is
// the CPU of their ffmpeg probes counted), then clips and joins are timed.
// It returns their time and the CPU they used.
func (b *renderBench) byHand(ctx context.Context) (time.Duration, cpuTimes, error) {
	type job struct {
		r     *render.Renderer
		media [][2]string // image, audio per scene
		ms    []int
		dir   string
	}
	jobs := make([]job, len(b.keys))
	rc := b.a.Cfg.Render
	rc.Logger = slog.New(slog.DiscardHandler)
	for i, key := range b.keys {
		sb, err := b.boards[i].Normalize()
		if err != nil {
			return 0, cpuTimes{}, err
		}
		rc.Width, rc.Height = sb.Options.Size()
		rc.FPS = sb.Options.FPS
		r, err := render.New(ctx, rc)
		if err != nil {
			return 0, cpuTimes{}, err
		}
		dir := filepath.Join(b.dir, "byhand", strconv.Itoa(i))
		media, err := b.copyMedia(ctx, key, dir)
		if err != nil {
			return 0, cpuTimes{}, err
		}
		durations := make([]int, len(sb.Scenes))
		for s, sc := range sb.Scenes {
			durations[s] = sc.DurationMS
		}
		jobs[i] = job{r: r, media: media, ms: r.AlignDurations(durations), dir: dir}
	}
	cpu0, start := cpuNow(), time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(b.workers)
	for _, j := range jobs {
		g.Go(func() error { return renderByHand(gctx, j.r, j.media, j.ms, j.dir) })
	}
	if err := g.Wait(); err != nil {
		return 0, cpuTimes{}, err
	}
	took := time.Since(start)
	return took, cpuNow().since(cpu0), nil
}

// copyMedia copies job key's stored scene media into dir.
func (b *renderBench) copyMedia(ctx context.Context, key, dir string) ([][2]string, error) {
	units, err := b.a.Store.Units(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := make([][2]string, len(units))
	for _, u := range units {
		for k, art := range []string{pipeline.ArtifactImage, pipeline.ArtifactSpeech} {
			ext := map[string]string{pipeline.ArtifactImage: "png", pipeline.ArtifactSpeech: "wav"}[art]
			objKey, ok := u.Artifacts[art]
			if !ok {
				return nil, fmt.Errorf("job %s scene %d has no %s", key, u.Scene, art)
			}
			path := filepath.Join(dir, fmt.Sprintf("scene%03d.%s", u.Scene, ext))
			if err := copyObject(ctx, b.a.Objects, objKey, path); err != nil {
				return nil, err
			}
			out[u.Scene][k] = path
		}
	}
	return out, nil
}

func copyObject(ctx context.Context, objs pipeline.ObjectStore, key, path string) error {
	rc, _, err := objs.Get(ctx, key, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// renderByHand makes one job's clips (in parallel up to the cores) and
// joins them into a file.
func renderByHand(ctx context.Context, r *render.Renderer, media [][2]string, ms []int, dir string) error {
	clips := make([]string, len(media))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pipeline.DefaultClipConcurrency()) // as edgepipe renders them
	for s, m := range media {
		clips[s] = filepath.Join(dir, fmt.Sprintf("clip%03d.mov", s))
		g.Go(func() error { return r.SceneFromImage(gctx, m[0], m[1], ms[s], "", clips[s]) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "render.mp4"))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = r.Join(ctx, clips, f)
	return err
}

// loadAverage is the 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// cpuTimes is the CPU (user and system) this process used, and its
// children that ended (the ffmpeg processes), so far.
type cpuTimes struct{ self, children time.Duration }

// since is the CPU used from c0 to c.
func (c cpuTimes) since(c0 cpuTimes) cpuTimes {
	return cpuTimes{self: c.self - c0.self, children: c.children - c0.children}
}

func cpuNow() cpuTimes {
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) != nil || syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) != nil {
		return cpuTimes{}
	}
	sum := func(r syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return cpuTimes{self: sum(self), children: sum(children)}
}

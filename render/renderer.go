package render

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// binaryCheckTimeout bounds each `-version`/`-encoders` run in New: a binary
// that hangs there is as unusable as a missing one.
const binaryCheckTimeout = 15 * time.Second

// waitDelay is how long Wait gives a killed process to close its pipes
// before closing them itself.
const waitDelay = 5 * time.Second

// requiredEncoders are the ffmpeg encoders every clip and render needs. Some
// ffmpeg builds (minimal static ones, some distribution "free" builds) lack
// libx264; better to say so at startup than in the first job.
var requiredEncoders = []string{"libx264", "aac", "pcm_s16le", "mov_text"}

// Renderer runs ffmpeg and ffprobe. It holds no per-job state and is safe for
// concurrent use; each method starts its own processes.
type Renderer struct {
	cfg            Config
	log            *slog.Logger
	tracer         trace.Tracer
	ffmpegVersion  string
	ffprobeVersion string
	// made is what this Renderer knows of the clips it wrote (Join skips
	// probing them).
	made *madeClips
}

// New validates cfg and checks that both binaries exist, run, and (ffmpeg)
// have the encoders clips need. A missing binary is a *BinaryError matching
// ErrBinaryNotFound whose message names the package to install.
func New(ctx context.Context, cfg Config) (*Renderer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ffmpeg, ffmpegVersion, err := checkBinary(ctx, "ffmpeg", cfg.FFmpegPath, EnvFFmpeg)
	if err != nil {
		return nil, err
	}
	ffprobe, ffprobeVersion, err := checkBinary(ctx, "ffprobe", cfg.FFprobePath, EnvFFprobe)
	if err != nil {
		return nil, err
	}
	if err := checkEncoders(ctx, ffmpeg, cfg.FFmpegPath); err != nil {
		return nil, err
	}
	// Keep the resolved paths: a later change of PATH must not swap binaries
	// under a running service.
	cfg.FFmpegPath, cfg.FFprobePath = ffmpeg, ffprobe
	r := &Renderer{cfg: cfg, log: cfg.Logger, tracer: cfg.TracerProvider.Tracer(TracerName), ffmpegVersion: ffmpegVersion, ffprobeVersion: ffprobeVersion, made: newMadeClips()}
	r.log.Debug("render: ready", "ffmpeg", ffmpeg, "ffmpeg_version", ffmpegVersion,
		"ffprobe", ffprobe, "size", fmt.Sprintf("%dx%d", cfg.Width, cfg.Height), "fps", cfg.FPS, "sample_rate", cfg.SampleRate)
	return r, nil
}

// Config returns the effective configuration (defaults applied, binary
// paths resolved).
func (r *Renderer) Config() Config { return r.cfg }

// clipFormatVersion changes whenever the clip command changes the clips it
// makes (codec, container, filters).
const clipFormatVersion = "clip-v1"

// ClipFingerprint is a short, stable digest of everything that decides a
// clip's codec parameters and bytes: the clip format, size, frame rate,
// sample rate, encoder settings and the ffmpeg version. Put it in the object
// key of stored scene clips, so that a clip made under another configuration
// or ffmpeg build is never reused for a join (Join would refuse the mix).
func (r *Renderer) ClipFingerprint() string {
	c := r.cfg
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%dx%d|%dfps|%dHz|%s|crf%d|gop%d|%s",
		clipFormatVersion, c.Width, c.Height, c.FPS, c.SampleRate, c.Preset, c.CRF, c.GOPSeconds, r.ffmpegVersion))
	return hex.EncodeToString(sum[:8])
}

// Versions returns the first line of `ffmpeg -version` and `ffprobe -version`.
func (r *Renderer) Versions() (ffmpeg, ffprobe string) { return r.ffmpegVersion, r.ffprobeVersion }

func checkBinary(ctx context.Context, tool, path, env string) (resolved, version string, err error) {
	resolved, err = exec.LookPath(path)
	if err != nil {
		return "", "", &BinaryError{Tool: tool, Path: path, Env: env, Problem: "not found", Err: fmt.Errorf("%w: %w", ErrBinaryNotFound, err)}
	}
	out, err := quickOutput(ctx, resolved, "-version")
	if err != nil {
		return "", "", &BinaryError{Tool: tool, Path: path, Env: env, Problem: "does not run", Err: fmt.Errorf("%w: %w", ErrBinaryUnusable, err)}
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, tool+" version") {
		return "", "", &BinaryError{Tool: tool, Path: path, Env: env, Problem: "is not " + tool, Err: ErrBinaryUnusable}
	}
	return resolved, strings.TrimSpace(first), nil
}

func checkEncoders(ctx context.Context, ffmpeg, configured string) error {
	out, err := quickOutput(ctx, ffmpeg, "-hide_banner", "-encoders")
	if err != nil {
		return &BinaryError{Tool: "ffmpeg", Path: configured, Env: EnvFFmpeg, Problem: "cannot list its encoders", Err: fmt.Errorf("%w: %w", ErrBinaryUnusable, err)}
	}
	have := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		// " V....D libx264   libx264 H.264 / AVC ..." — flags, then the name.
		if f := strings.Fields(sc.Text()); len(f) >= 2 {
			have[f[1]] = true
		}
	}
	for _, enc := range requiredEncoders {
		if !have[enc] {
			return &BinaryError{Tool: "ffmpeg", Path: configured, Env: EnvFFmpeg, Problem: "lacks the encoder " + enc, Err: ErrBinaryUnusable}
		}
	}
	return nil
}

func quickOutput(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, binaryCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = waitDelay
	cmd.Env = processEnv()
	out, err := cmd.Output()
	return string(out), err
}

// processEnv is the parent's environment with colours off, so stderr holds
// plain text.
func processEnv() []string {
	return append(os.Environ(), "AV_LOG_FORCE_NOCOLOR=1")
}

// command prepares a process that dies with ctx and whose stderr tail is
// kept. Stdin is /dev/null: ffmpeg must never wait for a keypress.
func (r *Renderer) command(ctx context.Context, bin string, args []string) (*exec.Cmd, *tailBuffer) {
	return stderrCommand(ctx, bin, args, r.cfg.StderrLimit)
}

// stderrCommand is command without a Renderer. exec drains stderr into the
// tail buffer on its own goroutine, which Wait joins, so a chatty process
// never blocks on a full pipe.
func stderrCommand(ctx context.Context, bin string, args []string, stderrLimit int) (*exec.Cmd, *tailBuffer) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = processEnv()
	cmd.WaitDelay = waitDelay
	tail := newTailBuffer(stderrLimit)
	cmd.Stderr = tail
	return cmd, tail
}

// runFFmpeg runs ffmpeg to completion, discarding stdout.
func (r *Renderer) runFFmpeg(ctx context.Context, op string, args []string, redact []redaction) (err error) {
	ctx, span := r.startProcess(ctx, "ffmpeg", op)
	defer func() { endProcess(span, err) }()
	cmd, tail := r.command(ctx, r.cfg.FFmpegPath, args)
	cmd.Stdout = io.Discard
	start := time.Now()
	err = cmd.Run()
	r.logStderr(ctx, op, tail, redact, time.Since(start))
	return processFailure(ctx, "ffmpeg", op, err, tail, redact)
}

// TracerName is the instrumentation scope of the render package's spans.
const TracerName = "edgepipe/render"

// Span name and attribute keys of a process span (README "Tracing").
const (
	SpanProcess      = "edgepipe.render.process"
	AttrCommand      = attribute.Key("edgepipe.render.command")
	AttrPurpose      = attribute.Key("edgepipe.render.purpose")
	AttrExitCode     = attribute.Key("process.exit.code")
	exitCodeNotKnown = -1
)

// startProcess starts the span of one process run: tool is the command
// (ffmpeg), purpose what it makes (image_scene, video_scene, join).
func (r *Renderer) startProcess(ctx context.Context, tool, purpose string) (context.Context, trace.Span) {
	return r.tracer.Start(ctx, SpanProcess, trace.WithAttributes(AttrCommand.String(tool), AttrPurpose.String(purpose)))
}

// endProcess records the process's exit code on span (0 for success, -1
// when it never exited on its own: not started, killed by us) and ends it.
func endProcess(span trace.Span, err error) {
	defer span.End()
	code := 0
	var pe *ProcessError
	switch {
	case errors.As(err, &pe):
		code = pe.ExitCode
	case err != nil:
		code = exitCodeNotKnown
	}
	span.SetAttributes(AttrExitCode.Int(code))
	if err != nil {
		span.SetStatus(codes.Error, "process failed")
	}
}

// processFailure turns the result of Run/Wait into this package's errors:
// nil, the context's error when ctx ended (the kill was ours), a
// *ProcessError for a non-zero exit, or a wrapped start failure.
func processFailure(ctx context.Context, tool, op string, err error, tail *tailBuffer, redact []redaction) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("render: %s %s: %w", tool, op, context.Cause(ctx))
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return &ProcessError{Tool: tool, Op: op, ExitCode: exitErr.ExitCode(), Summary: summarize(tail.String(), redact)}
	}
	return fmt.Errorf("render: %s %s: %w", tool, op, err)
}

func (r *Renderer) logStderr(ctx context.Context, op string, tail *tailBuffer, redact []redaction, took time.Duration) {
	if !r.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	r.log.DebugContext(ctx, "render: ffmpeg finished", "op", op, "took", took, "stderr", summarize(tail.String(), redact))
}

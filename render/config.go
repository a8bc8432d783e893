package render

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
)

// The settings (environment variables) that set FFmpegPath, FFprobePath and
// Preset; internal/app reads them. They are named in the startup error when a
// binary is missing.
const (
	EnvFFmpeg  = "EDGEPIPE_FFMPEG"
	EnvFFprobe = "EDGEPIPE_FFPROBE"
	EnvPreset  = "EDGEPIPE_RENDER_PRESET"
)

// Defaults. 1280x720 at 25 fps with 48 kHz audio:
//   - 720p keeps the detail of ~1024 px generated images and is what every
//     player and phone expects; the render cost is modest because most scenes
//     are still images, which x264 compresses almost for free.
//   - 25 fps makes a frame exactly 40 ms, so millisecond scene durations map
//     to frames without fractions, and 48000/25 = 1920 audio samples per
//     frame, so every clip's audio can be cut to exactly its video length.
//   - 48 kHz is the native rate of the speech provider and of AAC in MP4.
const (
	DefaultFFmpegPath       = "ffmpeg"
	DefaultFFprobePath      = "ffprobe"
	DefaultWidth            = 1280
	DefaultHeight           = 720
	DefaultFPS              = 25
	DefaultSampleRate       = 48000
	DefaultPreset           = "veryfast"
	DefaultCRF              = 23
	DefaultAudioBitrate     = 128_000
	DefaultGOPSeconds       = 2
	DefaultMaxSceneDuration = 10 * time.Minute
	DefaultStderrLimit      = 64 << 10
	DefaultProbeConcurrency = 4
)

// x264 presets, fastest first.
var x264Presets = []string{"ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"}

// aacSampleRates are the rates ffmpeg's native AAC encoder accepts.
var aacSampleRates = []int{7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000}

// Config configures a Renderer. The zero value is usable: WithDefaults fills
// every unset field.
type Config struct {
	// FFmpegPath and FFprobePath are looked up in PATH when they contain no
	// slash. Defaults "ffmpeg" and "ffprobe".
	FFmpegPath  string
	FFprobePath string

	// Output geometry and timing shared by every clip; clips made with
	// different values cannot be joined (Join refuses them).
	Width, Height int
	FPS           int
	SampleRate    int

	// Preset is the x264 preset (default veryfast); CRF its quality (default
	// 23, lower is better). AudioBitrate is the AAC bit rate of the render in
	// bits per second (default 128000).
	Preset       string
	CRF          int
	AudioBitrate int

	// GOPSeconds is the keyframe interval (default 2 s). Every clip also
	// starts on a keyframe. It bounds the size of a fragment in the render.
	GOPSeconds int

	// MaxSceneDuration refuses absurd scene lengths (default 10 min).
	MaxSceneDuration time.Duration

	// TempDir holds the small files ffmpeg needs (caption SRT, concat list).
	// Default os.TempDir().
	TempDir string

	// StderrLimit bounds how much of a process's stderr is kept (the tail).
	StderrLimit int

	// ProbeConcurrency bounds the ffprobe processes Join runs to check clips.
	ProbeConcurrency int

	// Logger receives debug lines about commands and ffmpeg warnings. nil
	// discards.
	Logger *slog.Logger

	// TracerProvider makes a span per ffmpeg process (SpanProcess); nil
	// is the noop provider.
	TracerProvider trace.TracerProvider
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.FFmpegPath = cmp.Or(c.FFmpegPath, DefaultFFmpegPath)
	c.FFprobePath = cmp.Or(c.FFprobePath, DefaultFFprobePath)
	if c.Width == 0 && c.Height == 0 {
		c.Width, c.Height = DefaultWidth, DefaultHeight
	}
	c.FPS = cmp.Or(c.FPS, DefaultFPS)
	c.SampleRate = cmp.Or(c.SampleRate, DefaultSampleRate)
	c.Preset = cmp.Or(c.Preset, DefaultPreset)
	c.CRF = cmp.Or(c.CRF, DefaultCRF)
	c.AudioBitrate = cmp.Or(c.AudioBitrate, DefaultAudioBitrate)
	c.GOPSeconds = cmp.Or(c.GOPSeconds, DefaultGOPSeconds)
	c.MaxSceneDuration = cmp.Or(c.MaxSceneDuration, DefaultMaxSceneDuration)
	c.TempDir = cmp.Or(c.TempDir, os.TempDir())
	c.StderrLimit = cmp.Or(c.StderrLimit, DefaultStderrLimit)
	c.ProbeConcurrency = cmp.Or(c.ProbeConcurrency, DefaultProbeConcurrency)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.TracerProvider = tracing.Or(c.TracerProvider)
	return c
}

// Validate refuses a configuration that could not produce joinable clips.
// It checks values only; New checks that the binaries exist and run.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("render: config: %w: %s", pipeline.ErrInvalidInput, fmt.Sprintf(format, args...))
	}
	switch {
	case c.FFmpegPath == "" || c.FFprobePath == "":
		return bad("FFmpegPath and FFprobePath must be set")
	case c.Width < 16 || c.Height < 16 || c.Width > 7680 || c.Height > 4320:
		return bad("size %dx%d outside 16x16..7680x4320", c.Width, c.Height)
	case c.Width%2 != 0 || c.Height%2 != 0:
		// yuv420p halves chroma in both directions.
		return bad("size %dx%d must be even for yuv420p", c.Width, c.Height)
	case c.FPS < 1 || c.FPS > 120:
		return bad("FPS %d outside 1..120", c.FPS)
	case !slices.Contains(aacSampleRates, c.SampleRate):
		return bad("SampleRate %d is not an AAC sample rate", c.SampleRate)
	case c.SampleRate%c.FPS != 0:
		// Otherwise a frame holds a fractional number of samples and a clip's
		// audio could not end exactly where its video ends.
		return bad("SampleRate %d must be a multiple of FPS %d", c.SampleRate, c.FPS)
	case !slices.Contains(x264Presets, c.Preset):
		return bad("Preset %q is not an x264 preset", c.Preset)
	case c.CRF < 0 || c.CRF > 51:
		return bad("CRF %d outside 0..51", c.CRF)
	case c.AudioBitrate < 16_000 || c.AudioBitrate > 512_000:
		return bad("AudioBitrate %d outside 16000..512000", c.AudioBitrate)
	case c.GOPSeconds < 1 || c.GOPSeconds > 10:
		return bad("GOPSeconds %d outside 1..10", c.GOPSeconds)
	case c.MaxSceneDuration <= 0:
		return bad("MaxSceneDuration must be positive")
	case c.StderrLimit < 1024:
		return bad("StderrLimit %d below 1024", c.StderrLimit)
	case c.ProbeConcurrency < 1:
		return bad("ProbeConcurrency must be at least 1")
	case c.Logger == nil:
		return bad("Logger is nil (use WithDefaults)")
	}
	if fi, err := os.Stat(c.TempDir); err != nil || !fi.IsDir() {
		return bad("TempDir %q is not a directory", c.TempDir)
	}
	return nil
}

func (c Config) gop() string { return strconv.Itoa(c.FPS * c.GOPSeconds) }

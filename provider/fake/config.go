package fake

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"edgepipe/pipeline"
)

// The settings (environment variables) of the in-process fake that
// `edgepipe` starts by default; internal/app reads them.
const (
	EnvFaults          = "EDGEPIPE_FAKE_FAULTS"           // fault spec, see FaultsHelp
	EnvSeed            = "EDGEPIPE_FAKE_SEED"             // uint64; unset or 0 picks a random seed (logged)
	EnvVideoProcessing = "EDGEPIPE_FAKE_VIDEO_PROCESSING" // Go duration, e.g. 200ms
)

// Defaults.
const (
	DefaultVideoProcessing   = 200 * time.Millisecond
	DefaultRenderConcurrency = 2
	DefaultFFmpegPath        = "ffmpeg"
)

// Config configures a Server. The zero value is usable: no faults, a random
// seed, ffmpeg from $PATH, 200 ms video processing, the system clock and a
// discarding logger.
type Config struct {
	// Faults to inject; change them later with Server.SetFaults.
	Faults Faults
	// Seed of the fault generator. 0 picks a random seed, which the server
	// logs and Server.Seed reports, so a failing run can be replayed.
	Seed uint64
	// FFmpegPath is the ffmpeg binary used to render videos ("" = "ffmpeg"
	// from $PATH).
	FFmpegPath string
	// RequireFFmpeg makes New fail when ffmpeg cannot be found. Otherwise New
	// logs a warning, VideoUnavailable reports the reason and POST /v1/videos
	// answers 503.
	RequireFFmpeg bool
	// VideoProcessing is how long, on Clock, a video job takes from submit to
	// "succeeded" (0 = DefaultVideoProcessing; use a negative value for
	// "as soon as the file is rendered").
	VideoProcessing time.Duration
	// RenderConcurrency bounds concurrent ffmpeg processes (0 = 2).
	RenderConcurrency int
	// CacheDir holds rendered videos. "" creates a temporary directory that
	// Close removes.
	CacheDir string
	// Clock drives video progress (nil = the system clock). Injected latency
	// always sleeps in real time.
	Clock pipeline.Clock
	// Logger receives debug lines per request and warnings (nil = discard).
	Logger *slog.Logger
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.Faults.Validate(); err != nil {
		return err
	}
	if c.RenderConcurrency < 0 {
		return fmt.Errorf("%w: fake: render concurrency must not be negative, got %d", pipeline.ErrInvalidInput, c.RenderConcurrency)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.FFmpegPath = cmp.Or(c.FFmpegPath, DefaultFFmpegPath)
	switch {
	case c.VideoProcessing == 0:
		c.VideoProcessing = DefaultVideoProcessing
	case c.VideoProcessing < 0:
		c.VideoProcessing = 0
	}
	c.RenderConcurrency = cmp.Or(c.RenderConcurrency, DefaultRenderConcurrency)
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

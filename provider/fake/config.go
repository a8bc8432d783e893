package fake

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"edgepipe/pipeline"
)

// Environment variables read by ConfigFromEnv (the in-process fake that
// `edgepipe` starts by default).
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
	if c.FFmpegPath == "" {
		c.FFmpegPath = DefaultFFmpegPath
	}
	switch {
	case c.VideoProcessing == 0:
		c.VideoProcessing = DefaultVideoProcessing
	case c.VideoProcessing < 0:
		c.VideoProcessing = 0
	}
	if c.RenderConcurrency == 0 {
		c.RenderConcurrency = DefaultRenderConcurrency
	}
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ConfigFromEnv builds a Config from EnvFaults, EnvSeed and
// EnvVideoProcessing, read through getenv (pass os.Getenv). Unset variables
// keep the defaults. Errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if v := getenv(EnvFaults); strings.TrimSpace(v) != "" {
		f, err := ParseFaults(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", EnvFaults, err)
		}
		c.Faults = f
	}
	if v := strings.TrimSpace(getenv(EnvSeed)); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s=%q is not an unsigned integer", pipeline.ErrInvalidInput, EnvSeed, v)
		}
		c.Seed = seed
	}
	if v := strings.TrimSpace(getenv(EnvVideoProcessing)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return Config{}, fmt.Errorf("%w: %s=%q is not a non-negative duration (e.g. 200ms)", pipeline.ErrInvalidInput, EnvVideoProcessing, v)
		}
		if d == 0 {
			d = -1 // explicit 0: no artificial processing time
		}
		c.VideoProcessing = d
	}
	return c, nil
}

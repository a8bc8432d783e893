// Package app turns EDGEPIPE_* settings into a running edgepipe: it opens the
// stores, starts the fake providers when no provider URL is set, and wires
// the engine, workers, sweeper, webhook dispatcher and HTTP API. cmd/edgepipe
// stays a thin layer of flags over it.
package app

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Known lists every EDGEPIPE_* setting. Start-up refuses any other, so a
// typo is an error and not a silently ignored setting.
var Known = []string{
	"EDGEPIPE_ADDR", "EDGEPIPE_DATA_DIR", "EDGEPIPE_STORE", "EDGEPIPE_OBJECTS_DIR",
	"EDGEPIPE_S3_ENDPOINT", "EDGEPIPE_S3_PUBLIC_ENDPOINT", "EDGEPIPE_S3_BUCKET", "EDGEPIPE_S3_ACCESS_KEY",
	"EDGEPIPE_S3_SECRET_KEY", "EDGEPIPE_S3_REGION", "EDGEPIPE_S3_PREFIX", "EDGEPIPE_S3_CREATE_BUCKET",
	"EDGEPIPE_S3_PATH_STYLE", "EDGEPIPE_S3_PART_SIZE_MIB", "EDGEPIPE_S3_CONCURRENCY", "EDGEPIPE_S3_SIGN_PAYLOAD",
	"EDGEPIPE_BINDINGS", "EDGEPIPE_WORKERS", "EDGEPIPE_UNIT_CONCURRENCY", "EDGEPIPE_TOKENS", "EDGEPIPE_ADMIN_TOKEN",
	"EDGEPIPE_PROVIDER_URL", "EDGEPIPE_PROVIDER_TIMEOUT",
	"EDGEPIPE_PROVIDER", "EDGEPIPE_PROVIDER_IMAGE", "EDGEPIPE_PROVIDER_SPEECH", "EDGEPIPE_PROVIDER_VIDEO",
	"EDGEPIPE_CF_ACCOUNT_ID", "EDGEPIPE_CF_API_TOKEN", "EDGEPIPE_CF_API_BASE", "EDGEPIPE_CF_MODEL_IMAGE", "EDGEPIPE_CF_MODEL_SPEECH",
	"EDGEPIPE_REPLICATE_API_TOKEN", "EDGEPIPE_REPLICATE_API_BASE",
	"EDGEPIPE_REPLICATE_MODEL_IMAGE", "EDGEPIPE_REPLICATE_MODEL_SPEECH", "EDGEPIPE_REPLICATE_MODEL_VIDEO",
	"EDGEPIPE_FAKE_FAULTS", "EDGEPIPE_FAKE_SEED", "EDGEPIPE_FAKE_VIDEO_PROCESSING",
	"EDGEPIPE_FFMPEG", "EDGEPIPE_FFPROBE", "EDGEPIPE_RENDER_PRESET",
	"EDGEPIPE_LEASE", "EDGEPIPE_SWEEP_INTERVAL", "EDGEPIPE_SWEEP_GRACE", "EDGEPIPE_DLQ_RETENTION",
	"EDGEPIPE_RETRY_BASE", "EDGEPIPE_RETRY_CAP", "EDGEPIPE_RETRY_MAX_ATTEMPTS",
	"EDGEPIPE_INFRA_RETRY_WINDOW", "EDGEPIPE_INFRA_RETRY_CAP",
	"EDGEPIPE_FAILPOINTS", "EDGEPIPE_LOG_LEVEL", "EDGEPIPE_WEBHOOK_SECRET", "EDGEPIPE_ALLOW_PRIVATE_WEBHOOKS",
	api.EnvHTTPReadHeaderTimeout, api.EnvHTTPReadTimeout, api.EnvHTTPIdleTimeout, api.EnvHTTPMaxConns, api.EnvSSEMaxAge,
	"EDGEPIPE_URL", "EDGEPIPE_TOKEN", // client commands (submit, status, ...)
	"EDGEPIPE_MINIO_BIN", "EDGEPIPE_BASE_IMAGE", "EDGEPIPE_MINIO_IMAGE", "EDGEPIPE_IMAGE", // tests and images
	"EDGEPIPE_TEST_DEBUG", "EDGEPIPE_CHROMIUM",
	"EDGEPIPE_DATABASE_URL", "EDGEPIPE_TEST_DATABASE_URL", // job store (database.go); the Postgres tests' server
}

// Config is the whole configuration of a process.
type Config struct {
	Addr       string
	DataDir    string
	Store      string // fs | s3
	ObjectsDir string
	Routing    routing.Config
	Workers    int
	// UnitConcurrency bounds the scenes one job generates at once.
	UnitConcurrency int
	Tokens          map[string]string
	AdminToken      string
	// ProviderURL empty → in-process fake providers on loopback.
	ProviderURL   string
	LeaseFor      time.Duration
	SweepInterval time.Duration
	SweepGrace    time.Duration
	// DeadLetterRetention is how long the sweeper keeps dead letters that
	// were redriven or discarded (0: forever).
	DeadLetterRetention time.Duration
	RetryBase           time.Duration
	RetryCap            time.Duration
	RetryMax            int
	// InfraWindow and InfraCap are the infrastructure budget
	// (pipeline.RetryPolicy).
	InfraWindow   time.Duration
	InfraCap      time.Duration
	Failpoints    string
	LogLevel      slog.Level
	WebhookSecret string
	AllowPrivate  bool
	// HTTP bounds the API server's connections (EDGEPIPE_HTTP_*).
	HTTP api.HTTPConfig
	// SSEMaxAge ends event streams after this long (EDGEPIPE_SSE_MAX_AGE).
	SSEMaxAge time.Duration

	getenv func(string) string
}

// Getenv returns the raw setting (for the packages that read their own).
func (c Config) Getenv(k string) string { return c.getenv(k) }

// SweeperRetention is DeadLetterRetention as pipeline.SweeperConfig wants
// it: there 0 means the default and a negative value keeps forever.
func (c Config) SweeperRetention() time.Duration {
	if c.DeadLetterRetention == 0 {
		return -1
	}
	return c.DeadLetterRetention
}

// DBPath is the SQLite file.
func (c Config) DBPath() string { return filepath.Join(c.DataDir, "edgepipe.db") }

// FromEnv reads and validates every setting. environ is os.Environ(), used
// to refuse unknown EDGEPIPE_* names.
func FromEnv(getenv func(string) string, environ []string) (Config, error) {
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "EDGEPIPE_") && !slices.Contains(Known, k) {
			return Config{}, fmt.Errorf("%s: unknown setting (known: %s)", k, strings.Join(sorted(Known), ", "))
		}
	}
	c := Config{getenv: getenv}
	c.Addr = or(getenv("EDGEPIPE_ADDR"), "127.0.0.1:8080")
	c.DataDir = or(getenv("EDGEPIPE_DATA_DIR"), "./data")
	c.Store = or(getenv("EDGEPIPE_STORE"), "fs")
	if c.Store != "fs" && c.Store != "s3" {
		return c, fmt.Errorf("EDGEPIPE_STORE: must be fs or s3, got %q", c.Store)
	}
	c.ObjectsDir = or(getenv("EDGEPIPE_OBJECTS_DIR"), filepath.Join(c.DataDir, "objects"))
	if err := checkDatabaseURL(getenv("EDGEPIPE_DATABASE_URL")); err != nil {
		return c, err
	}
	var err error
	if c.Routing, err = routing.ConfigFromEnv(getenv); err != nil {
		return c, err
	}
	if c.UnitConcurrency, err = intSetting(getenv, "EDGEPIPE_UNIT_CONCURRENCY", pipeline.DefaultUnitConcurrency, 1, 64); err != nil {
		return c, err
	}
	if c.Workers, err = intSetting(getenv, "EDGEPIPE_WORKERS", 2, 0, 256); err != nil {
		return c, err
	}
	if c.Tokens, err = api.ParseTokens(getenv("EDGEPIPE_TOKENS")); err != nil {
		return c, err
	}
	c.AdminToken = getenv("EDGEPIPE_ADMIN_TOKEN")
	c.ProviderURL = getenv("EDGEPIPE_PROVIDER_URL")
	for _, d := range []struct {
		name string
		dst  *time.Duration
		def  time.Duration
		min  time.Duration
	}{
		{"EDGEPIPE_LEASE", &c.LeaseFor, pipeline.DefaultLeaseFor, time.Second},
		{"EDGEPIPE_SWEEP_INTERVAL", &c.SweepInterval, pipeline.DefaultSweepInterval, time.Second},
		{"EDGEPIPE_SWEEP_GRACE", &c.SweepGrace, pipeline.DefaultSweepGrace, 0},
		{"EDGEPIPE_DLQ_RETENTION", &c.DeadLetterRetention, pipeline.DefaultDeadLetterRetention, 0},
		{"EDGEPIPE_RETRY_BASE", &c.RetryBase, pipeline.DefaultRetryPolicy().Base, time.Millisecond},
		{"EDGEPIPE_RETRY_CAP", &c.RetryCap, pipeline.DefaultRetryPolicy().Cap, time.Millisecond},
		{"EDGEPIPE_INFRA_RETRY_WINDOW", &c.InfraWindow, pipeline.DefaultInfraWindow, time.Second},
		{"EDGEPIPE_INFRA_RETRY_CAP", &c.InfraCap, pipeline.DefaultInfraCap, time.Millisecond},
		{api.EnvHTTPReadHeaderTimeout, &c.HTTP.ReadHeaderTimeout, api.DefaultReadHeaderTimeout, 100 * time.Millisecond},
		{api.EnvHTTPReadTimeout, &c.HTTP.ReadTimeout, api.DefaultReadTimeout, 100 * time.Millisecond},
		{api.EnvHTTPIdleTimeout, &c.HTTP.IdleTimeout, api.DefaultIdleTimeout, 100 * time.Millisecond},
		{api.EnvSSEMaxAge, &c.SSEMaxAge, api.DefaultSSEMaxAge, time.Second},
	} {
		if *d.dst, err = durationSetting(getenv, d.name, d.def, d.min); err != nil {
			return c, err
		}
	}
	if c.RetryMax, err = intSetting(getenv, "EDGEPIPE_RETRY_MAX_ATTEMPTS", pipeline.DefaultRetryPolicy().MaxAttempts, 1, 100); err != nil {
		return c, err
	}
	if c.HTTP.MaxConns, err = intSetting(getenv, api.EnvHTTPMaxConns, api.DefaultMaxConns, 1, api.MaxMaxConns); err != nil {
		return c, err
	}
	if err := c.HTTP.Validate(); err != nil {
		return c, err
	}
	if c.RetryCap < c.RetryBase {
		return c, fmt.Errorf("EDGEPIPE_RETRY_CAP: %s is below EDGEPIPE_RETRY_BASE %s", c.RetryCap, c.RetryBase)
	}
	c.Failpoints = getenv("EDGEPIPE_FAILPOINTS")
	switch strings.ToLower(or(getenv("EDGEPIPE_LOG_LEVEL"), "info")) {
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "info":
		c.LogLevel = slog.LevelInfo
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		return c, fmt.Errorf("EDGEPIPE_LOG_LEVEL: must be debug, info, warn or error, got %q", getenv("EDGEPIPE_LOG_LEVEL"))
	}
	c.WebhookSecret = getenv("EDGEPIPE_WEBHOOK_SECRET")
	if c.AllowPrivate, err = boolSetting(getenv, "EDGEPIPE_ALLOW_PRIVATE_WEBHOOKS"); err != nil {
		return c, err
	}
	return c, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

func intSetting(getenv func(string) string, name string, def, lo, hi int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: must be a whole number from %d to %d, got %q", name, lo, hi, v)
	}
	return n, nil
}

func durationSetting(getenv func(string) string, name string, def, lo time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo {
		return 0, fmt.Errorf("%s: must be a duration like 30s or 5m of at least %s, got %q", name, lo, v)
	}
	return d, nil
}

func boolSetting(getenv func(string) string, name string) (bool, error) {
	switch strings.ToLower(getenv(name)) {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	}
	return false, fmt.Errorf("%s: must be true or false, got %q", name, getenv(name))
}

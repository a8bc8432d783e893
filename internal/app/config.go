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

	"go.opentelemetry.io/otel/trace"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
	"edgepipe/provider/replicate"
	"edgepipe/provider/workersai"
	"edgepipe/render"
	"edgepipe/routing"
	"edgepipe/storage/s3"
)

// Known lists every EDGEPIPE_* setting: each name the parsers of this file
// read (found by running them on an empty environment, so the list cannot
// drift from the code) and the settings of tests and image builds. Start-up
// refuses any other EDGEPIPE_* name, so a typo is an error and not a
// silently ignored setting. README's table lists exactly these
// (readme_test.go).
var Known = knownSettings()

// testSettings are read by tests and image builds, not by a process.
var testSettings = []string{
	"EDGEPIPE_MINIO_BIN", "EDGEPIPE_BASE_IMAGE", "EDGEPIPE_MINIO_IMAGE", "EDGEPIPE_IMAGE", "EDGEPIPE_POSTGRES_IMAGE", "EDGEPIPE_TEST_DEBUG", "EDGEPIPE_CHROMIUM",
	"EDGEPIPE_TEST_DATABASE_URL", // the Postgres tests' server
}

// readNames is every setting name the parsers read, in reading order:
// FromEnv's and those of the parts that read theirs only when built.
func readNames() []string {
	var names []string
	record := func(k string) string {
		if !slices.Contains(names, k) {
			names = append(names, k)
		}
		return ""
	}
	_, _ = parse(record)
	_, _ = ProviderSettings(record)
	_, _ = FakeSettings(record)
	_, _ = s3Settings(record, nil)
	return names
}

func knownSettings() []string {
	var out []string
	for _, k := range append(readNames(), testSettings...) {
		if strings.HasPrefix(k, "EDGEPIPE_") {
			out = append(out, k)
		}
	}
	return out
}

// EnvRateLimits is the shared provider rate limits' setting
// (pipeline.RateLimitsSyntax).
const EnvRateLimits = "EDGEPIPE_RATE_LIMITS"

// EnvProofMaxAge is how old a probe's proof may be (pipeline.DefaultProofMaxAge).
const EnvProofMaxAge = "EDGEPIPE_PROOF_MAX_AGE"

// Config is the whole configuration of a process.
type Config struct {
	Addr       string
	DataDir    string
	Store      string // fs | s3
	ObjectsDir string
	Routing    routing.Config
	Workers    int
	// TenantMaxRunning is how many jobs of one tenant run at once across
	// every worker (0: no limit).
	TenantMaxRunning int
	// UnitConcurrency bounds the scenes one job generates at once.
	UnitConcurrency int
	// ClipConcurrency bounds the clips one job renders at once.
	ClipConcurrency int
	Tokens          map[string]string
	AdminToken      string
	// ProviderURL empty → in-process fake providers on loopback.
	ProviderURL string
	LeaseFor    time.Duration
	// WorkerPoll is how long an idle worker waits before fetching again
	// (EDGEPIPE_WORKER_POLL); the store's wake-ups end the wait early.
	WorkerPoll    time.Duration
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
	InfraWindow time.Duration
	InfraCap    time.Duration
	// ProofMaxAge is how long a probe's proof lets an operation run under
	// idempotent_verified (pipeline.EffectiveContract).
	ProofMaxAge   time.Duration
	Failpoints    string
	LogLevel      slog.Level
	WebhookSecret string
	AllowPrivate  bool
	// HTTP bounds the API server's connections (EDGEPIPE_HTTP_*).
	HTTP api.HTTPConfig
	// SSEMaxAge ends event streams after this long (EDGEPIPE_SSE_MAX_AGE).
	SSEMaxAge time.Duration
	// Render is ffmpeg's configuration (EDGEPIPE_FFMPEG, EDGEPIPE_FFPROBE,
	// EDGEPIPE_RENDER_PRESET); the other fields keep render's defaults.
	Render render.Config
	// ProviderRouting chooses a provider kind per operation
	// (EDGEPIPE_PROVIDER*); checked when providers are built.
	ProviderRouting provider.RoutingConfig
	// WorkersAI and Replicate configure those providers
	// (EDGEPIPE_CF_*, EDGEPIPE_REPLICATE_*); checked by their New.
	WorkersAI workersai.Config
	Replicate replicate.Config
	// RateLimits are the provider limits every worker shares through the
	// job store (EDGEPIPE_RATE_LIMITS; empty: none).
	RateLimits []pipeline.RateLimit
	// ClientURL and ClientToken are the client commands' server and token
	// (EDGEPIPE_URL, EDGEPIPE_TOKEN).
	ClientURL, ClientToken string
	// Tracing is OpenTelemetry tracing (the standard OTEL_* settings: off
	// unless asked for; tracingSettings).
	Tracing TracingConfig

	// getenv reads the settings whose errors matter only to the part that
	// uses them (ProviderSettings, FakeSettings, S3Settings).
	getenv func(string) string
}

// ProviderSettings is the provider client's configuration
// (EDGEPIPE_PROVIDER_URL, EDGEPIPE_PROVIDER_TIMEOUT).
func (c Config) ProviderSettings() (provider.Config, error) { return ProviderSettings(c.getenv) }

// FakeSettings is the in-process fake providers' configuration
// (EDGEPIPE_FAKE_*).
func (c Config) FakeSettings() (fake.Config, error) { return FakeSettings(c.getenv) }

// S3Settings is the s3 object store's configuration (EDGEPIPE_S3_*).
func (c Config) S3Settings(log *slog.Logger) (s3.Config, error) { return s3Settings(c.getenv, log) }

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
	return parse(getenv)
}

// maxTenantMaxRunning bounds EDGEPIPE_TENANT_MAX_RUNNING (any larger
// value is as good as no limit).
const maxTenantMaxRunning = 1_000_000

// parse reads every setting of Config; it reads each name whatever the
// values, so readNames can list them.
func parse(getenv func(string) string) (Config, error) {
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
	if c.Routing, err = routingSettings(getenv); err != nil {
		return c, err
	}
	if c.UnitConcurrency, err = intSetting(getenv, "EDGEPIPE_UNIT_CONCURRENCY", pipeline.DefaultUnitConcurrency, 1, 64); err != nil {
		return c, err
	}
	if c.ClipConcurrency, err = intSetting(getenv, "EDGEPIPE_CLIP_CONCURRENCY", pipeline.DefaultClipConcurrency(), 1, 64); err != nil {
		return c, err
	}
	if c.Workers, err = intSetting(getenv, "EDGEPIPE_WORKERS", 2, 0, 256); err != nil {
		return c, err
	}
	if c.TenantMaxRunning, err = intSetting(getenv, "EDGEPIPE_TENANT_MAX_RUNNING", pipeline.DefaultTenantMaxRunning, 0, maxTenantMaxRunning); err != nil {
		return c, err
	}
	if c.Tokens, err = api.ParseTokens(getenv("EDGEPIPE_TOKENS")); err != nil {
		return c, err
	}
	c.AdminToken = getenv("EDGEPIPE_ADMIN_TOKEN")
	c.ProviderURL = getenv(provider.EnvURL)
	c.ClientURL, c.ClientToken = getenv("EDGEPIPE_URL"), getenv("EDGEPIPE_TOKEN")
	c.Render = render.Config{FFmpegPath: getenv(render.EnvFFmpeg), FFprobePath: getenv(render.EnvFFprobe), Preset: getenv(render.EnvPreset)}
	c.ProviderRouting = providerRoutingSettings(getenv)
	c.WorkersAI, c.Replicate = workersAISettings(getenv), replicateSettings(getenv)
	if c.RateLimits, err = pipeline.ParseRateLimits(getenv(EnvRateLimits)); err != nil {
		return c, fmt.Errorf("%s: %w", EnvRateLimits, err)
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
		def  time.Duration
		min  time.Duration
	}{
		{"EDGEPIPE_LEASE", &c.LeaseFor, pipeline.DefaultLeaseFor, time.Second},
		{"EDGEPIPE_WORKER_POLL", &c.WorkerPoll, pipeline.DefaultPoll, 10 * time.Millisecond},
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
		{EnvProofMaxAge, &c.ProofMaxAge, pipeline.DefaultProofMaxAge, time.Second},
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
	if c.Tracing, err = tracingSettings(getenv); err != nil {
		return c, err
	}
	return c, nil
}

// TracingConfig is whether and how spans are exported.
type TracingConfig struct {
	Enabled bool
	// Protocol is the OTLP transport: ProtocolHTTP or ProtocolGRPC.
	Protocol string
	// ServiceName is the resource's service.name.
	ServiceName string
	// Provider, when set by a program that embeds a deployment (edgepipe
	// bench render --stages), is used as it is: no exporter is built from
	// the OTEL_* settings, and App.Close leaves it running (its owner
	// stops it). No environment variable sets it.
	Provider trace.TracerProvider
}

// OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL) edgepipe supports.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// DefaultServiceName is service.name without OTEL_SERVICE_NAME.
const DefaultServiceName = "edgepipe"

// tracingSettings reads the standard OpenTelemetry settings edgepipe
// honours. Tracing is off by default: on with OTEL_TRACES_EXPORTER=otlp, or
// when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_TRACES_EXPORTER is unset;
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true turns it off whatever
// else is set. The exporter reads its other OTEL_EXPORTER_OTLP_* settings
// itself.
func tracingSettings(getenv func(string) string) (TracingConfig, error) {
	c := TracingConfig{ServiceName: or(getenv("OTEL_SERVICE_NAME"), DefaultServiceName)}
	disabled, err := boolSetting(getenv, "OTEL_SDK_DISABLED")
	if err != nil {
		return c, err
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "":
		c.Enabled = endpoint
	case "otlp":
		c.Enabled = true
	case "none":
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER: edgepipe exports traces by otlp or none, got %q", exporter)
	}
	c.Enabled = c.Enabled && !disabled
	protocol := or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), or(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), ProtocolHTTP))
	if protocol != ProtocolHTTP && protocol != ProtocolGRPC {
		return c, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: must be %s or %s, got %q", ProtocolHTTP, ProtocolGRPC, protocol)
	}
	c.Protocol = protocol
	return c, nil
}

// routingSettings reads WORKFLOW_V2_ROLLOUT_PERCENT and EDGEPIPE_BINDINGS
// and validates them.
func routingSettings(getenv func(string) string) (routing.Config, error) {
	rawPct, rawBindings := getenv(routing.EnvRolloutPercent), getenv(routing.EnvBindings)
	pct, err := routing.ParseRolloutPercent(rawPct)
	if err != nil {
		return routing.Config{}, err
	}
	b, err := routing.ParseBindings(rawBindings)
	if err != nil {
		return routing.Config{}, err
	}
	cfg := routing.Config{RolloutPercent: pct, Bindings: b}
	return cfg, cfg.Validate()
}

// providerRoutingSettings reads EDGEPIPE_PROVIDER and its per-operation
// overrides; RoutingConfig.Routing validates them.
func providerRoutingSettings(getenv func(string) string) provider.RoutingConfig {
	return provider.RoutingConfig{All: getenv(provider.EnvProvider), Image: getenv(provider.EnvProviderImage),
		Speech: getenv(provider.EnvProviderSpeech), Video: getenv(provider.EnvProviderVideo)}
}

// ProviderSettings reads EDGEPIPE_PROVIDER_URL and EDGEPIPE_PROVIDER_TIMEOUT.
// It does not validate BaseURL; provider.New does.
func ProviderSettings(getenv func(string) string) (provider.Config, error) {
	c := provider.Config{BaseURL: strings.TrimSpace(getenv(provider.EnvURL))}
	if v := strings.TrimSpace(getenv(provider.EnvTimeout)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return provider.Config{}, fmt.Errorf("%w: %s=%q is not a positive duration (e.g. 60s)", pipeline.ErrInvalidInput, provider.EnvTimeout, v)
		}
		c.Timeout = d
	}
	return c, nil
}

// FakeSettings reads EDGEPIPE_FAKE_FAULTS, EDGEPIPE_FAKE_SEED and
// EDGEPIPE_FAKE_VIDEO_PROCESSING (also for `edgepipe fake-provider`).
// Unset variables keep fake's defaults. Errors name the variable.
func FakeSettings(getenv func(string) string) (fake.Config, error) {
	var c fake.Config
	faults, seed, processing := getenv(fake.EnvFaults), strings.TrimSpace(getenv(fake.EnvSeed)), strings.TrimSpace(getenv(fake.EnvVideoProcessing))
	if strings.TrimSpace(faults) != "" {
		f, err := fake.ParseFaults(faults)
		if err != nil {
			return fake.Config{}, fmt.Errorf("%s: %w", fake.EnvFaults, err)
		}
		c.Faults = f
	}
	if seed != "" {
		n, err := strconv.ParseUint(seed, 10, 64)
		if err != nil {
			return fake.Config{}, fmt.Errorf("%w: %s=%q is not an unsigned integer", pipeline.ErrInvalidInput, fake.EnvSeed, seed)
		}
		c.Seed = n
	}
	if processing != "" {
		d, err := time.ParseDuration(processing)
		if err != nil || d < 0 {
			return fake.Config{}, fmt.Errorf("%w: %s=%q is not a non-negative duration (e.g. 200ms)", pipeline.ErrInvalidInput, fake.EnvVideoProcessing, processing)
		}
		if d == 0 {
			d = -1 // explicit 0: no artificial processing time
		}
		c.VideoProcessing = d
	}
	return c, nil
}

// workersAISettings reads the EDGEPIPE_CF_* settings; workersai.New
// validates them.
func workersAISettings(getenv func(string) string) workersai.Config {
	c := workersai.Config{
		BaseURL:   strings.TrimSpace(getenv(workersai.EnvAPIBase)),
		AccountID: strings.TrimSpace(getenv(workersai.EnvAccountID)),
		APIToken:  strings.TrimSpace(getenv(workersai.EnvAPIToken)),
		Models:    map[string]string{},
	}
	models(getenv, c.Models, map[string]string{pipeline.OpImage: workersai.EnvModelImage, pipeline.OpSpeech: workersai.EnvModelSpeech})
	return c
}

// replicateSettings reads the EDGEPIPE_REPLICATE_* settings;
// replicate.New validates them.
func replicateSettings(getenv func(string) string) replicate.Config {
	c := replicate.Config{BaseURL: strings.TrimSpace(getenv(replicate.EnvAPIBase)), APIToken: strings.TrimSpace(getenv(replicate.EnvAPIToken)), Models: map[string]string{}}
	models(getenv, c.Models, map[string]string{pipeline.OpImage: replicate.EnvModelImage, pipeline.OpSpeech: replicate.EnvModelSpeech, pipeline.OpVideoSubmit: replicate.EnvModelVideo})
	return c
}

// models sets dst[op] from each op's setting when it is not blank.
func models(getenv func(string) string, dst, envs map[string]string) {
	for op, env := range envs {
		if m := strings.TrimSpace(getenv(env)); m != "" {
			dst[op] = m
		}
	}
}

// s3Settings reads the EDGEPIPE_S3_* settings.
func s3Settings(getenv func(string) string, log *slog.Logger) (s3.Config, error) {
	g := getenv
	sc := s3.Config{
		Endpoint: g("EDGEPIPE_S3_ENDPOINT"), PresignEndpoint: g("EDGEPIPE_S3_PUBLIC_ENDPOINT"), Bucket: g("EDGEPIPE_S3_BUCKET"),
		AccessKey: g("EDGEPIPE_S3_ACCESS_KEY"), SecretKey: g("EDGEPIPE_S3_SECRET_KEY"), Region: g("EDGEPIPE_S3_REGION"),
		Prefix: g("EDGEPIPE_S3_PREFIX"), CreateBucket: true, Logger: log,
	}
	var err error
	if v := g("EDGEPIPE_S3_CREATE_BUCKET"); v != "" {
		if sc.CreateBucket, err = boolSetting(g, "EDGEPIPE_S3_CREATE_BUCKET"); err != nil {
			return sc, err
		}
	}
	if v := g("EDGEPIPE_S3_PATH_STYLE"); v != "" {
		b, err := boolSetting(g, "EDGEPIPE_S3_PATH_STYLE")
		if err != nil {
			return sc, err
		}
		sc.PathStyle = &b
	}
	if sc.SignPayload, err = boolSetting(g, "EDGEPIPE_S3_SIGN_PAYLOAD"); err != nil {
		return sc, err
	}
	if sc.PartSizeMiB, err = intSetting(g, "EDGEPIPE_S3_PART_SIZE_MIB", 0, 5, 512); err != nil {
		return sc, err
	}
	if sc.Concurrency, err = intSetting(g, "EDGEPIPE_S3_CONCURRENCY", 0, 1, 32); err != nil {
		return sc, err
	}
	return sc, nil
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

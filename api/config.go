package api

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/webhook"
)

// Environment variables read by ParseTokens' callers (cmd/edgepipe).
const (
	EnvTokens     = "EDGEPIPE_TOKENS"
	EnvAdminToken = "EDGEPIPE_ADMIN_TOKEN"
)

// MinTokenLen is the shortest accepted bearer token: shorter ones are
// guessable.
const MinTokenLen = 16

// DefaultMaxBodyBytes caps a request body (1 MiB): a storyboard at its
// limits (50 scenes of 1000-character prompts and 2000-character narration,
// all multi-byte) fits with room to spare.
const DefaultMaxBodyBytes int64 = 1 << 20

// Config configures a Server.
type Config struct {
	Store   Store
	Objects pipeline.ObjectStore
	Router  *routing.Router
	// Presence, when set, adds the versions bound by the deployment's live
	// processes to Router's: a job is dead-lettered unbound_version only
	// when no live process binds its version (docs/design.md §4).
	Presence Presence
	// PresenceInterval is the bindings heartbeat's interval (liveness is
	// judged from it). Default pipeline.DefaultPresenceInterval.
	PresenceInterval time.Duration
	// Tokens maps a bearer token to its tenant.
	Tokens map[string]string
	// AdminToken authorises the operator endpoints; empty disables them.
	AdminToken string
	// MaxBodyBytes caps request bodies. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// AllowPrivateWebhooks accepts webhook URLs on loopback and private
	// networks (local development). Off, such URLs are refused (SSRF).
	AllowPrivateWebhooks bool
	// Resolver checks webhook host names. nil means net.DefaultResolver.
	Resolver webhook.Resolver
	// PresignTTL is how long a presigned result URL stays valid, when the
	// object store can presign. Default 15 min.
	PresignTTL time.Duration
	Clock      pipeline.Clock
	Logger     *slog.Logger
	// Metrics collects counters; nil makes a private one. Share one
	// *Metrics with the workers so /metrics shows theirs too.
	Metrics *Metrics
	// SSEPoll is how often an event stream checks the store for new
	// events. Default 200 ms.
	SSEPoll time.Duration
	// SSEHeartbeat is the interval of comment lines that keep idle
	// streams open through proxies. Default 15 s.
	SSEHeartbeat time.Duration
	// SSEMaxAge ends an event stream after this long (the client resumes
	// with Last-Event-ID), so no connection is held forever. Streams are
	// exempt from the server's ReadTimeout. Default DefaultSSEMaxAge.
	SSEMaxAge time.Duration
	// ProofMaxAge is how long a probe's proof is trusted, for the
	// operations page. Default pipeline.DefaultProofMaxAge.
	ProofMaxAge time.Duration
	// Operations are the provider operations as this deployment routes
	// them: the operations page says under which contract each runs now.
	Operations []RoutedOperation
	// TracerProvider, when set, wraps the handler in otelhttp: a server
	// span per request, named by method and route (never the raw path),
	// child of the request's W3C traceparent. nil leaves the handler bare
	// (tracing off costs nothing). A submission's traceparent is stored on
	// its job either way.
	TracerProvider trace.TracerProvider
}

// RoutedOperation is one provider operation as the deployment routes it.
type RoutedOperation struct {
	Op, Kind, Provider, Model, Endpoint string
	// Declared is the adapter's declared contract; an idempotent_verified
	// one holds only with a fresh proof (pipeline.EffectiveContract).
	Declared pipeline.Contract
}

// DefaultSSEMaxAge is how long an event stream lives before the server
// closes it and the client reconnects.
const DefaultSSEMaxAge = 30 * time.Minute

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.PresignTTL == 0 {
		c.PresignTTL = 15 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.SSEPoll == 0 {
		c.SSEPoll = 200 * time.Millisecond
	}
	if c.SSEHeartbeat == 0 {
		c.SSEHeartbeat = 15 * time.Second
	}
	if c.SSEMaxAge == 0 {
		c.SSEMaxAge = DefaultSSEMaxAge
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
}

// Validate reports the first bad setting (after defaults).
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: api: "+format, append([]any{pipeline.ErrInvalidInput}, args...)...)
	}
	switch {
	case c.Store == nil:
		return bad("no store")
	case c.Objects == nil:
		return bad("no object store")
	case c.Router == nil:
		return bad("no router")
	case c.MaxBodyBytes < 1024:
		return bad("max body size %d is below 1 KiB", c.MaxBodyBytes)
	case c.SSEPoll <= 0 || c.SSEHeartbeat <= 0 || c.PresignTTL <= 0 || c.SSEMaxAge <= 0:
		return bad("SSE poll, SSE heartbeat, SSE max age and presign TTL must be positive")
	}
	for tok, tenant := range c.Tokens {
		if err := checkToken(tok); err != nil {
			return bad("%s: %v", EnvTokens, err)
		}
		if err := checkTenant(tenant); err != nil {
			return bad("%s: %v", EnvTokens, err)
		}
		if c.AdminToken != "" && tok == c.AdminToken {
			return bad("the admin token must not also be a tenant token")
		}
	}
	if c.AdminToken != "" {
		if err := checkToken(c.AdminToken); err != nil {
			return bad("%s: %v", EnvAdminToken, err)
		}
	}
	return nil
}

func checkToken(tok string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("a token is shorter than %d characters", MinTokenLen)
	}
	if len(tok) > 256 {
		return fmt.Errorf("a token is longer than 256 characters")
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' || c == ',' || c == ':' {
			return fmt.Errorf("a token contains a character outside printable ASCII or one of ' ', ',', ':'")
		}
	}
	return nil
}

func checkTenant(t string) error {
	if t == "" || len(t) > 64 {
		return fmt.Errorf("tenant %q must be 1 to 64 characters", clip(t))
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("tenant %q may only contain A-Z a-z 0-9 _ - .", clip(t)) //nolint:staticcheck // ST1005: the final "." is one of the characters listed
		}
	}
	return nil
}

// ParseTokens reads EDGEPIPE_TOKENS: comma-separated token:tenant pairs, for
// example "s3cr3t-token-of-acme:acme,another-long-token:globex". Several
// tokens may map to one tenant (rotation); a token may appear only once.
// Tokens are at least MinTokenLen printable ASCII characters without ' ',
// ',' or ':'; tenants are 1–64 of A-Z a-z 0-9 _ - . "" yields an empty map.
// Errors wrap pipeline.ErrInvalidInput and never quote a token.
func ParseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		tok, tenant, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("%w: %s entry %d is not token:tenant", pipeline.ErrInvalidInput, EnvTokens, i+1)
		}
		if err := checkToken(tok); err != nil {
			return nil, fmt.Errorf("%w: %s entry %d: %v", pipeline.ErrInvalidInput, EnvTokens, i+1, err)
		}
		if err := checkTenant(tenant); err != nil {
			return nil, fmt.Errorf("%w: %s entry %d: %v", pipeline.ErrInvalidInput, EnvTokens, i+1, err)
		}
		if _, dup := out[tok]; dup {
			return nil, fmt.Errorf("%w: %s entry %d repeats an earlier token", pipeline.ErrInvalidInput, EnvTokens, i+1)
		}
		out[tok] = tenant
	}
	return out, nil
}

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// GenerateToken returns a fresh random token (256 bits) for local mode,
// where no tokens are configured and the server prints one at start-up.
func GenerateToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("api: generate token: %w", err)
	}
	return "edp_" + strings.ToLower(tokenEncoding.EncodeToString(b[:])), nil
}

// clip shortens untrusted text quoted in messages.
func clip(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

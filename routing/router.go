package routing

import (
	"errors"
	"fmt"
	"slices"

	"edgepipe/pipeline"
)

// Config is what a Router needs. The zero value is valid: rollout 0 and
// DefaultBindings.
type Config struct {
	// RolloutPercent is the share, 0–100, of new ids that get the v2 prefix.
	RolloutPercent int
	// Bindings are the versions this deployment serves. Zero means
	// DefaultBindings.
	Bindings Bindings
}

func (c Config) withDefaults() Config {
	if c.Bindings.IsZero() {
		c.Bindings = DefaultBindings()
	}
	return c
}

// Validate checks the percentage range and the bindings' versions. Errors
// wrap pipeline.ErrInvalidInput. A rollout that mints ids of a version this
// process does not bind is not an error (see Warnings): another process of
// the deployment may bind it, and if none does, those jobs are
// dead-lettered (unbound_version) at submission, never run as another
// version (docs/design.md §4).
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.RolloutPercent < 0 || c.RolloutPercent > 100 {
		return fmt.Errorf("%w: %s=%d: must be from 0 to 100",
			pipeline.ErrInvalidInput, EnvRolloutPercent, c.RolloutPercent)
	}
	for _, b := range c.Bindings.versions {
		if err := ValidateVersion(b); err != nil { // only a hand-built Bindings can get here
			return fmt.Errorf("%s: %w", EnvBindings, err)
		}
	}
	return nil
}

// Warnings are what an operator must hear loudly at start-up: versions new
// ids are minted for that this process does not bind. Their jobs run only
// if another live process binds the version; otherwise they are
// dead-lettered unbound_version and can be redriven once it is bound.
func (c Config) Warnings() []string {
	c = c.withDefaults()
	var out []string
	if c.RolloutPercent > 0 && !c.Bindings.Has(V2) {
		out = append(out, fmt.Sprintf("%s=%d sends new jobs to v2, but %s=%s does not bind v2: unless another process binds it, those jobs are dead-lettered (unbound_version), never run as v1",
			EnvRolloutPercent, c.RolloutPercent, EnvBindings, c.Bindings))
	}
	if c.RolloutPercent < 100 && !c.Bindings.Has(V1) {
		out = append(out, fmt.Sprintf("%s=%d sends new jobs to v1, but %s=%s does not bind v1: unless another process binds it, those jobs are dead-lettered (unbound_version)",
			EnvRolloutPercent, c.RolloutPercent, EnvBindings, c.Bindings))
	}
	return out
}

// Router mints version-prefixed ids and routes ids to queues. It is immutable
// and safe for concurrent use. The zero Router behaves like
// NewRouter(Config{}).
type Router struct {
	cfg Config
}

// NewRouter validates cfg and returns a Router for it.
func NewRouter(cfg Config) (*Router, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Router{cfg: cfg}, nil
}

// Validate re-checks the router's configuration (see Config.Validate).
func (r *Router) Validate() error { return r.cfg.Validate() }

// Config returns the effective configuration, defaults applied.
func (r *Router) Config() Config { return r.cfg.withDefaults() }

// VersionFor is the version a new id for (tenant, idempotencyKey) gets at the
// configured rollout percentage.
func (r *Router) VersionFor(tenant, idempotencyKey string) string {
	return VersionForBucket(Bucket(tenant, idempotencyKey), r.cfg.RolloutPercent)
}

// NewID mints the instance id VersionFor(tenant, idempotencyKey) + "-" +
// suffix. suffix must be a valid id body (a letter, digit or '_' followed by
// letters, digits, '_' and '-') short enough for the whole id to fit in
// MaxIDLen bytes; otherwise the error wraps pipeline.ErrInvalidInput.
func (r *Router) NewID(tenant, idempotencyKey, suffix string) (string, error) {
	return FormatID(r.VersionFor(tenant, idempotencyKey), suffix)
}

// Decision is where a job goes.
type Decision struct {
	// Version is the version the id names: its prefix, or DefaultVersion when
	// it has none. "" when the id has no readable version (malformed prefix,
	// invalid id).
	Version string
	// Queue is QueueName(Version); "" for a dead letter.
	Queue string
	// DeadLetter is set when this deployment must not run the job.
	DeadLetter bool
	// Reason is the dead-letter reason: pipeline.ReasonUnboundVersion for an
	// unbound version or a malformed prefix, pipeline.ReasonPoison for an id
	// that is not an instance id at all.
	Reason string
	// Detail is an operator-facing explanation. It quotes the id, which is
	// ours and safe to show, and nothing else from outside.
	Detail string
}

// RouteLive is Route against the deployment's bindings: this router's own
// and live, the versions bound by the deployment's live processes
// (pipeline.PresenceStore.LiveBindings). A job is dead-lettered
// unbound_version only when no live process binds its version.
func (r *Router) RouteLive(id string, live []string) Decision {
	d := r.Route(id)
	if d.DeadLetter && d.Reason == pipeline.ReasonUnboundVersion && d.Version != "" && slices.Contains(live, d.Version) {
		return Decision{Version: d.Version, Queue: QueueName(d.Version)}
	}
	return d
}

// Route decides the queue for id from its prefix alone. A version that is not
// bound, including DefaultVersion for an un-prefixed id, is a dead letter:
// Route never substitutes another version.
func (r *Router) Route(id string) Decision {
	parsed, err := ParseInstanceID(id)
	switch {
	case errors.Is(err, ErrMalformedPrefix):
		return Decision{DeadLetter: true, Reason: pipeline.ReasonUnboundVersion, Detail: err.Error()}
	case err != nil:
		return Decision{DeadLetter: true, Reason: pipeline.ReasonPoison, Detail: err.Error()}
	}
	v := parsed.VersionOrDefault()
	bindings := r.cfg.withDefaults().Bindings
	if !bindings.Has(v) {
		how := "its prefix"
		if !parsed.Explicit {
			how = "the default for ids without a prefix"
		}
		return Decision{
			Version:    v,
			DeadLetter: true,
			Reason:     pipeline.ReasonUnboundVersion,
			Detail: fmt.Sprintf("instance id %q runs on %s (%s), which this deployment does not serve (%s=%s)",
				id, v, how, EnvBindings, bindings),
		}
	}
	return Decision{Version: v, Queue: QueueName(v)}
}

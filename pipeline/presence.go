package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// PresenceStore records which workflow versions each live process binds. A
// deployment's bindings are the union over its live processes (docs/design.md
// §4): submission routes against it, so one process restarting with other
// bindings never decides for the rest.
type PresenceStore interface {
	AnnounceBindings(ctx context.Context, p *AnnounceBindingsParams) error
	WithdrawBindings(ctx context.Context, processID string) error
	LiveBindings(ctx context.Context, p *LiveBindingsParams) ([]string, error)
	DeadLetterUnserved(ctx context.Context, p *DeadLetterUnservedParams) (int, error)
}

// DeadLetterUnservedParams are PresenceStore.DeadLetterUnserved's.
type DeadLetterUnservedParams struct {
	// Live are the versions bound by the deployment's live processes.
	Live []string
	// IdleSince: only jobs unchanged since then are moved.
	IdleSince time.Time
}

// AnnounceBindingsParams are PresenceStore.AnnounceBindings'.
type AnnounceBindingsParams struct {
	ProcessID string
	Role      string // serve | worker
	Versions  []string
}

// LiveBindingsParams are PresenceStore.LiveBindings'.
type LiveBindingsParams struct {
	// Since: only processes that beat after it count.
	Since time.Time
}

// Presence defaults.
const (
	DefaultPresenceInterval = 10 * time.Second
	// DefaultUnservedAfter is how long a job may wait for a version no live
	// process binds before it is dead-lettered unbound_version: long enough
	// for a rolling upgrade to bring the version's workers back.
	DefaultUnservedAfter = 10 * time.Minute
	// A process counts as live for this many intervals after its last beat.
	presenceMissedBeats = 3
)

// PresenceConfig configures a Presence.
type PresenceConfig struct {
	Store     PresenceStore
	ProcessID string
	Role      string
	Versions  []string
	Interval  time.Duration // default DefaultPresenceInterval
	// UnservedAfter: see DefaultUnservedAfter (negative: never).
	UnservedAfter time.Duration
	Clock         Clock
	Logger        *slog.Logger
}

// Presence is the bindings heartbeat: a long-running part that announces
// what this process binds every Interval and withdraws it at Stop.
type Presence struct {
	cfg PresenceConfig
	svc Service
}

// NewPresence validates cfg.
func NewPresence(cfg PresenceConfig) (*Presence, error) {
	if cfg.Store == nil || cfg.ProcessID == "" || cfg.Role == "" {
		return nil, errors.New("presence: store, process id and role are required")
	}
	if cfg.Interval < 0 {
		return nil, errors.New("presence: interval must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultPresenceInterval
	}
	if cfg.UnservedAfter == 0 {
		cfg.UnservedAfter = DefaultUnservedAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Presence{cfg: cfg}, nil
}

// LiveSince is the heartbeat cut-off for processes counted live now.
func LiveSince(now time.Time, interval time.Duration) time.Time {
	if interval <= 0 {
		interval = DefaultPresenceInterval
	}
	return now.Add(-presenceMissedBeats * interval)
}

func (p *Presence) announce(ctx context.Context) error {
	return p.cfg.Store.AnnounceBindings(ctx, &AnnounceBindingsParams{ProcessID: p.cfg.ProcessID, Role: p.cfg.Role, Versions: p.cfg.Versions})
}

// Start announces once (an error here is a start-up error) and then keeps
// beating in the background.
func (p *Presence) Start(ctx context.Context) error {
	if err := p.announce(ctx); err != nil {
		return err
	}
	return p.svc.Start(ctx, func(ctx context.Context) {
		t := time.NewTicker(p.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := p.announce(ctx); err != nil {
					// Missing a beat is safe: others may count this process
					// gone for a while, and the next beat restores it. A
					// beat that failed never dead-letters, also when Stop
					// is what failed it (then it is not worth a warning).
					if ctx.Err() == nil {
						p.cfg.Logger.Warn("bindings heartbeat failed", "err", err)
					}
					continue
				}
				if err := p.deadLetterUnserved(ctx); err != nil && ctx.Err() == nil {
					p.cfg.Logger.Warn("dead-lettering jobs of unbound versions failed", "err", err)
				}
			}
		}
	})
}

// deadLetterUnserved moves jobs that have waited UnservedAfter for a
// version no live process binds to the dead-letter queue (docs/design.md §4: an
// unbound version is dead-lettered, never left waiting forever). The live
// set includes this process, so it is never empty.
func (p *Presence) deadLetterUnserved(ctx context.Context) error {
	if p.cfg.UnservedAfter < 0 {
		return nil
	}
	now := p.cfg.Clock.Now()
	live, err := p.cfg.Store.LiveBindings(ctx, &LiveBindingsParams{Since: LiveSince(now, p.cfg.Interval)})
	if err != nil || len(live) == 0 {
		return err
	}
	n, err := p.cfg.Store.DeadLetterUnserved(ctx, &DeadLetterUnservedParams{Live: live, IdleSince: now.Add(-p.cfg.UnservedAfter)})
	if n > 0 {
		p.cfg.Logger.Warn("jobs waiting for a version no live process binds moved to the dead-letter queue", "jobs", n, "live", live)
	}
	return err
}

// Stop ends the heartbeat and withdraws this process's bindings.
func (p *Presence) Stop(ctx context.Context) error {
	if !p.svc.Started() {
		return nil
	}
	err := p.svc.Stop(ctx)
	return errors.Join(err, p.cfg.Store.WithdrawBindings(context.WithoutCancel(ctx), p.cfg.ProcessID))
}

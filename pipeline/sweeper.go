package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// SweepLedger is what the sweeper needs from the job store.
type SweepLedger interface {
	// DropStaleClaims removes claims whose attempt is dead and that are
	// older than cutoffMS, returning their keys.
	DropStaleClaims(ctx context.Context, cutoffMS int64) ([]string, error)
	// ClaimForSweep atomically checks that nothing refers to key and blocks
	// new claims on it until FinishAbandon.
	ClaimForSweep(ctx context.Context, sweeperID, key string) (bool, error)
	KeyReferenced(ctx context.Context, key string) (bool, error)
	// The staged answers of jobs that are over for good, released by each
	// sweep (ObjectLedger.ReleaseStaged, FinishAbandon).
	StagedAnswers(ctx context.Context, p *StagedAnswersParams) ([]Asset, error)
	ObjectLedger
}

// Sweeper defaults (EDGEPIPE_SWEEP_GRACE, EDGEPIPE_SWEEP_INTERVAL).
const (
	DefaultSweepGrace    = time.Hour
	DefaultSweepInterval = 10 * time.Minute
)

// DeadLetterPurger deletes dead letters settled (redriven or discarded)
// before cutoff; jobs and their events are never deleted.
type DeadLetterPurger interface {
	PurgeSettledDeadLetters(ctx context.Context, cutoff time.Time) (int, error)
}

// DefaultDeadLetterRetention is how long settled dead letters are kept.
const DefaultDeadLetterRetention = 30 * 24 * time.Hour

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	Ledger  SweepLedger
	Objects ObjectStore
	// Grace is how old an unreferenced object or upload must be before it is
	// removed (default 1 h): a live attempt between its upload and its asset
	// row is never older than its lease, far below this.
	Grace time.Duration
	// Interval between runs when started (default 10 min).
	Interval time.Duration
	// DeadLetters, when set, has every sweep delete dead letters settled
	// (redriven or discarded) more than DeadLetterRetention ago.
	DeadLetters DeadLetterPurger
	// DeadLetterRetention (default DefaultDeadLetterRetention); negative
	// keeps settled dead letters forever.
	DeadLetterRetention time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	Clock  Clock
	Logger *slog.Logger
}

// SweepReport says what a sweep did (or would do, in a dry run).
type SweepReport struct {
	Scanned         int      `json:"scanned"`
	Orphans         []string `json:"orphans"`
	Deleted         int      `json:"deleted"`
	StaleClaims     int      `json:"stale_claims"`
	AbortedUploads  int      `json:"aborted_uploads"`
	DryRun          bool     `json:"dry_run"`
	SkippedInFlight int      `json:"skipped_in_flight"`
	// StagedFinal counts staged answers of final jobs: released, or in a
	// dry run, that would be.
	StagedFinal int `json:"staged_final"`
	// DeadLettersPurged counts settled dead letters deleted by retention
	// (not inspected in a dry run).
	DeadLettersPurged int `json:"dead_letters_purged"`
}

// Sweeper removes objects that no asset row or live claim refers to, and
// stale multipart uploads (docs/design.md §7, invariant §9.2).
type Sweeper struct {
	cfg SweeperConfig
	id  string
	svc Service
}

// NewSweeper validates cfg.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Ledger == nil || cfg.Objects == nil {
		return nil, errors.New("sweeper: ledger and object store are required")
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultSweepGrace
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("%w: sweeper grace period must not be negative", ErrInvalidInput)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.DeadLetterRetention == 0 {
		cfg.DeadLetterRetention = DefaultDeadLetterRetention
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Sweeper{cfg: cfg, id: "sweeper-" + hex.EncodeToString(b[:])}, nil
}

// Sweep runs once.
func (s *Sweeper) Sweep(ctx context.Context) (SweepReport, error) {
	rep := SweepReport{DryRun: s.cfg.DryRun, Orphans: []string{}}
	cutoff := s.cfg.Clock.Now().Add(-s.cfg.Grace)
	if !s.cfg.DryRun {
		keys, err := s.cfg.Ledger.DropStaleClaims(ctx, cutoff.UnixMilli())
		if err != nil {
			return rep, fmt.Errorf("sweep: drop stale claims: %w", err)
		}
		rep.StaleClaims = len(keys)
	}
	// Paid answers kept for jobs that are over for good (a job failed by an
	// operator, canceled while waiting, finished by a worker whose own
	// release failed): nothing can use them any more.
	staged, err := s.cfg.Ledger.StagedAnswers(ctx, &StagedAnswersParams{FinalJobsOnly: true})
	if err != nil {
		return rep, fmt.Errorf("sweep: staged answers: %w", err)
	}
	rep.StagedFinal = len(staged)
	if !s.cfg.DryRun {
		for _, a := range staged {
			if err := releaseStaged(ctx, s.cfg.Ledger, s.cfg.Objects, s.id, a.Key); err != nil {
				return rep, fmt.Errorf("sweep: release staged %s: %w", a.Key, err)
			}
		}
	}
	for _, prefix := range Prefixes {
		var candidates []ObjectInfo
		err := s.cfg.Objects.List(ctx, prefix, func(o ObjectInfo) bool {
			rep.Scanned++
			if o.LastModified.Before(cutoff) {
				candidates = append(candidates, o)
			}
			return true
		})
		if err != nil {
			return rep, fmt.Errorf("sweep: list %s: %w", prefix, err)
		}
		for _, o := range candidates {
			if s.cfg.DryRun {
				ref, err := s.cfg.Ledger.KeyReferenced(ctx, o.Key)
				if err != nil {
					return rep, err
				}
				if !ref {
					rep.Orphans = append(rep.Orphans, o.Key)
				}
				continue
			}
			ok, err := s.cfg.Ledger.ClaimForSweep(ctx, s.id, o.Key)
			if err != nil {
				return rep, fmt.Errorf("sweep: claim %s: %w", o.Key, err)
			}
			if !ok {
				continue
			}
			rep.Orphans = append(rep.Orphans, o.Key)
			// Once the key is held, finish even if ctx ends: a 'deleting'
			// claim left behind would block writers for the grace period.
			dctx := context.WithoutCancel(ctx)
			// Bounded and retried: past StaleDeleteAfter a writer may take
			// this cleanup over, so no delete of ours may still be in
			// flight then.
			if err := deleteObject(dctx, s.cfg.Objects, o.Key); err != nil {
				return rep, fmt.Errorf("sweep: delete %s: %w", o.Key, err)
			}
			rep.Deleted++
			if err := s.cfg.Ledger.FinishAbandon(dctx, s.id, o.Key); err != nil {
				return rep, fmt.Errorf("sweep: release %s: %w", o.Key, err)
			}
		}
	}
	if !s.cfg.DryRun {
		n, err := s.cfg.Objects.AbortStaleUploads(ctx, cutoff)
		if err != nil {
			return rep, fmt.Errorf("sweep: abort stale uploads: %w", err)
		}
		rep.AbortedUploads = n
	}
	if !s.cfg.DryRun && s.cfg.DeadLetters != nil && s.cfg.DeadLetterRetention > 0 {
		n, err := s.cfg.DeadLetters.PurgeSettledDeadLetters(ctx, s.cfg.Clock.Now().Add(-s.cfg.DeadLetterRetention))
		if err != nil {
			return rep, fmt.Errorf("sweep: purge settled dead letters: %w", err)
		}
		rep.DeadLettersPurged = n
	}
	s.cfg.Logger.Info("sweep finished", "scanned", rep.Scanned, "deleted", rep.Deleted, "orphans", len(rep.Orphans),
		"stale_claims", rep.StaleClaims, "staged_final", rep.StagedFinal, "aborted_uploads", rep.AbortedUploads,
		"dead_letters_purged", rep.DeadLettersPurged, "dry_run", rep.DryRun)
	return rep, nil
}

// Start sweeps every Interval until Stop.
func (s *Sweeper) Start(ctx context.Context) error {
	return s.svc.Start(ctx, func(ctx context.Context) {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("sweep failed", "err", err)
				}
			}
		}
	})
}

// Stop ends the periodic sweep, waiting for a running one until ctx ends.
func (s *Sweeper) Stop(ctx context.Context) error { return s.svc.Stop(ctx) }

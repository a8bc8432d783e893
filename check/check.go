// Package check is fsck for an edgepipe deployment: it verifies the six
// invariants of docs/design.md §9 against the job database and the object store, and
// optionally a provider's own billing ledger. It only reads.
package check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Store is what the checker reads from the job database.
type Store interface {
	ListAssets(ctx context.Context, fn func(pipeline.Asset) error) error
	KeyReferenced(ctx context.Context, key string) (bool, error)
	BilledCallGroups(ctx context.Context) ([]pipeline.BilledCallGroup, error)
	EachJob(ctx context.Context, fn func(pipeline.Job) error) error
	EachAuditEvent(ctx context.Context, fn func(pipeline.AuditEvent) error) error
	WaivedCalls(ctx context.Context) (map[string]map[string]int, error)
	UnkeptAnswers(ctx context.Context) ([]pipeline.ProviderCall, error)
}

// Config says what to check.
type Config struct {
	Store   Store
	Objects pipeline.ObjectStore
	// LedgerURL is a provider ledger (the fake provider's GET /ledger) to
	// cross-check billing against; empty skips that part.
	LedgerURL string
	// Grace: objects younger than this are not reported as orphans (a live
	// attempt may be between upload and asset row). Default 0.
	Grace time.Duration
	// StuckAfter: a job not settled whose lease expired (or whose retry was
	// due) longer ago than this is reported as stuck. Default 10 min.
	StuckAfter time.Duration
	// RequireSettled reports every job that is not terminal or needs_review
	// (for test harnesses that ran everything to the end).
	RequireSettled bool
	// SkipHash trusts the stored SHA-256 instead of reading every object.
	SkipHash bool
	Clock    pipeline.Clock
}

// Violation is one broken invariant.
type Violation struct {
	Invariant int    `json:"invariant"`
	Kind      string `json:"kind"`
	JobID     string `json:"job_id,omitempty"`
	Key       string `json:"key,omitempty"`
	Detail    string `json:"detail"`
}

// Report is the checker's result.
type Report struct {
	Assets     int         `json:"assets"`
	Objects    int         `json:"objects"`
	Jobs       int         `json:"jobs"`
	Events     int         `json:"events"`
	Ledger     bool        `json:"ledger_checked"`
	Violations []Violation `json:"violations"`
}

// Clean reports whether no invariant is broken.
func (r Report) Clean() bool { return len(r.Violations) == 0 }

// Names of the invariants, indexed by number.
var Names = map[int]string{
	1: "no asset row without its object (size and SHA-256 match)",
	2: "no object without an asset row or live claim",
	3: "per (job, scene) at most one billed call to a non-idempotent provider, and every paid answer is an asset or staged",
	4: "every accepted job ends terminal or needs_review",
	5: "every attempt ran on the version of its id prefix",
	6: "no terminal job ever changed status again (except a redrive of dead_lettered)",
}

// Run checks everything and returns the report; an error means the check
// itself could not run.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Clock == nil {
		cfg.Clock = pipeline.SystemClock{}
	}
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = 10 * time.Minute
	}
	c := &checker{cfg: cfg, now: cfg.Clock.Now(), r: Report{Violations: []Violation{}}}
	for _, step := range []func(context.Context) error{
		c.assets,      // 1
		c.objects,     // 2
		c.billing,     // 3
		c.paidAnswers, // 3, second half
		c.jobs,        // 4, 5
		c.history,     // 5 per attempt, 6
	} {
		if err := step(ctx); err != nil {
			return c.r, err
		}
	}
	return c.r, nil
}

// checker carries one run's configuration and report between the checks.
type checker struct {
	cfg Config
	now time.Time
	r   Report
}

func (c *checker) add(v Violation) { c.r.Violations = append(c.r.Violations, v) }

// assets is invariant 1: every asset row has its object, of that size and
// SHA-256.
func (c *checker) assets(ctx context.Context) error {
	return c.cfg.Store.ListAssets(ctx, func(a pipeline.Asset) error {
		c.r.Assets++
		info, err := c.cfg.Objects.Head(ctx, a.Key)
		if errors.Is(err, pipeline.ErrNotFound) {
			c.add(Violation{Invariant: 1, Kind: "ghost_asset", JobID: a.JobID, Key: a.Key, Detail: "asset row without an object"})
			return nil
		}
		if err != nil {
			return fmt.Errorf("head %s: %w", a.Key, err)
		}
		if info.Size != a.SizeBytes {
			c.add(Violation{Invariant: 1, Kind: "size_mismatch", JobID: a.JobID, Key: a.Key,
				Detail: fmt.Sprintf("asset says %d bytes, object has %d", a.SizeBytes, info.Size)})
			return nil
		}
		sum := info.SHA256
		if !c.cfg.SkipHash || sum == "" {
			if sum, err = hashObject(ctx, c.cfg.Objects, a.Key); err != nil {
				return err
			}
		}
		if sum != a.SHA256 {
			c.add(Violation{Invariant: 1, Kind: "sha256_mismatch", JobID: a.JobID, Key: a.Key,
				Detail: fmt.Sprintf("asset says %s, object is %s", a.SHA256, sum)})
		}
		return nil
	})
}

// objects is invariant 2: every object under edgepipe's prefixes (units/,
// renders/, staging/) has an asset row or a live claim.
func (c *checker) objects(ctx context.Context) error {
	for _, prefix := range pipeline.Prefixes {
		var keys []pipeline.ObjectInfo
		if err := c.cfg.Objects.List(ctx, prefix, func(o pipeline.ObjectInfo) bool { keys = append(keys, o); return true }); err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, o := range keys {
			c.r.Objects++
			if c.cfg.Grace > 0 && o.LastModified.After(c.now.Add(-c.cfg.Grace)) {
				continue
			}
			ref, err := c.cfg.Store.KeyReferenced(ctx, o.Key)
			if err != nil {
				return err
			}
			if !ref {
				c.add(Violation{Invariant: 2, Kind: "orphan_object", Key: o.Key, Detail: fmt.Sprintf("%d bytes, no asset row or live claim", o.Size)})
			}
		}
	}
	return nil
}

// billing is invariant 3's first half, from the audit trail and, when
// configured, from the provider's own ledger.
func (c *checker) billing(ctx context.Context) error {
	groups, err := c.cfg.Store.BilledCallGroups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if g.Contract == pipeline.ContractIdempotentVerified {
			continue
		}
		c.add(Violation{Invariant: 3, Kind: "billed_twice", JobID: g.JobID,
			Detail: fmt.Sprintf("scene %d: %d possibly billed %s calls (%s)", g.Scene, g.Count, g.Op, g.Contract)})
	}
	if c.cfg.LedgerURL == "" {
		return nil
	}
	waived, err := c.cfg.Store.WaivedCalls(ctx)
	if err != nil {
		return err
	}
	if err := checkLedger(ctx, c.cfg.LedgerURL, waived, c.add); err != nil {
		return err
	}
	c.r.Ledger = true
	return nil
}

// paidAnswers is invariant 3's second half: every paid answer is an asset
// or staged durably (per call row; docs/design.md §6).
func (c *checker) paidAnswers(ctx context.Context) error {
	calls, err := c.cfg.Store.UnkeptAnswers(ctx)
	if err != nil {
		return err
	}
	for _, call := range calls {
		c.add(Violation{Invariant: 3, Kind: "paid_answer_not_kept", JobID: call.JobID, Key: call.StagedKey,
			Detail: fmt.Sprintf("call %d (scene %d, %s) was answered, but its answer is neither an asset nor staged", call.ID, call.Scene, call.Op)})
	}
	return nil
}

// jobs is invariant 4 (every job settles) and the routing half of 5.
func (c *checker) jobs(ctx context.Context) error {
	return c.cfg.Store.EachJob(ctx, func(j pipeline.Job) error {
		c.r.Jobs++
		if !j.Status.Settled() && c.stuck(j) {
			c.add(Violation{Invariant: 4, Kind: "not_settled", JobID: j.ID, Detail: fmt.Sprintf("status %s since %s", j.Status, j.StatusChangedAt.Format(time.RFC3339))})
		}
		// The version comes from the instance id (the internal key only
		// starts with it, and fails the grammar).
		id, perr := routing.ParseInstanceID(j.InstanceID)
		want := id.VersionOrDefault()
		switch {
		case perr != nil:
			if j.Status != pipeline.StatusDeadLettered {
				c.add(Violation{Invariant: 5, Kind: "bad_instance_id", JobID: j.ID, Detail: "an id outside the routing grammar ran"})
			}
		case j.Version != want:
			c.add(Violation{Invariant: 5, Kind: "version_mismatch", JobID: j.ID, Detail: fmt.Sprintf("id says %s, job recorded %s", want, j.Version)})
		case j.Queue != "" && j.Queue != routing.QueueName(want):
			c.add(Violation{Invariant: 5, Kind: "queue_mismatch", JobID: j.ID, Detail: fmt.Sprintf("id says %s, job queued on %s", want, j.Queue)})
		}
		return nil
	})
}

// stuck says whether an unsettled job is reported: always with
// RequireSettled, else once its lease or retry is overdue by StuckAfter.
func (c *checker) stuck(j pipeline.Job) bool {
	if c.cfg.RequireSettled {
		return true
	}
	switch j.Status {
	case pipeline.StatusRunning:
		return !j.LeaseExpiresAt.IsZero() && c.now.Sub(j.LeaseExpiresAt) > c.cfg.StuckAfter
	case pipeline.StatusRetryWait:
		return !j.NextRunAt.IsZero() && c.now.Sub(j.NextRunAt) > c.cfg.StuckAfter
	case pipeline.StatusPending:
		return c.now.Sub(j.UpdatedAt) > c.cfg.StuckAfter
	}
	return false
}

// history is the per-attempt half of invariant 5 and invariant 6, from the
// event log.
func (c *checker) history(ctx context.Context) error {
	// 5, per attempt: every stage an attempt started names the workflow
	// implementation that ran it, which must be the id prefix's version.
	// 6: the event log of every job walks the transition table, and nothing
	// follows a terminal status except a redrive of dead_lettered.
	var (
		curJob   string
		cur      pipeline.Status
		redriven bool
		want     string // the version the current job's id prefix routes to
	)
	return c.cfg.Store.EachAuditEvent(ctx, func(e pipeline.AuditEvent) error {
		c.r.Events++
		if e.JobID != curJob {
			curJob, cur, redriven, want = e.JobID, "", false, ""
			if id, perr := routing.ParseInstanceID(e.InstanceID); perr == nil {
				want = id.VersionOrDefault()
			}
		}
		switch e.Kind {
		case pipeline.EventStageStarted:
			var d struct {
				Stage    string `json:"stage"`
				Workflow string `json:"workflow"`
			}
			if err := json.Unmarshal(e.Detail, &d); err != nil {
				c.add(Violation{Invariant: 5, Kind: "unreadable_stage_event", JobID: e.JobID, Detail: fmt.Sprintf("event %d: %v", e.ID, err)})
			} else if want == "" {
				c.add(Violation{Invariant: 5, Kind: "bad_instance_id_ran", JobID: e.JobID,
					Detail: fmt.Sprintf("attempt %s ran stage %s on workflow %q for an id outside the routing grammar", e.AttemptID, d.Stage, d.Workflow)})
			} else if d.Workflow != want {
				c.add(Violation{Invariant: 5, Kind: "attempt_version_mismatch", JobID: e.JobID,
					Detail: fmt.Sprintf("attempt %s ran stage %s on workflow %q; the id says %s", e.AttemptID, d.Stage, d.Workflow, want)})
			}
			return nil
		case pipeline.EventCreated:
			cur = pipeline.StatusPending
			return nil
		case pipeline.EventRedriven:
			redriven = true
			return nil
		}
		if e.FromStatus != cur {
			c.add(Violation{Invariant: 6, Kind: "event_gap", JobID: e.JobID, Detail: fmt.Sprintf("event %d moves from %s but the job was %s", e.ID, e.FromStatus, cur)})
		}
		if cur.Terminal() && !(cur == pipeline.StatusDeadLettered && e.ToStatus == pipeline.StatusPending && redriven) {
			c.add(Violation{Invariant: 6, Kind: "terminal_changed", JobID: e.JobID, Detail: fmt.Sprintf("event %d moves terminal %s to %s", e.ID, cur, e.ToStatus)})
		} else if err := pipeline.CheckTransition(e.FromStatus, e.ToStatus); err != nil {
			c.add(Violation{Invariant: 6, Kind: "invalid_transition", JobID: e.JobID, Detail: fmt.Sprintf("event %d: %v", e.ID, err)})
		}
		cur, redriven = e.ToStatus, false
		return nil
	})
}

func hashObject(ctx context.Context, objs pipeline.ObjectStore, key string) (string, error) {
	rc, _, err := objs.Get(ctx, key, 0, -1)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ledger is the fake provider's GET /ledger.
type ledger struct {
	ByUnit map[string]map[string]int64 `json:"by_unit"`
}

func checkLedger(ctx context.Context, url string, waived map[string]map[string]int, add func(Violation)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ledger: %s answered %s", url, resp.Status)
	}
	var l ledger
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&l); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	for unit, counts := range l.ByUnit {
		if strings.HasPrefix(unit, pipeline.ProbeUnitPrefix) {
			continue // a probe's requests: its proof records what they cost
		}
		for op, n := range counts {
			// image is deduplicated by its idempotency key (a replay is not
			// billed), so any count above one is a second bill too.
			allowed := int64(1 + waived[unit][ledgerOp(op)])
			if n > allowed {
				job, _, _ := strings.Cut(unit, "/")
				add(Violation{Invariant: 3, Kind: "ledger_billed_twice", JobID: job, Detail: fmt.Sprintf("provider ledger: unit %s billed %d × %s", unit, n, op)})
			}
		}
	}
	return nil
}

// ledgerOp maps the provider ledger's operation names to ours.
func ledgerOp(op string) string {
	if op == "video" {
		return pipeline.OpVideoSubmit
	}
	return op
}

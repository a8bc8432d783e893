package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	Store  Store
	Engine *Engine
	// Queues the worker consumes: only those of versions bound in this
	// deployment (routing decides).
	Queues []string
	// Owner names this worker in leases (host:pid or similar).
	Owner string
	// Concurrency is how many jobs run at once (EDGEPIPE_WORKERS).
	Concurrency int
	// LeaseFor is the lease length; heartbeats renew it every LeaseFor/3.
	LeaseFor time.Duration
	// TenantMaxRunning is how many jobs of one tenant may run at once
	// across every worker sharing the job store
	// (EDGEPIPE_TENANT_MAX_RUNNING, FetchParams.TenantMaxRunning); 0 is no
	// limit. Every worker of a deployment should use the same value.
	TenantMaxRunning int
	// Poll is how long an idle worker waits before fetching again.
	Poll time.Duration
	// Wake, when set, ends an idle wait early: a store that announces new
	// messages on commit (Postgres LISTEN/NOTIFY, storage/postgres.Listener)
	// sends on it, so a submission starts at once instead of at the next
	// poll. It is only a hint: polling stays the fallback for a lost
	// notification and for delayed messages, which nobody announces.
	Wake <-chan struct{}
	// PruneEvery is how often the worker removes spooled results of jobs
	// that ended elsewhere (Engine.PruneSpool); the first prune runs at
	// Start. Default 10 minutes.
	PruneEvery time.Duration
	// FlushEvery is how often the worker stages the paid answers its spool
	// holds while the object store refused them (Engine.FlushSpool), so
	// they stop being this machine's alone. Default 10 seconds.
	FlushEvery time.Duration
	Clock      Clock
	Logger     *slog.Logger
	Failpoint  Failpoint
}

// DefaultPoll is how long an idle worker waits before fetching again
// unless configured (WorkerConfig.Poll). A store's wake-ups (NOTIFY on
// Postgres, the commits of this process on SQLite) end the wait early.
const DefaultPoll = 200 * time.Millisecond

// DefaultLeaseFor is a job lease's length unless configured
// (EDGEPIPE_LEASE).
const DefaultLeaseFor = 30 * time.Second

// DefaultTenantMaxRunning is WorkerConfig.TenantMaxRunning unless
// configured (EDGEPIPE_TENANT_MAX_RUNNING): no per-tenant limit.
const DefaultTenantMaxRunning = 0

func (c *WorkerConfig) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 2
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = DefaultLeaseFor
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	if c.PruneEvery == 0 {
		c.PruneEvery = 10 * time.Minute
	}
	if c.FlushEvery == 0 {
		c.FlushEvery = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first bad setting.
func (c WorkerConfig) Validate() error {
	switch {
	case c.Store == nil || c.Engine == nil:
		return errors.New("worker: store and engine are required")
	case len(c.Queues) == 0:
		return errors.New("worker: no queues to consume (no workflow version is bound)")
	case c.Owner == "":
		return errors.New("worker: owner is required")
	case c.Concurrency < 1:
		return errors.New("worker: concurrency must be at least 1")
	case c.LeaseFor < time.Second:
		return errors.New("worker: lease must be at least 1s")
	case c.TenantMaxRunning < 0:
		return errors.New("worker: the per-tenant running limit must be 0 (none) or more")
	}
	return nil
}

// Worker consumes queues, runs claimed jobs through the engine and records
// their outcomes. It shares the Start/Stop lifecycle (Service) of
// edgepipe's other long-running parts.
type Worker struct {
	cfg      WorkerConfig
	log      *slog.Logger
	svc      Service
	inflight sync.WaitGroup
}

// NewWorker validates cfg.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, log: cfg.Logger.With("worker", cfg.Owner)}, nil
}

// Start begins consuming. ctx bounds the worker's whole life.
func (w *Worker) Start(ctx context.Context) error {
	return w.svc.StartWork(ctx, func(loop, work context.Context) {
		pruned, flushed := make(chan struct{}), make(chan struct{})
		go func() { defer close(pruned); w.pruneLoop(loop, work) }()
		go func() { defer close(flushed); w.flushLoop(loop, work) }()
		w.loop(loop, work)
		w.inflight.Wait()
		<-pruned
		<-flushed
	})
}

// pruneLoop keeps the spool from collecting results of jobs that ended
// without this worker (see Engine.PruneSpool). A failed prune keeps the
// files, which is safe, so it is only logged.
func (w *Worker) pruneLoop(loop, work context.Context) {
	for {
		if n, err := w.cfg.Engine.PruneSpool(work); err != nil {
			w.log.Warn("pruning the spool failed; the files are kept", "err", err)
		} else if n > 0 {
			w.log.Info("pruned spooled results of ended jobs", "jobs", n)
		}
		select {
		case <-loop.Done():
			return
		case <-time.After(w.cfg.PruneEvery):
		}
	}
}

// flushLoop stages spooled answers once the object store takes them again
// (Engine.FlushSpool). A failure keeps the spool file for the next round.
func (w *Worker) flushLoop(loop, work context.Context) {
	for {
		last := false
		select {
		case <-loop.Done():
			last = true // one more round: stop with nothing held locally
		case <-time.After(w.cfg.FlushEvery):
		}
		if n, err := w.cfg.Engine.FlushSpool(work); err != nil {
			w.log.Warn("staging spooled answers failed; they stay in the spool for now", "err", err)
		} else if n > 0 {
			w.log.Info("staged spooled answers", "answers", n)
		}
		if last {
			return
		}
	}
}

// Stop stops claiming, lets in-flight attempts finish until ctx ends, then
// interrupts the rest, which release their jobs (not fail them) so another
// worker picks them up.
func (w *Worker) Stop(ctx context.Context) error {
	if err := w.svc.Stop(ctx); err != nil {
		return fmt.Errorf("worker: in-flight jobs released at shutdown deadline: %w", err)
	}
	return nil
}

// loop claims jobs until the loop context ends; each attempt runs under the
// work context.
func (w *Worker) loop(loop, work context.Context) {
	slots := make(chan struct{}, w.cfg.Concurrency)
	next := 0
	// empty counts the fetches in a row that claimed nothing. The loop
	// waits for its poll (or a wake-up) only when it reaches one per
	// queue: every queue was empty. A slot that frees while the turn is
	// on an empty queue must go on to the next queue, not sleep: with two
	// bound versions, every other freed slot used to wait out the poll
	// while the other queue held work (bench render 20: workers paused
	// 125-200 ms between jobs).
	empty := 0
	for {
		if loop.Err() != nil {
			return
		}
		free := w.cfg.Concurrency - len(slots)
		if free == 0 {
			select {
			case slots <- struct{}{}: // wait for a slot, then give it back
				<-slots
			case <-loop.Done():
				return
			case <-time.After(w.cfg.Poll):
			}
			continue
		}
		queue := w.cfg.Queues[next%len(w.cfg.Queues)]
		next++
		claimed, _, err := w.cfg.Store.Fetch(loop, &FetchParams{Queue: queue, Owner: w.cfg.Owner, Max: free,
			LeaseFor: w.cfg.LeaseFor, TenantMaxRunning: w.cfg.TenantMaxRunning})
		if err != nil && loop.Err() == nil {
			w.log.Warn("fetch failed", "queue", queue, "err", err)
		}
		for _, c := range claimed {
			slots <- struct{}{}
			w.inflight.Add(1)
			go func() {
				defer func() { <-slots; w.inflight.Done() }()
				w.run(work, c)
			}()
		}
		if len(claimed) > 0 {
			empty = 0
			continue
		}
		if empty++; empty >= len(w.cfg.Queues) {
			empty = 0
			select {
			case <-loop.Done():
				return
			case <-w.cfg.Wake: // nil (no hint) blocks forever
			case <-time.After(w.cfg.Poll):
			}
		}
	}
}

// run is one attempt: heartbeat while the engine works, then record the
// outcome, or release the job if the worker is shutting down.
func (w *Worker) run(work context.Context, c Claimed) {
	log := w.log.With("job", c.Job.ID, "attempt", c.Lease.AttemptID)
	// The attempt's context is canceled with a cause (a lost lease, the
	// worker stopping), which travels with it to wherever it stops.
	ctx, cancel := context.WithCancelCause(work)
	defer cancel(nil)

	var mu sync.Mutex
	lease := c.Lease
	lost := false
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(w.cfg.LeaseFor / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mu.Lock()
				l := lease
				mu.Unlock()
				nl, err := w.cfg.Store.Heartbeat(ctx, l, w.cfg.LeaseFor)
				var fe *FenceError
				switch {
				case errors.As(err, &fe):
					log.Warn("lease lost; abandoning attempt")
					mu.Lock()
					lost = true
					mu.Unlock()
					cancel(fe)
					return
				case err != nil:
					log.Warn("heartbeat failed", "err", err)
				default:
					mu.Lock()
					lease = nl
					mu.Unlock()
				}
			}
		}
	}()

	outcome, err := w.cfg.Engine.Run(ctx, c)
	cancel(nil)
	<-hbDone
	mu.Lock()
	l, wasLost := lease, lost
	mu.Unlock()
	bg := context.WithoutCancel(work)
	switch {
	case wasLost:
		return // another worker owns the job now; nothing of ours may land
	case err != nil:
		// Interrupted (shutdown) or fenced: give the job back untouched.
		if rerr := w.cfg.Store.Release(bg, l); rerr != nil {
			log.Info("release after interruption failed (lease already gone?)", "err", rerr)
		}
		return
	}
	if w.cfg.Failpoint != nil {
		if err := w.cfg.Failpoint(bg, "before_ack"); err != nil {
			log.Warn("failpoint before_ack", "err", err)
			return
		}
	}
	if err := w.cfg.Store.Finish(bg, l, outcome); err != nil {
		log.Warn("recording the outcome failed", "status", outcome.Status, "err", err)
		return
	}
	if outcome.Status.Settled() {
		w.cfg.Engine.cfg.Metrics.JobSettled(c.Job.Version, outcome.Status, w.cfg.Clock.Now().Sub(c.Job.CreatedAt), l.Attempt)
	}
	// Only a job over for good drops its kept answers: dead_lettered and
	// needs_review keep them (Forget checks), since a redrive or a retry
	// must use a paid answer rather than pay for it again.
	if err := w.cfg.Engine.Forget(bg, c.Job.ID, outcome.Status); err != nil {
		log.Warn("releasing the job's staged answers failed; the sweeper will", "err", err)
	}
	log.Info("attempt finished", "status", outcome.Status, "code", outcome.ErrorCode)
}

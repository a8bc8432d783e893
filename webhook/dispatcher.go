package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"edgepipe/pipeline"
)

// Delivery is one outbox row (defined in pipeline, which storage drivers
// may import; they must not import this package).
type Delivery = pipeline.WebhookDelivery

// Delivery statuses.
const (
	StatusPending   = pipeline.WebhookPending
	StatusDelivered = pipeline.WebhookDelivered
	StatusFailed    = pipeline.WebhookFailed
)

// Store is what the dispatcher needs from the outbox (storage/sqlite
// implements it). The methods touch only the outbox, never a job.
type Store interface {
	// ClaimWebhooks leases up to limit pending deliveries that are due: each
	// becomes invisible to other claimers until the lease ends, and its
	// attempt count goes up by one.
	ClaimWebhooks(ctx context.Context, limit int, lease time.Duration) ([]Delivery, error)
	// MarkWebhookDelivered records success. If the claim was lost (the lease
	// ran out and someone else claimed it) the error matches
	// pipeline.ErrLeaseLost and nothing changes.
	MarkWebhookDelivered(ctx context.Context, d Delivery) error
	// MarkWebhookFailed records a failed attempt with a safe error text, to
	// be retried at next, or given up for good (status failed) when next is
	// zero. Lost claims as for MarkWebhookDelivered.
	MarkWebhookFailed(ctx context.Context, d Delivery, lastError string, next time.Time) error
}

// Metrics counts delivery outcomes (api.Metrics implements it).
type Metrics interface {
	WebhookDelivery(outcome string)
}

// Delivery outcomes reported to Metrics.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetry     = "retry"
	OutcomeFailed    = "failed"
)

// Config configures a Dispatcher.
type Config struct {
	Store Store
	// Failpoint is the test-only hook of EDGEPIPE_FAILPOINTS
	// ("webhook_dispatch"); nil in production.
	Failpoint func(ctx context.Context, name string) error
	// Secret signs every delivery (EDGEPIPE_WEBHOOK_SECRET). Required: an
	// unsigned webhook cannot be told apart from a forged one.
	Secret []byte
	// Client sends the requests. nil means NewClient(AllowPrivate,
	// Timeout), which carries the SSRF dial guard; a Client set here
	// replaces that guard, so only tests should set it.
	Client *http.Client
	// AllowPrivate lets deliveries reach loopback and private addresses
	// (local development).
	AllowPrivate bool
	// Timeout bounds one delivery request. Default 10 s.
	Timeout time.Duration
	// Backoff schedules retries: the delay after attempt n is drawn from
	// Backoff.Backoff(n) but is at least Backoff.Base, and MaxAttempts is the
	// number of sends before the delivery is given up. Default: 5 s base,
	// 1 h cap, 12 attempts (about 4–8 hours in total).
	Backoff pipeline.RetryPolicy
	// Poll is how often the outbox is checked for due deliveries. Default 1 s.
	Poll time.Duration
	// Lease is how long a claim hides a delivery from other dispatchers.
	// Default 2 min; it must exceed Timeout, or a slow receiver would get
	// the same delivery from two dispatchers.
	Lease time.Duration
	// Batch is the most deliveries claimed at once. Default 16.
	Batch int
	// Concurrency bounds requests in flight. Default 4.
	Concurrency int
	Clock       pipeline.Clock
	Logger      *slog.Logger
	Metrics     Metrics
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Backoff.Base == 0 && c.Backoff.Cap == 0 && c.Backoff.MaxAttempts == 0 {
		c.Backoff = pipeline.RetryPolicy{Base: 5 * time.Second, Cap: time.Hour, MaxAttempts: 12}
	}
	if c.Poll == 0 {
		c.Poll = time.Second
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Minute
	}
	if c.Batch == 0 {
		c.Batch = 16
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Client == nil {
		c.Client = NewClient(c.AllowPrivate, c.Timeout)
	}
}

// Validate reports the first bad setting (after defaults).
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: webhook: no store", pipeline.ErrInvalidInput)
	case len(c.Secret) < 16:
		return fmt.Errorf("%w: webhook: the signing secret (EDGEPIPE_WEBHOOK_SECRET) must be at least 16 bytes", pipeline.ErrInvalidInput)
	case c.Timeout <= 0 || c.Poll <= 0 || c.Batch < 1 || c.Concurrency < 1:
		return fmt.Errorf("%w: webhook: timeout, poll, batch and concurrency must be positive", pipeline.ErrInvalidInput)
	case c.Lease <= c.Timeout:
		return fmt.Errorf("%w: webhook: lease %s must exceed the request timeout %s", pipeline.ErrInvalidInput, c.Lease, c.Timeout)
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("webhook backoff: %w", err)
	}
	return nil
}

// Dispatcher sends outbox deliveries. Start it once; Stop it once.
type Dispatcher struct {
	cfg Config
	sem chan struct{}

	svc pipeline.Service // the lifecycle shared by edgepipe's long-running parts
	wg  sync.WaitGroup
}

// New validates cfg and returns a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Dispatcher{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Start runs the poll loop in the background until Stop. ctx bounds the
// loop as well.
func (d *Dispatcher) Start(ctx context.Context) error {
	// Requests outlive the loop's context so that Stop can let them finish.
	return d.svc.StartWork(ctx, d.loop)
}

// Stop ends the poll loop and waits for requests in flight until ctx ends,
// then cancels them. A delivery canceled this way stays claimed until its
// lease runs out and is then sent again.
func (d *Dispatcher) Stop(ctx context.Context) error { return d.svc.Stop(ctx) }

func (d *Dispatcher) loop(loopCtx, workCtx context.Context) {
	defer d.wg.Wait()
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		n, err := d.dispatch(loopCtx, workCtx, false)
		if err != nil && loopCtx.Err() == nil {
			d.cfg.Logger.Error("webhook: claim deliveries", "err", err)
		}
		if n == d.cfg.Batch {
			continue // a full batch: there may be more due right now
		}
		select {
		case <-loopCtx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce claims one batch of due deliveries, sends them and records the
// results before returning how many it claimed. Tests drive the dispatcher
// with it instead of Start.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	return d.dispatch(ctx, ctx, true)
}

func (d *Dispatcher) dispatch(loopCtx, workCtx context.Context, wait bool) (int, error) {
	ds, err := d.cfg.Store.ClaimWebhooks(loopCtx, d.cfg.Batch, d.cfg.Lease)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, dl := range ds {
		select {
		case d.sem <- struct{}{}:
		case <-loopCtx.Done():
			// Unsent claims come back when their lease ends.
			wg.Wait()
			return len(ds), loopCtx.Err()
		}
		wg.Add(1)
		d.wg.Add(1)
		go func() {
			defer func() { <-d.sem; wg.Done(); d.wg.Done() }()
			d.deliver(workCtx, dl)
		}()
	}
	if wait {
		wg.Wait()
	}
	return len(ds), nil
}

// deliver sends one delivery and records the result. Its only writes are to
// the outbox row.
func (d *Dispatcher) deliver(ctx context.Context, dl Delivery) {
	log := d.cfg.Logger.With("delivery", dl.ID, "job", dl.JobID, "attempt", dl.Attempts)
	if d.cfg.Failpoint != nil {
		if err := d.cfg.Failpoint(ctx, "webhook_dispatch"); err != nil {
			return // as if the dispatcher died: the claim lapses and the delivery is retried
		}
	}
	safe, cause := d.send(ctx, dl)
	if ctx.Err() != nil {
		return // shutting down: the claim lapses and the delivery is retried
	}
	var err error
	switch {
	case safe == "":
		err = d.cfg.Store.MarkWebhookDelivered(ctx, dl)
		d.count(OutcomeDelivered)
	case dl.Attempts >= d.cfg.Backoff.MaxAttempts:
		log.Warn("webhook: giving up", "last_error", safe, "err", cause)
		err = d.cfg.Store.MarkWebhookFailed(ctx, dl, safe, time.Time{})
		d.count(OutcomeFailed)
	default:
		next := d.cfg.Clock.Now().Add(max(d.cfg.Backoff.Backoff(dl.Attempts), d.cfg.Backoff.Base))
		log.Info("webhook: delivery failed, will retry", "last_error", safe, "next", next, "err", cause)
		err = d.cfg.Store.MarkWebhookFailed(ctx, dl, safe, next)
		d.count(OutcomeRetry)
	}
	if err != nil {
		log.Warn("webhook: record delivery result", "err", err)
	}
}

func (d *Dispatcher) count(outcome string) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.WebhookDelivery(outcome)
	}
}

// send POSTs the delivery. It returns "" on a 2xx answer, and otherwise a
// safe description (never the receiver's body) plus the cause for the log.
func (d *Dispatcher) send(ctx context.Context, dl Delivery) (safe string, cause error) {
	if _, err := ParseURL(dl.URL); err != nil {
		return "invalid url", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return "invalid url", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "edgepipe-webhook/1")
	req.Header.Set(SignatureHeader, Sign(d.cfg.Secret, d.cfg.Clock.Now(), dl.Payload))
	req.Header.Set(DeliveryHeader, strconv.FormatInt(dl.ID, 10))
	req.Header.Set(AttemptHeader, strconv.Itoa(dl.Attempts))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return describe(err), err
	}
	// Drain a little so the connection can be reused; the body is never
	// stored or logged.
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "HTTP " + strconv.Itoa(resp.StatusCode), fmt.Errorf("receiver answered %s", resp.Status)
	}
	return "", nil
}

// describe turns a transport error into a short class that is safe to store.
func describe(err error) string {
	var ne net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		return "refused: target address is not public"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &dnsErr):
		return "host name does not resolve"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "connection failed"
}

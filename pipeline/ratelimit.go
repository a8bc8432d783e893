package pipeline

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate limits shared by every worker (docs/design.md §6). Each (provider,
// operation) has one token bucket kept in the job store, so N processes on
// N machines draw from the same allowance: a limit of requests per period
// (the bucket refills at that rate up to Burst tokens) and of concurrent
// calls (slots with an expiry, so a crashed process's slot frees itself). A
// 429 with Retry-After pauses the bucket for every process. The bucket
// arithmetic lives here once (DecideRate, RateBucket.Refill, PauseUntil);
// a driver only reads the bucket row, calls it and writes the result back
// in one transaction.

// RateLimit is the limit of one (provider, operation) bucket.
type RateLimit struct {
	// Provider is the routed provider's name, as in the intent rows
	// (ProviderName); Op is the operation (OpImage, ...).
	Provider, Op string
	// Requests per Per is the refill rate.
	Requests int
	Per      time.Duration
	// Burst is the bucket's capacity: how many requests may leave at once
	// after a quiet spell. ParseRateLimits defaults it to Requests.
	Burst int
	// Concurrency bounds the calls in flight at once; 0 is no bound.
	Concurrency int
}

// Validate reports a limit no bucket can keep.
func (l RateLimit) Validate() error {
	switch {
	case l.Provider == "" || l.Op == "":
		return fmt.Errorf("%w: a rate limit needs a provider and an operation", ErrInvalidInput)
	case l.Requests < 1 || l.Per <= 0:
		return fmt.Errorf("%w: rate limit %s:%s needs at least one request per positive period", ErrInvalidInput, l.Provider, l.Op)
	case l.Burst < 1:
		return fmt.Errorf("%w: rate limit %s:%s needs a burst of at least 1", ErrInvalidInput, l.Provider, l.Op)
	case l.Concurrency < 0:
		return fmt.Errorf("%w: rate limit %s:%s has a negative concurrency", ErrInvalidInput, l.Provider, l.Op)
	}
	return nil
}

// rateTokenScale is how many stored units make one token: buckets keep
// whole micro-tokens (an integer column on every driver).
const rateTokenScale = 1_000_000

// RateBucket is the stored state of one bucket.
type RateBucket struct {
	// MicroTokens is the bucket's content at RefilledAt, in millionths of
	// a token.
	MicroTokens int64
	RefilledAt  time.Time
	// PausedUntil: no token is handed out before it (a provider's 429).
	PausedUntil time.Time
}

// NewRateBucket is a bucket seen for the first time: full.
func NewRateBucket(l RateLimit, now time.Time) RateBucket {
	return RateBucket{MicroTokens: int64(l.Burst) * rateTokenScale, RefilledAt: now}
}

// Refill adds what the time since RefilledAt earned, up to the capacity
// (Burst). A clock that went back earns nothing and keeps RefilledAt.
func (b RateBucket) Refill(l RateLimit, now time.Time) RateBucket {
	capacity := int64(l.Burst) * rateTokenScale
	if elapsed := now.Sub(b.RefilledAt); elapsed > 0 {
		earned := elapsed.Seconds() * float64(l.Requests) / l.Per.Seconds() * rateTokenScale
		b.MicroTokens = int64(math.Min(float64(b.MicroTokens)+earned, float64(capacity)))
		b.RefilledAt = now
	}
	b.MicroTokens = min(b.MicroTokens, capacity)
	return b
}

// PauseUntil keeps the bucket shut until t; a later pause wins.
func (b RateBucket) PauseUntil(t time.Time) RateBucket {
	if t.After(b.PausedUntil) {
		b.PausedUntil = t
	}
	return b
}

// RateSlots are a bucket's concurrency slots that have not expired.
type RateSlots struct {
	Active int
	// NextExpiry is the earliest expiry among them (zero when none).
	NextExpiry time.Time
}

// RateDecision is DecideRate's answer.
type RateDecision struct {
	// Bucket is the state to store, whether or not a token was granted.
	Bucket  RateBucket
	Granted bool
	// Wait, when not granted, is how long until a token could be had (at
	// least 1ms): the pause's end or the refill of a whole token, exactly.
	// A full concurrency bound waits for the first slot to expire, but a
	// slot released earlier frees it sooner, so that part of the wait is
	// at most rateSlotRecheck: a taker asks again that soon.
	Wait time.Duration
}

// rateSlotRecheck bounds a wait for a concurrency slot: a slot may be
// released any time.
const rateSlotRecheck = time.Second

// DecideRate takes one token from b at now, if the bucket is not paused,
// holds a whole token and (when l bounds concurrency) has a free slot.
func DecideRate(b RateBucket, l RateLimit, slots RateSlots, now time.Time) RateDecision {
	b = b.Refill(l, now)
	var wait time.Duration
	if now.Before(b.PausedUntil) {
		wait = b.PausedUntil.Sub(now)
	}
	if short := rateTokenScale - b.MicroTokens; short > 0 {
		secs := float64(short) / rateTokenScale * l.Per.Seconds() / float64(l.Requests)
		wait = max(wait, time.Duration(math.Ceil(secs*float64(time.Second))))
	}
	if l.Concurrency > 0 && slots.Active >= l.Concurrency {
		wait = max(wait, min(slots.NextExpiry.Sub(now), rateSlotRecheck), time.Millisecond)
	}
	if wait > 0 {
		return RateDecision{Bucket: b, Wait: max(wait, time.Millisecond)}
	}
	b.MicroTokens -= rateTokenScale
	return RateDecision{Bucket: b, Granted: true}
}

// RateLimitStore keeps the buckets where every process sees them (both job
// store drivers implement it). Each method is one transaction.
type RateLimitStore interface {
	// TakeRateToken takes a token (and a slot, when the limit bounds
	// concurrency) from the bucket of p.Limit at the store's now, or says
	// how long to wait. A bucket not stored yet starts full.
	TakeRateToken(ctx context.Context, p *TakeRateTokenParams) (RateGrant, error)
	// ReleaseRateSlot frees a granted slot; an unknown or expired slot is
	// no error.
	ReleaseRateSlot(ctx context.Context, p *ReleaseRateSlotParams) error
	// PauseRateBucket shuts the bucket of p.Limit for p.For from the
	// store's now, for every process (a 429's Retry-After).
	PauseRateBucket(ctx context.Context, p *PauseRateBucketParams) error
}

// TakeRateTokenParams are RateLimitStore.TakeRateToken's.
type TakeRateTokenParams struct {
	Limit RateLimit
	// Holder names the taker (attempt and unit), for an operator reading
	// the slots.
	Holder string
	// SlotTTL is how long a granted slot lives unless released: longer
	// than any call it covers.
	SlotTTL time.Duration
}

// Validate reports parameters no store can act on.
func (p *TakeRateTokenParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: take rate token needs parameters", ErrInvalidInput)
	}
	if err := p.Limit.Validate(); err != nil {
		return err
	}
	if p.Limit.Concurrency > 0 && p.SlotTTL <= 0 {
		return fmt.Errorf("%w: a concurrency slot needs a positive time to live", ErrInvalidInput)
	}
	return nil
}

// RateGrant is TakeRateToken's answer.
type RateGrant struct {
	Granted bool
	// SlotID is the slot to release after the call (0: the limit bounds no
	// concurrency); SlotExpires is when it frees itself.
	SlotID      int64
	SlotExpires time.Time
	// Wait: see RateDecision.Wait.
	Wait time.Duration
}

// ReleaseRateSlotParams are RateLimitStore.ReleaseRateSlot's.
type ReleaseRateSlotParams struct {
	SlotID int64
}

// PauseRateBucketParams are RateLimitStore.PauseRateBucket's.
type PauseRateBucketParams struct {
	Limit RateLimit
	For   time.Duration
}

// Validate reports parameters no store can act on.
func (p *PauseRateBucketParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: pause rate bucket needs parameters", ErrInvalidInput)
	}
	if err := p.Limit.Validate(); err != nil {
		return err
	}
	if p.For < 0 {
		return fmt.Errorf("%w: a pause cannot be negative", ErrInvalidInput)
	}
	return nil
}

// Rate limiter defaults.
const (
	// DefaultRateSlotTTL is how long a concurrency slot outlives a process
	// that died holding it; it must exceed the provider timeout.
	DefaultRateSlotTTL = 5 * time.Minute
	// DefaultRatePoll is how often a waiting unit checks whether its job
	// was canceled; it asks the bucket again only when the wait it was
	// given is over.
	DefaultRatePoll = time.Second
)

// RateLimits configures the shared limiter of an engine. With no Limits the
// engine never touches Store.
type RateLimits struct {
	Store  RateLimitStore
	Limits []RateLimit
	// SlotTTL: DefaultRateSlotTTL when 0. Poll: DefaultRatePoll when 0.
	SlotTTL time.Duration
	Poll    time.Duration
}

func (r *RateLimits) setDefaults() {
	if r.SlotTTL == 0 {
		r.SlotTTL = DefaultRateSlotTTL
	}
	if r.Poll == 0 {
		r.Poll = DefaultRatePoll
	}
}

// Validate reports a bad limit, a bucket named twice, or limits without a
// store.
func (r RateLimits) Validate() error {
	if len(r.Limits) > 0 && r.Store == nil {
		return fmt.Errorf("%w: rate limits need a store", ErrInvalidInput)
	}
	return validateRateLimits(r.Limits)
}

func validateRateLimits(ls []RateLimit) error {
	seen := map[string]bool{}
	for _, l := range ls {
		if err := l.Validate(); err != nil {
			return err
		}
		k := l.Provider + ":" + l.Op
		if seen[k] {
			return fmt.Errorf("%w: rate limit %s is given twice", ErrInvalidInput, k)
		}
		seen[k] = true
	}
	return nil
}

// limit returns the limit of (provider, op), if one is configured.
func (r RateLimits) limit(provider, op string) (RateLimit, bool) {
	for _, l := range r.Limits {
		if l.Provider == provider && l.Op == op {
			return l, true
		}
	}
	return RateLimit{}, false
}

// RateLimitsSyntax describes ParseRateLimits' input, for error messages and
// the README.
const RateLimitsSyntax = "comma-separated PROVIDER:OP=N/UNIT[:CONCURRENCY[:BURST]] with UNIT s, min or h, e.g. workers-ai:image=60/min:4,replicate:video_submit=10/min:2"

// ParseRateLimits reads RateLimitsSyntax. An empty spec is no limits. Burst
// defaults to N; a concurrency of 0 (or none) bounds nothing.
func ParseRateLimits(spec string) ([]RateLimit, error) {
	var out []RateLimit
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	for i, entry := range strings.Split(spec, ",") {
		l, err := parseRateLimit(strings.TrimSpace(entry))
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d %q: %s (want %s)", ErrInvalidInput, i+1, entry, err.Error(), RateLimitsSyntax)
		}
		out = append(out, l)
	}
	if err := validateRateLimits(out); err != nil {
		return nil, err
	}
	return out, nil
}

var rateUnits = map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour}

func parseRateLimit(entry string) (RateLimit, error) {
	bucket, rate, ok := strings.Cut(entry, "=")
	provider, op, ok2 := strings.Cut(bucket, ":")
	if !ok || !ok2 || strings.TrimSpace(provider) == "" || strings.TrimSpace(op) == "" {
		return RateLimit{}, fmt.Errorf("no PROVIDER:OP=")
	}
	if op != OpImage && op != OpSpeech && op != OpVideoSubmit {
		return RateLimit{}, fmt.Errorf("unknown operation %q (image, speech or video_submit)", op)
	}
	fields := strings.Split(rate, ":")
	if len(fields) > 3 {
		return RateLimit{}, fmt.Errorf("too many ':' fields")
	}
	n, unit, ok := strings.Cut(fields[0], "/")
	per, known := rateUnits[unit]
	requests, err := strconv.Atoi(n)
	if !ok || !known || err != nil || requests < 1 {
		return RateLimit{}, fmt.Errorf("rate %q is not N/s, N/min or N/h with N at least 1", fields[0])
	}
	l := RateLimit{Provider: provider, Op: op, Requests: requests, Per: per, Burst: requests}
	if len(fields) > 1 {
		if l.Concurrency, err = strconv.Atoi(fields[1]); err != nil || l.Concurrency < 0 {
			return RateLimit{}, fmt.Errorf("concurrency %q is not a whole number of at least 0", fields[1])
		}
	}
	if len(fields) > 2 {
		if l.Burst, err = strconv.Atoi(fields[2]); err != nil || l.Burst < 1 {
			return RateLimit{}, fmt.Errorf("burst %q is not a whole number of at least 1", fields[2])
		}
	}
	return l, nil
}

// RateBucketTx is a driver's transaction on one bucket: the only part of
// TakeRate and PauseRate a driver writes. Every method runs in the same
// transaction, which commits after TakeRate or PauseRate returned nil.
type RateBucketTx interface {
	// LockBucket returns the bucket of l, stored as fresh if it has no
	// row yet, and holds it (a row lock, or the database's one writer)
	// until the transaction ends.
	LockBucket(ctx context.Context, l RateLimit, fresh RateBucket) (RateBucket, error)
	// SaveBucket writes the bucket of l back.
	SaveBucket(ctx context.Context, l RateLimit, b RateBucket) error
	// LiveSlots deletes the bucket's slots expired at now and counts the
	// rest.
	LiveSlots(ctx context.Context, l RateLimit, now time.Time) (RateSlots, error)
	// AddSlot stores a slot of the bucket and returns its id.
	AddSlot(ctx context.Context, l RateLimit, holder string, now, expires time.Time) (int64, error)
}

// TakeRate is TakeRateToken on a driver's transaction at the store's now
// (whole milliseconds, as stored).
func TakeRate(ctx context.Context, tx RateBucketTx, p *TakeRateTokenParams, now time.Time) (RateGrant, error) {
	if err := p.Validate(); err != nil {
		return RateGrant{}, err
	}
	b, err := tx.LockBucket(ctx, p.Limit, NewRateBucket(p.Limit, now))
	if err != nil {
		return RateGrant{}, err
	}
	var slots RateSlots
	if p.Limit.Concurrency > 0 {
		if slots, err = tx.LiveSlots(ctx, p.Limit, now); err != nil {
			return RateGrant{}, err
		}
	}
	d := DecideRate(b, p.Limit, slots, now)
	if err := tx.SaveBucket(ctx, p.Limit, d.Bucket); err != nil {
		return RateGrant{}, err
	}
	if !d.Granted {
		return RateGrant{Wait: d.Wait}, nil
	}
	g := RateGrant{Granted: true}
	if p.Limit.Concurrency > 0 {
		g.SlotExpires = now.Add(p.SlotTTL)
		if g.SlotID, err = tx.AddSlot(ctx, p.Limit, p.Holder, now, g.SlotExpires); err != nil {
			return RateGrant{}, err
		}
	}
	return g, nil
}

// PauseRate is PauseRateBucket on a driver's transaction at the store's
// now.
func PauseRate(ctx context.Context, tx RateBucketTx, p *PauseRateBucketParams, now time.Time) error {
	if err := p.Validate(); err != nil {
		return err
	}
	b, err := tx.LockBucket(ctx, p.Limit, NewRateBucket(p.Limit, now))
	if err != nil {
		return err
	}
	return tx.SaveBucket(ctx, p.Limit, b.PauseUntil(now.Add(p.For)))
}

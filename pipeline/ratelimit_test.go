package pipeline_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// DecideRate is the one token-bucket arithmetic both drivers use.
func TestDecideRate(t *testing.T) {
	t.Parallel()
	l := pipeline.RateLimit{Provider: "p", Op: pipeline.OpImage, Requests: 60, Per: time.Minute, Burst: 4, Concurrency: 2}
	const tok = 1_000_000
	full := pipeline.NewRateBucket(l, t0)
	empty := pipeline.RateBucket{MicroTokens: 0, RefilledAt: t0}
	for _, c := range []struct {
		name    string
		b       pipeline.RateBucket
		slots   pipeline.RateSlots
		now     time.Time
		granted bool
		wait    time.Duration
		tokens  int64
	}{
		{"full bucket grants", full, pipeline.RateSlots{}, t0, true, 0, 3 * tok},
		{"empty bucket waits a token's refill", empty, pipeline.RateSlots{}, t0, false, time.Second, 0},
		{"refill by elapsed time", empty, pipeline.RateSlots{}, t0.Add(2500 * time.Millisecond), true, 0, 1500_000},
		{"refill stops at the burst", empty, pipeline.RateSlots{}, t0.Add(time.Hour), true, 0, 3 * tok},
		{"a stored excess is cut to the burst", pipeline.RateBucket{MicroTokens: 9 * tok, RefilledAt: t0}, pipeline.RateSlots{}, t0, true, 0, 3 * tok},
		{"a clock gone back earns nothing", pipeline.RateBucket{MicroTokens: tok / 2, RefilledAt: t0}, pipeline.RateSlots{}, t0.Add(-time.Minute), false, 500 * time.Millisecond, tok / 2},
		{"paused", pipeline.RateBucket{MicroTokens: 4 * tok, RefilledAt: t0, PausedUntil: t0.Add(30 * time.Second)}, pipeline.RateSlots{}, t0, false, 30 * time.Second, 4 * tok},
		{"pause over", pipeline.RateBucket{MicroTokens: 4 * tok, RefilledAt: t0, PausedUntil: t0.Add(30 * time.Second)}, pipeline.RateSlots{}, t0.Add(30 * time.Second), true, 0, 3 * tok},
		{"slots full: asks again within a second", full, pipeline.RateSlots{Active: 2, NextExpiry: t0.Add(time.Minute)}, t0, false, time.Second, 4 * tok},
		{"slots full: the first expires sooner", full, pipeline.RateSlots{Active: 2, NextExpiry: t0.Add(300 * time.Millisecond)}, t0, false, 300 * time.Millisecond, 4 * tok},
		{"slots full and paused longer", pipeline.RateBucket{MicroTokens: 4 * tok, RefilledAt: t0, PausedUntil: t0.Add(time.Minute)}, pipeline.RateSlots{Active: 2, NextExpiry: t0.Add(time.Minute)}, t0, false, time.Minute, 4 * tok},
		{"one slot free", full, pipeline.RateSlots{Active: 1, NextExpiry: t0.Add(time.Minute)}, t0, true, 0, 3 * tok},
		{"the longer of pause and refill", pipeline.RateBucket{RefilledAt: t0, PausedUntil: t0.Add(100 * time.Millisecond)}, pipeline.RateSlots{}, t0, false, time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := pipeline.DecideRate(c.b, l, c.slots, c.now)
			if d.Granted != c.granted || d.Wait != c.wait || d.Bucket.MicroTokens != c.tokens {
				t.Fatalf("granted %v wait %s tokens %d; want %v %s %d", d.Granted, d.Wait, d.Bucket.MicroTokens, c.granted, c.wait, c.tokens)
			}
			if d.Bucket.PausedUntil != c.b.PausedUntil {
				t.Fatalf("the decision moved the pause to %s", d.Bucket.PausedUntil)
			}
		})
	}
}

// A limit that bounds no concurrency (Concurrency 0) grants whatever the
// slots say: it keeps none.
func TestDecideRateWithoutConcurrencyBound(t *testing.T) {
	t.Parallel()
	l := pipeline.RateLimit{Provider: "p", Op: pipeline.OpImage, Requests: 60, Per: time.Minute, Burst: 4}
	d := pipeline.DecideRate(pipeline.NewRateBucket(l, t0), l, pipeline.RateSlots{Active: 7, NextExpiry: t0.Add(time.Minute)}, t0)
	if !d.Granted || d.Wait != 0 {
		t.Fatalf("granted %v wait %s; want a token at once", d.Granted, d.Wait)
	}
}

// The parameters of the rate-limit store methods are checked the same way
// for every driver: a bad limit, a concurrency slot without a time to live
// and a negative pause are refused; a zero pause and a limit without
// concurrency that gives no slot TTL are fine.
func TestRateLimitParamsValidate(t *testing.T) {
	t.Parallel()
	ok := pipeline.RateLimit{Provider: "p", Op: pipeline.OpImage, Requests: 1, Per: time.Second, Burst: 1}
	slotted := ok
	slotted.Concurrency = 2
	bad := ok
	bad.Burst = 0
	for _, c := range []struct {
		name  string
		check func() error
		valid bool
	}{
		{"take: no concurrency, no TTL", (&pipeline.TakeRateTokenParams{Limit: ok}).Validate, true},
		{"take: slot with TTL", (&pipeline.TakeRateTokenParams{Limit: slotted, SlotTTL: time.Minute}).Validate, true},
		{"take: slot without TTL", (&pipeline.TakeRateTokenParams{Limit: slotted}).Validate, false},
		{"take: slot with negative TTL", (&pipeline.TakeRateTokenParams{Limit: slotted, SlotTTL: -time.Second}).Validate, false},
		{"take: bad limit", (&pipeline.TakeRateTokenParams{Limit: bad, SlotTTL: time.Minute}).Validate, false},
		{"take: nil", (*pipeline.TakeRateTokenParams)(nil).Validate, false},
		{"pause: zero", (&pipeline.PauseRateBucketParams{Limit: ok}).Validate, true},
		{"pause: a minute", (&pipeline.PauseRateBucketParams{Limit: slotted, For: time.Minute}).Validate, true},
		{"pause: negative", (&pipeline.PauseRateBucketParams{Limit: ok, For: -time.Second}).Validate, false},
		{"pause: bad limit", (&pipeline.PauseRateBucketParams{Limit: bad, For: time.Minute}).Validate, false},
		{"pause: nil", (*pipeline.PauseRateBucketParams)(nil).Validate, false},
	} {
		err := c.check()
		if c.valid && err != nil || !c.valid && !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: %v, want valid %v (ErrInvalidInput otherwise)", c.name, err, c.valid)
		}
	}
}

func TestRateBucketPauseUntilKeepsTheLater(t *testing.T) {
	t.Parallel()
	b := pipeline.RateBucket{}.PauseUntil(t0.Add(time.Minute)).PauseUntil(t0.Add(time.Second))
	if !b.PausedUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("paused until %s, want the later pause", b.PausedUntil)
	}
}

func TestParseRateLimits(t *testing.T) {
	t.Parallel()
	got, err := pipeline.ParseRateLimits(" workers-ai:image=60/min:4, replicate:video_submit=10/min:2:3,http:speech=5/s,x:image=2/h:0 ")
	want := []pipeline.RateLimit{
		{Provider: "workers-ai", Op: "image", Requests: 60, Per: time.Minute, Burst: 60, Concurrency: 4},
		{Provider: "replicate", Op: "video_submit", Requests: 10, Per: time.Minute, Burst: 3, Concurrency: 2},
		{Provider: "http", Op: "speech", Requests: 5, Per: time.Second, Burst: 5},
		{Provider: "x", Op: "image", Requests: 2, Per: time.Hour, Burst: 2},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err := pipeline.ParseRateLimits("  "); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{
		"workers-ai:image", "workers-ai=60/min", ":image=60/min", "p:render=1/s", "p:image=0/min", "p:image=60/day",
		"p:image=60", "p:image=x/min", "p:image=60/min:-1", "p:image=60/min:2:0", "p:image=60/min:1:2:3",
		"p:image=60/min,p:image=30/min", "p:image=60/min,",
	} {
		if _, err := pipeline.ParseRateLimits(bad); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%q: %v, want ErrInvalidInput", bad, err)
		}
	}
	// The least a limit may say: one request, a burst of one.
	if got, err := pipeline.ParseRateLimits("p:image=1/s:0:1"); err != nil || len(got) != 1 || got[0].Requests != 1 || got[0].Burst != 1 {
		t.Errorf("one request a second, burst 1: %+v, %v", got, err)
	}
	// The error names the bad entry by its place, counted from 1.
	if _, err := pipeline.ParseRateLimits("p:image=60/min, q:image=sixty/min"); err == nil || !strings.Contains(err.Error(), `entry 2 " q:image=sixty/min"`) {
		t.Errorf("a bad second entry: %v, want it named as entry 2", err)
	}
}

// memRateTx is one bucket's transaction in memory: the bucket, its live
// slots, and which of LiveSlots and AddSlot were asked.
type memRateTx struct {
	bucket          *pipeline.RateBucket
	active          int
	slotReads, adds int
}

func (m *memRateTx) LockBucket(_ context.Context, _ pipeline.RateLimit, fresh pipeline.RateBucket) (pipeline.RateBucket, error) {
	if m.bucket == nil {
		m.bucket = &fresh
	}
	return *m.bucket, nil
}

func (m *memRateTx) SaveBucket(_ context.Context, _ pipeline.RateLimit, b pipeline.RateBucket) error {
	*m.bucket = b
	return nil
}

func (m *memRateTx) LiveSlots(context.Context, pipeline.RateLimit, time.Time) (pipeline.RateSlots, error) {
	m.slotReads++
	return pipeline.RateSlots{Active: m.active}, nil
}

func (m *memRateTx) AddSlot(context.Context, pipeline.RateLimit, string, time.Time, time.Time) (int64, error) {
	m.adds++
	m.active++
	return int64(m.active), nil
}

// TakeRate reads and adds concurrency slots only for a limit with a
// concurrency bound, and a full bound refuses a token the rate would grant;
// a granted slot expires SlotTTL after now.
func TestTakeRate(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	take := func(tx *memRateTx, concurrency int) pipeline.RateGrant {
		t.Helper()
		g, err := pipeline.TakeRate(t.Context(), tx, &pipeline.TakeRateTokenParams{
			Limit:  pipeline.RateLimit{Provider: "p", Op: pipeline.OpImage, Requests: 10, Per: time.Minute, Burst: 10, Concurrency: concurrency},
			Holder: "a1/0", SlotTTL: time.Minute,
		}, now)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	unbounded := &memRateTx{}
	if g := take(unbounded, 0); !g.Granted || g.SlotID != 0 || unbounded.slotReads != 0 || unbounded.adds != 0 {
		t.Errorf("no concurrency bound: %+v, %d slot reads, %d slots added; want a grant without slots", g, unbounded.slotReads, unbounded.adds)
	}
	bounded := &memRateTx{}
	if g := take(bounded, 1); !g.Granted || g.SlotID != 1 || !g.SlotExpires.Equal(now.Add(time.Minute)) || bounded.slotReads != 1 {
		t.Errorf("a free slot: %+v, %d slot reads; want a grant holding slot 1 until now+1m", g, bounded.slotReads)
	}
	if g := take(bounded, 1); g.Granted || bounded.adds != 1 {
		t.Errorf("the one slot taken: %+v, %d slots added; want no grant", g, bounded.adds)
	}
}

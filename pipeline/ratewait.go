package pipeline

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// rateSlot is what a granted token holds until the call ends: the
// concurrency slot to give back (id 0: none).
type rateSlot struct {
	limit RateLimit
	id    int64
}

// waitRate waits, before anything of a call is written, for a token of the
// (provider, op) bucket when a limit is configured for it (docs/design.md
// §6). Waiting is not an attempt and not a call: no intent row exists yet
// and the attempt count does not move; the worker keeps heartbeating the
// lease as for any other wait. The wait ends with the context (a sibling's
// failure, shutdown, a lost lease) or the job's cancellation.
func (u *unitRun) waitRate(ctx context.Context, provider, op string) (rateSlot, error) {
	l, ok := u.d.Rate.limit(provider, op)
	if !ok {
		return rateSlot{}, nil
	}
	p := &TakeRateTokenParams{Limit: l, Holder: u.a.lease.AttemptID + "/" + strconv.Itoa(u.unit.Scene), SlotTTL: u.d.Rate.SlotTTL}
	var since time.Time
	for {
		g, err := u.d.Rate.Store.TakeRateToken(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return rateSlot{}, ctx.Err()
			}
			return rateSlot{}, storeErr(err)
		}
		if g.Granted {
			if !since.IsZero() {
				u.a.log.Info("rate limit: token granted", "provider", provider, "op", op, "scene", u.unit.Scene, "waited", u.d.Clock.Now().Sub(since))
			}
			return rateSlot{limit: l, id: g.SlotID}, nil
		}
		if since.IsZero() {
			since = u.d.Clock.Now()
			u.a.log.Info("rate limit: waiting for a token", "provider", provider, "op", op, "scene", u.unit.Scene, "wait", g.Wait)
		}
		if err := u.sleepRate(ctx, g.Wait); err != nil {
			return rateSlot{}, err
		}
	}
}

// sleepRate sleeps for d, looking every Poll whether the job was canceled.
func (u *unitRun) sleepRate(ctx context.Context, d time.Duration) error {
	for d > 0 {
		step := min(d, u.d.Rate.Poll)
		if err := sleepCtx(ctx, step); err != nil {
			return err
		}
		if err := checkCancel(ctx, u.d.Store, u.a.job.ID); err != nil {
			return err
		}
		d -= step
	}
	return nil
}

// release gives the slot back once the call ended (whatever its outcome);
// a slot that cannot be released frees itself at its expiry.
func (u *unitRun) releaseRate(ctx context.Context, s *rateSlot) {
	if s.id == 0 {
		return
	}
	id := s.id
	s.id = 0
	if err := u.d.Rate.Store.ReleaseRateSlot(context.WithoutCancel(ctx), &ReleaseRateSlotParams{SlotID: id}); err != nil {
		u.a.log.Warn("rate limit: releasing a slot failed; it frees itself at its expiry", "slot", id, "err", err)
	}
}

// pauseRate shuts the call's bucket for every process when the provider
// answered 429 with a Retry-After, on top of the job's own retry.
func (u *unitRun) pauseRate(ctx context.Context, s rateSlot, op string, err error) {
	var ce *CallError
	if s.limit.Provider == "" || !errors.As(err, &ce) || ce.Op != op || ce.Outcome != OutcomeRateLimited || ce.RetryAfter <= 0 {
		return
	}
	if perr := u.d.Rate.Store.PauseRateBucket(context.WithoutCancel(ctx), &PauseRateBucketParams{Limit: s.limit, For: ce.RetryAfter}); perr != nil {
		u.a.log.Warn("rate limit: pausing the bucket after a 429 failed", "provider", s.limit.Provider, "op", op, "err", perr)
		return
	}
	u.a.log.Info("rate limit: provider answered 429; bucket paused for every worker", "provider", s.limit.Provider, "op", op, "for", ce.RetryAfter)
}

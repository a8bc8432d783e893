package fake

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// plan is the fate of one request, drawn all at once so that every
// faultable request consumes exactly drawsPerRequest numbers from the
// generator whatever happens to it. Then the k-th request of a sequential run
// meets the same faults for a given seed and config, even when an earlier
// request was cut short.
type plan struct {
	op           Operation
	latency      time.Duration
	rateLimit    bool
	retryAfter   int // seconds
	beforeCommit bool
	afterCommit  bool
	drop         bool
	asyncFail    bool
}

const drawsPerRequest = 6

func (s *Server) draw(op Operation) plan {
	s.chaosMu.Lock()
	f := s.faults.For(op)
	var u [drawsPerRequest]float64
	for i := range u {
		u[i] = s.rng.Float64()
	}
	s.chaosMu.Unlock()

	p := plan{op: op, retryAfter: f.retryAfterSeconds()}
	if u[0] < f.LatencyP {
		p.latency = f.Latency
	}
	p.rateLimit = u[1] < f.RateLimit
	p.beforeCommit = u[2] < f.BeforeCommit
	p.afterCommit = u[3] < f.AfterCommit
	p.drop = u[4] < f.Drop
	p.asyncFail = op == OpVideo && u[5] < f.AsyncFail
	return p
}

// beforeCommit applies the faults a request meets before the provider
// commits it: latency, then rate_limit, then before_commit. It returns false
// when the request was answered (or the client went away) and must stop.
func (s *Server) beforeCommit(ctx context.Context, w http.ResponseWriter, p plan) bool {
	if p.latency > 0 {
		s.ledger.inject(FaultLatency)
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
	if p.rateLimit {
		s.ledger.inject(FaultRateLimit)
		s.log.Debug("fake provider: injected fault", "op", p.op, "fault", FaultRateLimit)
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
		w.Header().Set(HeaderFault, string(FaultRateLimit))
		writeError(w, http.StatusTooManyRequests, CodeRateLimited, "rate limit exceeded, retry later")
		return false
	}
	if p.beforeCommit {
		s.ledger.inject(FaultBeforeCommit)
		s.log.Debug("fake provider: injected fault", "op", p.op, "fault", FaultBeforeCommit)
		w.Header().Set(HeaderFault, string(FaultBeforeCommit))
		writeError(w, http.StatusInternalServerError, CodeServerError, "internal server error")
		return false
	}
	return true
}

// afterCommit applies the faults a committed (billed) request may still
// meet: drop, then after_commit. It returns false when the request was
// answered or its connection dropped.
func (s *Server) afterCommit(w http.ResponseWriter, p plan) bool {
	if p.drop {
		s.ledger.inject(FaultDrop)
		s.log.Debug("fake provider: injected fault", "op", p.op, "fault", FaultDrop)
		dropConnection(w)
		return false
	}
	if p.afterCommit {
		s.ledger.inject(FaultAfterCommit)
		s.log.Debug("fake provider: injected fault", "op", p.op, "fault", FaultAfterCommit)
		w.Header().Set(HeaderFault, string(FaultAfterCommit))
		writeError(w, http.StatusInternalServerError, CodeServerError, "internal server error")
		return false
	}
	return true
}

// dropConnection closes the client's connection without writing a response,
// the way a crashed provider or a cut network does. Where the connection
// cannot be hijacked (HTTP/2, a ResponseRecorder) the handler aborts with
// http.ErrAbortHandler, which net/http turns into a reset without a response
// and without logging a stack trace.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close() // nothing useful to do if the close fails: the client sees the drop either way
}

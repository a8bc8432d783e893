package api

import (
	"context"
	"sync"
	"time"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Presence reads the versions the deployment's live processes bind
// (pipeline.PresenceStore, the bindings heartbeat).
type Presence interface {
	LiveBindings(ctx context.Context, p *pipeline.LiveBindingsParams) ([]string, error)
}

// liveCacheFor bounds how often submissions read the live bindings: a
// version bound or unbound is seen within this much, and a burst of
// submissions costs one query, not one each.
const liveCacheFor = 2 * time.Second

// liveBindings caches Presence.LiveBindings.
type liveBindings struct {
	mu       sync.Mutex
	versions []string
	readAt   time.Time
}

// route decides the queue of instance id id (never an internal job key: its
// version is the instance id's prefix) against the deployment's bindings: this
// process's own (EDGEPIPE_BINDINGS) and those of its live processes. If
// the live bindings cannot be read, the job is routed on this process's
// alone — the same answer a single-process deployment gives.
func (s *Server) route(ctx context.Context, id string) routing.Decision {
	d := s.cfg.Router.Route(id)
	if !d.DeadLetter || s.cfg.Presence == nil {
		return d
	}
	return s.cfg.Router.RouteLive(id, s.liveVersions(ctx))
}

func (s *Server) liveVersions(ctx context.Context) []string {
	lb := &s.live
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := s.cfg.Clock.Now()
	if !lb.readAt.IsZero() && now.Sub(lb.readAt) < liveCacheFor && now.After(lb.readAt) {
		return lb.versions
	}
	vs, err := s.cfg.Presence.LiveBindings(ctx, &pipeline.LiveBindingsParams{Since: pipeline.LiveSince(now, s.cfg.PresenceInterval)})
	if err != nil {
		s.log.Warn("reading the deployment's live bindings failed; routing on this process's", "err", err)
		return nil
	}
	lb.versions, lb.readAt = vs, now
	return vs
}

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrServiceStopped is the cancel cause a Service gives its run function's
// context at Stop.
var ErrServiceStopped = errors.New("service stopped")

// Service is the start/stop lifecycle shared by edgepipe's long-running
// parts (after River's startstop.BaseStartStop): Start runs a function in a
// goroutine under a context that Stop cancels (with ErrServiceStopped as the
// cause), Stop waits for it until its own context ends. Stop before Start
// and a second Stop are no-ops; Start while running is an error; after Stop
// the service may be started again. The zero value is ready to use.
type Service struct {
	mu      sync.Mutex
	running bool
	cancel  context.CancelCauseFunc // ends the run (StartWork: its loop)
	abort   context.CancelCauseFunc // StartWork: ends the work in flight
	done    chan struct{}
}

// Start runs run(ctx) in a goroutine. ctx bounds the run as well as Stop:
// its cancellation ends run too.
func (s *Service) Start(ctx context.Context, run func(ctx context.Context)) error {
	return s.StartWork(ctx, func(loop, _ context.Context) { run(loop) })
}

// StartWork is Start for a part that drains at Stop (a worker's attempts, a
// dispatcher's requests): run gets a loop context, which Stop (or ctx)
// cancels at once — claim nothing more —, and a work context for what is
// in flight, which outlives the loop until Stop's own context ends, so work
// may finish within the caller's grace period. run must return once its
// work is done.
func (s *Service) StartWork(ctx context.Context, run func(loop, work context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("service already started")
	}
	loop, cancel := context.WithCancelCause(ctx)
	work, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	s.running, s.cancel, s.abort, s.done = true, cancel, abort, make(chan struct{})
	done := s.done
	go func() {
		defer close(done)
		defer abort(ErrServiceStopped)
		run(loop, work)
	}()
	// The parent's end is as final as a Stop whose grace ran out.
	go func() {
		select {
		case <-ctx.Done():
			abort(context.Cause(ctx))
		case <-done:
		}
	}()
	return nil
}

// Started reports whether the service runs (was started and not stopped).
func (s *Service) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Stop cancels the run's (loop) context and waits for it to return; when
// ctx ends first, the work context is canceled too and Stop waits for the
// run to wind down, returning an error that says so.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return nil
	}
	s.running = false
	cancel, abort, done := s.cancel, s.abort, s.done
	s.mu.Unlock()
	cancel(ErrServiceStopped)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// Out of grace: interrupt the work in flight and wait for it to
		// wind down (it releases, it does not fail).
		abort(ErrServiceStopped)
		<-done
		return fmt.Errorf("stopped at the shutdown deadline, work in flight interrupted: %w", context.Cause(ctx))
	}
}

// Starter is a long-running part: a Worker, a Sweeper, a Dispatcher, a
// Presence.
type Starter interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// StartAll starts services in order; if one fails, the ones already started
// are stopped (in reverse order) and the error returned.
func StartAll(ctx context.Context, services ...Starter) error {
	for i, svc := range services {
		if err := svc.Start(ctx); err != nil {
			errs := []error{err}
			for j := i - 1; j >= 0; j-- {
				errs = append(errs, services[j].Stop(context.WithoutCancel(ctx)))
			}
			return errors.Join(errs...)
		}
	}
	return nil
}

// StopAll stops services in the given order, each under ctx, and joins
// their errors.
func StopAll(ctx context.Context, services ...Starter) error {
	var errs []error
	for _, svc := range services {
		errs = append(errs, svc.Stop(ctx))
	}
	return errors.Join(errs...)
}

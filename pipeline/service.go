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
	cancel  context.CancelCauseFunc
	done    chan struct{}
}

// Start runs run(ctx) in a goroutine. ctx bounds the run as well as Stop:
// its cancellation (not its deadline semantics for Start) ends run too.
func (s *Service) Start(ctx context.Context, run func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("service already started")
	}
	rctx, cancel := context.WithCancelCause(ctx)
	s.running, s.cancel, s.done = true, cancel, make(chan struct{})
	done := s.done
	go func() {
		defer close(done)
		run(rctx)
	}()
	return nil
}

// Started reports whether the service runs (was started and not stopped).
func (s *Service) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Stop cancels the run function's context and waits for it to return, or
// for ctx to end (then the error says so and the function is left to end on
// its own).
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return nil
	}
	s.running = false
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	cancel(ErrServiceStopped)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("service did not stop in time: %w", context.Cause(ctx))
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

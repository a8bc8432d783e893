// Package groupcommit is the group-commit loop both job-store drivers
// (storage/sqlite, storage/postgres) run their submissions through. Every
// CreateJob must be durable before it returns (the API answers 202 only for
// a committed job), and a commit is the expensive part, so concurrent
// submissions share one: a single goroutine takes whatever requests are
// waiting, hands them to the driver's commit function as one group, and the
// driver answers each. How a group is written (one transaction, a pipelined
// batch, a retry per request) is the driver's; the lifecycle is here, once.
package groupcommit

import (
	"context"
	"runtime"
	"sync"

	"edgepipe/pipeline"
)

// MaxGroup is the most requests one group holds (and the queue's size).
const MaxGroup = 256

// Request is one submission waiting for its group.
type Request struct {
	Ctx context.Context
	Job pipeline.NewJob
	// Resp receives the answer; it has room for one, so the commit
	// function never blocks answering.
	Resp chan Response
}

// Response is a Request's answer.
type Response struct {
	Job     pipeline.Job
	Created bool
	Err     error
}

// Committer is the group-commit loop, a pipeline.Service like every other
// long-running part: the driver's Open starts it, its Close stops it. It
// runs once: after Stop (even a Stop before any Start) submissions are
// refused with the driver's closed error and Start is that error. Stop
// twice is a no-op.
type Committer struct {
	svc       pipeline.Service
	commit    func([]Request)
	errClosed error
	reqs      chan Request
	// closed is closed by the first Stop, once the loop has ended: a
	// submitter waiting on it knows its request will never run.
	closed chan struct{}

	mu      sync.Mutex
	stopped bool
}

var _ pipeline.Starter = (*Committer)(nil)

// New returns a committer that hands groups to commit, which must answer
// every request of the group on its Resp. errClosed is what submissions
// get once the committer is stopped (the driver's "store is closed").
func New(commit func([]Request), errClosed error) *Committer {
	return &Committer{commit: commit, errClosed: errClosed, reqs: make(chan Request, MaxGroup), closed: make(chan struct{})}
}

// Start runs the loop until Stop. ctx should not be a request's: its end
// stops the loop too.
func (c *Committer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.errClosed
	}
	return c.svc.Start(ctx, c.loop)
}

// Started reports whether the loop runs.
func (c *Committer) Started() bool { return c.svc.Started() }

// Stop ends the loop after the group it is committing, then answers every
// request still queued with the closed error. ctx only bounds the wait for
// the Service; a commit in progress is never interrupted.
func (c *Committer) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.svc.Stop(ctx)
	close(c.closed)
	for {
		select {
		case r := <-c.reqs:
			r.Resp <- Response{Err: c.errClosed}
		default:
			return err
		}
	}
}

// Submit hands nj to the loop and waits for its answer.
func (c *Committer) Submit(ctx context.Context, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	r := Request{Ctx: ctx, Job: nj, Resp: make(chan Response, 1)}
	select {
	case <-c.closed:
		return pipeline.Job{}, false, c.errClosed
	default:
	}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return pipeline.Job{}, false, ctx.Err()
	case <-c.closed:
		return pipeline.Job{}, false, c.errClosed
	}
	// Once queued the request is committed or refused by the loop; waiting
	// for the answer even if ctx ends keeps "answered" equal to "decided".
	select {
	case res := <-r.Resp:
		return res.Job, res.Created, res.Err
	case <-c.closed:
		select { // answered just before the loop ended?
		case res := <-r.Resp:
			return res.Job, res.Created, res.Err
		default:
			return pipeline.Job{}, false, c.errClosed // queued after the loop ended: never run
		}
	}
}

func (c *Committer) loop(ctx context.Context) {
	batch := make([]Request, 0, MaxGroup)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.reqs:
			batch = append(batch[:0], r)
		}
		batch = c.drain(batch)
		if len(batch) < MaxGroup {
			// Let the submitters that are runnable reach the queue before
			// the group closes: on a busy machine the loop otherwise wakes
			// for every few requests and pays a commit for each handful
			// (bench api: groups of 6 on average without this, 17 with it).
			// With nothing else runnable it returns at once, so an idle
			// service's lone submission waits for nothing.
			runtime.Gosched()
			batch = c.drain(batch)
		}
		c.commit(batch)
	}
}

// drain adds to batch the requests already waiting, up to MaxGroup.
func (c *Committer) drain(batch []Request) []Request {
	for len(batch) < MaxGroup {
		select {
		case r := <-c.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

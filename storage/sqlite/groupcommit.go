package sqlite

import (
	"context"
	"errors"
	"sync"

	"edgepipe/pipeline"
)

// Group commit for submissions. Every CreateJob must be durable before it
// returns (the API answers 202 only for a committed job), and a commit is the
// expensive part, so concurrent submissions share one: a single goroutine
// takes whatever requests are waiting, runs them in one transaction, commits
// once, and then answers them all. A request's own refusal (idempotency
// mismatch, taken id) leaves the others untouched.

const maxGroup = 256

type createReq struct {
	ctx  context.Context
	nj   pipeline.NewJob
	resp chan createResp
}

type createResp struct {
	job     pipeline.Job
	created bool
	err     error
}

// committer is the group-commit loop, a pipeline.Service like every other
// long-running part: Open starts it, Close stops it. It runs once: after
// Stop (even a Stop before any Start) submissions are refused with
// errClosed and Start is an error. Stop twice is a no-op.
type committer struct {
	svc    pipeline.Service
	commit func([]createReq)
	reqs   chan createReq
	// closed is closed by the first Stop, once the loop has ended: a
	// submitter waiting on it knows its request will never run.
	closed chan struct{}

	mu      sync.Mutex
	stopped bool
}

var _ pipeline.Starter = (*committer)(nil)

func newCommitter(commit func([]createReq)) *committer {
	return &committer{commit: commit, reqs: make(chan createReq, maxGroup), closed: make(chan struct{})}
}

// Start runs the loop until Stop. ctx should not be a request's: its end
// stops the loop too.
func (c *committer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errClosed
	}
	return c.svc.Start(ctx, c.loop)
}

// Stop ends the loop after the group it is committing, then answers every
// request still queued with errClosed. ctx only bounds the wait for the
// Service; a commit in progress is never interrupted.
func (c *committer) Stop(ctx context.Context) error {
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
			r.resp <- createResp{err: errClosed}
		default:
			return err
		}
	}
}

// submit hands nj to the loop and waits for its answer.
func (c *committer) submit(ctx context.Context, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	r := createReq{ctx: ctx, nj: nj, resp: make(chan createResp, 1)}
	select {
	case <-c.closed:
		return pipeline.Job{}, false, errClosed
	default:
	}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return pipeline.Job{}, false, ctx.Err()
	case <-c.closed:
		return pipeline.Job{}, false, errClosed
	}
	// Once queued the request is committed or refused by the loop; waiting
	// for the answer even if ctx ends keeps "answered" equal to "decided".
	select {
	case res := <-r.resp:
		return res.job, res.created, res.err
	case <-c.closed:
		select { // answered just before the loop ended?
		case res := <-r.resp:
			return res.job, res.created, res.err
		default:
			return pipeline.Job{}, false, errClosed // queued after the loop ended: never run
		}
	}
}

func (c *committer) loop(ctx context.Context) {
	batch := make([]createReq, 0, maxGroup)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.reqs:
			batch = append(batch[:0], r)
		}
	fill:
		for len(batch) < maxGroup {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		c.commit(batch)
	}
}

func (s *Store) commitGroup(batch []createReq) {
	res := make([]createResp, len(batch))
	err := s.inTx(context.Background(), func(tx *wtx) error {
		now := s.now()
		for i, r := range batch {
			res[i] = createResp{}
			if r.ctx.Err() != nil {
				res[i].err = r.ctx.Err()
				continue
			}
			// The shared transaction must not run under one caller's ctx: a
			// canceled statement makes SQLite roll back the whole group.
			// No savepoint per request: the two refusals a request can meet
			// (a reused key, a taken id) happen before or at its first
			// write, which SQLite undoes alone; anything else fails the
			// group, and every request in it gets the error.
			job, created, err := s.createJobTx(context.Background(), tx, now, r.nj, true)
			if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) && !errors.Is(err, pipeline.ErrAlreadyExists) {
				return err
			}
			res[i] = createResp{job: job, created: created, err: err}
		}
		return nil
	})
	for i, r := range batch {
		if err != nil {
			res[i] = createResp{err: err}
		}
		r.resp <- res[i]
	}
}

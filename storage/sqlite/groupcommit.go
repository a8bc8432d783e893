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

type committer struct {
	once sync.Once
	reqs chan createReq
	stop chan struct{}
	done chan struct{}
}

func (s *Store) submitGrouped(ctx context.Context, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	s.group.once.Do(func() {
		s.group.reqs = make(chan createReq, maxGroup)
		s.group.stop = make(chan struct{})
		s.group.done = make(chan struct{})
		go s.groupLoop()
	})
	r := createReq{ctx: ctx, nj: nj, resp: make(chan createResp, 1)}
	select {
	case s.group.reqs <- r:
	case <-ctx.Done():
		return pipeline.Job{}, false, ctx.Err()
	case <-s.group.stop:
		return pipeline.Job{}, false, errClosed
	}
	// Once queued the request is committed or refused by the loop; waiting
	// for the answer even if ctx ends keeps "answered" equal to "decided".
	select {
	case res := <-r.resp:
		return res.job, res.created, res.err
	case <-s.group.done:
		select { // answered just before the loop ended?
		case res := <-r.resp:
			return res.job, res.created, res.err
		default:
			return pipeline.Job{}, false, errClosed // queued after the store closed: never run
		}
	}
}

func (s *Store) groupLoop() {
	defer close(s.group.done)
	batch := make([]createReq, 0, maxGroup)
	for {
		select {
		case <-s.group.stop:
			return
		case r := <-s.group.reqs:
			batch = append(batch[:0], r)
		}
	fill:
		for len(batch) < maxGroup {
			select {
			case r := <-s.group.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.commitGroup(batch)
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

func (s *Store) closeGroup() {
	if s.group.stop == nil {
		return
	}
	close(s.group.stop)
	<-s.group.done
	// Answer anything still queued.
	for {
		select {
		case r := <-s.group.reqs:
			r.resp <- createResp{err: errClosed}
		default:
			return
		}
	}
}

package postgres

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// Group commit for submissions, as in storage/sqlite: every CreateJob must be
// durable before it returns, and a commit (and a round trip) is the
// expensive part, so concurrent submissions share one transaction. The
// group's inserts go out as one pgx batch — pipelined, one round trip for
// the whole group — and the group commits once. A statement that fails
// aborts a Postgres transaction, so a group in which one request is refused
// by a constraint (a taken job id) is run again one request per
// transaction, and each request gets its own answer.

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
		select {
		case res := <-r.resp:
			return res.job, res.created, res.err
		default:
			return pipeline.Job{}, false, errClosed
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
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.resp <- createResp{err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	res := make([]createResp, len(live))
	// The shared transaction must not run under one caller's ctx.
	err := s.inTx(context.Background(), func(tx pgx.Tx) error {
		return s.createGroupTx(tx, live, res)
	})
	if err != nil && (errors.Is(err, ErrConstraint) || errors.Is(err, pipeline.ErrAlreadyExists)) {
		// One request broke the group (a failed statement aborts the whole
		// Postgres transaction): give each its own transaction.
		for i, r := range live {
			var job pipeline.Job
			var created bool
			err := s.inTx(context.Background(), func(tx pgx.Tx) error {
				var err error
				job, created, err = s.createJobTx(context.Background(), tx, s.now(), r.nj)
				return err
			})
			res[i] = createResp{job: job, created: created, err: err}
		}
		err = nil
	}
	for i, r := range live {
		if err != nil {
			res[i] = createResp{err: err}
		}
		r.resp <- res[i]
	}
}

// createGroupTx inserts a group: queued jobs in one pipelined batch, then
// the rare dead-lettered ones and the replays one by one.
func (s *Store) createGroupTx(tx pgx.Tx, live []createReq, res []createResp) error {
	ctx := context.Background()
	now := s.now()
	b := &pgx.Batch{}
	var queued []int
	for i, r := range live {
		res[i] = createResp{}
		if r.nj.DeadLetterReason != "" {
			continue
		}
		nj := r.nj
		if len(nj.Input) == 0 {
			nj.Input = []byte("{}")
			live[i].nj = nj
		}
		b.Queue(qCreateQueued, queuedArgs(nj, now)...)
		queued = append(queued, i)
	}
	queues := map[string]bool{}
	for _, i := range queued {
		if !queues[live[i].nj.Queue] {
			queues[live[i].nj.Queue] = true
			b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, live[i].nj.Queue)
		}
	}
	if len(queued) > 0 {
		br := tx.SendBatch(ctx, b)
		inserted := make([]int, len(queued))
		var err error
		for k := range queued {
			if err = br.QueryRow().Scan(&inserted[k]); err != nil {
				break
			}
		}
		if err == nil {
			for range queues { // the notifications' results
				if _, err = br.Exec(); err != nil {
					break
				}
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		for k, i := range queued {
			if inserted[k] == 1 {
				res[i] = createResp{job: builtJob(live[i].nj, now), created: true}
				continue
			}
			job, created, err := notInserted(ctx, tx, live[i].nj)
			if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) && !errors.Is(err, pipeline.ErrAlreadyExists) {
				return err
			}
			res[i] = createResp{job: job, created: created, err: err}
		}
	}
	for i, r := range live {
		if r.nj.DeadLetterReason == "" {
			continue
		}
		job, created, err := s.createJobTx(ctx, tx, now, r.nj)
		if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) {
			return err
		}
		res[i] = createResp{job: job, created: created, err: err}
	}
	return nil
}

func (s *Store) closeGroupSafe() {
	started := true
	s.group.once.Do(func() {
		started = false
		s.group.reqs, s.group.stop = make(chan createReq), make(chan struct{})
		close(s.group.stop)
	})
	if !started {
		return
	}
	close(s.group.stop)
	<-s.group.done
	for {
		select {
		case r := <-s.group.reqs:
			r.resp <- createResp{err: errClosed}
		default:
			return
		}
	}
}

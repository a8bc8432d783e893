package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"edgepipe/internal/groupcommit"
	"edgepipe/pipeline"
)

// Group commit for submissions, as in storage/sqlite (internal/groupcommit
// runs the loop; commitGroup writes a group): every CreateJob must be
// durable before it returns, and a commit (and a round trip) is the
// expensive part, so concurrent submissions share one transaction. The
// group's inserts go out as one pgx batch — pipelined, one round trip for
// the whole group — and the group commits once. A statement that fails
// aborts a Postgres transaction, so a group in which one request is refused
// by a constraint (a taken job id) is run again one request per
// transaction, and each request gets its own answer.

func (s *Store) commitGroup(batch []groupcommit.Request) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.Ctx.Err(); err != nil {
			r.Resp <- groupcommit.Response{Err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	res := make([]groupcommit.Response, len(live))
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
				job, created, err = s.createJobTx(context.Background(), tx, s.now(), r.Job)
				return err
			})
			res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
		}
		err = nil
	}
	for i, r := range live {
		if err != nil {
			res[i] = groupcommit.Response{Err: err}
		}
		r.Resp <- res[i]
	}
}

// createGroupTx inserts a group: queued jobs in one pipelined batch, then
// the rare dead-lettered ones and the replays one by one.
func (s *Store) createGroupTx(tx pgx.Tx, live []groupcommit.Request, res []groupcommit.Response) error {
	ctx := context.Background()
	now := s.now()
	b := &pgx.Batch{}
	var queued []int
	for i, r := range live {
		res[i] = groupcommit.Response{}
		if r.Job.DeadLetterReason != "" {
			continue
		}
		nj := r.Job
		if len(nj.Input) == 0 {
			nj.Input = []byte("{}")
			live[i].Job = nj
		}
		b.Queue(qCreateQueued, queuedArgs(nj, now)...)
		queued = append(queued, i)
	}
	queues := map[string]bool{}
	for _, i := range queued {
		if !queues[live[i].Job.Queue] {
			queues[live[i].Job.Queue] = true
			b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, live[i].Job.Queue)
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
				res[i] = groupcommit.Response{Job: builtJob(live[i].Job, now), Created: true}
				continue
			}
			job, created, err := notInserted(ctx, tx, live[i].Job)
			if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) && !errors.Is(err, pipeline.ErrAlreadyExists) {
				return err
			}
			res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
		}
	}
	for i, r := range live {
		if r.Job.DeadLetterReason == "" {
			continue
		}
		job, created, err := s.createJobTx(ctx, tx, now, r.Job)
		if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) {
			return err
		}
		res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
	}
	return nil
}

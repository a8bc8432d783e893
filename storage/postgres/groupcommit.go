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
// the whole group — and the group commits once. A submission that a unique
// index refuses (a used key, a taken instance id, a job key held by another
// job) fails no statement — the inserts are ON CONFLICT DO NOTHING — and
// gets its own answer within the group (refusedAlone). A statement that
// does fail aborts a Postgres transaction, so a group that fails with a
// constraint error anyway is run again one request per transaction, and
// each request gets its own answer.

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

// refusedAlone says whether err is one request's refusal by a unique index
// (notInserted's answers), which fails no statement and leaves the rest of
// the group to commit.
func refusedAlone(err error) bool {
	return errors.Is(err, pipeline.ErrIdempotencyReused) || errors.Is(err, pipeline.ErrAlreadyExists) || errors.Is(err, ErrConstraint)
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
		jobs := make([]pipeline.NewJob, len(queued))
		for k, i := range queued {
			jobs[k] = live[i].Job
		}
		later := laterInBatch(jobs, inserted)
		for k, i := range queued {
			if inserted[k] == 1 {
				res[i] = groupcommit.Response{Job: builtJob(live[i].Job, now), Created: true}
				continue
			}
			// Nothing failed: ON CONFLICT DO NOTHING refused the insert, so
			// the transaction goes on, and the request gets its own answer
			// (a job key held by another job included: it is that
			// request's, not the group's).
			job, created, err := notInserted(ctx, tx, live[i].Job, later(k))
			if err != nil && !refusedAlone(err) {
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
		if err != nil && !refusedAlone(err) {
			return err
		}
		res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
	}
	return nil
}

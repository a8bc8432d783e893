package sqlite

import (
	"context"
	"errors"

	"edgepipe/internal/groupcommit"
	"edgepipe/pipeline"
)

// commitGroup is the group committer's commit (internal/groupcommit runs
// the loop): the group runs in one transaction and commits once, and a
// request's own refusal (idempotency mismatch, taken id) leaves the others
// untouched.
func (s *Store) commitGroup(batch []groupcommit.Request) {
	res := make([]groupcommit.Response, len(batch))
	err := s.inTx(context.Background(), func(tx *wtx) error {
		now := s.now()
		for i, r := range batch {
			res[i] = groupcommit.Response{}
			if r.Ctx.Err() != nil {
				res[i].Err = r.Ctx.Err()
				continue
			}
			// The shared transaction must not run under one caller's ctx: a
			// canceled statement makes SQLite roll back the whole group.
			// No savepoint per request: the two refusals a request can meet
			// (a reused key, a taken id) happen before or at its first
			// write, which SQLite undoes alone; anything else fails the
			// group, and every request in it gets the error.
			job, created, err := s.createJobTx(context.Background(), tx, now, r.Job, true)
			if err != nil && !errors.Is(err, pipeline.ErrIdempotencyReused) && !errors.Is(err, pipeline.ErrAlreadyExists) {
				return err
			}
			res[i] = groupcommit.Response{Job: job, Created: created, Err: err}
		}
		return nil
	})
	for i, r := range batch {
		if err != nil {
			res[i] = groupcommit.Response{Err: err}
		}
		r.Resp <- res[i]
	}
}

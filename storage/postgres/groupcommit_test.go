//go:build postgres

package postgres

import (
	"context"
	"errors"
	"testing"

	"edgepipe/internal/groupcommit"
	"edgepipe/pipeline"
)

// Closing the store ends the group committer, and a submission after that
// is refused as closed (as storage/sqlite's TestCloseStopsGroupCommitter;
// the committer's own lifecycle is tested in internal/groupcommit).
func TestCloseStopsGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), pipeline.NewManualClock(t0))
	if !s.group.Started() {
		t.Fatal("Open returned with the group committer not running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-before")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.group.Started() {
		t.Fatal("Close returned with the group committer's service running")
	}
	if _, _, err := s.CreateJob(ctx, newJob("v1-after")); !errors.Is(err, errClosed) {
		t.Fatalf("CreateJob after Close: %v, want errClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A request of a group that a unique index refuses — a used key, a taken
// instance id, a job key held by another job — gets its own answer, and
// the rest of the group is created in the same transaction: no statement
// failed (ON CONFLICT DO NOTHING), so nothing has to be run again.
func TestCommitGroupRefusalIsTheRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), pipeline.NewManualClock(t0))
	stored, _, err := s.CreateJob(ctx, newJob("v1-stored"))
	if err != nil {
		t.Fatal(err)
	}
	clash := newJob("v1-clash") // another tenant's submission under the stored job's key
	clash.ID, clash.Tenant, clash.InstanceID = stored.ID, "other", "clash"
	taken := newJob("v1-taken")
	taken.InstanceID = stored.InstanceID
	reused := newJob("v1-stored")
	reused.RequestFingerprint = "fp-other"
	reqs := []groupcommit.Request{{Job: newJob("v1-a")}, {Job: clash}, {Job: taken}, {Job: reused}, {Job: newJob("v1-stored")}, {Job: newJob("v1-b")}}
	for i := range reqs {
		reqs[i].Ctx, reqs[i].Job, reqs[i].Resp = ctx, reqs[i].Job.WithDefaults(), make(chan groupcommit.Response, 1)
	}
	s.commitGroup(reqs)
	res := make([]groupcommit.Response, len(reqs))
	for i, r := range reqs {
		res[i] = <-r.Resp
	}
	if !res[0].Created || !res[5].Created || res[0].Err != nil || res[5].Err != nil {
		t.Errorf("the group's good requests: %+v, %+v", res[0], res[5])
	}
	if !errors.Is(res[1].Err, ErrConstraint) || errors.Is(res[1].Err, pipeline.ErrAlreadyExists) {
		t.Errorf("job key clash: %v, want a constraint error that is not ErrAlreadyExists", res[1].Err)
	}
	if !errors.Is(res[2].Err, pipeline.ErrAlreadyExists) {
		t.Errorf("taken instance id: %v, want ErrAlreadyExists", res[2].Err)
	}
	if !errors.Is(res[3].Err, pipeline.ErrIdempotencyReused) {
		t.Errorf("reused key: %v, want ErrIdempotencyReused", res[3].Err)
	}
	if res[4].Err != nil || res[4].Created || res[4].Job.ID != stored.ID {
		t.Errorf("replay: %+v, want the stored job", res[4])
	}
	for _, id := range []string{res[0].Job.ID, res[5].Job.ID} {
		if _, err := s.GetJob(ctx, id); err != nil {
			t.Errorf("job %s: %v", id, err)
		}
	}
}

// A request refused by a stored job gets that refusal, not an answer made
// of a row a later request of the same group inserted: the caller pins a
// taken instance id under key k1, and the next request pins a free one
// under the same key with another body. Alone and in order: the first is
// refused for its instance id (409), the second is created.
func TestCommitGroupLaterRowIsNoReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, newDatabase(t), pipeline.NewManualClock(t0))
	api := func(inst, key, fp string) pipeline.NewJob {
		nj := newJob(pipeline.JobKey("acme", inst))
		nj.InstanceID, nj.IdempotencyKey, nj.RequestFingerprint = inst, key, fp
		return nj.WithDefaults()
	}
	if _, _, err := s.CreateJob(ctx, api("x", "k0", "fp0")); err != nil {
		t.Fatal(err)
	}
	reqs := []groupcommit.Request{{Job: api("x", "k1", "fpA")}, {Job: api("y", "k1", "fpB")}}
	for i := range reqs {
		reqs[i].Ctx, reqs[i].Resp = ctx, make(chan groupcommit.Response, 1)
	}
	s.commitGroup(reqs)
	res := []groupcommit.Response{<-reqs[0].Resp, <-reqs[1].Resp}
	if !errors.Is(res[0].Err, pipeline.ErrAlreadyExists) || !res[1].Created {
		t.Errorf("pinned taken instance, then the same key: %v / created=%v; want ErrAlreadyExists / created", res[0].Err, res[1].Created)
	}

	// Store level (a caller-chosen job key): the first request's job key
	// is held by the stored job, the second takes the first's instance id.
	// Alone: the first is a job-key clash (not ErrAlreadyExists), the
	// second is created.
	held := api("z", "k2", "fp2")
	held.ID = pipeline.JobKey("acme", "x")
	reqs = []groupcommit.Request{{Job: held}, {Job: api("z", "k3", "fp3")}}
	for i := range reqs {
		reqs[i].Ctx, reqs[i].Resp = ctx, make(chan groupcommit.Response, 1)
	}
	s.commitGroup(reqs)
	res = []groupcommit.Response{<-reqs[0].Resp, <-reqs[1].Resp}
	if !errors.Is(res[0].Err, ErrConstraint) || errors.Is(res[0].Err, pipeline.ErrAlreadyExists) || !res[1].Created {
		t.Errorf("held job key, then its instance id: %v / created=%v; want a job-key clash / created", res[0].Err, res[1].Created)
	}

	// The later row would be a replay (the same request body), and a
	// dead-lettered request first puts the queued ones at other positions
	// in the batch than in the group.
	dl := api("dl", "k4", "fp4")
	dl.Queue, dl.DeadLetterReason, dl.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v1"
	reqs = []groupcommit.Request{{Job: dl}, {Job: api("x", "k5", "fp5")}, {Job: api("w", "k5", "fp5")}}
	for i := range reqs {
		reqs[i].Ctx, reqs[i].Resp = ctx, make(chan groupcommit.Response, 1)
	}
	s.commitGroup(reqs)
	res = []groupcommit.Response{<-reqs[0].Resp, <-reqs[1].Resp, <-reqs[2].Resp}
	if !res[0].Created || !errors.Is(res[1].Err, pipeline.ErrAlreadyExists) || res[1].Created || !res[2].Created {
		t.Errorf("dead-lettered, taken instance, then the same request body: %+v; want created / ErrAlreadyExists / created", res)
	}
}

package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// tenantJob is tenant's job submitted as instanceID, keyed as the API keys
// it (pipeline.JobKey).
func tenantJob(tenant, instanceID, key string) pipeline.NewJob {
	nj := newJob(pipeline.JobKey(tenant, instanceID))
	nj.InstanceID, nj.Tenant, nj.IdempotencyKey = instanceID, tenant, key
	return nj
}

// Instance ids (docs/design.md §3) are unique per tenant. Two tenants using
// the same id get two jobs, each tenant's lookups, cancellation and listing
// see only its own, and only the tenant's own job makes its id taken.
func testInstanceIDsArePerTenant(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	const id = "v1-invoice-2026-0043"
	alice := mustCreate(t, s, tenantJob("alice", id, "k-a"))
	bob := mustCreate(t, s, tenantJob("bob", id, "k-b"))
	if alice.ID == bob.ID || alice.InstanceID != id || bob.InstanceID != id {
		t.Fatalf("jobs alice %s (%s), bob %s (%s): want two jobs with instance id %s", alice.ID, alice.InstanceID, bob.ID, bob.InstanceID, id)
	}
	for _, tc := range []struct {
		tenant string
		want   pipeline.Job
	}{{"alice", alice}, {"bob", bob}} {
		got, err := s.GetTenantJob(ctx, tc.tenant, id)
		if err != nil || got.ID != tc.want.ID || got.Tenant != tc.tenant || got.InstanceID != id {
			t.Fatalf("%s's %s: %+v, %v", tc.tenant, id, got, err)
		}
		page, _, err := s.ListJobs(ctx, pipeline.ListFilter{Tenant: tc.tenant})
		if err != nil || len(page) != 1 || page[0].ID != tc.want.ID {
			t.Fatalf("%s's listing: %v, %v", tc.tenant, jobIDs(page), err)
		}
	}
	// By internal key, a tenant finds nothing, not even its own job.
	if _, err := s.GetTenantJob(ctx, "alice", alice.ID); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("alice by internal key: %v, want ErrNotFound", err)
	}
	if _, err := s.GetTenantJob(ctx, "carol", id); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("carol: %v, want ErrNotFound", err)
	}
	// Bob cancels his; alice's is untouched.
	if j, err := s.RequestCancel(ctx, "bob", id); err != nil || j.ID != bob.ID || j.Status != pipeline.StatusCanceled {
		t.Fatalf("bob's cancel: %+v, %v", j, err)
	}
	if j, _ := s.GetJob(ctx, alice.ID); j.Status != pipeline.StatusPending || !j.CancelRequestedAt.IsZero() {
		t.Fatalf("alice's job after bob's cancel: %s", j.Status)
	}
	if _, err := s.RequestCancel(ctx, "carol", id); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("carol's cancel: %v, want ErrNotFound", err)
	}
	// Alice reusing her id with another key is refused, whatever key the
	// caller computed.
	dup := tenantJob("alice", id, "k-a2")
	if _, _, err := s.CreateJob(ctx, dup); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("alice's id again: %v, want ErrAlreadyExists", err)
	}
	dup.ID = "v1-some-other-key"
	if _, _, err := s.CreateJob(ctx, dup); !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("alice's id under another key: %v, want ErrAlreadyExists", err)
	}
	// A clash of internal keys says nothing about the caller's ids: it is
	// not "already exists" (the API would answer instance_id_taken).
	clash := tenantJob("carol", "v1-fresh", "k-c")
	clash.ID = alice.ID
	if _, _, err := s.CreateJob(ctx, clash); err == nil || errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("internal key clash: %v, want an error that is not ErrAlreadyExists", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM jobs`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

// The database itself refuses a tenant's second job with an instance id,
// and a job without one: a writer that skips the store's checks (another
// process, raw SQL through the second connection) cannot break the rule.
func testTenantInstanceIDUniqueInDatabase(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, nil)
	mustCreate(t, s, tenantJob("alice", "v1-x", "k1"))
	insert := func(id, tenant, instanceID string) error {
		_, err := s.write.ExecContext(ctx, `INSERT INTO jobs (id, instance_id, tenant, operation, idempotency_key,
			request_fingerprint, input_json, workflow_version, queue, status, status_changed_at, created_at, updated_at)
			VALUES (?, ?, ?, 'render_video', ?, 'fp', '{}', 'v1', 'render-v1', 'pending', 0, 0, 0)`, id, instanceID, tenant, "raw-"+id)
		return err
	}
	if err := insert("raw-1", "alice", "v1-x"); err == nil {
		t.Fatal("the database accepted alice's second job with instance id v1-x")
	}
	if err := insert("raw-2", "alice", ""); err == nil {
		t.Fatal("the database accepted a job without an instance id")
	}
	if err := insert("raw-3", "bob", "v1-x"); err != nil {
		t.Fatalf("another tenant's v1-x: %v", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM jobs WHERE instance_id = 'v1-x'`); n != 2 {
		t.Fatalf("%d jobs with instance id v1-x, want alice's and bob's", n)
	}
}

// The webhook payload names the job by the id its owner knows, on every
// settling path (settle, FinishMany's settleBulk, and dead-lettered at
// submission); the outbox row references the internal key.
func testWebhookPayloadCarriesInstanceID(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s := h.open(t, pipeline.NewManualClock(t0))
	hooked := func(instanceID, key string) pipeline.Job {
		nj := tenantJob("alice", instanceID, key)
		nj.WebhookURL = "https://hooks.example.test/" + instanceID
		return mustCreate(t, s, nj)
	}
	canceled := hooked("v1-canceled", "k1")
	if _, err := s.RequestCancel(ctx, "alice", "v1-canceled"); err != nil {
		t.Fatal(err)
	}
	finished := hooked("v1-finished", "k2")
	c := fetchOne(t, s, "render-v1", "w1")
	if c.Job.ID != finished.ID {
		t.Fatalf("claimed %s, want %s", c.Job.ID, finished.ID)
	}
	errs, err := s.FinishMany(ctx, []pipeline.Finished{{Lease: c.Lease, Outcome: pipeline.Outcome{
		Status: pipeline.StatusFailed, ErrorClass: pipeline.ClassPermanent, ErrorCode: "x", ErrorMessage: "x"}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("finish: %v %v", err, errs)
	}
	// A job dead-lettered at submission settles in the submitting
	// transaction: its payload is built there.
	dl := tenantJob("alice", "v3-unbound", "k3")
	dl.Queue, dl.DeadLetterReason, dl.DeadLetterQueue = "", pipeline.ReasonUnboundVersion, "render-v3"
	dl.WebhookURL = "https://hooks.example.test/v3-unbound"
	unbound := mustCreate(t, s, dl)
	for _, j := range []pipeline.Job{canceled, finished, unbound} {
		ds, err := s.WebhookDeliveries(ctx, j.ID)
		if err != nil || len(ds) != 1 {
			t.Fatalf("%s: deliveries %+v, %v", j.ID, ds, err)
		}
		var p map[string]any
		if err := json.Unmarshal(ds[0].Payload, &p); err != nil || p["job_id"] != j.InstanceID {
			t.Fatalf("%s: payload %s names %v, want the instance id %s", j.ID, ds[0].Payload, p["job_id"], j.InstanceID)
		}
		if strings.Contains(string(ds[0].Payload), j.ID) {
			t.Fatalf("payload %s leaks the internal key %s", ds[0].Payload, j.ID)
		}
	}
}

package check_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/check"
	"edgepipe/pipeline"
	"edgepipe/routing"
	"edgepipe/storage/fs"
	"edgepipe/storage/sqlite"
)

type env struct {
	store *sqlite.Store
	objs  *fs.Store
	clock *pipeline.ManualClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clock := pipeline.NewManualClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "db"), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(dir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	return &env{store: st, objs: objs, clock: clock}
}

// finishedJob runs a job to success with one stored artifact, the way an
// attempt would.
func (e *env) finishedJob(t *testing.T, id string) (pipeline.Lease, string) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: id, Tenant: "t", Operation: "render_video",
		IdempotencyKey: id, RequestFingerprint: id, Version: id[:2], Queue: "render-" + id[:2]}); err != nil {
		t.Fatal(err)
	}
	cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-" + id[:2], Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	l := cs[0].Lease
	if err := e.store.AppendEvent(ctx, l, pipeline.EventStageStarted, map[string]any{"stage": pipeline.StagePrepare, "workflow": id[:2]}); err != nil {
		t.Fatal(err)
	}
	key := pipeline.PrefixUnits + "v1/ab/" + id + ".png"
	if err := e.store.ClaimObject(ctx, l, key); err != nil {
		t.Fatal(err)
	}
	info, err := e.objs.Put(ctx, key, strings.NewReader("png-bytes-"+id), pipeline.PutOptions{ContentType: "image/png", CreateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CommitAsset(ctx, l, pipeline.Asset{Key: key, Kind: "image", SizeBytes: info.Size, SHA256: info.SHA256, ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RecordIntent(ctx, l, pipeline.ProviderCall{Scene: 0, Op: pipeline.OpSpeech, Provider: "p", Contract: pipeline.ContractSync}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Finish(ctx, l, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	return l, key
}

func run(t *testing.T, e *env, cfg check.Config) check.Report {
	t.Helper()
	cfg.Store, cfg.Objects, cfg.Clock = e.store, e.objs, e.clock
	r, err := check.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kinds(r check.Report) string {
	var ks []string
	for _, v := range r.Violations {
		ks = append(ks, v.Kind)
	}
	return strings.Join(ks, ",")
}

func TestCleanDeploymentPasses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.finishedJob(t, "v1-a")
	e.finishedJob(t, "v2-b")
	r := run(t, e, check.Config{RequireSettled: true})
	if !r.Clean() || r.Assets != 2 || r.Objects != 2 || r.Jobs != 2 {
		t.Fatalf("report %+v", r)
	}
}

// Each invariant, broken on purpose, is reported.
func TestEachInvariantIsDetected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name   string
		break_ func(t *testing.T, e *env, l pipeline.Lease, key string)
		cfg    check.Config
		want   string
	}{
		{"ghost asset", func(t *testing.T, e *env, _ pipeline.Lease, key string) {
			if err := e.objs.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}, check.Config{}, "ghost_asset"},
		{"changed object", func(t *testing.T, e *env, _ pipeline.Lease, key string) {
			if _, err := e.objs.Put(ctx, key, strings.NewReader("png-bytes-XXXX"), pipeline.PutOptions{ContentType: "image/png"}); err != nil {
				t.Fatal(err)
			}
		}, check.Config{}, "sha256_mismatch"},
		{"orphan object", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			if _, err := e.objs.Put(ctx, "renders/v1/00/orphan.mp4", bytes.NewReader([]byte("x")), pipeline.PutOptions{ContentType: "video/mp4"}); err != nil {
				t.Fatal(err)
			}
		}, check.Config{}, "orphan_object"},
		{"billed twice", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			mustExec(t, e, `INSERT INTO provider_calls (job_id, scene_index, operation, provider, contract, attempt_id, status, intended_at)
				VALUES ('v1-a', 0, 'speech', 'p', 'sync', 'att_x', 'succeeded', 0)`)
		}, check.Config{}, "billed_twice"},
		{"paid answer kept nowhere", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			// Answered (paid), never made into its asset, and its staged
			// copy gone.
			mustExec(t, e, `INSERT INTO provider_calls (job_id, scene_index, operation, provider, contract, attempt_id, status, intended_at, staged_key)
				VALUES ('v1-a', 1, 'image', 'p', 'idempotent_verified', 'att_x', 'succeeded', 0, 'staging/aa/gone/001-image-9')`)
		}, check.Config{}, "paid_answer_not_kept"},
		{"stuck job", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: "v1-stuck", Tenant: "t", Operation: "o", IdempotencyKey: "s",
				RequestFingerprint: "f", Version: "v1", Queue: "render-v1"}); err != nil {
				t.Fatal(err)
			}
		}, check.Config{RequireSettled: true}, "not_settled"},
		{"version mismatch", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: "v2-wrong", Tenant: "t", Operation: "o", IdempotencyKey: "w",
				RequestFingerprint: "f", Version: "v1", Queue: "render-v1"}); err != nil {
				t.Fatal(err)
			}
		}, check.Config{}, "version_mismatch"},
		{"attempt ran another version", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			mustExec(t, e, `INSERT INTO job_events (job_id, at, kind, attempt_id, detail_json) VALUES ('v1-a', 1, 'stage_started', 'att_x', '{"stage":"execute","workflow":"v2"}')`)
		}, check.Config{}, "attempt_version_mismatch"},
		{"malformed id ran", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			// Accepted only to be dead-lettered (as the API does); it must never run.
			if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: "v01-bad", Tenant: "t", Operation: "o", IdempotencyKey: "m",
				RequestFingerprint: "f", Version: "v1", DeadLetterReason: pipeline.ReasonUnboundVersion, DeadLetterQueue: "render-v1"}); err != nil {
				t.Fatal(err)
			}
			mustExec(t, e, `INSERT INTO job_events (job_id, at, kind, attempt_id, detail_json) VALUES ('v01-bad', 1, 'stage_started', 'att_y', '{"stage":"prepare","workflow":"v1"}')`)
		}, check.Config{}, "bad_instance_id_ran"},
		{"terminal changed", func(t *testing.T, e *env, _ pipeline.Lease, _ string) {
			mustExec(t, e, `INSERT INTO job_events (job_id, at, kind, from_status, to_status) VALUES ('v1-a', 1, 'status', 'succeeded', 'running')`)
		}, check.Config{}, "terminal_changed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l, key := e.finishedJob(t, "v1-a")
			if r := run(t, e, c.cfg); !r.Clean() {
				t.Fatalf("not clean before breaking: %s", kinds(r))
			}
			c.break_(t, e, l, key)
			r := run(t, e, c.cfg)
			if !strings.Contains(kinds(r), c.want) {
				t.Fatalf("violations %q, want %s", kinds(r), c.want)
			}
			b, _ := json.Marshal(r)
			if !json.Valid(b) {
				t.Fatal("report does not marshal")
			}
		})
	}
}

// A paid answer that is staged (an asset row of kind staged under the call
// row's staged_key) is kept durably: clean.
func TestStagedAnswerIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: "v1-s", Tenant: "t", Operation: "render_video",
		IdempotencyKey: "s", RequestFingerprint: "s", Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	l := cs[0].Lease
	id, err := e.store.RecordIntent(ctx, l, pipeline.ProviderCall{Scene: 0, Op: pipeline.OpSpeech, Provider: "p", Contract: pipeline.ContractSync})
	if err != nil {
		t.Fatal(err)
	}
	key := pipeline.StagingKey("t", "v1-s", 0, pipeline.OpSpeech, id)
	if err := e.store.ClaimObject(ctx, l, key); err != nil {
		t.Fatal(err)
	}
	info, err := e.objs.Put(ctx, key, strings.NewReader("wav"), pipeline.PutOptions{ContentType: "application/octet-stream", CreateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CommitAsset(ctx, l, pipeline.Asset{Key: key, Kind: pipeline.KindStaged, SizeBytes: info.Size, SHA256: info.SHA256, ContentType: "application/octet-stream"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetCallStaged(ctx, &pipeline.SetCallStagedParams{CallID: id, Key: key}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.FinishCall(ctx, &pipeline.FinishCallParams{ID: id, Status: pipeline.CallSucceeded, HTTPStatus: 200, ErrorCode: "", ExternalID: ""}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Finish(ctx, l, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true, ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "x"}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, check.Config{RequireSettled: true}); !r.Clean() {
		t.Fatalf("staged answer reported: %s", kinds(r))
	}
	// Without its staged copy the same answer is kept nowhere.
	mustExec(t, e, `DELETE FROM assets`)
	if err := e.objs.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, check.Config{RequireSettled: true}); kinds(r) != "paid_answer_not_kept" {
		t.Fatalf("violations %q, want paid_answer_not_kept", kinds(r))
	}
}

func mustExec(t *testing.T, e *env, q string) {
	t.Helper()
	if err := e.store.ExecForTest(context.Background(), q); err != nil {
		t.Fatal(err)
	}
}

// An id without a version prefix routes to the default version, and an
// attempt that ran that version's workflow is clean.
func TestUnprefixedIDRunsDefaultVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: "plainjob", Tenant: "t", Operation: "render_video",
		IdempotencyKey: "p", RequestFingerprint: "p", Version: routing.DefaultVersion, Queue: routing.QueueName(routing.DefaultVersion)}); err != nil {
		t.Fatal(err)
	}
	cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: routing.QueueName(routing.DefaultVersion), Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	if err := e.store.AppendEvent(ctx, cs[0].Lease, pipeline.EventStageStarted, map[string]any{"stage": pipeline.StagePrepare, "workflow": routing.DefaultVersion}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, check.Config{RequireSettled: true}); !r.Clean() {
		t.Fatalf("violations %s", kinds(r))
	}
}

// Jobs submitted since ids became unique per tenant have an internal key
// (pipeline.JobKey) outside the instance-id grammar: the version checks
// read the instance id. Two tenants' jobs with the same instance id that
// ran its version are clean; one that ran another version is not.
func TestJobKeysRouteByInstanceID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	runAs := func(tenant, instanceID, workflow string) {
		t.Helper()
		version := instanceID[:2]
		if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: pipeline.JobKey(tenant, instanceID), InstanceID: instanceID,
			Tenant: tenant, Operation: "render_video", IdempotencyKey: "k", RequestFingerprint: "fp",
			Version: version, Queue: routing.QueueName(version)}); err != nil {
			t.Fatal(err)
		}
		cs, _, err := e.store.Fetch(ctx, &pipeline.FetchParams{Queue: routing.QueueName(version), Owner: "w", Max: 1, LeaseFor: time.Minute})
		if err != nil || len(cs) != 1 || cs[0].Job.Tenant != tenant {
			t.Fatalf("fetch: %v %v", cs, err)
		}
		if err := e.store.AppendEvent(ctx, cs[0].Lease, pipeline.EventStageStarted, map[string]any{"stage": pipeline.StagePrepare, "workflow": workflow}); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	runAs("alice", "v2-inv", "v2")
	runAs("bob", "v2-inv", "v2")
	if r := run(t, e, check.Config{RequireSettled: true}); !r.Clean() || r.Jobs != 2 {
		t.Fatalf("violations %s (%d jobs)", kinds(r), r.Jobs)
	}
	runAs("carol", "v2-inv", "v1")
	r := run(t, e, check.Config{RequireSettled: true})
	if len(r.Violations) != 1 || r.Violations[0].JobID != pipeline.JobKey("carol", "v2-inv") {
		t.Fatalf("violations %+v, want one for carol's job", r.Violations)
	}
}

package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider/fake"
)

// spooledCall gives job id a speech call in scene 0 recorded as an intent
// by a claimed attempt, and a spool file holding body as that call's
// answer, the way a worker that could not stage it left it. It returns
// the call and the spool file's path.
func (h *harness) spooledCall(id string, body []byte) (pipeline.Claimed, pipeline.ProviderCall, string) {
	h.t.Helper()
	ctx := context.Background()
	h.submit(id, board(img("a quay", "gulls over the quay", 600)))
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		h.t.Fatalf("fetch: %d claimed, %v", len(cs), err)
	}
	callID, err := h.store.RecordIntent(ctx, cs[0].Lease, pipeline.ProviderCall{JobID: id, Scene: 0, Op: pipeline.OpSpeech,
		Provider: "http", Contract: pipeline.ContractSync, IdempotencyKey: "k-" + id, AttemptID: cs[0].Lease.AttemptID})
	if err != nil {
		h.t.Fatal(err)
	}
	// The worker names a job's spool directory after its key with every
	// character outside A-Za-z0-9_- as '_' (a key of the API's form has ".t").
	path := filepath.Join(h.cfg.SpoolDir, strings.ReplaceAll(id, ".", "_"), fmt.Sprintf("call-%d", callID))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o600); err != nil {
		h.t.Fatal(err)
	}
	return cs[0], h.call(id, callID), path
}

// call reads provider call callID of job id back.
func (h *harness) call(id string, callID int64) pipeline.ProviderCall {
	h.t.Helper()
	calls, err := h.store.ProviderCalls(context.Background(), id, pipeline.AllScenes, "")
	if err != nil {
		h.t.Fatal(err)
	}
	for _, c := range calls {
		if c.ID == callID {
			return c
		}
	}
	h.t.Fatalf("job %s has no call %d (%+v)", id, callID, calls)
	return pipeline.ProviderCall{}
}

// FlushSpool stages the spooled answer of every call that may have been
// billed: answered, still an intent (the worker lost the job store before
// it could record the answer), or waived by an operator's retry after its
// attempt died. An answer of a call that was not billed is not staged.
func TestFlushSpoolStagesEveryPaidAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		settle func(h *harness, cl pipeline.Claimed, callID int64) // what became of the call
		staged bool
	}{
		{"answered", func(h *harness, _ pipeline.Claimed, callID int64) {
			if err := h.store.FinishCall(context.Background(), &pipeline.FinishCallParams{ID: callID, Status: pipeline.CallSucceeded, HTTPStatus: 200}); err != nil {
				h.t.Fatal(err)
			}
		}, true},
		{"still an intent", func(*harness, pipeline.Claimed, int64) {}, true},
		{"waived by a retry", func(h *harness, cl pipeline.Claimed, _ int64) {
			ctx := context.Background()
			if err := h.store.Finish(ctx, cl.Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, ErrorClass: pipeline.ClassAmbiguous,
				ErrorCode: "test", ErrorMessage: "parked", RequiresAction: true}); err != nil {
				h.t.Fatal(err)
			}
			if _, err := h.store.Decide(ctx, &pipeline.DecideParams{JobID: cl.Job.ID, Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
				h.t.Fatal(err)
			}
		}, true},
		{"refused, not billed", func(h *harness, _ pipeline.Claimed, callID int64) {
			if err := h.store.FinishCall(context.Background(), &pipeline.FinishCallParams{ID: callID, Status: pipeline.CallFailed, HTTPStatus: 400, ErrorCode: "bad_request"}); err != nil {
				h.t.Fatal(err)
			}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHarness(t)
			id := pipeline.JobKey("acme", "v1-flush") // keyed as the API keys a job
			body := []byte("RIFF-the-paid-speech")
			cl, call, path := h.spooledCall(id, body)
			c.settle(h, cl, call.ID)
			call = h.call(id, call.ID)
			n, err := h.engine.FlushSpool(ctx)
			if err != nil {
				t.Fatalf("flush: %v", err)
			}
			key := pipeline.StagingKey("acme", id, 0, pipeline.OpSpeech, call.ID)
			_, statErr := os.Stat(path)
			a, assetErr := h.store.GetAsset(ctx, key)
			if !c.staged {
				if n != 0 || statErr != nil || !errors.Is(assetErr, pipeline.ErrNotFound) {
					t.Fatalf("a %s call's answer: flushed %d, spool file %v, asset %v; want it left alone", call.Status, n, statErr, assetErr)
				}
				return
			}
			if n != 1 || assetErr != nil || a.Kind != pipeline.KindStaged || a.SizeBytes != int64(len(body)) {
				t.Fatalf("a %s call's answer: flushed %d, asset %+v (%v); want it staged", call.Status, n, a, assetErr)
			}
			if !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("spool file after staging: %v; want it removed", statErr)
			}
			if got := h.call(id, call.ID); got.StagedKey != key {
				t.Fatalf("call row names staged key %q, want %q", got.StagedKey, key)
			}
			rc, _, err := h.objs.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if got, _ := io.ReadAll(rc); !bytes.Equal(got, body) {
				t.Fatalf("staged object holds %q, want %q", got, body)
			}
		})
	}
}

// An attempt that died between writing a staging key and recording its
// asset left the object behind. FlushSpool records it when it is what the
// spool holds, and refuses (keeping the spool file) when it is not.
func TestFlushSpoolAdoptsAStagedObjectLeftBehind(t *testing.T) {
	t.Parallel()
	body := []byte("RIFF-the-paid-speech")
	for _, c := range []struct {
		name    string
		there   []byte // what the staging key holds
		crcOnly bool   // the store keeps no SHA-256, only its CRC64NVME (R2, multipart)
		adopted bool
	}{
		{"the same answer", body, false, true},
		{"a shorter object", body[:5], false, false},
		{"same size, other bytes", bytes.ToUpper(body), false, false},
		{"the same answer, CRC64NVME only", body, true, true},
		{"same size, other bytes, CRC64NVME only", bytes.ToUpper(body), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var opts []harnessOpt
			if c.crcOnly {
				opts = append(opts, func(ec *pipeline.EngineConfig, _ *fake.Config) { ec.Objects = crcOnlyObjects{ec.Objects} })
			}
			h := newHarness(t, opts...)
			const id = "v1-adopt"
			_, call, path := h.spooledCall(id, body)
			key := pipeline.StagingKey("acme", id, 0, pipeline.OpSpeech, call.ID)
			if _, err := h.objs.Put(ctx, key, bytes.NewReader(c.there), pipeline.PutOptions{CreateOnly: true}); err != nil {
				t.Fatal(err)
			}
			n, err := h.engine.FlushSpool(ctx)
			_, statErr := os.Stat(path)
			a, assetErr := h.store.GetAsset(ctx, key)
			if !c.adopted {
				if err == nil || n != 0 || statErr != nil || !errors.Is(assetErr, pipeline.ErrNotFound) {
					t.Fatalf("other content at the staging key: flushed %d (%v), spool file %v, asset %v; want an error, the spool kept, no asset", n, err, statErr, assetErr)
				}
				return
			}
			if err != nil || n != 1 || assetErr != nil || a.SizeBytes != int64(len(body)) || !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("the answer at the staging key: flushed %d (%v), asset %+v (%v), spool file %v; want it recorded and the spool file gone", n, err, a, assetErr, statErr)
			}
		})
	}
}

// crcOnlyObjects is an object store that, like R2 for a multipart object,
// keeps no SHA-256 but reports the object's full-object CRC64NVME.
type crcOnlyObjects struct{ pipeline.ObjectStore }

func (o crcOnlyObjects) Head(ctx context.Context, key string) (pipeline.ObjectInfo, error) {
	info, err := o.ObjectStore.Head(ctx, key)
	if err != nil {
		return info, err
	}
	rc, _, err := o.Get(ctx, key, 0, -1)
	if err != nil {
		return info, err
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		return info, err
	}
	info.SHA256, info.CRC64NVME = "", pipeline.CRC64NVME(body)
	return info, nil
}

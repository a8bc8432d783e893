package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A provider's answer is paid for the moment it exists, so it is kept
// before anything else happens (docs/design.md §6): staged in the object
// store under StagingKey, with the call row pointing at it, where any later
// attempt on any machine finds it; and, as a fast local copy for while the
// object store is down, in this worker's spool. The staged copy is removed
// once the asset made from it exists (discard) or the job is final
// (Worker, Sweeper) — never for dead_lettered or needs_review, which can
// resume.

// answer is a paid provider result on its way to its asset.
type answer struct {
	callID int64
	body   []byte // the bytes just received; nil when recovered
	staged string // its staging key, once staged
	spool  string // its spool file, when this worker has one
}

// open reads the answer from the nearest copy: memory, the local spool,
// the staged object.
func (a *answer) open(ctx context.Context, objs ObjectStore) (io.ReadCloser, error) {
	switch {
	case a.body != nil:
		return io.NopCloser(bytes.NewReader(a.body)), nil
	case a.spool != "":
		if f, err := os.Open(a.spool); err == nil {
			return f, nil
		}
	}
	if a.staged == "" {
		return nil, infraErr("local_disk_error", "the worker lost a spooled answer", fmt.Errorf("answer of call %d has no copy", a.callID))
	}
	rc, _, err := objs.Get(ctx, a.staged, 0, -1)
	if err != nil {
		return nil, infraErr("object_store_error", "object storage did not return a staged answer", err)
	}
	return rc, nil
}

func (u *unitRun) stagingKey(op string, callID int64) string {
	return StagingKey(u.a.job.Tenant, u.a.job.ID, u.unit.Scene, op, callID)
}

// spoolPath is where this worker keeps its copy of call id's answer.
func (u *unitRun) spoolPath(callID int64) string {
	return filepath.Join(u.d.SpoolDir, safeName(u.a.job.ID), fmt.Sprintf("call-%d", callID))
}

// safeName keeps a job id to a file-name-safe form (ids are validated long
// before; this only guarantees the path shape).
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// spoolJob is the job whose spool directory is name, or ErrNotFound. A
// job key of JobKey's form (instance id, JobKeySeparator, the tenant's
// hash) is written by safeName with "_t" for ".t", so the directory's own
// name finds no job: the key is rebuilt from it first. (A key that is
// literally the name, as jobs stored before per-tenant ids have, is tried
// next.) The caller still checks that safeName of the job's key is name.
func (e *Engine) spoolJob(ctx context.Context, name string) (Job, error) {
	if i := len(name) - JobKeySuffixLen; i > 0 && name[i:i+len(JobKeySeparator)] == "_t" {
		j, err := e.cfg.Store.GetJob(ctx, name[:i]+JobKeySeparator+name[i+len(JobKeySeparator):])
		if !errors.Is(err, ErrNotFound) {
			return j, err
		}
	}
	return e.cfg.Store.GetJob(ctx, name)
}

// paidAnswer finds the answer of an earlier call for this unit's op that
// was paid for but not yet made into its asset: staged (an asset row under
// its staging key, or an orphaned staged object, adopted), or spooled on
// this worker (staged now, so losing this disk cannot lose it). An intent
// row counts as answered when a copy exists: the worker died between
// keeping the answer and recording it. A waived row's copy is just as
// whole: the operator agreed to pay again if need be, not to throw away an
// answer already here. nil means none.
func (u *unitRun) paidAnswer(ctx context.Context, op string) (*answer, error) {
	prior, err := u.d.Store.ProviderCalls(ctx, u.a.job.ID, u.unit.Scene, op)
	if err != nil {
		return nil, storeErr(err)
	}
	for i := len(prior) - 1; i >= 0; i-- {
		c := prior[i]
		if st := c.Status; st != CallSucceeded && st != CallIntent && st != CallWaived {
			continue
		}
		key := u.stagingKey(op, c.ID)
		if _, err := u.d.Store.GetAsset(ctx, key); err == nil {
			return &answer{callID: c.ID, staged: key}, nil
		} else if !errors.Is(err, ErrNotFound) {
			return nil, storeErr(err)
		}
		if _, adopted, err := adoptObject(ctx, u.write(key, KindStaged, stagedContentType)); err != nil {
			return nil, err
		} else if adopted {
			ans := &answer{callID: c.ID, staged: key}
			return ans, storeErr(u.d.Store.SetCallStaged(ctx, &SetCallStagedParams{CallID: c.ID, Key: key}))
		}
		if u.d.SpoolDir == "" {
			continue
		}
		p := u.spoolPath(c.ID)
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		ans := &answer{callID: c.ID, spool: p}
		err = u.stage(ctx, ans, op, f)
		f.Close()
		if err != nil {
			return nil, err // the spool stays; the next attempt tries again
		}
		return ans, nil
	}
	return nil, nil
}

const stagedContentType = "application/octet-stream"

// keepTimeout bounds the staging of an answer just paid for, which runs on
// even when the attempt is canceled.
const keepTimeout = 2 * time.Minute

// stage writes an answer to its staging key with the object protocol
// (ownership → object → asset row) and points the call row at it.
func (u *unitRun) stage(ctx context.Context, ans *answer, op string, r io.Reader) error {
	key := u.stagingKey(op, ans.callID)
	a, reused, err := writeObject(ctx, u.write(key, KindStaged, stagedContentType), r)
	if err != nil {
		return err
	}
	if !reused {
		u.d.Metrics.BytesUploaded(KindStaged, a.SizeBytes)
	}
	ans.staged = key
	if ans.callID <= 0 {
		return nil
	}
	return storeErr(u.d.Store.SetCallStaged(ctx, &SetCallStagedParams{CallID: ans.callID, Key: key}))
}

// keepPaid keeps a synchronous answer just received before anything else
// happens: staged in the object store (a few tries), where it survives
// this machine. Only if the store refuses it does the answer go to this
// worker's spool, the fast local copy that carries it until the store is
// back: the call is then recorded and the attempt ends on the
// infrastructure budget, and the next attempt stages the spool first. If
// neither copy can be made, the spool write is retried for SpoolPatience;
// after that the answer is lost and the call is recorded as such
// (local_disk_error, for a human).
func (u *unitRun) keepPaid(call *paidCall, body []byte) (*answer, error) {
	ctx := call.ctx
	ans := &answer{callID: call.id, body: body}
	// The answer is paid for: a sibling's failure or a stopping worker must
	// not cut its staging short (a bound still applies).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keepTimeout)
	defer cancel()
	stageErr := u.withStoreRetries(sctx, func() error { return u.stage(sctx, ans, call.op, bytes.NewReader(body)) })
	if stageErr != nil {
		spoolErr := errors.New("no spool directory")
		if u.d.SpoolDir != "" {
			path := u.spoolPath(call.id)
			if spoolErr = u.keepAnswer(ctx, path, body); spoolErr == nil {
				ans.spool = path
			}
		}
		if spoolErr != nil {
			// Received and billed, but nothing could keep it.
			return nil, call.failed(&CallError{Op: call.op, Outcome: OutcomeUnknown, Code: "local_disk_error", Cause: errors.Join(stageErr, spoolErr)})
		}
	}
	if err := callFP(ctx, u.d.Failpoint, "after_provider_response"); err != nil {
		return nil, err
	}
	u.d.Metrics.ProviderCall(call.op, CallSucceeded)
	call.recorded(CallSucceeded)
	if err := u.d.Store.FinishCall(context.WithoutCancel(ctx), &FinishCallParams{ID: call.id, Status: CallSucceeded, HTTPStatus: 200, ErrorCode: "", ExternalID: ""}); err != nil {
		return nil, storeErr(err)
	}
	if stageErr != nil {
		return nil, stageErr
	}
	return ans, nil
}

// store writes the answer's asset under key with the object protocol.
func (u *unitRun) store(ctx context.Context, ans *answer, key, kind, contentType string) error {
	return u.withStoreRetries(ctx, func() error {
		r, err := ans.open(ctx, u.d.Objects)
		if err != nil {
			return err
		}
		defer r.Close()
		a, reused, err := writeObject(ctx, u.write(key, kind, contentType), r)
		if err == nil && !reused {
			u.d.Metrics.BytesUploaded(kind, a.SizeBytes)
		}
		return err
	})
}

// withStoreRetries retries a transient object-store failure a few times
// within the attempt: the provider was already paid, so keeping its answer
// is worth a little patience before the attempt gives up.
func (u *unitRun) withStoreRetries(ctx context.Context, fn func() error) error {
	var last error
	for try := range 3 {
		if try > 0 {
			if err := sleepCtx(ctx, time.Duration(try*try)*200*time.Millisecond); err != nil {
				return errors.Join(last, err)
			}
		}
		last = fn()
		var ce *ClassifiedError
		if last == nil || !errors.As(last, &ce) || ce.Class != ClassTransient {
			return last
		}
	}
	return last
}

// discard drops the copies of an answer whose asset exists: the spool file
// and the staged object. A failure only delays the cleanup (the sweeper
// and the final release find what is left), so it is logged.
func (u *unitRun) discard(ctx context.Context, ans *answer) {
	// By the call's spool path, not ans.spool: an answer taken from its
	// staged copy names no spool file, yet the attempt that staged it from
	// the spool may have ended before removing that file.
	if u.d.SpoolDir != "" && ans.callID > 0 {
		_ = os.Remove(u.spoolPath(ans.callID))
	}
	if ans.staged != "" {
		if err := releaseStaged(ctx, u.d.Store, u.d.Objects, u.a.lease.AttemptID, ans.staged); err != nil {
			u.a.log.Warn("releasing a staged answer failed; the sweeper will", "key", ans.staged, "err", err)
		}
	}
}

// write is the object write of one of this unit's objects under key.
func (u *unitRun) write(key, kind, contentType string) *objectWrite {
	return &objectWrite{Ledger: u.d.Store, Objects: u.d.Objects, Lease: u.a.lease, Failpoint: u.d.Failpoint, Tracer: u.d.Tracer,
		Key: key, Kind: kind, ContentType: contentType}
}

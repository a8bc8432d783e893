package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// objectWrite is one object to store (writeObject) or adopt (adoptObject)
// by the write protocol, and what it takes: the ledger, the store, the
// attempt's lease, and the failpoint hook.
type objectWrite struct {
	Ledger      ObjectLedger
	Objects     ObjectStore
	Lease       Lease
	Failpoint   Failpoint // writeObject only
	Key         string
	Kind        string // image | speech | video | render | staged
	ContentType string
	DurationMS  int          // renders: the storyboard's length
	Tracer      trace.Tracer // the upload's span (nil: none)
}

// writeObject stores r under key by the write protocol of docs/design.md §7:
// ownership row → object (streamed, create-only) → asset row. If the key
// already has an asset row the object is reused and r is not read
// (reused=true). On any failure after the claim, the claim is abandoned and
// the object deleted only if the ledger says nobody else refers to it.
func writeObject(ctx context.Context, w *objectWrite, r io.Reader) (a Asset, reused bool, err error) {
	led, objs, lease, fp := w.Ledger, w.Objects, w.Lease, w.Failpoint
	key, kind, contentType, durationMS := w.Key, w.Kind, w.ContentType, w.DurationMS
	if a, err := led.GetAsset(ctx, key); err == nil {
		return a, true, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Asset{}, false, storeErr(err)
	}
	if err := claimKey(ctx, led, objs, lease, key); err != nil {
		return Asset{}, false, err
	}
	if err := callFP(ctx, fp, "after_claim_object"); err != nil {
		return Asset{}, false, errors.Join(err, abandon(ctx, led, objs, lease.AttemptID, key))
	}
	hr := &hashingReader{r: r, h: sha256.New()}
	info, err := w.put(ctx, hr)
	if err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			// Someone else wrote the key first. If they finished, reuse it.
			if a, gerr := led.GetAsset(ctx, key); gerr == nil {
				_, aerr := led.AbandonClaim(ctx, lease.AttemptID, key) // an asset row exists: never deletes
				return a, true, storeErr(aerr)
			}
		}
		var aerr error
		if errors.Is(err, ErrAlreadyExists) {
			aerr = abandon(ctx, led, objs, lease.AttemptID, key)
		} else {
			// A failed Put leaves no object (Puts are atomic): nothing to
			// delete, so no delete can fail and wedge the key.
			aerr = forgetClaim(ctx, led, lease.AttemptID, key)
		}
		var pe *sourceError
		if errors.As(err, &pe) {
			// The reader failed, not the store: its error goes up as is,
			// still marked, so the caller can tell (finalize names a
			// broken join as such).
			return Asset{}, false, errors.Join(pe, aerr)
		}
		if errors.Is(err, ErrAlreadyExists) {
			return Asset{}, false, errors.Join(infraErr("object_busy", "another attempt is writing this object; retrying later", err), aerr)
		}
		return Asset{}, false, errors.Join(infraErr("object_store_error", "the object store did not accept the upload", err), aerr)
	}
	sum := hex.EncodeToString(hr.h.Sum(nil))
	if info.SHA256 != "" && info.SHA256 != sum || info.Size != hr.n {
		aerr := abandon(ctx, led, objs, lease.AttemptID, key)
		return Asset{}, false, errors.Join(infraErr("object_integrity",
			"the stored object did not match what was sent", fmt.Errorf("stored %d bytes %s, sent %d bytes %s", info.Size, info.SHA256, hr.n, sum)), aerr)
	}
	if err := callFP(ctx, fp, "after_upload_before_asset"); err != nil {
		return Asset{}, false, errors.Join(err, abandon(ctx, led, objs, lease.AttemptID, key))
	}
	a = Asset{Key: key, JobID: lease.JobID, Kind: kind, SizeBytes: hr.n, SHA256: sum, ContentType: contentType, DurationMS: durationMS}
	if err := led.CommitAsset(ctx, lease, a); err != nil {
		// storeErr: a fence stays a fence; anything else (a full disk, a
		// busy database) is the store's and transient.
		return Asset{}, false, errors.Join(storeErr(err), abandon(ctx, led, objs, lease.AttemptID, key))
	}
	return a, false, nil
}

// put uploads the object (create-only) in a span of its own (SpanUpload)
// that records its key and the bytes sent.
func (w *objectWrite) put(ctx context.Context, hr *hashingReader) (info ObjectInfo, err error) {
	ctx, span := tracerOr(w.Tracer).Start(ctx, SpanUpload, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrObjectKey.String(w.Key), AttrObjectKind.String(w.Kind)))
	defer func() {
		span.SetAttributes(AttrObjectBytes.Int64(hr.n))
		if err != nil {
			span.SetStatus(codes.Error, "upload failed")
		}
		span.End()
	}()
	return w.Objects.Put(ctx, w.Key, hr, PutOptions{ContentType: w.ContentType, CreateOnly: true})
}

// abandon undoes this attempt's claim, deleting the object when the ledger
// decides nobody else refers to it. It uses a context that outlives a
// canceled attempt: cleanup must run precisely when the attempt is dying.
// If the delete keeps failing, the claim stays 'deleting': once this
// attempt's lease is dead and StaleDeleteAfter has passed, the next writer
// of the key takes the cleanup over (ClaimObject), and an object nobody
// deletes is the sweeper's (invariant 2 allows it).
func abandon(ctx context.Context, led ObjectLedger, objs ObjectStore, attemptID, key string) error {
	ctx = context.WithoutCancel(ctx)
	del, err := led.AbandonClaim(ctx, attemptID, key)
	if err != nil || !del {
		return err
	}
	if err := deleteObject(ctx, objs, key); err != nil {
		return fmt.Errorf("delete abandoned object %s: %w", key, err)
	}
	return led.FinishAbandon(ctx, attemptID, key)
}

// forgetClaim drops this attempt's claim on a key it never wrote.
func forgetClaim(ctx context.Context, led ObjectLedger, attemptID, key string) error {
	ctx = context.WithoutCancel(ctx)
	del, err := led.AbandonClaim(ctx, attemptID, key)
	if err != nil || !del {
		return err
	}
	return led.FinishAbandon(ctx, attemptID, key)
}

// Deletes in cleanup are retried, each bounded, so that together they end
// well within StaleDeleteAfter: a dead attempt's delete can then no longer
// be in flight when another writer takes its cleanup over.
const (
	deleteTries   = 3
	deleteTimeout = 20 * time.Second
)

// deleteObject deletes key, retrying a failure with a short backoff.
func deleteObject(ctx context.Context, objs ObjectStore, key string) error {
	var err error
	for try := range deleteTries {
		if try > 0 {
			if serr := sleepCtx(ctx, time.Duration(try)*300*time.Millisecond); serr != nil {
				return errors.Join(err, serr)
			}
		}
		dctx, cancel := context.WithTimeout(ctx, deleteTimeout)
		err = objs.Delete(dctx, key)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// claimKey claims key for lease (ClaimObject). When the ledger hands over
// the dead cleanup of an earlier attempt (ErrClaimTakenOver), it finishes
// that cleanup — deletes the object, ends the 'deleting' claim — and claims
// again.
func claimKey(ctx context.Context, led ObjectLedger, objs ObjectStore, lease Lease, key string) error {
	for range 2 {
		err := led.ClaimObject(ctx, lease, key)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrClaimTakenOver):
			if derr := deleteObject(context.WithoutCancel(ctx), objs, key); derr != nil {
				return infraErr("object_store_error", "object storage did not delete an abandoned object; retrying later", derr)
			}
			if ferr := led.FinishAbandon(context.WithoutCancel(ctx), lease.AttemptID, key); ferr != nil {
				return storeErr(ferr)
			}
		case errors.Is(err, ErrClaimConflict):
			return infraErr("object_busy", "another attempt is cleaning up this object; retrying later", err)
		default:
			return storeErr(err)
		}
	}
	return infraErr("object_busy", "another attempt is cleaning up this object; retrying later", ErrClaimConflict)
}

// releaseStaged removes a staged answer that is no longer needed: its
// asset row goes and a 'deleting' claim comes in one transaction, then the
// object is deleted and the claim ended. A failed delete leaves the claim
// and the object to the sweeper.
func releaseStaged(ctx context.Context, led ObjectLedger, objs ObjectStore, owner, key string) error {
	ctx = context.WithoutCancel(ctx)
	ok, err := led.ReleaseStaged(ctx, &ReleaseStagedParams{Key: key, Owner: owner})
	if err != nil || !ok {
		return err
	}
	if err := deleteObject(ctx, objs, key); err != nil {
		return fmt.Errorf("delete staged answer %s: %w", key, err)
	}
	return led.FinishAbandon(ctx, owner, key)
}

func callFP(ctx context.Context, fp Failpoint, name string) error {
	if fp == nil {
		return nil
	}
	return fp(ctx, name)
}

func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var fe *FenceError
	if errors.As(err, &fe) {
		return err
	}
	var ce *ClassifiedError
	if errors.As(err, &ce) {
		return err
	}
	return infraErr("store_unavailable", "the job store did not answer", err)
}

type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// sourceError marks a failure of the reader feeding an upload (a provider
// stream or ffmpeg), so it is not mistaken for an object store failure.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceReader tags its reader's errors as sourceErrors.
type sourceReader struct{ r io.Reader }

func (s sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err: err}
	}
	return n, err
}

// adoptObject finishes the write of an earlier attempt that died between its
// upload and its asset row. Puts are atomic (a create-only link or a
// completed multipart upload), so an object at the deterministic key is a
// whole object made from these very inputs: it is hashed and given its
// asset row instead of being paid for and made again. adopted=false means
// there is nothing to adopt.
func adoptObject(ctx context.Context, w *objectWrite) (Asset, bool, error) {
	led, objs, lease := w.Ledger, w.Objects, w.Lease
	key, kind, contentType, durationMS := w.Key, w.Kind, w.ContentType, w.DurationMS
	if _, err := objs.Head(ctx, key); errors.Is(err, ErrNotFound) {
		return Asset{}, false, nil // the common case: costs one HEAD
	} else if err != nil {
		return Asset{}, false, infraErr("object_store_error", "object storage did not answer", err)
	}
	// Claim before looking again, so the sweeper cannot delete the object
	// between our look and our asset row.
	if err := claimKey(ctx, led, objs, lease, key); err != nil {
		return Asset{}, false, err
	}
	if a, err := led.GetAsset(ctx, key); err == nil { // committed meanwhile
		_, aerr := led.AbandonClaim(ctx, lease.AttemptID, key)
		return a, true, storeErr(aerr)
	}
	rc, _, err := objs.Get(ctx, key, 0, -1)
	if errors.Is(err, ErrNotFound) {
		return Asset{}, false, storeErr(abandon(ctx, led, objs, lease.AttemptID, key))
	}
	if err != nil {
		return Asset{}, false, errors.Join(infraErr("object_store_error", "object storage did not answer", err),
			forgetClaim(ctx, led, lease.AttemptID, key))
	}
	hr := &hashingReader{r: rc, h: sha256.New()}
	_, err = io.Copy(io.Discard, hr)
	rc.Close()
	if err != nil {
		return Asset{}, false, errors.Join(infraErr("object_store_error", "object storage download broke off", err),
			forgetClaim(ctx, led, lease.AttemptID, key))
	}
	a := Asset{Key: key, JobID: lease.JobID, Kind: kind, SizeBytes: hr.n, SHA256: hex.EncodeToString(hr.h.Sum(nil)), ContentType: contentType, DurationMS: durationMS}
	if err := led.CommitAsset(ctx, lease, a); err != nil {
		// storeErr: a fence stays a fence; anything else (a full disk, a
		// busy database) is the store's and transient. The object is not
		// this attempt's upload but a whole one found here — for a staged
		// key the only copy of a paid answer —, so only the claim goes:
		// the next attempt adopts it again.
		return Asset{}, false, errors.Join(storeErr(err), forgetClaim(ctx, led, lease.AttemptID, key))
	}
	return a, true, nil
}

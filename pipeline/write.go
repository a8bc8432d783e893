package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// writeObject stores r under key by the write protocol of DESIGN §7:
// ownership row → object (streamed, create-only) → asset row. If the key
// already has an asset row the object is reused and r is not read
// (reused=true). On any failure after the claim, the claim is abandoned and
// the object deleted only if the ledger says nobody else refers to it.
func writeObject(ctx context.Context, led ObjectLedger, objs ObjectStore, lease Lease, fp Failpoint,
	key, kind, contentType string, durationMS int, r io.Reader) (a Asset, reused bool, err error) {
	if a, err := led.GetAsset(ctx, key); err == nil {
		return a, true, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Asset{}, false, storeErr(err)
	}
	if err := led.ClaimObject(ctx, lease, key); err != nil {
		if errors.Is(err, ErrClaimConflict) {
			return Asset{}, false, &ClassifiedError{Class: ClassTransient, Code: "object_busy", Message: "another attempt is cleaning up this object; retrying later", Cause: err}
		}
		return Asset{}, false, storeErr(err)
	}
	if err := callFP(ctx, fp, "after_claim_object"); err != nil {
		return Asset{}, false, errors.Join(err, abandon(ctx, led, objs, lease.AttemptID, key))
	}
	hr := &hashingReader{r: r, h: sha256.New()}
	info, err := objs.Put(ctx, key, hr, PutOptions{ContentType: contentType, CreateOnly: true})
	if err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			// Someone else wrote the key first. If they finished, reuse it.
			if a, gerr := led.GetAsset(ctx, key); gerr == nil {
				_, aerr := led.AbandonClaim(ctx, lease.AttemptID, key) // an asset row exists: never deletes
				return a, true, storeErr(aerr)
			}
		}
		aerr := abandon(ctx, led, objs, lease.AttemptID, key)
		var pe *sourceError
		if errors.As(err, &pe) {
			// The reader failed, not the store: its error goes up as is,
			// still marked, so the caller can tell (finalize names a
			// broken join as such).
			return Asset{}, false, errors.Join(pe, aerr)
		}
		if errors.Is(err, ErrAlreadyExists) {
			return Asset{}, false, errors.Join(&ClassifiedError{Class: ClassTransient, Code: "object_busy",
				Message: "another attempt is writing this object; retrying later", Cause: err}, aerr)
		}
		return Asset{}, false, errors.Join(&ClassifiedError{Class: ClassTransient, Code: "object_store_error",
			Message: "the object store did not accept the upload", Cause: err}, aerr)
	}
	sum := hex.EncodeToString(hr.h.Sum(nil))
	if info.SHA256 != "" && info.SHA256 != sum || info.Size != hr.n {
		aerr := abandon(ctx, led, objs, lease.AttemptID, key)
		return Asset{}, false, errors.Join(&ClassifiedError{Class: ClassTransient, Code: "object_integrity",
			Message: "the stored object did not match what was sent", Cause: fmt.Errorf("stored %d bytes %s, sent %d bytes %s", info.Size, info.SHA256, hr.n, sum)}, aerr)
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

// abandon undoes this attempt's claim, deleting the object when the ledger
// decides nobody else refers to it. It uses a context that outlives a
// canceled attempt: cleanup must run precisely when the attempt is dying.
func abandon(ctx context.Context, led ObjectLedger, objs ObjectStore, attemptID, key string) error {
	ctx = context.WithoutCancel(ctx)
	del, err := led.AbandonClaim(ctx, attemptID, key)
	if err != nil || !del {
		return err
	}
	if err := objs.Delete(ctx, key); err != nil {
		// The claim stays 'deleting'; the sweeper finishes the job.
		return fmt.Errorf("delete abandoned object %s: %w", key, err)
	}
	return led.FinishAbandon(ctx, attemptID, key)
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
	return &ClassifiedError{Class: ClassTransient, Code: "store_unavailable", Message: "the job store did not answer", Cause: err}
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
func adoptObject(ctx context.Context, led ObjectLedger, objs ObjectStore, lease Lease, key, kind, contentType string, durationMS int) (Asset, bool, error) {
	if _, err := objs.Head(ctx, key); errors.Is(err, ErrNotFound) {
		return Asset{}, false, nil // the common case: costs one HEAD
	} else if err != nil {
		return Asset{}, false, &ClassifiedError{Class: ClassTransient, Code: "object_store_error", Message: "object storage did not answer", Cause: err}
	}
	// Claim before looking again, so the sweeper cannot delete the object
	// between our look and our asset row.
	if err := led.ClaimObject(ctx, lease, key); err != nil {
		if errors.Is(err, ErrClaimConflict) {
			return Asset{}, false, &ClassifiedError{Class: ClassTransient, Code: "object_busy", Message: "another attempt is cleaning up this object; retrying later", Cause: err}
		}
		return Asset{}, false, storeErr(err)
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
		return Asset{}, false, errors.Join(&ClassifiedError{Class: ClassTransient, Code: "object_store_error", Message: "object storage did not answer", Cause: err},
			abandon(ctx, led, objs, lease.AttemptID, key))
	}
	hr := &hashingReader{r: rc, h: sha256.New()}
	_, err = io.Copy(io.Discard, hr)
	rc.Close()
	if err != nil {
		return Asset{}, false, errors.Join(&ClassifiedError{Class: ClassTransient, Code: "object_store_error", Message: "object storage download broke off", Cause: err},
			abandon(ctx, led, objs, lease.AttemptID, key))
	}
	a := Asset{Key: key, JobID: lease.JobID, Kind: kind, SizeBytes: hr.n, SHA256: hex.EncodeToString(hr.h.Sum(nil)), ContentType: contentType, DurationMS: durationMS}
	if err := led.CommitAsset(ctx, lease, a); err != nil {
		// storeErr: a fence stays a fence; anything else (a full disk, a
		// busy database) is the store's and transient.
		return Asset{}, false, errors.Join(storeErr(err), abandon(ctx, led, objs, lease.AttemptID, key))
	}
	return a, true, nil
}

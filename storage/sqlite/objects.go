package sqlite

import (
	"context"
	"errors"
	"fmt"

	"edgepipe/pipeline"
)

// The write protocol of docs/design.md §7, as seen from the database:
//
//	ClaimObject   ownership row (state writing), fenced by the lease
//	  … the caller streams the object …
//	CommitAsset   asset row, and the claim is removed, fenced
//
// and when something failed after the object may exist:
//
//	AbandonClaim  decides, in one transaction, whether the object may be
//	              deleted: only if no asset row and no other claim refers
//	              to the key. If so the claim turns 'deleting', which makes
//	              every new ClaimObject on the key fail with
//	              ErrClaimConflict until…
//	FinishAbandon  …the caller has deleted the object and removes the claim.
//
// The decision and the state change are one transaction, and a new claim
// checks for 'deleting' inside its own, so a cleanup can never delete an
// object another attempt has just claimed.

// ClaimObject records that the attempt holding lease is about to write key.
// Claiming a key twice is harmless. A key being deleted by another attempt
// fails with pipeline.ErrClaimConflict (retry later) — unless that cleanup
// is dead: every 'deleting' claim on the key belongs to an attempt that no
// longer holds a live lease (or to a sweeper run) and is older than
// pipeline.StaleDeleteAfter, longer than any bounded delete may still be in
// flight. Then, in this same transaction, the caller takes the cleanup over:
// it now holds the key's 'deleting' claim and gets pipeline.ErrClaimTakenOver,
// meaning it must delete the object, FinishAbandon, and claim again. A
// failed delete therefore wedges a key for minutes, not for the sweeper's
// grace.
func (s *Store) ClaimObject(ctx context.Context, lease pipeline.Lease, key string) error {
	takenOver := false
	err := s.inTx(ctx, func(tx *wtx) error {
		takenOver = false
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "claim object"); err != nil {
			return err
		}
		var deleting, live int
		if err := tx.QueryRowContext(ctx, `SELECT count(*),
			coalesce(sum(CASE WHEN c.claimed_at > ?2 OR (j.status = 'running' AND j.attempt_id = c.attempt_id AND j.lease_expires_at > ?3)
				THEN 1 ELSE 0 END), 0)
			FROM object_claims c LEFT JOIN jobs j ON j.id = c.job_id
			WHERE c.object_key = ?1 AND c.state = 'deleting'`, key, now-pipeline.StaleDeleteAfter.Milliseconds(), now).Scan(&deleting, &live); err != nil {
			return err
		}
		if live > 0 {
			return fmt.Errorf("%w: %s", pipeline.ErrClaimConflict, key)
		}
		if deleting > 0 {
			// Take the dead cleanup over: one 'deleting' claim, ours.
			if _, err := tx.ExecContext(ctx, `DELETE FROM object_claims WHERE object_key = ? AND state = 'deleting'`, key); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
				VALUES (?, ?, ?, 'deleting', ?) ON CONFLICT (object_key, attempt_id) DO UPDATE SET state = 'deleting', claimed_at = excluded.claimed_at`,
				key, lease.AttemptID, lease.JobID, now); err != nil {
				return err
			}
			takenOver = true // committed: the sentinel is returned after
			return nil
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
			VALUES (?, ?, ?, 'writing', ?) ON CONFLICT (object_key, attempt_id) DO NOTHING`, key, lease.AttemptID, lease.JobID, now)
		return err
	})
	if err == nil && takenOver {
		return fmt.Errorf("%w: %s", pipeline.ErrClaimTakenOver, key)
	}
	return err
}

// CommitAsset records a fully written object and drops the attempt's claim
// on it, fenced by the lease. If the key already has an asset row with the
// same content the call succeeds (a retried commit); different content is
// refused with pipeline.ErrAlreadyExists.
func (s *Store) CommitAsset(ctx context.Context, lease pipeline.Lease, a pipeline.Asset) error {
	if len(a.SHA256) != 64 || a.SizeBytes < 0 || a.Key == "" || a.ContentType == "" {
		return fmt.Errorf("%w: asset needs a key, a content type, a size and a SHA-256", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx *wtx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "commit asset"); err != nil {
			return err
		}
		var claimed int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM object_claims WHERE object_key = ? AND attempt_id = ? AND state = 'writing'`,
			a.Key, lease.AttemptID).Scan(&claimed); err != nil {
			return err
		}
		if claimed == 0 {
			return fmt.Errorf("%w: attempt %s holds no claim on %s", pipeline.ErrInvalidTransition, lease.AttemptID, a.Key)
		}
		existing, err := scanAsset(tx.QueryRowContext(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key = ?`, a.Key))
		switch {
		case err == nil:
			if existing.SHA256 != a.SHA256 || existing.SizeBytes != a.SizeBytes {
				return fmt.Errorf("%w: asset %s has other content", pipeline.ErrAlreadyExists, a.Key)
			}
		case errors.Is(err, pipeline.ErrNotFound):
			if _, err := tx.ExecContext(ctx, `INSERT INTO assets (object_key, job_id, kind, size_bytes, sha256, content_type,
				duration_ms, created_by_attempt, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				a.Key, lease.JobID, a.Kind, a.SizeBytes, a.SHA256, a.ContentType, a.DurationMS, lease.AttemptID, now); err != nil {
				return err
			}
		default:
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM object_claims WHERE object_key = ? AND attempt_id = ?`, a.Key, lease.AttemptID)
		return err
	})
}

// AbandonClaim gives up attemptID's claim on key after a failed write. It
// returns deleteObject=true when the caller must delete the object (no asset
// row and no other claim refers to it); the claim then stays, in state
// 'deleting', until FinishAbandon. Otherwise the claim is simply removed.
// Not fenced: an attempt that lost its lease must still clean up after
// itself, and the decision is made under the database's lock.
func (s *Store) AbandonClaim(ctx context.Context, attemptID, key string) (deleteObject bool, err error) {
	err = s.inTx(ctx, func(tx *wtx) error {
		var mine int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM object_claims WHERE object_key = ? AND attempt_id = ?`, key, attemptID).Scan(&mine); err != nil {
			return err
		}
		if mine == 0 {
			return nil // nothing of ours to abandon
		}
		var others, assets int
		if err := tx.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM object_claims WHERE object_key = ?1 AND attempt_id <> ?2),
			(SELECT count(*) FROM assets WHERE object_key = ?1)`, key, attemptID).Scan(&others, &assets); err != nil {
			return err
		}
		if others > 0 || assets > 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM object_claims WHERE object_key = ? AND attempt_id = ?`, key, attemptID)
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE object_claims SET state = 'deleting', claimed_at = ? WHERE object_key = ? AND attempt_id = ?`, s.now(), key, attemptID); err != nil {
			return err
		}
		deleteObject = true
		return nil
	})
	return deleteObject, err
}

// FinishAbandon removes a 'deleting' claim once its object is gone, which
// lets new claims on the key through again.
func (s *Store) FinishAbandon(ctx context.Context, attemptID, key string) error {
	return s.inTx(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM object_claims WHERE object_key = ? AND attempt_id = ? AND state = 'deleting'`, key, attemptID)
		return err
	})
}

const assetColumns = `object_key, job_id, kind, size_bytes, sha256, content_type, duration_ms, created_by_attempt, created_at`

func scanAsset(r rowScanner) (pipeline.Asset, error) {
	var a pipeline.Asset
	var at int64
	if err := r.Scan(&a.Key, &a.JobID, &a.Kind, &a.SizeBytes, &a.SHA256, &a.ContentType, &a.DurationMS, &a.CreatedByAttempt, &at); err != nil {
		return a, translate(err)
	}
	a.CreatedAt = fromMS(at)
	return a, nil
}

// GetAsset returns the asset row of key, or pipeline.ErrNotFound.
func (s *Store) GetAsset(ctx context.Context, key string) (pipeline.Asset, error) {
	return scanAsset(s.read.QueryRowContext(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key = ?`, key))
}

// ListAssets calls fn for every asset in key order (the consistency checker).
func (s *Store) ListAssets(ctx context.Context, fn func(pipeline.Asset) error) error {
	rows, err := s.read.QueryContext(ctx, `SELECT `+assetColumns+` FROM assets ORDER BY object_key`)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanAsset(rows)
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	return translate(rows.Err())
}

// KeyReferenced reports whether key has an asset row or a live claim: a
// claim by the current attempt of a running job whose lease has not expired,
// or any claim in state 'deleting' (its owner is mid-cleanup). The sweeper
// deletes an object only when this is false.
func (s *Store) KeyReferenced(ctx context.Context, key string) (bool, error) {
	var n int
	err := s.read.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM assets WHERE object_key = ?1) +
		(SELECT count(*) FROM object_claims c LEFT JOIN jobs j ON j.id = c.job_id
		  WHERE c.object_key = ?1 AND (c.state = 'deleting' OR (j.status = 'running' AND j.attempt_id = c.attempt_id AND j.lease_expires_at > ?2))) +
		`+qStagedForResumableJob,
		key, s.now(), pipeline.PrefixStaging).Scan(&n)
	return n > 0, translate(err)
}

// qStagedForResumableJob counts a staged answer (?1 under ?3) whose asset
// row was never written — its writer died between upload and row — as
// referenced while the call's job can still resume: the object may be the
// only copy of a paid answer, and the job's next attempt adopts it
// (docs/design.md §6: kept until the asset exists or the job is truly final). The
// call id is the key's trailing digits (pipeline.StagingKey).
const qStagedForResumableJob = `(SELECT count(*) FROM provider_calls pc JOIN jobs j ON j.id = pc.job_id
	WHERE substr(?1, 1, length(?3)) = ?3
	  AND pc.id = CAST(substr(?1, length(rtrim(?1, '0123456789')) + 1) AS INTEGER)
	  AND j.status NOT IN ('succeeded','failed','canceled'))`

// ClaimForSweep lets the sweeper delete key safely: in one transaction it
// checks that nothing refers to the key (KeyReferenced) and, if so, records
// a 'deleting' claim for sweeperID, which blocks every new claim on the key
// until FinishAbandon(sweeperID, key). Without it, a key could be claimed,
// written and committed between the sweeper's check and its delete.
func (s *Store) ClaimForSweep(ctx context.Context, sweeperID, key string) (bool, error) {
	ok := false
	err := s.inTx(ctx, func(tx *wtx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM assets WHERE object_key = ?1) +
			(SELECT count(*) FROM object_claims c LEFT JOIN jobs j ON j.id = c.job_id
			  WHERE c.object_key = ?1 AND (c.state = 'deleting' OR (j.status = 'running' AND j.attempt_id = c.attempt_id AND j.lease_expires_at > ?2))) +
			`+qStagedForResumableJob,
			key, s.now(), pipeline.PrefixStaging).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
			VALUES (?, ?, NULL, 'deleting', ?)`, key, sweeperID, s.now()); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok, err
}

// DropStaleClaims removes 'writing' claims whose attempt is no longer the
// live attempt of its job (it crashed or was fenced out) and that are older
// than olderThanMS, returning their keys so the sweeper can consider the
// objects. 'deleting' claims older than the cutoff are stale too: their owner
// died mid-cleanup.
func (s *Store) DropStaleClaims(ctx context.Context, cutoffMS int64) ([]string, error) {
	var keys []string
	err := s.inTx(ctx, func(tx *wtx) error {
		keys = keys[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `DELETE FROM object_claims WHERE claimed_at < ?1 AND NOT EXISTS (
			SELECT 1 FROM jobs j WHERE j.id = object_claims.job_id AND j.status = 'running'
			  AND j.attempt_id = object_claims.attempt_id AND j.lease_expires_at > ?2)
			RETURNING object_key`, cutoffMS, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	return keys, err
}

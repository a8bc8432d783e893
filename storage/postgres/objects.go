package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// The write protocol of docs/design.md §7, as in storage/sqlite/objects.go.
// SQLite decides each step under its one writer lock; here every step that
// reads and then writes a key's claims or asset row holds the key's advisory
// lock (lockKey) for its transaction, so a cleanup's decision and a new
// claim can never interleave.

// ClaimObject records that the attempt holding lease is about to write key;
// see storage/sqlite's ClaimObject for the takeover of a dead cleanup.
func (s *Store) ClaimObject(ctx context.Context, lease pipeline.Lease, key string) error {
	takenOver := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		takenOver = false
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "claim object"); err != nil {
			return err
		}
		if err := lockKey(ctx, tx, key); err != nil {
			return err
		}
		var deleting, live int
		if err := tx.QueryRow(ctx, `SELECT count(*),
			count(*) FILTER (WHERE c.claimed_at > $2 OR (j.status = 'running' AND j.attempt_id = c.attempt_id AND j.lease_expires_at > $3))
			FROM object_claims c LEFT JOIN jobs j ON j.id = c.job_id
			WHERE c.object_key = $1 AND c.state = 'deleting'`, key, now-pipeline.StaleDeleteAfter.Milliseconds(), now).Scan(&deleting, &live); err != nil {
			return err
		}
		if live > 0 {
			return fmt.Errorf("%w: %s", pipeline.ErrClaimConflict, key)
		}
		if deleting > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM object_claims WHERE object_key = $1 AND state = 'deleting'`, key); err != nil {
				return err
			}
			if err := upsertDeleting(ctx, tx, key, lease.AttemptID, &lease.JobID, now); err != nil {
				return err
			}
			takenOver = true
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
			VALUES ($1, $2, $3, 'writing', $4) ON CONFLICT (object_key, attempt_id) DO NOTHING`, key, lease.AttemptID, lease.JobID, now)
		return err
	})
	if err == nil && takenOver {
		return fmt.Errorf("%w: %s", pipeline.ErrClaimTakenOver, key)
	}
	return err
}

func upsertDeleting(ctx context.Context, tx pgx.Tx, key, owner string, jobID *string, now int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
		VALUES ($1, $2, $3, 'deleting', $4) ON CONFLICT (object_key, attempt_id)
		DO UPDATE SET state = 'deleting', claimed_at = excluded.claimed_at`, key, owner, jobID, now)
	return err
}

// CommitAsset records a fully written object and drops the attempt's claim
// on it, fenced by the lease. A retried commit of the same content succeeds;
// other content is refused with pipeline.ErrAlreadyExists.
func (s *Store) CommitAsset(ctx context.Context, lease pipeline.Lease, a pipeline.Asset) error {
	if len(a.SHA256) != 64 || a.SizeBytes < 0 || a.Key == "" || a.ContentType == "" {
		return fmt.Errorf("%w: asset needs a key, a content type, a size and a SHA-256", pipeline.ErrInvalidInput)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := checkFence(ctx, tx, now, lease, "commit asset"); err != nil {
			return err
		}
		if err := lockKey(ctx, tx, a.Key); err != nil {
			return err
		}
		var claimed int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM object_claims WHERE object_key = $1 AND attempt_id = $2 AND state = 'writing'`,
			a.Key, lease.AttemptID).Scan(&claimed); err != nil {
			return err
		}
		if claimed == 0 {
			return fmt.Errorf("%w: attempt %s holds no claim on %s", pipeline.ErrInvalidTransition, lease.AttemptID, a.Key)
		}
		if err := insertAsset(ctx, tx, a, lease.JobID, lease.AttemptID, a.DurationMS, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM object_claims WHERE object_key = $1 AND attempt_id = $2`, a.Key, lease.AttemptID)
		return err
	})
}

// insertAsset writes an asset row, or accepts an existing one of the same
// content (a retried commit).
func insertAsset(ctx context.Context, tx pgx.Tx, a pipeline.Asset, jobID, attempt string, durationMS int, now int64) error {
	existing, err := scanAsset(tx.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key = $1`, a.Key))
	switch {
	case err == nil:
		if existing.SHA256 != a.SHA256 || existing.SizeBytes != a.SizeBytes {
			return fmt.Errorf("%w: asset %s has other content", pipeline.ErrAlreadyExists, a.Key)
		}
		return nil
	case errors.Is(err, pipeline.ErrNotFound):
		_, err := tx.Exec(ctx, `INSERT INTO assets (object_key, job_id, kind, size_bytes, sha256, content_type,
			duration_ms, created_by_attempt, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			a.Key, jobID, a.Kind, a.SizeBytes, a.SHA256, a.ContentType, durationMS, attempt, now)
		return err
	default:
		return err
	}
}

// AbandonClaim gives up attemptID's claim on key after a failed write; it
// returns deleteObject=true when the caller must delete the object (no
// asset row and no other claim refers to it), leaving the claim 'deleting'
// until FinishAbandon. Not fenced: an attempt that lost its lease must still
// clean up after itself.
func (s *Store) AbandonClaim(ctx context.Context, attemptID, key string) (deleteObject bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		deleteObject = false
		if err := lockKey(ctx, tx, key); err != nil {
			return err
		}
		var mine, others, assets int
		if err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM object_claims WHERE object_key = $1 AND attempt_id = $2),
			(SELECT count(*) FROM object_claims WHERE object_key = $1 AND attempt_id <> $2),
			(SELECT count(*) FROM assets WHERE object_key = $1)`, key, attemptID).Scan(&mine, &others, &assets); err != nil {
			return err
		}
		if mine == 0 {
			return nil
		}
		if others > 0 || assets > 0 {
			_, err := tx.Exec(ctx, `DELETE FROM object_claims WHERE object_key = $1 AND attempt_id = $2`, key, attemptID)
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE object_claims SET state = 'deleting', claimed_at = $1 WHERE object_key = $2 AND attempt_id = $3`,
			s.now(), key, attemptID)
		if err != nil {
			return err
		}
		// A claim the sweeper dropped meanwhile (DropStaleClaims takes no
		// key lock) protects nothing: leave the object to the sweeper.
		deleteObject = tag.RowsAffected() == 1
		return nil
	})
	return deleteObject, err
}

// FinishAbandon removes a 'deleting' claim once its object is gone.
func (s *Store) FinishAbandon(ctx context.Context, attemptID, key string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockKey(ctx, tx, key); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM object_claims WHERE object_key = $1 AND attempt_id = $2 AND state = 'deleting'`, key, attemptID)
		return err
	})
}

const assetColumns = `object_key, job_id, kind, size_bytes, sha256, content_type, duration_ms, created_by_attempt, created_at`

func scanAsset(r pgx.Row) (pipeline.Asset, error) {
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
	return scanAsset(s.pool.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key = $1`, key))
}

// ListAssets calls fn for every asset in key order (the consistency checker).
func (s *Store) ListAssets(ctx context.Context, fn func(pipeline.Asset) error) error {
	// Read the page first: fn may be slow (it hashes objects) and must not
	// hold a pooled connection open meanwhile.
	after := ""
	for {
		var page []pipeline.Asset
		err := eachRow(s.pool.Query(ctx, `SELECT `+assetColumns+` FROM assets WHERE object_key COLLATE "C" > $1 ORDER BY object_key COLLATE "C" LIMIT 500`, after))(func(r pgx.Rows) error {
			a, err := scanAsset(r)
			if err != nil {
				return err
			}
			page = append(page, a)
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range page {
			if err := fn(a); err != nil {
				return err
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// qReferenced counts what refers to key $1 at time $2: its asset row, a
// live claim (the current attempt of a running job with a live lease, or
// any 'deleting' claim), and a staged answer whose call's job can still
// resume (storage/sqlite's qStagedForResumableJob).
const qReferenced = `SELECT
	(SELECT count(*) FROM assets WHERE object_key = $1) +
	(SELECT count(*) FROM object_claims c LEFT JOIN jobs j ON j.id = c.job_id
	  WHERE c.object_key = $1 AND (c.state = 'deleting' OR (j.status = 'running' AND j.attempt_id = c.attempt_id AND j.lease_expires_at > $2))) +
	(SELECT count(*) FROM provider_calls pc JOIN jobs j ON j.id = pc.job_id
	  WHERE starts_with($1, $3::text) AND substring($1 from '([0-9]+)$') IS NOT NULL
	    AND length(substring($1 from '([0-9]+)$')) < 19
	    AND pc.id = substring($1 from '([0-9]+)$')::bigint
	    AND j.status NOT IN ('succeeded','failed','canceled'))`

// KeyReferenced reports whether key has an asset row or a live claim (see
// qReferenced). The sweeper deletes an object only when this is false.
func (s *Store) KeyReferenced(ctx context.Context, key string) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, qReferenced, key, s.now(), pipeline.PrefixStaging).Scan(&n)
	return n > 0, translate(err)
}

// ClaimForSweep lets the sweeper delete key safely: in one transaction
// (holding the key's lock) it checks that nothing refers to the key and, if
// so, records a 'deleting' claim for sweeperID.
func (s *Store) ClaimForSweep(ctx context.Context, sweeperID, key string) (bool, error) {
	ok := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		ok = false
		if err := lockKey(ctx, tx, key); err != nil {
			return err
		}
		now := s.now()
		var n int
		if err := tx.QueryRow(ctx, qReferenced, key, now, pipeline.PrefixStaging).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO object_claims (object_key, attempt_id, job_id, state, claimed_at)
			VALUES ($1, $2, NULL, 'deleting', $3)`, key, sweeperID, now); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok, err
}

// DropStaleClaims removes claims older than cutoffMS whose attempt is no
// longer the live attempt of its job, returning their keys.
func (s *Store) DropStaleClaims(ctx context.Context, cutoffMS int64) ([]string, error) {
	var keys []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		keys = nil
		return eachRow(tx.Query(ctx, `DELETE FROM object_claims WHERE claimed_at < $1 AND NOT EXISTS (
			SELECT 1 FROM jobs j WHERE j.id = object_claims.job_id AND j.status = 'running'
			  AND j.attempt_id = object_claims.attempt_id AND j.lease_expires_at > $2)
			RETURNING object_key`, cutoffMS, s.now()))(func(r pgx.Rows) error {
			var k string
			if err := r.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
			return nil
		})
	})
	return keys, err
}

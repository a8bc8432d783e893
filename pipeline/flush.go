package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FlushSpool stages the paid answers this worker holds only in its spool —
// kept there because the object store refused them — once the store takes
// them again, so that the spool is no longer the only copy: any worker, on
// any machine, then finds the answer by its call row (docs/design.md §6).
// The worker runs it every FlushEvery; it needs no attempt (a staging key
// belongs to its call alone, and the sweeper leaves staging keys of live
// jobs alone). Jobs over for good are left to PruneSpool. It returns how
// many answers it staged; a failure leaves the spool file for the next
// round.
func (e *Engine) FlushSpool(ctx context.Context) (int, error) {
	if e.cfg.SpoolDir == "" {
		return 0, nil
	}
	dirs, err := os.ReadDir(e.cfg.SpoolDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("flush spool: %w", err)
	}
	n := 0
	var errs []error
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		j, err := e.spoolJob(ctx, d.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("flush spool: %w", err)
		}
		if j.Status.Final() || safeName(j.ID) != d.Name() {
			continue
		}
		k, err := e.flushJob(ctx, j, filepath.Join(e.cfg.SpoolDir, d.Name()))
		n += k
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

func (e *Engine) flushJob(ctx context.Context, j Job, dir string) (int, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	calls, err := e.cfg.Store.ProviderCalls(ctx, j.ID, AllScenes, "")
	if err != nil {
		return 0, err
	}
	byID := map[int64]ProviderCall{}
	for _, c := range calls {
		byID[c.ID] = c
	}
	n := 0
	var errs []error
	for _, f := range files {
		id, err := strconv.ParseInt(strings.TrimPrefix(f.Name(), "call-"), 10, 64)
		c, ok := byID[id]
		if err != nil || !ok || !strings.HasPrefix(f.Name(), "call-") {
			continue // a partial write (".part-…") or not ours
		}
		if st := c.Status; st != CallSucceeded && st != CallIntent && st != CallWaived {
			continue
		}
		path := filepath.Join(dir, f.Name())
		staged, err := e.flushAnswer(ctx, j, c, path)
		if err != nil {
			errs = append(errs, fmt.Errorf("flush call %d of job %s: %w", c.ID, j.ID, err))
			continue
		}
		if staged {
			n++
		}
		_ = os.Remove(path) // staged: the object store holds it now
	}
	return n, errors.Join(errs...)
}

// flushAnswer stages one spooled answer; staged=false means it already was.
func (e *Engine) flushAnswer(ctx context.Context, j Job, c ProviderCall, path string) (staged bool, err error) {
	key := StagingKey(j.Tenant, j.ID, c.Scene, c.Op, c.ID)
	if _, err := e.cfg.Store.GetAsset(ctx, key); err == nil {
		return false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(body)
	a := Asset{Key: key, JobID: j.ID, Kind: KindStaged, SizeBytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:]),
		ContentType: stagedContentType, CreatedByAttempt: "flush"}
	if _, err := e.cfg.Objects.Put(ctx, key, bytes.NewReader(body), PutOptions{ContentType: stagedContentType, CreateOnly: true}); err != nil {
		if !errors.Is(err, ErrAlreadyExists) {
			return false, err
		}
		// A staging key is this call's alone: whatever is there is this
		// answer (Puts are atomic), written by an attempt that died before
		// its asset row. Record it only if it is what the spool holds.
		info, herr := e.cfg.Objects.Head(ctx, key)
		if herr != nil {
			return false, herr
		}
		if info.Size != a.SizeBytes || (info.SHA256 != "" && info.SHA256 != a.SHA256) ||
			(info.CRC64NVME != "" && info.CRC64NVME != CRC64NVME(body)) {
			return false, fmt.Errorf("staging key %s holds other content", key)
		}
	}
	return true, e.cfg.Store.CommitStaged(ctx, &CommitStagedParams{CallID: c.ID, Asset: a})
}

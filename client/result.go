package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// Result is GET /v1/jobs/{id}/result: the MP4's bytes. A redirect to a
// presigned object-store URL is followed without the token. The caller
// closes the reader; its context bounds the whole download.
func (c *Client) Result(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, http.MethodGet, c.endpoint(nil, "v1", "jobs", id, "result"), nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("result of job %s: unexpected HTTP %d", id, resp.StatusCode)
	}
	return resp.Body, nil
}

// SHA256MismatchError: a downloaded result is not the file the job
// recorded.
type SHA256MismatchError struct {
	Got, Want string
}

func (e *SHA256MismatchError) Error() string {
	return fmt.Sprintf("SHA-256 %s does not match the job's %s", e.Got, e.Want)
}

// SaveResult downloads the job's result to dest through a temporary file
// in dest's directory, so dest is either the whole file or untouched. When
// wantSHA256 is set (the job's Result.SHA256), a download whose hash
// differs is a *SHA256MismatchError and nothing is kept.
func (c *Client) SaveResult(ctx context.Context, id, dest, wantSHA256 string) error {
	body, err := c.Result(ctx, id)
	if err != nil {
		return err
	}
	defer body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".edgepipe-download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename this removes nothing
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), body); err != nil {
		tmp.Close()
		return transportError(err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); wantSHA256 != "" && got != wantSHA256 {
		return &SHA256MismatchError{Got: got, Want: wantSHA256}
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

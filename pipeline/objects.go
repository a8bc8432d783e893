package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"io"
	"time"

	"github.com/minio/crc64nvme"
)

// ObjectStore is what the pipeline needs from the R2 role. Implementations:
// storage/s3 (any S3 API) and storage/fs (a local directory). Both pass the
// conformance suite in storage/storagetest.
//
// Errors: ErrNotFound for a missing key, ErrAlreadyExists (via
// *AlreadyExistsError) when a create-only put finds the key taken.
type ObjectStore interface {
	// Put streams r to key. The length need not be known in advance; memory
	// stays bounded whatever the size. If r returns an error or ctx ends, no
	// object is left behind. With opts.CreateOnly, an existing key is not
	// overwritten and the error matches ErrAlreadyExists.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (ObjectInfo, error)
	// Head returns an object's metadata.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Get opens an object, or the byte range [offset, offset+length) of it
	// when length >= 0 (length < 0 means to the end).
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in key
	// order, until fn returns false or an error.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) bool) error
	// AbortStaleUploads aborts unfinished multipart uploads (or removes
	// leftover temp files) started before olderThan, returning how many.
	AbortStaleUploads(ctx context.Context, olderThan time.Time) (int, error)
	// Ping checks the store is reachable (for /readyz).
	Ping(ctx context.Context) error
}

// PutOptions tune a Put.
type PutOptions struct {
	ContentType string
	CreateOnly  bool
}

// ObjectInfo describes a stored object. SHA256 is the hex digest computed
// while streaming on Put; Head and List may leave it empty when the backend
// does not keep it. CRC64NVME, when set, is the backend's own full-object
// CRC-64/NVME checksum (16 hex digits), which the server checked against the
// bytes it received: a digest that survives where SHA256 cannot be kept
// (storage/s3 on R2, for multipart objects).
type ObjectInfo struct {
	Key          string
	Size         int64
	ContentType  string
	SHA256       string
	CRC64NVME    string
	LastModified time.Time
}

// CRC64NVME is b's CRC-64/NVME checksum spelled as ObjectInfo.CRC64NVME
// is: 16 lowercase hex digits, most significant byte first.
func CRC64NVME(b []byte) string {
	h := crc64nvme.New()
	_, _ = h.Write(b) // a hash.Hash never fails
	return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, h.Sum64()))
}

// AlreadyExistsError is the typed error of a create-only put on a taken key.
type AlreadyExistsError struct{ Key string }

func (e *AlreadyExistsError) Error() string { return "object already exists: " + e.Key }
func (e *AlreadyExistsError) Unwrap() error { return ErrAlreadyExists }

package s3

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"

	"edgepipe/internal/randstream"
	"edgepipe/pipeline"
)

// BenchResult is one timed upload.
type BenchResult struct {
	Bytes    int64
	Duration time.Duration
	MiBps    float64
}

func result(n int64, d time.Duration) BenchResult {
	return BenchResult{Bytes: n, Duration: d, MiBps: float64(n) / (1 << 20) / d.Seconds()}
}

// BenchUpload streams mib MiB of generated data of unknown length to key
// through store.Put (hashing included) and times it. The object is left in
// place.
func BenchUpload(ctx context.Context, store *Store, key string, mib int) (BenchResult, error) {
	if mib <= 0 {
		return BenchResult{}, fmt.Errorf("%w: bench: size must be positive", pipeline.ErrInvalidInput)
	}
	size := int64(mib) << 20
	start := time.Now()
	info, err := store.Put(ctx, key, randstream.New(0, size), pipeline.PutOptions{ContentType: "application/octet-stream"})
	d := time.Since(start)
	if err != nil {
		return BenchResult{}, err
	}
	if info.Size != size {
		return BenchResult{}, fmt.Errorf("bench: stored %d bytes, sent %d", info.Size, size)
	}
	return result(size, d), nil
}

// BenchMinioGo is the reference: the same stream uploaded with minio-go's
// PutObject, size -1 (unknown) and partSizeMiB parts, which is how minio-go
// users stream. It creates the bucket if it is missing.
func BenchMinioGo(ctx context.Context, endpoint, access, secret, bucket, key string, mib, partSizeMiB int) (BenchResult, error) {
	if mib <= 0 || partSizeMiB < 5 {
		return BenchResult{}, fmt.Errorf("%w: bench: need a positive size and parts of at least 5 MiB", pipeline.ErrInvalidInput)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return BenchResult{}, fmt.Errorf("%w: bench: endpoint %q is not a URL", pipeline.ErrInvalidInput, endpoint)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: miniocreds.NewStaticV4(access, secret, ""), Secure: u.Scheme == "https"})
	if err != nil {
		return BenchResult{}, err
	}
	if ok, err := c.BucketExists(ctx, bucket); err != nil {
		return BenchResult{}, err
	} else if !ok {
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return BenchResult{}, err
		}
	}
	size := int64(mib) << 20
	start := time.Now()
	info, err := c.PutObject(ctx, bucket, key, randstream.New(0, size), -1,
		minio.PutObjectOptions{PartSize: uint64(partSizeMiB) << 20, ContentType: "application/octet-stream"})
	d := time.Since(start)
	if err != nil {
		return BenchResult{}, err
	}
	if info.Size != size {
		return BenchResult{}, errors.New("bench: minio-go stored a different size")
	}
	return result(size, d), nil
}

package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/minio/crc64nvme"
	"golang.org/x/sync/errgroup"
)

// The upload of a stream of unknown length, written here rather than through
// the SDK's transfer manager (feature/s3/transfermanager v0.5.7), for memory:
// it allocated Concurrency+1 part buffers for every put and read the first
// part with a growing slice, so each put left three to four parts of garbage
// and the heap grew to about twice that between collections; it also dropped
// the parts' checksums from the completion. Here part buffers come from a
// pool the Store keeps across puts, and a put holds at most Concurrency+1 of
// them (Concurrency parts in flight, one being filled): with 2 × 8 MiB that
// is 24 MiB whatever the object's size.

// Reusing (or unmapping) a part buffer once its request has returned is
// safe because of how the SDK sends a body: net/http may go on reading a
// request body after RoundTrip returns, so smithy-go wraps every body in a
// closer whose Read and Close share a mutex and closes it itself before the
// operation returns (transport/http/client.go, "so that it can be safely
// reused"); a later Read gets io.EOF, never the buffer. Each retry of a part
// builds a new request the same way, within the same UploadPart call.

// maxParts is S3's limit of parts per multipart upload (Store.maxParts,
// which a test lowers).
const maxParts = 10000

// partPool recycles part buffers between puts. It keeps up to keep idle
// buffers (enough for a few puts at once) and unmaps the rest; a get when
// none is idle maps a new one.
type partPool struct {
	size int
	idle chan []byte
	made atomic.Int64 // buffers mapped so far
}

func newPartPool(size, keep int) *partPool {
	return &partPool{size: size, idle: make(chan []byte, keep)}
}

func (p *partPool) get() ([]byte, error) {
	select {
	case b := <-p.idle:
		return b, nil
	default:
		p.made.Add(1)
		return allocPart(p.size)
	}
}

func (p *partPool) put(b []byte) {
	select {
	case p.idle <- b:
	default:
		freePart(b)
	}
}

// uploaded is what the server answered for a stored object.
type uploaded struct {
	etag      string
	crc       *string // the object's CRC64NVME as the server reports it
	crcType   types.ChecksumType
	multipart bool
}

// upload stores everything src yields under the prefixed key: one PutObject
// when src ends within the first part (an object of exactly one part
// included: the second part is read before the multipart upload is created,
// and an empty one means there is none), else a multipart upload with up to
// Concurrency parts in flight, aborted (on a fresh context, so a canceled
// put still removes its parts) if anything fails. Every request carries
// the CRC64NVME of its bytes, and the object its full-object CRC64NVME; a
// small object also its SHA-256 as metadata (a multipart one's is only
// known after its metadata is fixed). With createOnly the server is asked
// to refuse a taken key at every step that can (If-None-Match).
func (s *Store) upload(ctx context.Context, key string, src *hashingReader, contentType string, createOnly bool) (uploaded, error) {
	client := newUploadClient(s.client, s.cfg.SignPayload, createOnly)
	first, err := s.parts.get()
	if err != nil {
		return uploaded{}, fmt.Errorf("part buffer: %w", err)
	}
	n, err := io.ReadFull(src, first)
	switch {
	case src.eof: // the whole stream fits in one part (ReadFull said EOF, ErrUnexpectedEOF or nil)
		defer s.parts.put(first)
		return s.putSingle(ctx, client, key, first[:n], src, contentType, createOnly)
	case err != nil: // the source failed, whatever it wraps
		s.parts.put(first)
		return uploaded{}, err
	}
	second, err := s.parts.get()
	if err != nil {
		s.parts.put(first)
		return uploaded{}, fmt.Errorf("part buffer: %w", err)
	}
	n, err = io.ReadFull(src, second)
	if n == 0 && src.eof { // exactly one part
		s.parts.put(second)
		defer s.parts.put(first)
		return s.putSingle(ctx, client, key, first, src, contentType, createOnly)
	}
	if err != nil && !src.eof { // the source failed: nothing was created
		s.parts.put(first)
		s.parts.put(second)
		return uploaded{}, err
	}
	return s.putMultipart(ctx, client, key, first, read{second, n, err}, src, contentType, createOnly)
}

// read is a part buffer and what io.ReadFull from the source said of it.
type read struct {
	buf []byte
	n   int
	err error
}

func (s *Store) putSingle(ctx context.Context, client *uploadClient, key string, body []byte, src *hashingReader, contentType string, createOnly bool) (uploaded, error) {
	in := &awss3.PutObjectInput{
		Bucket:            &s.bucket,
		Key:               aws.String(s.prefix + key),
		Body:              bytes.NewReader(body),
		ContentLength:     aws.Int64(int64(len(body))),
		ContentType:       &contentType,
		Metadata:          map[string]string{metaSHA256: src.sum()},
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc64nvme,
		ChecksumCRC64NVME: aws.String(crcHeader(src.crc.Sum64())),
	}
	if createOnly {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := client.PutObject(ctx, in)
	if err != nil {
		return uploaded{}, err
	}
	return uploaded{etag: aws.ToString(out.ETag), crc: out.ChecksumCRC64NVME, crcType: out.ChecksumType}, nil
}

// putMultipart stores first, second and the rest of src as a multipart
// upload; second is already read (upload needed it to tell a one-part
// object from a larger one).
func (s *Store) putMultipart(ctx context.Context, client *uploadClient, key string, first []byte, second read, src *hashingReader, contentType string, createOnly bool) (res uploaded, err error) {
	objKey := aws.String(s.prefix + key)
	created, err := client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{
		Bucket:            &s.bucket,
		Key:               objKey,
		ContentType:       &contentType,
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc64nvme,
		ChecksumType:      types.ChecksumTypeFullObject,
	})
	if err != nil {
		s.parts.put(first)
		s.parts.put(second.buf)
		return uploaded{}, err
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			s.abort(ctx, objKey, uploadID)
		}
	}()

	var mu sync.Mutex
	var parts []types.CompletedPart
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Concurrency)
	send := func(num int32, buf []byte, n int) {
		// Go blocks while Concurrency parts are in flight: the part just
		// filled waits here, and nothing more is read meanwhile.
		g.Go(func() error {
			defer s.parts.put(buf)
			body := buf[:n]
			h := crc64nvme.New()
			_, _ = h.Write(body) // a hash.Hash never fails
			crc := aws.String(crcHeader(h.Sum64()))
			out, err := client.UploadPart(gctx, &awss3.UploadPartInput{
				Bucket:            &s.bucket,
				Key:               objKey,
				UploadId:          uploadID,
				PartNumber:        aws.Int32(num),
				Body:              bytes.NewReader(body),
				ContentLength:     aws.Int64(int64(n)),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc64nvme,
				ChecksumCRC64NVME: crc,
			})
			if err != nil {
				return fmt.Errorf("part %d: %w", num, err)
			}
			mu.Lock()
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC64NVME: crc})
			mu.Unlock()
			return nil
		})
	}
	send(1, first, len(first))
	var readErr error
	for num, r := int32(2), second; ; num++ {
		if r.n > 0 && int(num) > s.maxParts {
			s.parts.put(r.buf)
			readErr = fmt.Errorf("the object is larger than %d parts of %d MiB (EDGEPIPE_S3_PART_SIZE_MIB)", s.maxParts, s.cfg.PartSizeMiB)
			break
		}
		if r.n > 0 && (r.err == nil || src.eof) {
			send(num, r.buf, r.n)
		} else {
			s.parts.put(r.buf)
		}
		if src.eof {
			break
		}
		if r.err != nil { // the source failed, whatever it wraps: abort, store nothing
			readErr = r.err
			break
		}
		if gctx.Err() != nil { // a part failed: stop reading
			break
		}
		buf, err := s.parts.get()
		if err != nil {
			readErr = fmt.Errorf("part buffer: %w", err)
			break
		}
		n, err := io.ReadFull(src, buf)
		r = read{buf, n, err}
	}
	if err := errors.Join(readErr, g.Wait()); err != nil {
		return uploaded{}, err
	}
	if err := ctx.Err(); err != nil {
		return uploaded{}, err
	}
	return s.complete(ctx, client, objKey, uploadID, parts, src, createOnly)
}

// complete completes a multipart upload whose parts are all stored, with
// the full-object CRC64NVME of everything src yielded.
func (s *Store) complete(ctx context.Context, client *uploadClient, objKey, uploadID *string, parts []types.CompletedPart, src *hashingReader, createOnly bool) (uploaded, error) {
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	in := &awss3.CompleteMultipartUploadInput{
		Bucket:            &s.bucket,
		Key:               objKey,
		UploadId:          uploadID,
		MultipartUpload:   &types.CompletedMultipartUpload{Parts: parts},
		ChecksumCRC64NVME: aws.String(crcHeader(src.crc.Sum64())),
		ChecksumType:      types.ChecksumTypeFullObject,
	}
	if createOnly {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := client.CompleteMultipartUpload(ctx, in)
	if err != nil {
		return uploaded{}, err
	}
	return uploaded{etag: aws.ToString(out.ETag), crc: out.ChecksumCRC64NVME, crcType: out.ChecksumType, multipart: true}, nil
}

// abort removes a failed multipart upload's parts, on a context that
// outlives the put's. A failure is logged: the upload is already failed,
// and the sweeper's AbortStaleUploads removes what is left.
func (s *Store) abort(ctx context.Context, key, uploadID *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AbortTimeout)
	defer cancel()
	if _, err := s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: key, UploadId: uploadID}); err != nil {
		s.log.Warn("s3: could not abort a failed multipart upload; AbortStaleUploads will", "key", aws.ToString(key), "err", err)
	}
}

// Package s3 is edgepipe's R2 role on any S3 API (MinIO, AWS S3, Cloudflare
// R2): pipeline.ObjectStore on aws-sdk-go-v2.
//
// Puts stream (upload.go): the source is read into parts of PartSizeMiB and
// up to Concurrency parts are in flight, so a put holds at most
// Concurrency+1 part buffers whatever the object's size, and the length
// need not be known in advance. The buffers are mapped outside the Go heap
// and reused across puts.
//
// Digests. The SHA-256, the CRC-64/NVME and the size are computed on the
// way. Every object is written with a full-object CRC64NVME checksum
// (ChecksumType FULL_OBJECT on a multipart upload, the parts carrying their
// own): the server checks it against the bytes it stored and refuses a put
// whose bytes differ, and HeadObject (checksum mode) reports it, on AWS S3,
// MinIO and Cloudflare R2 alike. The SHA-256 is stored as x-amz-meta-sha256
// on objects smaller than a part; a multipart upload's metadata is fixed
// before the digest is known, so there it is written as object tags, a best
// effort: R2 does not implement tagging (501), and there Head reports the
// CRC64NVME alone.
//
// A create-only put sends If-None-Match: * on PutObject or, for a multipart
// upload, on CreateMultipartUpload (R2 checks it there, so a losing writer
// fails before it streams a byte; others ignore it) and again on
// CompleteMultipartUpload, so the server refuses it atomically when the key
// is taken. 412 PreconditionFailed and 409 ConditionalRequestConflict (a
// concurrent conditional write on the key, AWS and R2) both mean the key is
// taken. A failed or canceled put aborts its multipart upload, so no object
// and no parts are left; AbortStaleUploads sweeps up after crashes.
package s3

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/crc64nvme"

	"edgepipe/pipeline"
)

// metaSHA256 is the user metadata key (x-amz-meta-sha256) of the digest.
const metaSHA256 = "sha256"

// Defaults. Parts are sized from the concurrency so that a put's part
// buffers (Concurrency in flight plus one being filled) stay within
// PartBudgetMiB: 6 MiB parts with 2 in flight. Measured with `edgepipe
// bench upload` against a local MinIO on two cores, a 1 GiB stream of
// unknown length goes at least as fast as minio-go with 16 MiB parts, and
// the process's peak RSS stays under 64 MiB (see README, Benchmarks). One
// part in flight loses a third of the throughput.
const (
	DefaultRegion      = "us-east-1"
	DefaultConcurrency = 2
	// PartBudgetMiB bounds the part buffers of one put when PartSizeMiB
	// is not set: PartSizeMiB = max(5, PartBudgetMiB / (Concurrency+1)).
	PartBudgetMiB       = 18
	DefaultListPageSize = 1000
	DefaultAbortTimeout = 30 * time.Second
	// MaxPresignTTL is S3's limit for SigV4 presigned URLs.
	MaxPresignTTL = 7 * 24 * time.Hour
)

// Config configures a Store. The names in parentheses are the environment
// variables the service reads them from.
type Config struct {
	// Endpoint is the S3 API base URL (EDGEPIPE_S3_ENDPOINT), e.g.
	// http://127.0.0.1:9000 for MinIO or https://<account>.r2.cloudflarestorage.com.
	// Empty means AWS S3.
	Endpoint string
	// Region (EDGEPIPE_S3_REGION). Default us-east-1; R2 wants "auto".
	Region string
	// Bucket (EDGEPIPE_S3_BUCKET). Required.
	Bucket string
	// AccessKey and SecretKey (EDGEPIPE_S3_ACCESS_KEY, EDGEPIPE_S3_SECRET_KEY)
	// go together; when both are empty the SDK's default credential chain
	// (AWS_* variables, shared config, instance role) is used.
	AccessKey string
	SecretKey string
	// PathStyle (EDGEPIPE_S3_PATH_STYLE) addresses buckets as
	// endpoint/bucket/key instead of bucket.endpoint/key. Nil means true
	// when Endpoint is set (MinIO and most self-hosted servers need it) and
	// false for AWS.
	PathStyle *bool
	// Prefix (EDGEPIPE_S3_PREFIX) is prepended to every key, so several
	// deployments can share a bucket. Empty, or a valid key ending in "/".
	Prefix string
	// CreateBucket (EDGEPIPE_S3_CREATE_BUCKET) creates the bucket at
	// start-up when it is missing.
	CreateBucket bool
	// PartSizeMiB (EDGEPIPE_S3_PART_SIZE_MIB) is the multipart part size,
	// 5 to 512. Zero sizes parts from Concurrency (PartBudgetMiB). Objects
	// up to 10000 parts (58 GiB at the default) fit.
	PartSizeMiB int
	// Concurrency (EDGEPIPE_S3_CONCURRENCY) is how many parts of one put
	// are uploaded at once, 1 to 32.
	Concurrency int
	// ListPageSize is the ListObjectsV2 page size, 1 to 1000.
	ListPageSize int
	// AbortTimeout bounds the clean-up (AbortMultipartUpload) of a put that
	// failed or whose context ended; it runs on a fresh context.
	AbortTimeout time.Duration
	// PresignEndpoint (EDGEPIPE_S3_PUBLIC_ENDPOINT), when set, is the base
	// URL put in presigned links instead of Endpoint: what browsers reach
	// when the service talks to the store on an internal address.
	PresignEndpoint string
	// SignPayload (EDGEPIPE_S3_SIGN_PAYLOAD) signs the SHA-256 of every
	// uploaded part over plain http, so the server verifies the bytes it
	// received. Off by default, as the SDK does over https (where TLS
	// protects them): it costs a third of the upload throughput on a
	// two-core machine running MinIO next to edgepipe.
	SignPayload bool
	// HTTPClient overrides the SDK's HTTP client.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// WithDefaults returns c with every unset field at its default, as New
// uses it.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.PathStyle == nil {
		c.PathStyle = aws.Bool(c.Endpoint != "")
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.PartSizeMiB == 0 {
		c.PartSizeMiB = max(5, PartBudgetMiB/(c.Concurrency+1))
	}
	if c.ListPageSize == 0 {
		c.ListPageSize = DefaultListPageSize
	}
	if c.AbortTimeout == 0 {
		c.AbortTimeout = DefaultAbortTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// bucketName is S3's rule for new buckets (AWS, MinIO and R2 agree).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Validate reports the first bad setting, naming its environment variable.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: s3: "+format, append([]any{pipeline.ErrInvalidInput}, args...)...)
	}
	if c.Bucket == "" {
		return bad("bucket is empty (set EDGEPIPE_S3_BUCKET)")
	}
	if !bucketName.MatchString(c.Bucket) || strings.Contains(c.Bucket, "..") {
		return bad("bucket %q is not a valid bucket name: 3-63 of [a-z0-9.-] (EDGEPIPE_S3_BUCKET)", c.Bucket)
	}
	for _, e := range []struct{ name, v string }{
		{"EDGEPIPE_S3_ENDPOINT", c.Endpoint}, {"EDGEPIPE_S3_PUBLIC_ENDPOINT", c.PresignEndpoint},
	} {
		if e.v == "" {
			continue
		}
		u, err := url.Parse(e.v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("endpoint %q is not an http(s) URL (%s)", e.v, e.name)
		}
		if u.Path != "" && u.Path != "/" {
			return bad("endpoint %q has a path; give the bucket in EDGEPIPE_S3_BUCKET instead (%s)", e.v, e.name)
		}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return bad("EDGEPIPE_S3_ACCESS_KEY and EDGEPIPE_S3_SECRET_KEY must be set together")
	}
	if c.Prefix != "" && (!strings.HasSuffix(c.Prefix, "/") || pipeline.ValidateObjectKey(strings.TrimSuffix(c.Prefix, "/")) != nil) {
		return bad("prefix %q must be a valid key followed by \"/\" (EDGEPIPE_S3_PREFIX)", c.Prefix)
	}
	if c.PartSizeMiB < 5 || c.PartSizeMiB > 512 {
		return bad("part size %d MiB is outside 5..512 (EDGEPIPE_S3_PART_SIZE_MIB)", c.PartSizeMiB)
	}
	if c.Concurrency < 1 || c.Concurrency > 32 {
		return bad("concurrency %d is outside 1..32 (EDGEPIPE_S3_CONCURRENCY)", c.Concurrency)
	}
	if c.ListPageSize < 1 || c.ListPageSize > 1000 {
		return bad("list page size %d is outside 1..1000", c.ListPageSize)
	}
	if c.AbortTimeout < 0 {
		return bad("abort timeout must not be negative")
	}
	return nil
}

// Store is a pipeline.ObjectStore on an S3 bucket. Safe for concurrent use.
type Store struct {
	client *awss3.Client
	parts  *partPool
	// maxParts is the most parts a put may have: S3's limit, maxParts.
	maxParts int
	presign  *awss3.PresignClient
	bucket   string
	prefix   string
	cfg      Config
	log      *slog.Logger
}

var _ pipeline.ObjectStore = (*Store)(nil)

// New connects to the bucket, creating it first when cfg.CreateBucket is
// set and it is missing.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS config: %w", err)
	}
	clientOpts := func(endpoint string) func(*awss3.Options) {
		return func(o *awss3.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
			o.UsePathStyle = *cfg.PathStyle
			// Only checksum what the API requires. The payload is
			// already covered by the SigV4 signature (over http) or TLS,
			// and the default CRC32 trailers cost CPU on both ends and
			// are not understood by every S3-compatible server.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
			// A whole Get asks for the object's checksum and checks the
			// bytes against it (Get); an object stored without one
			// (written by another client) is read unchecked, which the
			// SDK would otherwise print on stderr for every read.
			o.DisableLogOutputChecksumValidationSkipped = true
		}
	}
	client := awss3.NewFromConfig(awsCfg, clientOpts(cfg.Endpoint))
	presignEndpoint := cfg.Endpoint
	if cfg.PresignEndpoint != "" {
		presignEndpoint = cfg.PresignEndpoint
	}
	partSize := int64(cfg.PartSizeMiB) << 20
	s := &Store{
		client:  client,
		presign: awss3.NewPresignClient(awss3.NewFromConfig(awsCfg, clientOpts(presignEndpoint))),
		// Idle buffers for two puts at full concurrency.
		parts:    newPartPool(int(partSize), 2*(cfg.Concurrency+1)),
		maxParts: maxParts,
		bucket:   cfg.Bucket,
		prefix:   cfg.Prefix,
		cfg:      cfg,
		log:      cfg.Logger,
	}
	if cfg.CreateBucket {
		if err := s.ensureBucket(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) ensureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &s.bucket})
	if err == nil {
		return nil
	}
	if httpStatus(err) != http.StatusNotFound {
		return fmt.Errorf("s3: check bucket %s: %w", s.bucket, err)
	}
	in := &awss3.CreateBucketInput{Bucket: &s.bucket}
	if s.cfg.Region != DefaultRegion && s.cfg.Endpoint == "" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.cfg.Region),
		}
	}
	_, err = s.client.CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("s3: create bucket %s: %w", s.bucket, err)
	}
	s.log.Info("created bucket", "bucket", s.bucket)
	return nil
}

// checkKey applies the key rule, counting the store's prefix against the
// S3 limit of 1024 bytes.
func (s *Store) checkKey(key string) error {
	if err := pipeline.ValidateObjectKey(key); err != nil {
		return err
	}
	if len(s.prefix)+len(key) > pipeline.MaxObjectKeyLen {
		return fmt.Errorf("%w: object key is %d bytes, more than %d with the store's prefix %q", pipeline.ErrInvalidInput, len(key), pipeline.MaxObjectKeyLen-len(s.prefix), s.prefix)
	}
	return nil
}

// uploadClient is the client a put uploads through, one per put. Unless
// SignPayload is set it sends part bodies as UNSIGNED-PAYLOAD, which the SDK
// already does over https: over plain http it would otherwise hash every
// part for the signature, and the server hash it again to check, costing
// about a third of the throughput on a small machine on top of the SHA-256
// we compute for the caller anyway. For a create-only put it also sends
// If-None-Match: * on CreateMultipartUpload, which the SDK's input has no
// field for, so a losing writer fails before it streams.
type uploadClient struct {
	*awss3.Client
	sign       bool
	createOnly bool
}

func newUploadClient(c *awss3.Client, sign, createOnly bool) *uploadClient {
	return &uploadClient{Client: c, sign: sign, createOnly: createOnly}
}

func (c *uploadClient) opts(opts []func(*awss3.Options)) []func(*awss3.Options) {
	if c.sign {
		return opts
	}
	return append(opts, func(o *awss3.Options) {
		o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
	})
}

func (c *uploadClient) PutObject(ctx context.Context, in *awss3.PutObjectInput, opts ...func(*awss3.Options)) (*awss3.PutObjectOutput, error) {
	return c.Client.PutObject(ctx, in, append(c.opts(opts), retryDeniedWrites)...)
}

func (c *uploadClient) CreateMultipartUpload(ctx context.Context, in *awss3.CreateMultipartUploadInput, opts ...func(*awss3.Options)) (*awss3.CreateMultipartUploadOutput, error) {
	if c.createOnly {
		opts = append(opts, func(o *awss3.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttp.SetHeaderValue("If-None-Match", "*"))
		})
	}
	return c.Client.CreateMultipartUpload(ctx, in, opts...)
}

func (c *uploadClient) CompleteMultipartUpload(ctx context.Context, in *awss3.CompleteMultipartUploadInput, opts ...func(*awss3.Options)) (*awss3.CompleteMultipartUploadOutput, error) {
	return c.Client.CompleteMultipartUpload(ctx, in, append(opts, retryDeniedWrites)...)
}

// retryDeniedWrites lets the SDK's retryer retry the two requests that
// publish an object under its key (PutObject, CompleteMultipartUpload)
// when the server refused them with 403 AccessDenied. MinIO on a single
// drive keeps a key's prefixes as directories and removes one once its
// last object is deleted; a write that races the removal is refused with
// AccessDenied, although nothing about it is denied. The workers of one
// machine do exactly that with a job's staging keys. The retries are the
// retryer's (its attempts, 3 by default, and its backoff); a write that is
// really denied (credentials, policy) is refused each time and then fails.
// CreateMultipartUpload and UploadPart write outside the key's prefix on
// MinIO; reads and deletes create nothing.
func retryDeniedWrites(o *awss3.Options) {
	if base, ok := o.Retryer.(aws.RetryerV2); ok {
		o.Retryer = deniedWriteRetryer{base}
	}
}

// deniedWriteRetryer is a retryer that also retries AccessDenied, without
// taking a token of the client's retry quota for it: the quota is shared
// by every request of the client and a token is only given back when its
// retry succeeds, so puts with credentials that are really denied would
// otherwise drain it and leave every other request (parts, reads, 5xx
// answers) without retries.
type deniedWriteRetryer struct{ aws.RetryerV2 }

func (r deniedWriteRetryer) IsErrorRetryable(err error) bool {
	return apiCode(err) == "AccessDenied" || r.RetryerV2.IsErrorRetryable(err)
}

func (r deniedWriteRetryer) GetRetryToken(ctx context.Context, err error) (func(error) error, error) {
	if apiCode(err) == "AccessDenied" {
		return func(error) error { return nil }, nil
	}
	return r.RetryerV2.GetRetryToken(ctx, err)
}

func (c *uploadClient) UploadPart(ctx context.Context, in *awss3.UploadPartInput, opts ...func(*awss3.Options)) (*awss3.UploadPartOutput, error) {
	return c.Client.UploadPart(ctx, in, c.opts(opts)...)
}

// Bucket is the store's bucket.
func (s *Store) Bucket() string { return s.bucket }

// Prefix is prepended to every key in the bucket.
func (s *Store) Prefix() string { return s.prefix }

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isNotFound(err error) bool {
	switch apiCode(err) {
	case "NoSuchBucket":
		return false // a misconfiguration, not a missing object
	case "NoSuchKey", "NotFound":
		return true
	}
	return httpStatus(err) == http.StatusNotFound
}

// isKeyTaken reports whether a conditional write (If-None-Match: *) was
// refused because of another object: 412 PreconditionFailed when the key
// exists, or 409 ConditionalRequestConflict when a concurrent conditional
// write on the key is under way (AWS S3 and R2 answer that to a put, a
// create or a completion of a multipart upload). Another 409 (e.g.
// OperationAborted) is not.
func isKeyTaken(err error) bool {
	switch apiCode(err) {
	case "PreconditionFailed", "ConditionalRequestConflict":
		return true
	}
	return httpStatus(err) == http.StatusPreconditionFailed
}

// hashingReader hashes (SHA-256 and CRC-64/NVME) and counts what the
// uploader reads, and stops the upload once ctx ends even if the source
// never blocks.
type hashingReader struct {
	ctx context.Context
	r   io.Reader
	h   hash.Hash
	crc hash.Hash64
	n   int64
	// eof is set when the source itself said io.EOF, exactly: the only
	// clean end of a stream. io.ReadFull reports a short final read as
	// io.ErrUnexpectedEOF, which is also what a source that broke off
	// returns (a dropped HTTP body), so the end is read from here.
	eof bool
}

func newHashingReader(ctx context.Context, r io.Reader) *hashingReader {
	return &hashingReader{ctx: ctx, r: r, h: sha256.New(), crc: crc64nvme.New()}
}

func (r *hashingReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.crc.Write(p[:n])
	r.n += int64(n)
	if err == io.EOF { //nolint:errorlint // only the bare sentinel is a clean end; a wrapped EOF is a failure
		r.eof = true
	}
	return n, err
}

func (r *hashingReader) sum() string { return hex.EncodeToString(r.h.Sum(nil)) }

// crcHeader is the wire form of a CRC64NVME checksum: the base64 of its 8
// big-endian bytes.
func crcHeader(crc uint64) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint64(nil, crc))
}

// crcHex turns a full-object CRC64NVME checksum as S3 reports it into the
// 16 hex digits of pipeline.ObjectInfo; "" for none, for a composite
// checksum (a checksum of the parts' checksums, "...-N") or garbage.
func crcHex(header *string, typ types.ChecksumType) string {
	if header == nil || typ == types.ChecksumTypeComposite {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(*header)
	if err != nil || len(b) != 8 {
		return ""
	}
	return hex.EncodeToString(b)
}

// Put streams r to key. See pipeline.ObjectStore.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if err := s.checkKey(key); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	ct, err := pipeline.ObjectContentType(opts.ContentType)
	if err != nil {
		return pipeline.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("s3: put %s: %w", key, err)
	}
	if opts.CreateOnly {
		// Refuse early rather than upload a whole render only to have
		// the server refuse it at the end. If-None-Match below is what
		// makes it safe against a racing writer.
		if _, err := s.Head(ctx, key); err == nil {
			return pipeline.ObjectInfo{}, &pipeline.AlreadyExistsError{Key: key}
		} else if !errors.Is(err, pipeline.ErrNotFound) {
			return pipeline.ObjectInfo{}, fmt.Errorf("s3: put %s: %w", key, err)
		}
	}
	src := newHashingReader(ctx, r)
	out, err := s.upload(ctx, key, src, ct, opts.CreateOnly)
	if err != nil {
		// Only a create-only put asked a condition: a 409 on a plain put
		// is a conflicting concurrent operation (retryable), not a taken
		// key.
		if opts.CreateOnly && isKeyTaken(err) {
			return pipeline.ObjectInfo{}, &pipeline.AlreadyExistsError{Key: key}
		}
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return pipeline.ObjectInfo{}, fmt.Errorf("s3: put %s: %w", key, err)
	}
	info := pipeline.ObjectInfo{Key: key, Size: src.n, ContentType: ct, SHA256: src.sum(), LastModified: time.Now()}
	// crcHex keeps only a full-object checksum: a composite one ("...-N",
	// also when the server does not name its type) is no digest of the
	// bytes and cannot be compared with ours.
	if stored := crcHex(out.crc, out.crcType); stored != "" {
		// The server names the checksum of what it stored: it must be the
		// one of the bytes we hashed. It checked ours already, so this
		// only fails on a server that ignores the checksum it was sent.
		sent := hex.EncodeToString(binary.BigEndian.AppendUint64(nil, src.crc.Sum64()))
		if stored != sent {
			s.deleteBad(ctx, key, out.etag)
			return pipeline.ObjectInfo{}, fmt.Errorf("s3: put %s: the server stored an object with CRC64NVME %s, the bytes sent have %s", key, stored, sent)
		}
		info.CRC64NVME = sent
	}
	if out.multipart {
		s.tagDigest(ctx, key, info, out.etag)
	}
	return info, nil
}

// deleteBad removes an object a put just stored with the wrong bytes (or
// too few of them), on a context that outlives the put's: the put fails,
// and a failed put leaves no object. The delete is conditional on the ETag the put got back, so it
// never removes what another writer stored under key since; a server that
// does not implement conditional deletes (501, or the NotImplemented code)
// gets the plain delete, as before such deletes existed. Any other refusal
// leaves the object, logged: it may be another writer's.
func (s *Store) deleteBad(ctx context.Context, key, etag string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AbortTimeout)
	defer cancel()
	in := &awss3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)}
	if etag != "" {
		in.IfMatch = aws.String(etag)
	}
	_, err := s.client.DeleteObject(ctx, in)
	if err != nil && in.IfMatch != nil && (httpStatus(err) == http.StatusNotImplemented || apiCode(err) == "NotImplemented") {
		in.IfMatch = nil
		_, err = s.client.DeleteObject(ctx, in)
	}
	switch {
	case err == nil:
	case httpStatus(err) == http.StatusPreconditionFailed:
		s.log.Warn("s3: an object stored with the wrong bytes was overwritten since; left alone", "key", key)
	default:
		s.log.Error("s3: could not delete an object stored with the wrong bytes", "key", key, "err", err)
	}
}

// Digest tags. A multipart upload's metadata is fixed when it starts, before
// the digest is known, so a multipart object gets its SHA-256 as object tags
// once complete: a metadata-only operation where tagging exists (unlike a
// self-copy, which MinIO answers by rewriting all the data). The tags also
// record the ETag they were computed for, so after a concurrent overwrite
// the stale digest is ignored rather than reported for the wrong bytes.
// Nothing depends on them: the object's CRC64NVME is its server-side digest
// everywhere, and R2 has no tagging at all.
const (
	tagSHA256 = "sha256"
	tagETag   = "etag"
)

// tagDigest stores info's SHA-256 as key's digest tags. A failure is
// logged, not returned: the object is complete and the caller has the
// digest; Head then reports no SHA256, which the interface allows. Only a
// failure on an object without a server-side checksum is a warning.
func (s *Store) tagDigest(ctx context.Context, key string, info pipeline.ObjectInfo, etag string) {
	_, err := s.client.PutObjectTagging(ctx, &awss3.PutObjectTaggingInput{
		Bucket: &s.bucket,
		Key:    aws.String(s.prefix + key),
		Tagging: &types.Tagging{TagSet: []types.Tag{
			{Key: aws.String(tagSHA256), Value: aws.String(info.SHA256)},
			{Key: aws.String(tagETag), Value: aws.String(strings.Trim(etag, `"`))},
		}},
	})
	switch {
	case err == nil:
	case info.CRC64NVME != "":
		s.log.Debug("s3: multipart object not tagged with its sha256; it has its crc64nvme", "key", key, "err", err)
	default:
		s.log.Warn("s3: multipart object stored with no server-side digest: not tagged with its sha256, and the server reported no crc64nvme", "key", key, "err", err)
	}
}

// taggedDigest reads the digest tags of key, valid only for the object
// with the given ETag.
func (s *Store) taggedDigest(ctx context.Context, key, etag string) string {
	out, err := s.client.GetObjectTagging(ctx, &awss3.GetObjectTaggingInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return "" // e.g. a server without tagging (R2: 501 NotImplemented)
	}
	var sum, tagged string
	for _, t := range out.TagSet {
		switch aws.ToString(t.Key) {
		case tagSHA256:
			sum = aws.ToString(t.Value)
		case tagETag:
			tagged = aws.ToString(t.Value)
		}
	}
	if tagged == "" || tagged != strings.Trim(etag, `"`) {
		return ""
	}
	return sum
}

func infoFromHead(key string, size int64, ct *string, meta map[string]string, lm *time.Time) pipeline.ObjectInfo {
	return pipeline.ObjectInfo{
		Key:          key,
		Size:         size,
		ContentType:  aws.ToString(ct),
		SHA256:       meta[metaSHA256],
		LastModified: aws.ToTime(lm),
	}
}

// Head returns key's metadata.
func (s *Store) Head(ctx context.Context, key string) (pipeline.ObjectInfo, error) {
	if err := s.checkKey(key); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		if isNotFound(err) {
			return pipeline.ObjectInfo{}, fmt.Errorf("s3: %s: %w", key, pipeline.ErrNotFound)
		}
		return pipeline.ObjectInfo{}, fmt.Errorf("s3: head %s: %w", key, err)
	}
	info := infoFromHead(key, aws.ToInt64(out.ContentLength), out.ContentType, out.Metadata, out.LastModified)
	info.CRC64NVME = crcHex(out.ChecksumCRC64NVME, out.ChecksumType)
	if info.SHA256 == "" && aws.ToInt32(out.TagCount) > 0 {
		info.SHA256 = s.taggedDigest(ctx, key, aws.ToString(out.ETag))
	}
	return info, nil
}

// Get opens key, or [offset, offset+length) of it. The returned info
// describes the whole object. An offset past the end is ErrInvalidInput; a
// range running past the end is cut short.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, pipeline.ObjectInfo, error) {
	if err := s.checkKey(key); err != nil {
		return nil, pipeline.ObjectInfo{}, err
	}
	if offset < 0 {
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("%w: s3: negative offset %d", pipeline.ErrInvalidInput, offset)
	}
	if length == 0 {
		// HTTP cannot ask for zero bytes; check the object and the
		// offset, and read nothing.
		return s.emptyRange(ctx, key, offset)
	}
	in := &awss3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)}
	switch {
	case length > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	case offset > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", offset))
	default:
		// A whole read gets the object's checksum, and the SDK checks
		// the bytes against it as they are read: a corrupt body ends
		// in an error, not in silently wrong data.
		in.ChecksumMode = types.ChecksumModeEnabled
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		if isNotFound(err) {
			return nil, pipeline.ObjectInfo{}, fmt.Errorf("s3: %s: %w", key, pipeline.ErrNotFound)
		}
		if apiCode(err) == "InvalidRange" || httpStatus(err) == http.StatusRequestedRangeNotSatisfiable {
			// The range starts at or past the end: at the end is an
			// empty read, past it is the caller's mistake.
			return s.emptyRange(ctx, key, offset)
		}
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("s3: get %s: %w", key, err)
	}
	size := aws.ToInt64(out.ContentLength)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		// "bytes 2-4/10": the object's size is after the slash.
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if n, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				size = n
			}
		}
	}
	info := infoFromHead(key, size, out.ContentType, out.Metadata, out.LastModified)
	info.CRC64NVME = crcHex(out.ChecksumCRC64NVME, out.ChecksumType)
	if info.SHA256 == "" && aws.ToInt32(out.TagCount) > 0 {
		info.SHA256 = s.taggedDigest(ctx, key, aws.ToString(out.ETag))
	}
	return out.Body, info, nil
}

func (s *Store) emptyRange(ctx context.Context, key string, offset int64) (io.ReadCloser, pipeline.ObjectInfo, error) {
	info, err := s.Head(ctx, key)
	if err != nil {
		return nil, pipeline.ObjectInfo{}, err
	}
	if offset > info.Size {
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("%w: s3: %s: offset %d is past the end (%d bytes)", pipeline.ErrInvalidInput, key, offset, info.Size)
	}
	return io.NopCloser(strings.NewReader("")), info, nil
}

// Delete removes key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3: delete %s: %w", key, err)
	}
	return nil
}

// List calls fn for every object whose key starts with prefix, in key
// order. ListObjectsV2 carries no user metadata, so SHA256 and ContentType
// are empty; Head has them.
func (s *Store) List(ctx context.Context, prefix string, fn func(pipeline.ObjectInfo) bool) error {
	if err := pipeline.ValidateObjectPrefix(prefix); err != nil {
		return err
	}
	p := awss3.NewListObjectsV2Paginator(s.client, &awss3.ListObjectsV2Input{
		Bucket:  &s.bucket,
		Prefix:  aws.String(s.prefix + prefix),
		MaxKeys: aws.Int32(int32(s.cfg.ListPageSize)),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("s3: list %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if pipeline.ValidateObjectKey(key) != nil {
				continue // not written through this package
			}
			if !fn(pipeline.ObjectInfo{Key: key, Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)}) {
				return nil
			}
		}
	}
	return nil
}

// AbortStaleUploads aborts multipart uploads under the store's prefix that
// were initiated before olderThan.
//
// The uploads are listed without a prefix and filtered here: MinIO only
// lists uploads of the exact object named by a prefix.
func (s *Store) AbortStaleUploads(ctx context.Context, olderThan time.Time) (int, error) {
	aborted := 0
	in := &awss3.ListMultipartUploadsInput{Bucket: &s.bucket}
	for {
		page, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return aborted, fmt.Errorf("s3: list multipart uploads: %w", err)
		}
		for _, u := range page.Uploads {
			key := aws.ToString(u.Key)
			if !strings.HasPrefix(key, s.prefix) || !aws.ToTime(u.Initiated).Before(olderThan) {
				continue
			}
			_, err := s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
				Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId,
			})
			if err != nil {
				if apiCode(err) == "NoSuchUpload" {
					continue // finished or aborted meanwhile
				}
				return aborted, fmt.Errorf("s3: abort upload of %s: %w", key, err)
			}
			s.log.Info("aborted stale multipart upload", "key", key, "initiated", aws.ToTime(u.Initiated))
			aborted++
		}
		if !aws.ToBool(page.IsTruncated) {
			return aborted, nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}

// Ping checks that the bucket is reachable with our credentials.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &s.bucket}); err != nil {
		return fmt.Errorf("s3: ping bucket %s: %w", s.bucket, err)
	}
	return nil
}

// PresignGet returns a URL that lets anyone holding it GET key until ttl
// passes (at most 7 days), so results can be served by the store directly.
// It does not check that key exists.
func (s *Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := s.checkKey(key); err != nil {
		return "", err
	}
	if ttl <= 0 || ttl > MaxPresignTTL {
		return "", fmt.Errorf("%w: s3: presign ttl %v is outside (0, %v]", pipeline.ErrInvalidInput, ttl, MaxPresignTTL)
	}
	req, err := s.presign.PresignGetObject(ctx, &awss3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)},
		awss3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("s3: presign %s: %w", key, err)
	}
	return req.URL, nil
}

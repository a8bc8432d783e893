//go:build minio

package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"

	"edgepipe/pipeline"
	"edgepipe/storage/storagetest"
)

// These tests run against a real MinIO server (go test -tags minio); see
// storagetest.StartMinIO for where the binary comes from.

var bucketSeq atomic.Int64

func newBucketStore(t *testing.T, srv storagetest.MinIOServer, mutate func(*Config)) *Store {
	t.Helper()
	cfg := Config{
		Endpoint:     srv.Endpoint,
		Bucket:       fmt.Sprintf("edgepipe-test-%d-%d", time.Now().UnixNano()%1e6, bucketSeq.Add(1)),
		AccessKey:    srv.AccessKey,
		SecretKey:    srv.SecretKey,
		CreateBucket: true,
		PartSizeMiB:  5, // the minimum, so multipart tests stay small
		Concurrency:  2,
		ListPageSize: 7, // make List page even on small tests
	}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func minioClient(t *testing.T, srv storagetest.MinIOServer) *minio.Client {
	t.Helper()
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: miniocreds.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Secure: false})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConformanceMinIO(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	mc := minioClient(t, srv)
	// R2: the same MinIO behind a proxy that answers object tagging as R2
	// does (501 NotImplemented), so multipart objects get no SHA-256 tags
	// and the suite checks their CRC64NVME instead, through the store and
	// through minio-go straight to MinIO.
	r2 := newS3Proxy(t, reverseProxy(t, srv.Endpoint), r2NoTagging)
	runs := []struct{ name, prefix, endpoint string }{
		{"NoPrefix", "", srv.Endpoint},
		{"Prefix", "tenant-a/", srv.Endpoint},
		{"R2NoTagging", "", r2.URL},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			storagetest.Run(t,
				func(t *testing.T) pipeline.ObjectStore {
					return newBucketStore(t, srv, func(c *Config) { c.Prefix, c.Endpoint = run.prefix, run.endpoint })
				},
				storagetest.WithMultipartSize(12<<20), // > 5 MiB parts: 3 parts
				storagetest.WithVerifier(func(t *testing.T, st pipeline.ObjectStore) storagetest.Verifier {
					s := st.(*Store)
					return minioVerifier{c: mc, bucket: s.Bucket(), prefix: s.Prefix()}
				}))
		})
	}
}

// minioVerifier checks what the driver wrote with minio-go, an independent
// S3 client.
type minioVerifier struct {
	c      *minio.Client
	bucket string
	prefix string
}

func (v minioVerifier) Stat(ctx context.Context, key string) (pipeline.ObjectInfo, error) {
	oi, err := v.c.StatObject(ctx, v.bucket, v.prefix+key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return pipeline.ObjectInfo{}, pipeline.ErrNotFound
		}
		return pipeline.ObjectInfo{}, err
	}
	sum := oi.UserMetadata["Sha256"]
	if sum == "" {
		// Multipart objects carry their digest as tags, valid for the
		// ETag they name.
		tags, err := v.c.GetObjectTagging(ctx, v.bucket, v.prefix+key, minio.GetObjectTaggingOptions{})
		if err != nil {
			return pipeline.ObjectInfo{}, err
		}
		if m := tags.ToMap(); m["etag"] == strings.Trim(oi.ETag, `"`) {
			sum = m["sha256"]
		}
	}
	crc := ""
	if b, err := base64.StdEncoding.DecodeString(oi.ChecksumCRC64NVME); err == nil && len(b) == 8 && oi.ChecksumMode != "COMPOSITE" {
		crc = hex.EncodeToString(b)
	}
	return pipeline.ObjectInfo{
		Key: key, Size: oi.Size, ContentType: oi.ContentType,
		SHA256: sum, CRC64NVME: crc, LastModified: oi.LastModified,
	}, nil
}

func (v minioVerifier) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return v.c.GetObject(ctx, v.bucket, v.prefix+key, minio.GetObjectOptions{})
}

func (v minioVerifier) PendingUploads(ctx context.Context) (int, error) {
	n := 0
	for u := range v.c.ListIncompleteUploads(ctx, v.bucket, "", true) {
		if u.Err != nil {
			return n, u.Err
		}
		n++
	}
	return n, nil
}

func (v minioVerifier) StartUpload(ctx context.Context, key string) error {
	_, err := minio.Core{Client: v.c}.NewMultipartUpload(ctx, v.bucket, v.prefix+key, minio.PutObjectOptions{})
	return err
}

func TestPresignGet(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	s := newBucketStore(t, srv, nil)
	ctx := t.Context()
	if _, err := s.Put(ctx, "results/r.mp4", strings.NewReader("movie"), pipeline.PutOptions{ContentType: "video/mp4"}); err != nil {
		t.Fatal(err)
	}
	link, err := s.PresignGet(ctx, "results/r.mp4", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "movie" || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Errorf("GET presigned = %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	// A tampered link is refused: the signature covers the key.
	resp, err = http.Get(strings.Replace(link, "r.mp4", "x.mp4", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET tampered link = %d, want 403", resp.StatusCode)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 8 * 24 * time.Hour} {
		if _, err := s.PresignGet(ctx, "results/r.mp4", ttl); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("PresignGet ttl %v: %v, want ErrInvalidInput", ttl, err)
		}
	}
	if _, err := s.PresignGet(ctx, "../x", time.Minute); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("PresignGet invalid key: %v", err)
	}
}

func TestPresignEndpoint(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	s := newBucketStore(t, srv, func(c *Config) { c.PresignEndpoint = "https://files.example.test" })
	link, err := s.PresignGet(t.Context(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, "https://files.example.test/"+s.Bucket()+"/k?") {
		t.Errorf("link = %s, want it on the public endpoint", link)
	}
}

func TestStartupAndPing(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	ctx := t.Context()
	s := newBucketStore(t, srv, nil)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// Creating is idempotent: a second store on the same bucket starts.
	if _, err := New(ctx, Config{Endpoint: srv.Endpoint, Bucket: s.Bucket(), AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, CreateBucket: true}); err != nil {
		t.Errorf("New on an existing bucket: %v", err)
	}
	// Without CreateBucket a missing bucket is only noticed by Ping.
	missing, err := New(ctx, Config{Endpoint: srv.Endpoint, Bucket: "no-such-bucket", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Ping(ctx); err == nil {
		t.Error("Ping on a missing bucket succeeded")
	}
	if _, err := missing.Head(ctx, "k"); err == nil {
		t.Error("Head in a missing bucket succeeded")
	}
	bad, err := New(ctx, Config{Endpoint: srv.Endpoint, Bucket: s.Bucket(), AccessKey: srv.AccessKey, SecretKey: "wrong-secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Ping(ctx); err == nil {
		t.Error("Ping with a wrong secret succeeded")
	}
}

// TestDigestAtPartBoundaries: whichever way the uploader splits a
// stream (one PutObject, also when the stream is exactly one part; several
// parts), the object's sha256 is stored where other clients can read it,
// and no data is rewritten to store it.
func TestDigestAtPartBoundaries(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	mc := minioClient(t, srv)
	s := newBucketStore(t, srv, nil) // 5 MiB parts
	tests := []struct {
		size  int64
		parts int32 // 0: not a multipart upload
	}{
		{5<<20 - 1, 0},
		{5 << 20, 0}, // exactly one part: one PutObject
		{5<<20 + 1, 2},
		{11 << 20, 3},
	}
	for _, tc := range tests {
		key := fmt.Sprintf("obj-%d", tc.size)
		info, err := s.Put(t.Context(), key, storagetest.Stream(5, tc.size), pipeline.PutOptions{ContentType: "video/mp4"})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := minioVerifier{c: mc, bucket: s.Bucket()}.Stat(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		want := storagetest.StreamSHA256(5, tc.size)
		if info.SHA256 != want || stored.SHA256 != want {
			t.Errorf("%s: sha256: Put %s, stored %q; want %s", key, info.SHA256, stored.SHA256, want)
		}
		if stored.ContentType != "video/mp4" || stored.Size != tc.size {
			t.Errorf("%s: stored %q %d", key, stored.ContentType, stored.Size)
		}
		if head, err := s.Head(t.Context(), key); err != nil || head.SHA256 != want {
			t.Errorf("%s: Head = %+v, %v; want sha %s", key, head, err, want)
		}
		head, err := s.client.HeadObject(t.Context(), &awss3.HeadObjectInput{Bucket: aws.String(s.Bucket()), Key: aws.String(key), PartNumber: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToInt32(head.PartsCount); got != tc.parts {
			t.Errorf("%s: PartsCount = %d, want %d", key, got, tc.parts)
		}
	}

	// A digest tagged for other bytes is not reported: overwrite the
	// object behind the store's back, keeping the old tags.
	const key = "obj-11534336"
	if _, err := mc.PutObject(t.Context(), s.Bucket(), key, strings.NewReader("other"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := mustTags(t, map[string]string{"sha256": storagetest.StreamSHA256(5, 11<<20), "etag": "stale"})
	if err := mc.PutObjectTagging(t.Context(), s.Bucket(), key, stale, minio.PutObjectTaggingOptions{}); err != nil {
		t.Fatal(err)
	}
	if head, err := s.Head(t.Context(), key); err != nil || head.SHA256 != "" || head.Size != 5 {
		t.Errorf("Head after foreign overwrite = %+v, %v; want no digest", head, err)
	}
}

// TestCreateOnlyRacesAtCompletion: a writer that takes the key after our
// existence check, while our upload is streaming, wins; our put is refused
// by the server (If-None-Match) and leaves nothing behind.
func TestCreateOnlyRacesAtCompletion(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	mc := minioClient(t, srv)
	for _, size := range []int64{1 << 10, 12 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			s := newBucketStore(t, srv, nil)
			ctx := t.Context()
			const key = "contended"
			rival := func() {
				if _, err := mc.PutObject(ctx, s.Bucket(), key, strings.NewReader("rival"), 5, minio.PutObjectOptions{}); err != nil {
					t.Errorf("rival put: %v", err)
				}
			}
			// The rival writes once we have handed over the first byte:
			// after the existence check, before completion.
			src := &hookReader{r: storagetest.Stream(1, size), hook: rival}
			_, err := s.Put(ctx, key, src, pipeline.PutOptions{CreateOnly: true})
			if !errors.Is(err, pipeline.ErrAlreadyExists) {
				t.Fatalf("Put = %v, want ErrAlreadyExists", err)
			}
			rc, _, err := s.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "rival" {
				t.Errorf("object = %.20q, want the rival's", b)
			}
			v := minioVerifier{c: mc, bucket: s.Bucket()}
			if n, err := v.PendingUploads(ctx); err != nil || n != 0 {
				t.Errorf("pending uploads = %d, %v; want 0", n, err)
			}
		})
	}
}

func mustTags(t *testing.T, m map[string]string) *tags.Tags {
	t.Helper()
	tg, err := tags.NewTags(m, true)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

type hookReader struct {
	r    io.Reader
	hook func()
	once sync.Once
}

func (h *hookReader) Read(p []byte) (int, error) {
	h.once.Do(h.hook)
	return h.r.Read(p)
}

// TestR2BehavioursOnMinIO runs the R2 answers of s3_proxy_test.go against a
// real server: MinIO behind a proxy that answers some requests as R2 would.
func TestR2BehavioursOnMinIO(t *testing.T) {
	t.Parallel()
	srv := storagetest.StartMinIO(t)
	mc := minioClient(t, srv)
	const size = 11 << 20 // three 5 MiB parts

	// No tagging: the multipart object's digest is its CRC64NVME, which
	// the server (MinIO, read by minio-go) holds, Head reports, and a
	// whole Get checks the bytes against.
	t.Run("NoTagging", func(t *testing.T) {
		t.Parallel()
		p := newS3Proxy(t, reverseProxy(t, srv.Endpoint), r2NoTagging)
		s := newBucketStore(t, srv, func(c *Config) { c.Endpoint = p.URL })
		ctx := t.Context()
		wantCRC, wantSHA := storagetest.StreamCRC64NVME(6, size), storagetest.StreamSHA256(6, size)
		info, err := s.Put(ctx, "renders/r.mp4", storagetest.Stream(6, size), pipeline.PutOptions{ContentType: "video/mp4", CreateOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if info.CRC64NVME != wantCRC || info.SHA256 != wantSHA {
			t.Errorf("Put = %+v, want crc %s sha %s", info, wantCRC, wantSHA)
		}
		if len(p.ops("PutObjectTagging")) != 1 {
			t.Errorf("tagging requests: %+v, want the one refused", p.ops("PutObjectTagging"))
		}
		head, err := s.Head(ctx, "renders/r.mp4")
		if err != nil || head.CRC64NVME != wantCRC || head.SHA256 != "" || head.Size != size {
			t.Errorf("Head = %+v, %v; want crc %s and no sha256 (no tags on R2)", head, err, wantCRC)
		}
		stored, err := minioVerifier{c: mc, bucket: s.Bucket()}.Stat(ctx, "renders/r.mp4")
		if err != nil || stored.CRC64NVME != wantCRC {
			t.Errorf("MinIO holds %+v, %v; want crc %s", stored, err, wantCRC)
		}
		rc, ginfo, err := s.Get(ctx, "renders/r.mp4", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != size || ginfo.CRC64NVME != wantCRC {
			t.Errorf("Get: %d bytes, %v, info %+v", n, err, ginfo)
		}
	})

	// A body corrupted on the way is caught by a whole Get.
	t.Run("CorruptGet", func(t *testing.T) {
		t.Parallel()
		target, _ := url.Parse(srv.Endpoint)
		corrupt := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = pr.In.Host },
			ModifyResponse: func(resp *http.Response) error {
				if resp.Request.Method != http.MethodGet || resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Has("tagging") {
					return nil
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				if len(b) > 100 {
					b[100] ^= 1
				}
				resp.Body = io.NopCloser(bytes.NewReader(b))
				return nil
			},
		}
		p := newS3Proxy(t, corrupt, nil)
		s := newBucketStore(t, srv, func(c *Config) { c.Endpoint = p.URL })
		ctx := t.Context()
		for _, n := range []int64{1 << 10, size} {
			key := fmt.Sprintf("k%d", n)
			if _, err := s.Put(ctx, key, storagetest.Stream(7, n), pipeline.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			rc, _, err := s.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			if err == nil {
				t.Errorf("%d bytes: a corrupted body was read without an error", n)
			}
		}
	})

	// R2 and S3 answer a conditional write racing another one with 409
	// ConditionalRequestConflict; R2 checks If-None-Match at create.
	for _, tc := range []struct {
		op, code  string
		status    int
		wantParts int
	}{
		{"CompleteMultipartUpload", "ConditionalRequestConflict", http.StatusConflict, 3},
		{"PutObject", "ConditionalRequestConflict", http.StatusConflict, 0},
		{"CreateMultipartUpload", "PreconditionFailed", http.StatusPreconditionFailed, 0},
		{"CreateMultipartUpload", "ConditionalRequestConflict", http.StatusConflict, 0},
	} {
		t.Run(tc.op+"/"+tc.code, func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, reverseProxy(t, srv.Endpoint), func(w http.ResponseWriter, r *http.Request, op string) bool {
				if op != tc.op {
					return false
				}
				s3Error(w, r, tc.status, tc.code)
				return true
			})
			s := newBucketStore(t, srv, func(c *Config) { c.Endpoint = p.URL })
			ctx := t.Context()
			n := int64(size)
			if tc.op == "PutObject" {
				n = 1 << 10
			}
			_, err := s.Put(ctx, "k", storagetest.Stream(8, n), pipeline.PutOptions{CreateOnly: true})
			if !errors.Is(err, pipeline.ErrAlreadyExists) {
				t.Fatalf("Put = %v, want ErrAlreadyExists", err)
			}
			if got := len(p.ops("UploadPart")); got != tc.wantParts {
				t.Errorf("%d parts sent, want %d", got, tc.wantParts)
			}
			if create := p.ops("CreateMultipartUpload"); tc.op != "PutObject" && (len(create) != 1 || create[0].ifNoneMatch != "*") {
				t.Errorf("CreateMultipartUpload requests %+v, want one with If-None-Match: *", create)
			}
			v := minioVerifier{c: mc, bucket: s.Bucket()}
			if pending, err := v.PendingUploads(ctx); err != nil || pending != 0 {
				t.Errorf("pending uploads = %d, %v; want 0", pending, err)
			}
			if _, err := v.Stat(ctx, "k"); !errors.Is(err, pipeline.ErrNotFound) {
				t.Errorf("Stat = %v, want ErrNotFound: the refused put stored nothing", err)
			}
		})
	}
}

package s3

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"edgepipe/pipeline"
	"edgepipe/storage/storagetest"
)

// These tests need no server; the store itself is tested against a real
// MinIO in s3_minio_test.go (go test -tags minio).

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := func() Config {
		c := Config{Endpoint: "http://127.0.0.1:9000", Bucket: "edgepipe", AccessKey: "a", SecretKey: "s"}
		c.setDefaults()
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"aws without endpoint or keys", func(c *Config) { c.Endpoint, c.AccessKey, c.SecretKey = "", "", "" }, ""},
		{"prefix", func(c *Config) { c.Prefix = "tenant/a/" }, ""},
		{"no bucket", func(c *Config) { c.Bucket = "" }, "EDGEPIPE_S3_BUCKET"},
		{"bad bucket", func(c *Config) { c.Bucket = "Upper_Case" }, "EDGEPIPE_S3_BUCKET"},
		{"short bucket", func(c *Config) { c.Bucket = "ab" }, "EDGEPIPE_S3_BUCKET"},
		{"endpoint scheme", func(c *Config) { c.Endpoint = "127.0.0.1:9000" }, "EDGEPIPE_S3_ENDPOINT"},
		{"endpoint path", func(c *Config) { c.Endpoint = "http://minio:9000/bucket" }, "EDGEPIPE_S3_ENDPOINT"},
		{"public endpoint", func(c *Config) { c.PresignEndpoint = "files.example.com" }, "EDGEPIPE_S3_PUBLIC_ENDPOINT"},
		{"half credentials", func(c *Config) { c.SecretKey = "" }, "EDGEPIPE_S3_SECRET_KEY"},
		{"prefix without slash", func(c *Config) { c.Prefix = "tenant" }, "EDGEPIPE_S3_PREFIX"},
		{"prefix traversal", func(c *Config) { c.Prefix = "../x/" }, "EDGEPIPE_S3_PREFIX"},
		{"part too small", func(c *Config) { c.PartSizeMiB = 4 }, "EDGEPIPE_S3_PART_SIZE_MIB"},
		{"part too big", func(c *Config) { c.PartSizeMiB = 513 }, "EDGEPIPE_S3_PART_SIZE_MIB"},
		{"concurrency", func(c *Config) { c.Concurrency = 33 }, "EDGEPIPE_S3_CONCURRENCY"},
		{"page size", func(c *Config) { c.ListPageSize = 1001 }, "page size"},
		{"abort timeout", func(c *Config) { c.AbortTimeout = -1 }, "abort timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, pipeline.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want ErrInvalidInput mentioning %q", err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Endpoint: "http://minio:9000", Bucket: "b"}
	c.setDefaults()
	if !*c.PathStyle || c.Region != "us-east-1" || c.PartSizeMiB != 6 || c.Concurrency != DefaultConcurrency {
		t.Errorf("defaults with an endpoint = %+v", c)
	}
	aws := Config{Bucket: "b"}
	aws.setDefaults()
	if *aws.PathStyle {
		t.Error("path style defaulted on for AWS")
	}
	off := false
	explicit := Config{Endpoint: "http://minio:9000", Bucket: "b", PathStyle: &off}
	explicit.setDefaults()
	if *explicit.PathStyle {
		t.Error("an explicit PathStyle=false was overridden")
	}
}

// TestPartSizeFromConcurrency: unset, the part size keeps a put's buffers
// (Concurrency+1 parts) within PartBudgetMiB, never under S3's 5 MiB.
func TestPartSizeFromConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ concurrency, part, want int }{
		{1, 0, 9}, {2, 0, 6}, {3, 0, 5}, {8, 0, 5}, {2, 16, 16},
	} {
		c := Config{Bucket: "b", Concurrency: tc.concurrency, PartSizeMiB: tc.part}
		c.setDefaults()
		if c.PartSizeMiB != tc.want {
			t.Errorf("concurrency %d, part size %d: got %d MiB, want %d", tc.concurrency, tc.part, c.PartSizeMiB, tc.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(context.Background(), Config{}); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("New(empty) = %v, want ErrInvalidInput", err)
	}
}

func TestKeyRule(t *testing.T) {
	t.Parallel()
	for _, k := range storagetest.InvalidKeys {
		if pipeline.ValidateObjectKey(k) == nil {
			t.Errorf("pipeline.ValidateObjectKey(%.40q) accepted", k)
		}
	}
	for _, k := range storagetest.ValidKeys {
		if err := pipeline.ValidateObjectKey(k); err != nil {
			t.Errorf("pipeline.ValidateObjectKey(%.40q) = %v", k, err)
		}
	}
	if err := pipeline.ValidateObjectKey(strings.Repeat("k/", 511) + "kk"); err != nil {
		t.Errorf("1024-byte key refused: %v", err)
	}
	s := &Store{prefix: "tenant/"}
	if err := s.checkKey(strings.Repeat("k/", 509) + "kk"); err != nil { // 1020 + 7 > 1024
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("checkKey = %v", err)
		}
	} else {
		t.Error("a key that is too long with the prefix was accepted")
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range append(storagetest.InvalidKeys, storagetest.ValidKeys...) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if pipeline.ValidateObjectKey(key) != nil {
			return
		}
		if len(key) > pipeline.MaxObjectKeyLen || strings.Contains(key, "//") || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
			t.Fatalf("accepted %q", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "." || seg == ".." || len(seg) > pipeline.MaxObjectSegmentLen {
				t.Fatalf("accepted %q (segment %q)", key, seg)
			}
		}
		if pipeline.ValidateObjectPrefix(key) != nil {
			t.Fatalf("valid key %q is not a valid prefix", key)
		}
	})
}

func TestHashingReader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	r := newHashingReader(ctx, strings.NewReader("123456789"))
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "123456789" || r.n != 9 {
		t.Fatalf("read %q, %v, n=%d", b, err, r.n)
	}
	sum, crc := r.sum(), r.crc.Sum64()
	if sum != "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225" {
		t.Errorf("sha256 at EOF = %s", sum)
	}
	// The CRC-64/NVME check value (the CRC of "123456789") from the
	// catalogue of parametrised CRC algorithms, as AWS S3 computes it.
	if crc != 0xae8b14860a799888 {
		t.Errorf("crc64nvme at EOF = %#x, want 0xae8b14860a799888", crc)
	}
	if got, want := crcHeader(crc), "rosUhgp5mIg="; got != want {
		t.Errorf("crcHeader = %s, want %s", got, want)
	}
	cancel()
	r2 := newHashingReader(ctx, strings.NewReader("abc"))
	if _, err := r2.Read(make([]byte, 8)); !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel = %v", err)
	}
}

func TestCRCHex(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header *string
		typ    types.ChecksumType
		want   string
	}{
		{aws.String("rosUhgp5mIg="), "", "ae8b14860a799888"},
		{aws.String("rosUhgp5mIg="), types.ChecksumTypeFullObject, "ae8b14860a799888"},
		{aws.String("rosUhgp5mIg="), types.ChecksumTypeComposite, ""},
		{nil, types.ChecksumTypeFullObject, ""},
		{aws.String("rosUhgp5mIg=-3"), "", ""},
		{aws.String("AAAA"), "", ""},
	}
	for _, tc := range tests {
		if got := crcHex(tc.header, tc.typ); got != tc.want {
			t.Errorf("crcHex(%v, %q) = %q, want %q", aws.ToString(tc.header), tc.typ, got, tc.want)
		}
	}
}

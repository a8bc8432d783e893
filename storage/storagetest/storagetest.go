// Package storagetest is the one conformance suite that every
// pipeline.ObjectStore driver (storage/fs, storage/s3) passes, so the
// pipeline can treat them as interchangeable. It also holds what the drivers'
// tests share: a deterministic stream of any length and a throwaway MinIO
// server.
//
// A driver test calls Run with a constructor that returns a fresh, empty
// store for each subtest. Given a Verifier, the suite also checks the
// backend through a path that bypasses the store under test (another S3
// client, the raw files), so a store cannot pass by agreeing with itself.
package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// Verifier inspects a store's backend without going through the store.
type Verifier interface {
	// Stat returns what the backend holds for key: size, content type, the
	// digests the store recorded (SHA-256, the backend's CRC64NVME), last
	// modified. A missing key is an error matching pipeline.ErrNotFound.
	Stat(ctx context.Context, key string) (pipeline.ObjectInfo, error)
	// Open reads the object's bytes.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// PendingUploads counts unfinished uploads: S3 multipart uploads, or a
	// directory store's temp files.
	PendingUploads(ctx context.Context) (int, error)
	// StartUpload leaves an unfinished upload of key behind, as a writer
	// that crashed mid-stream would.
	StartUpload(ctx context.Context, key string) error
}

// Option tunes Run.
type Option func(*suite)

// WithVerifier gives the suite an independent view of the backend of each
// store that newStore returns.
func WithVerifier(fn func(t *testing.T, store pipeline.ObjectStore) Verifier) Option {
	return func(s *suite) { s.newVerifier = fn }
}

// WithMultipartSize sets the size of the streams that must take a store's
// multipart path (default 12 MiB). It must exceed the driver's part size.
func WithMultipartSize(n int64) Option {
	return func(s *suite) { s.multipart = n }
}

// LargeSize is the length of the big streaming test, skipped with -short.
const LargeSize = 100 << 20

type suite struct {
	newStore    func(t *testing.T) pipeline.ObjectStore
	newVerifier func(t *testing.T, store pipeline.ObjectStore) Verifier
	multipart   int64
}

// Run runs the conformance suite. newStore must return a new, empty store
// on every call; subtests run in parallel.
//
// The suite never stores a key that is a "directory" of another key ("a"
// and "a/b"): S3 allows it but MinIO cannot hold both, so the pipeline must
// not rely on it.
func Run(t *testing.T, newStore func(t *testing.T) pipeline.ObjectStore, opts ...Option) {
	s := &suite{newStore: newStore, multipart: 12 << 20}
	for _, o := range opts {
		o(s)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, st pipeline.ObjectStore, v Verifier)
	}{
		{"PutHeadGet", s.testPutHeadGet},
		{"EmptyObject", s.testEmptyObject},
		{"DefaultContentType", s.testDefaultContentType},
		{"GetRange", s.testGetRange},
		{"Missing", s.testMissing},
		{"Delete", s.testDelete},
		{"PutWhileDeletingNeighbours", s.testPutWhileDeletingNeighbours},
		{"Overwrite", s.testOverwrite},
		{"CreateOnly", s.testCreateOnly},
		{"CreateOnlyMultipart", s.testCreateOnlyMultipart},
		{"CreateOnlyRace", s.testCreateOnlyRace},
		{"LargeStream", s.testLargeStream},
		{"ReaderError", s.testReaderError},
		{"ReaderErrorKeepsOldObject", s.testReaderErrorKeepsOld},
		{"ContextCanceled", s.testContextCanceled},
		{"InvalidKeys", s.testInvalidKeys},
		{"InvalidContentType", s.testInvalidContentType},
		{"ListPrefixes", s.testList},
		{"ListMany", s.testListMany},
		{"AbortStaleUploads", s.testAbortStale},
		{"Ping", s.testPing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := s.newStore(t)
			var v Verifier
			if s.newVerifier != nil {
				v = s.newVerifier(t, st)
			}
			tc.fn(t, st, v)
		})
	}
}

// InvalidKeys are keys every store must refuse with pipeline.ErrInvalidInput.
// The rule they probe: 1 to 1024 bytes of [A-Za-z0-9._/-], segments
// separated by single slashes, none empty, none "." or "..", none longer
// than 200 bytes (so that every key maps onto a file name).
var InvalidKeys = []string{
	"",
	"/abs",
	"a//b",
	"trailing/",
	".",
	"..",
	"a/../b",
	"../escape",
	"a/./b",
	`a\b`,
	"sp ace",
	"tab\tkey",
	"new\nline",
	"nul\x00",
	"q?x",
	"h#x",
	"pct%2F",
	"ünï",
	strings.Repeat("k", 201),        // a segment over 200 bytes
	strings.Repeat("k/", 512) + "k", // 1025 bytes
}

// ValidKeys are unusual keys every store must accept.
var ValidKeys = []string{
	"a",
	"A-Z_a.z-0.9",
	".hidden",
	"..dots",
	"dir/.hidden/x",
	"renders/0123456789abcdef.mp4",
	strings.Repeat("k", 200),
	// 1000 bytes: near the limit, with room for a driver's key prefix.
	strings.Repeat(strings.Repeat("k", 199)+"/", 4) + strings.Repeat("k", 200),
	strings.Repeat("d/", 60) + "x",
}

// opaque hides the concrete type (and so the length) of a reader, so stores
// take their streaming path even for small test payloads.
type opaque struct{ r io.Reader }

func (o opaque) Read(p []byte) (int, error) { return o.r.Read(p) }

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// crc64NVME is CRC-64/NVME, the CRC64NVME of the S3 checksum API.
var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

// CRC64NVME is the hex CRC-64/NVME of b, as pipeline.ObjectInfo.CRC64NVME
// holds it.
func CRC64NVME(b []byte) string { return hexCRC(crc64.Checksum(b, crc64NVME)) }

func hexCRC(c uint64) string { return fmt.Sprintf("%016x", c) }

// checkDigest is the rule for a stored object's digests: the store reports
// at least one of SHA256 and CRC64NVME, and each it reports is the one of
// the bytes. (S3 keeps a multipart object's SHA-256 in tags, which R2 does
// not implement; the CRC64NVME is kept everywhere.)
func checkDigest(t *testing.T, what string, got pipeline.ObjectInfo, sha, crc string) {
	t.Helper()
	for _, p := range digestProblems(got, sha, crc) {
		t.Errorf("%s: %s", what, p)
	}
}

func digestProblems(got pipeline.ObjectInfo, sha, crc string) []string {
	var out []string
	if got.SHA256 == "" && got.CRC64NVME == "" {
		out = append(out, fmt.Sprintf("no digest: SHA256 and CRC64NVME are empty, want %s or %s", sha, crc))
	}
	if got.SHA256 != "" && got.SHA256 != sha {
		out = append(out, fmt.Sprintf("SHA256 = %q, want %q", got.SHA256, sha))
	}
	if got.CRC64NVME != "" && got.CRC64NVME != crc {
		out = append(out, fmt.Sprintf("CRC64NVME = %q, want %q", got.CRC64NVME, crc))
	}
	return out
}

func put(t *testing.T, st pipeline.ObjectStore, key string, data []byte, opts pipeline.PutOptions) pipeline.ObjectInfo {
	t.Helper()
	info, err := st.Put(t.Context(), key, opaque{bytes.NewReader(data)}, opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if want := hexSHA(data); info.SHA256 != want {
		t.Errorf("Put(%q): SHA256 = %q, want %q (the digest of what was streamed)", key, info.SHA256, want)
	}
	return info
}

func get(t *testing.T, st pipeline.ObjectStore, key string, off, n int64) ([]byte, pipeline.ObjectInfo) {
	t.Helper()
	rc, info, err := st.Get(t.Context(), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): read: %v", key, off, n, err)
	}
	return b, info
}

func checkInfo(t *testing.T, what string, got pipeline.ObjectInfo, key string, data []byte, contentType string) {
	t.Helper()
	if got.Key != key {
		t.Errorf("%s: Key = %q, want %q", what, got.Key, key)
	}
	if got.Size != int64(len(data)) {
		t.Errorf("%s: Size = %d, want %d", what, got.Size, len(data))
	}
	checkDigest(t, what, got, hexSHA(data), CRC64NVME(data))
	if got.ContentType != contentType {
		t.Errorf("%s: ContentType = %q, want %q", what, got.ContentType, contentType)
	}
}

func checkRecent(t *testing.T, what string, ts time.Time) {
	t.Helper()
	if d := time.Since(ts); d > time.Hour || d < -time.Hour {
		t.Errorf("%s: LastModified = %v, not within an hour of now", what, ts)
	}
}

// checkGone asserts key is absent through the store and, if there is one,
// the verifier.
func checkGone(t *testing.T, st pipeline.ObjectStore, v Verifier, key string) {
	t.Helper()
	ctx := t.Context()
	if info, err := st.Head(ctx, key); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("Head(%q) = %+v, %v; want ErrNotFound", key, info, err)
	}
	if rc, _, err := st.Get(ctx, key, 0, -1); !errors.Is(err, pipeline.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Get(%q) err = %v; want ErrNotFound", key, err)
	}
	if v != nil {
		if info, err := v.Stat(ctx, key); !errors.Is(err, pipeline.ErrNotFound) {
			t.Errorf("verifier: Stat(%q) = %+v, %v; want ErrNotFound", key, info, err)
		}
	}
}

func checkNoPending(t *testing.T, v Verifier) {
	t.Helper()
	if v == nil {
		return
	}
	n, err := v.PendingUploads(t.Context())
	if err != nil {
		t.Fatalf("verifier: PendingUploads: %v", err)
	}
	if n != 0 {
		t.Errorf("verifier: %d unfinished uploads left behind, want 0", n)
	}
}

// verify checks key through the verifier: metadata and bytes.
func verify(t *testing.T, v Verifier, key string, size int64, sum, contentType string) {
	t.Helper()
	if v == nil {
		return
	}
	ctx := t.Context()
	info, err := v.Stat(ctx, key)
	if err != nil {
		t.Fatalf("verifier: Stat(%q): %v", key, err)
	}
	if info.Size != size || info.ContentType != contentType {
		t.Errorf("verifier: Stat(%q) = size %d type %q; want %d %q",
			key, info.Size, info.ContentType, size, contentType)
	}
	rc, err := v.Open(ctx, key)
	if err != nil {
		t.Fatalf("verifier: Open(%q): %v", key, err)
	}
	defer rc.Close()
	h, c := sha256.New(), crc64.New(crc64NVME)
	n, err := io.Copy(io.MultiWriter(h, c), rc)
	if err != nil {
		t.Fatalf("verifier: read %q: %v", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != size || got != sum {
		t.Errorf("verifier: bytes of %q: %d bytes sha %s; want %d bytes sha %s", key, n, got, size, sum)
	}
	// The recorded digests are the bytes' own, as another client sees them.
	checkDigest(t, "verifier: Stat("+key+")", info, sum, hexCRC(c.Sum64()))
}

func (s *suite) testPutHeadGet(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	data := []byte("hello, object store")
	const key, ct = "scenes/abc/image.png", "image/png"
	info := put(t, st, key, data, pipeline.PutOptions{ContentType: ct})
	checkInfo(t, "Put", info, key, data, ct)

	head, err := st.Head(t.Context(), key)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	checkInfo(t, "Head", head, key, data, ct)
	checkRecent(t, "Head", head.LastModified)

	got, ginfo := get(t, st, key, 0, -1)
	if !bytes.Equal(got, data) {
		t.Errorf("Get = %q, want %q", got, data)
	}
	checkInfo(t, "Get", ginfo, key, data, ct)
	verify(t, v, key, int64(len(data)), hexSHA(data), ct)

	for _, k := range ValidKeys {
		put(t, st, k, []byte(k), pipeline.PutOptions{})
		if b, _ := get(t, st, k, 0, -1); string(b) != k {
			t.Errorf("valid key %.40q: read back %.40q", k, b)
		}
	}
}

func (s *suite) testEmptyObject(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const key = "empty"
	info := put(t, st, key, nil, pipeline.PutOptions{ContentType: "text/plain"})
	checkInfo(t, "Put", info, key, nil, "text/plain")
	head, err := st.Head(t.Context(), key)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	checkInfo(t, "Head", head, key, nil, "text/plain")
	for _, r := range [][2]int64{{0, -1}, {0, 0}, {0, 5}} {
		if b, ginfo := get(t, st, key, r[0], r[1]); len(b) != 0 || ginfo.Size != 0 {
			t.Errorf("Get(%d, %d) = %q (size %d), want empty", r[0], r[1], b, ginfo.Size)
		}
	}
	verify(t, v, key, 0, hexSHA(nil), "text/plain")
}

func (s *suite) testDefaultContentType(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const key, want = "no-type", "application/octet-stream"
	info := put(t, st, key, []byte("x"), pipeline.PutOptions{})
	if info.ContentType != want {
		t.Errorf("Put ContentType = %q, want %q", info.ContentType, want)
	}
	head, err := st.Head(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if head.ContentType != want {
		t.Errorf("Head ContentType = %q, want %q", head.ContentType, want)
	}
	verify(t, v, key, 1, hexSHA([]byte("x")), want)
}

func (s *suite) testGetRange(t *testing.T, st pipeline.ObjectStore, _ Verifier) {
	data := []byte("0123456789")
	const key = "range/digits"
	put(t, st, key, data, pipeline.PutOptions{ContentType: "text/plain"})
	tests := []struct {
		off, n  int64
		want    string
		invalid bool
	}{
		{off: 0, n: -1, want: "0123456789"},
		{off: 0, n: 10, want: "0123456789"},
		{off: 2, n: 3, want: "234"},
		{off: 7, n: -1, want: "789"},
		{off: 7, n: 100, want: "789"},
		{off: 9, n: 1, want: "9"},
		{off: 10, n: -1, want: ""},
		{off: 3, n: 0, want: ""},
		{off: 11, n: -1, invalid: true},
		{off: 11, n: 2, invalid: true},
		{off: -1, n: -1, invalid: true},
	}
	for _, tc := range tests {
		rc, info, err := st.Get(t.Context(), key, tc.off, tc.n)
		if tc.invalid {
			if !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Errorf("Get(%d, %d) err = %v, want ErrInvalidInput", tc.off, tc.n, err)
			}
			if rc != nil {
				rc.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("Get(%d, %d): %v", tc.off, tc.n, err)
			continue
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != tc.want {
			t.Errorf("Get(%d, %d) = %q, %v; want %q", tc.off, tc.n, b, err, tc.want)
		}
		if info.Size != int64(len(data)) || info.ContentType != "text/plain" {
			t.Errorf("Get(%d, %d) info = %+v; want the whole object's size 10 and its type", tc.off, tc.n, info)
		}
	}
}

func (s *suite) testMissing(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	put(t, st, "present", []byte("x"), pipeline.PutOptions{})
	for _, k := range []string{"absent", "present/child", "presen"} {
		checkGone(t, st, v, k)
		if rc, _, err := st.Get(t.Context(), k, 0, 1); !errors.Is(err, pipeline.ErrNotFound) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("ranged Get(%q) err = %v, want ErrNotFound", k, err)
		}
	}
}

func (s *suite) testDelete(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	ctx := t.Context()
	put(t, st, "del/a/a", []byte("a"), pipeline.PutOptions{})
	put(t, st, "del/a/b", []byte("b"), pipeline.PutOptions{})
	if err := st.Delete(ctx, "del/a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	checkGone(t, st, v, "del/a/b")
	if b, _ := get(t, st, "del/a/a", 0, -1); string(b) != "a" {
		t.Errorf("sibling del/a/a = %q after deleting del/a/b", b)
	}
	if err := st.Delete(ctx, "del/a/a"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	checkGone(t, st, v, "del/a/a")
	if err := st.Delete(ctx, "del/a/b"); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
	if err := st.Delete(ctx, "never/was"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	// The key is reusable, also create-only.
	put(t, st, "del/a/b", []byte("again"), pipeline.PutOptions{CreateOnly: true})
	if b, _ := get(t, st, "del/a/b", 0, -1); string(b) != "again" {
		t.Errorf("re-put after delete = %q", b)
	}
}

// testPutWhileDeletingNeighbours puts and deletes objects that share key
// prefixes from several goroutines at once, as the workers of one machine
// do with the staging keys of one job: no put may fail because a
// neighbour's delete emptied a prefix the put was about to write under (a
// store with directories prunes them), and every object put is there until
// it is deleted.
func (s *suite) testPutWhileDeletingNeighbours(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const (
		workers = 4
		rounds  = 40
	)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("churn/shared/w%d/r%d/x", w, i)
				data := []byte(key)
				if _, err := st.Put(t.Context(), key, bytes.NewReader(data), pipeline.PutOptions{CreateOnly: i%2 == 0}); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					return
				}
				if got, err := st.Head(t.Context(), key); err != nil || got.Size != int64(len(data)) {
					errs <- fmt.Errorf("head %s after its put: %+v, %v", key, got, err)
					return
				}
				if err := st.Delete(t.Context(), key); err != nil {
					errs <- fmt.Errorf("delete %s: %w", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if left := listKeys(t, st, "churn/", 0); len(left) != 0 {
		t.Errorf("objects left after every put was deleted: %v", keysOf(left))
	}
	checkNoPending(t, v)
}

func (s *suite) testOverwrite(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const key = "over/write"
	put(t, st, key, []byte("first version"), pipeline.PutOptions{ContentType: "text/plain"})
	second := []byte("2nd")
	info := put(t, st, key, second, pipeline.PutOptions{ContentType: "application/json"})
	checkInfo(t, "Put", info, key, second, "application/json")
	head, err := st.Head(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Head", head, key, second, "application/json")
	if b, _ := get(t, st, key, 0, -1); !bytes.Equal(b, second) {
		t.Errorf("Get = %q, want %q", b, second)
	}
	verify(t, v, key, int64(len(second)), hexSHA(second), "application/json")
}

func checkAlreadyExists(t *testing.T, err error, key string) {
	t.Helper()
	if !errors.Is(err, pipeline.ErrAlreadyExists) {
		t.Fatalf("create-only Put on a taken key: err = %v, want ErrAlreadyExists", err)
	}
	var ae *pipeline.AlreadyExistsError
	if !errors.As(err, &ae) || ae.Key != key {
		t.Errorf("err = %#v, want *pipeline.AlreadyExistsError for %q", err, key)
	}
}

func (s *suite) testCreateOnly(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const key = "create/once"
	first := []byte("first")
	put(t, st, key, first, pipeline.PutOptions{ContentType: "text/plain", CreateOnly: true})
	_, err := st.Put(t.Context(), key, opaque{strings.NewReader("second")}, pipeline.PutOptions{ContentType: "text/html", CreateOnly: true})
	checkAlreadyExists(t, err, key)
	head, err := st.Head(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Head after refused put", head, key, first, "text/plain")
	if b, _ := get(t, st, key, 0, -1); !bytes.Equal(b, first) {
		t.Errorf("content after refused put = %q, want %q", b, first)
	}
	verify(t, v, key, int64(len(first)), hexSHA(first), "text/plain")
	checkNoPending(t, v)
}

// testCreateOnlyMultipart: the refusal must also hold when the second put
// is large enough to be a multipart upload, where S3 only checks the
// precondition when the upload completes.
func (s *suite) testCreateOnlyMultipart(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	ctx := t.Context()
	const key = "create/multipart"
	info, err := st.Put(ctx, key, Stream(1, s.multipart), pipeline.PutOptions{ContentType: "video/mp4", CreateOnly: true})
	if err != nil {
		t.Fatalf("first create-only multipart Put: %v", err)
	}
	wantSum := StreamSHA256(1, s.multipart)
	if info.Size != s.multipart || info.SHA256 != wantSum {
		t.Errorf("Put info = %+v, want size %d sha %s", info, s.multipart, wantSum)
	}
	_, err = st.Put(ctx, key, Stream(2, s.multipart), pipeline.PutOptions{ContentType: "video/mp4", CreateOnly: true})
	checkAlreadyExists(t, err, key)
	head, err := st.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != s.multipart {
		t.Errorf("Head after refused put = %+v, want the first object", head)
	}
	checkDigest(t, "Head after refused put", head, wantSum, StreamCRC64NVME(1, s.multipart))
	verify(t, v, key, s.multipart, wantSum, "video/mp4")
	checkNoPending(t, v)

	// Small refused on large and large refused on small.
	_, err = st.Put(ctx, key, opaque{strings.NewReader("tiny")}, pipeline.PutOptions{CreateOnly: true})
	checkAlreadyExists(t, err, key)
	put(t, st, "create/small", []byte("small"), pipeline.PutOptions{})
	_, err = st.Put(ctx, "create/small", Stream(3, s.multipart), pipeline.PutOptions{CreateOnly: true})
	checkAlreadyExists(t, err, "create/small")
	if b, _ := get(t, st, "create/small", 0, -1); string(b) != "small" {
		t.Errorf("create/small = %q after refused multipart put", b)
	}
	checkNoPending(t, v)
}

func (s *suite) testCreateOnlyRace(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	for _, size := range []int64{64 << 10, s.multipart} {
		key := fmt.Sprintf("race/%d", size)
		const writers = 3
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []uint64
			errs    []error
		)
		for w := range writers {
			seed := uint64(100 + w)
			wg.Go(func() {
				_, err := st.Put(t.Context(), key, Stream(seed, size), pipeline.PutOptions{CreateOnly: true})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					winners = append(winners, seed)
				} else {
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("size %d: %d create-only puts succeeded, want exactly 1 (errors: %v)", size, len(winners), errs)
		}
		for _, err := range errs {
			checkAlreadyExists(t, err, key)
		}
		want := StreamSHA256(winners[0], size)
		head, err := st.Head(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if head.Size != size {
			t.Errorf("size %d: Head = %+v, want the winner's", size, head)
		}
		checkDigest(t, fmt.Sprintf("size %d: Head", size), head, want, StreamCRC64NVME(winners[0], size))
		verify(t, v, key, size, want, "application/octet-stream")
	}
	checkNoPending(t, v)
}

func (s *suite) testLargeStream(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	if testing.Short() {
		t.Skip("skipping the 100 MiB stream in -short mode")
	}
	ctx := t.Context()
	const key, seed = "large/stream.mp4", 42
	want := StreamSHA256(seed, LargeSize)
	info, err := st.Put(ctx, key, Stream(seed, LargeSize), pipeline.PutOptions{ContentType: "video/mp4"})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if info.Size != LargeSize || info.SHA256 != want {
		t.Errorf("Put info = size %d sha %s; want %d %s", info.Size, info.SHA256, LargeSize, want)
	}
	head, err := st.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wantCRC := StreamCRC64NVME(seed, LargeSize)
	if head.Size != LargeSize || head.ContentType != "video/mp4" {
		t.Errorf("Head = %+v; want size %d", head, LargeSize)
	}
	checkDigest(t, "Head", head, want, wantCRC)

	rc, ginfo, err := st.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if ginfo.Size != LargeSize || ginfo.ContentType != "video/mp4" {
		t.Errorf("Get info = %+v; want size %d", ginfo, LargeSize)
	}
	checkDigest(t, "Get", ginfo, want, wantCRC)
	h := sha256.New()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil || n != LargeSize || hex.EncodeToString(h.Sum(nil)) != want {
		t.Errorf("Get read %d bytes (err %v), sha %x; want %d bytes sha %s", n, err, h.Sum(nil), LargeSize, want)
	}

	// A range that straddles any plausible part boundary (5, 8, 16 MiB...).
	const off, length = 48<<20 - 3, 1 << 20
	gen := Stream(seed, LargeSize)
	if _, err := io.CopyN(io.Discard, gen, off); err != nil {
		t.Fatal(err)
	}
	wantRange := make([]byte, length)
	if _, err := io.ReadFull(gen, wantRange); err != nil {
		t.Fatal(err)
	}
	if got, _ := get(t, st, key, off, length); !bytes.Equal(got, wantRange) {
		t.Errorf("range [%d, +%d) differs from the stream", off, length)
	}
	verify(t, v, key, LargeSize, want, "video/mp4")
	checkNoPending(t, v)
}

// failingReader yields r's bytes until after of them were read, then err.
type failingReader struct {
	r     io.Reader
	after int64
	err   error
	read  int64
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.read >= f.after {
		return 0, f.err
	}
	if int64(len(p)) > f.after-f.read {
		p = p[:f.after-f.read]
	}
	n, err := f.r.Read(p)
	f.read += int64(n)
	return n, err
}

var errBoom = errors.New("storagetest: the source failed")

func (s *suite) testReaderError(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	for _, after := range []int64{0, 1 << 10, s.multipart + 1<<20} {
		key := fmt.Sprintf("fail/after-%d", after)
		src := &failingReader{r: Stream(7, 4*s.multipart), after: after, err: errBoom}
		_, err := st.Put(t.Context(), key, src, pipeline.PutOptions{})
		if !errors.Is(err, errBoom) {
			t.Errorf("Put failing after %d bytes: err = %v, want the reader's error", after, err)
		}
		checkGone(t, st, v, key)
		// Create-only too: the failed put must not have claimed the key.
		put(t, st, key, []byte("retry"), pipeline.PutOptions{CreateOnly: true})
	}
	checkNoPending(t, v)
}

func (s *suite) testReaderErrorKeepsOld(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	const key = "fail/keeps-old"
	old := []byte("the old object")
	put(t, st, key, old, pipeline.PutOptions{ContentType: "text/plain"})
	for _, after := range []int64{1 << 10, s.multipart + 1<<20} {
		src := &failingReader{r: Stream(8, 4*s.multipart), after: after, err: errBoom}
		if _, err := st.Put(t.Context(), key, src, pipeline.PutOptions{}); !errors.Is(err, errBoom) {
			t.Errorf("overwrite failing after %d bytes: err = %v, want the reader's error", after, err)
		}
		if b, _ := get(t, st, key, 0, -1); !bytes.Equal(b, old) {
			t.Errorf("after a failed overwrite the object is %d bytes, want the old %q", len(b), old)
		}
	}
	verify(t, v, key, int64(len(old)), hexSHA(old), "text/plain")
	checkNoPending(t, v)
}

// cancelingReader cancels the put's context once after bytes were read and
// then keeps producing data, so a store that ignores its context would
// finish the upload and be caught.
type cancelingReader struct {
	r      io.Reader
	after  int64
	cancel context.CancelFunc
	read   int64
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	if c.read >= c.after {
		c.cancel()
	}
	n, err := c.r.Read(p)
	c.read += int64(n)
	return n, err
}

func (s *suite) testContextCanceled(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := st.Put(ctx, "cancel/before", opaque{strings.NewReader("x")}, pipeline.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context: err = %v, want context.Canceled", err)
	}
	checkGone(t, st, v, "cancel/before")

	for _, after := range []int64{1 << 10, s.multipart + 1<<20} {
		key := fmt.Sprintf("cancel/after-%d", after)
		ctx, cancel := context.WithCancel(t.Context())
		src := &cancelingReader{r: Stream(9, 3*s.multipart), after: after, cancel: cancel}
		_, err := st.Put(ctx, key, src, pipeline.PutOptions{CreateOnly: true})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Put canceled after %d bytes: err = %v, want context.Canceled", after, err)
		}
		checkGone(t, st, v, key)
	}
	checkNoPending(t, v)
}

func (s *suite) testInvalidKeys(t *testing.T, st pipeline.ObjectStore, _ Verifier) {
	ctx := t.Context()
	for _, key := range InvalidKeys {
		if _, err := st.Put(ctx, key, strings.NewReader("x"), pipeline.PutOptions{}); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Put(%.40q) err = %v, want ErrInvalidInput", key, err)
		}
		if _, err := st.Head(ctx, key); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Head(%.40q) err = %v, want ErrInvalidInput", key, err)
		}
		if rc, _, err := st.Get(ctx, key, 0, -1); !errors.Is(err, pipeline.ErrInvalidInput) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("Get(%.40q) err = %v, want ErrInvalidInput", key, err)
		}
		if err := st.Delete(ctx, key); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Delete(%.40q) err = %v, want ErrInvalidInput", key, err)
		}
	}
	for _, prefix := range []string{"/abs", "../up", "a/../b", "a//", "sp ace", `a\`, "ü"} {
		err := st.List(ctx, prefix, func(pipeline.ObjectInfo) bool { return true })
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("List(%q) err = %v, want ErrInvalidInput", prefix, err)
		}
	}
	// Nothing was written by the refused calls.
	n := 0
	if err := st.List(ctx, "", func(pipeline.ObjectInfo) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d objects exist after only invalid puts", n)
	}
}

func (s *suite) testInvalidContentType(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	for _, ct := range []string{"text/plain\r\nX-Evil: 1", "a\x00b", "ünï/code", strings.Repeat("t", 256)} {
		_, err := st.Put(t.Context(), "ct/bad", strings.NewReader("x"), pipeline.PutOptions{ContentType: ct})
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("Put with content type %.30q: err = %v, want ErrInvalidInput", ct, err)
		}
	}
	checkGone(t, st, v, "ct/bad")
	const long = "application/vnd.edgepipe.something+json; charset=utf-8"
	put(t, st, "ct/ok", []byte("{}"), pipeline.PutOptions{ContentType: long})
	if head, err := st.Head(t.Context(), "ct/ok"); err != nil || head.ContentType != long {
		t.Errorf("Head = %+v, %v; want content type %q", head, err, long)
	}
}

func listKeys(t *testing.T, st pipeline.ObjectStore, prefix string, stopAfter int) []pipeline.ObjectInfo {
	t.Helper()
	var got []pipeline.ObjectInfo
	err := st.List(t.Context(), prefix, func(info pipeline.ObjectInfo) bool {
		got = append(got, info)
		return stopAfter <= 0 || len(got) < stopAfter
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func keysOf(infos []pipeline.ObjectInfo) []string {
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}

func (s *suite) testList(t *testing.T, st pipeline.ObjectStore, _ Verifier) {
	// Put in a scrambled order; byte order is '-' < '.' < '/' < '0' < 'b'.
	// No key is a "directory" of another ("a" and "a/b"): MinIO cannot
	// store both, so the pipeline never relies on it.
	all := []string{
		"list/ab", "list/a/c/d", "lista", "list/a0", "list/b", "list/a.b",
		"list/a-b", "list/a/b", "other/x", "list/a/bc",
	}
	content := map[string][]byte{}
	for i, k := range all {
		content[k] = bytes.Repeat([]byte{'x'}, i+1)
		put(t, st, k, content[k], pipeline.PutOptions{ContentType: "text/plain"})
	}
	sorted := slices.Sorted(slices.Values(all))
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", sorted},
		{"list/", []string{"list/a-b", "list/a.b", "list/a/b", "list/a/bc", "list/a/c/d", "list/a0", "list/ab", "list/b"}},
		{"list/a", []string{"list/a-b", "list/a.b", "list/a/b", "list/a/bc", "list/a/c/d", "list/a0", "list/ab"}},
		{"list/a/", []string{"list/a/b", "list/a/bc", "list/a/c/d"}},
		{"list/a/b", []string{"list/a/b", "list/a/bc"}},
		{"list/a/c", []string{"list/a/c/d"}},
		{"list/a/c/", []string{"list/a/c/d"}},
		{"list/a/c/d", []string{"list/a/c/d"}},
		{"lis", []string{"list/a-b", "list/a.b", "list/a/b", "list/a/bc", "list/a/c/d", "list/a0", "list/ab", "list/b", "lista"}},
		{"list/zz", nil},
		{"nothing/", nil},
		{"list/a/b/", nil},
		{"list/a/c/d/", nil},
	}
	for _, tc := range tests {
		got := listKeys(t, st, tc.prefix, 0)
		if !slices.Equal(keysOf(got), tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, keysOf(got), tc.want)
		}
		for _, info := range got {
			data := content[info.Key]
			if info.Size != int64(len(data)) {
				t.Errorf("List(%q): %s size %d, want %d", tc.prefix, info.Key, info.Size, len(data))
			}
			if info.SHA256 != "" && info.SHA256 != hexSHA(data) {
				t.Errorf("List(%q): %s sha %s, want %s (or empty)", tc.prefix, info.Key, info.SHA256, hexSHA(data))
			}
			if info.ContentType != "" && info.ContentType != "text/plain" {
				t.Errorf("List(%q): %s content type %q", tc.prefix, info.Key, info.ContentType)
			}
			checkRecent(t, "List "+info.Key, info.LastModified)
		}
	}
	if got := keysOf(listKeys(t, st, "list/", 2)); !slices.Equal(got, []string{"list/a-b", "list/a.b"}) {
		t.Errorf("List stopping after 2 = %q", got)
	}
}

func (s *suite) testListMany(t *testing.T, st pipeline.ObjectStore, _ Verifier) {
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("many/%03d", i)
		want = append(want, k)
		put(t, st, k, []byte(k), pipeline.PutOptions{})
	}
	if got := keysOf(listKeys(t, st, "many/", 0)); !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	if got := keysOf(listKeys(t, st, "many/", 17)); !slices.Equal(got, want[:17]) {
		t.Errorf("List stopping after 17 = %q", got)
	}
}

func (s *suite) testAbortStale(t *testing.T, st pipeline.ObjectStore, v Verifier) {
	ctx := t.Context()
	put(t, st, "keep/me", []byte("done"), pipeline.PutOptions{})
	// Finished objects are never an unfinished upload.
	n, err := st.AbortStaleUploads(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 0 {
		t.Errorf("AbortStaleUploads with nothing pending = %d, %v; want 0, nil", n, err)
	}
	if _, err := st.Head(ctx, "keep/me"); err != nil {
		t.Errorf("finished object gone after AbortStaleUploads: %v", err)
	}
	if v == nil {
		t.Skip("no Verifier: cannot leave an unfinished upload behind to abort")
	}
	if err := v.StartUpload(ctx, "stale/upload"); err != nil {
		t.Fatalf("verifier: StartUpload: %v", err)
	}
	if p, err := v.PendingUploads(ctx); err != nil || p != 1 {
		t.Fatalf("verifier: PendingUploads = %d, %v; want 1", p, err)
	}
	// Started just now: not older than an hour ago, so left alone.
	if n, err := st.AbortStaleUploads(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("AbortStaleUploads(an hour ago) = %d, %v; want 0, nil", n, err)
	}
	if p, _ := v.PendingUploads(ctx); p != 1 {
		t.Errorf("a fresh upload was aborted: %d pending, want 1", p)
	}
	n, err = st.AbortStaleUploads(ctx, time.Now().Add(time.Minute))
	if err != nil || n != 1 {
		t.Errorf("AbortStaleUploads(in a minute) = %d, %v; want 1, nil", n, err)
	}
	checkNoPending(t, v)
	checkGone(t, st, v, "stale/upload")
	if _, err := st.Head(ctx, "keep/me"); err != nil {
		t.Errorf("finished object gone after AbortStaleUploads: %v", err)
	}
}

func (s *suite) testPing(t *testing.T, st pipeline.ObjectStore, _ Verifier) {
	if err := st.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

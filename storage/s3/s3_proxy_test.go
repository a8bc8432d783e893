package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/crc64nvme"

	"edgepipe/pipeline"
	"edgepipe/storage/storagetest"
)

// The R2 gap. Cloudflare R2 speaks S3 with differences the driver must
// survive; these tests put a proxy in front of an S3 server (a fake here,
// MinIO in s3_minio_test.go) that answers the way R2 does:
//
//   - Object tagging is not implemented: 501 NotImplemented (R2 docs, "S3
//     API compatibility": PutObjectTagging/GetObjectTagging are among the
//     unimplemented object-level operations). The digest must not depend on
//     tags: the same page lists CRC64NVME as the one checksum R2 keeps as a
//     FULL_OBJECT checksum (SHA-256 only as COMPOSITE), which is what the
//     driver writes and Head reads (HeadObject with x-amz-checksum-mode:
//     ENABLED; aws-sdk-go-v2 s3.HeadObjectInput.ChecksumMode).
//   - Conditional writes (R2 docs, "Conditional operations"): If-None-Match
//     is honoured on PutObject, CreateMultipartUpload and
//     CompleteMultipartUpload, so a create-only multipart put sends it on
//     CreateMultipartUpload too and a losing writer fails before it streams.
//   - A conditional write that races another one on the key is answered
//     409 ConditionalRequestConflict (the same on AWS S3: "If a conflicting
//     operation occurs during the upload S3 returns a 409
//     ConditionalRequestConflict", API reference of PutObject and
//     CompleteMultipartUpload, IfNoneMatch); the driver reports it like 412
//     PreconditionFailed: the key is taken.

// s3Op names the S3 operation of a request the way the API reference does.
func s3Op(r *http.Request) string {
	q := r.URL.Query()
	if !strings.Contains(strings.Trim(r.URL.Path, "/"), "/") {
		return r.Method + "Bucket" // path style: /bucket, no key
	}
	switch {
	case q.Has("tagging"):
		return map[string]string{http.MethodPut: "Put", http.MethodGet: "Get", http.MethodDelete: "Delete"}[r.Method] + "ObjectTagging"
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPut && q.Has("partNumber"):
		return "UploadPart"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "AbortMultipartUpload"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodDelete:
		return "DeleteObject"
	}
	return r.Method
}

// seenReq is what the proxy recorded of one request.
type seenReq struct {
	op           string
	ifNoneMatch  string
	ifMatch      string
	checksumType string // x-amz-checksum-type
}

// s3Proxy records every request and lets answer take over any of them;
// the others go to next.
type s3Proxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenReq
}

func newS3Proxy(t *testing.T, next http.Handler, answer func(w http.ResponseWriter, r *http.Request, op string) bool) *s3Proxy {
	t.Helper()
	p := &s3Proxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := s3Op(r)
		p.mu.Lock()
		p.seen = append(p.seen, seenReq{op: op, ifNoneMatch: r.Header.Get("If-None-Match"), ifMatch: r.Header.Get("If-Match"), checksumType: r.Header.Get("X-Amz-Checksum-Type")})
		p.mu.Unlock()
		if answer != nil && answer(w, r, op) {
			return
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// ops returns the requests seen of operation op.
func (p *s3Proxy) ops(op string) []seenReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seenReq
	for _, s := range p.seen {
		if s.op == op {
			out = append(out, s)
		}
	}
	return out
}

// reverseProxy forwards to an S3 server, keeping the Host header the
// client signed.
func reverseProxy(t *testing.T, endpoint string) http.Handler {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}
}

// s3Error answers an S3 error the way R2 (and S3) shape it.
func s3Error(w http.ResponseWriter, r *http.Request, status int, code string) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>answered by the test proxy</Message></Error>`, code)
}

// r2NoTagging answers object tagging as R2 does.
func r2NoTagging(w http.ResponseWriter, r *http.Request, op string) bool {
	if op != "PutObjectTagging" && op != "GetObjectTagging" && op != "DeleteObjectTagging" {
		return false
	}
	s3Error(w, r, http.StatusNotImplemented, "NotImplemented")
	return true
}

// fakeS3 is the least of an S3 server a put needs: uploads always succeed,
// objects are never found, and the checksum the client sends is echoed as
// the stored one unless storedCRC overrides it.
type fakeS3 struct {
	storedCRC string
	// untypedComposite answers a completion with a composite checksum
	// ("...-3") and no ChecksumType, as a server without FULL_OBJECT
	// support may.
	untypedComposite bool
}

func (f fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := crc64nvme.New()
	_, _ = io.Copy(h, r.Body)
	crc := r.Header.Get("X-Amz-Checksum-Crc64nvme")
	// Like a real server, refuse a body whose bytes are not the checksum
	// sent with them (a part buffer reused while its request still reads it).
	if op := s3Op(r); (op == "UploadPart" || op == "PutObject") && crc != "" && crc != crcHeader(h.Sum64()) {
		s3Error(w, r, http.StatusBadRequest, "BadDigest")
		return
	}
	if f.storedCRC != "" && crc != "" {
		crc = f.storedCRC
	}
	switch op := s3Op(r); op {
	case "HeadObject", "GetObject":
		w.WriteHeader(http.StatusNotFound)
	case "CreateMultipartUpload":
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`)
	case "UploadPart":
		w.Header().Set("ETag", `"`+r.URL.Query().Get("partNumber")+`"`)
		w.Header().Set("X-Amz-Checksum-Crc64nvme", r.Header.Get("X-Amz-Checksum-Crc64nvme"))
	case "CompleteMultipartUpload":
		if f.untypedComposite {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>"e-3"</ETag><ChecksumCRC64NVME>%s-3</ChecksumCRC64NVME></CompleteMultipartUploadResult>`, crc)
			return
		}
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>"e-3"</ETag><ChecksumCRC64NVME>%s</ChecksumCRC64NVME><ChecksumType>FULL_OBJECT</ChecksumType></CompleteMultipartUploadResult>`, crc)
	case "PutObject":
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("X-Amz-Checksum-Crc64nvme", crc)
		w.Header().Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	case "AbortMultipartUpload", "DeleteObject":
		w.WriteHeader(http.StatusNoContent)
	case "PutObjectTagging":
	default:
		http.Error(w, "fake S3: unexpected "+op, http.StatusBadRequest)
	}
}

// recordingHandler keeps the log records at or above Debug.
type recordingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) atLeast(l slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= l {
			out = append(out, r.Message)
		}
	}
	return out
}

func proxiedStore(t *testing.T, endpoint string, log *slog.Logger) *Store {
	t.Helper()
	s, err := New(t.Context(), Config{
		Endpoint: endpoint, Bucket: "edgepipe-fake", AccessKey: "a", SecretKey: "s",
		PartSizeMiB: 5, Concurrency: 2, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	smallSize     = 1 << 10
	multipartSize = 11 << 20 // three 5 MiB parts
)

// TestCreateOnlyRefusals: whichever request of a create-only put the server
// refuses, with 412 or with R2's and S3's 409 ConditionalRequestConflict,
// the put reports the key as taken, aborts its upload, and a refusal at
// CreateMultipartUpload stops it before a single part is sent.
func TestCreateOnlyRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		size      int64
		refuse    string // the operation the server refuses
		status    int
		code      string
		taken     bool // the put must report ErrAlreadyExists
		wantParts int  // UploadPart requests sent
		wantAbort bool
	}{
		{"PutObject 412", smallSize, "PutObject", 412, "PreconditionFailed", true, 0, false},
		{"PutObject 409", smallSize, "PutObject", 409, "ConditionalRequestConflict", true, 0, false},
		{"Complete 412", multipartSize, "CompleteMultipartUpload", 412, "PreconditionFailed", true, 3, true},
		{"Complete 409", multipartSize, "CompleteMultipartUpload", 409, "ConditionalRequestConflict", true, 3, true},
		{"Create 412", multipartSize, "CreateMultipartUpload", 412, "PreconditionFailed", true, 0, false},
		{"Create 409", multipartSize, "CreateMultipartUpload", 409, "ConditionalRequestConflict", true, 0, false},
		// Another 409 is not about the key.
		{"Complete 409 OperationAborted", multipartSize, "CompleteMultipartUpload", 409, "OperationAborted", false, 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, func(w http.ResponseWriter, r *http.Request, op string) bool {
				if op != tc.refuse {
					return false
				}
				s3Error(w, r, tc.status, tc.code)
				return true
			})
			s := proxiedStore(t, p.URL, nil)
			_, err := s.Put(t.Context(), "renders/r.mp4", storagetest.Stream(1, tc.size), pipeline.PutOptions{CreateOnly: true})
			if tc.taken {
				var ae *pipeline.AlreadyExistsError
				if !errors.As(err, &ae) || ae.Key != "renders/r.mp4" || !errors.Is(err, pipeline.ErrAlreadyExists) {
					t.Fatalf("Put = %v, want *AlreadyExistsError for the key", err)
				}
			} else if err == nil || errors.Is(err, pipeline.ErrAlreadyExists) {
				t.Fatalf("Put = %v, want a failure that is not ErrAlreadyExists", err)
			}
			if got := len(p.ops("UploadPart")); got != tc.wantParts {
				t.Errorf("%d UploadPart requests, want %d", got, tc.wantParts)
			}
			if got := len(p.ops("AbortMultipartUpload")) > 0; got != tc.wantAbort {
				t.Errorf("aborted = %v, want %v", got, tc.wantAbort)
			}
			if n := len(p.ops("PutObjectTagging")); n != 0 {
				t.Errorf("%d tagging requests for a refused put", n)
			}
		})
	}
}

// TestIfNoneMatchOnCreate: a create-only multipart put asks the server to
// refuse a taken key when the upload is created and again when it
// completes; a plain put asks neither, and parts never carry it.
func TestIfNoneMatchOnCreate(t *testing.T) {
	t.Parallel()
	for _, createOnly := range []bool{true, false} {
		t.Run(fmt.Sprint("CreateOnly=", createOnly), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, nil)
			s := proxiedStore(t, p.URL, nil)
			if _, err := s.Put(t.Context(), "k", storagetest.Stream(2, multipartSize), pipeline.PutOptions{CreateOnly: createOnly}); err != nil {
				t.Fatal(err)
			}
			want := ""
			if createOnly {
				want = "*"
			}
			for _, op := range []string{"CreateMultipartUpload", "CompleteMultipartUpload"} {
				reqs := p.ops(op)
				if len(reqs) != 1 || reqs[0].ifNoneMatch != want {
					t.Errorf("%s: %+v, want one with If-None-Match %q", op, reqs, want)
				}
			}
			// The upload asks for a full-object checksum, the only kind
			// every server keeps for a multipart object (and the only one
			// Head reports as the object's digest).
			if create := p.ops("CreateMultipartUpload"); len(create) != 1 || create[0].checksumType != "FULL_OBJECT" {
				t.Errorf("CreateMultipartUpload: %+v, want x-amz-checksum-type FULL_OBJECT", create)
			}
			parts := p.ops("UploadPart")
			if len(parts) != 3 {
				t.Errorf("%d parts, want 3", len(parts))
			}
			for _, r := range parts {
				if r.ifNoneMatch != "" {
					t.Errorf("UploadPart with If-None-Match %q", r.ifNoneMatch)
				}
			}
		})
	}
}

// TestStoredChecksumMismatch: a server that stores other bytes than the
// ones sent (here: one that ignores the checksum it was sent and reports
// another) fails the put, and the object is deleted.
func TestStoredChecksumMismatch(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{smallSize, multipartSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{storedCRC: crcHeader(1)}, nil)
			s := proxiedStore(t, p.URL, nil)
			_, err := s.Put(t.Context(), "k", storagetest.Stream(3, size), pipeline.PutOptions{})
			if err == nil || !strings.Contains(err.Error(), "CRC64NVME") {
				t.Fatalf("Put = %v, want a checksum mismatch", err)
			}
			dels := p.ops("DeleteObject")
			if len(dels) != 1 {
				t.Fatalf("%d DeleteObject requests, want 1", len(dels))
			}
			// Only the object this put stored: the ETag it got back.
			want := map[int64]string{smallSize: `"e"`, multipartSize: `"e-3"`}[size]
			if dels[0].ifMatch != want {
				t.Errorf("DeleteObject If-Match %q, want %q", dels[0].ifMatch, want)
			}
		})
	}
	t.Run("conditional delete not implemented", func(t *testing.T) {
		t.Parallel()
		p := newS3Proxy(t, fakeS3{storedCRC: crcHeader(1)}, func(w http.ResponseWriter, r *http.Request, op string) bool {
			if op != "DeleteObject" || r.Header.Get("If-Match") == "" {
				return false
			}
			s3Error(w, r, http.StatusNotImplemented, "NotImplemented")
			return true
		})
		s := proxiedStore(t, p.URL, nil)
		if _, err := s.Put(t.Context(), "k", storagetest.Stream(3, smallSize), pipeline.PutOptions{}); err == nil {
			t.Fatal("Put succeeded with a stored checksum mismatch")
		}
		dels := p.ops("DeleteObject")
		if len(dels) != 2 || dels[0].ifMatch == "" || dels[1].ifMatch != "" {
			t.Fatalf("DeleteObject requests %+v, want a conditional one, then a plain one", dels)
		}
	})
}

// TestConflictOnPlainPut: a put that asked no condition and is answered
// 409 ConditionalRequestConflict (a concurrent operation on the key) fails
// as a plain error, not as a taken key: nothing was refused for existing.
func TestConflictOnPlainPut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size int64
		op   string
	}{{smallSize, "PutObject"}, {multipartSize, "CompleteMultipartUpload"}} {
		t.Run(tc.op, func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, func(w http.ResponseWriter, r *http.Request, op string) bool {
				if op != tc.op {
					return false
				}
				s3Error(w, r, http.StatusConflict, "ConditionalRequestConflict")
				return true
			})
			s := proxiedStore(t, p.URL, nil)
			_, err := s.Put(t.Context(), "k", storagetest.Stream(4, tc.size), pipeline.PutOptions{})
			if err == nil || errors.Is(err, pipeline.ErrAlreadyExists) {
				t.Fatalf("Put = %v, want a failure that is not ErrAlreadyExists", err)
			}
		})
	}
}

// TestUntypedCompositeChecksumIsNotAMismatch: a completion that reports a
// composite checksum ("...-N") without saying its type is not a full-object
// checksum to compare: the put succeeds, reports no CRC64NVME, and the
// object it stored is not deleted.
func TestUntypedCompositeChecksumIsNotAMismatch(t *testing.T) {
	t.Parallel()
	p := newS3Proxy(t, fakeS3{untypedComposite: true}, nil)
	s := proxiedStore(t, p.URL, nil)
	info, err := s.Put(t.Context(), "k", storagetest.Stream(5, multipartSize), pipeline.PutOptions{})
	if err != nil {
		t.Fatalf("Put = %v, want success", err)
	}
	if info.CRC64NVME != "" {
		t.Errorf("Put CRC64NVME = %q, want none (the server reported a composite checksum)", info.CRC64NVME)
	}
	if n := len(p.ops("DeleteObject")); n != 0 {
		t.Errorf("%d DeleteObject requests, want none", n)
	}
}

// TestTaggingNotImplemented: on a server without tagging (R2) a multipart
// put succeeds, reports the CRC64NVME the server confirmed, and says so
// quietly: the object has its server-side digest.
func TestTaggingNotImplemented(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{smallSize, multipartSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, r2NoTagging)
			logs := &recordingHandler{}
			s := proxiedStore(t, p.URL, slog.New(logs))
			info, err := s.Put(t.Context(), "k", storagetest.Stream(4, size), pipeline.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := storagetest.StreamCRC64NVME(4, size); info.CRC64NVME != want {
				t.Errorf("Put CRC64NVME = %q, want %q", info.CRC64NVME, want)
			}
			if want := storagetest.StreamSHA256(4, size); info.SHA256 != want {
				t.Errorf("Put SHA256 = %q, want %q", info.SHA256, want)
			}
			tagged := len(p.ops("PutObjectTagging"))
			if size == multipartSize && tagged != 1 || size == smallSize && tagged != 0 {
				t.Errorf("%d tagging requests for a %d-byte put", tagged, size)
			}
			if warns := logs.atLeast(slog.LevelWarn); len(warns) != 0 {
				t.Errorf("warnings: %q", warns)
			}
		})
	}
}

// TestPutBoundsItsParts: a put of unknown length keeps at most Concurrency
// parts in flight and holds at most Concurrency+1 part buffers, and the
// next put reuses them instead of mapping more.
func TestPutBoundsItsParts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, maxInFlight := 0, 0
	p := newS3Proxy(t, fakeS3{}, func(w http.ResponseWriter, r *http.Request, op string) bool {
		if op != "UploadPart" {
			return false
		}
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // long enough for the reader to run ahead if it could
		fakeS3{}.ServeHTTP(w, r)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return true
	})
	s := proxiedStore(t, p.URL, nil)
	const size = 31 << 20 // seven 5 MiB parts, the last one short
	for i := range 2 {
		if _, err := s.Put(t.Context(), fmt.Sprint("k", i), storagetest.Stream(5, size), pipeline.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(p.ops("UploadPart")); got != 14 {
		t.Errorf("%d UploadPart requests for two 7-part puts, want 14", got)
	}
	if maxInFlight > s.cfg.Concurrency {
		t.Errorf("%d parts in flight at once, Concurrency is %d", maxInFlight, s.cfg.Concurrency)
	}
	if made, most := s.parts.made.Load(), int64(s.cfg.Concurrency+1); made > most {
		t.Errorf("two puts mapped %d part buffers, want at most %d (reused)", made, most)
	}
}

// wrappedErr wraps its reader's errors the way pipeline's sourceReader does
// (an Unwrap-able error type), so errors.Is sees through it.
type wrappedErr struct{ err error }

func (e *wrappedErr) Error() string { return "source: " + e.err.Error() }
func (e *wrappedErr) Unwrap() error { return e.err }

// truncatedReader yields n bytes of r and then fails with err: an HTTP body
// cut short (net/http reports io.ErrUnexpectedEOF), a truncated gzip stream.
type truncatedReader struct {
	r   io.Reader
	n   int64
	err error
}

func (t *truncatedReader) Read(p []byte) (int, error) {
	if t.n <= 0 {
		return 0, t.err
	}
	if int64(len(p)) > t.n {
		p = p[:t.n]
	}
	n, err := t.r.Read(p)
	t.n -= int64(n)
	return n, err
}

// TestPutSourceFailureIsNotEOF: a source that fails with io.ErrUnexpectedEOF
// (or an error wrapping io.EOF / io.ErrUnexpectedEOF) has not ended: the put
// must fail, with the source's error, and store nothing.
func TestPutSourceFailureIsNotEOF(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{smallSize, 5 << 20, multipartSize} {
		for _, srcErr := range []error{io.ErrUnexpectedEOF, &wrappedErr{io.ErrUnexpectedEOF}, fmt.Errorf("read body: %w", io.EOF)} {
			t.Run(fmt.Sprintf("%d/%v", size, srcErr), func(t *testing.T) {
				t.Parallel()
				p := newS3Proxy(t, fakeS3{}, nil)
				s := proxiedStore(t, p.URL, nil)
				r := &truncatedReader{r: storagetest.Stream(7, size), n: size, err: srcErr}
				info, err := s.Put(t.Context(), "k", r, pipeline.PutOptions{CreateOnly: true})
				if err == nil || !errors.Is(err, srcErr) {
					t.Fatalf("Put of a source that failed with %v = %+v, %v; want the source's error", srcErr, info, err)
				}
				if got := len(p.ops("PutObject")) + len(p.ops("CompleteMultipartUpload")); got != 0 {
					t.Errorf("%d object-creating requests sent for a failed source, want 0", got)
				}
				if size == multipartSize && len(p.ops("AbortMultipartUpload")) != 1 {
					t.Errorf("the failed multipart put was not aborted")
				}
				// A source that fails within its first two parts is found
				// out before a multipart upload is created.
				if size < multipartSize && len(p.ops("CreateMultipartUpload"))+len(p.ops("UploadPart")) != 0 {
					t.Errorf("a %d-byte source that failed started a multipart upload", size)
				}
			})
		}
	}
}

// TestPutOfExactlyOnePart: an object of exactly one part size is one
// PutObject, not a multipart upload of one part (three requests, and no
// SHA-256 metadata); one byte more is a multipart upload of two parts.
func TestPutOfExactlyOnePart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		size              int64
		puts, parts, done int
	}{
		{5 << 20, 1, 0, 0},
		{5<<20 + 1, 0, 2, 1},
		{10 << 20, 0, 2, 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, nil)
			s := proxiedStore(t, p.URL, nil)
			info, err := s.Put(t.Context(), "k", storagetest.Stream(3, tc.size), pipeline.PutOptions{CreateOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != tc.size {
				t.Errorf("stored %d bytes, want %d", info.Size, tc.size)
			}
			if got := []int{len(p.ops("PutObject")), len(p.ops("UploadPart")), len(p.ops("CompleteMultipartUpload"))}; !slices.Equal(got, []int{tc.puts, tc.parts, tc.done}) {
				t.Errorf("PutObject, UploadPart, CompleteMultipartUpload = %v, want %v", got, []int{tc.puts, tc.parts, tc.done})
			}
			if made := s.parts.made.Load(); made > int64(s.cfg.Concurrency+1) {
				t.Errorf("%d part buffers for one put, want at most %d", made, s.cfg.Concurrency+1)
			}
		})
	}
}

// TestPutRefusesMorePartsThanS3Allows: S3 keeps at most 10000 parts per
// upload (lowered to 3 here). An object that fills exactly the last part is
// stored; one byte more fails before that part is sent, the upload is
// aborted and nothing is stored.
func TestPutRefusesMorePartsThanS3Allows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size int64
		ok   bool
	}{{15 << 20, true}, {15<<20 + 1, false}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, nil)
			s := proxiedStore(t, p.URL, nil)
			s.maxParts = 3
			_, err := s.Put(t.Context(), "k", storagetest.Stream(4, tc.size), pipeline.PutOptions{})
			if tc.ok != (err == nil) {
				t.Fatalf("Put of %d bytes in 5 MiB parts, at most 3 parts: %v", tc.size, err)
			}
			if got := len(p.ops("UploadPart")); got > 3 {
				t.Errorf("%d parts sent, the limit is 3", got)
			}
			if tc.ok {
				return
			}
			if !strings.Contains(err.Error(), "larger than 3 parts") {
				t.Errorf("error %q does not name the part limit", err)
			}
			if len(p.ops("CompleteMultipartUpload")) != 0 || len(p.ops("AbortMultipartUpload")) != 1 {
				t.Errorf("completed %d, aborted %d; want 0 and 1", len(p.ops("CompleteMultipartUpload")), len(p.ops("AbortMultipartUpload")))
			}
		})
	}
}

// TestDeniedWritesAreRetried: MinIO on a single drive refuses a write that
// races the removal of its prefix's directory with 403 AccessDenied (see
// retryDeniedWrites). The two requests that publish an object are retried
// after such a refusal, with the same bytes and still create-only; a put
// that keeps being refused fails after the retryer's three attempts; other
// requests refused with AccessDenied are not retried.
func TestDeniedWritesAreRetried(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		op       string
		size     int64
		refuse   int // the first refuse requests of op are refused
		ok       bool
		requests int // requests of op
	}{
		{op: "PutObject", size: 1024, refuse: 1, ok: true, requests: 2},
		{op: "PutObject", size: 1024, refuse: 2, ok: true, requests: 3},
		{op: "PutObject", size: 1024, refuse: 100, requests: 3},
		{op: "CompleteMultipartUpload", size: 11 * mib, refuse: 1, ok: true, requests: 2},
		{op: "CompleteMultipartUpload", size: 11 * mib, refuse: 2, ok: true, requests: 3},
		{op: "CompleteMultipartUpload", size: 11 * mib, refuse: 100, requests: 3},
		{op: "CreateMultipartUpload", size: 11 * mib, refuse: 1, requests: 1},
		{op: "UploadPart", size: 11 * mib, refuse: 100, requests: -1}, // parts in flight
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s refused %d times", tc.op, tc.refuse), func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, refuseFirst(tc.op, tc.refuse))
			s := proxiedStore(t, p.URL, nil)
			want, err := io.ReadAll(storagetest.Stream(3, tc.size))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(want)
			info, err := s.Put(t.Context(), "k", storagetest.Stream(3, tc.size), pipeline.PutOptions{CreateOnly: true})
			reqs := p.ops(tc.op)
			if tc.requests >= 0 && len(reqs) != tc.requests {
				t.Errorf("%d %s requests, want %d", len(reqs), tc.op, tc.requests)
			}
			for i, r := range reqs {
				if tc.op != "UploadPart" && r.ifNoneMatch != "*" {
					t.Errorf("%s request %d has If-None-Match %q, want *", tc.op, i+1, r.ifNoneMatch)
				}
			}
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "AccessDenied") {
					t.Fatalf("Put refused = %v, want the AccessDenied", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Put refused %d times = %v, want success", tc.refuse, err)
			}
			// fakeS3 refuses a PutObject whose body is not the checksum
			// sent with it, so a retry that sent other bytes (a body not
			// rewound) fails; the put's own check compares the CRC64NVME
			// the server reports with the bytes read.
			if info.Size != tc.size || info.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("Put after the retries = %d bytes, %s; want %d bytes, %s", info.Size, info.SHA256, tc.size, hex.EncodeToString(sum[:]))
			}
		})
	}
	t.Run("GetObject is not retried", func(t *testing.T) {
		t.Parallel()
		p := newS3Proxy(t, fakeS3{}, refuseFirst("GetObject", 100))
		s := proxiedStore(t, p.URL, nil)
		if _, _, err := s.Get(t.Context(), "k", 0, -1); err == nil {
			t.Fatal("Get refused = nil error")
		}
		if got := len(p.ops("GetObject")); got != 1 {
			t.Errorf("%d GetObject requests, want 1", got)
		}
	})
	// The client's retry quota is shared by all its requests and a token
	// comes back only when its retry succeeds: puts that are really denied
	// must not spend it, or after a few dozen of them nothing (not even
	// this race) would be retried again.
	t.Run("denied puts leave the retry quota alone", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		denyAll := true
		refusedOnce := false
		p := newS3Proxy(t, fakeS3{}, func(w http.ResponseWriter, r *http.Request, op string) bool {
			mu.Lock()
			defer mu.Unlock()
			if op != "PutObject" || (!denyAll && refusedOnce) {
				return false
			}
			refusedOnce = true
			_, _ = io.Copy(io.Discard, r.Body)
			s3Error(w, r, http.StatusForbidden, "AccessDenied")
			return true
		})
		s := proxiedStore(t, p.URL, nil)
		for i := range 25 {
			if _, err := s.Put(t.Context(), "k", strings.NewReader("x"), pipeline.PutOptions{}); err == nil {
				t.Fatalf("denied put %d succeeded", i)
			}
		}
		mu.Lock()
		denyAll, refusedOnce = false, false
		mu.Unlock()
		if _, err := s.Put(t.Context(), "k", strings.NewReader("x"), pipeline.PutOptions{}); err != nil {
			t.Fatalf("a put refused once after 25 denied puts = %v, want it retried", err)
		}
	})
}

// refuseFirst answers the first n requests of op with 403 AccessDenied,
// after reading the request's body.
func refuseFirst(op string, n int) func(http.ResponseWriter, *http.Request, string) bool {
	var mu sync.Mutex
	refused := 0
	return func(w http.ResponseWriter, r *http.Request, got string) bool {
		mu.Lock()
		defer mu.Unlock()
		if got != op || refused == n {
			return false
		}
		refused++
		_, _ = io.Copy(io.Discard, r.Body)
		s3Error(w, r, http.StatusForbidden, "AccessDenied")
		return true
	}
}

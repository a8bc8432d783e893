package s3

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"unsafe"

	"edgepipe/pipeline"
	"edgepipe/storage/storagetest"
)

// checkPartsReturned: once a put has returned, every part buffer it took
// from the pool is back there, once. A buffer that is not is mapped memory
// no collector frees (a leak of a part per put); a buffer put twice would
// be handed to two parts at once. The pool keeps 2×(Concurrency+1) idle
// buffers, more than one put ever maps, so none is unmapped on the way.
func checkPartsReturned(t *testing.T, s *Store) {
	t.Helper()
	made := s.parts.made.Load()
	var idle [][]byte
	seen := map[*byte]bool{}
	dup := 0
	for len(s.parts.idle) > 0 {
		b := <-s.parts.idle
		if seen[unsafe.SliceData(b)] {
			dup++
		}
		seen[unsafe.SliceData(b)] = true
		idle = append(idle, b)
	}
	for _, b := range idle {
		s.parts.idle <- b
	}
	if dup > 0 {
		t.Errorf("%d part buffers were returned to the pool twice", dup)
	}
	if int64(len(seen)) != made {
		t.Errorf("%d part buffers mapped, %d back in the pool", made, len(seen))
	}
}

// countingReader counts what its reader yields.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestPutReturnsEveryPartBuffer: whatever way a put ends (stored in one
// request or in parts, the source failing in any part, the server refusing
// any request, the part limit), every part buffer it took goes back to the
// pool exactly once; a source that fails within the first two parts creates
// no multipart upload, and a failed source's partial part is never sent.
func TestPutReturnsEveryPartBuffer(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	// Unlike refuseFirst, the refusal does not read the body first: the
	// server answers while the client may still be sending a pooled part.
	refuse := func(what string) func(http.ResponseWriter, *http.Request, string) bool {
		return func(w http.ResponseWriter, r *http.Request, op string) bool {
			if op != what {
				return false
			}
			s3Error(w, r, http.StatusForbidden, "AccessDenied")
			return true
		}
	}
	tests := []struct {
		name     string
		size     int64
		srcErr   error                                                 // the source fails after size bytes
		answer   func(http.ResponseWriter, *http.Request, string) bool // the server's refusals
		maxParts int
		ok       bool
		creates  int // CreateMultipartUpload requests
		parts    int // UploadPart requests, -1 for any
	}{
		{name: "small", size: 1024, ok: true},
		{name: "one part", size: 5 * mib, ok: true},
		{name: "one part and a byte", size: 5*mib + 1, ok: true, creates: 1, parts: 2},
		{name: "three parts", size: 11 * mib, ok: true, creates: 1, parts: 3},
		{name: "source fails in part 1", size: 1024, srcErr: io.ErrUnexpectedEOF},
		{name: "source fails at part 2", size: 5 * mib, srcErr: io.ErrUnexpectedEOF},
		{name: "source fails within part 2", size: 7 * mib, srcErr: io.ErrUnexpectedEOF},
		{name: "source fails within part 3", size: 11 * mib, srcErr: io.ErrUnexpectedEOF, creates: 1, parts: 2},
		{name: "source fails at part 4", size: 15 * mib, srcErr: io.ErrUnexpectedEOF, creates: 1, parts: 3},
		{name: "PutObject refused, small", size: 1024, answer: refuse("PutObject")},
		{name: "PutObject refused, one part", size: 5 * mib, answer: refuse("PutObject")},
		{name: "CreateMultipartUpload refused", size: 11 * mib, answer: refuse("CreateMultipartUpload"), creates: 1},
		{name: "UploadPart refused", size: 26 * mib, answer: refuse("UploadPart"), creates: 1, parts: -1},
		{name: "CompleteMultipartUpload refused", size: 11 * mib, answer: refuse("CompleteMultipartUpload"), creates: 1, parts: 3},
		{name: "part limit", size: 15*mib + 1, maxParts: 3, creates: 1, parts: 3},
	}
	for _, tc := range tests {
		// A refused CreateMultipartUpload leaves no upload to abort.
		aborts := !tc.ok && tc.creates > 0 && !strings.HasPrefix(tc.name, "CreateMultipartUpload")
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newS3Proxy(t, fakeS3{}, tc.answer)
			s := proxiedStore(t, p.URL, nil)
			if tc.maxParts > 0 {
				s.maxParts = tc.maxParts
			}
			src := storagetest.Stream(9, tc.size)
			if tc.srcErr != nil {
				src = &truncatedReader{r: src, n: tc.size, err: tc.srcErr}
			}
			_, err := s.Put(t.Context(), "k", src, pipeline.PutOptions{})
			if tc.ok != (err == nil) {
				t.Fatalf("Put = %v, want success %v", err, tc.ok)
			}
			checkPartsReturned(t, s)
			if got := len(p.ops("CreateMultipartUpload")); got != tc.creates {
				t.Errorf("%d CreateMultipartUpload requests, want %d", got, tc.creates)
			}
			if got := len(p.ops("UploadPart")); tc.parts >= 0 && got != tc.parts {
				t.Errorf("%d UploadPart requests, want %d", got, tc.parts)
			}
			if got := len(p.ops("AbortMultipartUpload")); got != map[bool]int{true: 1}[aborts] {
				t.Errorf("%d AbortMultipartUpload requests, want %d", got, map[bool]int{true: 1}[aborts])
			}
		})
	}
}

// TestPutStopsReadingWhenAPartFails: once a part is refused, the put stops
// reading its source (at most the parts in flight and the one being filled
// more), rather than reading a long render to its end for nothing.
func TestPutStopsReadingWhenAPartFails(t *testing.T) {
	t.Parallel()
	p := newS3Proxy(t, fakeS3{}, func(w http.ResponseWriter, r *http.Request, op string) bool {
		if op != "UploadPart" {
			return false
		}
		s3Error(w, r, http.StatusForbidden, "AccessDenied")
		return true
	})
	s := proxiedStore(t, p.URL, nil)
	const size = 100 << 20
	src := &countingReader{r: storagetest.Stream(10, size)}
	_, err := s.Put(t.Context(), "k", src, pipeline.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "part") {
		t.Fatalf("Put with every part refused = %v, want a part's error", err)
	}
	if most := int64(s.cfg.Concurrency+3) * 5 << 20; src.n > most {
		t.Errorf("read %d bytes of the source after a part failed, want at most %d", src.n, most)
	}
	checkPartsReturned(t, s)
}

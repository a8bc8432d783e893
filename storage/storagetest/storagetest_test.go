package storagetest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"edgepipe/pipeline"
)

func TestStreamIndependentOfReadSizes(t *testing.T) {
	t.Parallel()
	const size = 64<<10 + 5
	whole, err := io.ReadAll(Stream(3, size))
	if err != nil || len(whole) != size {
		t.Fatalf("read %d bytes, %v", len(whole), err)
	}
	for _, r := range []io.Reader{
		iotest.OneByteReader(Stream(3, size)),
		iotest.HalfReader(Stream(3, size)),
		io.LimitReader(Stream(3, size+100), size),
	} {
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, whole) {
			t.Errorf("%T: %d bytes, %v; differs from one big read", r, len(got), err)
		}
	}
	if err := iotest.TestReader(Stream(3, size), whole); err != nil {
		t.Error(err)
	}
	other, _ := io.ReadAll(Stream(4, size))
	if bytes.Equal(other, whole) {
		t.Error("seeds 3 and 4 give the same stream")
	}
	if StreamSHA256(3, size) == StreamSHA256(3, size-1) {
		t.Error("digest ignores the size")
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := &tailBuffer{max: 8}
	b.Write([]byte("0123456789"))
	b.Write([]byte("ab"))
	if got := b.String(); got != "456789ab" {
		t.Errorf("tail = %q", got)
	}
}

func TestMinIOBinaryFromEnv(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGEPIPE_MINIO_BIN", bin)
	if got := MinIOBinary(); got != bin {
		t.Errorf("MinIOBinary = %q, want %q", got, bin)
	}
	t.Setenv("EDGEPIPE_MINIO_BIN", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", "")
	if got := MinIOBinary(); got != "" && !strings.HasPrefix(got, "/root/.cache/") {
		t.Errorf("MinIOBinary with nothing installed = %q", got)
	}
}

func TestCRC64NVME(t *testing.T) {
	t.Parallel()
	// The CRC-64/NVME check value: the CRC of "123456789".
	if got := CRC64NVME([]byte("123456789")); got != "ae8b14860a799888" {
		t.Errorf("CRC64NVME(123456789) = %s, want ae8b14860a799888", got)
	}
	b, _ := io.ReadAll(Stream(5, 70<<10))
	if got, want := StreamCRC64NVME(5, 70<<10), CRC64NVME(b); got != want {
		t.Errorf("StreamCRC64NVME = %s, want %s", got, want)
	}
}

// TestDigestRule: a stored object must carry a digest, and every digest it
// carries must be the bytes' own.
func TestDigestRule(t *testing.T) {
	t.Parallel()
	const sha, crc = "5a5a", "c0c0"
	tests := []struct {
		name     string
		sha, crc string
		ok       bool
	}{
		{"both", sha, crc, true},
		{"sha256 only", sha, "", true},
		{"crc64nvme only", "", crc, true},
		{"none", "", "", false},
		{"wrong sha256", "bad", crc, false},
		{"wrong crc64nvme", sha, "bad", false},
		{"only a wrong crc64nvme", "", "bad", false},
	}
	for _, tc := range tests {
		got := digestProblems(pipeline.ObjectInfo{SHA256: tc.sha, CRC64NVME: tc.crc}, sha, crc)
		if (len(got) == 0) != tc.ok {
			t.Errorf("%s: problems %q, want ok=%v", tc.name, got, tc.ok)
		}
	}
}

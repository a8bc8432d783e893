package randstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
	"testing/iotest"
)

// The bytes do not depend on how the consumer sizes its reads, the length
// is exact, SHA256 agrees with the bytes, and no 1 MiB block repeats.
func TestStream(t *testing.T) {
	t.Parallel()
	const size = 1<<20 + 13
	want, err := io.ReadAll(New(7, size))
	if err != nil || len(want) != size {
		t.Fatalf("read %d bytes, %v; want %d", len(want), err, size)
	}
	got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(New(7, size), 1000)))
	if err != nil || !bytes.Equal(got, want[:1000]) {
		t.Fatalf("one-byte reads differ from whole reads: %v", err)
	}
	if err := iotest.TestReader(New(7, size), want); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(want)
	if SHA256(7, size) != hex.EncodeToString(sum[:]) {
		t.Fatal("SHA256 disagrees with the stream")
	}
	if bytes.Equal(want[:4096], want[1<<20:1<<20+4096]) {
		t.Fatal("stream repeats with a 1 MiB period")
	}
	other, _ := io.ReadAll(New(8, 64))
	if bytes.Equal(other, want[:64]) {
		t.Fatal("the seed does not change the stream")
	}
}

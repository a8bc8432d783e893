// Package randstream is a fast deterministic byte source of unknown length,
// shared by the storage conformance suite and the upload benchmark, so the
// generator is never what a throughput figure measures.
package randstream

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// New returns a reader of size deterministic pseudo-random bytes derived
// from seed. Its length is unknown to the reader's consumer: it is neither a
// Seeker nor one of the types (bytes.Reader, strings.Reader, ...) whose
// length uploaders sniff, so stores take their streaming path.
//
// The bytes never repeat with a short period, so a store that swapped,
// dropped or duplicated a part of a multipart upload changes the SHA-256.
// It produces several GB/s.
func New(seed uint64, size int64) io.Reader {
	return &stream{state: seed, left: size, wpos: 8}
}

// SHA256 is the hex SHA-256 of New(seed, size).
func SHA256(seed uint64, size int64) string {
	h := sha256.New()
	if _, err := io.Copy(h, New(seed, size)); err != nil {
		panic(err) // cannot happen: the stream never fails
	}
	return hex.EncodeToString(h.Sum(nil))
}

// stream is a splitmix64 sequence. Bytes come out in 8-byte words; a word
// split across two Reads is kept in word so the output does not depend on
// how the consumer sizes its reads.
type stream struct {
	state uint64
	left  int64
	word  [8]byte
	wpos  int // next unread byte of word; 8 when empty
}

func (s *stream) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *stream) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n := 0
	if s.wpos < 8 {
		c := copy(p, s.word[s.wpos:])
		s.wpos += c
		n += c
	}
	for len(p)-n >= 8 {
		binary.LittleEndian.PutUint64(p[n:], s.next())
		n += 8
	}
	if n < len(p) {
		binary.LittleEndian.PutUint64(s.word[:], s.next())
		c := copy(p[n:], s.word[:])
		s.wpos = c
		n += c
	}
	s.left -= int64(n)
	return n, nil
}

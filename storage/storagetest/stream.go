package storagetest

import (
	"hash/crc64"
	"io"

	"edgepipe/internal/randstream"
)

// Stream returns a reader of size deterministic pseudo-random bytes derived
// from seed, of a length unknown to its consumer (randstream.New).
func Stream(seed uint64, size int64) io.Reader { return randstream.New(seed, size) }

// StreamSHA256 is the hex SHA-256 of Stream(seed, size).
func StreamSHA256(seed uint64, size int64) string { return randstream.SHA256(seed, size) }

// StreamCRC64NVME is the hex CRC-64/NVME of Stream(seed, size).
func StreamCRC64NVME(seed uint64, size int64) string {
	c := crc64.New(crc64NVME)
	if _, err := io.Copy(c, Stream(seed, size)); err != nil {
		panic(err) // cannot happen: the stream never fails
	}
	return hexCRC(c.Sum64())
}

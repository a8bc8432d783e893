package storagetest

import (
	"io"

	"edgepipe/internal/randstream"
)

// Stream returns a reader of size deterministic pseudo-random bytes derived
// from seed, of a length unknown to its consumer (randstream.New).
func Stream(seed uint64, size int64) io.Reader { return randstream.New(seed, size) }

// StreamSHA256 is the hex SHA-256 of Stream(seed, size).
func StreamSHA256(seed uint64, size int64) string { return randstream.SHA256(seed, size) }

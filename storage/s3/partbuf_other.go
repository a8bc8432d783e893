//go:build !unix

package s3

// allocPart is a heap buffer where anonymous mappings are not available
// (see partbuf_unix.go).
func allocPart(size int) ([]byte, error) { return make([]byte, size), nil }

func freePart([]byte) {}

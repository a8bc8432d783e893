//go:build unix

package s3

import "syscall"

// allocPart maps an anonymous region for a part buffer, outside the Go
// heap: the buffers are a put's only large memory, and on the heap they
// would raise the garbage collector's goal by their own size (GOGC=100
// lets the heap reach twice what is live), so a put holding 24 MiB of
// parts would let the process grow by 48 MiB. Mapped, they cost their
// size and no more, and the heap stays as small as the rest of the
// process needs. The pages are only touched (made resident) as a part is
// filled.
func allocPart(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

// freePart unmaps a buffer allocPart made. b must not be used afterwards.
func freePart(b []byte) { _ = syscall.Munmap(b) }

// Package cmalloc tunes the C allocator that SQLite uses through cgo.
//
// SQLite allocates and frees page buffers all the time (its page cache,
// the WAL's frames, statement memory). glibc returns the freed top of a
// heap to the kernel once it passes a trim threshold (128 KiB unless set),
// with madvise or brk, and takes it back with page faults on the next
// allocation. Each return is a TLB flush on every CPU the process runs
// on: on a virtual machine an inter-processor interrupt per CPU, which
// perf measured at 10–12% of the CPU of a SQLite burn-down here. A heap
// (glibc keeps one per arena, at most eight per core) now keeps up to
// DefaultTrimThreshold free for the next buffers — in practice what
// SQLite's page caches cycle through, a few MiB, far less than the bound.
// Setting the threshold also fixes glibc's mmap threshold at 128 KiB
// (it no longer adapts), so blocks that large are mapped and unmapped
// each time; SQLite's buffers are pages, well below it, and the net was
// measured (README, session 17).
package cmalloc

// DefaultTrimThreshold is the free memory a heap keeps before the rest
// goes back to the kernel.
const DefaultTrimThreshold = 32 << 20

// Tune sets the C allocator's trim threshold to DefaultTrimThreshold,
// unless the operator set one — glibcTunables is the process's
// GLIBC_TUNABLES and legacyTrim its MALLOC_TRIM_THRESHOLD_, both read by
// the caller (this package reads no environment). It reports whether it
// changed anything; it does nothing where the allocator is not glibc's or
// cgo is off.
func Tune(glibcTunables, legacyTrim string) bool {
	if tunablesSetTrim(glibcTunables) || legacyTrim != "" {
		return false
	}
	return setTrimThreshold(DefaultTrimThreshold)
}

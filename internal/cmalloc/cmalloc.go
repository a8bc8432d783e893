// Package cmalloc tunes the C allocator that SQLite uses through cgo.
//
// SQLite allocates and frees page buffers all the time (its page cache,
// the WAL's frames, statement memory). glibc returns the freed top of a
// heap to the kernel once it passes a trim threshold (128 KiB unless set),
// with madvise or brk, and takes it back with page faults on the next
// allocation. Each return is a TLB flush on every CPU the process runs
// on: on a virtual machine an inter-processor interrupt per CPU, which
// perf measured at 10–12% of the CPU of a SQLite burn-down here. Keeping
// freed memory up to a few MiB per heap costs that much memory and no
// more: the allocator reuses it for the next buffers.
package cmalloc

// DefaultTrimThreshold is the free memory a heap keeps before the rest
// goes back to the kernel.
const DefaultTrimThreshold = 32 << 20

// Tune sets the C allocator's trim threshold to DefaultTrimThreshold,
// unless glibcTunables — the process's GLIBC_TUNABLES, which the caller
// reads (this package reads no environment) — already sets one: the
// operator's word wins. It reports whether it changed anything; it does
// nothing where the allocator is not glibc's or cgo is off.
func Tune(glibcTunables string) bool {
	if tunablesSetTrim(glibcTunables) {
		return false
	}
	return setTrimThreshold(DefaultTrimThreshold)
}

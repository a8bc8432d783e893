//go:build linux && cgo

package cmalloc

/*
#include <malloc.h>
#ifdef __GLIBC__
static int edgepipe_set_trim(int bytes) { return mallopt(M_TRIM_THRESHOLD, bytes); }
static int edgepipe_glibc(void) { return 1; }
#else
static int edgepipe_glibc(void) { return 0; }
static int edgepipe_set_trim(int bytes) { return 0; }
#endif
*/
import "C"

func setTrimThreshold(bytes int) bool { return C.edgepipe_set_trim(C.int(bytes)) == 1 }

// glibc reports whether the C library is glibc.
func glibc() bool { return C.edgepipe_glibc() == 1 }

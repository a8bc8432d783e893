package cmalloc

import (
	"runtime"
	"testing"
)

func TestTunablesSetTrim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"", false},
		{"glibc.malloc.trim_threshold=1048576", true},
		{"glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=0", true},
		{"glibc.malloc.arena_max=2", false},
		{"glibc.malloc.trim_threshold", false}, // no value: glibc ignores it
		{"glibc.malloc.trim_threshold_x=1", false},
	} {
		if got := tunablesSetTrim(tc.v); got != tc.want {
			t.Errorf("tunablesSetTrim(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestTuneLeavesTheOperatorsSetting(t *testing.T) {
	t.Parallel()
	if Tune("glibc.malloc.trim_threshold=4096", "") {
		t.Fatal("Tune changed the trim threshold that GLIBC_TUNABLES sets")
	}
	if Tune("", "4096") {
		t.Fatal("Tune changed the trim threshold that MALLOC_TRIM_THRESHOLD_ sets")
	}
}

func TestTuneSetsTheThreshold(t *testing.T) {
	t.Parallel()
	if got, want := Tune("", ""), glibc(); got != want {
		t.Fatalf("Tune() = %v on a C library where glibc() = %v", got, want)
	}
	if runtime.GOOS == "linux" && !glibc() {
		t.Log("not glibc: Tune does nothing here")
	}
}

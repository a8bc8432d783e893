//go:build !linux || !cgo

package cmalloc

func setTrimThreshold(int) bool { return false }

func glibc() bool { return false }

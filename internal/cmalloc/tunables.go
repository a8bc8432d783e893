package cmalloc

import "strings"

// tunablesSetTrim reports whether a GLIBC_TUNABLES value (name=value
// pairs separated by colons) sets glibc.malloc.trim_threshold.
func tunablesSetTrim(v string) bool {
	for _, kv := range strings.Split(v, ":") {
		if name, _, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(name) == "glibc.malloc.trim_threshold" {
			return true
		}
	}
	return false
}

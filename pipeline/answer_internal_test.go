package pipeline

import (
	"strings"
	"testing"
)

// safeName keeps exactly A-Z a-z 0-9 - _ and maps every other rune to '_',
// so a job id can never escape its spool directory.
func TestSafeName(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"azAZ09-_", "azAZ09-_"},
		{"v1-job_42", "v1-job_42"},
		{"abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"},
		// The ASCII neighbours of each range: / : @ [ ` {
		{"a/b:c@d[e`f{g", "a_b_c_d_e_f_g"},
		{"../../etc/passwd", "______etc_passwd"},
		{"é ü\x00", "____"},
	}
	for _, tt := range tests {
		got := safeName(tt.in)
		if got != tt.want {
			t.Errorf("safeName(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.ContainsAny(got, "/.\\") {
			t.Errorf("safeName(%q) = %q keeps a path character", tt.in, got)
		}
	}
}

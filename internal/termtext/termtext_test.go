package termtext

import (
	"testing"
	"unicode"
)

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 10, "plain"},
		{"a\x1b[31m\r\nb", 20, "a [31m b"},
		{"x\u2028y\u2029z\u202ew", 20, "x y z w"},
		{"  many   spaces\t", 20, "many spaces"},
		{"\xff\xfebad", 20, "bad"},
		{"abcdef", 4, "abc…"},
		{"héllo wörld", 5, "héll…"},
		{"unlimited", 0, "unlimited"},
	} {
		if got := Clean(tc.in, tc.limit); got != tc.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

func FuzzClean(f *testing.F) {
	f.Add("a\x1b]0;t\x07b", 10)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = limit%500 + 1
		if limit < 1 {
			limit = -limit + 1
		}
		got := Clean(s, limit)
		if n := len([]rune(got)); n > limit {
			t.Fatalf("%d runes > limit %d", n, limit)
		}
		for _, r := range got {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("control %U in %q", r, got)
			}
		}
	})
}

package sqlcols

import "testing"

func TestPrefixed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ p, in, want string }{
		{"c.", "id", "c.id"},
		{"c.", "id, status", "c.id, c.status"},
		{"j.", "id,\n\t\tstatus,queue", "j.id,\n\t\tj.status,j.queue"},
		{"x.", "", ""},
		{"", "a, b", "a, b"},
	} {
		if got := Prefixed(tc.p, tc.in); got != tc.want {
			t.Errorf("Prefixed(%q, %q) = %q, want %q", tc.p, tc.in, got, tc.want)
		}
	}
}

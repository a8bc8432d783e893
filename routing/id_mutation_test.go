package routing

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"edgepipe/pipeline"
)

// The id alphabet is A-Z a-z 0-9 _ -: every letter at the edge of a range is
// accepted and every byte just outside one is refused. Found by mutation
// testing: no test used 'z', 'A' or 'Z', so `c <= 'z'` → `c < 'z'` lived.
func TestParseInstanceIDAlphabetEdges(t *testing.T) {
	t.Parallel()
	accept := []string{"a", "z", "A", "Z", "0", "9", "_", "azAZ09_-", "v1-z", "v1-Z", "v1-A", "Zebra", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
	for _, id := range accept {
		got, err := ParseInstanceID(id)
		if err != nil {
			t.Errorf("ParseInstanceID(%q) = %v, want it accepted", id, err)
			continue
		}
		if got.Raw != id {
			t.Errorf("ParseInstanceID(%q).Raw = %q", id, got.Raw)
		}
		if !idRE.MatchString(id) {
			t.Errorf("accepted %q does not match %s", id, IDPattern)
		}
	}
	// The neighbours of each range in ASCII: '/' ':' '@' '[' '`' '{', and
	// the bytes on either side of '_' and '-'.
	for _, c := range []byte{'/', ':', '@', '[', '`', '{', '^', ',', '.', 0x7f} {
		id := "a" + string(c) + "b"
		if _, err := ParseInstanceID(id); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("ParseInstanceID(%q) = %v, want ErrInvalidInput", id, err)
		}
		if idRE.MatchString(id) {
			t.Errorf("refused %q matches %s; table is wrong", id, IDPattern)
		}
	}
}

// clip keeps untrusted input quoted in errors short without splitting a rune
// and without ever panicking, whatever bytes it is given.
func TestClip(t *testing.T) {
	t.Parallel()
	const n = 32
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "abc", "abc"},
		{"exactly the limit", strings.Repeat("a", n), strings.Repeat("a", n)},
		{"one over", strings.Repeat("a", n+1), strings.Repeat("a", n) + "…"},
		// 'é' is two bytes; starting at byte 31 it straddles the cut.
		{"rune straddles the cut", strings.Repeat("a", n-1) + "éxyz", strings.Repeat("a", n-1) + "…"},
		{"rune ends at the cut", strings.Repeat("a", n-2) + "éxyz", strings.Repeat("a", n-2) + "é…"},
		// Only continuation bytes: there is no rune start to cut at.
		{"no rune start", strings.Repeat("\x80", n+8), "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := clip(tt.in)
			if got != tt.want {
				t.Errorf("clip(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if utf8.ValidString(tt.in) && !utf8.ValidString(got) {
				t.Errorf("clip(%q) = %q splits a rune", tt.in, got)
			}
		})
	}
}

// An over-long id of arbitrary bytes is refused with an error, not a panic:
// the length check quotes (clips) the id before any character is checked.
func TestParseInstanceIDOverlongGarbage(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		strings.Repeat("\x80", MaxIDLen+1),
		strings.Repeat("a", 31) + strings.Repeat("é", 20),
		strings.Repeat("\xff", 200),
	} {
		_, err := ParseInstanceID(id)
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Fatalf("ParseInstanceID(%d bytes) = %v, want ErrInvalidInput", len(id), err)
		}
		if !strings.Contains(err.Error(), "bytes long") {
			t.Errorf("ParseInstanceID(%d bytes) error %q does not report the length", len(id), err)
		}
		d := (&Router{cfg: Config{Bindings: Bindings{versions: []string{"v1"}}}}).Route(id)
		if !d.DeadLetter || d.Reason != pipeline.ReasonPoison {
			t.Errorf("Route(%d bytes) = %+v, want a poison dead letter", len(id), d)
		}
	}
}

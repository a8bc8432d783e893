package routing

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"edgepipe/pipeline"
)

var idRE = regexp.MustCompile(IDPattern)

func TestParseInstanceID(t *testing.T) {
	t.Parallel()
	const (
		ok        = iota
		invalid   // ErrInvalidInput, not ErrMalformedPrefix
		malformed // ErrMalformedPrefix (and ErrInvalidInput)
	)
	tests := []struct {
		id       string
		want     int
		version  string
		explicit bool
		body     string
	}{
		// Well-formed prefixes.
		{id: "v1-abc", version: "v1", explicit: true, body: "abc"},
		{id: "v2-abc", version: "v2", explicit: true, body: "abc"},
		{id: "v3-abc", version: "v3", explicit: true, body: "abc"},
		{id: "v10-x", version: "v10", explicit: true, body: "x"},
		{id: "v9999-x", version: "v9999", explicit: true, body: "x"},
		{id: "v2-_", version: "v2", explicit: true, body: "_"},
		{id: "v2-0", version: "v2", explicit: true, body: "0"},
		{id: "v2-a-", version: "v2", explicit: true, body: "a-"},
		{id: "v2-v1-abc", version: "v2", explicit: true, body: "v1-abc"}, // only the leading prefix counts
		{id: "v2-V2-abc", version: "v2", explicit: true, body: "V2-abc"},
		{id: "v1-" + strings.Repeat("a", 61), version: "v1", explicit: true, body: strings.Repeat("a", 61)}, // 64 bytes

		// No prefix: default version.
		{id: "abc", body: "abc"},
		{id: "v2", body: "v2"},
		{id: "v", body: "v"},
		{id: "V", body: "V"},
		{id: "v2abc", body: "v2abc"},
		{id: "vx-abc", body: "vx-abc"},
		{id: "vv2-abc", body: "vv2-abc"},
		{id: "version-1", body: "version-1"},
		{id: "x-v2-abc", body: "x-v2-abc"},
		{id: "_v2-abc", body: "_v2-abc"},
		{id: "2-abc", body: "2-abc"},
		{id: "a", body: "a"},
		{id: "_", body: "_"},
		{id: "a-", body: "a-"},
		{id: strings.Repeat("a", 64), body: strings.Repeat("a", 64)},

		// Malformed prefixes: dead-letter, never v1.
		{id: "v-abc", want: malformed},
		{id: "v_abc", want: malformed},
		{id: "v01-abc", want: malformed},
		{id: "v0-abc", want: malformed},
		{id: "V2-abc", want: malformed},
		{id: "V-abc", want: malformed},
		{id: "v2_abc", want: malformed},
		{id: "v2-", want: malformed},
		{id: "v-", want: malformed},
		{id: "v2--abc", want: malformed},
		{id: "v12345-abc", want: malformed},
		{id: "v99999999999999999999999-abc", want: malformed}, // would overflow int64

		// Not an instance id.
		{id: "", want: invalid},
		{id: "-abc", want: invalid},
		{id: "-", want: invalid},
		{id: "v2-ab c", want: invalid},
		{id: " v2-abc", want: invalid},
		{id: "v2-abc\n", want: invalid},
		{id: "v2-abc/..", want: invalid},
		{id: "v2-ab.c", want: invalid},
		{id: "v2-ñ", want: invalid},
		{id: "v２-abc", want: invalid}, // fullwidth digit
		{id: "ＡＢＣ", want: invalid},
		{id: "v2-\x00", want: invalid},
		{id: "v2-\xff", want: invalid},                       // not UTF-8
		{id: "v1-" + strings.Repeat("a", 62), want: invalid}, // 65 bytes
		{id: strings.Repeat("a", 65), want: invalid},
		{id: strings.Repeat("é", 20), want: invalid},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			got, err := ParseInstanceID(tt.id)
			switch tt.want {
			case ok:
				if err != nil {
					t.Fatalf("ParseInstanceID(%q) error: %v", tt.id, err)
				}
				want := InstanceID{Raw: tt.id, Version: tt.version, Explicit: tt.explicit}
				if got != want {
					t.Fatalf("ParseInstanceID(%q) = %+v, want %+v", tt.id, got, want)
				}
				if got.Body() != tt.body {
					t.Errorf("Body() = %q, want %q", got.Body(), tt.body)
				}
				wantV := tt.version
				if !tt.explicit {
					wantV = DefaultVersion
				}
				if got.VersionOrDefault() != wantV {
					t.Errorf("VersionOrDefault() = %q, want %q", got.VersionOrDefault(), wantV)
				}
				if !idRE.MatchString(tt.id) {
					t.Errorf("accepted %q does not match %s", tt.id, IDPattern)
				}
			case invalid, malformed:
				if err == nil {
					t.Fatalf("ParseInstanceID(%q) = %+v, want an error", tt.id, got)
				}
				if !errors.Is(err, pipeline.ErrInvalidInput) {
					t.Errorf("error %v does not wrap pipeline.ErrInvalidInput", err)
				}
				if isMal := errors.Is(err, ErrMalformedPrefix); isMal != (tt.want == malformed) {
					t.Errorf("errors.Is(%v, ErrMalformedPrefix) = %v, want %v", err, isMal, tt.want == malformed)
				}
				if got != (InstanceID{}) {
					t.Errorf("on error got %+v, want zero InstanceID", got)
				}
				if len(err.Error()) > 300 {
					t.Errorf("error message is %d bytes, untrusted input must be clipped", len(err.Error()))
				}
			}
		})
	}
}

// The malformed ids in the table are all inside the documented grammar: the
// rule is stricter than the regexp on purpose, never looser.
func TestMalformedPrefixesAreInsideGrammar(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"v-abc", "v_abc", "v01-abc", "V2-abc", "v2_abc", "v2-", "v2--abc", "v12345-abc"} {
		if !idRE.MatchString(id) {
			t.Errorf("%q does not match %s", id, IDPattern)
		}
	}
}

func TestParseInstanceIDErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct{ id, want string }{
		{"", "empty"},
		{strings.Repeat("a", 65), "65 bytes long, at most 64"},
		{"-a", "starts with '-'"},
		{"a b", "' ' at byte 1"},
		{"v2-ñ", "'ñ' at byte 3"},
		{"V2-a", "lowercase 'v'"},
		{"v-a", "no version number"},
		{"v01-a", "must not start with 0"},
		{"v12345-a", "more than 4 digits"},
		{"v2_a", "must end with '-'"},
		{"v2-", "nothing follows"},
		{"v2--a", "must start with a letter"},
	}
	for _, tt := range tests {
		_, err := ParseInstanceID(tt.id)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseInstanceID(%q) error = %v, want it to mention %q", tt.id, err, tt.want)
		}
	}
}

// The id alphabet is A-Z a-z 0-9 _ -: every letter at the edge of a range is
// accepted and every byte just outside one is refused.
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

func TestFormatID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version, body, want string
		wantErr             bool
	}{
		{version: "v1", body: "abc", want: "v1-abc"},
		{version: "v2", body: "abc", want: "v2-abc"},
		{version: "v2", body: "v1-abc", want: "v2-v1-abc"},
		{version: "v2", body: strings.Repeat("a", 61), want: "v2-" + strings.Repeat("a", 61)},
		{version: "v2", body: strings.Repeat("a", 62), wantErr: true},
		{version: "v2", body: "", wantErr: true},
		{version: "v2", body: "-abc", wantErr: true},
		{version: "v2", body: "a b", wantErr: true},
		{version: "V2", body: "abc", wantErr: true},
		{version: "v0", body: "abc", wantErr: true},
		{version: "", body: "abc", wantErr: true},
		{version: "v2-", body: "abc", wantErr: true},
	}
	for _, tt := range tests {
		got, err := FormatID(tt.version, tt.body)
		if tt.wantErr {
			if err == nil || !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Errorf("FormatID(%q, %q) = %q, %v; want an ErrInvalidInput", tt.version, tt.body, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("FormatID(%q, %q) = %q, %v; want %q", tt.version, tt.body, got, err, tt.want)
		}
	}
}

func TestVersionHelpers(t *testing.T) {
	t.Parallel()
	if DefaultVersion != "v1" {
		t.Fatalf("DefaultVersion = %q, want v1 (docs/design.md §4)", DefaultVersion)
	}
	if got := QueueName("v2"); got != "render-v2" {
		t.Errorf("QueueName(v2) = %q", got)
	}
	for _, v := range []string{"v1", "v2", "v3", "v10", "v9999"} {
		if err := ValidateVersion(v); err != nil {
			t.Errorf("ValidateVersion(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"", "v", "V1", "v0", "v01", "v10000", "1", "v1-", " v1", "v1 ", "v-1", "v+1", "v１"} {
		if err := ValidateVersion(v); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("ValidateVersion(%q) = %v, want ErrInvalidInput", v, err)
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

package pipeline

import (
	"errors"
	"strings"
	"testing"
)

// The object key rule at each of its edges: length, alphabet, segments.
func TestValidateObjectKeyEdges(t *testing.T) {
	t.Parallel()
	seg := func(n int) string { return strings.Repeat("s", n) }
	// MaxObjectKeyLen bytes made of full-length segments and a remainder.
	long := func(n int) string {
		var parts []string
		for n > MaxObjectSegmentLen+1 {
			parts = append(parts, seg(MaxObjectSegmentLen))
			n -= MaxObjectSegmentLen + 1
		}
		return strings.Join(append(parts, seg(n)), "/")
	}
	tests := []struct {
		key string
		ok  bool
	}{
		{"", false},
		{"a", true},
		{"azAZ09._-/x", true},
		{"units/v1/ab/" + strings.Repeat("f", 64) + ".png", true},
		{long(MaxObjectKeyLen), true},
		{long(MaxObjectKeyLen + 1), false},
		{seg(MaxObjectSegmentLen), true},
		{seg(MaxObjectSegmentLen + 1), false},
		{"a/" + seg(MaxObjectSegmentLen+1) + "/b", false},
		{"a//b", false}, {"/a", false}, {"a/", false},
		{"a/./b", false}, {"a/../b", false}, {"..", false}, {"a/..", false},
		{"a/.b", true}, {"a/..b", true},
	}
	// The neighbours of every allowed range, and other printable bytes.
	for _, c := range []string{"`", "{", "@", "[", ":", ",", "+", " ", "\\", "~", "\x00", "\x7f", "é"} {
		tests = append(tests, struct {
			key string
			ok  bool
		}{"a" + c + "b", false})
	}
	for _, tt := range tests {
		err := ValidateObjectKey(tt.key)
		if tt.ok != (err == nil) {
			t.Errorf("ValidateObjectKey(%.40q…, %d bytes) = %v, want ok=%v", tt.key, len(tt.key), err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ValidateObjectKey(%.40q) error %v does not wrap ErrInvalidInput", tt.key, err)
		}
	}
}

// A prefix may end in a slash or a partial segment, which is never opened
// as a path; everything before it follows the key rule.
func TestValidateObjectPrefixEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"units/", true},
		{"renders/ab", true},
		{"units/..", true},
		{"units/" + strings.Repeat("p", MaxObjectSegmentLen), true},
		{"units/" + strings.Repeat("p", MaxObjectSegmentLen+1), false},
		{"units//", false},
		{"../units/", false},
		{"units/a b", false},
		{strings.Repeat("p/", MaxObjectKeyLen/2) + "x", false},
	}
	for _, tt := range tests {
		err := ValidateObjectPrefix(tt.prefix)
		if tt.ok != (err == nil) {
			t.Errorf("ValidateObjectPrefix(%.40q, %d bytes) = %v, want ok=%v", tt.prefix, len(tt.prefix), err, tt.ok)
		}
	}
}

// A content type defaults when empty and must be at most MaxContentTypeLen
// bytes of printable ASCII.
func TestObjectContentTypeEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", DefaultContentType, true},
		{"image/png", "image/png", true},
		{"text/plain; charset=utf-8", "text/plain; charset=utf-8", true},
		{" ~", " ~", true}, // 0x20 and 0x7e, the printable edges
		{strings.Repeat("x", MaxContentTypeLen), strings.Repeat("x", MaxContentTypeLen), true},
		{strings.Repeat("x", MaxContentTypeLen+1), "", false},
		{"image/png\x1f", "", false},
		{"image/png\x7f", "", false},
		{"image/png\r\nX-Evil: 1", "", false},
		{"image/pngé", "", false},
	}
	for _, tt := range tests {
		got, err := ObjectContentType(tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ObjectContentType(%.40q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ObjectContentType(%.40q) error %v does not wrap ErrInvalidInput", tt.in, err)
		}
	}
}

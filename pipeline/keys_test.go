package pipeline

import (
	"strings"
	"testing"
)

// safeVersion keeps at most the first 16 bytes of a version, and of those
// only a-z 0-9; nothing left becomes "x". Keys built from it keep their shape.
func TestSafeVersion(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"v1", "v1"},
		{"v9999", "v9999"},
		{"az09", "az09"},
		{"", "x"},
		{"V1", "1"},
		{"../", "x"},
		{"a/b:c`d{e@f[g", "abcdefg"},
		{"abcdefghijklmnop", "abcdefghijklmnop"}, // exactly 16
		{"abcdefghijklmnopq", "abcdefghijklmnop"}, // 17: cut
		{"/abcdefghijklmnopq", "abcdefghijklmno"}, // the cut counts input bytes
	}
	for _, tt := range tests {
		if got := safeVersion(tt.in); got != tt.want {
			t.Errorf("safeVersion(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, v := range []string{"v1", "", "../../x", "v1/../../etc"} {
		k := ArtifactKey("acme", v, "p", "m", "image", "{}", "text", "png")
		parts := strings.Split(k, "/")
		if len(parts) != 4 || parts[0]+"/" != PrefixUnits || parts[1] != safeVersion(v) || len(parts[2]) != 2 ||
			!strings.HasPrefix(parts[3], parts[2]) || len(parts[3]) != 64+len(".png") {
			t.Errorf("ArtifactKey for version %q = %q, want units/<version>/<2 hex>/<64 hex>.png", v, k)
		}
		r := RenderKey("acme", v, []byte("{}"), "stub", nil)
		if parts := strings.Split(r, "/"); len(parts) != 4 || parts[0]+"/" != PrefixRenders || len(parts[3]) != 64+len(".mp4") {
			t.Errorf("RenderKey for version %q = %q", v, r)
		}
	}
}

// safeOp keeps at most the first 32 bytes of an operation name, and of
// those only a-z and '_', so a staging key keeps its shape whatever the
// name holds.
func TestSafeOp(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{OpVideoSubmit, "video_submit"},
		{OpImage, "image"},
		{"az_", "az_"},
		{"", ""},
		{"Bad-Op.9/x`{@[", "adpx"},
		{"../etc", "etc"},
		{strings.Repeat("a", 32), strings.Repeat("a", 32)},
		{strings.Repeat("a", 33), strings.Repeat("a", 32)},       // 33: cut
		{"/" + strings.Repeat("b", 32), strings.Repeat("b", 31)}, // the cut counts input bytes
	}
	for _, tt := range tests {
		if got := safeOp(tt.in); got != tt.want {
			t.Errorf("safeOp(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	k := StagingKey("acme", "v1-job", 3, "Video/Submit", 42)
	if parts := strings.Split(k, "/"); len(parts) != 4 || parts[0]+"/" != PrefixStaging || !strings.HasSuffix(k, "/003-ideoubmit-42") {
		t.Errorf("StagingKey = %q, want staging/<2 hex>/<40 hex>/003-ideoubmit-42", k)
	}
}

// Key parts are length-prefixed: moving a byte from one part to the next
// gives another key.
func TestKeyPartsAreLengthPrefixed(t *testing.T) {
	t.Parallel()
	a := ArtifactKey("ab", "v1", "p", "m", "image", "{}", "c", "png")
	b := ArtifactKey("a", "v1", "p", "m", "image", "{}", "bc", "png")
	if a == b {
		t.Fatal("tenant/text boundary is not part of the key")
	}
	if hashParts("ab", "c") == hashParts("a", "bc") || hashParts("", "x") == hashParts("x", "") {
		t.Fatal("hashParts does not separate its parts")
	}
}

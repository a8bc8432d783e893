package routing

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

func TestParseBindings(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in   string
		want []string
	}{
		{"", []string{"v1", "v2"}},
		{"v1", []string{"v1"}},
		{"v2", []string{"v2"}},
		{"v1,v2", []string{"v1", "v2"}},
		{"v2,v1", []string{"v1", "v2"}},
		{"v1,v1,v2,v1", []string{"v1", "v2"}},
		{"v10,v9,v1", []string{"v1", "v9", "v10"}},
		{"v1,v2,v3", []string{"v1", "v2", "v3"}},
	}
	for _, tt := range valid {
		b, err := ParseBindings(tt.in)
		if err != nil {
			t.Errorf("ParseBindings(%q) error: %v", tt.in, err)
			continue
		}
		if got := b.Versions(); !slices.Equal(got, tt.want) {
			t.Errorf("ParseBindings(%q) = %v, want %v", tt.in, got, tt.want)
		}
		again, err := ParseBindings(b.String())
		if err != nil || !slices.Equal(again.Versions(), b.Versions()) {
			t.Errorf("ParseBindings(%q).String() = %q does not round-trip: %v, %v", tt.in, b.String(), again, err)
		}
	}
	invalid := []string{"x", "v1,x", "V1", "v0", "v01", "v1,", ",v1", "v1,,v2", ",", "v1, v2", " v1", "v1 ", "v1;v2",
		"v2-", "1", "v", "v10000", "v1\n"}
	for _, in := range invalid {
		b, err := ParseBindings(in)
		if err == nil {
			t.Errorf("ParseBindings(%q) = %v, want an error", in, b)
			continue
		}
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("ParseBindings(%q) error %v does not wrap ErrInvalidInput", in, err)
		}
		if !strings.Contains(err.Error(), "EDGEPIPE_BINDINGS") {
			t.Errorf("ParseBindings(%q) error %q does not name EDGEPIPE_BINDINGS", in, err)
		}
	}
}

func TestBindingsHas(t *testing.T) {
	t.Parallel()
	b, err := NewBindings("v2")
	if err != nil {
		t.Fatal(err)
	}
	if !b.Has("v2") || b.Has("v1") || b.Has("") || b.Has("v3") {
		t.Errorf("Bindings{v2}.Has is wrong: v2=%v v1=%v", b.Has("v2"), b.Has("v1"))
	}
	// Versions returns a copy: callers cannot widen the set.
	vs := b.Versions()
	vs[0] = "v1"
	if b.Has("v1") {
		t.Error("mutating Versions() changed the bindings")
	}
	if _, err := NewBindings(); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("NewBindings() = %v, want ErrInvalidInput", err)
	}
	if !(Bindings{}).IsZero() || b.IsZero() {
		t.Error("IsZero is wrong")
	}
}

package routing

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

var looksPrefixedRE = regexp.MustCompile(`^[vV][0-9]*[-_]`)

func FuzzParseInstanceID(f *testing.F) {
	for _, s := range []string{
		"v1-abc", "v2-abc", "v3-x", "abc", "v2", "vx-abc", "v-abc", "v01-abc", "V2-abc", "v2_abc", "v2-",
		"v2--a", "v12345-a", "", "-", "v2-ñ", "v2-a b", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"v9999-" + strings.Repeat("z", 58), "\xff", "v1-\x00",
	} {
		f.Add(s)
	}
	router := &Router{cfg: Config{Bindings: Bindings{versions: []string{"v1", "v2", "v10"}}}}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseInstanceID(s)
		d := router.Route(s)
		if err != nil {
			if !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Fatalf("ParseInstanceID(%q) error %v does not wrap ErrInvalidInput", s, err)
			}
			if id != (InstanceID{}) {
				t.Fatalf("ParseInstanceID(%q) returned %+v with an error", s, id)
			}
			if !d.DeadLetter || d.Queue != "" || d.Version != "" {
				t.Fatalf("Route(%q) = %+v for an unparseable id, want a dead letter", s, d)
			}
			if errors.Is(err, ErrMalformedPrefix) != (d.Reason == pipeline.ReasonUnboundVersion) {
				t.Fatalf("Route(%q).Reason = %q for error %v", s, d.Reason, err)
			}
			return
		}
		if len(s) > MaxIDLen || !idRE.MatchString(s) {
			t.Fatalf("accepted %q (%d bytes), outside %s / %d bytes", s, len(s), IDPattern, MaxIDLen)
		}
		if id.Raw != s {
			t.Fatalf("Raw = %q, want %q", id.Raw, s)
		}
		if !id.Explicit {
			if id.Version != "" || id.Body() != s || id.VersionOrDefault() != DefaultVersion {
				t.Fatalf("un-prefixed %q parsed as %+v", s, id)
			}
			if looksPrefixedRE.MatchString(s) {
				t.Fatalf("%q looks like a version prefix but was accepted as un-prefixed", s)
			}
		} else {
			if err := ValidateVersion(id.Version); err != nil {
				t.Fatalf("%q parsed to version %q: %v", s, id.Version, err)
			}
			// Round trip: version and body rebuild the id, which parses back
			// to the same version.
			rebuilt, err := FormatID(id.Version, id.Body())
			if err != nil || rebuilt != s {
				t.Fatalf("FormatID(%q, %q) = %q, %v; want %q", id.Version, id.Body(), rebuilt, err, s)
			}
			again, err := ParseInstanceID(rebuilt)
			if err != nil || again != id {
				t.Fatalf("re-parse of %q = %+v, %v; want %+v", rebuilt, again, err, id)
			}
		}
		v := id.VersionOrDefault()
		if d.Version != v {
			t.Fatalf("Route(%q).Version = %q, want %q", s, d.Version, v)
		}
		bound := v == "v1" || v == "v2" || v == "v10"
		if d.DeadLetter == bound || (bound && d.Queue != "render-"+v) || (!bound && d.Reason != pipeline.ReasonUnboundVersion) {
			t.Fatalf("Route(%q) = %+v (bound=%v)", s, d, bound)
		}
	})
}

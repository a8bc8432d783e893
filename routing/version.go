package routing

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"edgepipe/pipeline"
)

// Versions with a workflow implementation today.
const (
	V1 = "v1"
	V2 = "v2"

	// DefaultVersion is the version of an id without a prefix.
	DefaultVersion = V1
)

// EnvBindings names the variable that lists the versions a deployment serves.
const EnvBindings = "EDGEPIPE_BINDINGS"

// QueuePrefix + version is the queue of that version.
const QueuePrefix = "render-"

// QueueName is the queue that carries jobs of version, e.g. render-v1.
func QueueName(version string) string { return QueuePrefix + version }

// ValidateVersion checks that v is a version name: 'v' and 1 to
// MaxVersionDigits digits without a leading zero. Errors wrap
// pipeline.ErrInvalidInput.
func ValidateVersion(v string) error {
	if _, err := versionNumber(v); err != nil {
		return err
	}
	return nil
}

// versionNumber returns N for "vN". The digit cap makes Atoi unable to
// overflow.
func versionNumber(v string) (int, error) {
	digits, ok := strings.CutPrefix(v, "v")
	if !ok || digits == "" || len(digits) > MaxVersionDigits || digits[0] == '0' ||
		strings.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("%w: %q is not a version; want v1 … v%s (lowercase v, no leading zero)",
			pipeline.ErrInvalidInput, clip(v), strings.Repeat("9", MaxVersionDigits))
	}
	return strconv.Atoi(digits)
}

// Bindings is the set of versions this deployment has a workflow
// implementation for. The zero value is "unset"; Config treats it as
// DefaultBindings.
type Bindings struct {
	versions []string // unique, ascending by version number; never mutated
}

// DefaultBindings is what an empty EDGEPIPE_BINDINGS means: v1 and v2.
func DefaultBindings() Bindings { return Bindings{versions: []string{V1, V2}} }

// NewBindings builds a set from version names; duplicates are ignored. At
// least one version is required. Errors wrap pipeline.ErrInvalidInput.
func NewBindings(versions ...string) (Bindings, error) {
	b, err := newBindings(versions)
	if err != nil {
		return Bindings{}, fmt.Errorf("bindings: %w", err)
	}
	return b, nil
}

func newBindings(versions []string) (Bindings, error) {
	if len(versions) == 0 {
		return Bindings{}, fmt.Errorf("%w: at least one version is required", pipeline.ErrInvalidInput)
	}
	type numbered struct {
		n int
		v string
	}
	set := make([]numbered, 0, len(versions))
	for _, v := range versions {
		n, err := versionNumber(v)
		if err != nil {
			return Bindings{}, err
		}
		set = append(set, numbered{n, v})
	}
	slices.SortFunc(set, func(a, b numbered) int { return a.n - b.n })
	set = slices.CompactFunc(set, func(a, b numbered) bool { return a.n == b.n })
	out := make([]string, len(set))
	for i, e := range set {
		out[i] = e.v
	}
	return Bindings{versions: out}, nil
}

// ParseBindings reads EDGEPIPE_BINDINGS: a comma-separated list of versions
// such as "v1,v2", without spaces. "" means DefaultBindings. Duplicates are
// ignored; any other deviation is an error naming the variable, because a
// deployment that guesses which versions it serves would route jobs to code
// that does not exist. Errors wrap pipeline.ErrInvalidInput.
func ParseBindings(s string) (Bindings, error) {
	if s == "" {
		return DefaultBindings(), nil
	}
	b, err := newBindings(strings.Split(s, ","))
	if err != nil {
		return Bindings{}, fmt.Errorf("%s=%q (a comma-separated list such as v1,v2, no spaces): %w",
			EnvBindings, clip(s), err)
	}
	return b, nil
}

// Has reports whether version is bound.
func (b Bindings) Has(version string) bool { return slices.Contains(b.versions, version) }

// Versions returns the bound versions in ascending order.
func (b Bindings) Versions() []string { return slices.Clone(b.versions) }

// IsZero reports whether b is the unset zero value.
func (b Bindings) IsZero() bool { return len(b.versions) == 0 }

// String is the EDGEPIPE_BINDINGS form, e.g. "v1,v2"; ParseBindings reads it
// back.
func (b Bindings) String() string { return strings.Join(b.versions, ",") }

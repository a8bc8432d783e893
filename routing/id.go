package routing

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"edgepipe/pipeline"
)

const (
	// IDPattern is the grammar of an instance id, for documentation and for
	// callers that want to validate with a regexp. ParseInstanceID is
	// stricter: it also refuses malformed version prefixes.
	IDPattern = `^(v[0-9]+-)?[A-Za-z0-9_][A-Za-z0-9_-]*$`

	// MaxIDLen is the longest instance id accepted, in bytes, prefix included.
	MaxIDLen = 64

	// MaxVersionDigits caps the version number (v1 … v9999) so that it can
	// never overflow anything that converts it to an integer.
	MaxVersionDigits = 4
)

// ErrMalformedPrefix marks an id that starts like a version prefix but is not
// a well-formed one. It wraps pipeline.ErrInvalidInput. The API refuses such
// ids at submission (400 invalid_instance_id); the router still turns one it
// meets (a job stored before that) into a dead letter with reason
// unbound_version rather than treating the id as un-prefixed.
var ErrMalformedPrefix = fmt.Errorf("%w: malformed version prefix", pipeline.ErrInvalidInput)

// InstanceID is a parsed workflow instance id.
type InstanceID struct {
	Raw      string // the id exactly as given
	Version  string // "v1", "v2", …; "" when the id has no prefix
	Explicit bool   // whether the id carries a version prefix
}

// ParseInstanceID validates id and extracts its version prefix. Errors wrap
// pipeline.ErrInvalidInput; an id that looks like a version prefix but is
// malformed (see the package doc) also matches ErrMalformedPrefix.
func ParseInstanceID(id string) (InstanceID, error) {
	if err := checkGrammar(id); err != nil {
		return InstanceID{}, err
	}
	sep, looks := prefixCandidate(id)
	if !looks {
		return InstanceID{Raw: id}, nil
	}
	if why := prefixProblem(id, sep); why != "" {
		return InstanceID{}, fmt.Errorf("%w in instance id %q: %s", ErrMalformedPrefix, id, why)
	}
	return InstanceID{Raw: id, Version: id[:sep], Explicit: true}, nil
}

// VersionOrDefault is the version the id runs on: its prefix, or
// DefaultVersion when it has none.
func (id InstanceID) VersionOrDefault() string {
	if id.Explicit {
		return id.Version
	}
	return DefaultVersion
}

// Body is the id without its version prefix.
func (id InstanceID) Body() string {
	if id.Explicit {
		return id.Raw[len(id.Version)+1:]
	}
	return id.Raw
}

// String returns the raw id.
func (id InstanceID) String() string { return id.Raw }

// FormatID builds the instance id version + "-" + body, refusing anything
// ParseInstanceID would not parse back to the same version.
func FormatID(version, body string) (string, error) {
	if err := ValidateVersion(version); err != nil {
		return "", err
	}
	id := version + "-" + body
	parsed, err := ParseInstanceID(id)
	if err != nil {
		return "", fmt.Errorf("instance id body %q: %w", clip(body), err)
	}
	if parsed.Version != version { // cannot happen; guards the invariant
		return "", fmt.Errorf("%w: instance id %q parses as version %q, not %q",
			pipeline.ErrInvalidInput, id, parsed.Version, version)
	}
	return id, nil
}

func checkGrammar(id string) error {
	if id == "" {
		return fmt.Errorf("%w: instance id is empty", pipeline.ErrInvalidInput)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: instance id %q is %d bytes long, at most %d allowed",
			pipeline.ErrInvalidInput, clip(id), len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if isBodyByte(c) && (i > 0 || c != '-') {
			continue
		}
		if i == 0 && c == '-' {
			return fmt.Errorf("%w: instance id %q starts with '-'; the first character must be a letter, digit or '_'",
				pipeline.ErrInvalidInput, id)
		}
		r, _ := utf8.DecodeRuneInString(id[i:])
		return fmt.Errorf("%w: instance id %q has character %q at byte %d; only A-Z a-z 0-9 _ - are allowed",
			pipeline.ErrInvalidInput, id, r, i)
	}
	return nil
}

// prefixCandidate reports whether id matches ^[vV][0-9]*[-_], and where the
// separator is. Such an id is either well-formed-prefixed or malformed; it is
// never an un-prefixed id.
func prefixCandidate(id string) (sep int, ok bool) {
	if id[0] != 'v' && id[0] != 'V' {
		return 0, false
	}
	i := 1
	for i < len(id) && isDigit(id[i]) {
		i++
	}
	if i < len(id) && (id[i] == '-' || id[i] == '_') {
		return i, true
	}
	return 0, false
}

// prefixProblem explains what is wrong with the candidate prefix id[:sep+1]
// and the body after it, or returns "" when both are well-formed.
func prefixProblem(id string, sep int) string {
	digits := id[1:sep]
	body := id[sep+1:]
	switch {
	case id[0] == 'V':
		return "the version prefix must use a lowercase 'v'"
	case digits == "":
		return "the version prefix has no version number"
	case digits[0] == '0':
		return "the version number must not start with 0"
	case len(digits) > MaxVersionDigits:
		return "the version number has more than " + strconv.Itoa(MaxVersionDigits) + " digits"
	case id[sep] != '-':
		return "the version prefix must end with '-'"
	case body == "":
		return "nothing follows the version prefix"
	case body[0] == '-':
		return "the id after the version prefix must start with a letter, digit or '_'"
	}
	return ""
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isBodyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '_' || c == '-'
}

// clip shortens untrusted input quoted into error messages.
func clip(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

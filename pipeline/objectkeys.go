package pipeline

import (
	"fmt"
	"strings"
)

// The object key rule, shared by every ObjectStore (storage/fs and
// storage/s3 call it, and the conformance suite holds them to it): 1 to
// MaxObjectKeyLen bytes of [A-Za-z0-9._/-], segments separated by single
// slashes, none empty, none "." or "..", none longer than
// MaxObjectSegmentLen. Keys are derived from hashes, so the rule costs
// nothing and rules out path traversal, case and encoding surprises, and
// names a filesystem cannot hold; a key valid on one backend is valid on all.
const (
	MaxObjectKeyLen     = 1024
	MaxObjectSegmentLen = 200
	MaxContentTypeLen   = 255
	// DefaultContentType is stored when a put names none.
	DefaultContentType = "application/octet-stream"
)

// ValidateObjectKey reports whether key is acceptable to every object store;
// the error matches ErrInvalidInput.
func ValidateObjectKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: object key is empty", ErrInvalidInput)
	}
	return checkPath(key, false)
}

// ValidateObjectPrefix accepts what could begin a valid key: empty, a trailing
// slash, a partial last segment ("renders/ab").
func ValidateObjectPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return checkPath(prefix, true)
}

func checkPath(s string, prefix bool) error {
	what := "object key"
	if prefix {
		what = "key prefix"
	}
	if len(s) > MaxObjectKeyLen {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidInput, what, len(s), MaxObjectKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if !keyByte(s[i]) {
			return fmt.Errorf("%w: %s %.64q: byte %q at %d is not one of [A-Za-z0-9._/-]", ErrInvalidInput, what, s, s[i], i)
		}
	}
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		switch {
		case last && prefix:
			// A partial segment of a prefix only filters names; it
			// is never opened as a path, so even ".." is harmless.
			if len(seg) > MaxObjectSegmentLen {
				return fmt.Errorf("%w: %s %.64q: segment longer than %d bytes", ErrInvalidInput, what, s, MaxObjectSegmentLen)
			}
		case seg == "":
			return fmt.Errorf("%w: %s %.64q has an empty segment (leading, trailing or double slash)", ErrInvalidInput, what, s)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %s %.64q has a %q segment", ErrInvalidInput, what, s, seg)
		case len(seg) > MaxObjectSegmentLen:
			return fmt.Errorf("%w: %s %.64q: segment longer than %d bytes", ErrInvalidInput, what, s, MaxObjectSegmentLen)
		}
	}
	return nil
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '/'
}

// ObjectContentType defaults an empty content type and refuses one that could not
// travel safely as an HTTP header value.
func ObjectContentType(ct string) (string, error) {
	if ct == "" {
		return DefaultContentType, nil
	}
	if len(ct) > MaxContentTypeLen {
		return "", fmt.Errorf("%w: content type is %d bytes, more than %d", ErrInvalidInput, len(ct), MaxContentTypeLen)
	}
	for i := 0; i < len(ct); i++ {
		if ct[i] < 0x20 || ct[i] > 0x7e {
			return "", fmt.Errorf("%w: content type %.64q: byte %q is not printable ASCII", ErrInvalidInput, ct, ct[i])
		}
	}
	return ct, nil
}

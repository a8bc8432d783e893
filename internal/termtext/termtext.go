// Package termtext makes text that came from a server safe to print on one
// terminal line. The client package uses it for its error messages and the
// edgepipe command for everything it prints from an answer: a server (or a
// proxy in front of it) must not be able to move the cursor, clear the
// screen or split one message over several lines.
package termtext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean replaces invalid UTF-8 and control characters (escape sequences,
// line and paragraph separators, bidi controls included) with spaces,
// collapses runs of white space and cuts the result at limit runes (the
// last one becoming "…").
func Clean(s string, limit int) string {
	s = strings.ToValidUTF8(s, " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if limit > 0 && utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		s = string(r[:limit-1]) + "…"
	}
	return s
}

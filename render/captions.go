package render

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Caption layout: at most two lines of about 42 characters per cue (the
// usual broadcast limit), each cue shown for a share of the clip
// proportional to its length, and no cue shorter than minCueMs unless the
// clip itself is shorter.
const (
	captionLineRunes = 42
	captionCueLines  = 2
	minCueMs         = 700
	// tailCueMs is the length of the copy of the last cue that ends every
	// caption track. In a fragmented MP4 the muxer gives the track's final
	// (empty, zero-length) sample the length of the sample before it; a tiny
	// last cue keeps that guess to 1 ms instead of a whole cue, which would
	// otherwise stretch the render's duration by seconds.
	tailCueMs = 1
	// maxCaptionRunes bounds what one clip's caption may carry.
	maxCaptionRunes = 5000
)

// wordJoiner (U+2060) is invisible and unbreakable. Put after '{', '\' and
// '<', it stops ffmpeg's SRT reader from taking narration text for ASS
// override blocks ({\b1}), escapes (\N) or HTML tags (<i>), so captions show
// what was said.
const wordJoiner = "\u2060"

// zeroWidthSpace is the text of a caption that shows nothing.
const zeroWidthSpace = "\u200b"

type cue struct {
	startMs, endMs int
	text           string
}

// normalizeCaption makes narration safe for one SRT cue body: valid UTF-8,
// no control characters, whitespace collapsed (a blank line would end the
// cue), and bounded length.
func normalizeCaption(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return ' '
		}
		if unicode.IsControl(r) || r == utf8.RuneError || r == '\u2060' {
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxCaptionRunes {
		s = string([]rune(s)[:maxCaptionRunes]) + "…"
	}
	return s
}

// wrapCaption breaks text into lines of at most width runes, at spaces when
// possible; a word longer than a line (e.g. unspaced CJK text) is cut.
func wrapCaption(text string, width int) []string {
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(text) {
		w := []rune(word)
		for len(w) > width {
			if len(cur) > 0 {
				lines = append(lines, string(cur))
				cur = nil
			}
			lines = append(lines, string(w[:width]))
			w = w[width:]
		}
		switch {
		case len(w) == 0:
		case len(cur) == 0:
			cur = w
		case len(cur)+1+len(w) <= width:
			cur = append(append(cur, ' '), w...)
		default:
			lines = append(lines, string(cur))
			cur = w
		}
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

// captionCues lays caption out over a clip of clipMs milliseconds: cues
// cover [0, clipMs) without gaps, and the last one is split so the track
// ends with a tailCueMs copy of it (see tailCueMs). It returns nil for an
// empty caption, and one invisible cue (plus its tail) for a caption that is
// only whitespace.
func captionCues(caption string, clipMs int) []cue {
	if caption == "" || clipMs <= 0 {
		return nil
	}
	text := normalizeCaption(caption)
	if text == "" {
		// Asked for a caption track but nothing to show: keep the track (v2
		// clips must all have one to join) with an invisible cue.
		text = zeroWidthSpace
	}
	lines := wrapCaption(text, captionLineRunes)
	var groups []string
	for i := 0; i < len(lines); i += captionCueLines {
		groups = append(groups, strings.Join(lines[i:min(i+captionCueLines, len(lines))], "\n"))
	}
	// Too many cues for the clip: fewer, fuller cues rather than flicker.
	if maxCues := max(1, clipMs/minCueMs); len(groups) > maxCues {
		merged := make([]string, 0, maxCues)
		per := (len(lines) + maxCues - 1) / maxCues
		for i := 0; i < len(lines); i += per {
			merged = append(merged, strings.Join(lines[i:min(i+per, len(lines))], "\n"))
		}
		groups = merged
	}
	cues := layoutCues(groups, clipMs)
	if n := len(cues); n > 0 && cues[n-1].endMs-cues[n-1].startMs > tailCueMs {
		last := &cues[n-1]
		split := last.endMs - tailCueMs
		cues = append(cues, cue{startMs: split, endMs: last.endMs, text: last.text})
		last.endMs = split
	}
	return cues
}

// layoutCues gives each group a share of clipMs proportional to its length,
// without gaps, the last ending exactly at clipMs.
func layoutCues(groups []string, clipMs int) []cue {
	weights := make([]int, len(groups))
	total := 0
	for i, g := range groups {
		weights[i] = utf8.RuneCountInString(g)
		total += weights[i]
	}
	if total == 0 || clipMs <= 0 {
		return nil
	}
	cues := make([]cue, 0, len(groups)+1)
	start, acc, carry := 0, 0, ""
	for i, g := range groups {
		acc += weights[i]
		end := int(int64(clipMs) * int64(acc) / int64(total))
		if i == len(groups)-1 {
			end = clipMs // the last cue always ends with the clip
		}
		if carry != "" {
			g = carry + "\n" + g
		}
		if end <= start {
			carry = g // less than a millisecond: shown with the next cue
			continue
		}
		carry = ""
		cues = append(cues, cue{startMs: start, endMs: end, text: g})
		start = end
	}
	return cues
}

// escapeSRT neutralises the characters ffmpeg's SRT reader treats as markup.
func escapeSRT(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
		if r == '{' || r == '\\' || r == '<' {
			b.WriteString(wordJoiner)
		}
	}
	return b.String()
}

// srt renders cues as an SRT document.
func srt(cues []cue) string {
	var b strings.Builder
	for i, c := range cues {
		fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, srtTime(c.startMs), srtTime(c.endMs), escapeSRT(c.text))
	}
	return b.String()
}

func srtTime(ms int) string {
	return fmt.Sprintf("%02d:%02d:%02d,%03d", ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000)
}

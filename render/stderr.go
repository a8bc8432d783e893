package render

import (
	"slices"
	"strings"
	"sync"
	"unicode"
)

// tailBuffer keeps the last limit bytes written to it. ffmpeg can print
// megabytes of warnings on a bad input; only the end explains the failure.
type tailBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped bool
}

func newTailBuffer(limit int) *tailBuffer { return &tailBuffer{limit: limit} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		t.dropped = true
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.dropped = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.buf)
	if t.dropped {
		// The first line is probably cut in the middle.
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}

const (
	summaryLines    = 6
	summaryMaxBytes = 600
)

// summarize turns a stderr tail into a short, single-line, printable
// message: the last few non-empty lines, with every path in redact replaced
// by its placeholder so that file names (which may be derived from user
// input) do not travel further than the log.
func summarize(stderr string, redact []redaction) string {
	// Longest first: a directory is a prefix of the files inside it.
	redact = slices.Clone(redact)
	slices.SortFunc(redact, func(a, b redaction) int { return len(b.text) - len(a.text) })
	for _, r := range redact {
		if r.text != "" {
			stderr = strings.ReplaceAll(stderr, r.text, r.placeholder)
		}
	}
	var lines []string
	for line := range strings.SplitSeq(stderr, "\n") {
		line = strings.TrimSpace(strings.Map(printable, line))
		if line == "" || strings.HasPrefix(line, "frame=") || strings.HasPrefix(line, "size=") {
			continue // progress lines say nothing about the failure
		}
		lines = append(lines, line)
	}
	if len(lines) > summaryLines {
		lines = lines[len(lines)-summaryLines:]
	}
	s := strings.Join(lines, " | ")
	if len(s) > summaryMaxBytes {
		// Keep the end, where ffmpeg states the final error; cut on a rune
		// boundary.
		cut := len(s) - summaryMaxBytes
		for cut < len(s) && !isRuneStart(s[cut]) {
			cut++
		}
		s = "…" + s[cut:]
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func printable(r rune) rune {
	if r == '\t' {
		return ' '
	}
	if !unicode.IsPrint(r) {
		return -1
	}
	return r
}

type redaction struct{ text, placeholder string }

package render

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"edgepipe/pipeline"
)

func TestConfigDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	d := Config{}.WithDefaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if d.Width != 1280 || d.Height != 720 || d.FPS != 25 || d.SampleRate != 48000 || d.FFmpegPath != "ffmpeg" || d.FFprobePath != "ffprobe" {
		t.Fatalf("unexpected defaults: %+v", d)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"ok 640x360", func(c *Config) { c.Width, c.Height = 640, 360 }, ""},
		{"odd width", func(c *Config) { c.Width = 641 }, "even"},
		{"tiny", func(c *Config) { c.Width, c.Height = 8, 8 }, "outside"},
		{"fps zero after defaults impossible, negative", func(c *Config) { c.FPS = -1 }, "FPS"},
		{"rate not AAC", func(c *Config) { c.SampleRate = 47000 }, "AAC"},
		{"rate not multiple of fps", func(c *Config) { c.FPS = 7 }, "multiple"},
		{"30 fps ok", func(c *Config) { c.FPS = 30 }, ""},
		{"bad preset", func(c *Config) { c.Preset = "warp" }, "preset"},
		{"bad crf", func(c *Config) { c.CRF = 52 }, "CRF"},
		{"bad bitrate", func(c *Config) { c.AudioBitrate = 1 }, "AudioBitrate"},
		{"bad gop", func(c *Config) { c.GOPSeconds = 11 }, "GOP"},
		{"no temp dir", func(c *Config) { c.TempDir = "/nonexistent/dir" }, "TempDir"},
		{"empty ffmpeg path", func(c *Config) { c.FFmpegPath = "" }, "FFmpegPath"},
		{"small stderr", func(c *Config) { c.StderrLimit = 10 }, "StderrLimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Config{}.WithDefaults()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want error containing %q, got %v", tt.want, err)
			}
			if !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Fatalf("config error should match ErrInvalidInput: %v", err)
			}
		})
	}
}

func TestNewMissingBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := New(ctx, Config{FFmpegPath: filepath.Join(t.TempDir(), "no-ffmpeg"), TempDir: t.TempDir()})
	if !errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("want ErrBinaryNotFound, got %v", err)
	}
	var be *BinaryError
	if !errors.As(err, &be) || be.Tool != "ffmpeg" {
		t.Fatalf("want *BinaryError for ffmpeg, got %#v", err)
	}
	for _, want := range []string{`install the Debian package "ffmpeg"`, "apt-get install ffmpeg", EnvFFmpeg, "no-ffmpeg"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("startup error %q does not mention %q", err, want)
		}
	}

	// A program that runs but is not ffmpeg is unusable, not "found".
	truePath := "/bin/true"
	if _, err := os.Stat(truePath); err != nil {
		t.Skip("no /bin/true to stand in for a wrong binary")
	}
	_, err = New(ctx, Config{FFmpegPath: truePath, TempDir: t.TempDir()})
	if !errors.Is(err, ErrBinaryUnusable) || errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("want ErrBinaryUnusable for /bin/true, got %v", err)
	}
}

func TestAlignDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fps  int
		in   []int
		want []int
	}{
		{"aligned stays", 25, []int{1000, 40, 2000}, []int{1000, 40, 2000}},
		{"rounding spread", 25, []int{530, 1210, 870}, []int{520, 1240, 840}}, // ends 520/1760/2600 vs 530/1740/2610
		{"tiny gets one frame", 25, []int{1, 1, 1}, []int{40, 40, 40}},
		{"30 fps", 30, []int{1000, 500, 500}, []int{1000, 500, 500}},
		{"empty", 25, nil, []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := AlignDurations(tt.fps, tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	if AlignDurations(0, []int{1}) != nil {
		t.Fatal("fps 0 must give nil")
	}
}

// TestAlignDurationsBoundsDrift checks the property the renders rely on:
// every prefix of aligned scenes ends within half a frame of the storyboard,
// and each aligned duration renders to exactly the frames it promises.
func TestAlignDurationsBoundsDrift(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, fps := range []int{24, 25, 30, 50} {
		for trial := 0; trial < 200; trial++ {
			n := 1 + rng.IntN(40)
			in := make([]int, n)
			for i := range in {
				in[i] = 100 + rng.IntN(5000)
			}
			out := AlignDurations(fps, in)
			var want, frames int64
			for i := range in {
				want += int64(in[i])
				f := frameCount(out[i], fps)
				if frameMs(f, fps) != out[i] {
					t.Fatalf("fps %d: aligned %d ms is not %d whole frames", fps, out[i], f)
				}
				frames += int64(f)
				gotMs := float64(frames) * 1000 / float64(fps)
				if d := gotMs - float64(want); d > 500/float64(fps)+1e-9 || d < -500/float64(fps)-1e-9 {
					t.Fatalf("fps %d: after scene %d drift %.2f ms exceeds half a frame (in %v out %v)", fps, i, d, in, out)
				}
			}
		}
	}
}

func TestFrameCount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ms, fps, want int }{
		{1000, 25, 25}, {1019, 25, 25}, {1020, 25, 26}, {1, 25, 1}, {0, 25, 1}, {33, 30, 1}, {50, 30, 2},
	} {
		if got := frameCount(tt.ms, tt.fps); got != tt.want {
			t.Errorf("frameCount(%d, %d) = %d, want %d", tt.ms, tt.fps, got, tt.want)
		}
	}
}

func TestCaptionCues(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("narration words flow on and on ", 12)
	tests := []struct {
		name     string
		caption  string
		clipMs   int
		wantNone bool
		minCues  int
	}{
		{"empty", "", 1000, true, 0},
		{"blank keeps an invisible track", " \n\t ", 1000, false, 2},
		{"short", "Hello there.", 1000, false, 2},
		{"long over long clip", long, 20000, false, 4},
		{"long over short clip", long, 800, false, 2},
		{"unspaced CJK", strings.Repeat("가나다라마바사아자차카타파하", 10), 6000, false, 2},
		{"one frame", "x", 40, false, 2},
		{"one millisecond", "x", 1, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cues := captionCues(tt.caption, tt.clipMs)
			if tt.wantNone {
				if cues != nil {
					t.Fatalf("want no cues, got %v", cues)
				}
				return
			}
			if len(cues) < tt.minCues {
				t.Fatalf("want at least %d cues, got %d: %v", tt.minCues, len(cues), cues)
			}
			// Cues tile [0, clipMs) exactly: the clip has a caption the whole
			// time and the track ends where the clip ends.
			at := 0
			for i, c := range cues {
				if c.startMs != at || c.endMs <= c.startMs {
					t.Fatalf("cue %d %+v does not continue at %d", i, c, at)
				}
				for _, line := range strings.Split(c.text, "\n") {
					if utf8.RuneCountInString(line) > captionLineRunes && !strings.Contains(tt.name, "long over short") {
						t.Fatalf("line %q longer than %d runes", line, captionLineRunes)
					}
				}
				at = c.endMs
			}
			if at != tt.clipMs {
				t.Fatalf("cues end at %d, clip at %d", at, tt.clipMs)
			}
			if n := len(cues); n >= 2 {
				last, prev := cues[n-1], cues[n-2]
				if last.endMs-last.startMs != tailCueMs || last.text != prev.text {
					t.Fatalf("track must end with a %d ms copy of the last cue, got %+v after %+v", tailCueMs, last, prev)
				}
			}
			// No text is lost.
			var all []string
			for i, c := range cues {
				if i == len(cues)-1 && len(cues) > 1 {
					break // the tail copy
				}
				all = append(all, strings.ReplaceAll(c.text, "\n", " "))
			}
			want := strings.Join(strings.Fields(normalizeCaption(tt.caption)), "")
			if want == "" {
				want = zeroWidthSpace
			}
			if got := strings.Join(strings.Fields(strings.Join(all, " ")), ""); got != want {
				t.Fatalf("caption text changed:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestLayoutCuesKeepsSlivers(t *testing.T) {
	t.Parallel()
	// "a" deserves 1000/5001 ms: less than one. It must not vanish.
	cues := layoutCues([]string{"a", strings.Repeat("b", 5000)}, 1000)
	if len(cues) != 1 || cues[0].startMs != 0 || cues[0].endMs != 1000 || !strings.HasPrefix(cues[0].text, "a\n") {
		t.Fatalf("cues %+v", cues)
	}
	if layoutCues([]string{""}, 1000) != nil || layoutCues([]string{"a"}, 0) != nil {
		t.Fatal("empty input must give no cues")
	}
}

func TestNormalizeAndEscapeCaption(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, norm string }{
		{"a\n\nb", "a b"},
		{"  spaced\t\tout  ", "spaced out"},
		{"bell\x07char", "bellchar"},
		{"bad \xff utf8", "bad utf8"},
		{"joiner\u2060inside", "joinerinside"},
	}
	for _, tt := range tests {
		if got := normalizeCaption(tt.in); got != tt.norm {
			t.Errorf("normalizeCaption(%q) = %q, want %q", tt.in, got, tt.norm)
		}
	}
	if got := normalizeCaption(strings.Repeat("x", maxCaptionRunes+10)); utf8.RuneCountInString(got) != maxCaptionRunes+1 {
		t.Errorf("long caption not bounded: %d runes", utf8.RuneCountInString(got))
	}
	esc := escapeSRT(`{\b1}<i>x</i>\N`)
	for _, markup := range []string{`{\`, `<i`, `\N`, `</`} {
		if strings.Contains(esc, markup) {
			t.Errorf("escaped caption %q still contains markup %q", esc, markup)
		}
	}
	if strings.ReplaceAll(esc, wordJoiner, "") != `{\b1}<i>x</i>\N` {
		t.Errorf("escaping changed visible text: %q", esc)
	}
	doc := srt([]cue{{0, 1500, "a"}, {1500, 3_723_004, "b"}})
	want := "1\n00:00:00,000 --> 00:00:01,500\na\n\n2\n00:00:01,500 --> 01:02:03,004\nb\n\n"
	if doc != want {
		t.Errorf("srt:\n%q\nwant\n%q", doc, want)
	}
}

func TestTailBufferAndSummary(t *testing.T) {
	t.Parallel()
	tb := newTailBuffer(16)
	tb.Write([]byte("0123456789"))
	tb.Write([]byte("abcdefghij"))
	if got := string(tb.buf); got != "456789abcdefghij" {
		t.Fatalf("tail = %q", got)
	}
	tb.Write([]byte(strings.Repeat("z", 40)))
	if got := string(tb.buf); got != strings.Repeat("z", 16) {
		t.Fatalf("tail after big write = %q", got)
	}

	stderr := "line one\nframe=  10 fps=0.0\n[in#0] /data/tenant-42/secret name.png: No such file or directory\n\n" +
		"Error opening input file /data/tenant-42/secret name.png.\n\x1b[0mError opening input files: No such file or directory\n"
	s := summarize(stderr, []redaction{{"/data/tenant-42", "<dir>"}, {"/data/tenant-42/secret name.png", "<visual>"}})
	if strings.Contains(s, "tenant-42") || strings.Contains(s, "secret") {
		t.Fatalf("summary leaks a path: %q", s)
	}
	if !strings.Contains(s, "<visual>: No such file") || strings.Contains(s, "frame=") || strings.Contains(s, "\x1b") {
		t.Fatalf("summary = %q", s)
	}
	long := strings.Repeat("warning: something odd happened here\n", 100) + "the final error ✓\n"
	s = summarize(long, nil)
	if len(s) > summaryMaxBytes+len("…") || !strings.HasSuffix(s, "the final error ✓") || !utf8.ValidString(s) {
		t.Fatalf("long summary not bounded to its end: %d bytes %q", len(s), s)
	}
}

func TestProcessErrorMessages(t *testing.T) {
	t.Parallel()
	err := error(&ProcessError{Tool: "ffmpeg", Op: "join", ExitCode: 1, Summary: "boom"})
	if !errors.Is(err, ErrProcessFailed) || !strings.Contains(err.Error(), "exit 1") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("bad ProcessError: %v", err)
	}
	var fe *FFmpegError
	if !errors.As(err, &fe) {
		t.Fatal("FFmpegError must be the same type as ProcessError")
	}
	err = &ClipMismatchError{Index: 2, Field: "video size", Want: "320x180", Got: "256x144"}
	if !errors.Is(err, ErrClipMismatch) || !strings.Contains(err.Error(), "clip 2") {
		t.Fatalf("bad ClipMismatchError: %v", err)
	}
}

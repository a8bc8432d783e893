package render

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// fakeTools writes stand-ins for ffmpeg and ffprobe that answer New's
// checks and log every run to the returned file.
func fakeTools(t *testing.T) (ffmpeg, ffprobe, runs string) {
	t.Helper()
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs.log")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho \"" + name + " $*\" >> '" + runs + "'\n" + body
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ffmpeg = write("ffmpeg", `case "$1" in
-version) echo "ffmpeg version 9.9-fake"; exit 0 ;;
-hide_banner) printf ' V....D libx264 x\n A....D aac x\n A....D pcm_s16le x\n S..... mov_text x\n'; exit 0 ;;
esac
exit 1
`)
	ffprobe = write("ffprobe", `echo "ffprobe version 9.9-fake"`+"\n")
	return ffmpeg, ffprobe, runs
}

func countRuns(t *testing.T, runs string) int {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// The binaries are checked once, by New at start-up: the factory makes a
// renderer for any further geometry without running a process, so no job
// pays for (or waits on another job's) ffmpeg -version and -encoders.
func TestFactoryChecksBinariesOnceAtStartUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ffmpeg, ffprobe, runs := fakeTools(t)
	base, err := New(ctx, Config{FFmpegPath: ffmpeg, FFprobePath: ffprobe, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	atStartUp := countRuns(t, runs)
	if atStartUp != 3 {
		t.Fatalf("New ran %d processes, want 3 (ffmpeg -version, ffmpeg -encoders, ffprobe -version)", atStartUp)
	}
	f := Factory(base)
	var first pipeline.Renderer
	for _, g := range []struct{ w, h, fps int }{{640, 360, 30}, {1280, 720, 24}, {640, 360, 30}} {
		r, err := f(ctx, g.w, g.h, g.fps)
		if err != nil {
			t.Fatalf("%dx%d@%d: %v", g.w, g.h, g.fps, err)
		}
		rr := r.(*Renderer)
		c := rr.Config()
		if c.Width != g.w || c.Height != g.h || c.FPS != g.fps || c.FFmpegPath != base.Config().FFmpegPath {
			t.Fatalf("renderer for %dx%d@%d has config %+v", g.w, g.h, g.fps, c)
		}
		// The versions New read go into every clip fingerprint: a
		// renderer without them would let clips of another ffmpeg build
		// be reused.
		if fm, fp := rr.Versions(); fm != "ffmpeg version 9.9-fake" || fp != "ffprobe version 9.9-fake" || rr.log != base.log {
			t.Fatalf("renderer for %dx%d@%d: versions %q, %q, logger kept %v", g.w, g.h, g.fps, fm, fp, rr.log == base.log)
		}
		if first == nil {
			first = r
		} else if g.w == 640 && r != first {
			t.Fatal("a geometry asked for twice got two renderers")
		}
	}
	if n := countRuns(t, runs); n != atStartUp {
		t.Fatalf("the factory ran %d processes for new geometries, want none", n-atStartUp)
	}
	a, _ := f(ctx, 640, 360, 30)
	b, _ := f(ctx, 1280, 720, 24)
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("two geometries share a clip fingerprint")
	}
	if _, err := f(ctx, 641, 360, 30); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("odd width: %v, want ErrInvalidInput", err)
	}
}

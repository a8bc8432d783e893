package render

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// buildClips renders one image scene per duration (aligned first, as the
// pipeline does), alternating narrations that are shorter and longer than
// the scene. With captions, scene i's caption is captionFor(i).
func buildClips(t *testing.T, r *Renderer, dir string, storyboard []int, captions bool) []string {
	t.Helper()
	fx := getFixtures(t)
	ctx := context.Background()
	var clips []string
	for i, d := range r.AlignDurations(storyboard) {
		audio := fx.shortWAV
		if i%2 == 1 {
			audio = fx.longWAV
		}
		caption := ""
		if captions {
			caption = captionFor(i)
		}
		out := filepath.Join(dir, fmt.Sprintf("scene-%02d.mov", i))
		if err := r.SceneFromImage(ctx, fx.image, audio, d, caption, out); err != nil {
			t.Fatalf("scene %d: %v", i, err)
		}
		clips = append(clips, out)
	}
	return clips
}

func captionFor(i int) string {
	return fmt.Sprintf("Scene %d says {\\b1}hello <i>there</i> & \\N goodbye.", i)
}

func sumMs(ds []int) time.Duration {
	var s int
	for _, d := range ds {
		s += d
	}
	return time.Duration(s) * time.Millisecond
}

func joinToFile(t *testing.T, r *Renderer, clips []string, path string) JoinResult {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Join(context.Background(), clips, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	return res
}

// renderReport is what the acceptance test will check, measured.
type renderReport struct {
	storyboard, format, video, audio time.Duration
	frames                           int64
}

// checkRender asserts everything the acceptance test checks with ffprobe,
// plus the byte count and digest Join reported.
func checkRender(t *testing.T, r *Renderer, path string, res JoinResult, storyboard []int, captions bool) renderReport {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if res.Bytes != int64(len(data)) || res.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("JoinResult %d bytes %s, file %d bytes %x", res.Bytes, res.SHA256, len(data), sum)
	}
	p, err := r.Probe(ctx, path)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if !p.IsMP4() || !strings.Contains(p.FormatName, "mp4") {
		t.Fatalf("container %q is not MP4", p.FormatName)
	}
	want := "video:h264,audio:aac"
	if captions {
		want += ",subtitle:mov_text"
	}
	if got := layout(p); got != want {
		t.Fatalf("streams %s, want %s", got, want)
	}
	v, _ := p.FirstStream("video")
	a, _ := p.FirstStream("audio")
	if v.Width != testWidth || v.Height != testHeight || v.PixFmt != "yuv420p" || v.FPS() != testFPS {
		t.Fatalf("video %+v", v)
	}
	if a.SampleRate != 48000 || a.Channels != 2 {
		t.Fatalf("audio %+v", a)
	}
	total := sumMs(storyboard)
	rep := renderReport{storyboard: total, format: p.Duration, video: v.Duration, audio: a.Duration + a.StartTime, frames: p.VideoFrames()}
	if d := (p.Duration - total).Abs(); d > 100*time.Millisecond {
		t.Fatalf("duration %v differs from the storyboard total %v by %v (> 0.1 s)", p.Duration, total, d)
	}
	if d := (v.Duration - total).Abs(); d > time.Second/(2*testFPS) {
		t.Fatalf("video lasts %v, storyboard %v: more than half a frame apart", v.Duration, total)
	}
	// The picture starts at zero and lasts exactly the aligned scenes: no
	// stretched first frame hiding the audio's encoder delay.
	if aligned := sumMs(r.AlignDurations(storyboard)); v.StartTime != 0 || v.Duration != aligned {
		t.Fatalf("video starts at %v and lasts %v, want 0 and %v", v.StartTime, v.Duration, aligned)
	}
	if d := (rep.audio - v.Duration).Abs(); d > 25*time.Millisecond {
		t.Fatalf("audio ends at %v, video at %v", rep.audio, v.Duration)
	}
	wantFrames := int64(math.Round(p.Duration.Seconds() * testFPS))
	if d := rep.frames - wantFrames; d < -1 || d > 1 {
		t.Fatalf("decoded %d frames, duration %v × %d fps = %d (±1)", rep.frames, p.Duration, testFPS, wantFrames)
	}
	var alignedFrames int64
	for _, d := range r.AlignDurations(storyboard) {
		alignedFrames += int64(r.Frames(d))
	}
	if rep.frames != alignedFrames {
		t.Fatalf("decoded %d frames, clips hold %d", rep.frames, alignedFrames)
	}
	if res.Duration != sumMs(r.AlignDurations(storyboard)) || res.Clips != len(storyboard) {
		t.Fatalf("JoinResult duration %v clips %d", res.Duration, res.Clips)
	}
	if captions {
		s, _ := p.FirstStream("subtitle")
		if d := (s.Duration + s.StartTime - v.Duration).Abs(); d > 5*time.Millisecond {
			t.Fatalf("caption track ends at %v, video at %v", s.Duration+s.StartTime, v.Duration)
		}
	}
	return rep
}

// subtitleText returns the raw mov_text samples of a file.
func subtitleText(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-i", path,
		"-map", "0:s:0", "-c:s", "copy", "-f", "data", "pipe:1").Output()
	if err != nil {
		t.Fatalf("extract captions: %v", err)
	}
	// Drop the word joiners escapeSRT added and the line wrapping.
	return strings.ReplaceAll(strings.ReplaceAll(string(out), wordJoiner, ""), "\n", " ")
}

func TestRenderV1AndV2(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	storyboard := []int{1130, 870, 1450}
	for _, tt := range []struct {
		version  string
		captions bool
	}{{"v1", false}, {"v2", true}} {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			clips := buildClips(t, r, dir, storyboard, tt.captions)
			out := filepath.Join(dir, "render.mp4")
			res := joinToFile(t, r, clips, out)
			rep := checkRender(t, r, out, res, storyboard, tt.captions)
			t.Logf("%s: storyboard %v, format %v (drift %v), video %v, audio end %v, %d frames, %d bytes",
				tt.version, rep.storyboard, rep.format, rep.format-rep.storyboard, rep.video, rep.audio, rep.frames, res.Bytes)

			if tt.captions {
				text := subtitleText(t, out)
				for i := range storyboard {
					if !strings.Contains(text, captionFor(i)) {
						t.Fatalf("render captions lack %q verbatim: %q", captionFor(i), text)
					}
				}
			} else {
				// Same clips, same bytes: a retried join stores an identical
				// object.
				again := joinToFile(t, r, clips, filepath.Join(dir, "again.mp4"))
				if again.SHA256 != res.SHA256 {
					t.Fatalf("join is not deterministic: %s vs %s", res.SHA256, again.SHA256)
				}
			}
		})
	}
}

// TestJoinDriftManyScenes: 12 short scenes whose durations are not whole
// frames. Without AlignDurations and PCM clips, rounding and AAC priming add
// up scene after scene.
func TestJoinDriftManyScenes(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	storyboard := []int{530, 1210, 870, 1490, 640, 1030, 770, 1330, 510, 950, 1170, 690}
	dir := t.TempDir()
	clips := buildClips(t, r, dir, storyboard, true)
	out := filepath.Join(dir, "render.mp4")
	res := joinToFile(t, r, clips, out)
	rep := checkRender(t, r, out, res, storyboard, true)
	t.Logf("12 scenes: storyboard %v, format %v (drift %v), video %v (drift %v), audio end %v, %d frames",
		rep.storyboard, rep.format, rep.format-rep.storyboard, rep.video, rep.video-rep.storyboard, rep.audio, rep.frames)
	// Per-scene rounding without alignment would have given:
	var naive time.Duration
	for _, d := range storyboard {
		naive += time.Duration(frameMs(frameCount(d, testFPS), testFPS)) * time.Millisecond
	}
	t.Logf("12 scenes: per-scene rounding alone would give %v (drift %v)", naive, naive-rep.storyboard)
}

func TestNormalizeVideo(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	fx := getFixtures(t)
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		name       string
		video      string
		audio      string
		durationMs int
		caption    string
		wantFrames int64
	}{
		// 1.3 s at 30 fps stretched to 2 s by holding the last frame.
		{"longer than source", fx.video, fx.shortWAV, 2000, "A provider clip.", 50},
		// 0.7 s at 15 fps, 4:4:4, own audio dropped, silence instead; 500 ms is
		// 12.5 frames, rounded to 13.
		{"shorter, no narration", fx.videoSnd, "", 500, "Silent.", 13},
	}
	clips := []string{}
	for i, tt := range tests {
		out := filepath.Join(dir, fmt.Sprintf("norm-%d.mov", i))
		if err := r.NormalizeVideo(ctx, tt.video, tt.audio, tt.durationMs, tt.caption, out); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		p, err := r.Probe(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := p.FirstStream("video")
		a, _ := p.FirstStream("audio")
		want := time.Duration(tt.wantFrames) * time.Second / testFPS
		if v.Width != testWidth || v.Height != testHeight || v.FrameRate != "25/1" || v.PixFmt != "yuv420p" || v.Frames != tt.wantFrames || v.Duration != want {
			t.Fatalf("%s: video %+v, want %d frames %v", tt.name, v, tt.wantFrames, want)
		}
		if a.CodecName != "pcm_s16le" || a.SampleRate != 48000 || a.Channels != 2 || a.Duration != want {
			t.Fatalf("%s: audio %+v, want %v", tt.name, a, want)
		}
		if !p.HasCodec("subtitle", "mov_text") {
			t.Fatalf("%s: no caption track", tt.name)
		}
		clips = append(clips, out)
	}
	// Normalized videos join with image scenes: identical parameter sets.
	// The image scene has no narration text, yet keeps a (blank) caption
	// track so the v2 clips still join.
	img := filepath.Join(dir, "image.mov")
	if err := r.SceneFromImage(ctx, fx.image, fx.longWAV, 1000, " ", img); err != nil {
		t.Fatal(err)
	}
	clips = append([]string{img}, clips...)
	out := filepath.Join(dir, "mixed.mp4")
	res := joinToFile(t, r, clips, out)
	checkRender(t, r, out, res, []int{1000, 2000, 520}, true)
}

func TestJoinRefusesMismatchedClips(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	ctx := context.Background()
	fx := getFixtures(t)
	r := newTestRenderer(t, nil)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.mov")
	if err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, "", base); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		mutate    func(*Config)
		caption   string
		wantField string
	}{
		{"v2 clip after v1 clip", nil, "captioned", "stream layout"},
		{"other size", func(c *Config) { c.Width, c.Height = 256, 144 }, "", "video size"},
		{"other x264 settings", func(c *Config) { c.Preset = "veryfast" }, "", "H.264 parameter sets"},
		{"other frame rate", func(c *Config) { c.FPS = 30 }, "", "frame rate"},
	}
	t.Run("audio shorter than video", func(t *testing.T) {
		t.Parallel()
		// Our own video with another clip's shorter audio: same parameter
		// sets, but a concat would start every later clip too early.
		short := filepath.Join(dir, "short.mov")
		long := filepath.Join(dir, "long.mov")
		for _, c := range []struct {
			path string
			ms   int
		}{{short, 200}, {long, 1000}} {
			if err := r.SceneFromImage(ctx, fx.image, "", c.ms, "", c.path); err != nil {
				t.Fatal(err)
			}
		}
		mixed := filepath.Join(dir, "mixed.mov")
		if out, err := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-i", long, "-i", short,
			"-map", "0:v", "-map", "1:a", "-c", "copy", "-f", "mov", mixed).CombinedOutput(); err != nil {
			t.Fatalf("remux: %v: %s", err, out)
		}
		_, err := r.Join(ctx, []string{base, mixed}, io.Discard)
		var me *ClipMismatchError
		if !errors.As(err, &me) || me.Field != "audio duration" || me.Index != 1 {
			t.Fatalf("want an audio duration mismatch at clip 1, got %v", err)
		}
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			other := r
			if tt.mutate != nil {
				other = newTestRenderer(t, tt.mutate)
			}
			clip := filepath.Join(dir, fmt.Sprintf("other-%d.mov", i))
			if err := other.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, tt.caption, clip); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			_, err := r.Join(ctx, []string{base, clip}, &buf)
			var me *ClipMismatchError
			if !errors.As(err, &me) || !errors.Is(err, ErrClipMismatch) || me.Field != tt.wantField || me.Index != 1 {
				t.Fatalf("want mismatch of %q at clip 1, got %v", tt.wantField, err)
			}
			if buf.Len() != 0 {
				t.Fatalf("a refused join wrote %d bytes", buf.Len())
			}
		})
	}
}

func TestFailuresAreSafeProcessErrors(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	ctx := context.Background()
	fx := getFixtures(t)
	r := newTestRenderer(t, nil)
	dir := filepath.Join(t.TempDir(), "tenant-secret-dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.mov")
	if err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, "", good); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.mov")
	if err := os.WriteFile(garbage, []byte("this is not a movie"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.mov")

	tests := []struct {
		name     string
		run      func() error
		wantTool string
		wantText string
	}{
		{"join missing clip", func() error { _, err := r.Join(ctx, []string{good, missing}, io.Discard); return err }, "ffprobe", "No such file"},
		{"join garbage clip", func() error { _, err := r.Join(ctx, []string{garbage, good}, io.Discard); return err }, "ffprobe", "Invalid data"},
		{"scene missing image", func() error {
			return r.SceneFromImage(ctx, filepath.Join(dir, "nope.png"), fx.shortWAV, 400, "", filepath.Join(dir, "out1.mov"))
		}, "ffmpeg", "<visual>"},
		{"scene garbage audio", func() error {
			return r.SceneFromImage(ctx, fx.image, garbage, 400, "", filepath.Join(dir, "out2.mov"))
		}, "ffmpeg", "<audio>"},
		{"normalize garbage video", func() error {
			return r.NormalizeVideo(ctx, garbage, "", 400, "", filepath.Join(dir, "out3.mov"))
		}, "ffmpeg", "<visual>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run()
			var pe *FFmpegError
			if !errors.As(err, &pe) || !errors.Is(err, ErrProcessFailed) {
				t.Fatalf("want *ProcessError, got %v", err)
			}
			if pe.Tool != tt.wantTool || pe.ExitCode == 0 || !strings.Contains(pe.Summary, tt.wantText) {
				t.Fatalf("error %+v: want tool %s, non-zero exit, summary containing %q", pe, tt.wantTool, tt.wantText)
			}
			if strings.Contains(err.Error(), "tenant-secret-dir") || len(pe.Summary) > summaryMaxBytes+8 {
				t.Fatalf("error leaks a path or is unbounded: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		// Failed scenes leave neither their output nor a partial file.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "out") || strings.Contains(e.Name(), ".partial") {
				t.Errorf("failed run left %s behind", e.Name())
			}
		}
	})
}

func TestSceneRefusesBadInput(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "x.mov")
	for name, err := range map[string]error{
		"zero duration":     r.SceneFromImage(ctx, "a.png", "", 0, "", out),
		"too long":          r.SceneFromImage(ctx, "a.png", "", int(DefaultMaxSceneDuration/time.Millisecond)+1, "", out),
		"no image":          r.SceneFromImage(ctx, "", "", 100, "", out),
		"no video":          r.NormalizeVideo(ctx, "", "", 100, "", out),
		"no output":         r.SceneFromImage(ctx, "a.png", "", 100, "", ""),
		"no clips":          func() error { _, err := r.Join(ctx, nil, io.Discard); return err }(),
		"newline in a clip": func() error { _, err := r.Join(ctx, []string{"a\nfile 'b"}, io.Discard); return err }(),
		"nil writer":        func() error { _, err := r.Join(ctx, []string{"a"}, nil); return err }(),
		"probe newline":     func() error { _, err := r.Probe(ctx, "a\nb"); return err }(),
	} {
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: want ErrInvalidInput, got %v", name, err)
		}
	}
}

// childProcesses lists the pids whose parent is this test binary.
func childProcesses(t *testing.T) []int {
	t.Helper()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var kids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces, so cut at ')'.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(self) {
				kids = append(kids, pid)
			}
		}
	}
	return kids
}

type failingWriter struct {
	err    error
	writes int
}

func (w *failingWriter) Write(p []byte) (int, error) { w.writes++; return 0, w.err }

// TestJoinWriterFailureKillsFFmpeg is deliberately not parallel: it counts
// goroutines and child processes, which other tests would disturb.
func TestJoinWriterFailureKillsFFmpeg(t *testing.T) {
	needFFmpeg(t)
	r := newTestRenderer(t, nil)
	dir := t.TempDir()
	// ~9 s of render: far more than a pipe buffer, so an ffmpeg that was not
	// killed would block on its stdout forever and Join would never return.
	clips := buildClips(t, r, dir, []int{3000, 3000, 3000}, false)
	ctx := context.Background()
	runtime.GC()
	before := runtime.NumGoroutine()

	errUpload := errors.New("upload rejected")
	w := &failingWriter{err: errUpload}
	type result struct {
		res JoinResult
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		res, err := r.Join(ctx, clips, w)
		done <- result{res, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Join did not return after its writer failed: ffmpeg was not killed")
	}
	took := time.Since(start)
	if !errors.Is(got.err, errUpload) || w.writes != 1 {
		t.Fatalf("want the writer's error after one write, got %v after %d writes", got.err, w.writes)
	}
	var pe *ProcessError
	if errors.As(got.err, &pe) {
		t.Fatalf("a writer failure must not be reported as an ffmpeg failure: %v", got.err)
	}
	if kids := childProcesses(t); len(kids) != 0 {
		t.Fatalf("child processes left running: %v", kids)
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("writer failure: Join returned in %v", took)
}

func TestCancellationKillsFFmpeg(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	fx := getFixtures(t)
	dir := t.TempDir()

	t.Run("scene", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		out := filepath.Join(dir, "long.mov")
		start := time.Now()
		// Ten minutes of video: far longer than the test waits.
		err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 600_000, "", out)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("cancel took %v", took)
		}
		if matches, _ := filepath.Glob(filepath.Join(dir, "*long.mov*")); len(matches) != 0 {
			t.Fatalf("canceled scene left %v", matches)
		}
	})
	t.Run("join", func(t *testing.T) {
		t.Parallel()
		clips := buildClips(t, r, t.TempDir(), []int{2000, 2000}, false)
		ctx, cancel := context.WithCancel(context.Background())
		w := writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
		_, err := r.Join(ctx, clips, w)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// memStore is a pipeline.ObjectStore that keeps objects in memory and
// honours the Put contract: a reader error leaves no object.
type memStore struct {
	mu        sync.Mutex
	objects   map[string][]byte
	aborted   int
	failAfter int64 // fail the upload after this many bytes, if > 0
	lieSize   bool  // report one byte more than stored
}

var errStoreDown = errors.New("store unavailable")

func (m *memStore) Put(ctx context.Context, key string, r io.Reader, opts pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	var buf bytes.Buffer
	h := sha256.New()
	src := r
	if m.failAfter > 0 {
		src = io.LimitReader(r, m.failAfter)
	}
	_, err := io.Copy(io.MultiWriter(&buf, h), src)
	if err == nil && m.failAfter > 0 {
		err = errStoreDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.aborted++
		return pipeline.ObjectInfo{}, err
	}
	if m.objects == nil {
		m.objects = map[string][]byte{}
	}
	m.objects[key] = buf.Bytes()
	size := int64(buf.Len())
	if m.lieSize {
		size++
	}
	return pipeline.ObjectInfo{Key: key, Size: size, ContentType: opts.ContentType, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func (m *memStore) Head(context.Context, string) (pipeline.ObjectInfo, error) {
	return pipeline.ObjectInfo{}, pipeline.ErrNotFound
}
func (m *memStore) Get(context.Context, string, int64, int64) (io.ReadCloser, pipeline.ObjectInfo, error) {
	return nil, pipeline.ObjectInfo{}, pipeline.ErrNotFound
}
func (m *memStore) Delete(context.Context, string) error                               { return nil }
func (m *memStore) List(context.Context, string, func(pipeline.ObjectInfo) bool) error { return nil }
func (m *memStore) AbortStaleUploads(context.Context, time.Time) (int, error)          { return 0, nil }
func (m *memStore) Ping(context.Context) error                                         { return nil }

var _ pipeline.ObjectStore = (*memStore)(nil)

func TestJoinToStore(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	r := newTestRenderer(t, nil)
	dir := t.TempDir()
	storyboard := []int{1500, 1500, 1500}
	clips := buildClips(t, r, dir, storyboard, true)
	ctx := context.Background()

	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		st := &memStore{}
		res, info, err := r.JoinToStore(ctx, clips, st, "renders/job-1.mp4", pipeline.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj := st.objects["renders/job-1.mp4"]
		if info.Size != res.Bytes || int64(len(obj)) != res.Bytes || info.SHA256 != res.SHA256 || info.ContentType != ContentTypeMP4 {
			t.Fatalf("info %+v, result %+v, stored %d bytes", info, res, len(obj))
		}
		path := filepath.Join(t.TempDir(), "stored.mp4")
		if err := os.WriteFile(path, obj, 0o644); err != nil {
			t.Fatal(err)
		}
		rep := checkRender(t, r, path, res, storyboard, true)

		// Probing over HTTP (ranged GETs, as from a presigned URL) sees every
		// fragment, not just the first.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			http.ServeContent(w, req, "render.mp4", time.Time{}, bytes.NewReader(obj))
		}))
		defer srv.Close()
		p, err := Probe(ctx, r.Config().FFprobePath, srv.URL+"/render.mp4?X-Amz-Signature=abc")
		if err != nil {
			t.Fatal(err)
		}
		if p.VideoFrames() != rep.frames || p.Duration != rep.format || !p.HasCodec("subtitle", "mov_text") {
			t.Fatalf("probe over HTTP: %d frames %v, file: %d frames %v", p.VideoFrames(), p.Duration, rep.frames, rep.format)
		}
	})
	t.Run("upload fails", func(t *testing.T) {
		t.Parallel()
		st := &memStore{failAfter: 10 << 10}
		_, _, err := r.JoinToStore(ctx, clips, st, "k", pipeline.PutOptions{})
		if !errors.Is(err, errStoreDown) || len(st.objects) != 0 || st.aborted != 1 {
			t.Fatalf("want errStoreDown and no object, got %v, %d objects, %d aborts", err, len(st.objects), st.aborted)
		}
	})
	t.Run("join fails", func(t *testing.T) {
		t.Parallel()
		st := &memStore{}
		_, _, err := r.JoinToStore(ctx, []string{clips[0], filepath.Join(dir, "missing.mov")}, st, "k", pipeline.PutOptions{})
		if !errors.Is(err, ErrProcessFailed) || len(st.objects) != 0 || st.aborted != 1 {
			t.Fatalf("want ErrProcessFailed and an aborted upload, got %v, %d objects, %d aborts", err, len(st.objects), st.aborted)
		}
	})
	t.Run("store miscounts", func(t *testing.T) {
		t.Parallel()
		_, _, err := r.JoinToStore(ctx, clips, &memStore{lieSize: true}, "k", pipeline.PutOptions{})
		if !errors.Is(err, ErrIntegrity) {
			t.Fatalf("want ErrIntegrity, got %v", err)
		}
	})
}

func TestProbeTargets(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	ctx := context.Background()
	// A name ffmpeg would otherwise read as a protocol.
	dir := t.TempDir()
	odd := filepath.Join(dir, "concat:evil.png")
	writePNG(t, odd, 32, 32)
	p, err := Probe(ctx, "ffprobe", odd)
	if err != nil {
		t.Fatalf("probe of a file named like a protocol: %v", err)
	}
	if s, ok := p.FirstStream("video"); !ok || s.CodecName != "png" || s.Width != 32 || s.Frames != 1 {
		t.Fatalf("probe: %+v", p)
	}
	// URLs keep their query (a presigned signature) out of errors.
	_, err = Probe(ctx, "ffprobe", "http://127.0.0.1:1/render.mp4?X-Amz-Signature=topsecret")
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("want an error without the signature, got %v", err)
	}
}

// countingFFprobe is an ffprobe that appends a line to the returned count
// file each time it runs, then runs the real one.
func countingFFprobe(t *testing.T) (path string, count func() int) {
	t.Helper()
	real, err := exec.LookPath("ffprobe")
	if err != nil {
		t.Skip("no ffprobe")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "runs")
	path = filepath.Join(dir, "ffprobe")
	script := fmt.Sprintf("#!/bin/sh\necho run >> '%s'\nexec '%s' \"$@\"\n", log, real)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		b, err := os.ReadFile(log)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("run\n"))
	}
}

// TestJoinTrustsClipsItMade: a join of clips this renderer just made runs
// no ffprobe and reports the same duration a probed join does; a clip that
// changed since, was replaced, or was already joined once is probed; and
// clips with and without captions are still refused without a probe.
func TestJoinTrustsClipsItMade(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	ffprobe, probes := countingFFprobe(t)
	r := newTestRenderer(t, func(c *Config) { c.FFprobePath = ffprobe })
	storyboard := []int{700, 433, 900}
	dir := t.TempDir()
	ctx := context.Background()

	t.Run("unchanged clips are not probed", func(t *testing.T) {
		clips := buildClips(t, r, filepath.Join(dir), storyboard, true)
		before := probes()
		trusted := joinToFile(t, r, clips, filepath.Join(dir, "trusted.mp4"))
		if n := probes() - before; n != 0 {
			t.Fatalf("join of clips it made ran ffprobe %d times", n)
		}
		checkRender(t, r, filepath.Join(dir, "trusted.mp4"), trusted, storyboard, true)
		// Joined once: a second join (a retry) probes them, and must agree.
		before = probes()
		probed := joinToFile(t, r, clips, filepath.Join(dir, "probed.mp4"))
		if n := probes() - before; n != len(clips) {
			t.Fatalf("second join probed %d clips, want %d", n, len(clips))
		}
		if trusted.Duration != probed.Duration || trusted.SHA256 != probed.SHA256 {
			t.Fatalf("trusted join %v %s, probed join %v %s", trusted.Duration, trusted.SHA256, probed.Duration, probed.SHA256)
		}
	})
	changes := []struct {
		name   string
		change func(t *testing.T, clip, other string)
	}{
		{"touched", func(t *testing.T, clip, _ string) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(clip, later, later); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced", func(t *testing.T, clip, other string) {
			if err := os.Rename(other, clip); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a copy with its size and time", func(t *testing.T, clip, _ string) {
			// Only the file's identity tells this one apart.
			fi, err := os.Stat(clip)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(clip)
			if err != nil {
				t.Fatal(err)
			}
			tmp := clip + ".copy"
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, clip); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, fmt.Sprintf("change-%d", i))
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			clips := buildClips(t, r, sub, storyboard, false)
			other := filepath.Join(sub, "other.mov")
			if err := r.SceneFromImage(ctx, getFixtures(t).image, "", 433, "", other); err != nil {
				t.Fatal(err)
			}
			c.change(t, clips[1], other)
			before := probes()
			joinToFile(t, r, clips, filepath.Join(sub, "out.mp4"))
			if n := probes() - before; n != len(clips) {
				t.Fatalf("join after a clip was %s probed %d clips, want %d", c.name, n, len(clips))
			}
		})
	}
	t.Run("captioned after uncaptioned", func(t *testing.T) {
		sub := filepath.Join(dir, "mixed")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		fx := getFixtures(t)
		plain, captioned := filepath.Join(sub, "plain.mov"), filepath.Join(sub, "captioned.mov")
		if err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, "", plain); err != nil {
			t.Fatal(err)
		}
		if err := r.SceneFromImage(ctx, fx.image, fx.shortWAV, 400, "captioned", captioned); err != nil {
			t.Fatal(err)
		}
		before := probes()
		var buf bytes.Buffer
		_, err := r.Join(ctx, []string{plain, captioned}, &buf)
		var me *ClipMismatchError
		if !errors.As(err, &me) || me.Field != "stream layout" || me.Index != 1 || buf.Len() != 0 {
			t.Fatalf("want a stream layout mismatch at clip 1 and nothing written, got %v (%d bytes)", err, buf.Len())
		}
		if n := probes() - before; n != 0 {
			t.Fatalf("refusing clips it made ran ffprobe %d times", n)
		}
	})
}

// TestTrustIsPerGeometry: a clip made by one geometry's Renderer is unknown
// to another's (Factory's renderers share nothing else), so it is probed
// and refused for its size rather than trusted.
func TestTrustIsPerGeometry(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	base := newTestRenderer(t, nil)
	other, err := base.withGeometry(testWidth*2, testHeight*2, testFPS)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	clip := filepath.Join(dir, "base.mov")
	if err := base.SceneFromImage(ctx, getFixtures(t).image, "", 400, "", clip); err != nil {
		t.Fatal(err)
	}
	_, err = other.checkClips(ctx, []string{clip})
	var me *ClipMismatchError
	if !errors.As(err, &me) || me.Field != "video size" {
		t.Fatalf("a clip of %dx%d checked by a %dx%d renderer: %v, want a video size mismatch", testWidth, testHeight, testWidth*2, testHeight*2, err)
	}
}

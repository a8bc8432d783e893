package render

import (
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Test renders are small and fast: 320x180, ultrafast. The codec parameters
// that matter for joining (fps, sample rate, layout) are the real defaults.
const (
	testWidth  = 320
	testHeight = 180
	testFPS    = 25
)

// needFFmpeg skips (visibly) when ffmpeg or ffprobe is missing, and in -short
// mode. CI installs ffmpeg, so these tests do run there.
func needFFmpeg(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("render: skipping ffmpeg test in -short mode")
	}
	for _, bin := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("render: %s not installed (apt-get install ffmpeg); skipping ffmpeg test", bin)
		}
	}
}

func testConfig(t testing.TB) Config {
	return Config{
		Width: testWidth, Height: testHeight, FPS: testFPS, SampleRate: 48000,
		Preset: "ultrafast", TempDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func newTestRenderer(t testing.TB, mutate func(*Config)) *Renderer {
	t.Helper()
	needFFmpeg(t)
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// writePNG writes a w×h gradient with a border, so scaling and padding are
// exercised with a non-16:9 picture.
func writePNG(t testing.TB, path string, w, h int) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(255 * x / w), uint8(255 * y / h), 128, 255}
			if x < 4 || y < 4 || x >= w-4 || y >= h-4 {
				c = color.RGBA{255, 255, 255, 255}
			}
			img.Set(x, y, c)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

// writeWAV writes a 16-bit PCM sine tone, deliberately at a rate and
// channel count other than the render's so resampling is exercised.
func writeWAV(t testing.TB, path string, rate, channels int, dur time.Duration, hz float64) {
	t.Helper()
	n := int(int64(rate) * int64(dur) / int64(time.Second))
	data := make([]byte, 44+2*n*channels)
	copy(data[0:], "RIFF")
	binary.LittleEndian.PutUint32(data[4:], uint32(len(data)-8))
	copy(data[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(data[16:], 16)
	binary.LittleEndian.PutUint16(data[20:], 1) // PCM
	binary.LittleEndian.PutUint16(data[22:], uint16(channels))
	binary.LittleEndian.PutUint32(data[24:], uint32(rate))
	binary.LittleEndian.PutUint32(data[28:], uint32(rate*channels*2))
	binary.LittleEndian.PutUint16(data[32:], uint16(channels*2))
	binary.LittleEndian.PutUint16(data[34:], 16)
	copy(data[36:], "data")
	binary.LittleEndian.PutUint32(data[40:], uint32(2*n*channels))
	for i := range n {
		v := int16(0.3 * math.MaxInt16 * math.Sin(2*math.Pi*hz*float64(i)/float64(rate)))
		for c := range channels {
			binary.LittleEndian.PutUint16(data[44+2*(i*channels+c):], uint16(v))
		}
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sceneFixtures are the shared inputs: one picture and narrations shorter
// and longer than the scenes, made once per test binary.
type sceneFixtures struct {
	dir      string
	image    string
	shortWAV string // 0.6 s: padded with silence
	longWAV  string // 2.5 s: trimmed
	video    string // 400x300 @ 30 fps, 1.3 s, no audio
	videoSnd string // 352x288 @ 15 fps, 0.7 s, with audio
}

var (
	fixturesOnce sync.Once
	fixtures     sceneFixtures
	fixturesErr  error
	fixturesDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixturesDir != "" {
		os.RemoveAll(fixturesDir)
	}
	os.Exit(code)
}

func getFixtures(t testing.TB) sceneFixtures {
	t.Helper()
	fixturesOnce.Do(func() {
		fixturesErr = errors.New("fixture setup did not finish") // until it does
		dir, err := os.MkdirTemp("", "render-fixtures-")
		if err != nil {
			fixturesErr = err
			return
		}
		fixturesDir = dir
		fx := sceneFixtures{dir: dir,
			image:    filepath.Join(dir, "scene's image.png"), // a quote, to exercise list quoting
			shortWAV: filepath.Join(dir, "short.wav"),
			longWAV:  filepath.Join(dir, "long.wav"),
			video:    filepath.Join(dir, "provider.mp4"),
			videoSnd: filepath.Join(dir, "provider-sound.mp4"),
		}
		writePNG(t, fx.image, 300, 200)
		writeWAV(t, fx.shortWAV, 22050, 1, 600*time.Millisecond, 440)
		writeWAV(t, fx.longWAV, 44100, 2, 2500*time.Millisecond, 660)
		ctx := context.Background()
		for _, c := range [][]string{
			{"-f", "lavfi", "-i", "testsrc2=size=400x300:rate=30:duration=1.3", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", fx.video},
			{"-f", "lavfi", "-i", "testsrc=size=352x288:rate=15:duration=0.7", "-f", "lavfi", "-i", "sine=frequency=300:duration=0.7",
				"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv444p", "-c:a", "aac", "-shortest", fx.videoSnd},
		} {
			args := append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-y"}, c...)
			if out, err := exec.CommandContext(ctx, "ffmpeg", args...).CombinedOutput(); err != nil {
				fixturesErr = err
				t.Logf("ffmpeg fixture: %s", out)
				return
			}
		}
		fixtures, fixturesErr = fx, nil
	})
	if fixturesErr != nil {
		t.Fatalf("fixtures: %v", fixturesErr)
	}
	return fixtures
}

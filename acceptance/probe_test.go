//go:build acceptance

package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// prober runs ffprobe and ffmpeg in a container of the base image, so what
// is checked is the file in the bucket read by a stock ffmpeg, not anything
// the host happens to have.
type prober struct {
	t *testing.T
	c *testcontainers.DockerContainer
}

func newProber(ctx context.Context, t *testing.T) *prober {
	t.Helper()
	requireDocker(t)
	c, err := testcontainers.Run(ctx, baseImage, testcontainers.WithCmd("sleep", "infinity"))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start ffprobe container: %v", err)
	}
	return &prober{t: t, c: c}
}

func (p *prober) run(ctx context.Context, cmd ...string) string {
	p.t.Helper()
	code, r, err := p.c.Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		p.t.Fatalf("exec %v: %v", cmd, err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		p.t.Fatalf("%v exited %d: %s", cmd, code, out)
	}
	return string(out)
}

type probeStream struct {
	Index        int    `json:"index"`
	CodecName    string `json:"codec_name"`
	CodecType    string `json:"codec_type"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	RFrameRate   string `json:"r_frame_rate"`
	NbReadFrames string `json:"nb_read_frames"`
	Duration     string `json:"duration"`
}

type probeResult struct {
	Streams []probeStream `json:"streams"`
	Format  struct {
		FormatName string            `json:"format_name"`
		Duration   string            `json:"duration"`
		Tags       map[string]string `json:"tags"`
	} `json:"format"`
}

func (r probeResult) streams(kind string) []probeStream {
	var out []probeStream
	for _, s := range r.Streams {
		if s.CodecType == kind {
			out = append(out, s)
		}
	}
	return out
}

// probe copies an MP4 into the container and decodes every video frame.
func (p *prober) probe(ctx context.Context, name string, mp4 []byte) (probeResult, string) {
	p.t.Helper()
	path := "/tmp/" + name + ".mp4"
	if err := p.c.CopyToContainer(ctx, mp4, path, 0o644); err != nil {
		p.t.Fatalf("copy %s into the ffprobe container: %v", name, err)
	}
	out := p.run(ctx, "ffprobe", "-v", "error", "-count_frames", "-show_streams", "-show_format", "-of", "json", path)
	var r probeResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		p.t.Fatalf("ffprobe output of %s: %v\n%s", name, err, out)
	}
	return r, path
}

// captions dumps the first subtitle track as SRT.
func (p *prober) captions(ctx context.Context, path string) string {
	return p.run(ctx, "ffmpeg", "-v", "error", "-i", path, "-map", "0:s:0", "-f", "srt", "-")
}

// playable is the verdict on one render.
type playable struct {
	Duration   float64
	Frames     int
	Video      string
	Audio      string
	Subtitles  []string
	Resolution string
}

func (v playable) String() string {
	subs := "none"
	if len(v.Subtitles) > 0 {
		subs = strings.Join(v.Subtitles, ",")
	}
	return fmt.Sprintf("%s %s + %s, subtitles %s, %.3fs, %d frames", v.Resolution, v.Video, v.Audio, subs, v.Duration, v.Frames)
}

// checkPlayable asserts the render is an MP4 with H.264 video and AAC audio,
// lasting the storyboard's total (±0.1 s) with total×fps frames (±1).
func checkPlayable(t *testing.T, r probeResult, totalMS, fps int, width, height int) playable {
	t.Helper()
	var v playable
	if !strings.Contains(r.Format.FormatName, "mp4") {
		t.Errorf("container format %q, want MP4", r.Format.FormatName)
	}
	if b := r.Format.Tags["major_brand"]; b == "" || strings.HasPrefix(b, "qt") {
		t.Errorf("major_brand %q, want an ISO/MP4 brand", b)
	}
	videos, audios := r.streams("video"), r.streams("audio")
	if len(videos) != 1 {
		t.Fatalf("%d video streams, want 1: %+v", len(videos), r.Streams)
	}
	if len(audios) != 1 {
		t.Fatalf("%d audio streams, want 1: %+v", len(audios), r.Streams)
	}
	vs, as := videos[0], audios[0]
	v.Video, v.Audio = vs.CodecName, as.CodecName
	v.Resolution = fmt.Sprintf("%dx%d", vs.Width, vs.Height)
	for _, s := range r.streams("subtitle") {
		v.Subtitles = append(v.Subtitles, s.CodecName)
	}
	if vs.CodecName != "h264" {
		t.Errorf("video codec %q, want h264", vs.CodecName)
	}
	if as.CodecName != "aac" {
		t.Errorf("audio codec %q, want aac", as.CodecName)
	}
	if vs.Width != width || vs.Height != height {
		t.Errorf("video %dx%d, want %dx%d", vs.Width, vs.Height, width, height)
	}
	d, err := strconv.ParseFloat(r.Format.Duration, 64)
	if err != nil {
		t.Fatalf("format duration %q: %v", r.Format.Duration, err)
	}
	v.Duration = d
	want := float64(totalMS) / 1000
	if math.Abs(d-want) > 0.1 {
		t.Errorf("duration %.3fs, want %.3fs ± 0.1s", d, want)
	}
	frames, err := strconv.Atoi(vs.NbReadFrames)
	if err != nil {
		t.Fatalf("nb_read_frames %q: %v", vs.NbReadFrames, err)
	}
	v.Frames = frames
	wantFrames := totalMS * fps / 1000
	if frames < wantFrames-1 || frames > wantFrames+1 {
		t.Errorf("decoded %d video frames, want %d ± 1 (%d ms × %d fps)", frames, wantFrames, totalMS, fps)
	}
	return v
}

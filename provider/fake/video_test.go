package fake

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func submitVideo(t *testing.T, h *harness, req VideoRequest, hdr map[string]string) VideoJob {
	t.Helper()
	r := h.post("/v1/videos", req, hdr)
	mustStatus(t, r, http.StatusAccepted)
	var job VideoJob
	if err := json.Unmarshal(r.body, &job); err != nil {
		t.Fatal(err)
	}
	if job.ID == "" || r.header.Get("Location") != "/v1/videos/"+job.ID {
		t.Fatalf("submit answered %s with Location %q", r.body, r.header.Get("Location"))
	}
	return job
}

func videoStatus(t *testing.T, h *harness, id string) VideoJob {
	t.Helper()
	r := h.get("/v1/videos/" + id)
	mustStatus(t, r, http.StatusOK)
	var job VideoJob
	if err := json.Unmarshal(r.body, &job); err != nil {
		t.Fatal(err)
	}
	return job
}

// waitStatus polls until the job reaches want; rendering runs in real time
// even when the server clock is manual.
func waitStatus(t *testing.T, h *harness, id, want string) VideoJob {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		job := videoStatus(t, h, id)
		if job.Status == want {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s (%+v), waited for %s", id, job.Status, job.Error, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestVideoLifecycleFollowsTheServerClock(t *testing.T) {
	t.Parallel()
	clock := pipeline.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHarness(t, Config{FFmpegPath: stubFFmpeg(t, "ffmpeg-stub.sh"), VideoProcessing: time.Second, Clock: clock})

	job := submitVideo(t, h, sampleVideo, map[string]string{HeaderUnitID: "job3/scene1"})
	if job.Status != VideoQueued {
		t.Fatalf("fresh job is %s", job.Status)
	}
	if got := videoStatus(t, h, job.ID).Status; got != VideoQueued {
		t.Fatalf("before any time passed the job is %s", got)
	}
	clock.Advance(600 * time.Millisecond)
	waitStatus(t, h, job.ID, VideoRunning)
	r := h.get("/v1/videos/" + job.ID + "/content")
	mustStatus(t, r, http.StatusConflict)
	if code := r.errorCode(t); code != CodeNotReady {
		t.Fatalf("content of a running job: code %q", code)
	}
	// The render finished long ago in real time; only the server clock holds
	// the job back.
	time.Sleep(50 * time.Millisecond)
	if got := videoStatus(t, h, job.ID).Status; got != VideoRunning {
		t.Fatalf("job is %s before the processing time passed on the server clock", got)
	}
	clock.Advance(400 * time.Millisecond)
	waitStatus(t, h, job.ID, VideoSucceeded)
	r = h.get("/v1/videos/" + job.ID + "/content")
	mustStatus(t, r, http.StatusOK)
	if string(r.body) != "stub mp4\n" || r.header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("content %q (%s), want the stub's file", r.body, r.header.Get("Content-Type"))
	}

	l := h.srv.Ledger()
	if l.Billed.Video != 1 || l.ByUnit["job3/scene1"].Video != 1 {
		t.Fatalf("ledger = %+v, want one billed video", l)
	}
	// Polls and downloads are calls, never bills.
	if l.Calls < 6 {
		t.Fatalf("calls = %d, want every request counted", l.Calls)
	}
}

func TestVideoResubmitIsANewBilledJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{FFmpegPath: stubFFmpeg(t, "ffmpeg-stub.sh"), VideoProcessing: -1})
	hdr := map[string]string{HeaderIdempotencyKey: "vid-key"}
	a := submitVideo(t, h, sampleVideo, hdr)
	b := submitVideo(t, h, sampleVideo, hdr)
	if a.ID == b.ID {
		t.Fatal("resubmission returned the same job")
	}
	if l := h.srv.Ledger(); l.Billed.Video != 2 || l.ByIdempotencyKey["vid-key"] != 2 {
		t.Fatalf("ledger = %+v, want two billed videos", l)
	}
	waitStatus(t, h, a.ID, VideoSucceeded)
	waitStatus(t, h, b.ID, VideoSucceeded)
}

func TestVideoAsyncFail(t *testing.T) {
	t.Parallel()
	clock := pipeline.NewManualClock(time.Unix(0, 0))
	h := newHarness(t, Config{
		FFmpegPath: stubFFmpeg(t, "ffmpeg-stub.sh"), VideoProcessing: time.Second, Clock: clock,
		Faults: mustParseFaults(t, "video:async_fail=1"),
	})
	job := submitVideo(t, h, sampleVideo, nil)
	if job.Status != VideoQueued {
		t.Fatalf("job with a pending async failure is %s at submit", job.Status)
	}
	clock.Advance(500 * time.Millisecond)
	if got := videoStatus(t, h, job.ID).Status; got != VideoRunning {
		t.Fatalf("halfway: %s, want running", got)
	}
	clock.Advance(500 * time.Millisecond)
	st := videoStatus(t, h, job.ID)
	if st.Status != VideoFailed || st.Error == nil || st.Error.Code != CodeGenerationFailed {
		t.Fatalf("status = %+v, want failed/generation_failed", st)
	}
	r := h.get("/v1/videos/" + job.ID + "/content")
	mustStatus(t, r, http.StatusConflict)
	if code := r.errorCode(t); code != CodeJobFailed {
		t.Fatalf("content code = %q", code)
	}
	if l := h.srv.Ledger(); l.Billed.Video != 1 || l.Injected[FaultAsyncFail] != 1 {
		t.Fatalf("ledger = %+v: a failed job was still submitted and billed", l)
	}
}

func TestVideoRenderFailureFailsTheJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{FFmpegPath: stubFFmpeg(t, "ffmpeg-fail.sh"), VideoProcessing: -1})
	job := submitVideo(t, h, sampleVideo, nil)
	st := waitStatus(t, h, job.ID, VideoFailed)
	if st.Error == nil || st.Error.Code != CodeRenderFailed {
		t.Fatalf("status = %+v, want render_failed", st)
	}
}

func TestVideoWithoutFFmpeg(t *testing.T) {
	t.Parallel()
	_, err := New(Config{FFmpegPath: noFFmpeg, RequireFFmpeg: true})
	if !errors.Is(err, ErrFFmpegUnavailable) {
		t.Fatalf("New with RequireFFmpeg and no ffmpeg: %v", err)
	}

	h := newHarness(t, Config{FFmpegPath: noFFmpeg})
	if !errors.Is(h.srv.VideoUnavailable(), ErrFFmpegUnavailable) {
		t.Fatalf("VideoUnavailable() = %v", h.srv.VideoUnavailable())
	}
	r := h.post("/v1/videos", sampleVideo, nil)
	mustStatus(t, r, http.StatusServiceUnavailable)
	if code := r.errorCode(t); code != CodeVideoUnavailable {
		t.Fatalf("code = %q", code)
	}
	// Images and speech keep working.
	mustStatus(t, h.post("/v1/images", sampleImage, nil), 200)
	mustStatus(t, h.post("/v1/speech", sampleSpeech, nil), 200)
	var health map[string]any
	if err := json.Unmarshal(h.get("/healthz").body, &health); err != nil || health["video"] != false || health["video_error"] == nil {
		t.Fatalf("healthz = %v, %v", health, err)
	}
	if l := h.srv.Ledger(); l.Billed.Video != 0 {
		t.Fatalf("a refused video was billed: %+v", l)
	}
}

func TestVideoRejectsBadRequestsAndUnknownIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{FFmpegPath: stubFFmpeg(t, "ffmpeg-stub.sh")})
	for _, req := range []VideoRequest{
		{Prompt: "", DurationMS: 1000, Width: 64, Height: 64},
		{Prompt: "x", DurationMS: 1000, Width: 63, Height: 64},
		{Prompt: "x", DurationMS: 1000, Width: 64, Height: 4000},
		{Prompt: "x", DurationMS: 50, Width: 64, Height: 64},
		{Prompt: "x", DurationMS: 61000, Width: 64, Height: 64},
		{Prompt: "x", DurationMS: 1000, Width: 64, Height: 64, FPS: 61},
		{Prompt: "x", DurationMS: 1000, Width: 64, Height: 64, FPS: -1},
	} {
		mustStatus(t, h.post("/v1/videos", req, nil), http.StatusBadRequest)
	}
	for _, path := range []string{"/v1/videos/vid_nope", "/v1/videos/vid_nope/content", "/v1/nothing"} {
		r := h.get(path)
		mustStatus(t, r, http.StatusNotFound)
		if code := r.errorCode(t); code != CodeNotFound {
			t.Errorf("%s: code %q", path, code)
		}
	}
	if l := h.srv.Ledger(); l.Billed.Video != 0 {
		t.Fatalf("rejected videos were billed: %+v", l)
	}
}

func TestVideoFrames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ms, fps, want int }{
		{1000, 25, 25}, {1200, 25, 30}, {100, 1, 1}, {1500, 1, 2}, {40, 25, 1}, {60000, 60, 3600},
	} {
		if got := VideoFrames(tt.ms, tt.fps); got != tt.want {
			t.Errorf("VideoFrames(%d, %d) = %d, want %d", tt.ms, tt.fps, got, tt.want)
		}
	}
}

// TestVideoRealFFmpeg renders with the real ffmpeg and checks the file with
// ffprobe. CI installs both; elsewhere it skips visibly.
func TestVideoRealFFmpeg(t *testing.T) {
	t.Parallel()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Skip("ffmpeg not in PATH: real MP4 rendering not exercised")
	}
	ffprobe, err := exec.LookPath("ffprobe")
	if err != nil {
		t.Skip("ffprobe not in PATH: real MP4 rendering not checked")
	}
	h := newHarness(t, Config{FFmpegPath: ffmpeg, VideoProcessing: -1})
	tests := []VideoRequest{
		sampleVideo,
		{Prompt: "slow pan", DurationMS: 2000, Width: 160, Height: 90, FPS: 10},
		{Prompt: "odd half size", DurationMS: 500, Width: 66, Height: 38, FPS: 30},
	}
	for _, req := range tests {
		t.Run(req.Prompt, func(t *testing.T) {
			t.Parallel()
			job := submitVideo(t, h, req, nil)
			waitStatus(t, h, job.ID, VideoSucceeded)
			r := h.get("/v1/videos/" + job.ID + "/content")
			mustStatus(t, r, http.StatusOK)
			path := filepath.Join(t.TempDir(), "out.mp4")
			if err := os.WriteFile(path, r.body, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, ffprobe, "-v", "error", "-show_entries",
				"format=duration:stream=codec_type,codec_name,pix_fmt,width,height,nb_frames", "-of", "json", path).Output()
			if err != nil {
				t.Fatalf("ffprobe: %v", err)
			}
			var probe struct {
				Streams []struct {
					CodecType string `json:"codec_type"`
					CodecName string `json:"codec_name"`
					PixFmt    string `json:"pix_fmt"`
					Width     int    `json:"width"`
					Height    int    `json:"height"`
					NbFrames  string `json:"nb_frames"`
				} `json:"streams"`
				Format struct {
					Duration string `json:"duration"`
				} `json:"format"`
			}
			if err := json.Unmarshal(out, &probe); err != nil {
				t.Fatalf("ffprobe output %s: %v", out, err)
			}
			if len(probe.Streams) != 1 {
				t.Fatalf("streams = %+v, want one video stream and no audio", probe.Streams)
			}
			s := probe.Streams[0]
			if s.CodecType != "video" || s.CodecName != "h264" || s.PixFmt != "yuv420p" || s.Width != req.Width || s.Height != req.Height {
				t.Fatalf("stream = %+v", s)
			}
			if s.NbFrames != strconv.Itoa(VideoFrames(req.DurationMS, req.FPS)) {
				t.Errorf("frames = %s, want %d", s.NbFrames, VideoFrames(req.DurationMS, req.FPS))
			}
			d, err := strconv.ParseFloat(probe.Format.Duration, 64)
			if err != nil || math.Abs(d-float64(req.DurationMS)/1000) > 0.05 {
				t.Fatalf("duration = %q, want %.3f s ± 0.05", probe.Format.Duration, float64(req.DurationMS)/1000)
			}
		})
	}
}

package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

// waitVideo polls VideoStatus until the job is done or failed; the fake
// renders in real time even on a manual clock.
func waitVideo(t *testing.T, p *provider.HTTP, id string) pipeline.VideoState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := p.VideoStatus(context.Background(), id)
		if err != nil {
			t.Fatalf("VideoStatus: %v", err)
		}
		if st.Done || st.Failed {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still pending after 30s", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestVideoSubmitPollFetch is the async_pollable flow against the fake:
// submit once, poll the id, fetch the content. Polls and fetches bill
// nothing; content asked for early is "not ready", which is safe to retry.
func TestVideoSubmitPollFetch(t *testing.T) {
	t.Parallel()
	clock := pipeline.NewManualClock(time.Unix(1_700_000_000, 0))
	srv, base := startFake(t, fake.Config{FFmpegPath: stubFFmpeg(t, false), VideoProcessing: time.Second, Clock: clock})
	p := newClient(t, base)
	ctx := context.Background()
	meta := metaFor("job9/scene1", "")

	id, err := p.SubmitVideo(ctx, meta, sampleVideo)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.VideoStatus(ctx, id)
	if err != nil || st.Done || st.Failed {
		t.Fatalf("right after submit: %+v, %v; want pending", st, err)
	}
	_, err = p.FetchVideo(ctx, id)
	wantCallError(t, err, provider.OpVideoFetch, pipeline.OutcomeNotSent, provider.CodeVideoNotReady, 409)

	clock.Advance(time.Second)
	if st := waitVideo(t, p, id); !st.Done || st.Failed || st.Code != "" {
		t.Fatalf("final state %+v, want done", st)
	}
	m, err := p.FetchVideo(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if m.ContentType != provider.ContentTypeMP4 {
		t.Fatalf("ContentType = %q", m.ContentType)
	}
	if b := readMedia(t, m); string(b) != "stub mp4\n" {
		t.Fatalf("content %q, want the stub's output", b)
	}
	l := srv.Ledger()
	if l.Billed.Video != 1 || l.ByUnit[meta.UnitID].Video != 1 || l.Calls < 5 {
		t.Fatalf("ledger %+v, want one billed submit among at least 5 calls", l)
	}
}

// TestVideoFailedJobs: a job the provider gives up on is a state, not an
// error, with a safe code; its content is an error with outcome failed.
func TestVideoFailedJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fail   bool // ffmpeg fails
		faults string
		code   string
	}{
		{"async_fail", false, "video:async_fail=1", provider.CodeGenerationFailed},
		{"render failure", true, "", provider.CodeRenderFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, base := startFake(t, fake.Config{FFmpegPath: stubFFmpeg(t, tt.fail), VideoProcessing: -1})
			setFaults(t, srv, tt.faults)
			p := newClient(t, base)
			id, err := p.SubmitVideo(context.Background(), metaFor("u", ""), sampleVideo)
			if err != nil {
				t.Fatalf("SubmitVideo: %v (an accepted job that later fails is not a submit error)", err)
			}
			if st := waitVideo(t, p, id); !st.Failed || st.Done || st.Code != tt.code || st.Retryable {
				t.Fatalf("state %+v, want failed with %s, not retryable", st, tt.code)
			}
			_, err = p.FetchVideo(context.Background(), id)
			wantCallError(t, err, provider.OpVideoFetch, pipeline.OutcomeFailed, provider.CodeJobFailed, 409)
			if got := srv.Ledger().Billed.Video; got != 1 {
				t.Fatalf("billed %d videos, want 1 (the failed job was still paid for)", got)
			}
		})
	}
}

// TestVideoRealFFmpeg runs the flow with the fake rendering a real H.264 MP4.
// CI installs ffmpeg; elsewhere it skips visibly.
func TestVideoRealFFmpeg(t *testing.T) {
	t.Parallel()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Skip("ffmpeg not in PATH: the real submit→poll→fetch flow is not exercised")
	}
	_, base := startFake(t, fake.Config{FFmpegPath: ffmpeg, VideoProcessing: -1, RequireFFmpeg: true})
	p := newClient(t, base)
	id, err := p.SubmitVideo(context.Background(), metaFor("u", ""), sampleVideo)
	if err != nil {
		t.Fatal(err)
	}
	if st := waitVideo(t, p, id); !st.Done {
		t.Fatalf("state %+v, want done", st)
	}
	m, err := p.FetchVideo(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	b := readMedia(t, m)
	if len(b) < 12 || !bytes.Equal(b[4:8], []byte("ftyp")) {
		t.Fatalf("content (%d bytes) does not start with an MP4 ftyp box", len(b))
	}
	ffprobe, err := exec.LookPath("ffprobe")
	if err != nil {
		t.Log("ffprobe not in PATH: the MP4 was not probed")
		return
	}
	path := filepath.Join(t.TempDir(), "v.mp4")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ffprobe, "-v", "error", "-show_entries",
		"stream=codec_name,width,height", "-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var probe struct {
		Streams []struct {
			CodecName string `json:"codec_name"`
			Width     int    `json:"width"`
			Height    int    `json:"height"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &probe); err != nil {
		t.Fatal(err)
	}
	if len(probe.Streams) != 1 || probe.Streams[0].CodecName != "h264" ||
		probe.Streams[0].Width != sampleVideo.Width || probe.Streams[0].Height != sampleVideo.Height {
		t.Fatalf("probe %+v, want one %dx%d h264 stream", probe.Streams, sampleVideo.Width, sampleVideo.Height)
	}
}

package fake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Video limits. Width and height must be even (H.264 yuv420p).
const (
	MinVideoSide       = 16
	MaxVideoSide       = 1920
	MinVideoDurationMS = 100
	MaxVideoDurationMS = 60_000
	MaxFPS             = 60
	DefaultFPS         = 25
)

// VideoFrames is the number of frames a video of durationMS at fps has: the
// duration rounded to whole frames (at least one). The file lasts
// VideoFrames/fps seconds, exactly durationMS when durationMS×fps is a
// multiple of 1000.
func VideoFrames(durationMS, fps int) int {
	return max(1, (durationMS*fps+500)/1000)
}

type videoJob struct {
	id        string
	req       VideoRequest
	submitted time.Time
	asyncFail bool
	started   bool  // ffmpeg is running or ran
	rendered  bool  // path holds the finished MP4
	renderErr error // ffmpeg failed
	path      string
}

// handleVideoSubmit is POST /v1/videos: an asynchronous job. The call is
// billed when the job is created (the commit); an after-commit fault then
// hides the job id from the client, which is exactly the ambiguous case.
// Idempotency-Key is ignored: a resubmission is a new, billed job.
func (s *Server) handleVideoSubmit(w http.ResponseWriter, r *http.Request) {
	s.ledger.call()
	var req VideoRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := normalizeVideo(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	if s.videoErr != nil {
		writeError(w, http.StatusServiceUnavailable, CodeVideoUnavailable, "video generation is unavailable: "+s.videoErr.Error())
		return
	}
	p := s.draw(OpVideo)
	if !s.beforeCommit(r.Context(), w, p) {
		return
	}
	key, unit := r.Header.Get(HeaderIdempotencyKey), r.Header.Get(HeaderUnitID)
	job := &videoJob{id: s.newVideoID(), req: req, submitted: s.clock().Now(), asyncFail: p.asyncFail}
	if !job.asyncFail && !s.startRender(job) {
		writeError(w, http.StatusServiceUnavailable, CodeVideoUnavailable, "the provider is shutting down")
		return
	}
	s.videosMu.Lock()
	s.videos[job.id] = job
	status := s.videoStatusLocked(job, job.submitted)
	s.videosMu.Unlock()
	s.ledger.bill(OpVideo, unit, key)
	if job.asyncFail {
		s.ledger.inject(FaultAsyncFail)
	}
	s.log.Debug("fake provider: video billed", "id", job.id, "unit", unit, "key", key, "async_fail", job.asyncFail)
	if !s.afterCommit(w, p) {
		return
	}
	w.Header().Set("Location", "/v1/videos/"+job.id)
	writeJSON(w, http.StatusAccepted, status)
}

func normalizeVideo(req *VideoRequest) error {
	if strings.TrimSpace(req.Prompt) == "" {
		return errors.New("prompt is required")
	}
	if n := utf8.RuneCountInString(req.Prompt); n > MaxPromptRunes {
		return fmt.Errorf("prompt has %d characters, the maximum is %d", n, MaxPromptRunes)
	}
	if req.Width < MinVideoSide || req.Width > MaxVideoSide || req.Height < MinVideoSide || req.Height > MaxVideoSide ||
		req.Width%2 != 0 || req.Height%2 != 0 {
		return fmt.Errorf("width and height must be even and in [%d,%d], got %dx%d", MinVideoSide, MaxVideoSide, req.Width, req.Height)
	}
	if req.DurationMS < MinVideoDurationMS || req.DurationMS > MaxVideoDurationMS {
		return fmt.Errorf("duration_ms must be in [%d,%d], got %d", MinVideoDurationMS, MaxVideoDurationMS, req.DurationMS)
	}
	if req.FPS == 0 {
		req.FPS = DefaultFPS
	}
	if req.FPS < 1 || req.FPS > MaxFPS {
		return fmt.Errorf("fps must be in [1,%d], got %d", MaxFPS, req.FPS)
	}
	return nil
}

func (s *Server) newVideoID() string {
	s.chaosMu.Lock()
	defer s.chaosMu.Unlock()
	for {
		id := fmt.Sprintf("vid_%016x", s.idRng.Uint64())
		s.videosMu.Lock()
		_, taken := s.videos[id]
		s.videosMu.Unlock()
		if !taken {
			return id
		}
	}
}

// handleVideoStatus is GET /v1/videos/{id}. Progress is measured on the
// server's clock: queued for the first half of VideoProcessing (or until
// ffmpeg starts), running until VideoProcessing has passed and the file is
// rendered, then succeeded, or failed (async_fail, or ffmpeg failed).
func (s *Server) handleVideoStatus(w http.ResponseWriter, r *http.Request) {
	s.ledger.call()
	id := r.PathValue("id")
	now := s.clock().Now()
	s.videosMu.Lock()
	job, ok := s.videos[id]
	var st VideoJob
	if ok {
		st = s.videoStatusLocked(job, now)
	}
	s.videosMu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "no video job "+strconv.Quote(id))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) videoStatusLocked(j *videoJob, now time.Time) VideoJob {
	elapsed := now.Sub(j.submitted)
	proc := s.cfg.VideoProcessing
	st := VideoJob{ID: j.id}
	switch {
	case elapsed >= proc && j.asyncFail:
		st.Status = VideoFailed
		st.Error = &ErrorBody{Code: CodeGenerationFailed, Message: "the video could not be generated"}
	case elapsed >= proc && j.renderErr != nil:
		st.Status = VideoFailed
		st.Error = &ErrorBody{Code: CodeRenderFailed, Message: "the video could not be rendered"}
	case elapsed >= proc && j.rendered:
		st.Status = VideoSucceeded
	case elapsed < proc/2 || (!j.asyncFail && !j.started):
		st.Status = VideoQueued
	default:
		st.Status = VideoRunning
	}
	return st
}

// handleVideoContent is GET /v1/videos/{id}/content: the MP4 once the job
// succeeded (Range requests work), 409 before.
func (s *Server) handleVideoContent(w http.ResponseWriter, r *http.Request) {
	s.ledger.call()
	id := r.PathValue("id")
	now := s.clock().Now()
	s.videosMu.Lock()
	job, ok := s.videos[id]
	var st VideoJob
	var path string
	if ok {
		st = s.videoStatusLocked(job, now)
		path = job.path
	}
	s.videosMu.Unlock()
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, CodeNotFound, "no video job "+strconv.Quote(id))
		return
	case st.Status == VideoFailed:
		writeError(w, http.StatusConflict, CodeJobFailed, "video job "+id+" failed: "+st.Error.Code)
		return
	case st.Status != VideoSucceeded:
		writeError(w, http.StatusConflict, CodeNotReady, "video job "+id+" is "+st.Status)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		s.log.Error("fake provider: open rendered video", "id", id, "err", err)
		writeError(w, http.StatusInternalServerError, CodeServerError, "rendered video is missing")
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeServerError, "rendered video is unreadable")
		return
	}
	w.Header().Set("Content-Type", "video/mp4")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// startRender runs ffmpeg for job in the background, at most
// RenderConcurrency at a time. It returns false once the server is closed.
func (s *Server) startRender(job *videoJob) bool {
	s.lifeMu.Lock()
	if s.closed {
		s.lifeMu.Unlock()
		return false
	}
	s.bg.Add(1)
	s.lifeMu.Unlock()
	go func() {
		defer s.bg.Done()
		select {
		case s.renderSem <- struct{}{}:
			defer func() { <-s.renderSem }()
		case <-s.bgCtx.Done():
			s.finishRender(job, "", ErrClosed)
			return
		}
		s.videosMu.Lock()
		job.started = true
		s.videosMu.Unlock()
		path, err := s.renderMP4(s.bgCtx, job)
		s.finishRender(job, path, err)
	}()
	return true
}

func (s *Server) finishRender(job *videoJob, path string, err error) {
	if err != nil {
		s.log.Error("fake provider: video render failed", "id", job.id, "err", err)
	}
	s.videosMu.Lock()
	defer s.videosMu.Unlock()
	job.path, job.renderErr, job.rendered = path, err, err == nil
}

func (s *Server) videoDir() (string, error) {
	s.videosMu.Lock()
	defer s.videosMu.Unlock()
	if s.cacheDir != "" {
		return s.cacheDir, os.MkdirAll(s.cacheDir, 0o755)
	}
	dir, err := os.MkdirTemp("", "edgepipe-fake-videos-")
	if err != nil {
		return "", err
	}
	s.cacheDir = dir
	return dir, nil
}

// renderMP4 draws a moving test pattern on the prompt's colour: H.264
// yuv420p, no audio, VideoFrames(duration, fps) frames at fps. It writes to a
// temporary name and renames, so a path is only ever a complete file.
func (s *Server) renderMP4(ctx context.Context, job *videoJob) (string, error) {
	dir, err := s.videoDir()
	if err != nil {
		return "", fmt.Errorf("fake: video cache dir: %w", err)
	}
	req := job.req
	bg := promptColor(req.Prompt)
	final := filepath.Join(dir, job.id+".mp4")
	tmp := filepath.Join(dir, job.id+".tmp.mp4")
	args := []string{
		"-hide_banner", "-loglevel", "error", "-nostdin", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("color=c=0x%02X%02X%02X:s=%dx%d:r=%d", bg.R, bg.G, bg.B, req.Width, req.Height, req.FPS),
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=%d", max(2, req.Width/2), max(2, req.Height/2), req.FPS),
		"-filter_complex", "[0:v][1:v]overlay=x=(W-w)/2:y=(H-h)/2:shortest=1,format=yuv420p[v]",
		"-map", "[v]", "-frames:v", strconv.Itoa(VideoFrames(req.DurationMS, req.FPS)),
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
		"-movflags", "+faststart", "-an", "-f", "mp4", tmp,
	}
	out, err := exec.CommandContext(ctx, s.cfg.FFmpegPath, args...).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp) // best effort: a leftover temp file is never served
		msg := strings.TrimSpace(string(out))
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		return "", fmt.Errorf("fake: ffmpeg: %w: %s", err, msg)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("fake: store rendered video: %w", err)
	}
	return final, nil
}

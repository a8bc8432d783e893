package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"edgepipe/pipeline"
)

// ContentTypeMP4 is the media type of a render.
const ContentTypeMP4 = "video/mp4"

// joinMovflags makes the MP4 streamable from a pipe: fragments start at
// every keyframe, the moov holds no samples, and delay_moov lets the muxer
// write the edit list that hides the AAC encoder delay (see the package
// documentation).
const joinMovflags = "+frag_keyframe+empty_moov+delay_moov+default_base_moof"

// copyBufferSize is the chunk size between ffmpeg's stdout and the writer.
const copyBufferSize = 256 << 10

// JoinResult describes the bytes Join wrote.
type JoinResult struct {
	Bytes  int64  // bytes written to w
	SHA256 string // lowercase hex digest of those bytes
	// Duration is the sum of the clips' durations as probed before the
	// join: what the render's video lasts.
	Duration time.Duration
	Clips    int
}

// Join concatenates clips made by SceneFromImage/NormalizeVideo, in order,
// into one fragmented MP4 written to w as ffmpeg produces it: video and
// captions are copied (-map 0, so a v2 caption track is kept), the clips'
// PCM audio becomes one continuous AAC stream. The digest and size are
// computed on the way; at most one copy buffer is held in memory.
//
// Before starting ffmpeg, Join probes every clip and refuses (with a
// *ClipMismatchError) clips whose codec parameters differ from this
// renderer's or from each other, because a stream copy of such clips
// produces a file that does not play.
//
// If w returns an error, ffmpeg is killed and that error is returned
// (wrapped). If ffmpeg fails, the error is a *ProcessError and the bytes
// already written to w are not a valid render: w's owner must discard them
// (JoinToStore aborts the upload). If ctx ends, ffmpeg is killed and the
// context's error returned.
func (r *Renderer) Join(ctx context.Context, clipPaths []string, w io.Writer) (res JoinResult, err error) {
	ctx, span := r.startProcess(ctx, "ffmpeg", "join")
	defer func() { endProcess(span, err) }()
	return r.join(ctx, clipPaths, w)
}

// join is Join under its span.
func (r *Renderer) join(ctx context.Context, clipPaths []string, w io.Writer) (JoinResult, error) {
	if len(clipPaths) == 0 {
		return JoinResult{}, fmt.Errorf("render: join: %w: no clips", pipeline.ErrInvalidInput)
	}
	if w == nil {
		return JoinResult{}, fmt.Errorf("render: join: %w: nil writer", pipeline.ErrInvalidInput)
	}
	for i, p := range clipPaths {
		if p == "" || hasControl(p) {
			return JoinResult{}, fmt.Errorf("render: join: %w: clip %d has an empty path or one with control characters", pipeline.ErrInvalidInput, i)
		}
	}
	total, err := r.checkClips(ctx, clipPaths)
	if err != nil {
		return JoinResult{}, err
	}

	list, err := r.writeConcatList(clipPaths)
	if err != nil {
		return JoinResult{}, fmt.Errorf("render: join: concat list: %w", err)
	}
	defer os.Remove(list)

	redact := pathRedactions(list, "<list>")
	for i, p := range clipPaths {
		redact = append(redact, pathRedactions(p, "<clip "+strconv.Itoa(i)+">")...)
	}
	args := []string{"-hide_banner", "-nostdin", "-nostats", "-loglevel", "warning",
		// The concat demuxer opens every listed file with the list's
		// protocol whitelist: local files only.
		"-protocol_whitelist", "file", "-f", "concat", "-safe", "0", "-i", fileURL(list),
		"-map", "0", "-c:v", "copy", "-c:s", "copy",
		"-c:a", "aac", "-b:a", strconv.Itoa(r.cfg.AudioBitrate),
		"-map_metadata", "-1", "-map_chapters", "-1",
		"-movflags", joinMovflags, "-f", "mp4", "pipe:1"}

	// runCtx lets a failing writer kill ffmpeg without cancelling the
	// caller's context.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd, tail := r.command(runCtx, r.cfg.FFmpegPath, args)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return JoinResult{}, fmt.Errorf("render: join: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return JoinResult{}, fmt.Errorf("render: join: start ffmpeg: %w", err)
	}

	hash := sha256.New()
	out := &recordingWriter{w: w}
	n, copyErr := io.CopyBuffer(io.MultiWriter(out, hash), stdout, make([]byte, copyBufferSize))
	if out.err != nil {
		cancel() // SIGKILL; Wait then reaps it and closes the pipe
		_ = cmd.Wait()
		r.log.Debug("render: join stopped: writer failed", "bytes", n, "err", out.err)
		return JoinResult{}, fmt.Errorf("render: join: writing the render: %w", out.err)
	}
	waitErr := cmd.Wait()
	r.logStderr(ctx, "join", tail, redact, time.Since(start))
	if err := processFailure(ctx, "ffmpeg", "join", waitErr, tail, redact); err != nil {
		return JoinResult{}, err
	}
	if copyErr != nil {
		return JoinResult{}, fmt.Errorf("render: join: reading ffmpeg output: %w", copyErr)
	}
	if n == 0 {
		return JoinResult{}, &ProcessError{Tool: "ffmpeg", Op: "join", Summary: "no output", ExitCode: 0}
	}
	res := JoinResult{Bytes: n, SHA256: hex.EncodeToString(hash.Sum(nil)), Duration: total, Clips: len(clipPaths)}
	r.log.Debug("render: joined", "clips", res.Clips, "bytes", res.Bytes, "duration", res.Duration, "took", time.Since(start))
	return res, nil
}

// recordingWriter remembers the writer's own error, to tell it apart from a
// failure reading ffmpeg's stdout.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (rw *recordingWriter) Write(p []byte) (int, error) {
	n, err := rw.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		rw.err = err
	}
	return n, err
}

// errPutReturnedEarly: the store's Put returned before reading the render to
// its end, which breaks the ObjectStore contract.
var errPutReturnedEarly = errors.New("render: store returned before reading the whole render")

// JoinToStore is Join streamed straight into store.Put(key): ffmpeg's stdout
// feeds the upload through a pipe, with no temporary copy of the render. If
// ffmpeg fails, the upload's reader fails with that error, so the store
// leaves no object (the ObjectStore contract); if the upload fails, ffmpeg is
// killed. On success the store's recorded size (and digest, when it reports
// one) must equal what Join counted, else the error matches ErrIntegrity.
// opts.ContentType defaults to video/mp4.
func (r *Renderer) JoinToStore(ctx context.Context, clipPaths []string, store pipeline.ObjectStore, key string, opts pipeline.PutOptions) (JoinResult, pipeline.ObjectInfo, error) {
	if store == nil || key == "" {
		return JoinResult{}, pipeline.ObjectInfo{}, fmt.Errorf("render: join to store: %w: no store or key", pipeline.ErrInvalidInput)
	}
	if opts.ContentType == "" {
		opts.ContentType = ContentTypeMP4
	}
	pr, pw := io.Pipe()
	type putResult struct {
		info pipeline.ObjectInfo
		err  error
	}
	done := make(chan putResult, 1)
	go func() {
		// A panicking store must not take the process down: the join
		// fails with an error instead.
		defer func() {
			if r := recover(); r != nil {
				err := fmt.Errorf("render: object store panicked: %v", r)
				pr.CloseWithError(err)
				done <- putResult{err: err}
			}
		}()
		info, err := store.Put(ctx, key, pr, opts)
		// Whatever Put did, Join must not block writing to a pipe nobody
		// reads any more.
		if err != nil {
			pr.CloseWithError(err)
		} else {
			pr.CloseWithError(errPutReturnedEarly)
		}
		done <- putResult{info, err}
	}()

	res, joinErr := r.Join(ctx, clipPaths, pw)
	if joinErr != nil {
		// The store sees the failure as its reader's error and aborts the
		// upload. ctx stays live so that the abort itself can run.
		pw.CloseWithError(joinErr)
	} else {
		pw.Close()
	}
	put := <-done

	switch {
	case joinErr != nil && put.err != nil && !errors.Is(joinErr, put.err):
		return JoinResult{}, pipeline.ObjectInfo{}, fmt.Errorf("%w (upload: %w)", joinErr, put.err)
	case joinErr != nil:
		if put.err == nil {
			r.log.Warn("render: store accepted a failed render; the sweeper must remove it", "key", key)
		}
		return JoinResult{}, pipeline.ObjectInfo{}, joinErr
	case put.err != nil:
		return JoinResult{}, pipeline.ObjectInfo{}, fmt.Errorf("render: join to store: upload: %w", put.err)
	}
	if put.info.Size != res.Bytes || (put.info.SHA256 != "" && !strings.EqualFold(put.info.SHA256, res.SHA256)) {
		return res, put.info, fmt.Errorf("%w: stored %d bytes sha256 %q, rendered %d bytes sha256 %q",
			ErrIntegrity, put.info.Size, put.info.SHA256, res.Bytes, res.SHA256)
	}
	return res, put.info, nil
}

// writeConcatList writes an ffconcat file naming each clip as a file: URL.
// Quoting: inside single quotes everything is literal except the quote
// itself, which is written as quote, backslash, quote, quote (close, escaped
// quote, reopen).
func (r *Renderer) writeConcatList(clipPaths []string) (string, error) {
	var b strings.Builder
	b.WriteString("ffconcat version 1.0\n")
	for _, p := range clipPaths {
		b.WriteString("file '")
		b.WriteString(strings.ReplaceAll(fileURL(p), "'", `'\''`))
		b.WriteString("'\n")
	}
	f, err := os.CreateTemp(r.cfg.TempDir, "edgepipe-concat-*.txt")
	if err != nil {
		return "", err
	}
	_, werr := f.WriteString(b.String())
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", errors.Join(werr, os.Remove(f.Name()))
	}
	return f.Name(), nil
}

// checkClips probes every clip (without decoding) and verifies that all of
// them have this renderer's parameters and the same stream layout and H.264
// headers as the first, so a stream copy is valid. It returns the summed
// video duration. When every clip is one this renderer made and its file is
// unchanged since, nothing is probed: the clip command fixed all of that,
// and only the caption track (present or not) can differ between clips.
func (r *Renderer) checkClips(ctx context.Context, clipPaths []string) (time.Duration, error) {
	if r.made != nil {
		if known, ok := r.made.take(clipPaths); ok {
			return r.checkMade(known)
		}
	}
	probes := make([]ProbeResult, len(clipPaths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.ProbeConcurrency)
	for i, p := range clipPaths {
		g.Go(func() (err error) {
			defer func() {
				if rec := recover(); rec != nil {
					err = fmt.Errorf("render: probing clip %d panicked: %v", i, rec)
				}
			}()
			res, err := probe(gctx, r.cfg.FFprobePath, p, false, r.cfg.StderrLimit)
			if err != nil {
				var pe *ProcessError
				if errors.As(err, &pe) {
					pe.Op = "probe clip " + strconv.Itoa(i)
				}
				return err
			}
			probes[i] = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	var total time.Duration
	for i, p := range probes {
		d, err := r.checkClip(i, p, probes[0])
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// checkMade is checkClips for clips this renderer made: their layouts must
// agree (all captioned or none), and their durations are their frame counts.
func (r *Renderer) checkMade(clips []madeClip) (time.Duration, error) {
	madeLayout := func(c madeClip) string {
		if c.captioned {
			return "video:h264,audio:pcm_s16le,subtitle:mov_text"
		}
		return "video:h264,audio:pcm_s16le"
	}
	var total time.Duration
	for i, c := range clips {
		if c.captioned != clips[0].captioned {
			return 0, &ClipMismatchError{Index: i, Field: "stream layout", Want: madeLayout(clips[0]), Got: madeLayout(c)}
		}
		total += clipDuration(c.frames, r.cfg.FPS)
	}
	return total, nil
}

// layout is a clip's stream list, e.g. "video:h264,audio:pcm_s16le,subtitle:mov_text".
func layout(p ProbeResult) string {
	parts := make([]string, len(p.Streams))
	for i, s := range p.Streams {
		parts[i] = s.CodecType + ":" + s.CodecName
	}
	return strings.Join(parts, ",")
}

func (r *Renderer) checkClip(i int, p, first ProbeResult) (time.Duration, error) {
	c := r.cfg
	mismatch := func(field, want, got string) error {
		return &ClipMismatchError{Index: i, Field: field, Want: want, Got: got}
	}
	if got := layout(p); got != layout(first) {
		return 0, mismatch("stream layout", layout(first), got)
	}
	v, okV := p.FirstStream("video")
	a, okA := p.FirstStream("audio")
	if !okV || !okA || v.CodecName != "h264" || a.CodecName != "pcm_s16le" {
		return 0, mismatch("stream layout", "video:h264,audio:pcm_s16le[,subtitle:mov_text]", layout(p))
	}
	if s, ok := p.FirstStream("subtitle"); ok && s.CodecName != "mov_text" {
		return 0, mismatch("subtitle codec", "mov_text", s.CodecName)
	}
	v0, _ := first.FirstStream("video")
	checks := []struct{ field, want, got string }{
		{"video size", fmt.Sprintf("%dx%d", c.Width, c.Height), fmt.Sprintf("%dx%d", v.Width, v.Height)},
		{"pixel format", "yuv420p", v.PixFmt},
		{"frame rate", strconv.Itoa(c.FPS) + "/1", v.FrameRate},
		{"video time base", v0.TimeBase, v.TimeBase},
		{"H.264 parameter sets", v0.ExtradataHash, v.ExtradataHash},
		{"sample rate", strconv.Itoa(c.SampleRate), strconv.Itoa(a.SampleRate)},
		{"channels", "2", strconv.Itoa(a.Channels)},
	}
	for _, ck := range checks {
		if ck.want != ck.got {
			return 0, mismatch(ck.field, ck.want, ck.got)
		}
	}
	if v.Duration <= 0 {
		return 0, mismatch("video duration", "> 0", v.Duration.String())
	}
	// Clips are cut to the same length in every stream; a longer stream
	// would shift every later clip.
	halfFrame := time.Second / time.Duration(2*c.FPS)
	for _, s := range p.Streams {
		if diff := time.Duration(math.Abs(float64(s.Duration - v.Duration))); s.Duration > 0 && diff >= halfFrame {
			return 0, mismatch(s.CodecType+" duration", v.Duration.String(), s.Duration.String())
		}
	}
	return v.Duration, nil
}

package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgepipe/pipeline"
)

// SceneFromImage makes one scene clip: the still image at imagePath, scaled
// to fit the configured size and padded with black, held for durationMs
// (rounded to the nearest frame, see AlignDurations), with the narration at
// audioPath resampled, trimmed or padded with silence to exactly the clip's
// length. An empty audioPath gives silence. A non-empty caption adds a
// mov_text track covering the whole clip (workflow v2), split into cues of
// at most two 42-character lines timed by length. Join refuses to mix clips
// with and without captions, so a v2 scene without narration must still pass
// a non-empty caption: one made only of whitespace gives a track that shows
// nothing. Caption text is shown verbatim (no SRT/ASS markup is
// interpreted).
//
// The clip is a QuickTime file (H.264 yuv420p, 16-bit PCM, mov_text)
// whatever outPath's extension; it is an intermediate for Join, not a
// deliverable. outPath is written atomically: after an error it does not
// exist (or still holds its previous content).
func (r *Renderer) SceneFromImage(ctx context.Context, imagePath, audioPath string, durationMs int, caption string, outPath string) error {
	if imagePath == "" {
		return fmt.Errorf("render: scene: %w: no image", pipeline.ErrInvalidInput)
	}
	// image2 with pattern_type none: a '%' in a file name is not a sequence
	// pattern. The image is decoded and scaled once; the loop filter then
	// repeats that one frame (image2's own -loop would decode the file again
	// for every frame).
	input := []string{"-f", "image2", "-pattern_type", "none",
		"-framerate", strconv.Itoa(r.cfg.FPS), "-i", fileURL(imagePath)}
	return r.makeClip(ctx, "scene", input, "", "loop=loop=-1:size=1:start=0,", imagePath, audioPath, durationMs, caption, outPath)
}

// NormalizeVideo makes one scene clip from a provider's video: any size,
// frame rate or length, with or without audio. The picture is scaled and
// padded like SceneFromImage's, resampled to the configured frame rate, cut
// to durationMs (rounded to the nearest frame) or extended by holding its
// last frame; the clip's sound is the narration at audioPath (the video's
// own audio is dropped), or silence when audioPath is empty. Captions and
// output as for SceneFromImage, so the clips of both kinds join.
func (r *Renderer) NormalizeVideo(ctx context.Context, videoPath, audioPath string, durationMs int, caption string, outPath string) error {
	if videoPath == "" {
		return fmt.Errorf("render: normalize: %w: no video", pipeline.ErrInvalidInput)
	}
	input := []string{"-i", fileURL(videoPath)}
	// Timestamps from zero and the target frame rate before scaling (less
	// to scale when the source has more frames); afterwards the last frame
	// repeats forever, and trim cuts the clip to its frame count either way.
	pre := fmt.Sprintf("setpts=PTS-STARTPTS,fps=%d,", r.cfg.FPS)
	post := "tpad=stop=-1:stop_mode=clone,"
	return r.makeClip(ctx, "normalize", input, pre, post, videoPath, audioPath, durationMs, caption, outPath)
}

// makeClip runs the ffmpeg command shared by both kinds of clip. pre and
// post are filter-chain pieces (each ending in a comma) placed before and
// after the common scale/pad step.
func (r *Renderer) makeClip(ctx context.Context, op string, visualInput []string, pre, post, visualPath, audioPath string, durationMs int, caption, outPath string) error {
	maxMs := r.cfg.MaxSceneDuration.Milliseconds()
	if durationMs <= 0 || int64(durationMs) > maxMs {
		return fmt.Errorf("render: %s: %w: duration %d ms outside 1..%d ms", op, pipeline.ErrInvalidInput, durationMs, maxMs)
	}
	if outPath == "" {
		return fmt.Errorf("render: %s: %w: no output path", op, pipeline.ErrInvalidInput)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("render: %s: %w", op, context.Cause(ctx))
	}
	c := r.cfg
	frames := frameCount(durationMs, c.FPS)
	samples := int64(frames) * int64(c.SampleRate/c.FPS)
	clipMs := frameMs(frames, c.FPS)

	redact := slices.Concat(pathRedactions(visualPath, "<visual>"), pathRedactions(outPath, "<clip>"),
		pathRedactions(filepath.Dir(outPath), "<dir>"))
	args := []string{"-hide_banner", "-nostdin", "-nostats", "-loglevel", "warning",
		"-protocol_whitelist", "file", "-y"}
	args = append(args, visualInput...)

	if audioPath != "" {
		redact = append(redact, pathRedactions(audioPath, "<audio>")...)
		args = append(args, "-vn", "-i", fileURL(audioPath))
	}
	audioFilter := c.audioFilter(audioPath != "", samples)

	var cleanup []string
	defer func() {
		for _, p := range cleanup {
			_ = os.Remove(p)
		}
	}()
	subInput := -1
	if cues := captionCues(caption, clipMs); len(cues) > 0 {
		name, err := writeCaptions(c.TempDir, cues)
		if name != "" {
			cleanup = append(cleanup, name)
		}
		if err != nil {
			return fmt.Errorf("render: %s: caption file: %w", op, err)
		}
		redact = append(redact, pathRedactions(name, "<captions>")...)
		subInput = 1
		if audioPath != "" {
			subInput = 2
		}
		args = append(args, "-f", "srt", "-i", fileURL(name))
	}

	args = append(args, "-filter_complex", c.videoFilter(pre, post, frames)+";"+audioFilter, "-map", "[v]", "-map", "[a]")
	if subInput >= 0 {
		args = append(args, "-map", strconv.Itoa(subInput)+":s:0", "-c:s", "mov_text")
	}
	args = append(args, c.clipCodecArgs()...)

	tmp, err := reserveTemp(outPath)
	if err != nil {
		return fmt.Errorf("render: %s: %w", op, err)
	}
	cleanup = append(cleanup, tmp)
	redact = append(redact, pathRedactions(tmp, "<clip>")...)
	args = append(args, fileURL(tmp))

	start := time.Now()
	if err := r.runFFmpeg(ctx, op, args, redact); err != nil {
		return err
	}
	if err := os.Rename(tmp, outPath); err != nil {
		return fmt.Errorf("render: %s: %w", op, err)
	}
	cleanup = cleanup[:len(cleanup)-1]
	if r.made != nil {
		r.made.add(outPath, frames, subInput >= 0)
	}
	r.log.Debug("render: clip ready", "op", op, "frames", frames, "duration_ms", clipMs,
		"requested_ms", durationMs, "captions", subInput >= 0, "took", time.Since(start))
	return nil
}

// audioFilter makes the clip's audio track of exactly samples samples: the
// narration (input 1) when there is one, silence otherwise.
func (c Config) audioFilter(narrated bool, samples int64) string {
	if narrated {
		// aresample converts rate and channel layout; apad makes it endless
		// and atrim cuts it at exactly the clip's sample count.
		return fmt.Sprintf("[1:a:0]asetpts=PTS-STARTPTS,aresample=%d,aformat=sample_fmts=s16:channel_layouts=stereo,apad,atrim=end_sample=%d[a]",
			c.SampleRate, samples)
	}
	return fmt.Sprintf("anullsrc=r=%d:cl=stereo,atrim=end_sample=%d,aformat=sample_fmts=s16:channel_layouts=stereo[a]",
		c.SampleRate, samples)
}

// videoFilter is the same picture pipeline for images and videos, so both
// kinds of clip get identical codec parameters: fit inside the frame,
// convert to BT.709 limited-range 4:2:0 in the scaler, centre on black,
// square pixels, constant frame rate, exact frame count.
func (c Config) videoFilter(pre, post string, frames int) string {
	return fmt.Sprintf("[0:v:0]%sscale=%d:%d:force_original_aspect_ratio=decrease:out_color_matrix=bt709:out_range=tv,format=yuv420p,"+
		"pad=%d:%d:(ow-iw)/2:(oh-ih)/2:color=black,setsar=1,%strim=end_frame=%d,setpts=N/%d/TB[v]",
		pre, c.Width, c.Height, c.Width, c.Height, post, frames, c.FPS)
}

// clipCodecArgs are the encoder settings of every clip. They are identical
// for every clip: Join copies the first clip's SPS/PPS for all of them. No
// B-frames, so pts == dts and clips concatenate without composition
// offsets; a keyframe every GOPSeconds (scene cuts off) bounds the render's
// fragments.
func (c Config) clipCodecArgs() []string {
	return []string{
		"-c:v", "libx264", "-preset", c.Preset, "-crf", strconv.Itoa(c.CRF),
		"-bf", "0", "-g", c.gop(), "-sc_threshold", "0",
		"-pix_fmt", "yuv420p", "-colorspace", "bt709", "-color_primaries", "bt709",
		"-color_trc", "bt709", "-color_range", "tv", "-r", strconv.Itoa(c.FPS),
		"-c:a", "pcm_s16le", "-ar", strconv.Itoa(c.SampleRate), "-ac", "2",
		"-map_metadata", "-1", "-map_chapters", "-1",
		"-f", "mov",
	}
}

// writeCaptions writes cues as an SRT file in dir. The file's name is
// returned even with an error, so the caller removes it.
func writeCaptions(dir string, cues []cue) (string, error) {
	f, err := os.CreateTemp(dir, "edgepipe-caption-*.srt")
	if err != nil {
		return "", err
	}
	_, werr := f.WriteString(srt(cues))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return f.Name(), werr
}

// reserveTemp creates an empty file next to outPath for ffmpeg to overwrite,
// so the final rename is atomic and a failed run leaves no partial clip.
func reserveTemp(outPath string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(outPath), "."+filepath.Base(outPath)+".*.partial")
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		return "", errors.Join(err, os.Remove(name))
	}
	return name, nil
}

// fileURL makes path an explicit file: URL so that ffmpeg never reads a
// colon in it as a protocol ("http:", "concat:", "subfile:").
func fileURL(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "file:" + path
}

// pathRedactions covers every spelling of path ffmpeg may print: as given,
// absolute, and as the file: URL we passed.
func pathRedactions(path, placeholder string) []redaction {
	r := []redaction{{path, placeholder}, {fileURL(path), placeholder}}
	if abs, err := filepath.Abs(path); err == nil {
		r = append(r, redaction{abs, placeholder})
	}
	return r
}

// hasControl reports whether s contains a byte that no sane path holds and
// the concat list syntax cannot carry (newlines, NUL).
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

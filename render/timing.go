package render

// frameCount is durationMs rounded to the nearest whole frame, at least one.
func frameCount(durationMs, fps int) int {
	n := (int64(durationMs)*int64(fps) + 500) / 1000
	return int(max(n, 1))
}

// frameMs is the length of n frames in milliseconds, rounded to nearest.
func frameMs(n, fps int) int {
	return int((int64(n)*1000 + int64(fps)/2) / int64(fps))
}

// AlignDurations returns, for each scene duration in milliseconds, a
// duration that is a whole number of frames at fps, such that every prefix
// sum stays within half a frame of the requested prefix sum. Rendering each
// scene with its aligned duration makes the joined render last the
// storyboard total to within half a frame, however many scenes there are,
// and keeps each scene starting within half a frame of its planned time.
// Rounding each scene on its own would instead accumulate up to half a frame
// of error per scene.
//
// Every result is at least one frame. Non-positive inputs are treated as
// zero and get one frame, so callers should validate durations first.
// AlignDurations is deterministic: the same storyboard always gets the same
// aligned durations, so scene results keyed by them are reused on retry.
func AlignDurations(fps int, durationsMs []int) []int {
	if fps <= 0 {
		return nil
	}
	out := make([]int, len(durationsMs))
	var wantMs, doneFrames int64
	for i, d := range durationsMs {
		wantMs += int64(max(d, 0))
		end := (wantMs*int64(fps) + 500) / 1000 // frame boundary nearest the planned end
		n := max(end-doneFrames, 1)
		doneFrames += n
		out[i] = frameMs(int(n), fps)
	}
	return out
}

// AlignDurations is AlignDurations at the renderer's frame rate.
func (r *Renderer) AlignDurations(durationsMs []int) []int {
	return AlignDurations(r.cfg.FPS, durationsMs)
}

// Frames is the number of frames a clip of durationMs gets.
func (r *Renderer) Frames(durationMs int) int { return frameCount(durationMs, r.cfg.FPS) }

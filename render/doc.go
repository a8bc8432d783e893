// Package render turns generated scene material into the final MP4 with
// ffmpeg and ffprobe, run as real processes.
//
// It does three things:
//
//   - SceneFromImage and NormalizeVideo make one clip per scene — a still
//     image or a provider video, plus the narration, plus (for workflow v2)
//     a mov_text caption track — all with identical codec parameters and an
//     exact, frame-aligned duration, so that clips can be joined without
//     re-encoding the video.
//   - Join concatenates clips with the concat demuxer, copying video and
//     captions, and streams a fragmented MP4 from ffmpeg's stdout into an
//     io.Writer (JoinToStore: straight into an object-store upload), hashing
//     and counting on the way. Nothing is buffered whole, in memory or on disk.
//   - Probe reports what a file (or a ranged URL) really contains, including
//     the decoded frame count, so tests and finalize can check the render.
//
// # Why clips carry PCM audio
//
// Every AAC stream starts with 1024 samples of encoder delay ("priming") and
// ends on a 1024-sample frame boundary. Stream-copying AAC clips end to end
// therefore adds about 21 ms of priming plus up to 21 ms of padding at every
// join: audible clicks, audio that drifts behind the picture, and a total
// duration that grows with the number of scenes. Clips therefore keep their
// audio as 16-bit PCM (in a QuickTime .mov container, which carries H.264,
// PCM and mov_text alike), trimmed or padded to exactly the clip's frame
// count; Join copies video and captions and encodes the concatenated PCM to
// AAC once. The audio is then sample-exact across any number of scenes, the
// expensive part (video) is never re-encoded, and the final file still holds
// only H.264 + AAC (+ mov_text).
//
// # Exact durations
//
// A clip lasts a whole number of frames: durationMs is rounded to the nearest
// frame (40 ms at 25 fps). Rounding every scene on its own could drift by
// half a frame per scene; AlignDurations spreads the rounding over the
// storyboard instead, so the joined render is within half a frame of the sum
// of the scene durations however many scenes there are.
//
// # Fragmented output
//
// Join writes `-movflags +frag_keyframe+empty_moov+delay_moov+default_base_moof`.
// delay_moov (beyond the flags named in the design) holds the initial moov
// back until the first fragment is complete — one GOP, at most two seconds of
// video — so the muxer can still write the edit list that hides the AAC
// priming; without it every stream is shifted by 21 ms. Fragments are cut at
// each keyframe (every two seconds and at every scene start), so ffmpeg's own
// memory stays flat too.
package render

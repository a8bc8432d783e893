package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"edgepipe/pipeline"
)

// maxProbeOutput bounds ffprobe's JSON. Ours is a few KB; a crafted file
// with thousands of streams must not make us buffer without limit.
const maxProbeOutput = 4 << 20

// maxProbeSeconds bounds durations read from ffprobe (about 115 days), far
// above any render and far below time.Duration's overflow.
const maxProbeSeconds = 1e7

// probeEntries limits ffprobe's output to what ProbeResult holds (no tags:
// they can be large and carry user text).
const probeEntries = "format=format_name,duration,start_time,size,bit_rate" +
	":stream=index,codec_type,codec_name,profile,width,height,pix_fmt,r_frame_rate,avg_frame_rate,time_base," +
	"sample_rate,channels,sample_fmt,start_time,duration,nb_frames,nb_read_frames,extradata_hash"

// ProbeResult is what ffprobe reports about a media file.
type ProbeResult struct {
	// FormatName is ffprobe's demuxer list, "mov,mp4,m4a,3gp,3g2,mj2" for
	// MP4 and QuickTime files.
	FormatName string
	Duration   time.Duration // container duration (last end minus first start)
	StartTime  time.Duration // may be negative: AAC priming hidden by an edit list
	Size       int64         // bytes, 0 when unknown (URLs without length)
	BitRate    int64         // bits per second, 0 when unknown
	Streams    []Stream
}

// Stream is one elementary stream. Unknown numbers are 0, except the frame
// counts, which are -1 when unknown.
type Stream struct {
	Index        int
	CodecType    string // "video", "audio", "subtitle", "data"
	CodecName    string // "h264", "aac", "mov_text", "pcm_s16le"
	Profile      string
	Width        int
	Height       int
	PixFmt       string
	FrameRate    string // r_frame_rate, e.g. "25/1"
	AvgFrameRate string
	TimeBase     string
	SampleRate   int
	Channels     int
	SampleFmt    string
	StartTime    time.Duration
	Duration     time.Duration
	// Frames is the number of frames ffprobe decoded (nb_read_frames, from
	// -count_frames): the only reliable count for fragmented MP4, whose
	// header has none. -1 when frames were not counted.
	Frames int64
	// HeaderFrames is the container's own count (nb_frames), -1 if absent.
	HeaderFrames int64
	// ExtradataHash is "SHA256:<hex>" of the codec's global header (for
	// H.264 the SPS/PPS), empty when the stream has none.
	ExtradataHash string
}

// FPS is FrameRate as a number, 0 when unknown.
func (s Stream) FPS() float64 { return parseRational(s.FrameRate) }

// VideoFrames is the decoded frame count of the first video stream, -1 when
// there is no video stream or frames were not counted.
func (p ProbeResult) VideoFrames() int64 {
	if s, ok := p.FirstStream("video"); ok {
		return s.Frames
	}
	return -1
}

// HasCodec reports whether some stream has this codec type and name; an
// empty name matches any codec of the type.
func (p ProbeResult) HasCodec(codecType, codecName string) bool {
	for _, s := range p.Streams {
		if s.CodecType == codecType && (codecName == "" || s.CodecName == codecName) {
			return true
		}
	}
	return false
}

// FirstStream returns the first stream of a codec type.
func (p ProbeResult) FirstStream(codecType string) (Stream, bool) {
	for _, s := range p.Streams {
		if s.CodecType == codecType {
			return s, true
		}
	}
	return Stream{}, false
}

// IsMP4 reports whether the container is MP4/QuickTime.
func (p ProbeResult) IsMP4() bool {
	for name := range strings.SplitSeq(p.FormatName, ",") {
		if name == "mp4" || name == "mov" {
			return true
		}
	}
	return false
}

// Probe runs ffprobe on target — a local file or an http(s) URL — and counts
// the decoded frames of every stream (-count_frames decodes the whole file,
// so this costs about one decode). Probe a file or a URL, never a pipe:
// ffprobe reads only the first fragment of a fragmented MP4 from stdin.
// URLs (a presigned GET is fine; ffprobe issues range requests) never
// appear in errors.
func Probe(ctx context.Context, ffprobePath, target string) (ProbeResult, error) {
	return probe(ctx, ffprobePath, target, true, DefaultStderrLimit)
}

// Probe is Probe with the renderer's ffprobe.
func (r *Renderer) Probe(ctx context.Context, target string) (ProbeResult, error) {
	return probe(ctx, r.cfg.FFprobePath, target, true, r.cfg.StderrLimit)
}

func probe(ctx context.Context, ffprobe, target string, countFrames bool, stderrLimit int) (ProbeResult, error) {
	if target == "" || hasControl(target) {
		return ProbeResult{}, fmt.Errorf("render: probe: %w: bad target", pipeline.ErrInvalidInput)
	}
	args := []string{"-hide_banner", "-v", "error"}
	input, redact := target, []redaction{{target, "<target>"}}
	if u, err := url.Parse(target); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		// A presigned URL's query is a credential: redact it on its own too,
		// in case ffprobe prints the URL in another form.
		if u.RawQuery != "" {
			redact = append(redact, redaction{u.RawQuery, "<query>"})
		}
		args = append(args, "-protocol_whitelist", "http,https,tcp,tls")
	} else {
		input = fileURL(target)
		redact = pathRedactions(target, "<target>")
		args = append(args, "-protocol_whitelist", "file")
	}
	if countFrames {
		args = append(args, "-count_frames")
	}
	args = append(args, "-show_data_hash", "sha256", "-show_entries", probeEntries, "-of", "json", "-i", input)

	cmd, tail := stderrCommand(ctx, ffprobe, args, stderrLimit)
	out := &capBuffer{limit: maxProbeOutput}
	cmd.Stdout = out
	err := cmd.Run()
	if out.over {
		return ProbeResult{}, fmt.Errorf("%w: more than %d bytes", ErrProbeOutput, maxProbeOutput)
	}
	if err := processFailure(ctx, "ffprobe", "probe", err, tail, redact); err != nil {
		return ProbeResult{}, err
	}
	return ParseProbeJSON(out.Bytes())
}

// capBuffer is a bytes.Buffer that refuses to grow past limit; the refusal
// closes ffprobe's stdout, which ends it.
type capBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

var errOutputTooLarge = errors.New("output too large")

func (c *capBuffer) Write(p []byte) (int, error) {
	if c.Len()+len(p) > c.limit {
		c.over = true
		return 0, errOutputTooLarge
	}
	return c.Buffer.Write(p)
}

// probeJSON mirrors `ffprobe -of json`. Every scalar is a flexValue because
// ffprobe prints most numbers as strings, some as numbers, and "N/A" for
// unknown values.
type probeJSON struct {
	Format  *probeFormatJSON  `json:"format"`
	Streams []probeStreamJSON `json:"streams"`
}

type probeFormatJSON struct {
	FormatName flexValue `json:"format_name"`
	Duration   flexValue `json:"duration"`
	StartTime  flexValue `json:"start_time"`
	Size       flexValue `json:"size"`
	BitRate    flexValue `json:"bit_rate"`
}

type probeStreamJSON struct {
	Index         flexValue `json:"index"`
	CodecType     flexValue `json:"codec_type"`
	CodecName     flexValue `json:"codec_name"`
	Profile       flexValue `json:"profile"`
	Width         flexValue `json:"width"`
	Height        flexValue `json:"height"`
	PixFmt        flexValue `json:"pix_fmt"`
	RFrameRate    flexValue `json:"r_frame_rate"`
	AvgFrameRate  flexValue `json:"avg_frame_rate"`
	TimeBase      flexValue `json:"time_base"`
	SampleRate    flexValue `json:"sample_rate"`
	Channels      flexValue `json:"channels"`
	SampleFmt     flexValue `json:"sample_fmt"`
	StartTime     flexValue `json:"start_time"`
	Duration      flexValue `json:"duration"`
	NbFrames      flexValue `json:"nb_frames"`
	NbReadFrames  flexValue `json:"nb_read_frames"`
	ExtradataHash flexValue `json:"extradata_hash"`
}

// flexValue holds a JSON scalar as text; null and absent are "".
type flexValue string

func (f *flexValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return errors.New("empty value")
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexValue(s)
	case string(b) == "null":
		*f = ""
	case b[0] == '{' || b[0] == '[':
		return fmt.Errorf("want a scalar, got %.20s", b)
	default: // number or boolean, kept as written
		*f = flexValue(b)
	}
	return nil
}

// known reports whether ffprobe gave a value at all.
func (f flexValue) known() bool { return f != "" && f != "N/A" }

// ParseProbeJSON reads the JSON that `ffprobe -of json -show_format
// -show_streams` prints. It accepts numbers written as strings or numbers,
// treats "N/A" and missing values as unknown, and rejects anything out of
// range; it never panics.
func ParseProbeJSON(data []byte) (ProbeResult, error) {
	var raw probeJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return ProbeResult{}, fmt.Errorf("%w: %w", ErrProbeOutput, err)
	}
	var res ProbeResult
	var err error
	field := func(name string, parse func() error) {
		if err == nil {
			if e := parse(); e != nil {
				err = fmt.Errorf("%w: %s: %w", ErrProbeOutput, name, e)
			}
		}
	}
	if f := raw.Format; f != nil {
		res.FormatName = string(f.FormatName)
		field("format.duration", func() (e error) { res.Duration, e = parseSeconds(f.Duration); return })
		field("format.start_time", func() (e error) { res.StartTime, e = parseSeconds(f.StartTime); return })
		field("format.size", func() (e error) { res.Size, e = parseCount(f.Size, 0); return })
		field("format.bit_rate", func() (e error) { res.BitRate, e = parseCount(f.BitRate, 0); return })
	}
	for i, s := range raw.Streams {
		var st Stream
		p := func(name string, parse func() error) { field(fmt.Sprintf("streams[%d].%s", i, name), parse) }
		p("index", func() (e error) { st.Index, e = parseInt(s.Index); return })
		p("width", func() (e error) { st.Width, e = parseInt(s.Width); return })
		p("height", func() (e error) { st.Height, e = parseInt(s.Height); return })
		p("sample_rate", func() (e error) { st.SampleRate, e = parseInt(s.SampleRate); return })
		p("channels", func() (e error) { st.Channels, e = parseInt(s.Channels); return })
		p("start_time", func() (e error) { st.StartTime, e = parseSeconds(s.StartTime); return })
		p("duration", func() (e error) { st.Duration, e = parseSeconds(s.Duration); return })
		p("nb_frames", func() (e error) { st.HeaderFrames, e = parseCount(s.NbFrames, -1); return })
		p("nb_read_frames", func() (e error) { st.Frames, e = parseCount(s.NbReadFrames, -1); return })
		st.CodecType = string(s.CodecType)
		st.CodecName = string(s.CodecName)
		st.Profile = string(s.Profile)
		st.PixFmt = string(s.PixFmt)
		st.FrameRate = string(s.RFrameRate)
		st.AvgFrameRate = string(s.AvgFrameRate)
		st.TimeBase = string(s.TimeBase)
		st.SampleFmt = string(s.SampleFmt)
		st.ExtradataHash = string(s.ExtradataHash)
		res.Streams = append(res.Streams, st)
	}
	if err != nil {
		return ProbeResult{}, err
	}
	return res, nil
}

func parseSeconds(v flexValue) (time.Duration, error) {
	if !v.known() {
		return 0, nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(f) || math.Abs(f) > maxProbeSeconds {
		return 0, fmt.Errorf("%q out of range", string(v))
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// parseCount reads a non-negative integer, unknown when absent.
func parseCount(v flexValue, unknown int64) (int64, error) {
	if !v.known() {
		return unknown, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("negative %d", n)
	}
	return n, nil
}

// parseInt reads a small non-negative integer (an index, a width, a rate).
func parseInt(v flexValue) (int, error) {
	n, err := parseCount(v, 0)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%d too large", n)
	}
	return int(n), nil
}

// parseRational reads "num/den" (or a plain number) as a float, 0 when
// unknown or malformed.
func parseRational(s string) float64 {
	num, den, found := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0
	}
	if !found {
		return n
	}
	d, err := strconv.ParseFloat(den, 64)
	if err != nil || d == 0 || math.IsNaN(d) || math.IsInf(d, 0) {
		return 0
	}
	return n / d
}

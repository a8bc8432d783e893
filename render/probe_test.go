package render

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseProbeJSONFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file       string
		check      func(t *testing.T, p ProbeResult)
		wantFrames int64
	}{
		{"probe_render_v2.json", func(t *testing.T, p ProbeResult) {
			if !p.IsMP4() || !p.HasCodec("video", "h264") || !p.HasCodec("audio", "aac") || !p.HasCodec("subtitle", "mov_text") {
				t.Fatalf("codecs: %+v", p)
			}
			if p.Duration != 11182333*time.Microsecond || p.StartTime != -21333*time.Microsecond || p.Size != 458851 {
				t.Fatalf("format: %+v", p)
			}
			v, _ := p.FirstStream("video")
			if v.Width != 640 || v.Height != 360 || v.FPS() != 25 || v.HeaderFrames != -1 || v.Duration != 11160*time.Millisecond {
				t.Fatalf("video: %+v", v)
			}
			a, _ := p.FirstStream("audio")
			if a.SampleRate != 48000 || a.Channels != 2 || a.Frames != 525 {
				t.Fatalf("audio: %+v", a)
			}
			if !strings.HasPrefix(v.ExtradataHash, "SHA256:") {
				t.Fatalf("extradata hash: %q", v.ExtradataHash)
			}
		}, 279},
		{"probe_clip_v2.json", func(t *testing.T, p ProbeResult) {
			if !p.HasCodec("audio", "pcm_s16le") || p.HasCodec("audio", "aac") || layout(p) != "video:h264,audio:pcm_s16le,subtitle:mov_text" {
				t.Fatalf("clip layout: %s", layout(p))
			}
		}, -1},
		{"probe_full_mp4.json", func(t *testing.T, p ProbeResult) {
			// Full -show_format -show_streams output: tags, dispositions and
			// all the fields we do not read must be ignored.
			v, ok := p.FirstStream("video")
			if !ok || v.HeaderFrames != 13 || p.HasCodec("video", "hevc") || !p.HasCodec("audio", "") {
				t.Fatalf("full output: %+v", p)
			}
		}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParseProbeJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.VideoFrames(); got != tt.wantFrames {
				t.Fatalf("VideoFrames = %d, want %d", got, tt.wantFrames)
			}
			tt.check(t, p)
		})
	}
}

func TestParseProbeJSONTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr bool
		check   func(p ProbeResult) bool
	}{
		{"empty object", `{}`, false, func(p ProbeResult) bool { return len(p.Streams) == 0 && p.VideoFrames() == -1 && !p.IsMP4() }},
		{"numbers as numbers", `{"streams":[{"index":0,"codec_type":"video","width":320,"height":180,"nb_read_frames":50,"duration":2}],"format":{"duration":2.5,"size":1000}}`,
			false, func(p ProbeResult) bool {
				return p.VideoFrames() == 50 && p.Streams[0].Width == 320 && p.Duration == 2500*time.Millisecond && p.Size == 1000
			}},
		{"N/A and null are unknown", `{"streams":[{"codec_type":"video","duration":"N/A","nb_frames":null,"nb_read_frames":"N/A","width":null}],"format":{"duration":"N/A"}}`,
			false, func(p ProbeResult) bool {
				s := p.Streams[0]
				return s.Duration == 0 && s.HeaderFrames == -1 && s.Frames == -1 && p.Duration == 0
			}},
		{"mp4 name", `{"format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2"}}`, false, func(p ProbeResult) bool { return p.IsMP4() }},
		{"matroska is not mp4", `{"format":{"format_name":"matroska,webm"}}`, false, func(p ProbeResult) bool { return !p.IsMP4() }},
		{"unknown fields ignored", `{"streams":[{"codec_type":"audio","tags":{"x":"y"},"disposition":{"default":1},"side_data_list":[{}]}],"chapters":[]}`,
			false, func(p ProbeResult) bool { return p.HasCodec("audio", "") }},
		{"not json", `frame= 10`, true, nil},
		{"truncated", `{"streams":[{"index":0`, true, nil},
		{"streams not a list", `{"streams":{}}`, true, nil},
		{"object for scalar", `{"format":{"duration":{"a":1}}}`, true, nil},
		{"garbage duration", `{"format":{"duration":"soon"}}`, true, nil},
		{"NaN duration", `{"format":{"duration":"NaN"}}`, true, nil},
		{"infinite duration", `{"format":{"duration":"Inf"}}`, true, nil},
		{"huge duration", `{"format":{"duration":"1e300"}}`, true, nil},
		{"negative frames", `{"streams":[{"nb_read_frames":"-5"}]}`, true, nil},
		{"fractional width", `{"streams":[{"width":"3.5"}]}`, true, nil},
		{"width overflow", `{"streams":[{"width":"99999999999"}]}`, true, nil},
		{"negative start ok", `{"format":{"start_time":"-0.021333"}}`, false, func(p ProbeResult) bool { return p.StartTime == -21333*time.Microsecond }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParseProbeJSON([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, ErrProbeOutput) {
					t.Fatalf("want ErrProbeOutput, got %v (%+v)", err, p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(p) {
				t.Fatalf("unexpected result %+v", p)
			}
		})
	}
}

func TestParseRational(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"25/1": 25, "30000/1001": 30000.0 / 1001, "0/0": 0, "": 0, "x/1": 0, "1/x": 0, "50": 50, "inf/1": 0, "1/0": 0} {
		if got := parseRational(in); got != want {
			t.Errorf("parseRational(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzParseProbeJSON: ffprobe output describes untrusted files (a provider's
// video), so its parser must never panic and must keep its invariants.
func FuzzParseProbeJSON(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "probe_*.json"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"streams":[{"width":1,"nb_read_frames":"N/A","duration":"1e7"}],"format":{"start_time":"-1"}}`))
	f.Add([]byte(`{"format":null,"streams":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProbeJSON(data)
		if err != nil {
			if !errors.Is(err, ErrProbeOutput) {
				t.Fatalf("error does not match ErrProbeOutput: %v", err)
			}
			return
		}
		for _, s := range p.Streams {
			if s.Width < 0 || s.Height < 0 || s.SampleRate < 0 || s.Frames < -1 || s.HeaderFrames < -1 {
				t.Fatalf("negative value: %+v", s)
			}
			_ = s.FPS()
		}
		if p.Duration < -maxProbeSeconds*time.Second || p.Duration > maxProbeSeconds*time.Second {
			t.Fatalf("duration out of range: %v", p.Duration)
		}
		_ = p.VideoFrames()
		_ = p.IsMP4()
	})
}

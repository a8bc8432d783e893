package fake

import (
	"encoding/binary"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

type wavInfo struct {
	format, channels, bits uint16
	rate                   uint32
	samples                []int16
}

func parseWAV(t *testing.T, b []byte) wavInfo {
	t.Helper()
	le := binary.LittleEndian
	if len(b) < 44 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" || string(b[12:16]) != "fmt " || string(b[36:40]) != "data" {
		t.Fatalf("not a canonical WAV file (%d bytes)", len(b))
	}
	if got := le.Uint32(b[4:]); int(got) != len(b)-8 {
		t.Fatalf("RIFF size %d, file has %d bytes", got, len(b))
	}
	data := le.Uint32(b[40:])
	if int(data) != len(b)-44 {
		t.Fatalf("data size %d, file carries %d bytes", data, len(b)-44)
	}
	w := wavInfo{format: le.Uint16(b[20:]), channels: le.Uint16(b[22:]), rate: le.Uint32(b[24:]), bits: le.Uint16(b[34:])}
	if le.Uint32(b[28:]) != w.rate*uint32(w.channels)*uint32(w.bits)/8 {
		t.Fatalf("byte rate %d inconsistent", le.Uint32(b[28:]))
	}
	w.samples = make([]int16, data/2)
	for i := range w.samples {
		w.samples[i] = int16(le.Uint16(b[44+2*i:]))
	}
	return w
}

func TestSpeechReturnsWAVWhoseLengthFollowsTheText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	tests := []struct {
		name string
		req  SpeechRequest
		want time.Duration
		rate uint32
	}{
		{"short text gets the minimum", SpeechRequest{Text: "hi"}, 300 * time.Millisecond, 48000},
		{"55 ms per character", SpeechRequest{Text: strings.Repeat("a", 20)}, 1100 * time.Millisecond, 48000},
		{"runes, not bytes", SpeechRequest{Text: "안녕하세요 여러분"}, 9 * 55 * time.Millisecond * 1, 48000},
		{"sentence at 16 kHz", SpeechRequest{Text: strings.Repeat("narration ", 10), SampleRate: 16000, Voice: "low"}, 100 * 55 * time.Millisecond, 16000},
		{"odd sample rate", SpeechRequest{Text: strings.Repeat("x", 33), SampleRate: 44100}, 33 * 55 * time.Millisecond, 44100},
		{"capped at 60 s", SpeechRequest{Text: strings.Repeat("long ", 300), SampleRate: 8000}, time.Minute, 8000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := SpeechDuration(tt.req.Text); got != tt.want {
				t.Fatalf("SpeechDuration = %s, want %s", got, tt.want)
			}
			r := h.post("/v1/speech", tt.req, nil)
			mustStatus(t, r, http.StatusOK)
			if ct := r.header.Get("Content-Type"); ct != "audio/wav" {
				t.Errorf("Content-Type = %q", ct)
			}
			w := parseWAV(t, r.body)
			if w.format != 1 || w.channels != 1 || w.bits != 16 || w.rate != tt.rate {
				t.Fatalf("format %d, %d ch, %d bit, %d Hz; want PCM mono 16 bit %d Hz", w.format, w.channels, w.bits, w.rate, tt.rate)
			}
			got := time.Duration(float64(len(w.samples)) / float64(w.rate) * float64(time.Second))
			if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
				t.Fatalf("audio lasts %s, want %s", got, tt.want)
			}
			var sum float64
			var peak int16
			for _, s := range w.samples {
				sum += float64(s) * float64(s)
				peak = max(peak, s, -s)
			}
			rms := math.Sqrt(sum/float64(len(w.samples))) / math.MaxInt16
			if rms < 0.02 {
				t.Fatalf("audio is (nearly) silent: RMS %.4f of full scale", rms)
			}
			if float64(peak)/math.MaxInt16 > 0.5 {
				t.Fatalf("audio is loud: peak %d", peak)
			}
		})
	}
}

func TestSpeechVoiceChangesTheSound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	a := h.post("/v1/speech", SpeechRequest{Text: "same words", Voice: "a"}, nil)
	b := h.post("/v1/speech", SpeechRequest{Text: "same words", Voice: "b"}, nil)
	mustStatus(t, a, 200)
	mustStatus(t, b, 200)
	if string(a.body) == string(b.body) {
		t.Fatal("two voices produced identical audio")
	}
}

// The provider of the double-billed voice incident: the key is accepted and
// ignored, so a retry with the same key is billed again.
func TestSpeechSameKeyIsBilledTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	hdr := map[string]string{HeaderIdempotencyKey: "voice-1", HeaderUnitID: "job9/scene2"}
	mustStatus(t, h.post("/v1/speech", sampleSpeech, hdr), 200)
	r := h.post("/v1/speech", sampleSpeech, hdr)
	mustStatus(t, r, 200)
	if r.header.Get(HeaderIdempotentReplayed) != "" {
		t.Fatal("speech claims a replay")
	}
	l := h.srv.Ledger()
	if l.Billed.Speech != 2 || l.ByIdempotencyKey["voice-1"] != 2 || l.ByUnit["job9/scene2"].Speech != 2 {
		t.Fatalf("ledger = %+v, want the same key billed twice", l)
	}
}

func TestSpeechRejectsBadRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	for _, req := range []SpeechRequest{
		{Text: ""},
		{Text: " \n "},
		{Text: "x", SampleRate: 4000},
		{Text: "x", SampleRate: 192000},
		{Text: strings.Repeat("x", MaxSpeechRunes+1)},
		{Text: "x", Voice: strings.Repeat("v", 65)},
	} {
		r := h.post("/v1/speech", req, nil)
		mustStatus(t, r, http.StatusBadRequest)
		if code := r.errorCode(t); code != CodeInvalidRequest {
			t.Errorf("code = %q", code)
		}
	}
	if l := h.srv.Ledger(); l.Billed.Speech != 0 || l.Calls != 6 {
		t.Fatalf("ledger = %+v, want 6 calls and nothing billed", l)
	}
}

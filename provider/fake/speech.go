package fake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Speech limits and the length rule: PerRune of audio per character of text
// (runes, spaces included), at least MinSpeech and at most MaxSpeech.
const (
	SpeechPerRune           = 55 * time.Millisecond
	MinSpeech               = 300 * time.Millisecond
	MaxSpeech               = 60 * time.Second
	MaxSpeechRunes          = 5000
	DefaultSampleRate       = 48000
	MinSampleRate           = 8000
	MaxSampleRate           = 96000
	DefaultVoice            = "default"
	speechAmplitude         = 0.12 // ≈ -18 dBFS: quiet but clearly audible
	speechFade              = 5 * time.Millisecond
	wavHeaderBytes          = 44
	speechBaseHz, speechHzN = 180, 600
)

// SpeechDuration is the length of the audio POST /v1/speech returns for
// text: clamp(55 ms × runes, 300 ms, 60 s).
func SpeechDuration(text string) time.Duration {
	d := time.Duration(utf8.RuneCountInString(text)) * SpeechPerRune
	return min(max(d, MinSpeech), MaxSpeech)
}

// SpeechSamples is the number of samples of that audio at sampleRate.
func SpeechSamples(text string, sampleRate int) int {
	return int(int64(SpeechDuration(text)) * int64(sampleRate) / int64(time.Second))
}

// handleSpeech is POST /v1/speech: synchronous and without idempotency.
// Every committed request is billed, even one that repeats an earlier
// Idempotency-Key: the header is accepted and ignored, as the provider in the
// double-billed voice incident did.
func (s *Server) handleSpeech(w http.ResponseWriter, r *http.Request) {
	s.ledger.call()
	var req SpeechRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := normalizeSpeech(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	p := s.draw(OpSpeech)
	if !s.beforeCommit(r.Context(), w, p) {
		return
	}
	key, unit := r.Header.Get(HeaderIdempotencyKey), r.Header.Get(HeaderUnitID)
	s.ledger.bill(OpSpeech, unit, key)
	s.log.Debug("fake provider: speech billed", "unit", unit, "key", key)
	wav := renderWAV(req)
	if !s.afterCommit(w, p) {
		return
	}
	writeBytes(w, "audio/wav", wav)
}

func normalizeSpeech(req *SpeechRequest) error {
	if strings.TrimSpace(req.Text) == "" {
		return errors.New("text is required")
	}
	if n := utf8.RuneCountInString(req.Text); n > MaxSpeechRunes {
		return fmt.Errorf("text has %d characters, the maximum is %d", n, MaxSpeechRunes)
	}
	if req.SampleRate == 0 {
		req.SampleRate = DefaultSampleRate
	}
	if req.SampleRate < MinSampleRate || req.SampleRate > MaxSampleRate {
		return fmt.Errorf("sample_rate must be in [%d,%d], got %d", MinSampleRate, MaxSampleRate, req.SampleRate)
	}
	if req.Voice == "" {
		req.Voice = DefaultVoice
	}
	if len(req.Voice) > 64 {
		return errors.New("voice name is longer than 64 bytes")
	}
	return nil
}

// renderWAV makes 16-bit mono PCM: one short tone per character of the
// text, its pitch derived from the voice and the character, with fades so
// the steps do not click. Whitespace is a softer tone, never silence, so a
// listener (or a level meter) can tell the file is real.
func renderWAV(req SpeechRequest) []byte {
	rate := req.SampleRate
	n := SpeechSamples(req.Text, rate)
	runes := []rune(req.Text)
	buf := make([]byte, wavHeaderBytes+2*n)
	writeWAVHeader(buf, rate, n)

	seg := max(1, n/len(runes))
	fade := max(1, min(int(int64(speechFade)*int64(rate)/int64(time.Second)), seg/4))
	hz := make([]float64, len(runes))
	for k, c := range runes {
		hz[k] = toneHz(req.Voice, c)
	}
	var phase float64
	for i := range n {
		k := min(i/seg, len(runes)-1)
		pos := i - k*seg
		segLen := seg
		if k == len(runes)-1 {
			segLen = n - k*seg
		}
		c := runes[k]
		amp := speechAmplitude
		if unicode.IsSpace(c) {
			amp /= 4
		}
		env := 1.0
		if pos < fade {
			env = float64(pos) / float64(fade)
		} else if segLen-pos < fade {
			env = float64(segLen-pos) / float64(fade)
		}
		phase += 2 * math.Pi * hz[k] / float64(rate)
		v := amp * env * math.Sin(phase)
		binary.LittleEndian.PutUint16(buf[wavHeaderBytes+2*i:], uint16(int16(math.Round(v*math.MaxInt16))))
	}
	return buf
}

func toneHz(voice string, c rune) float64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(voice)) // hash writes never fail
	_, _ = h.Write(binary.LittleEndian.AppendUint32(nil, uint32(c)))
	return float64(speechBaseHz + h.Sum32()%speechHzN)
}

func writeWAVHeader(b []byte, rate, samples int) {
	le := binary.LittleEndian
	data := uint32(2 * samples)
	copy(b[0:], "RIFF")
	le.PutUint32(b[4:], 36+data)
	copy(b[8:], "WAVE")
	copy(b[12:], "fmt ")
	le.PutUint32(b[16:], 16)             // fmt chunk size
	le.PutUint16(b[20:], 1)              // PCM
	le.PutUint16(b[22:], 1)              // mono
	le.PutUint32(b[24:], uint32(rate))   // sample rate
	le.PutUint32(b[28:], uint32(rate*2)) // byte rate
	le.PutUint16(b[32:], 2)              // block align
	le.PutUint16(b[34:], 16)             // bits per sample
	copy(b[36:], "data")
	le.PutUint32(b[40:], data)
}

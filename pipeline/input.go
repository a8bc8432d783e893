package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// OperationRenderVideo is the one operation edgepipe runs today.
const OperationRenderVideo = "render_video"

// Limits of a storyboard. They keep a single job's cost and render time
// bounded and are part of the API contract (openapi.yaml repeats them).
const (
	MaxTitleLen     = 200
	MinScenes       = 1
	MaxScenes       = 50
	MaxPromptLen    = 1000
	MaxNarrationLen = 2000
	MinSceneMS      = 500
	MaxSceneMS      = 30000
)

// Resolutions lists the accepted output sizes.
var Resolutions = map[string][2]int{"640x360": {640, 360}, "1280x720": {1280, 720}, "1920x1080": {1920, 1080}}

// FrameRates lists the accepted output frame rates (each divides 48 kHz, so
// every clip's audio ends exactly on a frame).
var FrameRates = []int{24, 25, 30}

// Storyboard is what a user submits: scenes with a visual prompt, narration
// and a duration.
type Storyboard struct {
	Title   string  `json:"title"`
	Scenes  []Scene `json:"scenes"`
	Options Options `json:"options"`
}

// Scene is one unit of work: one visual and its narration.
type Scene struct {
	ImagePrompt string `json:"image_prompt,omitempty"`
	VideoPrompt string `json:"video_prompt,omitempty"`
	Narration   string `json:"narration"`
	DurationMS  int    `json:"duration_ms"`
}

// Kind is "image" or "video": which provider makes the scene's visual.
func (s Scene) Kind() string {
	if s.VideoPrompt != "" {
		return "video"
	}
	return "image"
}

// Prompt is the scene's visual prompt, whichever kind.
func (s Scene) Prompt() string {
	if s.VideoPrompt != "" {
		return s.VideoPrompt
	}
	return s.ImagePrompt
}

// Options tune the output.
type Options struct {
	Resolution string `json:"resolution,omitempty"`
	FPS        int    `json:"fps,omitempty"`
}

// Size returns the output width and height.
func (o Options) Size() (int, int) {
	r := Resolutions[o.Resolution]
	return r[0], r[1]
}

// TotalMS is the storyboard's length.
func (sb Storyboard) TotalMS() int {
	t := 0
	for _, s := range sb.Scenes {
		t += s.DurationMS
	}
	return t
}

// FieldError names one invalid field, e.g. "scenes[2].duration_ms".
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in a submission. It matches
// ErrInvalidInput.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid storyboard: " + strings.Join(parts, "; ")
}

func (e *ValidationError) Unwrap() error { return ErrInvalidInput }

func (e *ValidationError) add(field, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// DecodeStoryboard parses a storyboard strictly (unknown fields and
// trailing data are errors), applies defaults and validates it.
func DecodeStoryboard(data []byte) (Storyboard, error) {
	var sb Storyboard
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sb); err != nil {
		return Storyboard{}, &ValidationError{Fields: []FieldError{{Field: "body", Message: JSONProblem(err)}}}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Storyboard{}, &ValidationError{Fields: []FieldError{{Field: "body", Message: "unexpected data after the JSON object"}}}
	}
	return sb.Normalize()
}

// JSONProblem turns a JSON decoding error into a message for the caller,
// without Go type names: where the syntax broke, which field has the wrong
// type (a body of the wrong type "must be a JSON object"), an empty or
// truncated body, an unknown field. The API and DecodeStoryboard both
// answer with it.
func JSONProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return "must be a JSON object"
		}
		return fmt.Sprintf("%s has the wrong type (expected %s)", te.Field, te.Type.Kind())
	case errors.Is(err, io.EOF):
		return "empty body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed JSON"
}

// Normalize applies defaults, trims surrounding white space, and validates.
// The result is the canonical form every fingerprint and key is made from.
func (sb Storyboard) Normalize() (Storyboard, error) {
	ve := &ValidationError{}
	out := Storyboard{Title: strings.TrimSpace(sb.Title), Options: sb.Options}
	if out.Options.Resolution == "" {
		out.Options.Resolution = "1280x720"
	}
	if out.Options.FPS == 0 {
		out.Options.FPS = 25
	}
	checkText(ve, "title", out.Title, MaxTitleLen, false)
	if _, ok := Resolutions[out.Options.Resolution]; !ok {
		ve.add("options.resolution", "must be one of 640x360, 1280x720, 1920x1080")
	}
	okFPS := false
	for _, f := range FrameRates {
		okFPS = okFPS || f == out.Options.FPS
	}
	if !okFPS {
		ve.add("options.fps", "must be one of 24, 25, 30")
	}
	switch n := len(sb.Scenes); {
	case n < MinScenes:
		ve.add("scenes", "needs at least %d scene", MinScenes)
	case n > MaxScenes:
		ve.add("scenes", "has %d scenes; at most %d are allowed", n, MaxScenes)
	}
	for i, s := range sb.Scenes {
		if i >= MaxScenes {
			break
		}
		f := fmt.Sprintf("scenes[%d]", i)
		n := Scene{
			ImagePrompt: strings.TrimSpace(s.ImagePrompt),
			VideoPrompt: strings.TrimSpace(s.VideoPrompt),
			Narration:   strings.TrimSpace(s.Narration),
			DurationMS:  s.DurationMS,
		}
		switch {
		case n.ImagePrompt == "" && n.VideoPrompt == "":
			ve.add(f, "needs an image_prompt or a video_prompt")
		case n.ImagePrompt != "" && n.VideoPrompt != "":
			ve.add(f, "has both image_prompt and video_prompt; give exactly one")
		case n.ImagePrompt != "":
			checkText(ve, f+".image_prompt", n.ImagePrompt, MaxPromptLen, true)
		default:
			checkText(ve, f+".video_prompt", n.VideoPrompt, MaxPromptLen, true)
		}
		checkText(ve, f+".narration", n.Narration, MaxNarrationLen, false)
		if n.DurationMS < MinSceneMS || n.DurationMS > MaxSceneMS {
			ve.add(f+".duration_ms", "must be between %d and %d", MinSceneMS, MaxSceneMS)
		}
		out.Scenes = append(out.Scenes, n)
	}
	if len(ve.Fields) > 0 {
		return Storyboard{}, ve
	}
	return out, nil
}

func checkText(ve *ValidationError, field, s string, max int, required bool) {
	switch {
	case !utf8.ValidString(s):
		ve.add(field, "is not valid UTF-8")
	case required && s == "":
		ve.add(field, "must not be empty")
	case utf8.RuneCountInString(s) > max:
		ve.add(field, "is longer than %d characters", max)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }):
		ve.add(field, "contains control characters")
	}
}

// Canonical is the storyboard's canonical JSON (normalized, fixed field
// order): what is frozen on the job and hashed.
func (sb Storyboard) Canonical() []byte {
	b, err := json.Marshal(sb)
	if err != nil {
		panic(err) // a struct of strings and ints always marshals
	}
	return b
}

// Fingerprint is the SHA-256 of every input that changes the result: the
// operation, the canonical storyboard, and the workflow version if the caller
// pinned one by choosing the instance id. A webhook URL changes nothing in
// the result and is left out.
func Fingerprint(operation string, sb Storyboard, pinnedVersion string) string {
	return FingerprintCanonical(operation, sb.Canonical(), pinnedVersion)
}

// FingerprintCanonical is Fingerprint of a storyboard already in its
// canonical form (Storyboard.Canonical), for a caller that keeps that form
// as well (a submission stores it as the job's input).
func FingerprintCanonical(operation string, canonical []byte, pinnedVersion string) string {
	h := sha256.New()
	var n [20]byte
	for _, part := range [][]byte{[]byte(operation), canonical, []byte(pinnedVersion)} {
		h.Write(append(strconv.AppendInt(n[:0], int64(len(part)), 10), ':'))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

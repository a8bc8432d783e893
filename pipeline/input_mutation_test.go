package pipeline

import (
	"errors"
	"strings"
	"testing"
)

// A decoding error names the field with the wrong type, or "value" when the
// whole body has it, and never a Go type name.
func TestDecodeStoryboardTypeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, want string }{
		{`{"title": 5}`, "title has the wrong type (expected string)"},
		{`{"scenes": {}}`, "scenes has the wrong type"},
		{`[1, 2]`, "value has the wrong type (expected struct)"},
		{`"a storyboard"`, "value has the wrong type"},
	}
	for _, tt := range tests {
		_, err := DecodeStoryboard([]byte(tt.body))
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("DecodeStoryboard(%s) = %v, want a ValidationError", tt.body, err)
		}
		if len(ve.Fields) != 1 || ve.Fields[0].Field != "body" || !strings.Contains(ve.Fields[0].Message, tt.want) {
			t.Errorf("DecodeStoryboard(%s) = %+v, want body: …%s…", tt.body, ve.Fields, tt.want)
		}
		if strings.Contains(err.Error(), "pipeline.") || strings.Contains(err.Error(), "Storyboard") {
			t.Errorf("DecodeStoryboard(%s) error %q shows a Go type name", tt.body, err)
		}
	}
}

// A scene's prompt is its video prompt when it has one, else its image
// prompt, and the unit key depends on it.
func TestScenePromptAndUnitKey(t *testing.T) {
	t.Parallel()
	img := Scene{ImagePrompt: "a red kite", DurationMS: 1000}
	vid := Scene{VideoPrompt: "a kite in the wind", DurationMS: 1000}
	if img.Prompt() != "a red kite" || img.Kind() != "image" {
		t.Errorf("image scene: Prompt %q Kind %q", img.Prompt(), img.Kind())
	}
	if vid.Prompt() != "a kite in the wind" || vid.Kind() != "video" {
		t.Errorf("video scene: Prompt %q Kind %q", vid.Prompt(), vid.Kind())
	}
	o := Options{Resolution: "640x360", FPS: 25}
	other := img
	other.ImagePrompt = "a blue kite"
	if UnitKey("acme", "v1", img, o) == UnitKey("acme", "v1", other, o) {
		t.Error("two image scenes with different prompts share a unit key")
	}
	otherVid := vid
	otherVid.VideoPrompt = "a kite on the ground"
	if UnitKey("acme", "v1", vid, o) == UnitKey("acme", "v1", otherVid, o) {
		t.Error("two video scenes with different prompts share a unit key")
	}
}

// An oversized storyboard is refused with one error for the count and
// errors for at most the first MaxScenes scenes: scenes past the limit are
// not looked at.
func TestNormalizeStopsAtMaxScenes(t *testing.T) {
	t.Parallel()
	scenes := make([]Scene, MaxScenes+3) // all invalid: no prompt
	for i := range scenes {
		scenes[i].DurationMS = MinSceneMS
	}
	_, err := Storyboard{Title: "big", Scenes: scenes}.Normalize()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Normalize = %v, want a ValidationError", err)
	}
	var count, perScene int
	for _, f := range ve.Fields {
		switch {
		case f.Field == "scenes":
			count++
		case strings.HasPrefix(f.Field, "scenes["):
			perScene++
		}
	}
	if count != 1 || perScene != MaxScenes {
		t.Fatalf("%d count errors and %d scene errors, want 1 and %d: %v", count, perScene, MaxScenes, ve.Fields)
	}
}

// A scene lasts MinSceneMS to MaxSceneMS inclusive.
func TestNormalizeSceneDurationBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ms int
		ok bool
	}{
		{MinSceneMS - 1, false}, {MinSceneMS, true}, {MaxSceneMS, true}, {MaxSceneMS + 1, false},
	} {
		_, err := Storyboard{Scenes: []Scene{{ImagePrompt: "a cat", DurationMS: tt.ms}}}.Normalize()
		if tt.ok != (err == nil) {
			t.Errorf("duration %d ms: Normalize = %v, want ok=%v", tt.ms, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "scenes[0].duration_ms") {
			t.Errorf("duration %d ms: error %q does not name the field", tt.ms, err)
		}
	}
}

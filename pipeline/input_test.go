package pipeline

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeStoryboard(t *testing.T) {
	t.Parallel()
	ok := `{"title":" T ","scenes":[{"image_prompt":" a fox ","narration":"hi","duration_ms":1000}]}`
	sb, err := DecodeStoryboard([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if sb.Title != "T" || sb.Scenes[0].ImagePrompt != "a fox" || sb.Options.Resolution != "1280x720" || sb.Options.FPS != 25 {
		t.Fatalf("normalized %+v", sb)
	}
	long := strings.Repeat("x", MaxPromptLen+1)
	many := `{"scenes":[` + strings.Repeat(`{"image_prompt":"a","duration_ms":1000},`, MaxScenes) + `{"image_prompt":"a","duration_ms":1000}]}`
	cases := []struct {
		name, body, field string
	}{
		{"empty", ``, "body"},
		{"not json", `{`, "body"},
		{"unknown field", `{"scenes":[],"extra":1}`, "body"},
		{"trailing", `{"scenes":[{"image_prompt":"a","duration_ms":1000}]} {}`, "body"},
		{"no scenes", `{"scenes":[]}`, "scenes"},
		{"too many scenes", many, "scenes"},
		{"no visual", `{"scenes":[{"narration":"x","duration_ms":1000}]}`, "scenes[0]"},
		{"both visuals", `{"scenes":[{"image_prompt":"a","video_prompt":"b","duration_ms":1000}]}`, "scenes[0]"},
		{"prompt too long", `{"scenes":[{"image_prompt":"` + long + `","duration_ms":1000}]}`, "scenes[0].image_prompt"},
		{"too short", `{"scenes":[{"image_prompt":"a","duration_ms":100}]}`, "scenes[0].duration_ms"},
		{"too long", `{"scenes":[{"image_prompt":"a","duration_ms":30001}]}`, "scenes[0].duration_ms"},
		{"resolution", `{"scenes":[{"image_prompt":"a","duration_ms":1000}],"options":{"resolution":"800x600"}}`, "options.resolution"},
		{"fps", `{"scenes":[{"image_prompt":"a","duration_ms":1000}],"options":{"fps":60}}`, "options.fps"},
		{"control chars", `{"scenes":[{"image_prompt":"a\u0007","duration_ms":1000}]}`, "scenes[0].image_prompt"},
		{"wrong type", `{"scenes":[{"image_prompt":"a","duration_ms":"1000"}]}`, "body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeStoryboard([]byte(c.body))
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			found := false
			for _, f := range ve.Fields {
				found = found || f.Field == c.field
			}
			if !found {
				t.Fatalf("fields %+v, want %s", ve.Fields, c.field)
			}
		})
	}
}

// A decoding error names the field with the wrong type, or says the body
// must be an object when the whole body has the wrong type, and never a Go
// type name.
func TestDecodeStoryboardTypeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, want string }{
		{`{"title": 5}`, "title has the wrong type (expected string)"},
		{`{"scenes": {}}`, "scenes has the wrong type"},
		{`[1, 2]`, "must be a JSON object"},
		{`"a storyboard"`, "must be a JSON object"},
		{`{"title": "a`, "truncated JSON"},
		{``, "empty body"},
		{`{"titel": "x"}`, `unknown field "titel"`},
		{`{"title" 1}`, "malformed JSON at byte"},
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

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, _ := DecodeStoryboard([]byte(`{"scenes":[{"image_prompt":"a","duration_ms":1000}]}`))
	b, _ := DecodeStoryboard([]byte(`{"scenes":[{"image_prompt":" a ","duration_ms":1000}],"options":{"fps":25}}`))
	c, _ := DecodeStoryboard([]byte(`{"scenes":[{"image_prompt":"a","duration_ms":1001}]}`))
	if Fingerprint("render_video", a, "") != Fingerprint("render_video", b, "") {
		t.Fatal("equal requests after normalization fingerprint differently")
	}
	if Fingerprint("render_video", a, "") == Fingerprint("render_video", c, "") {
		t.Fatal("a changed duration keeps the fingerprint")
	}
	if Fingerprint("render_video", a, "") == Fingerprint("render_video", a, "v2-x") {
		t.Fatal("a pinned instance id keeps the fingerprint")
	}
	// Stored jobs keep the fingerprints they were given: the same request
	// must get the same one from every version of this code, or a retried
	// submission after an upgrade would be refused as a different request.
	for _, c := range []struct{ pinned, want string }{
		{"", "996205efad85f11fc43f19ed03cf459a7937fe646b20605f96dc2484cf7d1426"},
		{"v2-x", "69f24c14113033dea5747385dae38efec78b6acfe5c7fef1c646e9b487551d5c"},
	} {
		if got := Fingerprint("render_video", a, c.pinned); got != c.want {
			t.Errorf("fingerprint with pinned %q = %s, stored jobs have %s", c.pinned, got, c.want)
		}
		if got := FingerprintCanonical("render_video", a.Canonical(), c.pinned); got != c.want {
			t.Errorf("FingerprintCanonical with pinned %q = %s, want %s", c.pinned, got, c.want)
		}
	}
}

func FuzzDecodeStoryboard(f *testing.F) {
	f.Add([]byte(`{"title":"t","scenes":[{"image_prompt":"a","narration":"n","duration_ms":1000}]}`))
	f.Add([]byte(`{"scenes":[{"video_prompt":"v","duration_ms":500}],"options":{"resolution":"640x360","fps":30}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sb, err := DecodeStoryboard(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("error not classified as invalid input: %v", err)
			}
			return
		}
		// Accepted storyboards are canonical: decoding the canonical form
		// gives the same canonical form.
		again, err := DecodeStoryboard(sb.Canonical())
		if err != nil || string(again.Canonical()) != string(sb.Canonical()) {
			t.Fatalf("canonical form not stable: %v", err)
		}
	})
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

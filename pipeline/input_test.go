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

package workersai

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
)

// FuzzAnswerDecoding feeds untrusted answer bytes to the error-body parser
// and the image conversion: neither may panic, and an accepted image is
// always a PNG.
func FuzzAnswerDecoding(f *testing.F) {
	f.Add([]byte(`{"result":null,"success":false,"errors":[{"code":7003,"message":"Could not route"}],"messages":[]}`))
	f.Add([]byte(`{"errors":[{"code":"x"}]}`))
	f.Add([]byte{0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 'J', 'F', 'I', 'F'})
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseError(b)
		out, err := toPNG(b)
		if err != nil {
			return
		}
		if bytes.HasPrefix(b, []byte("\x89PNG")) {
			return // passed through as is
		}
		if _, err := png.DecodeConfig(bytes.NewReader(out)); err != nil {
			t.Fatalf("converted image is not a PNG: %v", err)
		}
	})
}

func TestToPNGRefusesHugeImages(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 16, 8)), nil); err != nil {
		t.Fatal(err)
	}
	j := b.Bytes()
	i := bytes.Index(j, []byte{0xff, 0xc0})
	if i < 0 {
		t.Fatal("no SOF0 marker")
	}
	if _, err := toPNG(j); err != nil {
		t.Fatalf("small image refused: %v", err)
	}
	// SOF0: marker, length (2), precision (1), height (2), width (2).
	j[i+5], j[i+6] = 0x23, 0x28 // height 9000
	if _, err := toPNG(j); err == nil || !strings.Contains(err.Error(), "more than 8192") {
		t.Fatalf("err = %v, want the size bound", err)
	}
}

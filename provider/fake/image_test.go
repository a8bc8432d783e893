package fake

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("response is not a PNG: %v", err)
	}
	return img
}

func sameRGB(a color.Color, b color.RGBA) bool {
	r, g, bl, _ := a.RGBA()
	return uint8(r>>8) == b.R && uint8(g>>8) == b.G && uint8(bl>>8) == b.B
}

func TestImageReturnsPNGShowingThePrompt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	tests := []struct {
		name string
		req  ImageRequest
	}{
		{"small", ImageRequest{Prompt: "tiny", Width: 16, Height: 16}},
		{"landscape", sampleImage},
		{"scaled up", ImageRequest{Prompt: "a lighthouse on a cliff at night, storm clouds", Width: 1024, Height: 576, Model: "m2"}},
		{"long prompt wraps and truncates", ImageRequest{Prompt: strings.Repeat("word ", 400), Width: 128, Height: 64}},
		{"non-ascii", ImageRequest{Prompt: "바다 위의 등대", Width: 64, Height: 32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := h.post("/v1/images", tt.req, nil)
			mustStatus(t, r, http.StatusOK)
			if ct := r.header.Get("Content-Type"); ct != "image/png" {
				t.Errorf("Content-Type = %q", ct)
			}
			img := decodePNG(t, r.body)
			if b := img.Bounds(); b.Dx() != tt.req.Width || b.Dy() != tt.req.Height {
				t.Fatalf("size = %dx%d, want %dx%d", b.Dx(), b.Dy(), tt.req.Width, tt.req.Height)
			}
			bg := promptColor(tt.req.Prompt)
			if !sameRGB(img.At(0, 0), bg) {
				t.Errorf("corner pixel %v is not the prompt colour %v", img.At(0, 0), bg)
			}
			if tt.req.Width < 32 {
				return // too small for a glyph
			}
			text := 0
			for y := range tt.req.Height {
				for x := range tt.req.Width {
					if !sameRGB(img.At(x, y), bg) {
						text++
					}
				}
			}
			if text == 0 {
				t.Fatal("no text was drawn")
			}
		})
	}
}

func TestImageColourFollowsPrompt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	a := h.post("/v1/images", ImageRequest{Prompt: "alpha", Width: 64, Height: 64}, nil)
	b := h.post("/v1/images", ImageRequest{Prompt: "beta", Width: 64, Height: 64}, nil)
	mustStatus(t, a, 200)
	mustStatus(t, b, 200)
	if bytes.Equal(a.body, b.body) {
		t.Fatal("different prompts gave the same image")
	}
	if !sameRGB(decodePNG(t, b.body).At(0, 0), promptColor("beta")) {
		t.Fatal("background is not derived from the prompt")
	}
}

func TestImageIdempotencyKeyDedupes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	hdr := map[string]string{HeaderIdempotencyKey: "k-1", HeaderUnitID: "job1/scene1"}

	first := h.post("/v1/images", sampleImage, hdr)
	mustStatus(t, first, 200)
	if first.header.Get(HeaderIdempotentReplayed) != "" {
		t.Fatal("first request marked as replayed")
	}
	second := h.post("/v1/images", sampleImage, hdr)
	mustStatus(t, second, 200)
	if !bytes.Equal(first.body, second.body) {
		t.Fatal("replay returned different bytes")
	}
	if second.header.Get(HeaderIdempotentReplayed) != "true" {
		t.Fatal("replay not marked Idempotent-Replayed: true")
	}
	// A body that differs only by an explicit default is the same request.
	withDefault := sampleImage
	withDefault.Model = DefaultImageModel
	mustStatus(t, h.post("/v1/images", withDefault, hdr), 200)

	other := sampleImage
	other.Prompt = "something else"
	r := h.post("/v1/images", other, hdr)
	mustStatus(t, r, http.StatusUnprocessableEntity)
	if code := r.errorCode(t); code != CodeIdempotencyMismatch {
		t.Fatalf("code = %q", code)
	}

	l := h.srv.Ledger()
	if l.Billed.Image != 1 || l.ByIdempotencyKey["k-1"] != 1 || l.ByUnit["job1/scene1"].Image != 1 || l.Replayed != 2 {
		t.Fatalf("ledger after 4 requests with one key = %+v, want 1 billed, 2 replayed", l)
	}

	// Without a key every request is a new, billed call.
	mustStatus(t, h.post("/v1/images", sampleImage, nil), 200)
	mustStatus(t, h.post("/v1/images", sampleImage, nil), 200)
	if got := h.srv.Ledger().Billed.Image; got != 3 {
		t.Fatalf("billed images = %d, want 3", got)
	}
}

func TestImageIdempotencyConcurrentSameKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	const n = 8
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := h.post("/v1/images", sampleImage, map[string]string{HeaderIdempotencyKey: "same"})
			if r.err != nil || r.status != 200 {
				t.Errorf("request %d: %d %v", i, r.status, r.err)
			}
			bodies[i] = r.body
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !bytes.Equal(bodies[0], bodies[i]) {
			t.Fatalf("request %d got different bytes", i)
		}
	}
	if l := h.srv.Ledger(); l.Billed.Image != 1 || l.Replayed != n-1 {
		t.Fatalf("ledger = %+v, want 1 billed and %d replays", l, n-1)
	}
}

// The property the client's "idempotent-verified" contract rests on: after a
// failure that happened after the commit, a retry with the same key returns
// the result without paying again.
func TestImageRetryAfterCommitFaultIsNotBilledAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"after_commit", "drop"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{Faults: mustParseFaults(t, "image:"+kind+"=1")})
			hdr := map[string]string{HeaderIdempotencyKey: "retry-me"}
			first := h.post("/v1/images", sampleImage, hdr)
			if first.err == nil && first.status == 200 {
				t.Fatal("fault not injected")
			}
			if err := h.srv.SetFaults(Faults{}); err != nil {
				t.Fatal(err)
			}
			retry := h.post("/v1/images", sampleImage, hdr)
			mustStatus(t, retry, 200)
			decodePNG(t, retry.body)
			if l := h.srv.Ledger(); l.Billed.Image != 1 || l.ByIdempotencyKey["retry-me"] != 1 {
				t.Fatalf("ledger = %+v, want exactly one billed image", l)
			}
		})
	}
}

func TestImageRejectsBadRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	tests := []struct {
		name   string
		body   string
		ctype  string
		status int
		code   string
	}{
		{"not json", `{`, "application/json", 400, CodeInvalidRequest},
		{"unknown field", `{"prompt":"x","width":64,"height":64,"size":"big"}`, "application/json", 400, CodeInvalidRequest},
		{"trailing data", `{"prompt":"x","width":64,"height":64} {}`, "application/json", 400, CodeInvalidRequest},
		{"empty prompt", `{"prompt":"  ","width":64,"height":64}`, "", 400, CodeInvalidRequest},
		{"too small", `{"prompt":"x","width":8,"height":64}`, "application/json", 400, CodeInvalidRequest},
		{"too large", `{"prompt":"x","width":64,"height":4096}`, "application/json", 400, CodeInvalidRequest},
		{"wrong content type", `prompt=x`, "application/x-www-form-urlencoded", 415, CodeUnsupportedMedia},
		{"body over 1 MiB", `{"prompt":"` + strings.Repeat("a", 1<<20) + `"}`, "application/json", 413, CodeRequestTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(http.MethodPost, h.base+"/v1/images", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			r := result{status: resp.StatusCode, body: buf.Bytes()}
			mustStatus(t, r, tt.status)
			if code := r.errorCode(t); code != tt.code {
				t.Fatalf("code = %q, want %q", code, tt.code)
			}
		})
	}
	if l := h.srv.Ledger(); l.Billed.Image != 0 {
		t.Fatalf("rejected requests were billed: %+v", l)
	}
}

func TestWrap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		cols int
		want []string
	}{
		{"a bb ccc", 4, []string{"a bb", "ccc"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"  spaced \n out  ", 10, []string{"spaced out"}},
		{"xy abcdefgh z", 3, []string{"xy", "abc", "def", "gh", "z"}},
		{"xy abcdefgh z", 4, []string{"xy", "abcd", "efgh", "z"}},
	}
	for _, tt := range tests {
		got := wrap(tt.text, tt.cols)
		if !slices.Equal(got, tt.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tt.text, tt.cols, got, tt.want)
		}
	}
}

// BenchmarkRenderPNG draws the picture bench render asks for (1280x720).
// The fake runs in the bench's process, so its CPU competes with ffmpeg.
func BenchmarkRenderPNG(b *testing.B) {
	req := ImageRequest{Prompt: "a lighthouse at dusk, plate 3 of board 7", Width: 1280, Height: 720}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := renderPNG(req); err != nil {
			b.Fatal(err)
		}
	}
}

// scaleUp makes every pixel (x, y) the source's (x/scale, y/scale), at
// sizes that are and are not multiples of the scale (the last block is
// cropped), the straightforward nearest neighbour it replaces.
func TestScaleUpMatchesNearestNeighbour(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ w, h, scale int }{
		{16, 16, 1}, {17, 33, 1}, {1280, 720, 2}, {1281, 721, 2}, {1001, 999, 3}, {2047, 2041, 8}, {31, 19, 5}, {7, 3, 8},
	} {
		cw, ch := (tc.w+tc.scale-1)/tc.scale, (tc.h+tc.scale-1)/tc.scale
		src := image.NewPaletted(image.Rect(0, 0, cw, ch), color.Palette{color.Black, color.White, color.Gray{128}})
		for i := range src.Pix {
			src.Pix[i] = uint8((i*7 + i/cw) % 3) // differs between neighbours, across rows and columns
		}
		dst := scaleUp(src, tc.w, tc.h, tc.scale)
		if b := dst.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
			t.Fatalf("%+v: size %v", tc, b)
		}
		bad := 0
		for y := range tc.h {
			for x := range tc.w {
				if got, want := dst.ColorIndexAt(x, y), src.ColorIndexAt(x/tc.scale, y/tc.scale); got != want {
					if bad++; bad <= 3 {
						t.Errorf("%+v: pixel (%d,%d) = %d, want %d", tc, x, y, got, want)
					}
				}
			}
		}
	}
}

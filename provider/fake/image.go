package fake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Image limits.
const (
	MinImageSide      = 16
	MaxImageSide      = 2048
	MaxPromptRunes    = 4000
	DefaultImageModel = "fake-image-1"
)

// handleImage is POST /v1/images: synchronous, and the one operation that
// really honours Idempotency-Key. The first committed request with a key
// stores its PNG; a later request with the same key and the same body gets
// the same bytes (Idempotent-Replayed: true) and is not billed; the same key
// with a different body is refused with 422. A request with a key that is
// still being handled waits for it.
func (s *Server) handleImage(w http.ResponseWriter, r *http.Request) {
	s.ledger.call()
	var req ImageRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := normalizeImage(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	p := s.draw(OpImage)
	if !s.beforeCommit(r.Context(), w, p) {
		return
	}
	key, unit := r.Header.Get(HeaderIdempotencyKey), r.Header.Get(HeaderUnitID)

	var entry *idemEntry
	if key != "" {
		e, replay, err := s.idem.acquire(r.Context(), key, fingerprint(req))
		switch {
		case errors.Is(err, errIdemMismatch):
			writeError(w, http.StatusUnprocessableEntity, CodeIdempotencyMismatch,
				"Idempotency-Key was already used with a different request body")
			return
		case err != nil: // the client went away while an earlier request with its key ran
			return
		case replay:
			s.ledger.replay()
			s.log.Debug("fake provider: image replayed", "key", key, "unit", unit)
			if !s.afterCommit(w, p) {
				return
			}
			w.Header().Set(HeaderIdempotentReplayed, "true")
			writeBytes(w, "image/png", e.body)
			return
		}
		entry = e
		// Release the key if this request ends before it committed, so a
		// retry can run; complete() makes this a no-op.
		defer s.idem.abandon(key, entry)
	}

	img, err := renderPNG(req)
	if err != nil {
		s.log.Error("fake provider: image render failed", "err", err)
		writeError(w, http.StatusInternalServerError, CodeServerError, "image rendering failed")
		return
	}
	// Commit: from here on the call is paid for, whatever the client sees.
	s.ledger.bill(OpImage, unit, key)
	if entry != nil {
		s.idem.complete(key, entry, img)
	}
	s.log.Debug("fake provider: image billed", "unit", unit, "key", key, "bytes", len(img))
	if !s.afterCommit(w, p) {
		return
	}
	writeBytes(w, "image/png", img)
}

func normalizeImage(req *ImageRequest) error {
	if strings.TrimSpace(req.Prompt) == "" {
		return errors.New("prompt is required")
	}
	if n := utf8.RuneCountInString(req.Prompt); n > MaxPromptRunes {
		return fmt.Errorf("prompt has %d characters, the maximum is %d", n, MaxPromptRunes)
	}
	if req.Width < MinImageSide || req.Width > MaxImageSide || req.Height < MinImageSide || req.Height > MaxImageSide {
		return fmt.Errorf("width and height must be in [%d,%d], got %dx%d", MinImageSide, MaxImageSide, req.Width, req.Height)
	}
	if req.Model == "" {
		req.Model = DefaultImageModel
	}
	return nil
}

// fingerprint identifies a request body by meaning (after defaults), so
// {"model":""} and a missing model are the same request.
func fingerprint(v any) [32]byte {
	b, _ := json.Marshal(v) // our own plain struct: cannot fail
	return sha256.Sum256(b)
}

var errIdemMismatch = errors.New("idempotency key reused with a different body")

type idemEntry struct {
	fp        [32]byte
	done      chan struct{} // closed when the owner completed or abandoned
	completed bool
	body      []byte
}

// idemStore remembers the result of every committed image request that
// carried an Idempotency-Key, for the life of the server.
type idemStore struct {
	mu sync.Mutex
	m  map[string]*idemEntry
}

func newIdemStore() *idemStore { return &idemStore{m: map[string]*idemEntry{}} }

// acquire returns the completed entry of key (replay), or makes the caller
// the owner of a new entry. While another request owns key, it waits.
func (st *idemStore) acquire(ctx context.Context, key string, fp [32]byte) (*idemEntry, bool, error) {
	for {
		st.mu.Lock()
		e, ok := st.m[key]
		if !ok {
			e = &idemEntry{fp: fp, done: make(chan struct{})}
			st.m[key] = e
			st.mu.Unlock()
			return e, false, nil
		}
		if e.fp != fp {
			st.mu.Unlock()
			return nil, false, errIdemMismatch
		}
		if e.completed {
			st.mu.Unlock()
			return e, true, nil
		}
		done := e.done
		st.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

func (st *idemStore) complete(key string, e *idemEntry, body []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e.body = body
	e.completed = true
	close(e.done)
}

func (st *idemStore) abandon(key string, e *idemEntry) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e.completed {
		return
	}
	if st.m[key] == e {
		delete(st.m, key)
	}
	close(e.done)
}

// promptColor derives a stable background colour from the prompt.
func promptColor(prompt string) color.RGBA {
	sum := sha256.Sum256([]byte(prompt))
	return color.RGBA{sum[0], sum[1], sum[2], 255}
}

// renderPNG draws the prompt, word-wrapped, in the 7×13 bitmap font on the
// prompt's colour. Large images draw on a smaller canvas and scale it up by
// nearest neighbour, so the text stays readable at any size. Runes outside
// ASCII show as the font's replacement glyph. The picture has two colours,
// so it is a paletted image and an 8-bit paletted PNG: the fake runs inside
// bench render's process, and an RGBA canvas scaled and encoded at
// 1280×720 cost about 11 ms of CPU per image that ffmpeg then lacked
// (BenchmarkRenderPNG).
func renderPNG(req ImageRequest) ([]byte, error) {
	bg := promptColor(req.Prompt)
	fg := color.RGBA{255, 255, 255, 255}
	if 299*int(bg.R)+587*int(bg.G)+114*int(bg.B) > 140_000 {
		fg = color.RGBA{0, 0, 0, 255}
	}
	scale := min(max(1, min(req.Width, req.Height)/256), 8)
	cw, ch := (req.Width+scale-1)/scale, (req.Height+scale-1)/scale
	// Two colours, padded to 17 entries: Go's PNG encoder copies an 8-bit
	// paletted row as it is, but packs 1-, 2- and 4-bit rows pixel by pixel
	// (ColorIndexAt), which cost more than deflating the bytes.
	palette := color.Palette{bg, fg}
	for len(palette) < 17 {
		palette = append(palette, bg)
	}
	canvas := image.NewPaletted(image.Rect(0, 0, cw, ch), palette) // all index 0: the background

	face := basicfont.Face7x13
	const margin = 4
	cols := (cw - 2*margin) / face.Advance
	rows := (ch - 2*margin) / face.Height
	if cols > 0 && rows > 0 {
		lines := wrap(req.Prompt, cols)
		if len(lines) > rows {
			lines = lines[:rows]
			last := []rune(lines[rows-1])
			if len(last) > cols-3 {
				last = last[:max(0, cols-3)]
			}
			lines[rows-1] = string(last) + "..."
		}
		d := font.Drawer{Dst: canvas, Src: image.NewUniform(fg), Face: face}
		for i, line := range lines {
			d.Dot = fixed.P(margin, margin+face.Ascent+i*face.Height)
			d.DrawString(line)
		}
	}

	out := canvas
	if scale > 1 {
		out = scaleUp(canvas, req.Width, req.Height, scale)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, out); err != nil {
		return nil, fmt.Errorf("fake: encode png: %w", err)
	}
	return buf.Bytes(), nil
}

// scaleUp enlarges src by nearest neighbour to w×h, each source pixel
// becoming a scale×scale block (cropped at the right and bottom edges).
func scaleUp(src *image.Paletted, w, h, scale int) *image.Paletted {
	dst := image.NewPaletted(image.Rect(0, 0, w, h), src.Palette)
	for y := range h {
		row := dst.Pix[y*dst.Stride : y*dst.Stride+w]
		if y%scale != 0 {
			copy(row, dst.Pix[(y-1)*dst.Stride:]) // the row above, already scaled
			continue
		}
		srow := src.Pix[(y/scale)*src.Stride:]
		for x := 0; x < w; x += scale {
			c := srow[x/scale]
			for i := x; i < min(x+scale, w); i++ {
				row[i] = c
			}
		}
	}
	return dst
}

// wrap breaks text into lines of at most cols runes, at spaces where it
// can and inside over-long words where it must.
func wrap(text string, cols int) []string {
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(text) {
		wr := []rune(word)
		for len(wr) > cols {
			if len(cur) > 0 {
				lines = append(lines, string(cur))
				cur = nil
			}
			lines = append(lines, string(wr[:cols]))
			wr = wr[cols:]
		}
		switch {
		case len(wr) == 0:
		case len(cur) == 0:
			cur = wr
		case len(cur)+1+len(wr) <= cols:
			cur = append(append(cur, ' '), wr...)
		default:
			lines = append(lines, string(cur))
			cur = wr
		}
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

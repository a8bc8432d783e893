package api

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkSubmit is the submission path in process (no network): what one
// durable 202 costs the server, with a unique key per request.
func BenchmarkSubmit(b *testing.B) {
	e := newEnv(b)
	var n atomic.Int64
	b.SetParallelism(32) // many requests waiting for the writer, as under load
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hr := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(validBody))
			hr.Header.Set("Authorization", "Bearer "+tokAcme)
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(n.Add(1), 10))
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, hr)
			if w.Code != http.StatusAccepted {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	})
}

// BenchmarkBare is BareHandler under the same harness.
func BenchmarkBare(b *testing.B) {
	h := BareHandler()
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hr := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(validBody))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, hr)
			if w.Code != http.StatusAccepted {
				b.Fatal(w.Code)
			}
		}
	})
}

// BenchmarkDecodeSubmission is the strict decode and validation of the
// body bench api posts (api/testdata/wrk-submit.lua).
func BenchmarkDecodeSubmission(b *testing.B) {
	body := []byte(`{"operation":"render_video","title":"bench","scenes":[{"image_prompt":"a lighthouse at dusk","narration":"every night the keeper climbed the stairs","duration_ms":2000},{"video_prompt":"waves against rocks","narration":"and the sea answered","duration_ms":1500}],"options":{"resolution":"640x360","fps":25}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeSubmission(body); err != nil {
			b.Fatal(err)
		}
	}
}
